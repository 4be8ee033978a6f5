/* engine.h: demand-driven computation of the chunks of one array (a task and its cache). It
 * knows nothing of other arrays: a mount of several (pyramid levels) has one engine each.
 * Opening a chunk checks its cached file against the key of what it is made of (its ROIs'
 * result keys: processor, box, input as it is now); when it is not current, the ROIs that
 * touch it (and, behind them, those of the chunks that follow: readahead) whose result with
 * the current key is neither done nor stored are queued on a pool of compute threads; each
 * ROI key is computed at most once (single-flight in the process, locks and the result store
 * between processes), the chunk is assembled in ROI list order, encoded, written to the
 * cache, and every waiter is called back with an fd of the file written. Callers never block
 * on computation: the callback runs on a compute thread. The engine stops the task's
 * processor when it is destroyed: a task serves one engine in its life. */
#ifndef ROIFS_ENGINE_H
#define ROIFS_ENGINE_H

#include <jansson.h>
#include <stdint.h>

#include "../key.h"
#include "../task.h"
#include "../cache/cache.h"

struct engine;

/* How a chunk came to be served (flags of engine_chunk_cb). */
#define ENGINE_COMPUTED 1 /* computed for this open: nothing of it can be in a page cache */
#define ENGINE_REPLACED 2 /* a cached version made from older input was thrown away */

/* Called once per engine_open_chunk: err 0 with a read-only fd of the cached chunk (the
 * callee owns it), or a negative errno (-EIO when a ROI or the input failed). */
typedef void (*engine_chunk_cb)(void *ctx, int err, int fd, int flags);

/* readahead = auto: following chunks enough to hold this much of the compute threads' work,
 * as the time of the ROIs computed so far says, at least one per thread and at most
 * ENGINE_AUTO_AHEAD_MAX (ahead.c). Cheap ROIs in many small chunks get a deep read-ahead, so
 * that the threads do not run dry between two opens of a reader; expensive ones (a FOV each)
 * get one chunk per thread, as with the default. */
#define ENGINE_READAHEAD_AUTO (-2)
#define ENGINE_AUTO_AHEAD_NS  4000000 /* 4 ms */
#define ENGINE_AUTO_AHEAD_MAX 16

struct turns;

/* How an engine works: given by its creator (the configuration's [process] and [cache] keys,
 * or the command line's -j), never read from the task by the engine. */
struct engine_opts {
    int threads;       /* compute threads (at least 1) */
    int readahead;     /* an open also queues the ROIs of this many following chunks; 0: off;
                        * ENGINE_READAHEAD_AUTO: as many as hold ENGINE_AUTO_AHEAD_NS of work */
    int retries;       /* extra attempts of a failed ROI within one computation */
    uint64_t max_size; /* bytes the chunk files may take ([cache] max_size); 0: unlimited */

    /* seconds after its failure before a ROI is tried again on demand; within them an open
     * that needs it gets EIO at once (0: the next open that began after the failure) */
    double retry_after;

    /* NULL, or the turns this engine's threads take one of before each ROI (or batch) they
     * run, shared with other engines (turns.h: a plate's images); turn_client its number */
    struct turns *turns;
    size_t turn_client;

    /* NULL, or called on the compute thread that made chunk id and wrote it to the cache (not
     * when a reader is served a cached file), before its waiters are answered: its key and its
     * encoded bytes while they are in memory. [measure] makes the chunk's partial then
     * (otable.h: otable_chunk_made), so that the feature table reads no label chunk again. */
    void (*chunk_made)(void *ctx, uint64_t id, struct key128 key, const void *data, size_t len);
    void *chunk_made_ctx;
};

/* Starts o->threads compute threads after looking at what the cache holds (the chunk files,
 * the stored results). The engine borrows t and c and copies o. Fails (-errno, message in
 * err) when the cache cannot be listed or a thread cannot start. */
int engine_create(struct task *t, struct cache *c, const struct engine_opts *o, struct engine **out,
                  struct errbuf *err);
/* Stops the processor, fails every waiter with -EIO and joins the threads (every finished
 * result is in the cache's result store already). */
void engine_destroy(struct engine *e);

/* Asks for chunk `id` (which must be present: task_chunk_present). cb may run before this
 * returns (chunk already cached) or later on a compute thread. */
void engine_open_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx);
/* Withdraws the open of chunk id that was asked with cb and ctx and is not answered yet (its
 * reader went away): true when it still waited, and cb will not be called; false when its
 * answer is given or on its way (cb is or will be called). A chunk nobody waits for any more
 * is demanded no longer: when none of the ROIs it waits for has started, it is not made, and
 * those ROIs that no other chunk being made needs are not computed. */
bool engine_withdraw_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx);
/* Size of chunk id as a reader may see it: *known false when it is not computed yet and its
 * encoded size is not fixed in advance. *made_ns (when not NULL): when its cached file was
 * written, 0 when it has none (not computed, or made from input that changed since). Never
 * computes. */
void engine_chunk_size(struct engine *e, uint64_t id, uint64_t *size, bool *known,
                       int64_t *made_ns);

/* ---- progress (progress.c): what warm, export and the status file show ---- */

