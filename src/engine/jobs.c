/* jobs.c: the chunk jobs of an engine (see engine.h), one per chunk being made: their
 * creation and scheduling, the ROIs each needs asked for once (single-flight) on two queues;
 * assembly, the chunk file and the answers to the waiters; the poller of chunk locks other
 * processes hold. The table of jobs and what a ROI's outcome does to them are jobtable.c's.
 * Everything here but the assembly itself and the answers runs under the engine's lock. */
#include "engine_internal.h"
#include "assemble.h"
#include "budget.h"
#include "jobs.h"
#include "outcome.h"
#include "results.h"
#include "stale.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"
#include "../cache/cache.h"

/* ---- small containers ---- */

static void queue_push(struct roi_queue *q, uint32_t r)
{
    if (q->len == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 256;
        uint32_t *nb = xmalloc(ncap * sizeof *nb);
        for (size_t i = 0; i < q->len; i++)
            nb[i] = q->buf[(q->head + i) % q->cap];
        free(q->buf);
        q->buf = nb;
        q->cap = ncap;
        q->head = 0;
    }
    q->buf[(q->head + q->len) % q->cap] = r;
    q->len++;
}

static bool queue_pop(struct roi_queue *q, uint32_t *r)
{
    if (!q->len)
        return false;
    *r = q->buf[q->head];
    q->head = (q->head + 1) % q->cap;
    q->len--;
    return true;
}

/* ---- scheduling (lock held) ---- */

/* What request_roi says of a ROI a chunk needs. */
enum roi_need { ROI_READY, ROI_MUST_WAIT };

/* Makes sure ROI r will be computed, asked for as key want with priority prio (a queued ROI is
 * promoted to demand). ROI_MUST_WAIT unless it is done already, which callers check before. */
static enum roi_need request_roi(struct engine *e, uint32_t r, struct key128 want,
                                 enum roi_prio prio)
{
    struct roi_slot *s = &e->s.rois[r];
    switch (s->state) {
    case RS_IDLE:
    case RS_FAILED:
        if (s->state == RS_FAILED)
            e->s.n_failed--;
        s->state = RS_QUEUED;
        s->key = want;
        s->prio = (uint8_t)prio;
        queue_push(prio == PRIO_DEMAND ? &e->s.demand : &e->s.ahead, r);
        pthread_cond_signal(&e->work_cv);
        return ROI_MUST_WAIT;
    case RS_QUEUED:
        if (prio == PRIO_DEMAND && s->prio != PRIO_DEMAND) {
            s->prio = PRIO_DEMAND;
            queue_push(&e->s.demand, r);
            pthread_cond_signal(&e->work_cv);
        }
        return ROI_MUST_WAIT;
    case RS_RUNNING:
        return ROI_MUST_WAIT;
    default: /* RS_DONE */
        return ROI_READY;
    }
}

/* Decides, for each ROI of the job, which result it pastes: the one done with the key the
 * input has now, one in the store under that key, or one to compute. */
static void job_schedule(struct engine *e, struct chunk_job *job)
{
    job->scheduled = true;
    struct store *st = cache_store(e->f.c);
    bool stands = false;
    for (size_t i = 0; i < job->nrois && !stands; i++)
        stands =
            engine_failure_stands(e, job->rois[i], job->began) && !store_has(st, job->want.rois[i]);
    if (stands) {
        /* A failure this job's open must not retry (one that came while its keys were looked
         * at, or another process held the chunk's lock): nothing is asked for; its waiters
         * are opened again (engine_run_assembly), each answered by its own start. */
        for (size_t i = 0; i < job->nrois; i++)
            e->s.rois[job->rois[i]].pins++;
        job->failed = true;
        engine_asm_enqueue(e, job);
        return;
    }
    for (size_t i = 0; i < job->nrois; i++) {
        uint32_t r = job->rois[i];
        struct roi_slot *s = &e->s.rois[r];
        struct key128 w = job->want.rois[i];
        s->pins++;
        job->use[i] = w;
        if (s->state == RS_DONE && !key_eq(s->key, w)) {
            /* Made from other input than the job saw: input that changed since it was read,
             * or that the job saw while it was being made (a chunk of another roifs mount,
             * whose size and mtime change when it is computed: docs/fractal.md). The
             * assembly looks at the input again, unlocked, and computes the ROI again only
             * when the input is not what its result was made from. */
            job->use[i] = s->key;
            job->recheck[i] = 1;
        }
        if (s->state == RS_DONE)
            continue;
        if ((s->state == RS_IDLE || s->state == RS_FAILED) && store_has(st, w)) {
            if (s->state == RS_FAILED)
                e->s.n_failed--;
            s->state = RS_DONE;
            s->key = w;
            s->stored = true;
            e->s.n_done++;
            e->s.n_reused++;
            continue;
        }
        if (request_roi(e, r, w, job->demanded ? PRIO_DEMAND : PRIO_AHEAD) == ROI_MUST_WAIT) {
            job->waits[i] = 1;
            job->pending++;
        }
    }
    if (job->pending == 0)
        engine_asm_enqueue(e, job);
}

