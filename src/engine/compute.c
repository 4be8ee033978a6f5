/* compute.c: running one ROI on the compute pool: take the result's lock (ROIs that several
 * chunks share may be asked for by other processes), look in the store once more, else read
 * the input, run the processor, and store the result under the key of exactly what was read.
 * No engine lock is held here: e->f.t, e->f.c and e->f.opts never change, and the ROI's state is
 * set under the lock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../codeid.h"
#include "../mask.h"
#include "../nd.h"
#include "engine_internal.h"
#include "compute.h"
#include "jobs.h"
#include "outcome.h"
#include "results.h"
#include "scratch.h"
#include "label_rules.h"
#include "strips.h"
#include "../cache/cache.h"

/* Copies the ROI box out of the read-region result out (they differ when there is a halo). */
static void crop_to_box(const struct task *t, size_t r, const void *out, const uint64_t *rstart,
                        const uint64_t *rshape, struct roi_result *res)
{
    int nd = t->rois.ndim;
    const uint64_t *b0 = &t->rois.start[r * nd], *b1 = &t->rois.stop[r * nd];
    uint64_t bshape[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
    for (int d = 0; d < nd; d++) {
        bshape[d] = b1[d] - b0[d];
        off[d] = b0[d] - rstart[d];
    }
    nd_copy(res->data, bshape, zero, out, rshape, off, bshape, nd, t->out.dtype.size);
}

static void log_roi_failure(const struct task *t, uint32_t r, const char *msg);

/* One ROI being computed: its request, buffers and input signature. res: the result,
 * allocated before the run when the read region is the ROI's box (no halo), so that the
 * processor writes into it and nothing is cropped or copied; scratch: rq.in (and rq.out, when
 * it is not res's) are this thread's scratch buffers (one ROI at a time, not a batch). A masked
 * ROI's result holds its selection after the values: never allocated before the run. */
struct roi_work {
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM], sig;
    struct proc_request rq;
    struct roi_result *res;
    bool scratch;
    uint8_t *sel; /* a masked ROI's selection over mask_region (sstart, sshape) */
    uint64_t sstart[ROIFS_MAX_DIM], sshape[ROIFS_MAX_DIM];
};

/* A masked ROI: reads its selection (the signature of the mask goes into w->sig, as
 * engine_roi_sig_now computes it) and, with mask_input = zero, zeroes the input outside it. */
static int select_roi(const struct task *t, struct roi_work *w, struct errbuf *err)
{
    uint32_t r = (uint32_t)w->rq.roi;
    uint64_t msig;
    engine_mask_region(t, r, w->sstart, w->sshape);
    w->sel = xmalloc(nd_prod(w->sshape, t->rois.ndim) + 1);
    int rc = mask_select(t->mask, w->rq.label, w->sstart, w->sshape, w->sel, &msig, err);
    if (rc < 0)
        return rc;
    w->sig = mask_mix_sig(w->sig, w->rq.label, msig);
    if (mask_zeroes_input(t->mask)) /* the selection covers the read region */
        mask_zero_outside((void *)w->rq.in, w->sel, nd_prod(w->rshape, t->rois.ndim),
                          t->in_meta->dtype.size);
    return 0;
}

/* A masked ROI's result: its values outside the object 0 (so that ids = sequential counts the
 * object's ids only), its selection over the box after the values. */
