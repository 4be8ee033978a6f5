/* assemble.c: the assembly of a chunk from its ROIs' results (see engine_internal.h), later
 * ROIs winning. No engine lock is taken here, except to take a reference to a result in
 * memory: the job's fields are the assembling thread's alone (struct chunk_job). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../mask.h"
#include "../nd.h"
#include "engine_internal.h"
#include "assemble.h"
#include "jobs.h"
#include "results.h"
#include "scratch.h"
#include "labels.h"
#include "../cache/cache.h"

/* ---- chunk assembly ---- */

/* A masked ROI writes only its object: what its paste wrote over the other pixels of the
 * box goes back (the selection follows the values in its result). */
static void *masked_save(const struct task *t, const void *buf, const uint64_t *dst_off,
                         const uint64_t *ext)
{
    int nd = t->out.ndim;
    uint64_t zero[ROIFS_MAX_DIM] = {0};
    size_t isz = t->out.dtype.size, n = nd_prod(ext, nd);
    void *saved = xmalloc(n ? n * isz : 1);
    nd_copy(saved, ext, zero, buf, t->out.chunks, dst_off, ext, nd, isz);
    return saved;
}

/* The bytes of ROI r's result named key: *res a reference to it in memory when the slot
 * holds it, else *tmp a copy read from the store (a scratch buffer); -ENOENT when it is in
 * neither (or the stored copy is damaged). */
static int result_get(struct engine *e, uint32_t r, struct key128 key, const void **src,
                      struct roi_result **res, void **tmp, struct errbuf *err)
{
    /* The slot's result changes under the lock (engine_roi_finish: a ROI made again after an
     * input change): the reference is taken under it, the bytes are read after. */
    pthread_mutex_lock(&e->lock);
    *res = e->s.rois[r].result;
    if (*res && key_eq((*res)->key, key))
        (*res)->refs++;
    else
        *res = NULL;
    pthread_mutex_unlock(&e->lock);
    *tmp = NULL;
    if (*res) {
        *src = (*res)->data;
        return 0;
    }
    size_t n = engine_roi_result_nbytes(e->f.t, r); /* a masked ROI's selection too */
    *src = *tmp = engine_scratch_get(SCRATCH_READ, n);
    if (store_get(cache_store(e->f.c), key, *tmp, n) < 0) {
        engine_scratch_put(SCRATCH_READ, *tmp);
        return err_set(err, -ENOENT, "the result of roi %u is no longer stored", r);
    }
    return 0;
}

static void result_put(struct roi_result *res, void *tmp)
{
    engine_scratch_put(SCRATCH_READ, tmp);
    roi_result_unref(res);
}