/* Creates the job for chunk id (not current, no job yet), owning keys; schedules its ROIs
 * once the chunk's lock is ours, which makes making it exclusive between processes. */
struct chunk_job *engine_job_create(struct engine *e, uint64_t id, bool demanded, bool replaced,
                                    struct chunk_keys *keys, int64_t began)
{
    struct chunk_job *job = xcalloc(1, sizeof *job);
    job->id = id;
    job->began = began;
    job->row = roi_index_find(e->f.t->index, id);
    job->rois = job->row >= 0 ? roi_index_rois(e->f.t->index, (size_t)job->row, &job->nrois) : NULL;
    job->want = *keys;
    keys->rois = NULL;
    job->use = xcalloc(job->nrois ? job->nrois : 1, sizeof *job->use);
    job->waits = xcalloc(job->nrois ? job->nrois : 1, 1);
    job->recheck = xcalloc(job->nrois ? job->nrois : 1, 1);
    job->demanded = demanded;
    job->replaced = replaced;
    job->lock = -1;
    job->fd = -1;
    engine_job_add(e, job);
    int lock = cache_lock_chunk(e->f.c, id, false);
    if (lock == -EWOULDBLOCK) {
        job->locked_elsewhere = true;
        e->s.n_locked_elsewhere++;
        pthread_cond_signal(&e->poller_cv);
        return job;
    }
    if (lock < 0)
        log_warn("chunk %llu: cannot take its lock (%s); computing it unlocked",
                 (unsigned long long)id, strerror(-lock));
    job->lock = lock;
    /* The caller looked in the store before the lock was ours: another process may have
     * stored the chunk's results and let the lock go since. A look now, under the lock, so
     * that they are not computed again (two system calls when nothing changed; the caller's
     * look, outside the engine's lock, did the scanning). */
    store_refresh(cache_store(e->f.c));
    if (lock >= 0 && !replaced && cache_chunk_exists(e->f.c, id)) {
        /* Absent at the caller's look, there now: another process made it and let the lock
         * go meanwhile. Made again, its file would change under readers that know it by size
         * and mtime (a second mount taking this one as input computes its ROIs again). The
         * poller checks it as a lock taken over (lock_taken_over), outside this lock. */
        job->locked_elsewhere = true;
        e->s.n_locked_elsewhere++;
        pthread_cond_signal(&e->poller_cv);
        return job;
    }
    job_schedule(e, job);
    return job;
}

void engine_job_promote(struct engine *e, struct chunk_job *job)
{
    if (job->demanded || job->row < 0)
        return;
    job->demanded = true;
    if (!job->scheduled)
        return; /* its ROIs are asked for, with demand priority, once the lock is ours */
    for (size_t i = 0; i < job->nrois; i++)
        if (e->s.rois[job->rois[i]].state == RS_QUEUED)
            request_roi(e, job->rois[i], e->s.rois[job->rois[i]].key, PRIO_DEMAND);
}

void engine_job_unwanted(struct engine *e, struct chunk_job *job)
{
    job->demanded = false;
    /* Scheduled and waiting for ROIs (pending > 0: neither queued for assembly nor being
     * assembled, nor failed), none of which has started: dropped. */
    bool drop = job->scheduled && !job->failed && !job->cached_already && job->pending > 0;
    for (size_t i = 0; i < job->nrois && drop; i++)
        drop = !job->waits[i] || e->s.rois[job->rois[i]].state == RS_QUEUED;
    if (!drop)
        return; /* made as read-ahead would make it */
    for (size_t i = 0; i < job->nrois; i++) {
        struct roi_slot *s = &e->s.rois[job->rois[i]];
        if (job->waits[i] && s->pins == 1) /* asked for by this job alone: not computed */
            s->state = RS_IDLE;            /* its queue entries are passed over */
    }
    log_debug("chunk %llu: nobody waits for it any more; dropped before its ROIs started",
              (unsigned long long)job->id);
    free(engine_job_remove(e, job)); /* no waiters */
}

