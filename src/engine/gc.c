/* gc.c: the census of a cache directory for a task and its garbage collection (gc.h): ROI
 * results are judged by the keys of the task's ROIs with the input as it is now, chunk files
 * by their record against the chunk's key now. */
#include "gc.h"
#include "labels.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../cache/cache.h"
#include "engine.h"

void gc_current_results(const struct task *t, struct zarr_sigmemo *memo, struct keyset *ks)
{
    struct zarr_sigmemo *own = memo ? NULL : zarr_sigmemo_new();
    for (size_t r = 0; r < t->rois.n; r++) {
        struct key128 k =
            engine_roi_key(t, (uint32_t)r, engine_roi_sig_now(t, (uint32_t)r, memo ? memo : own));
        keyset_add(ks, k);
        engine_labels_live(t, k, ks); /* [labels]: its count and strip records */
    }
    engine_labels_live_mapping(t, memo ? memo : own, ks);
    zarr_sigmemo_free(own);
}

/* ---- chunk files ---- */

enum chunk_verdict { CV_CURRENT, CV_STALE, CV_GONE };

/* Judges chunk file id by its record against the chunk's key as the input is now; *size gets
 * its size. */
static enum chunk_verdict judge_chunk(const struct task *t, struct cache *c, uint64_t id,
                                      struct zarr_sigmemo *memo, uint64_t *size)
{
    int fd;
    *size = 0;
    if (cache_chunk_open_plain(c, id, &fd) < 0)
        return CV_GONE;
    struct stat st;
    if (fstat(fd, &st) == 0)
        *size = (uint64_t)st.st_size;
    enum chunk_verdict v = CV_STALE;
    struct cache_chunk_meta m;
    if (task_chunk_present(t, id) && cache_chunk_meta_of(c, id, fd, &m) == 0 && m.length == *size) {
        struct chunk_keys k;
        engine_chunk_keys_now(t, id, memo, &k);
        if (key_eq(m.key, k.chunk))
            v = CV_CURRENT;
        chunk_keys_free(&k);
    }
    close(fd);
    return v;
}

struct census_walk {
    const struct task *t;
    struct cache *c;
    struct zarr_sigmemo *memo;
    struct gc_census *cs;
    struct gc_report *rep; /* collecting: remove what is stale */
};

static void census_chunk(void *ctx, uint64_t id)
{
    struct census_walk *w = ctx;
    uint64_t size;
    enum chunk_verdict v = judge_chunk(w->t, w->c, id, w->memo, &size);
    if (v == CV_GONE)
        return;
    if (w->cs) {
        w->cs->chunk_bytes += size;
        if (v == CV_CURRENT)
            w->cs->chunks_current++;
        else
            w->cs->chunks_stale++, w->cs->chunks_stale_bytes += size;
        return;
    }
    if (v == CV_CURRENT)
        return;
    /* Under the chunk's lock, and judged again: a writer holds it until its file is in place,
     * so what is removed is never a current file written meanwhile. */
    int lock = cache_lock_chunk(w->c, id, false);
    if (lock == -EWOULDBLOCK) {
        w->rep->chunks_busy++;
        return;
    }
    if (judge_chunk(w->t, w->c, id, w->memo, &size) == CV_STALE) {
        cache_chunk_remove(w->c, id);
        w->rep->chunks_removed++;
        w->rep->chunk_bytes_removed += size;
    }
    cache_unlock(w->c, lock);
}

/* ---- the census ---- */

struct result_walk {
    struct keyset *current;
    struct gc_census *cs;
};

static void census_result(void *ctx, struct key128 k, const struct store_info *info)
{
    struct result_walk *w = ctx;
    w->cs->results_bytes += info->stored_len;
    if (keyset_has(w->current, k)) {
        if (info->made && (!w->cs->made_min || info->made < w->cs->made_min))
            w->cs->made_min = info->made;
        if (info->made > w->cs->made_max)
            w->cs->made_max = info->made;
        return;
    }
    w->cs->results_unused++;
    w->cs->results_unused_bytes += info->stored_len;
}

void gc_census(const struct task *t, struct cache *c, struct gc_census *cs)
{
    memset(cs, 0, sizeof *cs);
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    struct store *st = cache_store(c);
    struct keyset *current = keyset_new(t->rois.n);
    for (size_t r = 0; r < t->rois.n; r++) {
        struct key128 k = engine_roi_key(t, (uint32_t)r, engine_roi_sig_now(t, (uint32_t)r, memo));
        keyset_add(current, k);
        engine_labels_live(t, k, current);
        if (store_has(st, k))
            cs->rois_cached++;
        else
            cs->rois_to_compute++;
    }
    engine_labels_live_mapping(t, memo, current);
    struct result_walk rw = {current, cs};
    store_each(st, census_result, &rw);
    struct census_walk w = {.t = t, .c = c, .memo = memo, .cs = cs};
    cache_chunk_each(c, census_chunk, &w); /* the files there are, not the whole grid */
    uint64_t present = task_chunks_present(t);
    cs->chunks_to_compute = present > cs->chunks_current ? present - cs->chunks_current : 0;
    keyset_free(current);
    zarr_sigmemo_free(memo);
}

/* ---- collecting ---- */

int gc_collect(const struct task *t, struct cache *c, struct keyset *live, bool chunks,
               struct gc_report *rep, struct errbuf *err)
{
    memset(rep, 0, sizeof *rep);
    char who[4200];
    int r = cache_other_version(c, who, sizeof who);
    if (r > 0)
        return err_set(err, -EBUSY,
                       "%s: in use by %s, which serves another version of this configuration "
                       "(edited since it started): what it needs would look unused",
                       cache_path(c), who);
    struct store_compaction sc;
    r = store_compact(cache_store(c), keyset_live, live, &sc, err);
    struct store_stats ss;
    store_get_stats(cache_store(c), &ss);
    rep->results_kept = ss.results;
    rep->results_removed = sc.removed;
    rep->results_bytes_before = sc.bytes_before;
    rep->results_bytes_after = sc.bytes_after;
    if (r < 0 || !chunks)
        return r;
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    struct census_walk w = {.t = t, .c = c, .memo = memo, .rep = rep};
    cache_chunk_each(c, census_chunk, &w);
    zarr_sigmemo_free(memo);
    rep->leftovers_removed = cache_chunk_remove_leftovers(c);
    return 0;
}
