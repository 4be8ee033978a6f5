/* results.c: ROI results in memory and their way into the result store. A result is kept in
 * memory while chunk jobs that will paste it exist (pins); one that only one chunk uses is
 * stored together with the other results of its chunk when the chunk is assembled (one lock
 * and one write for all of them); one left unstored when its jobs went away (a failure) is
 * stored by the next flush, or forgotten when storing fails. Also the sizes of results, and
 * whether a ROI's are small enough to compute in a batch. */
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "engine_internal.h"
#include "jobs.h"
#include "results.h"
#include "../cache/cache.h"

struct roi_result *roi_result_new(struct key128 key, size_t len)
{
    struct roi_result *res = xmalloc(sizeof *res + (len ? len : 1));
    res->refs = 1;
    res->key = key;
    res->len = len;
    res->crc = 0;
    return res;
}

void roi_result_unref(struct roi_result *res)
{
    if (res && --res->refs == 0)
        free(res);
}

/* A result waiting to be stored, with its own reference. */
struct unstored {
    uint32_t roi;
    struct roi_result *res;
    struct unstored *next;
};

void slot_settle(struct engine *e, uint32_t r)
{
    struct roi_slot *s = &e->s.rois[r];
    if (s->pins || !s->result || s->flushing)
        return;
    if (s->state == RS_DONE && !s->stored) {
        /* kept in memory (and reusable) until it is stored */
        struct unstored *u = xmalloc(sizeof *u);
        u->roi = r;
        u->res = s->result;
        u->res->refs++;
        u->next = e->s.unstored;
        e->s.unstored = u;
        s->flushing = true;
        return;
    }
    roi_result_unref(s->result);
    s->result = NULL;
}

void slot_forget(struct engine *e, uint32_t r)
{
    struct roi_slot *s = &e->s.rois[r];
    if (s->state != RS_DONE)
        return;
    roi_result_unref(s->result); /* a store under way holds a reference of its own */
    s->result = NULL;
    s->flushing = false;
    s->state = RS_IDLE;
    e->s.n_unused += s->stored; /* its stored result is no current ROI's any more */
    s->stored = false;
    e->s.n_done--;
}

/* Stores the results res[i] of ROIs rois[i] (each referenced by the caller, and its slot
 * marked flushing) and settles the slots that still hold them (takes the lock). */
static void store_and_settle(struct engine *e, size_t n, const uint32_t *rois,
                             struct roi_result **res)
{
    if (n == 0)
        return;
    struct store_item *items = xmalloc(n * sizeof *items);
    for (size_t i = 0; i < n; i++)
        items[i] = (struct store_item){res[i]->key, res[i]->data, res[i]->len, true, res[i]->crc};
    struct errbuf err = {{0}};
    int rc = store_put_many(cache_store(e->f.c), n, items, e->f.t->out.dtype.size, &err);
    free(items);
    if (rc < 0) /* the chunks waiting have them; later ones compute them again */
        log_error("cannot store %zu ROI result%s: %s", n, n == 1 ? "" : "s", err.msg);
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < n; i++) {
        struct roi_slot *s = &e->s.rois[rois[i]];
        if (s->result == res[i]) {
            s->flushing = false;
            s->stored = rc == 0;
            if (s->pins == 0) {
                if (!s->stored) { /* nobody waits for it: computed again when wanted */
                    s->state = RS_IDLE;
                    e->s.n_done--;
                }
                roi_result_unref(s->result);
                s->result = NULL;
            }
        }
        roi_result_unref(res[i]);
    }
    pthread_mutex_unlock(&e->lock);
}

void engine_store_job_results(struct engine *e, const struct chunk_job *job)
{
    uint32_t *rois = xmalloc((job->nrois ? job->nrois : 1) * sizeof *rois);
    struct roi_result **res = xmalloc((job->nrois ? job->nrois : 1) * sizeof *res);
    size_t n = 0;
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < job->nrois; i++) {
        struct roi_slot *s = &e->s.rois[job->rois[i]];
        if (s->state != RS_DONE || s->stored || !s->result || s->flushing)
            continue;
        s->flushing = true;
        s->result->refs++;
        rois[n] = job->rois[i];
        res[n++] = s->result;
    }
    pthread_mutex_unlock(&e->lock);
    store_and_settle(e, n, rois, res);
    free(rois);
    free(res);
}

void engine_flush_unstored(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    struct unstored *u = e->s.unstored;
    e->s.unstored = NULL;
    pthread_mutex_unlock(&e->lock);
    size_t n = 0;
    for (struct unstored *v = u; v; v = v->next)
        n++;
    if (n == 0)
        return;
    uint32_t *rois = xmalloc(n * sizeof *rois);
    struct roi_result **res = xmalloc(n * sizeof *res);
    for (n = 0; u; n++) {
        struct unstored *next = u->next;
        rois[n] = u->roi;
        res[n] = u->res; /* its reference passes on */
        free(u);
        u = next;
    }
    store_and_settle(e, n, rois, res);
    free(rois);
    free(res);
}

/* ---- sizes ---- */

size_t engine_roi_box_nbytes(const struct task *t, size_t r)
{
    int nd = t->rois.ndim;
    size_t n = t->out.dtype.size;
    for (int d = 0; d < nd; d++)
        n *= t->rois.stop[r * nd + d] - t->rois.start[r * nd + d];
    return n;
}

size_t engine_roi_result_nbytes(const struct task *t, size_t r)
{
    size_t n = engine_roi_box_nbytes(t, r);
    return roi_label(&t->rois, r) ? n + n / t->out.dtype.size : n;
}

bool engine_roi_batchable(const struct engine *e, uint32_t r)
{
    const struct task *t = e->f.t;
    if (!t->proc->ops->run_many || roi_index_roi_nchunks(t->index, r) > 1)
        return false;
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM];
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, rstart, rshape);
    size_t n = nd_prod(rshape, t->rois.ndim);
    return n * (t->in_meta->dtype.size + t->out.dtype.size) <= PROC_BATCH_BYTES;
}
