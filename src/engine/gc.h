/* gc.h: what a cache directory holds for a task, and its garbage collection: the ROI results
 * and chunk files that no current key refers to (roifs check, roifs clean --unused, and
 * [cache] max_size, which evicts them first). "Current" is the task's keys with the input as
 * it is now. One array at a time (a task and its cache: each pyramid level has its own). */
#ifndef ROIFS_GC_H
#define ROIFS_GC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"
#include "../cache/cache.h"

/* Adds the key of every ROI result of t, with the input as it is now (memo may be NULL). */
void gc_current_results(const struct task *t, struct zarr_sigmemo *memo, struct keyset *ks);

/* What the cache holds for t. */
struct gc_census {
    size_t rois_cached, rois_to_compute; /* ROIs whose current result is stored, or not */
    uint32_t made_min, made_max;         /* when the cached ones were made (0: unknown) */
    size_t results_unused;               /* stored results no current key names */
    uint64_t results_bytes, results_unused_bytes;
    uint64_t chunks_current, chunks_stale, chunks_to_compute; /* of the chunks present */
    uint64_t chunk_bytes, chunks_stale_bytes;
};
/* Counts without changing anything (chunk files are judged by their record, not read). */
void gc_census(const struct task *t, struct cache *c, struct gc_census *cs);

struct gc_report {
    size_t results_kept, results_removed;
    uint64_t results_bytes_before, results_bytes_after;
    size_t chunks_removed, chunks_busy; /* busy: being made by another process, left */
    uint64_t chunk_bytes_removed;
    size_t leftovers_removed; /* temporary files of writers that died, orphaned sidecars */
    size_t tables_removed;    /* ome = labels: masking table records not current */
};
/* Removes the results live does not name (store_compact) and, with chunks, the chunk files
 * not current for t (each under its chunk's lock, so that none being written is touched).
 * -EBUSY with the reason in err when a live process serves another version of the
 * configuration from this directory (what it needs would look unused); else 0 or -errno. */
int gc_collect(const struct task *t, struct cache *c, struct keyset *live, bool chunks,
               struct gc_report *rep, struct errbuf *err);

#endif
