/* keys.c: the keys that name ROI results and chunks by everything they depend on (CACHE.md):
 * a ROI result by the processor identity, its box and read region and the signature of the
 * input it read; a chunk by its encoding, its id, the keys of its ROIs' results in list order
 * and, with outside = input, the signature of the input under it. */
#include <stdlib.h>
#include <string.h>

#include "../mask.h"
#include "../nd.h"
#include "engine.h"
#include "labels.h"

struct key128 engine_roi_key(const struct task *t, uint32_t r, uint64_t sig)
{
    int nd = t->rois.ndim;
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM];
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, rstart, rshape);
    struct keyhash h;
    key_init(&h, "roifs roi result");
    key_add_key(&h, t->result_id);
    key_add_u64(&h, (uint64_t)nd);
    key_add(&h, &t->rois.start[(size_t)r * nd], sizeof(uint64_t) * nd);
    key_add(&h, &t->rois.stop[(size_t)r * nd], sizeof(uint64_t) * nd);
    key_add(&h, rstart, sizeof(uint64_t) * nd);
    key_add(&h, rshape, sizeof(uint64_t) * nd);
    key_add_u64(&h, sig);
    if (roi_label(&t->rois, r)) /* masked: sig covers the mask too (engine_roi_sig_now) */
        key_add_u64(&h, roi_label(&t->rois, r));
    return key_final(&h);
}

uint64_t engine_roi_sig_now(const struct task *t, uint32_t r, struct zarr_sigmemo *memo)
{
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM], sig = 0;
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, rstart, rshape);
    task_input_signature(t, rstart, rshape, memo, &sig);
    uint64_t label = roi_label(&t->rois, r);
    if (label) { /* the mask chunks its selection reads, as compute.c reads them */
        mask_region(t, r, rstart, rshape);
        sig = mask_mix_sig(sig, label, mask_signature(t->mask, rstart, rshape));
    }
    return sig;
}

void engine_chunk_box(const struct task *t, uint64_t id, uint64_t *c0, uint64_t *c1, uint64_t *ext)
{
    int nd = t->out.ndim;
    uint64_t idx[ROIFS_MAX_DIM];
    nd_unlinear(id, t->grid, nd, idx);
    nd_chunk_box(idx, t->out.chunks, t->out.shape, nd, c0, c1);
    for (int d = 0; d < nd; d++)
        ext[d] = c1[d] - c0[d];
}

struct key128 engine_chunk_key_of(const struct task *t, uint64_t id, const struct key128 *rois,
                                  size_t n, uint64_t outside_sig)
{
    struct keyhash h;
    key_init(&h, "roifs chunk");
    key_add_key(&h, t->encoding_id);
    key_add_u64(&h, id);
    key_add_u64(&h, (uint64_t)t->outside);
    if (t->outside == OUTSIDE_INPUT)
        key_add_u64(&h, outside_sig);
    key_add_u64(&h, n);
    for (size_t i = 0; i < n; i++)
        key_add_key(&h, rois[i]);
    engine_labels_chunk_key(t, id, &h); /* [labels]: ids depend on ROI indices (and counts) */
    return key_final(&h);
}

void engine_chunk_keys_now(const struct task *t, uint64_t id, struct zarr_sigmemo *memo,
                           struct chunk_keys *out)
{
    int64_t k = roi_index_find(t->index, id);
    size_t n = 0;
    const uint32_t *rois = k >= 0 ? roi_index_rois(t->index, (size_t)k, &n) : NULL;
    /* one stat per input chunk file however many ROIs read it */
    struct zarr_sigmemo *own = memo ? NULL : zarr_sigmemo_new();
    struct zarr_sigmemo *m = memo ? memo : own;
    out->n = n;
    out->rois = xmalloc((n ? n : 1) * sizeof *out->rois);
    for (size_t i = 0; i < n; i++)
        out->rois[i] = engine_roi_key(t, rois[i], engine_roi_sig_now(t, rois[i], m));
    uint64_t osig = 0;
    if (t->outside == OUTSIDE_INPUT) {
        uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
        engine_chunk_box(t, id, c0, c1, ext);
        task_input_signature(t, c0, ext, m, &osig);
    }
    out->chunk = engine_chunk_key_of(t, id, out->rois, n, osig);
    zarr_sigmemo_free(own);
}

void chunk_keys_free(struct chunk_keys *k)
{
    free(k->rois);
    k->rois = NULL;
    k->n = 0;
}
