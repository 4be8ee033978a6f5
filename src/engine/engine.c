/* engine.c: scheduling, ROI computation and the compute pool (see engine.h); building a
 * chunk's bytes and input signatures are in assemble.c. One mutex guards the ROI and chunk
 * states; computation, I/O and callbacks run outside it. */
#include "engine_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../nd.h"

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

static struct chunk_job *job_find(struct engine *e, uint64_t id)
{
    return *job_slot(e, id);
}

/* Unlinks job from the table, releases its lock and returns its waiters; frees the job. */
static struct waiter *job_remove(struct engine *e, struct chunk_job *job)
{
    struct chunk_job **p = job_slot(e, job->id);
    *p = job->hnext;
    e->njobs--;
    if (job->remote)
        e->nremote--;
    cache_unlock(job->lock);
    struct waiter *w = job->waiters;
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

static void record_error(struct engine *e, size_t roi, const char *msg)
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

/* Calls back every waiter in the list (outside the lock). */
static void notify(struct engine *e, struct waiter *w, uint64_t id, int err, int flags)
{
    while (w) {
        struct waiter *next = w->next;
        int fd = -1, r = err;
        if (r == 0 && (r = cache_chunk_open(e->c, id, &fd)) < 0) {
            log_error("chunk %llu: cannot open its cache file: %s", (unsigned long long)id,
                      strerror(-r));
            r = -EIO;
        }
        w->cb(w->ctx, r, fd, flags);
        free(w);
        w = next;
    }
}

/* ---- scheduling (lock held) ---- */

/* Forgets the result of a done ROI that is not in memory (its stored copy is stale or gone),
 * so that the next chunk needing it computes it again. */
static void roi_forget(struct engine *e, uint32_t r)
{
    struct roi_slot *s = &e->rois[r];
    if (s->state != RS_DONE || s->result)
        return;
    s->state = RS_IDLE;
    s->on_disk = false;
    e->n_done--;
}

/* Makes sure ROI r will be computed; returns true when the chunk must wait for it. */
static bool want_roi(struct engine *e, uint32_t r, enum roi_prio prio)
{
    struct roi_slot *s = &e->rois[r];
    switch (s->state) {
    case RS_DONE:
        if (s->result || (s->on_disk && s->remaining > 0))
            return false;
        /* Its chunks were all cached, yet one is wanted again (the cache file vanished):
         * compute it again rather than serve nothing. */
        e->n_done--;
        s->remaining = 1;
        /* fall through */
    case RS_IDLE:
    case RS_FAILED:
        if (s->state == RS_FAILED)
            e->n_failed--;
        s->state = RS_QUEUED;
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
    default: /* RS_RUNNING */
        return true;
    }
}

/* Schedules the ROIs of a job whose chunk lock we hold (or could not take). */
static void job_start(struct engine *e, struct chunk_job *job)
{
    if (cache_chunk_exists(e->c, job->id)) {
        job->cached_already = true; /* another process finished it */
        asm_enqueue(e, job);
        return;
    }
    if (job->k >= 0) {
        size_t n;
        const uint32_t *rois = roi_index_rois(e->t->index, (size_t)job->k, &n);
        for (size_t i = 0; i < n; i++) {
            const struct roi_slot *s = &e->rois[rois[i]];
            if (s->state == RS_DONE && s->on_disk &&
                cache_roi_check(e->c, rois[i], engine_roi_sig(e, rois[i])) < 0)
                roi_forget(e, rois[i]); /* made from input that has changed since */
            if (want_roi(e, rois[i], job->demanded ? PRIO_DEMAND : PRIO_AHEAD))
                job->pending++;
        }
    }
    if (job->pending == 0)
        asm_enqueue(e, job);
}

/* Creates the job for chunk id (not cached, no job yet); schedules its ROIs once the chunk's
 * lock is ours, which makes computing it exclusive between processes sharing the cache. */
static struct chunk_job *job_create(struct engine *e, uint64_t id, bool demanded)
{
    struct chunk_job *job = xcalloc(1, sizeof *job);
    job->id = id;
    job->k = roi_index_find(e->t->index, id);
    job->demanded = demanded;
    job->lock = -1;
    struct chunk_job **p = job_slot(e, id);
    *p = job;
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
    job_start(e, job);
    return job;
}

/* Polls the locks of chunks another process is computing; takes over when it finishes or
 * dies (the kernel releases a dead process's lock). */
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
                job_start(e, job);
            }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

