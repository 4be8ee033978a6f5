/* labels.c: the engine's side of [labels] (SPEC §9): validation of results, the part of a
 * chunk's key that its ids depend on, and the id mapping applied when a ROI's result is
 * pasted. ids = sequential needs |D_s| for every earlier ROI s: a count record (8 bytes)
 * stored beside each result under a key derived from the result's, made from the stored
 * result when missing, so that a chunk reads earlier ROIs' counts, not their pixels. */
#include "labels.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../labels/ids.h"
#include "../labels/stitch.h"
#include "../nd.h"
#include "engine_internal.h"
#include "gc.h"
#include "store.h"

/* Counts known to this process, by ROI (valid for the result key noted). */
struct labels_counts {
    pthread_mutex_t lock;
    struct key128 *key;
    uint64_t *count;
    uint8_t *known;
};

struct labels_paste {
    const struct task *t;
    const uint32_t *rois;
    uint64_t *offset;    /* sequential: per job ROI, the ids of every earlier ROI */
    const uint64_t *map; /* stitch: (id, representative) pairs, sorted */
    size_t nmap;
};

static bool mapping(const struct task *t)
{
    return t->cfg.labels && t->cfg.label_ids != LABEL_IDS_KEEP;
}

static bool sequential(const struct task *t)
{
    return mapping(t) && t->cfg.label_ids == LABEL_IDS_SEQUENTIAL;
}

int engine_labels_check(const struct task *t, const void *out, size_t n, struct errbuf *err)
{
    /* a derived array (a pyramid level) has no [labels]: its cfg is zeroed */
    return labels_check_values(&t->cfg, &t->out.dtype, out, n, err);
}

static bool stitching(const struct task *t)
{
    return mapping(t) && t->cfg.label_stitch == LABEL_STITCH_IOU;
}

bool engine_labels_locked(const struct task *t)
{
    return sequential(t) || stitching(t);
}

/* The ROIs touching chunk id and the largest of them (index order is ROI order). */
static const uint32_t *chunk_rois(const struct task *t, uint64_t id, size_t *n)
{
    int64_t k = roi_index_find(t->index, id);
    *n = 0;
    return k >= 0 ? roi_index_rois(t->index, (size_t)k, n) : NULL;
}

static uint32_t last_roi(const uint32_t *rois, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++)
        m = rois[i] > m ? rois[i] : m;
    return m;
}

void engine_labels_chunk_key(const struct task *t, uint64_t id, struct keyhash *h)
{
    if (!mapping(t))
        return;
    size_t n;
    const uint32_t *rois = chunk_rois(t, id, &n);
    key_add_str(h, t->cfg.label_ids == LABEL_IDS_UNIQUE ? "labels unique" : "labels sequential");
    key_add_u64(h, t->cfg.label_block);
    for (size_t i = 0; i < n; i++) /* unique: the ids depend on each ROI's index */
        key_add_u64(h, rois[i]);
    if (stitching(t)) { /* on every ROI's result, through the mapping */
        struct zarr_sigmemo *memo = zarr_sigmemo_new();
        key_add_key(h, engine_stitch_map_key(t, memo));
        zarr_sigmemo_free(memo);
    }
    if (!sequential(t) || n == 0)
        return;
    /* sequential: on every earlier ROI's result, as the input is now */
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    uint32_t last = last_roi(rois, n);
    for (uint32_t s = 0; s < last; s++)
        key_add_key(h, engine_roi_key(t, s, engine_roi_sig_now(t, s, memo)));
    zarr_sigmemo_free(memo);
}

static struct key128 count_key(struct key128 result)
{
    struct keyhash h;
    key_init(&h, "roifs label count");
    key_add_key(&h, result);
    return key_final(&h);
}

static struct labels_counts *counts_of(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (!e->label_counts) {
        struct labels_counts *c = xcalloc(1, sizeof *c);
        size_t n = e->t->rois.n ? e->t->rois.n : 1;
        pthread_mutex_init(&c->lock, NULL);
        c->key = xcalloc(n, sizeof *c->key);
        c->count = xcalloc(n, sizeof *c->count);
        c->known = xcalloc(n, 1);
        e->label_counts = c;
    }
    pthread_mutex_unlock(&e->lock);
    return e->label_counts;
}

