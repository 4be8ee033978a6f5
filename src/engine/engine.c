/* engine.c: scheduling and the compute pool (see engine.h): chunk opens, checked against the
 * keys of what the chunk is made of; one job per chunk being made, with its waiters; ROI
 * states, single-flight per mount; the poller of chunks another process is making. ROIs run
 * in compute.c; keys and assembly are in assemble.c. One mutex guards the ROI and chunk
 * states; computation, I/O and callbacks run outside it. */
#include "engine_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../nd.h"
#include "gc.h"
#include "store.h"

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

static struct chunk_job **job_slot(struct engine *e, uint64_t id)
{
    struct chunk_job **p = &e->jobs[(id * 0x9E3779B97F4A7C15ULL) >> 52];
    while (*p && (*p)->id != id)
        p = &(*p)->hnext;
    return p;
}

struct chunk_job *engine_job_find(struct engine *e, uint64_t id)
{
    return *job_slot(e, id);
}

/* Where ROI r is in job's list, or job->nrois. */
static size_t job_index_of(const struct chunk_job *job, uint32_t r)
{
    size_t lo = 0, hi = job->nrois;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (job->rois[mid] < r)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < job->nrois && job->rois[lo] == r ? lo : job->nrois;
}

/* Unlinks job from the table, releases its lock and pins and returns its waiters. */
static struct waiter *job_remove(struct engine *e, struct chunk_job *job)
{
    struct chunk_job **p = job_slot(e, job->id);
    *p = job->hnext;
    e->njobs--;
    if (job->remote)
        e->nremote--;
    cache_unlock(e->c, job->lock);
    if (job->fd >= 0)
        close(job->fd);
    if (job->scheduled)
        for (size_t i = 0; i < job->nrois; i++) {
            e->rois[job->rois[i]].pins--;
            slot_settle(e, job->rois[i]);
        }
    struct waiter *w = job->waiters;
    chunk_keys_free(&job->want);
    free(job->use);
    free(job->waits);
    free(job);
    pthread_cond_broadcast(&e->done_cv);
    return w;
}

static void asm_enqueue(struct engine *e, struct chunk_job *job)
{
    job->qnext = NULL;
    if (e->asm_tail)
        e->asm_tail->qnext = job;
    else
        e->asm_head = job;
    e->asm_tail = job;
    pthread_cond_signal(&e->work_cv);
}

void engine_record_error(struct engine *e, size_t roi, const char *msg)
{
    struct engine_error *slot;
    if (e->nerrors < ENGINE_MAX_ERRORS) {
        slot = &e->errors[(e->err_head + e->nerrors) % ENGINE_MAX_ERRORS];
        e->nerrors++;
    } else {
        slot = &e->errors[e->err_head];
        free(slot->message);
        e->err_head = (e->err_head + 1) % ENGINE_MAX_ERRORS;
    }
    slot->roi = roi;
    slot->message = xstrdup(msg);
}

void engine_notify(struct engine *e, struct waiter *w, uint64_t id, int err, int flags)
{
    while (w) {
        struct waiter *next = w->next;
        int fd = -1, r = err;
        if (r == 0 && (r = cache_chunk_open_plain(e->c, id, &fd)) < 0) {
            log_error("chunk %llu: cannot open its cache file: %s", (unsigned long long)id,
                      strerror(-r));
            r = -EIO;
        }
        w->cb(w->ctx, r, fd, flags);
        free(w);
        w = next;
    }
}

void engine_notify_fd(struct waiter *w, uint64_t id, int fd, int flags)
{
    while (w) {
        struct waiter *next = w->next;
        int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (mine < 0)
            log_error("chunk %llu: cannot open its cache file: %s", (unsigned long long)id,
                      strerror(errno));
        w->cb(w->ctx, mine < 0 ? -EIO : 0, mine, flags);
        free(w);
        w = next;
    }
    close(fd);
}

/* ---- scheduling (lock held) ---- */

