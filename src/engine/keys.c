/* keys.c: the keys that name ROI results and chunks by everything they depend on (CACHE.md):
 * a ROI result by the processor identity, its box and read region and the signature of the
 * input it read; a chunk by its encoding, its id, the keys of its ROIs' results in list order
 * and, with outside = input, the signature of the input under it; with [labels], what the ids
 * depend on besides (ROI indices, earlier ROIs' results, the stitching mapping's key). */
#include <stdlib.h>
#include <string.h>

#include "../mask.h"
#include "../nd.h"
#include "engine.h"
#include "label_rules.h"

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

void engine_mask_region(const struct task *t, uint32_t r, uint64_t *start, uint64_t *shape)
{
    int nd = t->rois.ndim;
    if (mask_zeroes_input(t->mask)) {
        roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, start, shape);
        return;
    }
    for (int d = 0; d < nd; d++) {
        start[d] = t->rois.start[(size_t)r * nd + d];
        shape[d] = t->rois.stop[(size_t)r * nd + d] - start[d];
    }
}

uint64_t engine_roi_sig_now(const struct task *t, uint32_t r, struct zarr_sigmemo *memo)
{
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM], sig = 0;
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, rstart, rshape);
    task_input_signature(t, rstart, rshape, memo, &sig);
    uint64_t label = roi_label(&t->rois, r);
    if (label) { /* the mask chunks its selection reads, as compute.c reads them */
        engine_mask_region(t, r, rstart, rshape);
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

struct key128 engine_stitch_map_key(const struct task *t, struct zarr_sigmemo *memo)
{
    struct keyhash h;
    key_init(&h, "roifs stitch map");
    key_add_key(&h, t->result_id);
    double iou = engine_labels_iou(t);
    key_add(&h, &iou, sizeof iou);
    key_add_u64(&h, engine_labels_block(t));
    key_add_u64(&h, t->rois.n);
    for (uint32_t s = 0; s < t->rois.n; s++)
        key_add_key(&h, engine_roi_key(t, s, engine_roi_sig_now(t, s, memo)));
    return key_final(&h);
}

/* The ROIs touching chunk id (index order is ROI order). */
static const uint32_t *chunk_rois(const struct task *t, uint64_t id, size_t *n)
{
    int64_t k = roi_index_find(t->index, id);
    *n = 0;
    return k >= 0 ? roi_index_rois(t->index, (size_t)k, n) : NULL;
}

/* Adds to chunk id's key what its ids depend on besides its ROIs' results ([labels]). */
static void labels_chunk_key(const struct task *t, uint64_t id, struct keyhash *h)
{
    if (!engine_labels_mapping(t))
        return;
    size_t n;
    const uint32_t *rois = chunk_rois(t, id, &n);
    key_add_str(h, engine_labels_unique(t) ? "labels unique" : "labels sequential");
    key_add_u64(h, engine_labels_block(t));
    for (size_t i = 0; i < n; i++) /* unique: the ids depend on each ROI's index */
        key_add_u64(h, rois[i]);
    if (engine_labels_stitching(t)) { /* on every ROI's result, through the mapping */
        struct zarr_sigmemo *memo = zarr_sigmemo_new();
        key_add_key(h, engine_stitch_map_key(t, memo));
        zarr_sigmemo_free(memo);
    }
    if (!engine_labels_sequential(t) || n == 0)
        return;
    /* sequential: on every earlier ROI's result, as the input is now */
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    uint32_t last = engine_rois_last(rois, n);
    for (uint32_t s = 0; s < last; s++)
        key_add_key(h, engine_roi_key(t, s, engine_roi_sig_now(t, s, memo)));
    zarr_sigmemo_free(memo);
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
    labels_chunk_key(t, id, &h); /* [labels]: ids depend on ROI indices (and counts) */
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
