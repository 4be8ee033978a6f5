/* budget.c: [cache] max_size over the whole cache directory of an engine, its chunk files
 * and its result store. Beyond the limit, results no current key names go first (the store
 * is compacted), then the least recently used chunk files (made again from the stored
 * results, without the processor); the current results themselves are never evicted, since
 * they are the only copy of the work. */
#include <errno.h>
#include <stdlib.h>

#include "engine_internal.h"
#include "budget.h"
#include "jobs.h"
#include "stale.h"
#include "gc.h"
#include "../cache/cache.h"

static uint64_t result_bytes(struct engine *e)
{
    struct store_stats ss;
    store_get_stats(cache_store(e->f.c), &ss);
    return ss.bytes;
}

/* Throws away a cached chunk to respect [cache] max_size; its ROI results stay stored. Only
 * the file that was counted goes: one that another job or process renamed over it since (a
 * newer version, which that job counts) stays, and so does one whose lock is held. */
static void evict_chunk(struct engine *e, const struct evict_victim *v)
{
    int r = cache_chunk_remove_if(e->f.c, v->id, v->ino);
    log_debug("chunk %llu: %s ([cache] max_size)", (unsigned long long)v->id,
              r == 0 ? "evicted from the cache" : "not evicted: being made or made again");
    pthread_mutex_lock(&e->lock);
    bool uncounted = e->nstale && engine_stale_take(e, v->id); /* taken out already */
    if (!uncounted && e->s.n_cached && (r == 0 || r == -ENOENT))
        e->s.n_cached--; /* a file that stays (a newer one) was counted when it replaced it */
    pthread_mutex_unlock(&e->lock);
}

/* The keys every ROI needs now: those its slot holds or waits for, those chunk jobs will
 * paste, and its key with the input as it is now (no lock held; takes it). */
static struct keyset *live_keys(struct engine *e)
{
    const struct task *t = e->f.t;
    struct keyset *ks = keyset_new(t->rois.n);
    pthread_mutex_lock(&e->lock);
    for (size_t r = 0; r < t->rois.n; r++)
        if (e->s.rois[r].state != RS_IDLE && e->s.rois[r].state != RS_FAILED)
            keyset_add(ks, e->s.rois[r].key);
    size_t it = 0;
    void *v;
    while (map_next(&e->s.jobs, &it, NULL, &v)) {
        const struct chunk_job *job = *(struct chunk_job **)v;
        for (size_t i = 0; i < job->nrois && job->scheduled; i++)
            keyset_add(ks, job->use[i]);
    }
    pthread_mutex_unlock(&e->lock);
    gc_current_results(t, NULL, ks);
    return ks;
}

/* Compacts the result store without what no current key names (no lock held). */
static void drop_unused(struct engine *e, struct keyset *live)
{
    struct keyset *own = live ? NULL : live_keys(e);
    struct gc_report rep;
    struct errbuf err = {{0}};
    int r = gc_collect(e->f.t, e->f.c, live ? live : own, false, &rep, &err);
    keyset_free(own);
    if (r == -EBUSY)
        log_info("[cache] max_size: unused results kept: %s", err.msg);
    else if (r < 0)
        log_warn("[cache] max_size: cannot remove unused results: %s", err.msg);
    else
        log_info("[cache] max_size: %zu unused results removed (%llu bytes)", rep.results_removed,
                 (unsigned long long)(rep.results_bytes_before - rep.results_bytes_after));
    pthread_mutex_lock(&e->lock);
    if (r == 0)
        e->s.n_unused = 0;
    e->s.results_evicted += r == 0 ? rep.results_removed : 0;
    pthread_mutex_unlock(&e->lock);
}

/* Evicts chunk files (never keep) until the cache is within the limit. */
static void evict_chunks(struct engine *e, uint64_t keep)
{
    uint64_t rb = result_bytes(e);
    struct evict_victim *victims = NULL;
    pthread_mutex_lock(&e->lock);
    evict_set_other(e->s.evict, rb);
    size_t n = evict_victims(e->s.evict, keep, &victims);
    bool warn = rb > e->f.opts.max_size && !e->s.budget_warned;
    e->s.budget_warned = e->s.budget_warned || warn;
    pthread_mutex_unlock(&e->lock);
    if (warn)
        log_warn("[cache] max_size (%llu bytes) is below the %llu bytes of ROI results the "
                 "cache must keep: chunk files are kept only while they are read",
                 (unsigned long long)e->f.opts.max_size, (unsigned long long)rb);
    for (size_t i = 0; i < n; i++)
        evict_chunk(e, &victims[i]);
    free(victims);
}

static bool over_limit(struct engine *e)
{
    uint64_t rb = result_bytes(e), usage, max, evicted;
    pthread_mutex_lock(&e->lock);
    evict_set_other(e->s.evict, rb);
    evict_stats(e->s.evict, &usage, &max, &evicted);
    bool over = usage > max;
    pthread_mutex_unlock(&e->lock);
    return over;
}

void engine_budget_start(struct engine *e, struct keyset *live)
{
    evict_settle_order(e->s.evict);
    if (over_limit(e) && e->s.n_unused > 0)
        drop_unused(e, live);
    evict_chunks(e, UINT64_MAX);
}

void engine_budget_check(struct engine *e, uint64_t keep)
{
    pthread_mutex_lock(&e->lock);
    bool collect = e->s.n_unused > 0 && !e->s.collecting;
    pthread_mutex_unlock(&e->lock);
    if (collect && over_limit(e)) {
        pthread_mutex_lock(&e->lock);
        collect = !e->s.collecting; /* one compaction at a time */
        e->s.collecting = true;
        pthread_mutex_unlock(&e->lock);
        if (collect) {
            drop_unused(e, NULL);
            pthread_mutex_lock(&e->lock);
            e->s.collecting = false;
            pthread_mutex_unlock(&e->lock);
        }
    }
    evict_chunks(e, keep);
}