static void job_promote(struct engine *e, struct chunk_job *job)
{
    if (job->demanded || job->k < 0)
        return;
    job->demanded = true;
    if (job->remote)
        return; /* its ROIs are scheduled, with demand priority, once the lock is ours */
    size_t n;
    const uint32_t *rois = roi_index_rois(e->t->index, (size_t)job->k, &n);
    for (size_t i = 0; i < n; i++)
        if (e->rois[rois[i]].state == RS_QUEUED)
            want_roi(e, rois[i], PRIO_DEMAND);
}

/* True when a ROI of the k-th touched chunk failed: only a reader's open retries it. */
static bool has_failed_roi(struct engine *e, size_t k)
{
    size_t n;
    const uint32_t *rois = roi_index_rois(e->t->index, k, &n);
    for (size_t i = 0; i < n; i++)
        if (e->rois[rois[i]].state == RS_FAILED)
            return true;
    return false;
}

/* Queues, behind demanded work, the ROIs of the chunks that follow id in C order. */
static void read_ahead(struct engine *e, uint64_t id)
{
    int n = e->t->cfg.readahead;
    size_t nk = roi_index_nchunks(e->t->index);
    for (size_t k = roi_index_lower_bound(e->t->index, id + 1); n > 0 && k < nk; k++, n--) {
        uint64_t next = roi_index_chunk_id(e->t->index, k);
        if (!job_find(e, next) && !has_failed_roi(e, k) && !cache_chunk_exists(e->c, next))
            job_create(e, next, false);
    }
}

/* True when cached chunk fd was made from the input as it is now (or nothing can tell). */
static bool chunk_current(struct engine *e, uint64_t id, int fd)
{
    uint64_t stored;
    if (cache_chunk_sig(fd, &stored) < 0)
        return true;
    return stored == engine_chunk_signature(e, id);
}

/* Throws away a cached chunk, made from older input or evicted to respect [cache] max_size;
 * its ROIs will run again when it is wanted. */
static void chunk_discard(struct engine *e, uint64_t id, bool evicted)
{
    if (evicted)
        log_debug("chunk %llu: evicted from the cache ([cache] max_size)", (unsigned long long)id);
    else
        log_info("chunk %llu: the input changed since it was computed; computing it again",
                 (unsigned long long)id);
    cache_chunk_remove(e->c, id);
    pthread_mutex_lock(&e->lock);
    if (e->evict && !evicted)
        evict_remove(e->evict, id);
    if (e->n_cached)
        e->n_cached--;
    int64_t k = roi_index_find(e->t->index, id);
    size_t n = 0;
    const uint32_t *rois = k >= 0 ? roi_index_rois(e->t->index, (size_t)k, &n) : NULL;
    for (size_t i = 0; i < n; i++) {
        struct roi_slot *s = &e->rois[rois[i]];
        if (s->state == RS_DONE && !s->result) {
            s->remaining++;
            roi_forget(e, rois[i]);
        }
    }
    pthread_mutex_unlock(&e->lock);
}

void engine_open_chunk(struct engine *e, uint64_t id, engine_chunk_cb cb, void *ctx)
{
    int fd = -1;
    bool replaced = false;
    if (cache_chunk_open(e->c, id, &fd) == 0 && !chunk_current(e, id, fd)) {
        close(fd);
        chunk_discard(e, id, false);
        replaced = true;
    } else if (fd >= 0) {
        cb(ctx, 0, fd, 0);
        pthread_mutex_lock(&e->lock);
        if (e->evict)
            evict_touch(e->evict, id);
        if (!e->stopping)
            read_ahead(e, id);
        pthread_mutex_unlock(&e->lock);
        return;
    }
    struct waiter *w = xmalloc(sizeof *w);
    w->cb = cb;
    w->ctx = ctx;
    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        pthread_mutex_unlock(&e->lock);
        free(w);
        cb(ctx, -EIO, -1, 0);
        return;
    }
    struct chunk_job *job = job_find(e, id);
    if (!job && cache_chunk_exists(e->c, id)) {
        /* Finished between our first look and taking the lock. */
        pthread_mutex_unlock(&e->lock);
        w->next = NULL;
        notify(e, w, id, 0, 0);
        return;
    }
    if (!job) {
        job = job_create(e, id, true);
        job->replaced = replaced;
    } else {
        job_promote(e, job);
    }
    w->next = job->waiters;
    job->waiters = w;
    read_ahead(e, id);
    pthread_mutex_unlock(&e->lock);
}