static void attach_selection(const struct task *t, const struct roi_work *w, struct roi_result *res)
{
    int nd = t->rois.ndim;
    size_t r = w->rq.roi, nbox = engine_roi_box_nbytes(t, r);
    const uint64_t *b0 = &t->rois.start[r * nd], *b1 = &t->rois.stop[r * nd];
    uint64_t bshape[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
    for (int d = 0; d < nd; d++) {
        bshape[d] = b1[d] - b0[d];
        off[d] = b0[d] - w->sstart[d];
    }
    uint8_t *sel = res->data + nbox;
    nd_copy(sel, bshape, zero, w->sel, w->sshape, off, bshape, nd, 1);
    mask_zero_outside(res->data, sel, nbox / t->out.dtype.size, t->out.dtype.size);
}

/* Whether the read region is ROI r's box itself. */
static bool region_is_box(const struct task *t, uint32_t r, const struct roi_work *w)
{
    int nd = t->rois.ndim;
    for (int d = 0; d < nd; d++)
        if (w->rstart[d] != t->rois.start[(size_t)r * nd + d] ||
            w->rstart[d] + w->rshape[d] != t->rois.stop[(size_t)r * nd + d])
            return false;
    return true;
}

static void *work_alloc(const struct roi_work *w, enum scratch_slot slot, size_t n)
{
    return w->scratch ? engine_scratch_get(slot, n) : xmalloc(n ? n : 1);
}

static void work_free(const struct roi_work *w, enum scratch_slot slot, void *p)
{
    if (w->scratch)
        engine_scratch_put(slot, p);
    else
        free(p);
}

/* Sets up ROI r's request and reads its input: 0, or the read's error in err. */
static int prepare_roi(struct engine *e, uint32_t r, struct roi_work *w, bool scratch,
                       struct errbuf *err)
{
    const struct task *t = e->f.t;
    int nd = t->rois.ndim;
    w->sig = 0;
    w->scratch = scratch;
    w->res = NULL;
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, w->rstart, w->rshape);
    size_t n = nd_prod(w->rshape, nd);
    w->rq = (struct proc_request){
        .roi = r,
        .ndim = nd,
        .start = &t->rois.start[(size_t)r * nd],
        .stop = &t->rois.stop[(size_t)r * nd],
        .in_start = w->rstart,
        .in_shape = w->rshape,
        .in_dtype = t->in_meta->dtype,
        .out_dtype = t->out.dtype,
        .in_nbytes = n * t->in_meta->dtype.size,
        .out_nbytes = n * t->out.dtype.size,
        .label = roi_label(&t->rois, r),
    };
    w->rq.in_dtype.big_endian = w->rq.out_dtype.big_endian = false;
    w->rq.in = work_alloc(w, SCRATCH_IN, w->rq.in_nbytes);
    w->sel = NULL;
    if (!w->rq.label && region_is_box(t, r, w)) {
        w->res = roi_result_new((struct key128){0, 0}, w->rq.out_nbytes); /* named when done */
        w->rq.out = w->res->data;
    } else {
        w->rq.out = work_alloc(w, SCRATCH_OUT, w->rq.out_nbytes);
    }
    /* The signature comes from the files as they were read: a change during the read or the
     * computation makes a key that the input as it is then does not match. */
    struct engine_reader me = {.thread = pthread_self()};
    pthread_mutex_lock(&e->lock);
    me.next = e->s.readers;
    e->s.readers = &me;
    pthread_mutex_unlock(&e->lock);
    int rc = task_input_read(t, w->rstart, w->rshape, (void *)w->rq.in, &w->sig, err);
    if (rc == 0 && w->rq.label) /* its mask is read too */
        rc = select_roi(t, w, err);
    pthread_mutex_lock(&e->lock);
    struct engine_reader **p = &e->s.readers;
    while (*p != &me)
        p = &(*p)->next;
    *p = me.next;
    if (rc < 0 && e->s.stopping) /* a read the stop interrupted is no failure of the ROI */
        rc = -ECANCELED;
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Retries a failed run as configured. */
static int retry_roi(struct engine *e, struct roi_work *w, int rc, struct errbuf *err)
{
    for (int attempt = 0; rc != 0 && rc != -ECANCELED && attempt < e->f.opts.retries; attempt++) {
        log_warn("roi %zu: attempt %d failed (%s); retrying", w->rq.roi, attempt + 1, err->msg);
        rc = proc_run(e->f.t->proc, &w->rq, err);
    }
    return rc;
}

/* A run's rc once its code has been looked at again (code_files_end): a change of the
 * processor's files during the run fails it, so that its result is never kept under the
 * identity of code that may not have made it (docs/design.md). */
static int code_after(const struct engine *e, uint64_t gen, int rc, struct errbuf *err)
{
    struct errbuf cerr;
    if (code_files_end(e->f.t->code, gen, &cerr) < 0 && rc != -ECANCELED) {
        *err = cerr;
        return -EIO;
    }
    return rc;
}

/* The result named by what was read (*rcp 0), or NULL with *rcp and err set; frees the
 * buffers. */
static struct roi_result *conclude_roi(struct engine *e, struct roi_work *w, int *rcp,
                                       struct errbuf *err)
{
    const struct task *t = e->f.t;
    uint32_t r = (uint32_t)w->rq.roi;
    struct roi_result *res = NULL;
    work_free(w, SCRATCH_IN, (void *)w->rq.in);
    if (*rcp == 0) /* [labels]: a negative id, or one beyond block, fails the ROI */
        *rcp = engine_labels_check(t, w->rq.out, nd_prod(w->rshape, t->rois.ndim), err);
    if (*rcp == 0) {
        struct key128 key = engine_roi_key(e->f.t, r, w->sig);
        res = w->res ? w->res : roi_result_new(key, engine_roi_result_nbytes(t, r));
        res->key = key; /* not yet published: no one else holds it */
        /* stitch = iou: the overlap zones of the whole result, halo included */
        engine_stitch_strips(e, r, w->rq.out, w->rstart, w->rshape, res->key);
        if (!w->res)
            crop_to_box(t, r, w->rq.out, w->rstart, w->rshape, res);
        if (w->sel)
            attach_selection(t, w, res);
        res->crc = zarr_crc32c(0, res->data, res->len); /* now, while it is in the cache */
    } else {
        roi_result_unref(w->res);
    }
    if (!w->res)
        work_free(w, SCRATCH_OUT, w->rq.out);
    free(w->sel);
    return res;
}

/* The start of a computation whose time readahead = auto wants (now_monotonic()), or 0: no
 * clock is read for the other settings. */
static double roi_time_start(const struct engine *e)
{
    return e->f.opts.readahead == ENGINE_READAHEAD_AUTO ? now_monotonic() : 0;
}

/* Notes that n ROIs took the time since t0 (roi_time_start) in a moving average over about 8
 * samples. */
static void note_roi_time(struct engine *e, double t0, size_t n)
{
    if (t0 == 0 || n == 0)
        return;
    double dt = now_monotonic() - t0;
    if (dt <= 0)
        return;
    uint64_t sample = (uint64_t)(dt * 1e9 / (double)n);
    uint64_t old = atomic_load_explicit(&e->roi_ns, memory_order_relaxed);
    uint64_t avg = old ? old - old / 8 + sample / 8 : sample;
    atomic_store_explicit(&e->roi_ns, avg ? avg : 1, memory_order_relaxed);
}

/* Runs the processor on ROI r; its result named by what was read, or NULL with *rcp and err
 * set. */
static struct roi_result *compute_roi(struct engine *e, uint32_t r, int *rcp, struct errbuf *err)
{
    double t0 = roi_time_start(e);
    struct roi_work w;
    uint64_t gen;
    int rc = prepare_roi(e, r, &w, true, err);
    if (rc == 0 && (rc = code_files_begin(e->f.t->code, &gen, err)) == 0)
        rc = code_after(e, gen, retry_roi(e, &w, proc_run(e->f.t->proc, &w.rq, err), err), err);
    *rcp = rc;
    struct roi_result *res = conclude_roi(e, &w, rcp, err);
    if (res)
        note_roi_time(e, t0, 1);
    return res;
}

/* A ROI stopped by an unmount or an interrupted warm: not a failure, just not done. */
static void roi_cancelled(struct engine *e, uint32_t r)
{
    pthread_mutex_lock(&e->lock);
    e->s.rois[r].state = RS_IDLE;
    e->s.n_running--;
    pthread_mutex_unlock(&e->lock);
}

void engine_run_rois(struct engine *e, const uint32_t *rs, size_t n)
{
    double t0 = roi_time_start(e);
    struct roi_work *w = xcalloc(n, sizeof *w);
    struct errbuf *errs = xcalloc(n, sizeof *errs);
    int *rcs = xcalloc(n, sizeof *rcs);
    struct proc_request *rqs = xcalloc(n, sizeof *rqs);
    size_t *which = xcalloc(n, sizeof *which), m = 0;
    for (size_t i = 0; i < n; i++)
        if ((rcs[i] = prepare_roi(e, rs[i], &w[i], false, &errs[i])) == 0) {
            rqs[m] = w[i].rq;
            which[m++] = i;
        }
    uint64_t gen;
    struct errbuf cerr;
    if (m && code_files_begin(e->f.t->code, &gen, &cerr) < 0) {
        for (size_t k = 0; k < m; k++) {
            rcs[which[k]] = -EIO;
            errs[which[k]] = cerr;
        }
    } else if (m) {
        int *mrc = xcalloc(m, sizeof *mrc);
        struct errbuf *merr = xcalloc(m, sizeof *merr);
        proc_run_many(e->f.t->proc, m, rqs, mrc, merr);
        for (size_t k = 0; k < m; k++) {
            size_t i = which[k];
            errs[i] = merr[k];
            rcs[i] = retry_roi(e, &w[i], mrc[k], &errs[i]);
        }
        bool changed = code_files_end(e->f.t->code, gen, &cerr) < 0;
        for (size_t k = 0; k < m && changed; k++)
            if (rcs[which[k]] != -ECANCELED) {
                rcs[which[k]] = -EIO;
                errs[which[k]] = cerr;
            }
        free(mrc);
        free(merr);
        note_roi_time(e, t0, m);
    }
    for (size_t i = 0; i < n; i++) {
        struct roi_result *res = conclude_roi(e, &w[i], &rcs[i], &errs[i]);
        if (rcs[i] == -ECANCELED) {
            roi_cancelled(e, rs[i]);
            continue;
        }
        if (!res)
            log_roi_failure(e->f.t, rs[i], errs[i].msg);
        engine_roi_finish(e, rs[i], res, false, false, errs[i].msg);
    }
    free(which);
    free(rqs);
    free(rcs);
    free(errs);
    free(w);
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

/* fresh: compute even when a result named want is stored (stitching lost its strips). */
static void run_roi(struct engine *e, uint32_t r, struct key128 want, bool fresh)
{
    struct errbuf err = {{0}};
    const struct task *t = e->f.t;
    struct store *st = cache_store(e->f.c);
    /* A ROI that lies in one chunk is only ever computed under that chunk's lock, whose
     * holder looked in the store when it took it. One that several chunks share may be asked
     * for by another process for another chunk: its own lock, and a fresh look. */
    bool shared = roi_index_roi_nchunks(t->index, r) > 1 || engine_labels_locked(t);
    int lock = -1;
    if (shared) {
        lock = cache_lock_result(e->f.c, want);
        if (lock < 0)
            log_warn("roi %u: cannot take its lock (%s); computing it unlocked", r,
                     strerror(-lock));
        store_refresh(st);
        if (!fresh && store_has(st, want)) {
            cache_unlock(e->f.c, lock);
            engine_roi_finish(e, r, roi_result_new(want, 0), true, true, NULL);
            return;
        }
    }
    int rc = 0;
    struct roi_result *res = compute_roi(e, r, &rc, &err);
    if (rc == -ECANCELED) {
        cache_unlock(e->f.c, lock);
        roi_cancelled(e, r);
        return;
    }
    bool stored = false;
    if (res && shared) {
        /* Stored now, under its lock: another process may be waiting for it. A ROI of one
         * chunk is stored with the chunk's other results when the chunk is assembled. */
        struct errbuf serr = {{0}};
        struct store_item it = {res->key, res->data, res->len, true, res->crc};
        int sr = store_put_many(st, 1, &it, t->out.dtype.size, &serr);
        if (sr < 0) /* it still serves the chunks waiting for it; later ones compute it again */
            log_error("roi %u: cannot store its result: %s", r, serr.msg);
        stored = sr == 0;
    }
    cache_unlock(e->f.c, lock);
    if (!res)
        log_roi_failure(t, r, err.msg);
    engine_roi_finish(e, r, res, stored, false, err.msg);
}

void engine_run_roi(struct engine *e, uint32_t r, struct key128 want)
{
    run_roi(e, r, want, false);
}

void engine_run_roi_fresh(struct engine *e, uint32_t r, struct key128 want)
{
    run_roi(e, r, want, true);
}

/* ---- results other results depend on ([labels]: counts, strips) ---- */

static void sleep_briefly(void)
{
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Whether ROI s's input is now what made the result named made (looked at unlocked). */
static bool made_from_input_now(struct engine *e, uint32_t s, struct key128 made)
{
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    struct key128 now = engine_roi_key(e->f.t, s, engine_roi_sig_now(e->f.t, s, memo));
    zarr_sigmemo_free(memo);
    return key_eq(now, made);
}

int engine_roi_ensure(struct engine *e, uint32_t s, struct key128 *k, bool fresh,
                      struct errbuf *err)
{
    bool looked = false;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        struct roi_slot *sl = &e->s.rois[s];
        bool stopping = e->s.stopping;
        if (!fresh && !looked && sl->state == RS_DONE && !key_eq(sl->key, *k)) {
            /* Done from other input than *k names: input that changed since *k was taken,
             * or that changed because it was read (a chunk of another roifs mount, whose size
             * and mtime change when it is computed: docs/fractal.md). Kept when it is of the
             * input as it is now. */
            struct key128 made = sl->key;
            pthread_mutex_unlock(&e->lock);
            looked = true;
            if (made_from_input_now(e, s, made))
                *k = made;
            continue;
        }
        if (sl->state == RS_DONE && sl->pins == 0 && (fresh || !key_eq(sl->key, *k)))
            slot_forget(e, s); /* made from older input, or to be made again */
        enum roi_state state = sl->state;
        if (fresh && state == RS_DONE && sl->pins) { /* being pasted: not now */
            pthread_mutex_unlock(&e->lock);
            return err_set(err, -EAGAIN, "roi %u: its result is in use; try again", s);
        }
        /* within [process] retry_after of its failure a ROI is not tried again, also not for
         * the ids of another chunk (engine_failure_stands: the window alone, no open's start) */
        if (state == RS_FAILED && engine_failure_stands(e, s, INT64_MAX)) {
            pthread_mutex_unlock(&e->lock);
            return err_set(err, -EIO,
                           "roi %u, which the ids of this chunk depend on, failed; not tried "
                           "again within [process] retry_after",
                           s);
        }
        bool have = state == RS_DONE && key_eq(sl->key, *k) && !fresh;
        bool mine = !have && !stopping && state != RS_RUNNING && state != RS_DONE;
        if (mine) {
            if (state == RS_FAILED)
                e->s.n_failed--;
            sl->state = RS_RUNNING; /* ours: a queued entry is skipped by the pool */
            sl->key = *k;
            e->s.n_running++;
        }
        pthread_mutex_unlock(&e->lock);
        if (have)
            return 0;
        if (stopping)
            return err_set(err, -ECANCELED, "stopping");
        if (!mine) { /* someone else's: wait for it */
            sleep_briefly();
            continue;
        }
        /* under its result lock, and stored at once (engine_labels_locked) */
        if (fresh)
            engine_run_roi_fresh(e, s, *k);
        else
            engine_run_roi(e, s, *k);
        fresh = false;
        pthread_mutex_lock(&e->lock);
        state = e->s.rois[s].state;
        struct key128 made = e->s.rois[s].key;
        pthread_mutex_unlock(&e->lock);
        if (state == RS_FAILED)
            return err_set(err, -EIO, "roi %u, which the ids of this chunk depend on, failed", s);
        if (state == RS_IDLE)
            return err_set(err, -ECANCELED, "stopping");
        if (state == RS_DONE) {
            /* Named by the input as this thread read it, which may be newer than *k (see
             * above): asking for *k again would compute it again, without end when reading
             * it is what changes its input. */
            *k = made;
            return 0;
        }
    }
}