/* Makes sure ROI r will be computed, asked for as key want; true when a chunk must wait. */
static bool want_roi(struct engine *e, uint32_t r, struct key128 want, enum roi_prio prio)
{
    struct roi_slot *s = &e->rois[r];
    switch (s->state) {
    case RS_IDLE:
    case RS_FAILED:
        if (s->state == RS_FAILED)
            e->n_failed--;
        s->state = RS_QUEUED;
        s->key = want;
        s->prio = (uint8_t)prio;
        queue_push(prio == PRIO_DEMAND ? &e->demand : &e->ahead, r);
        pthread_cond_signal(&e->work_cv);
        return true;
    case RS_QUEUED:
        if (prio == PRIO_DEMAND && s->prio != PRIO_DEMAND) {
            s->prio = PRIO_DEMAND;
            queue_push(&e->demand, r);
            pthread_cond_signal(&e->work_cv);
        }
        return true;
    case RS_RUNNING:
        return true;
    default: /* RS_DONE: callers decide before */
        return false;
    }
}

/* Decides, for each ROI of the job, which result it pastes: the one done with the key the
 * input has now, one in the store under that key, or one to compute. */
static void job_schedule(struct engine *e, struct chunk_job *job)
{
    job->scheduled = true;
    struct store *st = cache_store(e->c);
    for (size_t i = 0; i < job->nrois; i++) {
        uint32_t r = job->rois[i];
        struct roi_slot *s = &e->rois[r];
        struct key128 w = job->want.rois[i];
        s->pins++;
        job->use[i] = w;
        if (s->state == RS_DONE && !key_eq(s->key, w))
            slot_forget(e, r); /* made from input that has changed since */
        if (s->state == RS_DONE)
            continue;
        if ((s->state == RS_IDLE || s->state == RS_FAILED) && store_has(st, w)) {
            if (s->state == RS_FAILED)
                e->n_failed--;
            s->state = RS_DONE;
            s->key = w;
            s->stored = true;
            e->n_done++;
            e->n_reused++;
            continue;
        }
        if (want_roi(e, r, w, job->demanded ? PRIO_DEMAND : PRIO_AHEAD)) {
            job->waits[i] = 1;
            job->pending++;
        }
    }
    if (job->pending == 0)
        asm_enqueue(e, job);
}

/* Creates the job for chunk id (not current, no job yet), owning keys; schedules its ROIs
 * once the chunk's lock is ours, which makes making it exclusive between processes. */