bool engine_has_failed_roi(struct engine *e, size_t row)
{
    size_t n;
    const uint32_t *rois = roi_index_rois(e->f.t->index, row, &n);
    for (size_t i = 0; i < n; i++)
        if (e->s.rois[rois[i]].state == RS_FAILED)
            return true;
    return false;
}

bool engine_chunk_failure_stands(struct engine *e, uint64_t id, const struct chunk_keys *keys,
                                 int64_t began)
{
    int64_t row = roi_index_find(e->f.t->index, id);
    size_t n = 0;
    const uint32_t *rois = row >= 0 ? roi_index_rois(e->f.t->index, (size_t)row, &n) : NULL;
    for (size_t i = 0; i < n; i++)
        if (engine_failure_stands(e, rois[i], began) &&
            !(keys && i < keys->n && store_has(cache_store(e->f.c), keys->rois[i])))
            return true;
    return false;
}

/* ---- other processes ---- */

/* A job whose chunk lock another process held, now ours: serve what it made when that is
 * current, else make the chunk (no lock held; takes it). */
static void lock_taken_over(struct engine *e, struct chunk_job *job)
{
    int fd = -1;
    enum cache_chunk_state st =
        cache_chunk_open_current(e->f.c, job->id, job->want.chunk, &fd, NULL);
    if (st != CHUNK_CURRENT)
        store_refresh(cache_store(e->f.c)); /* results it made on the way */
    pthread_mutex_lock(&e->lock);
    if (st == CHUNK_CURRENT) {
        job->cached_already = true;
        job->fd = fd;
        engine_asm_enqueue(e, job);
    } else {
        job_schedule(e, job);
    }
    pthread_mutex_unlock(&e->lock);
}

/* The poller: tries at once, then every 50 ms, the locks of chunks another process is making
 * (jobs marked locked_elsewhere); takes a job over when that process finishes or dies (the
 * kernel releases a dead process's lock), or at once when the lock is ours already. */