/* |D_s| from ROI s's box result: in memory when a slot holds it, else from the store. */
static int count_from_result(struct engine *e, uint32_t s, struct key128 k, uint64_t *count)
{
    const struct task *t = e->t;
    size_t n = engine_roi_result_nbytes(t, s);
    pthread_mutex_lock(&e->lock);
    struct roi_result *res = e->rois[s].result;
    if (res && key_eq(res->key, k) && res->len == n)
        res->refs++;
    else
        res = NULL;
    pthread_mutex_unlock(&e->lock);
    void *tmp = NULL;
    const void *data = res ? res->data : NULL;
    if (!res) {
        data = tmp = xmalloc(n ? n : 1);
        if (store_get(cache_store(e->c), k, tmp, n) < 0) {
            free(tmp);
            return -ENOENT;
        }
    }
    uint64_t *vals;
    /* a masked ROI's values outside its object are 0 (compute.c): D_s is its object's ids */
    *count = labels_distinct(&t->out.dtype, data, engine_roi_box_nbytes(t, s) / t->out.dtype.size,
                             &vals);
    free(vals);
    free(tmp);
    roi_result_unref(res);
    return 0;
}

static void sleep_briefly(void)
{
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Whether ROI s's input is now what made the result named made (looked at unlocked). */
static bool made_from_input_now(struct engine *e, uint32_t s, struct key128 made)
{
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    struct key128 now = engine_roi_key(e->t, s, engine_roi_sig_now(e->t, s, memo));
    zarr_sigmemo_free(memo);
    return key_eq(now, made);
}

int engine_labels_ensure(struct engine *e, uint32_t s, struct key128 *k, bool fresh,
                         struct errbuf *err)
{
    bool looked = false;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        struct roi_slot *sl = &e->rois[s];
        bool stopping = e->stopping;
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
        bool have = state == RS_DONE && key_eq(sl->key, *k) && !fresh;
        bool mine = !have && !stopping && state != RS_RUNNING && state != RS_DONE;
        if (mine) {
            if (state == RS_FAILED)
                e->n_failed--;
            sl->state = RS_RUNNING; /* ours: a queued entry is skipped by the pool */
            sl->key = *k;
            e->n_running++;
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
        state = e->rois[s].state;
        struct key128 made = e->rois[s].key;
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

/* |D_s| of ROI s's result named k, computing it first when needed. */
static int count_roi(struct engine *e, uint32_t s, struct key128 *k, uint64_t *count,
                     struct errbuf *err)
{
    for (int attempt = 0;; attempt++) {
        int rc = engine_labels_ensure(e, s, k, false, err);
        if (rc < 0)
            return rc;
        if (count_from_result(e, s, *k, count) == 0)
            return 0;
        if (attempt == 3)
            return err_set(err, -EIO, "roi %u: its result cannot be read from the store", s);
        pthread_mutex_lock(&e->lock); /* gone from the store: compute it again */
        if (e->rois[s].state == RS_DONE && key_eq(e->rois[s].key, *k) && !e->rois[s].pins)
            slot_forget(e, s);
        pthread_mutex_unlock(&e->lock);
        store_refresh(cache_store(e->c));
    }
}

/* |D_s| for ROI s as the input is now: known here, a stored count record, or counted from
 * its result (then recorded). */
static int roi_count(struct engine *e, struct labels_counts *c, uint32_t s, struct key128 k,
                     uint64_t *count, struct errbuf *err)
{
    pthread_mutex_lock(&c->lock);
    bool known = c->known[s] && key_eq(c->key[s], k);
    *count = c->count[s];
    pthread_mutex_unlock(&c->lock);
    if (known)
        return 0;
    struct store *st = cache_store(e->c);
    struct key128 ck = count_key(k);
    if (!store_has(st, ck))
        store_refresh(st);
    if (store_get(st, ck, count, sizeof *count) != 0) {
        int rc = count_roi(e, s, &k, count, err); /* k: what the result is made from */
        if (rc < 0)
            return rc;
        ck = count_key(k);
        struct errbuf serr = {{0}};
        if (store_put(st, ck, count, sizeof *count, sizeof *count, &serr) < 0)
            log_warn("roi %u: cannot store its id count: %s", s, serr.msg);
    }
    pthread_mutex_lock(&c->lock);
    c->key[s] = k;
    c->count[s] = *count;
    c->known[s] = 1;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int engine_labels_prepare(struct engine *e, const struct chunk_job *job, struct labels_paste **lp,
                          struct errbuf *err)
{
    const struct task *t = e->t;
    *lp = NULL;
    if (!mapping(t) || job->nrois == 0)
        return 0;
    struct labels_paste *p = xcalloc(1, sizeof *p);
    p->t = t;
    p->rois = job->rois;
    *lp = p;
    if (stitching(t))
        return engine_stitch_mapping(e, &p->map, &p->nmap, err);
    if (!sequential(t))
        return 0;
    uint32_t last = last_roi(job->rois, job->nrois);
    uint64_t *before = xcalloc((size_t)last + 1, sizeof *before); /* ids before ROI s */
    struct labels_counts *c = counts_of(e);
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    int rc = 0;
    for (uint32_t s = 0; s < last && rc == 0; s++) {
        uint64_t n = 0;
        struct key128 k = engine_roi_key(t, s, engine_roi_sig_now(t, s, memo));
        rc = roi_count(e, c, s, k, &n, err);
        before[s + 1] = before[s] + n;
    }
    zarr_sigmemo_free(memo);
    p->offset = xcalloc(job->nrois, sizeof *p->offset);
    for (size_t i = 0; i < job->nrois && rc == 0; i++)
        p->offset[i] = before[job->rois[i]];
    free(before);
    return rc;
}

static uint64_t dtype_max(const struct dtype *dt)
{
    unsigned bits = dt->size * 8 - (dt->kind == DT_INT);
    return bits >= 64 ? UINT64_MAX : (1ULL << bits) - 1;
}

/* Calls map on each innermost row of the box [off, off + ext) of the chunk buffer. */
static void each_row(const struct labels_paste *lp, void *buf, const uint64_t *off,
                     const uint64_t *ext, size_t i, const uint64_t *vals, size_t nv)
{
    const struct task *t = lp->t;
    const struct dtype *dt = &t->out.dtype;
    int nd = t->out.ndim;
    uint64_t idx[ROIFS_MAX_DIM] = {0}, pos[ROIFS_MAX_DIM];
    size_t row = (size_t)ext[nd - 1];
    uint32_t r = lp->rois[i];
    for (;;) {
        for (int d = 0; d < nd; d++)
            pos[d] = off[d] + idx[d];
        unsigned char *p = (unsigned char *)buf + nd_linear(pos, t->out.chunks, nd) * dt->size;
        if (t->cfg.label_ids == LABEL_IDS_UNIQUE) {
            labels_map_offset(dt, p, row, (uint64_t)r * t->cfg.label_block);
            stitch_map_apply(dt, p, row, lp->map, lp->nmap);
        } else {
            labels_map_rank(dt, p, row, lp->offset[i], vals, nv);
        }
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == ext[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
}

int engine_labels_paste(const struct labels_paste *lp, size_t i, void *buf, const uint64_t *dst_off,
                        const void *src, const uint64_t *bshape, const uint64_t *src_off,
                        const uint64_t *ext, struct errbuf *err)
{
    const struct task *t = lp->t;
    const struct dtype *dt = &t->out.dtype;
    int nd = t->out.ndim;
    uint64_t *vals = NULL;
    size_t nv = 0;
    if (t->cfg.label_ids == LABEL_IDS_SEQUENTIAL) {
        /* D_r: the distinct values of the whole box (halo excluded), not just this part */
        nv = labels_distinct(dt, src, nd_prod(bshape, nd), &vals);
        if (nv && lp->offset[i] + nv > dtype_max(dt)) {
            free(vals);
            return err_set(err, -ERANGE,
                           "sequential ids up to %llu (roi %u) do not fit the output dtype",
                           (unsigned long long)(lp->offset[i] + nv), lp->rois[i]);
        }
    }
    nd_copy(buf, t->out.chunks, dst_off, src, bshape, src_off, ext, nd, dt->size);
    if (nd_prod(ext, nd) > 0) /* mapped in place, row by row */
        each_row(lp, buf, dst_off, ext, i, vals, nv);
    free(vals);
    return 0;
}

void engine_labels_paste_free(struct labels_paste *lp)
{
    if (!lp)
        return;
    free(lp->offset);
    free((void *)lp->map);
    free(lp);
}

void engine_labels_live(const struct task *t, struct key128 k, struct keyset *ks)
{
    if (sequential(t))
        keyset_add(ks, count_key(k));
    if (stitching(t))
        keyset_add(ks, engine_stitch_strips_key(k));
}

void engine_labels_live_mapping(const struct task *t, struct zarr_sigmemo *memo, struct keyset *ks)
{
    if (stitching(t))
        keyset_add(ks, engine_stitch_map_key(t, memo));
}

void engine_labels_free(struct engine *e)
{
    engine_stitch_free(e);
    struct labels_counts *c = e->label_counts;
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c->key);
    free(c->count);
    free(c->known);
    free(c);
    e->label_counts = NULL;
}
