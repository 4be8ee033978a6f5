/* apply.c: `roifs apply [-j N] [--again] CONFIG`: the arguments, the run of the chunks through
 * the engine, the progress and the messages; the application itself (refusals, journal, plan,
 * replacing input files) is src/apply/. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../apply/apply.h"
#include "cli.h"

/* The exit status of a failure of src/apply/ (printed). */
static int failed(int r, const struct errbuf *err)
{
    if (r == 0)
        return 0;
    fprintf(stderr, "roifs: %s\n", err->msg[0] ? err->msg : strerror(-r));
    return r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
}

static void describe(void *ctx, char *buf, size_t len)
{
    uint64_t rep, total, scratch;
    apply_progress(ctx, &rep, &total, &scratch);
    char sb[32];
    cli_format_bytes(scratch, sb, sizeof sb);
    snprintf(buf, len, ", %llu/%llu replaced, scratch %s", (unsigned long long)rep,
             (unsigned long long)total, sb);
}

static int finish(struct apply *a)
{
    struct errbuf err = {{0}};
    int r = apply_finish(a, &err);
    if (r < 0)
        return failed(r, &err);
    char pk[32], arr[32];
    cli_format_bytes(a->peak, pk, sizeof pk);
    cli_format_bytes(a->array_bytes, arr, sizeof arr);
    run_message("roifs: apply: %s now holds the result: %llu chunk files replaced; peak scratch "
                "%llu bytes (%s, %.1f%% of the array's %s)",
                a->input_path, (unsigned long long)a->plan.nwritten, (unsigned long long)a->peak,
                pk, a->array_bytes ? 100.0 * (double)a->peak / (double)a->array_bytes : 0.0, arr);
    const struct task *t = a->t;
    if (t->ome.found && t->ome.group_path)
        run_message("roifs: apply: note: %s is level %d of the OME-Zarr image %s; its other "
                    "levels were not rewritten and are stale now",
                    t->ome.array_path, t->ome.level, t->ome.group_path);
    return 0;
}

/* Everything after the checks: the journal, the plan, the run. */
static int apply_run(struct apply *a, struct arrayset *set, bool again)
{
    struct errbuf err = {{0}};
    bool done;
    int r = apply_begin(a, arrayset_array(set, 0)->cache, again, &done, &err);
    if (r < 0 || done)
        return failed(r, &err);
    if (a->plan.norder == 0)
        return finish(a);
    struct run_spec spec = {.verb = "apply",
                            .ids = a->plan.order,
                            .n = a->plan.norder,
                            .chunk_ready = apply_chunk_ready,
                            .ctx = a,
                            .describe = describe};
    r = run_chunks(set, &spec);
    if (r == 0 && a->plan.nreplaced == a->plan.nwritten)
        return finish(a);
    run_message("roifs: apply: %llu of %llu chunk files replaced; run the same command again "
                "to finish",
                (unsigned long long)a->plan.nreplaced, (unsigned long long)a->plan.nwritten);
    return r ? r : EXIT_RUNTIME;
}

int cmd_apply(int argc, char **argv)
{
    struct cli_args o;
    int r = cli_parse_args(argc, argv, "apply", CLI_JOBS | CLI_AGAIN, &o);
    if (r)
        return r;
    if (o.noperands != 1)
        return cli_usage_error("apply needs exactly one CONFIG");
    const char *config = o.operands[0];
    struct task *t;
    if ((r = cli_load_task(config, &t)))
        return r;
    if ((r = cli_refuse_plate(t, "apply"))) {
        task_close(t);
        return r;
    }
    if (o.threads > 0)
        t->cfg.threads = o.threads; /* readahead stays off (apply_check) */
    log_open_stderr(false);
    struct apply a;
    apply_init(&a, config, t, run_message);
    struct arrayset *set = NULL;
    struct errbuf err = {{0}};
    r = failed(apply_check(&a, &err), &err);
    if (r == 0 && (r = cli_open_arrays(a.t, 0, false, &set)) == 0)
        r = apply_run(&a, set, o.again);
    arrayset_close(set); /* and its cache */
    apply_free(&a);      /* the input's lock last */
    return r;
}