struct chunk_job *engine_job_create(struct engine *e, uint64_t id, bool demanded,
                                    struct chunk_keys *keys)
{
    struct chunk_job *job = xcalloc(1, sizeof *job);
    job->id = id;
    job->k = roi_index_find(e->t->index, id);
    job->rois = job->k >= 0 ? roi_index_rois(e->t->index, (size_t)job->k, &job->nrois) : NULL;
    job->want = *keys;
    keys->rois = NULL;
    job->use = xcalloc(job->nrois ? job->nrois : 1, sizeof *job->use);
    job->waits = xcalloc(job->nrois ? job->nrois : 1, 1);
    job->demanded = demanded;
    job->lock = -1;
    job->fd = -1;
    *job_slot(e, id) = job;
    e->njobs++;
    int lock = cache_lock_chunk(e->c, id, false);
    if (lock == -EWOULDBLOCK) {
        job->remote = true;
        e->nremote++;
        pthread_cond_signal(&e->remote_cv);
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
    store_refresh(cache_store(e->c));
    job_schedule(e, job);
    return job;
}

static void job_promote(struct engine *e, struct chunk_job *job)
{
    if (job->demanded || job->k < 0)
        return;
    job->demanded = true;
    if (!job->scheduled)
        return; /* its ROIs are asked for, with demand priority, once the lock is ours */
    for (size_t i = 0; i < job->nrois; i++)
        if (e->rois[job->rois[i]].state == RS_QUEUED)
            want_roi(e, job->rois[i], e->rois[job->rois[i]].key, PRIO_DEMAND);
}

/* True when a ROI of the k-th touched chunk failed: only a reader's open retries it. */
bool engine_has_failed_roi(struct engine *e, size_t k)
{
    size_t n;
    const uint32_t *rois = roi_index_rois(e->t->index, k, &n);
    for (size_t i = 0; i < n; i++)
        if (e->rois[rois[i]].state == RS_FAILED)
            return true;
    return false;
}

/* ---- other processes ---- */

/* A job whose chunk lock was held by another process, now ours: serve what it made when that
 * is current, else make the chunk (no lock held; takes it). */
static void remote_acquired(struct engine *e, struct chunk_job *job)
{
    int fd = -1;
    enum cache_chunk_state st = cache_chunk_open_current(e->c, job->id, job->want.chunk, &fd, NULL);
    if (st != CHUNK_CURRENT)
        store_refresh(cache_store(e->c)); /* results it made on the way */
    pthread_mutex_lock(&e->lock);
    if (st == CHUNK_CURRENT) {
        job->cached_already = true;
        job->fd = fd; /* served as it is now: the lock is ours */
        asm_enqueue(e, job);
    } else {
        job_schedule(e, job);
    }
    pthread_mutex_unlock(&e->lock);
}

/* Polls the locks of chunks another process is making; takes over when it finishes or dies
 * (the kernel releases a dead process's lock). */
static void *remote_main(void *arg)
{
    struct engine *e = arg;
    pthread_mutex_lock(&e->lock);
    while (!e->stopping) {
        if (e->nremote == 0) {
            pthread_cond_wait(&e->remote_cv, &e->lock);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&e->remote_cv, &e->lock, &ts);
        struct chunk_job *got = NULL;
        for (size_t b = 0; b < ENGINE_JOB_BUCKETS && e->nremote && !e->stopping; b++)
            for (struct chunk_job *job = e->jobs[b]; job; job = job->hnext) {
                if (!job->remote)
                    continue;
                int lock = cache_lock_chunk(e->c, job->id, false);
                if (lock == -EWOULDBLOCK)
                    continue;
                job->remote = false;
                e->nremote--;
                job->lock = lock >= 0 ? lock : -1;
                job->qnext = got; /* the job stays in the table: nobody else starts it */
                got = job;
            }
        pthread_mutex_unlock(&e->lock);
        while (got) {
            struct chunk_job *next = got->qnext;
            remote_acquired(e, got);
            got = next;
        }
        pthread_mutex_lock(&e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- opening a chunk ---- */

/* Serves fd of a current chunk. */
static void serve_cached(struct engine *e, uint64_t id, int fd, bool replaced, engine_chunk_cb cb,
                         void *ctx)
{
    if (e->evict || e->nstale) { /* before the reader hears of it: its next open may evict */
        pthread_mutex_lock(&e->lock);
        if (e->evict)
            evict_touch(e->evict, id);
        if (e->nstale && engine_stale_take(e, id))
            e->n_cached++; /* current again */
        pthread_mutex_unlock(&e->lock);
    }
    /* A version replaced by another thread meanwhile may still be in the kernel's cache. */
    cb(ctx, 0, fd, replaced ? ENGINE_REPLACED | ENGINE_COMPUTED : 0);
    engine_read_ahead(e, id);
}

void engine_open_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx)
{
    if (e->is_broken) { /* the input's metadata changed under the mount (changes.c) */
        cb(ctx, -EIO, -1, 0);
        return;
    }
    struct chunk_keys keys;
    engine_chunk_keys_now(e->t, id, NULL, &keys);
    bool replaced = false;
    for (int attempt = 0;; attempt++) {
        int fd = -1;
        enum cache_chunk_state st = cache_chunk_open_current(e->c, id, keys.chunk, &fd, NULL);
        if (st == CHUNK_CURRENT) {
            chunk_keys_free(&keys);
            serve_cached(e, id, fd, replaced, cb, ctx);
            return;
        }
        replaced = replaced || st != CHUNK_ABSENT;
        store_refresh(cache_store(e->c)); /* results other processes made meanwhile */
        pthread_mutex_lock(&e->lock);
        if (e->stopping) {
            pthread_mutex_unlock(&e->lock);
            chunk_keys_free(&keys);
            cb(ctx, -EIO, -1, 0);
            return;
        }
        struct chunk_job *job = engine_job_find(e, id);
        if (!job && attempt == 0 && cache_chunk_exists(e->c, id)) {
            /* made (or replaced) by another thread between our look and the lock */
            pthread_mutex_unlock(&e->lock);
            continue;
        }
        struct waiter *w = xmalloc(sizeof *w);
        w->cb = cb;
        w->ctx = ctx;
        if (!job) {
            job = engine_job_create(e, id, true, &keys);
            job->replaced = replaced;
        } else {
            job_promote(e, job);
        }
        w->next = job->waiters;
        job->waiters = w;
        pthread_mutex_unlock(&e->lock);
        chunk_keys_free(&keys);
        engine_read_ahead(e, id);
        return;
    }
}

void engine_chunk_size(struct engine *e, uint64_t id, uint64_t *size, bool *known)
{
    if (e->t->chunk_fixed_size >= 0) {
        *size = (uint64_t)e->t->chunk_fixed_size;
        *known = true;
        return;
    }
    int64_t mtime_ns;
    bool stale = false;
    if (e->nstale) { /* made from input that changed since: its size is not known */
        pthread_mutex_lock(&e->lock);
        stale = engine_is_stale(e, id);
        pthread_mutex_unlock(&e->lock);
    }
    *known = !stale && cache_chunk_stat(e->c, id, size, &mtime_ns) == 0;
    if (!*known)
        *size = 0;
}

/* ---- ROI outcomes ---- */

void engine_roi_finish(struct engine *e, uint32_t r, struct roi_result *res, bool stored,
                       bool reused, const char *errmsg)
{
    const struct task *t = e->t;
    int nd = t->rois.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    roi_chunk_range(&t->rois, r, t->out.chunks, c0, c1);
    struct waiter *failed = NULL;

    pthread_mutex_lock(&e->lock);
    struct roi_slot *s = &e->rois[r];
    e->n_running--;
    roi_result_unref(s->result); /* none, normally: it was forgotten or never made */
    s->result = NULL;
    s->flushing = false;
    if (res) {
        s->state = RS_DONE;
        s->key = res->key;
        s->stored = stored;
        e->n_done++;
        e->n_reused += reused;
        e->n_computed += !reused;
        if (stored) /* shared by chunks read apart: pasted from the store, memory stays bounded */
            roi_result_unref(res);
        else
            s->result = res;
    } else {
        s->state = RS_FAILED;
        e->n_failed++;
        engine_record_error(e, r, errmsg);
    }
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    for (;;) {
        struct chunk_job *job = engine_job_find(e, nd_linear(idx, t->grid, nd));
        size_t i = job && job->scheduled ? job_index_of(job, r) : 0;
        if (job && job->scheduled && i < job->nrois && job->waits[i]) {
            job->waits[i] = 0;
            if (res) {
                job->use[i] = s->key; /* what it was made from, maybe newer than wanted */
            } else if (!job->failed) {
                /* Its readers fail now, but the job, and the chunk's lock, stay until the
                 * other ROIs it asked for are done and stored (run_assembly): released now,
                 * another process would take the lock and compute them again. */
                job->failed = true;
                struct waiter *w = job->waiters;
                job->waiters = NULL;
                while (w) {
                    struct waiter *next = w->next;
                    w->next = failed;
                    failed = w;
                    w = next;
                }
            }
            if (--job->pending == 0)
                asm_enqueue(e, job);
        }
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == c1[d]) {
            idx[d] = c0[d];
            d--;
        }
        if (d < 0)
            break;
    }
    slot_settle(e, r);
    pthread_mutex_unlock(&e->lock);
    engine_flush_unstored(e);
    engine_notify(e, failed, 0, -EIO, 0);
}

/* ---- chunk assembly ---- */

/* A stored result the job needs turned out missing or damaged: compute it again, then
 * assemble once more (lock held). */
static void job_retry_roi(struct engine *e, struct chunk_job *job, size_t i)
{
    uint32_t r = job->rois[i];
    struct roi_slot *s = &e->rois[r];
    job->attempts++;
    if (s->state == RS_DONE && key_eq(s->key, job->use[i]))
        slot_forget(e, r);
    if (s->state == RS_DONE) {
        job->use[i] = s->key; /* made again meanwhile */
        asm_enqueue(e, job);
    } else if (want_roi(e, r, job->want.rois[i], job->demanded ? PRIO_DEMAND : PRIO_AHEAD)) {
        job->waits[i] = 1;
        job->pending++;
    } else {
        asm_enqueue(e, job);
    }
}

/* Writes chunk id to the cache, counted in n_cached before any reader can see it: a reader
 * may open the file as soon as it is renamed into place, and read the status right after.
 * 1 (it replaced a file), 0 (a new one) or -errno. */
static int write_counted(struct engine *e, uint64_t id, const void *data, size_t len,
                         struct key128 key)
{
    bool absent = !cache_chunk_exists(e->c, id);
    if (absent) {
        pthread_mutex_lock(&e->lock);
        e->n_cached++;
        pthread_mutex_unlock(&e->lock);
    }
    int w = cache_chunk_write(e->c, id, data, len, key);
    if ((absent && w < 0) || (!absent && w == 0)) { /* failed; or gone meanwhile */
        pthread_mutex_lock(&e->lock);
        e->n_cached += w == 0 ? 1 : -1;
        pthread_mutex_unlock(&e->lock);
    }
    return w;
}

/* A job one of whose ROIs failed, once the others it asked for are done: stores their
 * results while the chunk's lock is still ours, then lets it go; an open that came in the
 * meantime gets an attempt of its own. */
static void finish_failed_job(struct engine *e, struct chunk_job *job)
{
    uint64_t id = job->id;
    engine_store_job_results(e, job);
    pthread_mutex_lock(&e->lock);
    struct waiter *w = job_remove(e, job);
    pthread_mutex_unlock(&e->lock);
    engine_flush_unstored(e);
    while (w) {
        struct waiter *next = w->next;
        engine_open_chunk(e, id, w->cb, w->ctx);
        free(w);
        w = next;
    }
}

static void run_assembly(struct engine *e, struct chunk_job *job)
{
    if (job->failed) {
        finish_failed_job(e, job);
        return;
    }
    struct errbuf err = {{0}};
    void *data = NULL;
    size_t len = 0, bad = SIZE_MAX;
    uint64_t id = job->id;
    int rc = 0, written = 0;
    struct key128 key;
    if (!job->cached_already) {
        rc = engine_assemble(e, job, &data, &len, &key, &bad, &err);
        if (rc == 0)
            engine_store_job_results(e, job); /* before the chunk: it names them */
        if (rc == 0 && (written = write_counted(e, id, data, len, key)) < 0)
            rc = err_set(&err, written, "cannot write it to the cache: %s", strerror(-written));
    }
    free(data);
    if (rc == -ENOENT && bad != SIZE_MAX && job->attempts < 3) {
        log_warn("chunk %llu: %s; computing the ROI again", (unsigned long long)id, err.msg);
        pthread_mutex_lock(&e->lock);
        job_retry_roi(e, job, bad);
        pthread_mutex_unlock(&e->lock);
        return;
    }
    if (rc < 0)
        log_error("chunk %llu failed: %s", (unsigned long long)id, err.msg);
    /* The file to serve, opened while its lock is ours: afterwards another version may
     * replace it (two versions of a configuration on one cache, during an edit). */
    int served = job->fd, or = 0;
    job->fd = -1;
    if (rc == 0 && served < 0 && (or = cache_chunk_open_plain(e->c, id, &served)) < 0) {
        log_error("chunk %llu: cannot open its cache file: %s", (unsigned long long)id,
                  strerror(- or));
        rc = -EIO;
    }
    pthread_mutex_lock(&e->lock);
    bool budget = false;
    /* counted by write_counted, or at mount; a stale one was taken out of the count */
    if (rc == 0 && e->nstale && engine_stale_take(e, id))
        e->n_cached++;
    if (rc == 0 && !job->cached_already) {
        if (e->evict) {
            evict_add(e->evict, id, len);
            budget = true;
        }
    }
    int flags = job->cached_already ? 0 : ENGINE_COMPUTED;
    if (job->replaced)
        flags |= ENGINE_REPLACED | ENGINE_COMPUTED;
    struct waiter *w = job_remove(e, job);
    pthread_mutex_unlock(&e->lock);
    engine_flush_unstored(e);
    /* Evicted before the readers hear of this chunk, so that the cache never holds more than
     * the limit once a reader has its data. */
    if (budget)
        engine_budget_check(e, id);
    if (rc == 0) {
        engine_notify_fd(w, id, served, flags);
    } else {
        if (served >= 0)
            close(served);
        engine_notify(e, w, id, -EIO, flags);
    }
}

/* ---- the compute pool ---- */

static bool pop_runnable(struct engine *e, uint32_t *r)
{
    while (queue_pop(&e->demand, r) || queue_pop(&e->ahead, r))
        if (e->rois[*r].state == RS_QUEUED)
            return true;
    return false;
}

/* ROI r and more queued batchable ROIs after it, marked running: at most this thread's
 * share of the queue, so that the other threads get as much (small ROIs cost the processor
 * a round trip each: python). */
static size_t pop_batch(struct engine *e, uint32_t r, uint32_t *batch)
{
    size_t n = 1, share = (e->demand.len + e->ahead.len) / (size_t)e->nthreads;
    batch[0] = r;
    while (n < PROC_BATCH_MAX && n <= share && e->demand.len + e->ahead.len > 0) {
        struct roi_queue *q = e->demand.len ? &e->demand : &e->ahead;
        uint32_t next = q->buf[q->head];
        if (e->rois[next].state == RS_QUEUED && !engine_roi_batchable(e, next))
            break;
        queue_pop(q, &next);
        if (e->rois[next].state != RS_QUEUED)
            continue; /* as pop_runnable: queued twice, or done meanwhile */
        e->rois[next].state = RS_RUNNING;
        e->n_running++;
        batch[n++] = next;
    }
    return n;
}

static void *worker_main(void *arg)
{
    struct engine *e = arg;
    pthread_mutex_lock(&e->lock);
    for (;;) {
        if (e->asm_head) {
            struct chunk_job *job = e->asm_head;
            e->asm_head = job->qnext;
            if (!e->asm_head)
                e->asm_tail = NULL;
            pthread_mutex_unlock(&e->lock);
            run_assembly(e, job);
            pthread_mutex_lock(&e->lock);
            continue;
        }
        if (e->stopping)
            break;
        uint32_t r;
        if (pop_runnable(e, &r)) {
            struct key128 want = e->rois[r].key;
            e->rois[r].state = RS_RUNNING;
            e->n_running++;
            uint32_t batch[PROC_BATCH_MAX];
            size_t n = engine_roi_batchable(e, r) ? pop_batch(e, r, batch) : 1;
            pthread_mutex_unlock(&e->lock);
            if (n > 1)
                engine_run_rois(e, batch, n);
            else
                engine_run_roi(e, r, want);
            pthread_mutex_lock(&e->lock);
            continue;
        }
        if (e->verify_len) {
            uint64_t id = e->verify[e->verify_head];
            e->verify_head = (e->verify_head + 1) % ENGINE_VERIFY_AHEAD;
            e->verify_len--;
            pthread_mutex_unlock(&e->lock);
            engine_verify_ahead(e, id);
            pthread_mutex_lock(&e->lock);
            continue;
        }
        pthread_cond_wait(&e->work_cv, &e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- creation ---- */

static void scan_cached_chunk(void *ctx, uint64_t id)
{
    struct engine *e = ctx;
    if (!task_chunk_present(e->t, id))
        return;
    e->n_cached++;
    uint64_t size;
    int64_t mtime_ns;
    if (e->evict && cache_chunk_stat(e->c, id, &size, &mtime_ns) == 0)
        evict_found(e->evict, id, size, mtime_ns);
}

/* The ROIs whose result, made from the input as it is now, is stored count as done; live
 * (when not NULL) gets the key of every ROI. */
static void scan_stored_results(struct engine *e, struct keyset *live)
{
    struct store *st = cache_store(e->c);
    struct store_stats ss;
    store_get_stats(st, &ss);
    if (ss.results == 0)
        return; /* nothing to look for: no stat of the input */
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    for (size_t r = 0; r < e->t->rois.n; r++) {
        struct key128 k =
            engine_roi_key(e->t, (uint32_t)r, engine_roi_sig_now(e->t, (uint32_t)r, memo));
        struct store_info info;
        if (live)
            keyset_add(live, k);
        if (store_lookup(st, k, &info)) {
            e->rois[r] = (struct roi_slot){.state = RS_DONE, .stored = true, .key = k};
            e->n_done++;
            e->n_reused++;
            engine_note_made(e, info.made);
        }
    }
    e->n_at_start = e->n_done;
    e->n_unused = ss.results > e->n_done ? ss.results - e->n_done : 0;
    zarr_sigmemo_free(memo);
}

int engine_create(struct task *t, struct cache *c, struct engine **out, struct errbuf *err)
{
    struct engine *e = xcalloc(1, sizeof *e);
    e->t = t;
    e->c = c;
    e->started = now_monotonic();
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->done_cv, NULL);
    pthread_cond_init(&e->remote_cv, NULL);
    e->rois = xcalloc(t->rois.n ? t->rois.n : 1, sizeof *e->rois);
    idlru_init(&e->stale);
    if (t->level == 0)
        cache_adopt(
            c); /* this process serves the cache (maybe forked from the one that opened it) */
    if (t->cfg.max_size > 0)
        e->evict = evict_new(t->cfg.max_size);
    /* What a previous mount (or another process) already finished. */
    cache_chunk_each(c, scan_cached_chunk, e);
    struct keyset *live = e->evict ? keyset_new(t->rois.n) : NULL;
    scan_stored_results(e, live);
    if (e->evict)
        engine_budget_start(e, live);
    keyset_free(live);
    int rc = pthread_create(&e->remote_thread, NULL, remote_main, e);
    if (rc != 0) {
        engine_destroy(e);
        return err_set(err, -rc, "cannot start a thread: %s", strerror(rc));
    }
    e->remote_started = true;
    e->nthreads = t->cfg.threads > 0 ? t->cfg.threads : 1;
    e->threads = xcalloc((size_t)e->nthreads, sizeof *e->threads);
    for (int i = 0; i < e->nthreads; i++) {
        rc = pthread_create(&e->threads[i], NULL, worker_main, e);
        if (rc != 0) {
            e->nthreads = i;
            engine_destroy(e);
            return err_set(err, -rc, "cannot start compute threads: %s", strerror(rc));
        }
    }
    if (t->level == 0 && t->nlevels > 1 && (rc = pyramid_engines_create(e, err)) < 0) {
        engine_destroy(e);
        return rc;
    }
    *out = e;
    return 0;
}

void engine_destroy(struct engine *e)
{
    pyramid_engines_destroy(e); /* the lower levels read this one: they stop first */
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_broadcast(&e->work_cv);
    pthread_cond_broadcast(&e->remote_cv);
    pthread_mutex_unlock(&e->lock);
    proc_shutdown(e->t->proc);
    for (int i = 0; i < e->nthreads; i++)
        pthread_join(e->threads[i], NULL);
    if (e->remote_started)
        pthread_join(e->remote_thread, NULL);
    free(e->threads);
    for (size_t b = 0; b < ENGINE_JOB_BUCKETS; b++)
        while (e->jobs[b])
            engine_notify(e, job_remove(e, e->jobs[b]), 0, -EIO, 0);
    engine_flush_unstored(e); /* finished results survive the unmount */
    for (size_t r = 0; r < e->t->rois.n; r++)
        roi_result_unref(e->rois[r].result);
    for (size_t i = 0; i < e->nerrors; i++)
        free(e->errors[i].message);
    free(e->rois);
    evict_free(e->evict);
    engine_stale_free(e);
    free(e->broken);
    free(e->demand.buf);
    free(e->ahead.buf);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->remote_cv);
    free(e);
}
