/* export.c: `roifs export [-j N] CONFIG DEST` and `roifs export [-j N] --into IMAGE
 * [--overwrite] CONFIG` (IMAGE a plate of a plate input: export_into_plate): the arguments, the run
 * of the chunks and the messages; what is written, and how an interrupted export resumes, is
 * src/export/. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../export/export.h"
#include "../export/into.h"
#include "../plate/plate.h"
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
                             .table = t->cfg.table_name,
                             .mask = t->cfg.mask_table_name};
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
        fprintf(stderr, "roifs: export: %s: labels/%s%s%s%s%s%s written\n", in.image, in.label,
                in.table_only ? " (the image's own, kept)" : "", in.table ? " and tables/" : "",
                in.table ? in.table : "", in.mask ? ", tables/" : "", in.mask ? in.mask : "");
    export_close(&x);
    export_into_end(&in, r != 0);
    arrayset_close(s);
    return r;
}

/* export --into PLATE of a plate (docs/plates.md): every selected image's additions staged
 * (its label image's chunks run image after image), then the tables (each image's, with
 * [measure] and [output] table_name its masking table too, then the plate's), then, only when
 * all of them are complete, renamed into place, the plate's table last. A failure leaves no
 * image with any of them. [measure] labels = NAME: each image's labels/NAME is its own, so
 * PLATE must be the input plate itself and only the tables are written (docs/measurements.md). */
static int export_into_plate(struct task *t, const struct cli_args *o)
{
    const struct plate *p = t->plate;
    if (t->cfg.ome) {
        fprintf(stderr, "roifs: %s: export --into a plate needs [output] ome = labels\n",
                t->cfg.path);
        return EXIT_USAGE;
    }
    struct errbuf err = {{0}};
    bool own = t->cfg.measure_labels != NULL; /* every image's label image is its own */
    if (own && export_into_check_own(o->into, t, &err) < 0)
        return failed(-EINVAL, &err);
    size_t n = p->n + 1; /* the images, then the plate (its table) */
    struct export_into *in = xcalloc(n, sizeof *in);
    struct export *xs = xcalloc(p->n, sizeof *xs);
    struct arrayset *s = NULL;
    struct arrayset_opts ao = {.threads = o->threads, .overlay_overwrite = o->overwrite};
    int r = 0;
    for (size_t k = 0; k < n; k++) {
        bool plate = k == p->n;
        in[k] = (struct export_into){
            .image = plate ? xstrdup(o->into) : path_join(o->into, p->images[k].path_in_plate),
            .overwrite = o->overwrite,
            .label = t->cfg.label_name,
            .table = t->cfg.table_name,
            .mask = plate ? NULL : t->cfg.mask_table_name, /* the plate has one table */
            .table_only = plate || own};
        if (k < p->n)
            export_init(&xs[k], NULL, run_message);
        if (r == 0 && !(plate && !in[k].table))
            r = export_into_check_image(&in[k], p->format, plate, &err);
    }
    if (r == 0 && (r = arrayset_open(t, &ao, &s, &err)) < 0)
        s = NULL;
    for (size_t k = 0; r == 0 && k < n; k++)
        if (!(k == p->n && !in[k].table))
            r = export_into_begin_at(&in[k], s, k < p->n ? p->images[k].path_in_plate : "",
                                     k < p->n ? &xs[k] : NULL, &err);
    r = r < 0 ? failed(r, &err) : 0;
    for (size_t k = 0; r == 0 && k < p->n && !own; k++) {
        fprintf(stderr, "roifs: export: %s\n", in[k].image);
        if ((r = run_export(&xs[k], s)) == 0 && (r = export_write_metadata(&xs[k], &err)) < 0)
            r = failed(r, &err);
    }
    if (r == 0 && t->cfg.table_name) {
        if ((r = arrayset_start(s, &err)) == 0) {
            for (size_t k = 0; r == 0 && k < n; k++)
                r = export_into_stage_table(&in[k], s, k < p->n ? p->images[k].path_in_plate : "",
                                            &err);
            arrayset_stop(s);
        }
        r = r < 0 ? failed(r, &err) : 0;
    }
    for (size_t k = 0; r == 0 && k < n; k++) /* everything is complete: into place */
        if (!(k == p->n && !in[k].table) && (r = export_into_place(&in[k], &err)) < 0)
            r = failed(r, &err);
    if (r == 0)
        fprintf(stderr, "roifs: export: %s: labels/%s%s%s%s%s%s of %zu images%s%s written\n",
                o->into, t->cfg.label_name, own ? " (the images' own, kept)" : "",
                in[0].table ? " and tables/" : "", in[0].table ? in[0].table : "",
                in[0].mask ? ", tables/" : "", in[0].mask ? in[0].mask : "", p->n,
                in[0].table ? ", the plate's tables/" : "", in[0].table ? in[0].table : "");
    for (size_t k = 0; k < n; k++) {
        if (k < p->n)
            export_close(&xs[k]);
        export_into_end(&in[k], r != 0);
        free((char *)in[k].image);
    }
    arrayset_close(s);
    free(xs);
    free(in);
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
    if (o.into && t->plate)
        r = export_into_plate(t, &o);
    else
        r = o.into ? export_into(t, &o) : export_dest(t, o.operands[1], o.threads);
    task_close(t);
    return r;
}
