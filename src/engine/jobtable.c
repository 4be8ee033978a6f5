/* jobtable.c: the table of an engine's chunk jobs, and what a ROI's outcome does to them: the
 * jobs waiting for it get its result's key (or fail, and their readers get EIO), and a job
 * that waits for nothing more is queued for assembly; the answers to a job's waiters. Below
 * jobs.c (which creates and assembles jobs) and compute.c (which hands over outcomes); all of
 * it under the engine's lock but engine_notify. */
#include "engine_internal.h"
#include "jobs.h"
#include "outcome.h"
#include "results.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../nd.h"

void engine_job_add(struct engine *e, struct chunk_job *job)
{
    *(struct chunk_job **)map_put(&e->s.jobs, job->id, 0, NULL) = job;
}

struct chunk_job *engine_job_find(struct engine *e, uint64_t id)
{
    return map_get_ptr(&e->s.jobs, id, 0);
}

size_t engine_job_index_of(const struct chunk_job *job, uint32_t r)
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
struct waiter *engine_job_remove(struct engine *e, struct chunk_job *job)
{
    map_del(&e->s.jobs, job->id, 0, NULL);
    e->s.jobs_ended++;
    if (job->locked_elsewhere)
        e->s.n_locked_elsewhere--;
    cache_unlock(e->f.c, job->lock);
    if (job->fd >= 0)
        close(job->fd); /* its waiters failed before it was served */
    if (job->scheduled)
        for (size_t i = 0; i < job->nrois; i++) {
            e->s.rois[job->rois[i]].pins--;
            slot_settle(e, job->rois[i]);
        }
    struct waiter *w = job->waiters;
    chunk_keys_free(&job->want);
    free(job->use);
    free(job->waits);
    free(job->recheck);
    free(job);
    pthread_cond_broadcast(&e->done_cv);
    return w;
}

void engine_asm_enqueue(struct engine *e, struct chunk_job *job)
{
    job->qnext = NULL;
    if (e->s.asm_tail)
        e->s.asm_tail->qnext = job;
    else
        e->s.asm_head = job;
    e->s.asm_tail = job;
    pthread_cond_signal(&e->work_cv);
}

void engine_record_error(struct engine *e, size_t roi, const char *msg)
{
    struct engine_error *slot;
    if (e->s.nerrors < ENGINE_MAX_ERRORS) {
        slot = &e->s.errors[(e->s.err_head + e->s.nerrors) % ENGINE_MAX_ERRORS];
        e->s.nerrors++;
    } else {
        slot = &e->s.errors[e->s.err_head];
        free(slot->message);
        e->s.err_head = (e->s.err_head + 1) % ENGINE_MAX_ERRORS;
    }
    slot->roi = roi;
    slot->message = xstrdup(msg);
}

/* Waiters get descriptors of the file this engine made or checked, never one opened again by
 * name: that one may have been evicted or replaced by another process meanwhile. */
void engine_notify(struct engine *e, struct waiter *w, int fd, int err, int flags)
{
    (void)e;
    if (!w && fd >= 0)
        close(fd);
    while (w) {
        struct waiter *next = w->next;
        int mine = -1, r = err;
        if (r == 0 && (mine = next ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : fd) < 0) {
            log_error("cannot hand a chunk file to a reader: %s", strerror(errno));
            r = -EIO;
        }
        w->cb(w->ctx, r, mine, flags);
        free(w);
        w = next;
    }
}

/* ---- ROI outcomes ---- */

void engine_roi_finish(struct engine *e, uint32_t r, struct roi_result *res, bool stored,
                       bool reused, const char *errmsg)
{
    const struct task *t = e->f.t;
    int nd = t->rois.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    roi_chunk_range(&t->rois, r, t->out.chunks, c0, c1);
    struct waiter *failed = NULL;

    pthread_mutex_lock(&e->lock);
    struct roi_slot *s = &e->s.rois[r];
    e->s.n_running--;
    roi_result_unref(s->result); /* none, normally: it was forgotten or never made */
    s->result = NULL;
    s->flushing = false;
    if (res) {
        s->state = RS_DONE;
        s->key = res->key;
        s->stored = stored;
        e->s.n_done++;
        e->s.n_reused += reused;
        e->s.n_computed += !reused;
        if (stored) /* shared by chunks read apart: pasted from the store, memory stays bounded */
            roi_result_unref(res);
        else
            s->result = res;
    } else {
        s->state = RS_FAILED;
        s->failed_ns = clock_ns(CLOCK_MONOTONIC);
        e->s.n_failed++;
        engine_record_error(e, r, errmsg);
    }
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    do {
        struct chunk_job *job = engine_job_find(e, nd_linear(idx, t->grid, nd));
        size_t i = job && job->scheduled ? engine_job_index_of(job, r) : 0;
        if (job && job->scheduled && i < job->nrois && job->waits[i]) {
            job->waits[i] = 0;
            if (res) {
                job->use[i] = s->key; /* what it was made from, maybe newer than wanted */
            } else if (!job->failed) {
                /* Its readers fail now, but the job, and the chunk's lock, stay until the
                 * other ROIs it asked for are done and stored (engine_run_assembly): released
                 * now, another process would take the lock and compute them again. */
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
                engine_asm_enqueue(e, job);
        }
    } while (nd_next_index(idx, c0, c1, nd));
    slot_settle(e, r);
    pthread_mutex_unlock(&e->lock);
    engine_flush_unstored(e);
    engine_notify(e, failed, -1, -EIO, 0);
}

bool engine_failure_stands(struct engine *e, uint32_t r, int64_t began)
{
    const struct roi_slot *s = &e->s.rois[r];
    if (s->state != RS_FAILED)
        return false;
    if (s->failed_ns >= began)
        return true;
    double after = e->f.opts.retry_after; /* seconds; as a double, no overflow */
    return after > 0 && (double)(clock_ns(CLOCK_MONOTONIC) - s->failed_ns) < after * 1e9;
}

int64_t engine_retry_at_ns(struct engine *e, uint32_t r)
{
    double after = e->f.opts.retry_after > 0 ? e->f.opts.retry_after * 1e9 : 0;
    int64_t wait = after > 9e18 ? INT64_MAX / 2 : (int64_t)after;
    return clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC) + e->s.rois[r].failed_ns + wait;
}
