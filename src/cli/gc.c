/* gc.c: what `check` says about the cache (the ROIs and chunks cached, stale and to compute)
 * and `roifs clean --unused CONFIG`, which removes what no current key refers to. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../arrays/otable.h"
#include "../arrays/overlay.h"
#include "../arrays/pyramid.h"
#include "../engine/gc.h"
#include "cli.h"

void cli_format_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

static void format_time(uint32_t t, char *buf, size_t len)
{
    time_t tt = (time_t)t;
    struct tm tm;
    if (!t || !gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, len, "?");
}

/* Opens the cache of array t of the job t0 (t0 itself, or a pyramid level of it, which does
 * not register) with the error printed: 0, EXIT_USAGE or EXIT_RUNTIME. */
static int open_cache(const struct task *t0, const struct task *t, struct cache **c)
{
    struct errbuf err = {{0}};
    cache_set_lease((unsigned)t->cfg.cache_lease);
    int r = cache_open(t->cache_dir, t == t0 ? t0->cfg.path : NULL, task_version(t0), c, &err);
    if (r < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (t->reader)
        cache_keep_input_hashes(*c, t->reader);
    return 0;
}

void cli_print_census(const struct task *t, struct cache *c)
{
    struct gc_census cs;
    gc_census(t, c, &cs);
    uint64_t present = task_chunks_present(t);
    printf(" (cached: %llu of %llu chunks, %zu of %zu ROI results)\n",
           (unsigned long long)cs.chunks_current, (unsigned long long)present, cs.rois_cached,
           t->rois.n);
    char from[32], until[32], bytes[32], unused[32], stale[32];
    printf("ROIs:      %zu cached (a mount or warm reuses them), %zu to compute", cs.rois_cached,
           cs.rois_to_compute);
    if (cs.rois_cached && cs.made_min) {
        format_time(cs.made_min, from, sizeof from);
        format_time(cs.made_max, until, sizeof until);
        printf("; made %s to %s", from, until);
    }
    printf("\n");
    cli_format_bytes(cs.results_bytes, bytes, sizeof bytes);
    cli_format_bytes(cs.results_unused_bytes, unused, sizeof unused);
    printf("results:   %s stored; %zu stale (no current ROI's, %s)%s\n", bytes, cs.results_unused,
           unused, cs.results_unused ? ": `roifs clean --unused` removes them" : "");
    cli_format_bytes(cs.chunks_stale_bytes, stale, sizeof stale);
    printf("chunks:    %llu cached, %llu stale (%s), %llu to compute\n",
           (unsigned long long)cs.chunks_current, (unsigned long long)cs.chunks_stale, stale,
           (unsigned long long)cs.chunks_to_compute);
}

/* Collects the cache of array t of the job t0 (c: t0's, open) into sum. */
static int clean_array(const struct task *t0, const struct task *t, struct cache *c,
                       struct gc_report *sum)
{
    struct errbuf err = {{0}};
    struct cache *lc = c;
    if (t != t0) {
        struct stat st;
        if (stat(t->cache_dir, &st) < 0)
            return 0; /* that level was never made */
        if (open_cache(t0, t, &lc))
            return EXIT_RUNTIME;
    }
    struct keyset *live = keyset_new(t->rois.n);
    gc_current_results(t, NULL, live);
    struct gc_report rep;
    int r = gc_collect(t, lc, live, true, &rep, &err);
    keyset_free(live);
    if (lc != c)
        cache_close(lc);
    if (r < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_RUNTIME;
    }
    sum->results_kept += rep.results_kept;
    sum->results_removed += rep.results_removed;
    sum->results_bytes_before += rep.results_bytes_before;
    sum->results_bytes_after += rep.results_bytes_after;
    sum->chunks_removed += rep.chunks_removed;
    sum->chunks_busy += rep.chunks_busy;
    sum->chunk_bytes_removed += rep.chunk_bytes_removed;
    sum->leftovers_removed += rep.leftovers_removed;
    return 0;
}

/* Every array of the job t: t, with [output] ome its pyramid's levels, and with ome = labels
 * the label image's other levels (each has a cache of its own, under t's). */
static int clean_arrays(struct task *t, struct cache *c, struct gc_report *sum)
{
    struct pyramid *p = NULL;
    struct overlay *ov = NULL;
    struct errbuf err = {{0}};
    /* overwrite: after export --into, the image has a label of that name; its levels are
     * still this configuration's */
    if ((t->cfg.ome && t->cfg.levels > 1 && pyramid_build(t, &p, &err) < 0) ||
        (t->cfg.ome_labels && overlay_build(t, true, &ov, &err) < 0)) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_USAGE;
    }
    size_t n = p ? (size_t)pyramid_nlevels(p) : ov ? overlay_narrays(ov) : 1;
    int r = 0;
    for (size_t l = 0; l < n && r == 0; l++) {
        struct task *lt = t;
        if (p)
            lt = pyramid_level(p, (int)l);
        else if (ov)
            lt = overlay_array_task(ov, l);
        r = clean_array(t, lt, c, sum);
    }
    if (r == 0 && ov) {
        int e = otable_clean_records(ov, &sum->tables_removed);
        if (e < 0) {
            fprintf(stderr, "roifs: %s: the masking table's records: %s\n", t->cache_dir,
                    strerror(-e));
            r = EXIT_RUNTIME;
        }
    }
    pyramid_free(p);
    overlay_free(ov);
    return r;
}

/* clean --unused of one task's cache (a plate's image's, or the configuration's). */
static int clean_unused_task(struct task *t)
{
    struct stat st;
    if (stat(t->cache_dir, &st) < 0) {
        printf("nothing to clean: no cache at %s\n", t->cache_dir);
        return 0;
    }
    int r;
    if ((r = cli_refuse_unfinished_apply(t)))
        return r;
    struct cache *c = NULL;
    if ((r = open_cache(t, t, &c)))
        return r;
    struct gc_report sum = {0};
    r = clean_arrays(t, c, &sum);
    cache_close(c);
    if (r == 0) {
        char freed[32], kept[32], chunks[32];
        cli_format_bytes(sum.results_bytes_before - sum.results_bytes_after, freed, sizeof freed);
        cli_format_bytes(sum.results_bytes_after, kept, sizeof kept);
        cli_format_bytes(sum.chunk_bytes_removed, chunks, sizeof chunks);
        printf("cleaned %s\n", t->cache_dir);
        printf("results: %zu removed (%s), %zu kept (%s)\n", sum.results_removed, freed,
               sum.results_kept, kept);
        printf("chunks:  %zu stale files removed (%s)", sum.chunks_removed, chunks);
        if (sum.chunks_busy)
            printf(", %zu being made by another process left", sum.chunks_busy);
        if (sum.leftovers_removed)
            printf(", %zu files of writers that died removed", sum.leftovers_removed);
        printf("\n");
        if (t->cfg.ome_labels)
            printf("tables:  %zu records of earlier label images removed\n", sum.tables_removed);
    }
    return r;
}

int cli_clean_unused(const char *config)
{
    struct task *t;
    int r = cli_load_task_flags(config, TASK_NO_PROC, &t);
    if (r)
        return r;
    log_open_stderr(false);
    r = t->plate ? cli_each_plate_image(t, clean_unused_task) : clean_unused_task(t);
    task_close(t);
    return r;
}
