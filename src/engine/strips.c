/* strips.c: the strip record of stitch = iou (SPEC §9, strips.h): after a ROI's processor
 * returns, its values in the zones where its read region overlaps other ROIs' (halo
 * included), stored beside its result for the global pass (stitch.c). */
#include "strips.h"

#include <stdlib.h>

#include "../nd.h"
#include "engine_fixed.h"
#include "label_rules.h"
#include "../cache/cache.h"

static struct key128 derived(struct key128 k, const char *what)
{
    struct keyhash h;
    key_init(&h, what);
    key_add_key(&h, k);
    return key_final(&h);
}

bool engine_stitch_zone(const struct task *t, uint32_t r, uint32_t s, uint64_t *z0, uint64_t *z1)
{
    int nd = t->rois.ndim;
    uint64_t a0[ROIFS_MAX_DIM], as[ROIFS_MAX_DIM], b0[ROIFS_MAX_DIM], bs[ROIFS_MAX_DIM];
    uint64_t a1[ROIFS_MAX_DIM], b1[ROIFS_MAX_DIM];
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, a0, as);
    roi_read_region(&t->rois, s, t->halo, t->in_meta->shape, b0, bs);
    for (int d = 0; d < nd; d++) {
        a1[d] = a0[d] + as[d];
        b1[d] = b0[d] + bs[d];
    }
    return nd_intersect(a0, a1, b0, b1, z0, z1, nd) != 0;
}

uint64_t engine_stitch_zone_elems(int nd, const uint64_t *z0, const uint64_t *z1)
{
    uint64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= z1[d] - z0[d];
    return n;
}

void engine_stitch_strips(struct engine *e, uint32_t r, const void *out, const uint64_t *rstart,
                          const uint64_t *rshape, struct key128 key)
{
    const struct task *t = engine_fixed(e)->t;
    if (!engine_labels_stitching(t)) /* (stitch = iou needs ids = unique) */
        return;
    int nd = t->rois.ndim;
    size_t isz = t->out.dtype.size;
    uint64_t total = 0, z0[ROIFS_MAX_DIM], z1[ROIFS_MAX_DIM];
    for (uint32_t q = 0; q < t->rois.n; q++)
        if (q != r && engine_stitch_zone(t, r, q, z0, z1))
            total += engine_stitch_zone_elems(nd, z0, z1);
    if (total == 0)
        return; /* no other read region overlaps this one */
    unsigned char *rec = xmalloc(total * isz), *p = rec;
    for (uint32_t q = 0; q < t->rois.n; q++) {
        if (q == r || !engine_stitch_zone(t, r, q, z0, z1))
            continue;
        uint64_t ext[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
        for (int d = 0; d < nd; d++) {
            ext[d] = z1[d] - z0[d];
            off[d] = z0[d] - rstart[d];
        }
        nd_copy(p, ext, zero, out, rshape, off, ext, nd, isz);
        p += engine_stitch_zone_elems(nd, z0, z1) * isz;
    }
    struct errbuf err = {{0}};
    if (store_put(cache_store(engine_fixed(e)->c), derived(key, "roifs stitch strips"), rec,
                  total * isz, isz, &err) < 0)
        log_error("roi %u: cannot store its stitching strips: %s", r, err.msg);
    free(rec);
}

struct key128 engine_stitch_strips_key(struct key128 k)
{
    return derived(k, "roifs stitch strips");
}