void engine_chunk_size(struct engine *e, uint64_t id, uint64_t *size, bool *known)
{
    if (e->t->chunk_fixed_size >= 0) {
        *size = (uint64_t)e->t->chunk_fixed_size;
        *known = true;
        return;
    }
    *known = cache_chunk_size(e->c, id, size) == 0;
    if (!*known)
        *size = 0;
}

/* ---- ROI computation (no lock) ---- */

/* Copies the ROI box out of the read-region result (they differ when there is a halo). */
static void *crop_to_box(const struct task *t, size_t r, void *out, const uint64_t *rstart,
                         const uint64_t *rshape)
{
    int nd = t->rois.ndim;
    const uint64_t *b0 = &t->rois.start[r * nd], *b1 = &t->rois.stop[r * nd];
    uint64_t bshape[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
    bool same = true;
    for (int d = 0; d < nd; d++) {
        bshape[d] = b1[d] - b0[d];
        off[d] = b0[d] - rstart[d];
        same = same && bshape[d] == rshape[d];
    }
    if (same)
        return out;
    size_t isz = t->out.dtype.size;
    void *box = xmalloc(nd_prod(bshape, nd) * isz);
    nd_copy(box, bshape, zero, out, rshape, off, bshape, nd, isz);
    free(out);
    return box;
}

/* Runs the processor on ROI r; returns its ROI-box result, or NULL with *rcp and err set. */
static void *compute_roi(struct engine *e, uint32_t r, int *rcp, struct errbuf *err)
{
    const struct task *t = e->t;
    int nd = t->rois.ndim;
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM];
    roi_read_region(&t->rois, r, t->halo, t->in->shape, rstart, rshape);
    size_t n = nd_prod(rshape, nd);
    struct proc_request rq = {
        .roi = r,
        .ndim = nd,
        .start = &t->rois.start[(size_t)r * nd],
        .stop = &t->rois.stop[(size_t)r * nd],
        .in_start = rstart,
        .in_shape = rshape,
        .in_dtype = t->in->dtype,
        .out_dtype = t->out.dtype,
        .in_nbytes = n * t->in->dtype.size,
        .out_nbytes = n * t->out.dtype.size,
    };
    rq.in_dtype.big_endian = rq.out_dtype.big_endian = false;
    void *in = xmalloc(rq.in_nbytes), *out = xmalloc(rq.out_nbytes);
    rq.in = in;
    rq.out = out;
    int rc = task_input_read(t, rstart, rshape, in, err);
    for (int attempt = 0; rc == 0; attempt++) {
        rc = proc_run(t->proc, &rq, err);
        if (rc == 0 || rc == -ECANCELED || attempt >= t->cfg.retries)
            break;
        log_warn("roi %u: attempt %d failed (%s); retrying", r, attempt + 1, err->msg);
    }
    free(in);
    *rcp = rc;
    if (rc < 0) {
        free(out);
        return NULL;
    }
    return crop_to_box(t, r, out, rstart, rshape);
}

/* Publishes ROI r's outcome: ok with its in-memory result (NULL when it lives on disk), or
 * failed with errmsg, which fails every chunk job waiting for it. */
static void roi_finish(struct engine *e, uint32_t r, bool ok, void *result, const char *errmsg)
{
    const struct task *t = e->t;
    int nd = t->rois.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    roi_chunk_range(&t->rois, r, t->out.chunks, c0, c1);
    struct waiter *failed = NULL;

    pthread_mutex_lock(&e->lock);
    struct roi_slot *s = &e->rois[r];
    e->n_running--;
    if (ok) {
        s->state = RS_DONE;
        s->result = result;
        s->on_disk = result == NULL;
        e->n_done++;
    } else {
        s->state = RS_FAILED;
        e->n_failed++;
        record_error(e, r, errmsg);
    }
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    for (;;) {
        struct chunk_job *job = job_find(e, nd_linear(idx, t->grid, nd));
        if (job && ok) {
            if (--job->pending == 0)
                asm_enqueue(e, job);
        } else if (job) {
            struct waiter *w = job_remove(e, job);
            while (w) {
                struct waiter *next = w->next;
                w->next = failed;
                failed = w;
                w = next;
            }
        }
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == c1[d]) {
            idx[d] = c0[d];
            d--;
        }
        if (d < 0)
            break;
    }
    pthread_mutex_unlock(&e->lock);
    notify(e, failed, 0, -EIO, 0);
}

