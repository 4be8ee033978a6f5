/* progress.c: read-only views of the engine's state for the command line: counter snapshots,
 * the failed ROIs with their messages, and the time since the engine started. */
#include "engine_internal.h"
#include "progress.h"
#include "stale.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../cache/cache.h"

void engine_progress(struct engine *e, struct engine_progress *p)
{
    const struct task *t = e->f.t;
    memset(p, 0, sizeof *p);
    struct store_stats ss;
    store_get_stats(cache_store(e->f.c), &ss);
    p->results_stored = ss.results;
    p->results_damaged = ss.damaged;
    p->rois_total = t->rois.n;
    p->chunks_total = t->nchunks;
    p->chunks_present = task_chunks_present(t);
    p->calls = t->proc->calls; /* atomic: counted outside the engine's lock */
    pthread_mutex_lock(&e->lock);
    p->rois_done = e->s.n_done;
    p->rois_failed = e->s.n_failed;
    p->rois_running = e->s.n_running;
    p->rois_pending = p->rois_total - e->s.n_running - e->s.n_done - e->s.n_failed;
    p->chunks_cached = e->s.n_cached;
    p->rois_computed = e->s.n_computed;
    p->results_reused = e->s.n_reused;
    p->results_at_start = e->s.n_at_start;
    p->made_min = e->s.made_min;
    p->made_max = e->s.made_max;
    p->started_at = e->f.started_at;
    p->queue_demand = e->s.demand.len;
    p->queue_readahead = e->s.ahead.len;
    p->chunk_jobs = map_count(&e->s.jobs);
    p->chunks_elsewhere = e->s.n_locked_elsewhere;
    p->cache_limited = e->s.evict != NULL;
    if (e->s.evict) {
        evict_stats(e->s.evict, &p->cache_bytes, &p->cache_max_size, &p->cache_evicted);
        p->cache_chunk_bytes = evict_chunk_bytes(e->s.evict);
        p->cache_result_bytes = p->cache_bytes - p->cache_chunk_bytes;
        p->results_evicted = e->s.results_evicted;
    }
    pthread_mutex_unlock(&e->lock);
    p->uptime = engine_uptime(e);
}

/* The most recent message recorded for roi (lock held), or NULL. */
static const char *latest_error(const struct engine *e, size_t roi)
{
    for (size_t i = e->s.nerrors; i-- > 0;) {
        const struct engine_error *er = &e->s.errors[(e->s.err_head + i) % ENGINE_MAX_ERRORS];
        if (er->roi == roi)
            return er->message;
    }
    return NULL;
}

size_t engine_failed_rois(struct engine *e, void (*fn)(void *ctx, size_t roi, const char *msg),
                          void *ctx)
{
    struct failed {
        size_t roi;
        char *msg;
    } *list = NULL;
    size_t n = 0, cap = 0;
    pthread_mutex_lock(&e->lock);
    for (size_t r = 0; r < e->f.t->rois.n; r++) {
        if (e->s.rois[r].state != RS_FAILED)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            list = xrealloc(list, cap * sizeof *list);
        }
        const char *msg = latest_error(e, r);
        list[n].roi = r;
        list[n].msg = msg ? xstrdup(msg) : NULL;
        n++;
    }
    pthread_mutex_unlock(&e->lock);
    /* fn runs unlocked: it may print, or ask the engine for more. */
    for (size_t i = 0; i < n; i++) {
        if (fn)
            fn(ctx, list[i].roi, list[i].msg);
        free(list[i].msg);
    }
    free(list);
    return n;
}

bool engine_chunk_has_failed_roi(struct engine *e, uint64_t id)
{
    int64_t k = roi_index_find(e->f.t->index, id);
    if (k < 0)
        return false;
    size_t n;
    const uint32_t *rois = roi_index_rois(e->f.t->index, (size_t)k, &n);
    bool failed = false;
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < n && !failed; i++)
        failed = e->s.rois[rois[i]].state == RS_FAILED;
    pthread_mutex_unlock(&e->lock);
    return failed;
}

enum engine_chunk_look engine_chunk_state(struct engine *e, uint64_t id)
{
    if (engine_chunk_has_failed_roi(e, id))
        return ENGINE_CHUNK_FAILED;
    pthread_mutex_lock(&e->lock);
    bool busy = map_get_ptr(&e->s.jobs, id, 0) != NULL;
    bool stale = busy || (e->nstale && engine_is_stale(e, id));
    pthread_mutex_unlock(&e->lock);
    if (busy)
        return ENGINE_CHUNK_BUSY;
    uint64_t size;
    int64_t mtime_ns;
    return !stale && cache_chunk_stat(e->f.c, id, &size, &mtime_ns, NULL) == 0 ? ENGINE_CHUNK_DONE
                                                                               : ENGINE_CHUNK_IDLE;
}

void engine_note_made(struct engine *e, uint32_t made)
{
    if (made && (!e->s.made_min || made < e->s.made_min))
        e->s.made_min = made;
    if (made > e->s.made_max)
        e->s.made_max = made;
}

struct cache *engine_cache(struct engine *e)
{
    return e->f.c;
}

const struct task *engine_task(const struct engine *e)
{
    return e->f.t;
}

/* ---- uptime ---- */

double engine_uptime(struct engine *e)
{
    return now_monotonic() - e->f.started;
}
