/* assemble.c: what a chunk is made of (see engine_internal.h): the input signatures that
 * tell whether a cached result is current, and the assembly of a chunk from its ROIs'
 * results, later ROIs winning. No engine lock is taken here. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "engine_internal.h"

/* ---- input signatures: what a result was made from ---- */

uint64_t engine_roi_sig(struct engine *e, uint32_t r)
{
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM], sig = 0;
    roi_read_region(&e->t->rois, r, e->t->halo, e->t->in->shape, rstart, rshape);
    task_input_signature(e->t, rstart, rshape, &sig);
    return sig;
}

/* Signature of the input read for chunk id: the bounding box of the read regions of its
 * ROIs (and of the chunk itself with outside = input). */
uint64_t engine_chunk_signature(struct engine *e, uint64_t id)
{
    const struct task *t = e->t;
    int nd = t->out.ndim;
    uint64_t lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM], shape[ROIFS_MAX_DIM];
    uint64_t rs[ROIFS_MAX_DIM], rsh[ROIFS_MAX_DIM], sig = 0;
    bool any = false;
    nd_unlinear(id, t->grid, nd, idx);
    if (t->cfg.outside == OUTSIDE_INPUT) {
        for (int d = 0; d < nd; d++) {
            lo[d] = idx[d] * t->out.chunks[d];
            hi[d] = lo[d] + t->out.chunks[d] < t->out.shape[d] ? lo[d] + t->out.chunks[d]
                                                               : t->out.shape[d];
        }
        any = true;
    }
    int64_t k = roi_index_find(t->index, id);
    size_t n = 0;
    const uint32_t *rois = k >= 0 ? roi_index_rois(t->index, (size_t)k, &n) : NULL;
    for (size_t i = 0; i < n; i++) {
        roi_read_region(&t->rois, rois[i], t->halo, t->in->shape, rs, rsh);
        for (int d = 0; d < nd; d++) {
            if (!any || rs[d] < lo[d])
                lo[d] = rs[d];
            if (!any || rs[d] + rsh[d] > hi[d])
                hi[d] = rs[d] + rsh[d];
        }
        any = true;
    }
    for (int d = 0; d < nd; d++)
        shape[d] = any ? hi[d] - lo[d] : 0;
    task_input_signature(t, lo, shape, &sig);
    return sig;
}

size_t engine_roi_box_nbytes(const struct task *t, size_t r)
{
    int nd = t->rois.ndim;
    size_t n = t->out.dtype.size;
    for (int d = 0; d < nd; d++)
        n *= t->rois.stop[r * nd + d] - t->rois.start[r * nd + d];
    return n;
}

/* ---- chunk assembly (no lock) ---- */

/* Pastes ROI r's result into the chunk buffer; -ENOENT when its stored result is gone. */
static int paste_roi(struct engine *e, uint32_t r, void *buf, const uint64_t *c0,
                     const uint64_t *c1, struct errbuf *err)
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
    void *res = e->rois[r].result, *tmp = NULL;
    if (!res) {
        size_t n = engine_roi_box_nbytes(t, r);
        tmp = res = xmalloc(n);
        int rc = cache_roi_read(e->c, r, tmp, n, engine_roi_sig(e, r));
        if (rc < 0) {
            free(tmp);
            return err_set(err, rc == -ENOENT || rc == -ESTALE ? -ENOENT : -EIO,
                           "the stored result of roi %u is unusable: %s", r, strerror(-rc));
        }
    }
    nd_copy(buf, t->out.chunks, dst_off, res, bshape, src_off, ext, nd, t->out.dtype.size);
    free(tmp);
    return 0;
}

/* Builds and encodes chunk job->id. On -ENOENT, *bad_roi names a ROI whose result vanished. */
int engine_assemble(struct engine *e, const struct chunk_job *job, void **out, size_t *out_len,
                    uint32_t *bad_roi, struct errbuf *err)
{
    const struct task *t = e->t;
    int nd = t->out.ndim;
    uint64_t idx[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    uint64_t zero[ROIFS_MAX_DIM] = {0};
    nd_unlinear(job->id, t->grid, nd, idx);
    for (int d = 0; d < nd; d++) {
        c0[d] = idx[d] * t->out.chunks[d];
        c1[d] =
            c0[d] + t->out.chunks[d] < t->out.shape[d] ? c0[d] + t->out.chunks[d] : t->out.shape[d];
        ext[d] = c1[d] - c0[d];
    }
    size_t isz = t->out.dtype.size;
    void *buf = xmalloc(t->chunk_nbytes);
    nd_fill(buf, t->chunk_nbytes / isz, t->out.fill, isz);
    int rc = 0;
    if (t->cfg.outside == OUTSIDE_INPUT) {
        void *in = xmalloc(nd_prod(ext, nd) * isz);
        rc = task_input_read(t, c0, ext, in, err);
        if (rc == 0)
            nd_copy(buf, t->out.chunks, zero, in, ext, zero, ext, nd, isz);
        free(in);
    }
    if (rc == 0 && job->k >= 0) {
        size_t n;
        const uint32_t *rois = roi_index_rois(t->index, (size_t)job->k, &n);
        for (size_t i = 0; i < n && rc == 0; i++)
            if ((rc = paste_roi(e, rois[i], buf, c0, c1, err)) == -ENOENT)
                *bad_roi = rois[i];
    }
    if (rc == 0)
        rc = zarr_encode_chunk(&t->out, buf, t->chunk_nbytes, out, out_len, err);
    free(buf);
    return rc;
}