static void log_roi_failure(const struct task *t, uint32_t r, const char *msg)
{
    int nd = t->rois.ndim;
    struct strbuf box = {0};
    for (int d = 0; d < nd; d++)
        sb_printf(&box, "%s%llu:%llu", d ? "," : "",
                  (unsigned long long)t->rois.start[(size_t)r * nd + d],
                  (unsigned long long)t->rois.stop[(size_t)r * nd + d]);
    log_error("roi %u [%s] failed: %s", r, box.buf, msg);
    sb_free(&box);
}

static void run_roi(struct engine *e, uint32_t r)
{
    struct errbuf err = {{0}};
    const struct task *t = e->t;
    bool multi = roi_index_roi_nchunks(t->index, r) > 1;
    /* A ROI spanning chunks may be wanted by another process for another chunk. */
    int lock = multi ? cache_lock_roi(e->c, r) : -1;
    if (multi && lock < 0)
        log_warn("roi %u: cannot take its lock (%s); computing it unlocked", r, strerror(-lock));
    uint64_t sig = engine_roi_sig(e, r); /* taken before reading: a change later shows */
    if (cache_roi_check(e->c, r, sig) == 0) {
        /* Computed by another process, or kept from before an unmount: not again. */
        cache_unlock(lock);
        roi_finish(e, r, true, NULL, NULL);
        return;
    }
    int rc = 0;
    void *result = compute_roi(e, r, &rc, &err);
    bool ok = result != NULL;
    if (rc == -ECANCELED) {
        /* Stopped by an unmount or an interrupted warm: not a failure, just not done. */
        cache_unlock(lock);
        pthread_mutex_lock(&e->lock);
        e->rois[r].state = RS_IDLE;
        e->n_running--;
        pthread_mutex_unlock(&e->lock);
        return;
    }
    if (ok && multi) {
        /* Shared by several chunks that may be read far apart: keep it on disk. */
        int rc = cache_roi_write(e->c, r, result, engine_roi_box_nbytes(t, r), sig);
        free(result);
        result = NULL;
        if (rc < 0) {
            ok = false;
            err_set(&err, rc, "cannot store the result in the cache: %s", strerror(-rc));
        }
    }
    cache_unlock(lock);
    if (!ok)
        log_roi_failure(t, r, err.msg);
    roi_finish(e, r, ok, result, err.msg);
}

/* ---- chunk assembly ---- */

static void run_assembly(struct engine *e, struct chunk_job *job)
{
    const struct task *t = e->t;
    struct errbuf err = {{0}};
    void *data = NULL;
    size_t len = 0;
    uint32_t bad_roi = UINT32_MAX;
    uint64_t id = job->id;
    int rc = 0;
    if (!job->cached_already) {
        uint64_t sig = engine_chunk_signature(e, id); /* before reading: a change later shows */
        rc = engine_assemble(e, job, &data, &len, &bad_roi, &err);
        if (rc == 0 && (rc = cache_chunk_write(e->c, id, data, len, sig)) < 0)
            err_set(&err, rc, "cannot write it to the cache: %s", strerror(-rc));
    }
    free(data);
    if (rc == -ENOENT && bad_roi != UINT32_MAX && job->attempts < 3) {
        /* A stored ROI result vanished (its cache file was removed): compute that ROI
         * again and assemble once more, rather than fail the reader. */
        log_warn("chunk %llu: %s; computing the ROI again", (unsigned long long)id, err.msg);
        pthread_mutex_lock(&e->lock);
        job->attempts++;
        roi_forget(e, bad_roi);
        if (want_roi(e, bad_roi, job->demanded ? PRIO_DEMAND : PRIO_AHEAD))
            job->pending++;
        else
            asm_enqueue(e, job);
        pthread_mutex_unlock(&e->lock);
        return;
    }
    if (rc < 0)
        log_error("chunk %llu failed: %s", (unsigned long long)id, err.msg);

    size_t nrm = 0, n = 0;
    uint32_t *remove = NULL;
    const uint32_t *rois = job->k >= 0 ? roi_index_rois(t->index, (size_t)job->k, &n) : NULL;
    pthread_mutex_lock(&e->lock);
    uint64_t *victims = NULL;
    size_t nvictims = 0;
    if (rc == 0) {
        e->n_cached++;
        if (e->evict && !job->cached_already) {
            evict_add(e->evict, id, len);
            nvictims = evict_victims(e->evict, id, &victims);
        }
        remove = xmalloc((n ? n : 1) * sizeof *remove);
        for (size_t i = 0; i < n; i++) {
            struct roi_slot *s = &e->rois[rois[i]];
            if (s->remaining > 0 && --s->remaining == 0) {
                free(s->result);
                s->result = NULL;
                if (s->on_disk)
                    remove[nrm++] = rois[i];
                s->on_disk = false;
            }
        }
    } else if (bad_roi != UINT32_MAX) {
        roi_forget(e, bad_roi); /* its stored result vanished: compute it again */
    }
    int flags = ENGINE_COMPUTED | (job->replaced ? ENGINE_REPLACED : 0);
    struct waiter *w = job_remove(e, job);
    pthread_mutex_unlock(&e->lock);
    for (size_t i = 0; i < nrm; i++)
        cache_roi_remove(e->c, remove[i]);
    free(remove);
    /* Evicted before the readers hear of this chunk, so that the cache never holds more than
     * the limit once a reader has its data. */
    for (size_t i = 0; i < nvictims; i++)
        chunk_discard(e, victims[i], true);
    free(victims);
    notify(e, w, id, rc == 0 ? 0 : -EIO, flags);
}

