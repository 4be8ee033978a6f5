/* ahead.c: work queued ahead of a reader: on each open, the ROIs of the chunks that follow it
 * in C order (readahead), behind demanded work, and the check of the chunks already cached a
 * little further on, so that their checksums are verified while the reader still reads the
 * chunks before them. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine_internal.h"
#include "ahead.h"
#include "jobs.h"
#include "../cache/cache.h"

/* Queues cached chunk id to be checked ahead of its open (lock held): its checksum is then
 * verified while the reader still reads the chunks before it, off the reader's path. */
static void verify_push(struct engine *e, uint64_t id)
{
    for (size_t i = 0; i < ENGINE_VERIFY_AHEAD; i++)
        if (e->s.verify_seen[i] == id + 1)
            return; /* queued lately: a window slides one chunk per open */
    if (e->s.verify_len == ENGINE_VERIFY_AHEAD)
        return; /* far enough ahead */
    e->s.verify_seen[e->s.verify_seen_next++ % ENGINE_VERIFY_AHEAD] = id + 1;
    e->s.verify[(e->s.verify_head + e->s.verify_len++) % ENGINE_VERIFY_AHEAD] = id;
    pthread_cond_signal(&e->work_cv);
}

/* Checks cached chunk id as an open would; one that is not current is made now, ahead. */
void engine_verify_ahead(struct engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->lock);
    uint64_t ended = e->s.jobs_ended;
    pthread_mutex_unlock(&e->lock);
    struct chunk_keys keys;
    engine_chunk_keys_now(e->f.t, id, NULL, &keys);
    int fd = -1;
    enum cache_chunk_state st = cache_chunk_open_current(e->f.c, id, keys.chunk, &fd, NULL);
    if (fd >= 0)
        close(fd);
    if (st != CHUNK_CURRENT && st != CHUNK_ABSENT) {
        store_refresh(cache_store(e->f.c));
        pthread_mutex_lock(&e->lock);
        if (!e->s.stopping && !engine_job_find(e, id) && e->s.jobs_ended == ended)
            engine_job_create(e, id, false, true, &keys, ENGINE_BEGAN_NEVER_RETRY);
        pthread_mutex_unlock(&e->lock);
    }
    chunk_keys_free(&keys);
}

void (*engine_read_ahead_hook)(struct engine *e, uint64_t id);

/* readahead = auto (engine.h): the following chunks that hold ENGINE_AUTO_AHEAD_NS of the
 * compute threads' work, each taken to have as many ROIs as chunk id, at the time ROIs have
 * taken so far; one per thread until a ROI is done. */
static int auto_depth(struct engine *e, uint64_t id)
{
    int threads = e->f.opts.threads; /* at least 1 */
    uint64_t roi_ns = atomic_load_explicit(&e->roi_ns, memory_order_relaxed);
    int64_t k = roi_index_find(e->f.t->index, id);
    size_t nrois = 0;
    if (k >= 0)
        roi_index_rois(e->f.t->index, (size_t)k, &nrois);
    if (roi_ns == 0 || nrois == 0)
        return threads;
    double chunk_ns = (double)roi_ns * (double)nrois / threads; /* one chunk on all threads */
    double want = ceil((double)ENGINE_AUTO_AHEAD_NS / chunk_ns);
    if (want <= threads)
        return threads;
    return want >= ENGINE_AUTO_AHEAD_MAX ? ENGINE_AUTO_AHEAD_MAX : (int)want;
}

/* Queues, behind demanded work, the ROIs of the `readahead` chunks that follow id in C
 * order, and the check of those already cached among the next 4 x readahead (at most
 * ENGINE_VERIFY_WINDOW): a reader reads faster than a checksum is verified, so the check
 * starts further ahead. Takes the lock (keys are computed outside it). */
void engine_read_ahead(struct engine *e, uint64_t id)
{
    int ncompute =
        e->f.opts.readahead == ENGINE_READAHEAD_AUTO ? auto_depth(e, id) : e->f.opts.readahead;
    if (ncompute <= 0)
        return;
    int nverify = 4 * ncompute < ENGINE_VERIFY_WINDOW ? 4 * ncompute : ENGINE_VERIFY_WINDOW;
    int n = ncompute > nverify ? ncompute : nverify;
    uint64_t *next = xmalloc((size_t)n * sizeof *next);
    int *at = xmalloc((size_t)n * sizeof *at);
    size_t m = 0, nk = roi_index_nchunks(e->f.t->index);
    pthread_mutex_lock(&e->lock);
    uint64_t ended = e->s.jobs_ended; /* the looks at the cache below are newer than this */
    size_t k0 = roi_index_lower_bound(e->f.t->index, id + 1);
    for (size_t row = k0; row < k0 + (size_t)n && row < nk; row++) {
        uint64_t cid = roi_index_chunk_id(e->f.t->index, row);
        if (!e->s.stopping && !engine_job_find(e, cid) && !engine_has_failed_roi(e, row)) {
            at[m] = (int)(row - k0);
            next[m++] = cid;
        }
    }
    pthread_mutex_unlock(&e->lock);
    bool refreshed = false;
    for (size_t i = 0; i < m; i++) {
        if (cache_chunk_exists(e->f.c, next[i])) {
            pthread_mutex_lock(&e->lock);
            if (at[i] < nverify)
                verify_push(e, next[i]);
            pthread_mutex_unlock(&e->lock);
            continue;
        }
        if (at[i] >= ncompute)
            continue;
        struct chunk_keys keys;
        engine_chunk_keys_now(e->f.t, next[i], NULL, &keys);
        if (!refreshed)
            store_refresh(cache_store(e->f.c)); /* results other processes made meanwhile */
        refreshed = true;
        if (engine_read_ahead_hook)
            engine_read_ahead_hook(e, next[i]);
        pthread_mutex_lock(&e->lock);
        /* A job that ended since the look may have made this chunk: made again, its file
         * would change under a reader that knows it by size and mtime (a second mount taking
         * this one as input, which would then compute its ROIs again). */
        if (!e->s.stopping && !engine_job_find(e, next[i]) &&
            !engine_has_failed_roi(e, k0 + (size_t)at[i]) && /* failed during the look */
            (e->s.jobs_ended == ended || !cache_chunk_exists(e->f.c, next[i])))
            engine_job_create(e, next[i], false, false, &keys, ENGINE_BEGAN_NEVER_RETRY);
        pthread_mutex_unlock(&e->lock);
        chunk_keys_free(&keys);
    }
    free(next);
    free(at);
}