/* A consistent snapshot of the engine's counters (taken under its lock). */
struct engine_progress {
    size_t rois_total, rois_pending, rois_running, rois_done, rois_failed;
    uint64_t chunks_total, chunks_present, chunks_cached;
    unsigned long calls;         /* processor invocations by this process */
    size_t rois_computed;        /* ROIs computed by this process (not taken from the cache) */
    size_t results_reused;       /* ROIs taken from the result store instead of computed */
    size_t results_at_start;     /* of them, those whose result was stored at the start */
    uint32_t made_min, made_max; /* when those were made, seconds since the epoch (0: none) */
    size_t queue_demand, queue_readahead; /* ROIs queued for readers, and ahead of them */
    size_t chunk_jobs;                    /* chunks being made */
    size_t chunks_elsewhere;              /* of those, the ones another process holds the lock of */
    bool cache_limited; /* [cache] max_size: the cache_ and results_evicted ones are counted */
    uint64_t cache_bytes, cache_max_size, cache_evicted;
    uint64_t cache_chunk_bytes, cache_result_bytes; /* cache_bytes: chunk files and results */
    size_t results_evicted;                         /* unused results compacted away for max_size */
    uint64_t results_stored, results_damaged;       /* records in the result store */
    double uptime;                                  /* seconds since the engine started */
    int64_t started_at;                             /* when it started, seconds since the epoch */
};
void engine_progress(struct engine *e, struct engine_progress *p);

/* The engine's part of the status document of docs/mounted-tree.md, Status file ("rois", "chunks",
 * "calls", "errors", "queue", "uptime", "results", and "cache" with max_size), from one
 * engine_progress snapshot and the recent errors. A new reference. */
json_t *engine_status(struct engine *e);

/* Calls fn, outside the engine's lock, for each ROI whose last attempt failed, in index
 * order, with the most recent message recorded for it (NULL when it is no longer among the
 * recent errors). Returns the number of failed ROIs. */
size_t engine_failed_rois(struct engine *e, void (*fn)(void *ctx, size_t roi, const char *msg),
                          void *ctx);

/* True when a ROI that touches chunk id has failed: opening the chunk would try it again. */
bool engine_chunk_has_failed_roi(struct engine *e, uint64_t id);

/* What a status picture shows of chunk id (engine_chunk_state): nothing made yet, being
 * made (a job of it exists), made and current in the cache, or a ROI of it failed. */
enum engine_chunk_look {
    ENGINE_CHUNK_IDLE,
    ENGINE_CHUNK_BUSY,
    ENGINE_CHUNK_DONE,
    ENGINE_CHUNK_FAILED
};
enum engine_chunk_look engine_chunk_state(struct engine *e, uint64_t id);

/* The task and the cache an engine serves. */
const struct task *engine_task(const struct engine *e);
struct cache *engine_cache(struct engine *e);

/* ---- keys (keys.c): what results and chunks are made of; no engine needed ---- */

/* The keys a chunk is made of: one per ROI touching it (index order), and the chunk's. */
struct chunk_keys {
    size_t n;
    struct key128 *rois;
    struct key128 chunk;
};
/* The key of ROI r's result made from input whose signature (of its read region) is sig. */
struct key128 engine_roi_key(const struct task *t, uint32_t r, uint64_t sig);
/* The input signature of ROI r's read region as the input is now (memo may be NULL). */
uint64_t engine_roi_sig_now(const struct task *t, uint32_t r, struct zarr_sigmemo *memo);
/* The box of masked ROI r that its selection covers: its read region when the processor's
 * input is masked (mask_input = zero), else its box. */
void engine_mask_region(const struct task *t, uint32_t r, uint64_t *start, uint64_t *shape);
/* The key of chunk id made of ROI results named rois[0..n) (index order) and, with outside
 * = input, of the input whose signature over the chunk box is outside_sig. */
struct key128 engine_chunk_key_of(const struct task *t, uint64_t id, const struct key128 *rois,
                                  size_t n, uint64_t outside_sig);
/* The keys of chunk id as the input is now (memo may be NULL). Free with chunk_keys_free. */
void engine_chunk_keys_now(const struct task *t, uint64_t id, struct zarr_sigmemo *memo,
                           struct chunk_keys *out);
void chunk_keys_free(struct chunk_keys *k);
/* The key of the stitching id mapping (stitch = iou) as the input is now: every ROI's result
 * key and the threshold (memo may be NULL). */
struct key128 engine_stitch_map_key(const struct task *t, struct zarr_sigmemo *memo);
/* The box [c0, c1) of output chunk id (edge chunks clipped to the array) and its extent. */
void engine_chunk_box(const struct task *t, uint64_t id, uint64_t *c0, uint64_t *c1, uint64_t *ext);

/* ---- input changes (changes.c): [input] watch ---- */

/* Forgets what depends on the boxes [lo, hi) of the engine's input (n of them, ndim
 * coordinates each, in the input's coordinates; with all: on any part of it): the results of
 * the ROIs whose read region touches one no longer count as done, the chunks they make (and
 * with outside = input the boxes' own) as cached, and the size of such a chunk that depends on
 * the encoding is unknown until its next open makes it again. Returns how many chunks of the
 * tree it forgot, their ids (sorted) in *chunks (malloc'd): what readers of this array may
 * hold stale. */
size_t engine_input_changed(struct engine *e, const uint64_t *lo, const uint64_t *hi, size_t n,
                            bool all, uint64_t **chunks);
/* The input's metadata changed: every chunk open fails with EIO from now on, with reason in
 * the status ("input_error") and the log. */
void engine_input_broken(struct engine *e, const char *reason);
/* The reason given to engine_input_broken (malloc'd), or NULL. */
char *engine_input_error(struct engine *e);

/* Seconds since this process started (the status document's "uptime"). */
double engine_uptime(struct engine *e);

#endif