/* Pastes ROI r's result named key into the chunk buffer; -ENOENT when it is not to be had. */
static int paste_roi(struct engine *e, uint32_t r, struct key128 key, void *buf, const uint64_t *c0,
                     const uint64_t *c1, const struct labels_paste *lp, size_t li,
                     struct errbuf *err)
{
    const struct task *t = e->f.t;
    int nd = t->rois.ndim;
    const uint64_t *b0 = &t->rois.start[(size_t)r * nd], *b1 = &t->rois.stop[(size_t)r * nd];
    uint64_t o0[ROIFS_MAX_DIM], o1[ROIFS_MAX_DIM], bshape[ROIFS_MAX_DIM];
    uint64_t dst_off[ROIFS_MAX_DIM], src_off[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    if (!nd_intersect(b0, b1, c0, c1, o0, o1, nd))
        return 0;
    for (int d = 0; d < nd; d++) {
        bshape[d] = b1[d] - b0[d];
        dst_off[d] = o0[d] - c0[d];
        src_off[d] = o0[d] - b0[d];
        ext[d] = o1[d] - o0[d];
    }
    const void *src;
    struct roi_result *res;
    void *tmp;
    int rc = result_get(e, r, key, &src, &res, &tmp, err);
    if (rc < 0)
        return rc;
    void *saved = roi_label(&t->rois, r) ? masked_save(t, buf, dst_off, ext) : NULL;
    if (lp) /* [labels]: ids mapped on the way in */
        rc = engine_labels_paste(lp, li, buf, dst_off, src, bshape, src_off, ext, err);
    else
        nd_copy(buf, t->out.chunks, dst_off, src, bshape, src_off, ext, nd, t->out.dtype.size);
    if (saved && rc == 0) {
        const uint8_t *sel = (const uint8_t *)src + engine_roi_box_nbytes(t, r);
        mask_restore(buf, t->out.chunks, dst_off, saved, sel, bshape, src_off, ext, nd,
                     t->out.dtype.size);
    }
    free(saved);
    result_put(res, tmp);
    return rc;
}

/* Whether the chunk is its array's whole chunk (not cut by the array's edge), with ROIs that
 * tile it: their parts in it add up to its volume and no two overlap. Then nothing of the
 * fill shows and the fill is skipped. Overlaps are looked for among the parts sorted along
 * the first axis, each against those that start before it ends there (a row of tiles), and
 * only for up to TILE_MAX ROIs. */
#define TILE_MAX 1024
static uint64_t box_volume(const uint64_t *b0, const uint64_t *b1, int nd)
{
    uint64_t v = 1;
    for (int d = 0; d < nd; d++)
        v *= b1[d] - b0[d];
    return v;
}

/* A ROI's part in the chunk: [lo, hi). */
struct part {
    uint64_t lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM];
};

static int part_cmp(const void *a, const void *b)
{
    const struct part *p = a, *q = b;
    return p->lo[0] < q->lo[0] ? -1 : p->lo[0] > q->lo[0];
}

static bool rois_tile_chunk(const struct task *t, const struct chunk_job *job, const uint64_t *c0,
                            const uint64_t *c1)
{
    int nd = t->out.ndim;
    if (job->nrois == 0 || job->nrois > TILE_MAX || t->rois.label) /* masked: beneath shows */
        return false;
    for (int d = 0; d < nd; d++)
        if (c1[d] - c0[d] != t->out.chunks[d])
            return false;
    struct part *pt = xmalloc(job->nrois * sizeof *pt);
    size_t n = 0;
    uint64_t vol = 0, x0[ROIFS_MAX_DIM], x1[ROIFS_MAX_DIM];
    for (size_t i = 0; i < job->nrois; i++) {
        size_t r = job->rois[i];
        if (nd_intersect(&t->rois.start[r * nd], &t->rois.stop[r * nd], c0, c1, pt[n].lo, pt[n].hi,
                         nd)) {
            vol += box_volume(pt[n].lo, pt[n].hi, nd);
            n++;
        }
    }
    bool tiles = vol == nd_prod(t->out.chunks, nd);
    if (tiles)
        qsort(pt, n, sizeof *pt, part_cmp);
    for (size_t i = 0; i < n && tiles; i++)
        for (size_t j = i + 1; j < n && pt[j].lo[0] < pt[i].hi[0] && tiles; j++)
            tiles = !nd_intersect(pt[i].lo, pt[i].hi, pt[j].lo, pt[j].hi, x0, x1, nd);
    free(pt);
    return tiles;
}

/* Whether the chunk is exactly the box of its only ROI, with nothing mapped on the way in and
 * no masked ROI (whose other pixels show what lies beneath):
 * then the ROI's result is the chunk's buffer as it is. */
static bool single_exact(const struct task *t, const struct chunk_job *job, const uint64_t *c0,
                         const uint64_t *c1, const struct labels_paste *lp)
{
    int nd = t->out.ndim;
    if (job->nrois != 1 || lp || t->outside == OUTSIDE_INPUT || t->rois.label)
        return false;
    size_t r = job->rois[0];
    for (int d = 0; d < nd; d++)
        if (c1[d] - c0[d] != t->out.chunks[d] || t->rois.start[r * nd + d] != c0[d] ||
            t->rois.stop[r * nd + d] != c1[d])
            return false;
    return true;
}

