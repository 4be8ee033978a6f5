/* export.c: `roifs export [-j N] CONFIG DEST` and `roifs export [-j N] --into IMAGE
 * [--overwrite] CONFIG`: the arguments, the run of the chunks and the messages; what is
 * written, and how an interrupted export resumes, is src/export/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../export/export.h"
#include "../export/into.h"
#include "cli.h"

/* The exit status of a module's failure (printed). */
static int failed(int r, const struct errbuf *err)
{
    fprintf(stderr, "roifs: %s\n", err->msg[0] ? err->msg : strerror(-r));
    return r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
}

/* The chunks x lists, through the engines of s, each written as it is ready. */
static int run_export(struct export *x, struct arrayset *s)
{
    struct run_spec spec = {.verb = "export",
                            .ids = x->ids,
                            .arrays = x->arrays,
                            .n = x->n,
                            .chunk_ready = export_chunk_ready,
                            .ctx = x};
    return run_chunks(s, &spec);
}

static int export_into(struct task *t, const struct cli_args *o)
{
    struct export_into in = {.image = o->into,
                             .overwrite = o->overwrite,
                             .label = t->cfg.label_name,
                             .table = t->cfg.table_name};
    struct errbuf err = {{0}};
    struct export x;
    export_init(&x, NULL, run_message);
    struct arrayset *s = NULL;
    struct arrayset_opts ao = {.threads = o->threads, .overlay_overwrite = o->overwrite};
    int r = export_into_check(&in, t, &err);
    if (r == 0 && (r = arrayset_open(t, &ao, &s, &err)) < 0)
        s = NULL;
    if (r == 0)
        r = export_into_begin(&in, s, &x, &err);
    r = r < 0 ? failed(r, &err) : in.table_only ? 0 : run_export(&x, s);
    if (r == 0 && (r = export_into_finish(&in, s, &x, &err)) < 0)
        r = failed(r, &err);
    if (r == 0)
        fprintf(stderr, "roifs: export: %s: labels/%s%s%s%s written\n", in.image, in.label,
                in.table_only ? " (the image's own, kept)" : "", in.table ? " and tables/" : "",
                in.table ? in.table : "");
    export_close(&x);
    export_into_end(&in, r != 0);
    arrayset_close(s);
    return r;
}

static int export_dest(struct task *t, const char *dest, int threads)
{
    if (t->cfg.ome_labels) { /* the input's files are not copied: DEST would be partial */
        fprintf(stderr, "roifs: %s: ome = labels: export with --into IMAGE\n", t->cfg.path);
        return EXIT_USAGE;
    }
    struct errbuf err = {{0}};
    struct export x;
    export_init(&x, dest, run_message);
    struct arrayset *s = NULL;
    int lock = -1, r = export_open_dest(&x, t, &lock, &err);
    if (r < 0)
        r = failed(r, &err);
    if (r == 0)
        r = cli_open_arrays(t, threads, false, &s);
    if (r == 0 && (r = export_list_set(&x, s, &err)) < 0)
        r = failed(-EIO, &err);
    if (r == 0)
        r = run_export(&x, s);
    if (r == 0 && (r = export_write_metadata(&x, &err)) < 0)
        r = failed(-EIO, &err);
    if (r == 0)
        fprintf(stderr,
                "roifs: export: %s: %zu chunk files written, %zu kept from an earlier run\n",
                x.dest, (size_t)x.written, (size_t)x.kept);
    arrayset_close(s);
    export_close(&x);
    if (lock >= 0)
        close(lock);
    return r;
}

int cmd_export(int argc, char **argv)
{
    struct cli_args o;
    int r =
        cli_parse_args(argc, argv, "export", CLI_JOBS | CLI_INTO | CLI_OVERWRITE | CLI_WELLS, &o);
    if (r)
        return r;
    if (o.into || o.overwrite) {
        if (!o.into || o.noperands != 1)
            return cli_usage_error("export --into needs IMAGE and CONFIG");
    } else if (o.noperands != 2) {
        return cli_usage_error("export needs CONFIG and DEST");
    }
    struct task *t;
    if ((r = cli_load_task(o.operands[0], &t)))
        return r;
    if ((r = cli_narrow_wells(t, o.wells))) {
        task_close(t);
        return r;
    }
    log_open_stderr(false);
    if (o.into && (r = cli_refuse_plate(t, "export --into"))) {
        task_close(t);
        return r;
    }
    r = o.into ? export_into(t, &o) : export_dest(t, o.operands[1], o.threads);
    task_close(t);
    return r;
}