/* ---- the compute pool ---- */

static bool pop_runnable(struct engine *e, uint32_t *r)
{
    while (queue_pop(&e->demand, r) || queue_pop(&e->ahead, r))
        if (e->rois[*r].state == RS_QUEUED)
            return true;
    return false;
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
            e->rois[r].state = RS_RUNNING;
            e->n_running++;
            pthread_mutex_unlock(&e->lock);
            run_roi(e, r);
            pthread_mutex_lock(&e->lock);
            continue;
        }
        pthread_cond_wait(&e->work_cv, &e->lock);
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

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
    int64_t k = roi_index_find(e->t->index, id);
    if (k < 0)
        return;
    size_t n;
    const uint32_t *rois = roi_index_rois(e->t->index, (size_t)k, &n);
    for (size_t i = 0; i < n; i++)
        if (e->rois[rois[i]].remaining > 0)
            e->rois[rois[i]].remaining--;
}

static void scan_stored_roi(void *ctx, uint64_t r)
{
    struct engine *e = ctx;
    if (r >= e->t->rois.n)
        return;
    struct roi_slot *s = &e->rois[r];
    if (s->remaining == 0) {
        cache_roi_remove(e->c, r); /* every chunk it touches is cached: no longer needed */
        return;
    }
    s->state = RS_DONE;
    s->on_disk = true;
    e->n_done++;
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
    e->rois = xcalloc(t->rois.n, sizeof *e->rois);
    for (size_t r = 0; r < t->rois.n; r++)
        e->rois[r].remaining = roi_index_roi_nchunks(t->index, r);
    if (t->cfg.max_size > 0)
        e->evict = evict_new(t->cfg.max_size);
    /* What a previous mount (or another process) already finished. */
    cache_chunk_each(c, scan_cached_chunk, e);
    for (size_t r = 0; r < t->rois.n; r++)
        if (e->rois[r].remaining == 0) {
            e->rois[r].state = RS_DONE;
            e->n_done++;
        }
    cache_roi_each(c, scan_stored_roi, e);
    if (e->evict) {
        uint64_t *victims;
        size_t nv = evict_settle(e->evict, &victims);
        for (size_t i = 0; i < nv; i++)
            chunk_discard(e, victims[i], true);
        free(victims);
    }
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
            notify(e, job_remove(e, e->jobs[b]), 0, -EIO, 0);
    /* Results finished but not yet assembled survive the unmount on disk. */
    for (size_t r = 0; r < e->t->rois.n; r++) {
        struct roi_slot *s = &e->rois[r];
        if (s->result && s->state == RS_DONE && s->remaining > 0)
            cache_roi_write(e->c, r, s->result, engine_roi_box_nbytes(e->t, r),
                            engine_roi_sig(e, r));
        free(s->result);
    }
    for (size_t i = 0; i < e->nerrors; i++)
        free(e->errors[i].message);
    free(e->rois);
    evict_free(e->evict);
    free(e->demand.buf);
    free(e->ahead.buf);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->remote_cv);
    free(e);
}