/* Encodes the chunk straight from its only ROI's result (single_exact). When the encoding is
 * the identity and the result is in memory, *out is its bytes, *hold the reference that keeps
 * them (nothing copied). */
static int encode_single(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                         struct roi_result **hold, size_t *bad, struct errbuf *err)
{
    const void *src;
    struct roi_result *res;
    void *tmp;
    int rc = result_get(e, job->rois[0], job->use[0], &src, &res, &tmp, err);
    if (rc == -ENOENT)
        *bad = 0;
    if (rc == 0 && res && zarr_encode_is_identity(&e->f.t->out)) {
        *out = (void *)src;
        *out_len = e->f.t->chunk_nbytes;
        *hold = res;
        return 0;
    }
    if (rc == 0)
        rc = zarr_encode_chunk(&e->f.t->out, src, e->f.t->chunk_nbytes, out, out_len, err);
    result_put(res, tmp);
    return rc;
}

/* The chunk's buffer: the fill value, or the input, beneath its ROIs' results. */
static int assemble_buffer(struct engine *e, const struct chunk_job *job, void *buf,
                           const uint64_t *c0, const uint64_t *c1, const uint64_t *ext,
                           const struct labels_paste *lp, uint64_t *osig, size_t *bad,
                           struct errbuf *err)
{
    const struct task *t = e->f.t;
    int nd = t->out.ndim;
    uint64_t zero[ROIFS_MAX_DIM] = {0};
    size_t isz = t->out.dtype.size;
    int rc = 0;
    if (t->outside == OUTSIDE_INPUT) {
        if (nd_prod(ext, nd) != nd_prod(t->out.chunks, nd)) /* an edge chunk's margin */
            nd_fill(buf, t->chunk_nbytes / isz, t->out.fill, isz);
        void *in = engine_scratch_get(SCRATCH_IN, nd_prod(ext, nd) * isz);
        rc = task_input_read(t, c0, ext, in, osig, err);
        if (rc == 0)
            nd_copy(buf, t->out.chunks, zero, in, ext, zero, ext, nd, isz);
        engine_scratch_put(SCRATCH_IN, in);
    } else if (!rois_tile_chunk(t, job, c0, c1)) {
        nd_fill(buf, t->chunk_nbytes / isz, t->out.fill, isz);
    }
    for (size_t i = 0; i < job->nrois && rc == 0; i++)
        if ((rc = paste_roi(e, job->rois[i], job->use[i], buf, c0, c1, lp, i, err)) == -ENOENT)
            *bad = i;
    return rc;
}

int engine_assemble(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                    struct roi_result **hold, struct key128 *key, size_t *bad, struct errbuf *err)
{
    *hold = NULL;
    const struct task *t = e->f.t;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM], osig = 0;
    engine_chunk_box(t, job->id, c0, c1, ext);
    struct labels_paste *lp = NULL;
    int rc = engine_labels_prepare(e, job, &lp, err);
    if (rc == 0 && single_exact(t, job, c0, c1, lp)) {
        rc = encode_single(e, job, out, out_len, hold, bad, err);
    } else if (rc == 0) {
        void *buf = engine_scratch_get(SCRATCH_CHUNK, t->chunk_nbytes);
        rc = assemble_buffer(e, job, buf, c0, c1, ext, lp, &osig, bad, err);
        if (rc == 0)
            rc = zarr_encode_chunk(&t->out, buf, t->chunk_nbytes, out, out_len, err);
        engine_scratch_put(SCRATCH_CHUNK, buf);
    }
    engine_labels_paste_free(lp);
    if (rc == 0)
        *key = engine_chunk_key_of(t, job->id, job->use, job->nrois, osig);
    return rc;
}