void *engine_poller_main(void *arg)
{
    struct engine *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->s.stopping) {
        if (e->s.n_locked_elsewhere == 0) {
            pthread_cond_wait(&e->poller_cv, &e->lock);
            continue;
        }
        struct chunk_job *got = NULL;
        size_t it = 0;
        void *v;
        while (e->s.n_locked_elsewhere && !e->s.stopping && map_next(&e->s.jobs, &it, NULL, &v)) {
            struct chunk_job *job = *(struct chunk_job **)v;
            if (!job->locked_elsewhere)
                continue;
            int lock = job->lock >= 0 ? job->lock : cache_lock_chunk(e->f.c, job->id, false);
            if (lock == -EWOULDBLOCK)
                continue;
            job->locked_elsewhere = false;
            e->s.n_locked_elsewhere--;
            job->lock = lock >= 0 ? lock : -1;
            job->qnext = got; /* the job stays in the table: nobody else starts it */
            got = job;
        }
        pthread_mutex_unlock(&e->lock);
        while (got) {
            struct chunk_job *next = got->qnext;
            lock_taken_over(e, got);
            got = next;
        }
        pthread_mutex_lock(&e->lock);
        if (!e->s.n_locked_elsewhere || e->s.stopping)
            continue;
        struct timespec ts = deadline_in(CLOCK_REALTIME, ts_from_ns(50 * 1000 * 1000));
        pthread_cond_timedwait(&e->poller_cv, &e->lock, &ts);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- chunk assembly ---- */

/* A stored result the job needs turned out missing or damaged: compute it again, then
 * assemble once more (lock held). */
static void job_retry_roi(struct engine *e, struct chunk_job *job, size_t i)
{
    uint32_t r = job->rois[i];
    struct roi_slot *s = &e->s.rois[r];
    job->attempts++;
    if (s->state == RS_DONE && key_eq(s->key, job->use[i]))
        slot_forget(e, r);
    if (s->state == RS_DONE) {
        job->use[i] = s->key; /* made again meanwhile */
        engine_asm_enqueue(e, job);
    } else if (request_roi(e, r, job->want.rois[i], job->demanded ? PRIO_DEMAND : PRIO_AHEAD) ==
               ROI_MUST_WAIT) {
        job->waits[i] = 1;
        job->pending++;
    } else {
        engine_asm_enqueue(e, job);
    }
}

/* Writes chunk id to the cache (cache_chunk_write), counted in n_cached before any reader
 * can see it: a reader may open the file as soon as it is renamed into place, and read the
 * status right after. */
static int write_counted(struct engine *e, uint64_t id, const void *data, size_t len,
                         struct key128 key, int *fd)
{
    bool absent = !cache_chunk_exists(e->f.c, id);
    if (absent) {
        pthread_mutex_lock(&e->lock);
        e->s.n_cached++;
        pthread_mutex_unlock(&e->lock);
    }
    int w = cache_chunk_write(e->f.c, id, data, len, key, fd);
    if ((absent && w < 0) || (!absent && w == 0)) { /* failed; or gone meanwhile */
        pthread_mutex_lock(&e->lock);
        e->s.n_cached += w == 0 ? 1 : -1;
        pthread_mutex_unlock(&e->lock);
    }
    return w;
}

/* Assembles the job's chunk, stores its new results and writes the chunk file (no lock
 * held): 0 with *fd a read-only descriptor of the file written; on -ENOENT, *bad names the result
 * that is missing. */
static int make_chunk(struct engine *e, const struct chunk_job *job, int *fd, uint64_t *len,
                      size_t *bad, struct errbuf *err)
{
    void *data = NULL;
    size_t n = 0;
    struct key128 key;
    struct roi_result *hold = NULL;
    int rc = engine_assemble(e, job, &data, &n, &hold, &key, bad, err);
    if (rc == 0)
        engine_store_job_results(e, job); /* before the chunk: it names them */
    int w = rc == 0 ? write_counted(e, job->id, data, n, key, fd) : 0;
    if (w < 0)
        rc = err_set(err, w, "cannot write it to the cache: %s", strerror(-w));
    else if (rc == 0 && e->f.opts.chunk_made)
        e->f.opts.chunk_made(e->f.opts.chunk_made_ctx, job->id, key, data, n);
    if (hold)
        roi_result_unref(hold);
    else
        free(data);
    *len = n;
    return rc;
}

/* A job one of whose ROIs failed, once the others it asked for are done: stores their
 * results while the chunk's lock is still ours, then lets it go. Returns the waiters that
 * came in the meantime, each to get an attempt of its own. */
static struct waiter *finish_failed_job(struct engine *e, struct chunk_job *job)
{
    engine_store_job_results(e, job);
    pthread_mutex_lock(&e->lock);
    struct waiter *w = engine_job_remove(e, job);
    pthread_mutex_unlock(&e->lock);
    engine_flush_unstored(e);
    return w;
}

/* Looks at the input again for the ROIs marked for a recheck (no lock held: the job is this
 * thread's): clears the marks of those whose result is of the input as it is now, and returns
 * how many are not. */
static size_t mark_outdated(struct engine *e, struct chunk_job *job)
{
    size_t n = 0;
    struct zarr_sigmemo *memo = NULL;
    for (size_t i = 0; i < job->nrois; i++) {
        if (!job->recheck[i])
            continue;
        if (!memo)
            memo = zarr_sigmemo_new();
        uint32_t r = job->rois[i];
        struct key128 now = engine_roi_key(e->f.t, r, engine_roi_sig_now(e->f.t, r, memo));
        if (key_eq(now, job->use[i]))
            job->recheck[i] = 0;
        else
            n++;
    }
    zarr_sigmemo_free(memo);
    return n;
}

/* The marked ROIs of the job are computed again (unless that was done meanwhile), and the job
 * assembled once they are (lock held). */
static void job_refresh_rois(struct engine *e, struct chunk_job *job)
{
    for (size_t i = 0; i < job->nrois; i++) {
        if (!job->recheck[i])
            continue;
        job->recheck[i] = 0;
        uint32_t r = job->rois[i];
        struct roi_slot *s = &e->s.rois[r];
        if (s->state == RS_DONE && key_eq(s->key, job->use[i]))
            slot_forget(e, r);
        if (s->state == RS_DONE) {
            job->use[i] = s->key; /* made again meanwhile */
            job->recheck[i] = 1;
        } else if (request_roi(e, r, job->want.rois[i], job->demanded ? PRIO_DEMAND : PRIO_AHEAD) ==
                   ROI_MUST_WAIT) {
            job->waits[i] = 1;
            job->pending++;
        }
    }
    if (job->pending == 0)
        engine_asm_enqueue(e, job);
}

struct waiter *engine_run_assembly(struct engine *e, struct chunk_job *job)
{
    if (job->failed)
        return finish_failed_job(e, job);
    struct errbuf err = {{0}};
    size_t bad = SIZE_MAX;
    /* Unlocked: off the assembly queue the job is this thread's until it is removed or waits
     * again (struct chunk_job). */
    uint64_t id = job->id, len = 0;
    int rc = 0, fd = job->fd; /* cached_already: the file found current */
    job->fd = -1;
    size_t outdated = job->cached_already ? 0 : mark_outdated(e, job);
    if (outdated) {
        log_info("chunk %llu: the input of %zu of its ROIs changed since they were read; "
                 "computing them again",
                 (unsigned long long)id, outdated);
        pthread_mutex_lock(&e->lock);
        job_refresh_rois(e, job);
        pthread_mutex_unlock(&e->lock);
        return NULL;
    }
    if (!job->cached_already)
        rc = make_chunk(e, job, &fd, &len, &bad, &err);
    if (rc == -ENOENT && bad != SIZE_MAX && job->attempts < 3) {
        log_warn("chunk %llu: %s; computing the ROI again", (unsigned long long)id, err.msg);
        pthread_mutex_lock(&e->lock);
        job_retry_roi(e, job, bad);
        pthread_mutex_unlock(&e->lock);
        return NULL;
    }
    if (rc < 0)
        log_error("chunk %llu failed: %s", (unsigned long long)id, err.msg);
    struct stat st;
    uint64_t ino = rc == 0 && fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
    pthread_mutex_lock(&e->lock);
    bool budget = false;
    /* counted by write_counted, or at the start; a stale one was taken out of the count */
    if (rc == 0 && e->nstale && engine_stale_take(e, id))
        e->s.n_cached++;
    if (rc == 0 && !job->cached_already && e->s.evict) {
        evict_add(e->s.evict, id, len, ino);
        budget = true;
    }
    int flags = job->cached_already ? 0 : ENGINE_COMPUTED;
    if (job->replaced)
        flags |= ENGINE_REPLACED | ENGINE_COMPUTED;
    struct waiter *w = engine_job_remove(e, job);
    pthread_mutex_unlock(&e->lock);
    engine_flush_unstored(e);
    /* Evicted before the readers hear of this chunk, so that the cache never holds more than
     * the limit once a reader has its data (a descriptor of the file, fd). */
    if (budget)
        engine_budget_check(e, id);
    engine_notify(e, w, rc == 0 ? fd : -1, rc == 0 ? 0 : -EIO, flags);
    if (rc < 0 && fd >= 0)
        close(fd);
    return NULL;
}

/* ---- the compute pool ---- */

bool engine_pop_roi(struct engine *e, uint32_t *r)
{
    while (queue_pop(&e->s.demand, r) || queue_pop(&e->s.ahead, r))
        if (e->s.rois[*r].state == RS_QUEUED)
            return true;
    return false;
}

/* ROI r and more queued batchable ROIs after it, marked running: at most this thread's
 * share of the queue, so that the other threads get as much (small ROIs cost the processor
 * a round trip each: python). */
size_t engine_pop_batch(struct engine *e, uint32_t r, uint32_t *batch)
{
    size_t n = 1, share = (e->s.demand.len + e->s.ahead.len) / (size_t)e->f.nthreads;
    batch[0] = r;
    while (n < PROC_BATCH_MAX && n <= share && e->s.demand.len + e->s.ahead.len > 0) {
        struct roi_queue *q = e->s.demand.len ? &e->s.demand : &e->s.ahead;
        uint32_t next = q->buf[q->head];
        if (e->s.rois[next].state == RS_QUEUED && !engine_roi_batchable(e, next))
            break;
        queue_pop(q, &next);
        if (e->s.rois[next].state != RS_QUEUED)
            continue; /* as engine_pop_roi: queued twice, or done meanwhile */
        e->s.rois[next].state = RS_RUNNING;
        e->s.n_running++;
        batch[n++] = next;
    }
    return n;
}
