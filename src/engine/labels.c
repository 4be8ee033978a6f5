/* labels.c: the engine's side of [labels] (SPEC §9): validation of results, the part of a
 * chunk's key that its ids depend on, and the id mapping applied when a ROI's result is
 * pasted. ids = sequential needs |D_s| for every earlier ROI s: a count record (8 bytes)
 * stored beside each result under a key derived from the result's, made from the stored
 * result when missing, so that a chunk reads earlier ROIs' counts, not their pixels. */
#include "labels.h"
#include "label_rules.h"
#include "stitch.h"
#include "strips.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../labels/ids.h"
#include "../labels/stitch.h"
#include "../nd.h"
#include "engine_internal.h"
#include "compute.h"
#include "jobs.h"
#include "results.h"
#include "../cache/cache.h"

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
    if (!e->s.label_counts) {
        struct labels_counts *c = xcalloc(1, sizeof *c);
        size_t n = e->f.t->rois.n ? e->f.t->rois.n : 1;
        pthread_mutex_init(&c->lock, NULL);
        c->key = xcalloc(n, sizeof *c->key);
        c->count = xcalloc(n, sizeof *c->count);
        c->known = xcalloc(n, 1);
        e->s.label_counts = c;
    }
    pthread_mutex_unlock(&e->lock);
    return e->s.label_counts;
}

/* |D_s| from ROI s's box result: in memory when a slot holds it, else from the store. */
static int count_from_result(struct engine *e, uint32_t s, struct key128 k, uint64_t *count)
{
    const struct task *t = e->f.t;
    size_t n = engine_roi_result_nbytes(t, s);
    pthread_mutex_lock(&e->lock);
    struct roi_result *res = e->s.rois[s].result;
    if (res && key_eq(res->key, k) && res->len == n)
        res->refs++;
    else
        res = NULL;
    pthread_mutex_unlock(&e->lock);
    void *tmp = NULL;
    const void *data = res ? res->data : NULL;
    if (!res) {
        data = tmp = xmalloc(n ? n : 1);
        if (store_get(cache_store(e->f.c), k, tmp, n) < 0) {
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

/* |D_s| of ROI s's result named k, computing it first when needed. */
static int count_roi(struct engine *e, uint32_t s, struct key128 *k, uint64_t *count,
                     struct errbuf *err)
{
    for (int attempt = 0;; attempt++) {
        int rc = engine_roi_ensure(e, s, k, false, err);
        if (rc < 0)
            return rc;
        if (count_from_result(e, s, *k, count) == 0)
            return 0;
        if (attempt == 3)
            return err_set(err, -EIO, "roi %u: its result cannot be read from the store", s);
        pthread_mutex_lock(&e->lock); /* gone from the store: compute it again */
        if (e->s.rois[s].state == RS_DONE && key_eq(e->s.rois[s].key, *k) && !e->s.rois[s].pins)
            slot_forget(e, s);
        pthread_mutex_unlock(&e->lock);
        store_refresh(cache_store(e->f.c));
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
    struct store *st = cache_store(e->f.c);
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
    const struct task *t = e->f.t;
    *lp = NULL;
    if (!engine_labels_mapping(t) || job->nrois == 0)
        return 0;
    struct labels_paste *p = xcalloc(1, sizeof *p);
    p->t = t;
    p->rois = job->rois;
    *lp = p;
    if (engine_labels_stitching(t))
        return engine_stitch_mapping(e, &p->map, &p->nmap, err);
    if (!engine_labels_sequential(t))
        return 0;
    uint32_t last = engine_rois_last(job->rois, job->nrois);
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
        if (engine_labels_unique(t)) {
            labels_map_offset(dt, p, row, (uint64_t)r * engine_labels_block(t));
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
    if (engine_labels_sequential(t)) {
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
    if (engine_labels_sequential(t))
        keyset_add(ks, count_key(k));
    if (engine_labels_stitching(t))
        keyset_add(ks, engine_stitch_strips_key(k));
}

void engine_labels_live_mapping(const struct task *t, struct zarr_sigmemo *memo, struct keyset *ks)
{
    if (engine_labels_stitching(t))
        keyset_add(ks, engine_stitch_map_key(t, memo));
}

void engine_labels_free(struct engine *e)
{
    engine_stitch_free(e);
    struct labels_counts *c = e->s.label_counts;
    if (!c)
        return;
    pthread_mutex_destroy(&c->lock);
    free(c->key);
    free(c->count);
    free(c->known);
    free(c);
    e->s.label_counts = NULL;
}
