/* check.c: `roifs check CONFIG`: validates the configuration against its input and ROI list
 * and prints what it resolves to, and how much of its cache is current. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../arrays/overlay.h"
#include "../mask.h"
#include "../plate/plate.h"
#include "cli.h"

static void print_dims(const char *label, const uint64_t *v, int n)
{
    printf("%s[", label);
    for (int d = 0; d < n; d++)
        printf("%s%llu", d ? ", " : "", (unsigned long long)v[d]);
    printf("]");
}

static const char *codec_name(const struct zarr_codec *c)
{
    static const char *const names[] = {"none", "blosc", "zlib", "gzip", "zstd"};
    return names[c->id];
}

/* How much of t's cache is current: chunk files and ROI results made from the input and
 * configuration as they are now. Creates nothing in a directory that is not a cache.
 * Returns 0, or EXIT_USAGE when roifs may not use the directory (printed). */
static int print_cache_state(const struct task *t)
{
    struct stat st;
    printf("cache:     %s", t->cache_dir);
    if (stat(t->cache_dir, &st) < 0) {
        printf(" (empty)\n");
        return 0;
    }
    struct errbuf err = {{0}};
    const char *layout = cli_cache_layout(t->cache_dir);
    int r = cache_check_trusted(t->cache_dir, &err);
    if (r == 0 && layout && strcmp(layout, "older cache") == 0) {
        printf(" (made by an older roifs; it will be emptied at the next mount)\n");
        return 0;
    }
    struct cache *c;
    if (r == 0)
        cache_set_lease((unsigned)t->cfg.cache_lease);
    r = cache_open(t->cache_dir, t->cfg.path, task_version(t), &c, &err);
    if (r < 0) {
        printf(" (not usable)\n");
        fflush(stdout);
        fprintf(stderr, "roifs: %s\n", err.msg);
        return r == -EINVAL ? EXIT_USAGE : 0;
    }
    if (t->reader) /* the census looks at the input as a mount does */
        cache_keep_input_hashes(c, t->reader);
    cli_print_census(t, c);
    cache_close(c);
    return 0;
}

/* One image of a plate: opened as a mount opens it (its task and overlay), "" or why not
 * (malloc'd). */
static char *check_image(const struct task *pt, const struct plate_image *im, size_t *nrois)
{
    if (im->error)
        return xstrdup(im->error);
    struct task *t;
    struct errbuf err = {{0}};
    if (task_open_image(pt->cfg.path, im, TASK_NO_PROC, &t, &err) < 0)
        return xstrdup(err.msg);
    struct overlay *ov; /* ome = true: a new image, no overlay (docs/plates.md) */
    bool bad = t->cfg.ome_labels && overlay_build(t, false, &ov, &err) < 0;
    char *why = xstrdup(bad ? err.msg : "");
    if (t->cfg.ome_labels && !bad)
        overlay_free(ov);
    *nrois = t->rois.n;
    task_close(t);
    return why;
}

/* `check` of a plate (docs/plates.md): every selected image, each opened as a mount would;
 * exit status 2 when any fails. */
static int check_plate(const struct task *t)
{
    const struct plate *p = t->plate;
    printf("config:    %s\n", t->cfg.path);
    printf("plate:     %s (NGFF %s, %zu images in %zu wells selected)\n", p->dir, p->version, p->n,
           p->nwells);
    size_t failed = 0;
    for (size_t i = 0; i < p->n; i++) {
        size_t nrois = 0;
        char *why = check_image(t, &p->images[i], &nrois);
        if (*why) {
            failed++;
            printf("image:     %s failed: %s\n", p->images[i].path_in_plate, why);
        } else {
            printf("image:     %s (%zu ROIs)\n", p->images[i].path_in_plate, nrois);
        }
        free(why);
    }
    if (!failed)
        return 0;
    fflush(stdout);
    fprintf(stderr, "roifs: %s: %zu of %zu images of the plate fail\n", t->cfg.path, failed, p->n);
    return EXIT_USAGE;
}

int cmd_check(int argc, char **argv)
{
    struct cli_args o;
    int r = cli_parse_args(argc, argv, "check", 0, &o);
    if (r)
        return r;
    if (o.noperands != 1)
        return cli_usage_error("check needs exactly one CONFIG");
    struct task *t;
    r = cli_load_task(o.operands[0], &t);
    if (r)
        return r;
    if (t->plate) {
        r = check_plate(t);
        task_close(t);
        return r;
    }
    if (t->cfg.ome_labels) { /* what the mount would refuse */
        struct overlay *ov;
        struct errbuf err = {{0}};
        if (overlay_build(t, false, &ov, &err) < 0) {
            fprintf(stderr, "roifs: %s\n", err.msg);
            task_close(t);
            return EXIT_USAGE;
        }
        overlay_free(ov);
    }
    char dt[8];
    printf("config:    %s\n", t->cfg.path);
    if (t->ome.is_group)
        printf("input:     %s (level %d: %s) ", t->cfg.input_path, t->ome.level, t->ome.array_path);
    else
        printf("input:     %s ", t->cfg.input_path);
    print_dims("shape ", t->in_meta->shape, t->in_meta->ndim);
    print_dims(" chunks ", t->in_meta->chunks, t->in_meta->ndim);
    printf(" dtype %s compressor %s\n", dtype_typestr(&t->in_meta->dtype, dt),
           codec_name(&t->in_meta->compressor));
    printf("output:    ");
    print_dims("shape ", t->out.shape, t->out.ndim);
    print_dims(" chunks ", t->out.chunks, t->out.ndim);
    printf(" dtype %s compressor %s format %d\n", dtype_typestr(&t->out.dtype, dt),
           codec_name(&t->out.compressor), t->out.format);
    printf("rois:      %zu\n", t->rois.n);
    if (t->mask) {
        size_t masked = 0;
        for (size_t r = 0; r < t->rois.n; r++)
            masked += roi_label(&t->rois, r) != 0;
        printf("mask:      %s ", mask_array_path(t->mask));
        print_dims("shape ", mask_shape(t->mask), t->out.ndim);
        printf(" (%zu masked ROIs, mask_input %s)\n", masked,
               t->cfg.mask_input == MASK_INPUT_KEEP ? "keep" : "zero");
    }
    printf("chunks:    %zu of %llu touched by ROIs (%zu ROI-chunk contacts)\n",
           roi_index_nchunks(t->index), (unsigned long long)t->nchunks,
           roi_index_ncontacts(t->index));
    char ahead[24];
    if (t->cfg.readahead == READAHEAD_AUTO)
        snprintf(ahead, sizeof ahead, "auto");
    else
        snprintf(ahead, sizeof ahead, "%d", t->cfg.readahead);
    printf("processor: %s %s, %d threads%s, readahead %s\n", proc_kind_name(t->cfg.proc_kind),
           t->cfg.proc_value, t->cfg.threads,
           config_line(&t->cfg, "process", "threads") ? "" : " (the default: one per CPU)", ahead);
    if (t->cfg.retry_after >= 0)
        printf("failures:  retries %d, retry_after %g s\n", t->cfg.retries, t->cfg.retry_after);
    else
        printf("failures:  retries %d, retry_after unset (0 s for mount, warm and export; 10 s "
               "for serve)\n",
               t->cfg.retries);
    r = print_cache_state(t);
    task_close(t);
    return r;
}
