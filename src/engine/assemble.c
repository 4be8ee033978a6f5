/* assemble.c: the assembly of a chunk from its ROIs' results (see engine_internal.h), later
 * ROIs winning. No engine lock is taken here, except to take a reference to a result in
 * memory: the job's fields are the assembling thread's alone (struct chunk_job). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../mask.h"
#include "../nd.h"
#include "engine_internal.h"
#include "labels.h"
#include "store.h"

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

/* Pastes ROI r's result named key into the chunk buffer: from memory when the slot holds it,
 * else from the store; -ENOENT when it is in neither (or the stored copy is damaged). */
static int paste_roi(struct engine *e, uint32_t r, struct key128 key, void *buf, const uint64_t *c0,
                     const uint64_t *c1, const struct labels_paste *lp, size_t li,
                     struct errbuf *err)
{
    const struct task *t = e->t;
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
    /* The slot's result changes under the lock (engine_roi_finish: a ROI made again after an
     * input change): the reference is taken under it, the bytes are read after. */
    pthread_mutex_lock(&e->lock);
    struct roi_result *res = e->rois[r].result;
    if (res && key_eq(res->key, key))
        res->refs++;
    else
        res = NULL;
    pthread_mutex_unlock(&e->lock);
    void *tmp = NULL;
    const void *src;
    if (res) {
        src = res->data;
    } else {
        size_t n = engine_roi_result_nbytes(t, r);
        src = tmp = xmalloc(n ? n : 1);
        if (store_get(cache_store(e->c), key, tmp, n) < 0) {
            free(tmp);
            return err_set(err, -ENOENT, "the result of roi %u is no longer stored", r);
        }
    }
    int rc = 0;
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
    free(tmp);
    roi_result_unref(res);
    return rc;
}

int engine_assemble(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                    struct key128 *key, size_t *bad, struct errbuf *err)
{
    const struct task *t = e->t;
    int nd = t->out.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    uint64_t zero[ROIFS_MAX_DIM] = {0}, osig = 0;
    engine_chunk_box(t, job->id, c0, c1, ext);
    size_t isz = t->out.dtype.size;
    void *buf = xmalloc(t->chunk_nbytes);
    nd_fill(buf, t->chunk_nbytes / isz, t->out.fill, isz);
    int rc = 0;
    if (t->outside == OUTSIDE_INPUT) {
        void *in = xmalloc(nd_prod(ext, nd) * isz);
        rc = task_input_read(t, c0, ext, in, &osig, err);
        if (rc == 0)
            nd_copy(buf, t->out.chunks, zero, in, ext, zero, ext, nd, isz);
        free(in);
    }
    struct labels_paste *lp = NULL;
    if (rc == 0)
        rc = engine_labels_prepare(e, job, &lp, err);
    for (size_t i = 0; i < job->nrois && rc == 0; i++)
        if ((rc = paste_roi(e, job->rois[i], job->use[i], buf, c0, c1, lp, i, err)) == -ENOENT)
            *bad = i;
    engine_labels_paste_free(lp);
    if (rc == 0)
        *key = engine_chunk_key_of(t, job->id, job->use, job->nrois, osig);
    if (rc == 0)
        rc = zarr_encode_chunk(&t->out, buf, t->chunk_nbytes, out, out_len, err);
    free(buf);
    return rc;
}
