/* plan.c: the dependency counts and the order of `roifs apply` (plan.h). A ROI's result is
 * made when the first chunk it writes is assembled; a chunk replaces its input file once it
 * is assembled and no ROI that reads it is still to be made, so no ROI ever reads a replaced
 * file. Chunks are asked for in C order over the chunk grid with its longest dimension
 * outermost: what waits is then about one slab of the other dimensions. */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#include "../nd.h"

/* The chunk ranges [c0, c1) of ROI r's box (read: grown by the halo). */
static void roi_chunks(const struct task *t, size_t r, bool read, uint64_t *c0, uint64_t *c1)
{
    const struct zarr_meta *m = &t->out;
    if (!read) {
        roi_chunk_range(&t->rois, r, m->chunks, c0, c1);
        return;
    }
    uint64_t rs[ROIFS_MAX_DIM], rn[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM];
    roi_read_region(&t->rois, r, t->halo, m->shape, rs, rn);
    for (int d = 0; d < m->ndim; d++)
        hi[d] = rs[d] + rn[d];
    nd_chunk_range(rs, hi, m->chunks, m->ndim, c0, c1);
}

static const struct apply_plan *sort_plan;

static int cmp_key(const void *a, const void *b)
{
    struct key128 x = sort_plan->roikey[*(const uint32_t *)a];
    struct key128 y = sort_plan->roikey[*(const uint32_t *)b];
    if (x.hi != y.hi)
        return x.hi < y.hi ? -1 : 1;
    if (x.lo != y.lo)
        return x.lo < y.lo ? -1 : 1;
    return 0;
}

struct ordered {
    uint64_t rank, id;
};

static int cmp_rank(const void *a, const void *b)
{
    uint64_t x = ((const struct ordered *)a)->rank, y = ((const struct ordered *)b)->rank;
    return x < y ? -1 : x > y;
}

/* The chunks still to replace, longest grid dimension outermost. */
static void build_order(struct apply_plan *p)
{
    const struct task *t = p->t;
    int nd = t->out.ndim, perm[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++)
        perm[d] = d;
    for (int a = 1; a < nd; a++) /* stable: ties keep C order */
        for (int b = a; b > 0 && t->grid[perm[b]] > t->grid[perm[b - 1]]; b--) {
            int x = perm[b];
            perm[b] = perm[b - 1];
            perm[b - 1] = x;
        }
    struct ordered *o = xmalloc((p->nchunks ? p->nchunks : 1) * sizeof *o);
    size_t n = 0;
    for (uint64_t id = 0; id < p->nchunks; id++) {
        if (p->cstate[id] != PC_PENDING)
            continue;
        uint64_t idx[ROIFS_MAX_DIM], rank = 0;
        nd_unlinear(id, t->grid, nd, idx);
        for (int d = 0; d < nd; d++)
            rank = rank * t->grid[perm[d]] + idx[perm[d]];
        o[n++] = (struct ordered){rank, id};
    }
    qsort(o, n, sizeof *o, cmp_rank);
    p->order = xmalloc((n ? n : 1) * sizeof *p->order);
    for (size_t i = 0; i < n; i++)
        p->order[i] = o[i].id;
    p->norder = n;
    free(o);
}

void plan_build(struct apply_plan *p, const struct task *t, const uint8_t *replaced,
                const struct key128 *roikey, const bool *stored)
{
    memset(p, 0, sizeof *p);
    p->t = t;
    p->nchunks = t->nchunks;
    size_t nr = t->rois.n, n = (size_t)p->nchunks;
    int nd = t->out.ndim;
    p->cstate = xcalloc(n ? n : 1, 1);
    p->readers_left = xcalloc(n ? n : 1, sizeof *p->readers_left);
    p->roi_done = xcalloc(nr ? nr : 1, 1);
    p->write_left = xcalloc(nr ? nr : 1, sizeof *p->write_left);
    p->roikey = xmalloc((nr ? nr : 1) * sizeof *p->roikey);
    memcpy(p->roikey, roikey, nr * sizeof *roikey);
    for (size_t k = 0; k < roi_index_nchunks(t->index); k++) {
        uint64_t id = roi_index_chunk_id(t->index, k);
        p->cstate[id] = replaced[id] ? PC_REPLACED : PC_PENDING;
        p->nwritten++;
        p->nreplaced += replaced[id] != 0;
    }
    for (size_t r = 0; r < nr; r++) {
        uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
        bool done = stored[r];
        roi_chunks(t, r, false, c0, c1);
        memcpy(idx, c0, sizeof(uint64_t) * nd);
        do {
            uint64_t id = nd_linear(idx, t->grid, nd);
            if (p->cstate[id] == PC_REPLACED)
                done = true; /* its result went into the input already */
            else
                p->write_left[r]++;
        } while (nd_next_index(idx, c0, c1, nd));
        p->roi_done[r] = done;
        if (done)
            continue;
        roi_chunks(t, r, true, c0, c1);
        memcpy(idx, c0, sizeof(uint64_t) * nd);
        do
            p->readers_left[nd_linear(idx, t->grid, nd)]++;
        while (nd_next_index(idx, c0, c1, nd));
    }
    p->by_key = xmalloc((nr ? nr : 1) * sizeof *p->by_key);
    for (size_t r = 0; r < nr; r++)
        p->by_key[r] = (uint32_t)r;
    sort_plan = p; /* plan_build runs once, before any thread */
    qsort(p->by_key, nr, sizeof *p->by_key, cmp_key);
    build_order(p);
}

void plan_free(struct apply_plan *p)
{
    free(p->cstate);
    free(p->readers_left);
    free(p->roi_done);
    free(p->write_left);
    free(p->roikey);
    free(p->by_key);
    free(p->order);
    memset(p, 0, sizeof *p);
}

static void note_ready(struct apply_plan *p, uint64_t id, uint64_t *ready, size_t *nready)
{
    if (p->cstate[id] == PC_ASSEMBLED && p->readers_left[id] == 0)
        ready[(*nready)++] = id;
}

void plan_assembled(struct apply_plan *p, uint64_t id, uint64_t *ready, size_t *nready)
{
    const struct task *t = p->t;
    int nd = t->out.ndim;
    if (p->cstate[id] != PC_PENDING)
        return;
    p->cstate[id] = PC_ASSEMBLED;
    int64_t k = roi_index_find(t->index, id);
    size_t nr = 0;
    const uint32_t *rois = k >= 0 ? roi_index_rois(t->index, (size_t)k, &nr) : NULL;
    for (size_t i = 0; i < nr; i++) {
        uint32_t r = rois[i];
        p->write_left[r]--;
        if (p->roi_done[r])
            continue;
        p->roi_done[r] = 1;
        uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
        roi_chunks(t, r, true, c0, c1);
        memcpy(idx, c0, sizeof(uint64_t) * nd);
        do {
            uint64_t d = nd_linear(idx, t->grid, nd);
            if (--p->readers_left[d] == 0 && d != id)
                note_ready(p, d, ready, nready);
        } while (nd_next_index(idx, c0, c1, nd));
    }
    note_ready(p, id, ready, nready);
}

void plan_replaced(struct apply_plan *p, uint64_t id)
{
    p->cstate[id] = PC_REPLACED;
    p->nreplaced++;
}

bool plan_result_live(const struct apply_plan *p, struct key128 k)
{
    size_t lo = 0, hi = p->t->rois.n;
    while (lo < hi) { /* the first ROI whose key is not below k */
        size_t mid = lo + (hi - lo) / 2;
        struct key128 m = p->roikey[p->by_key[mid]];
        if (m.hi < k.hi || (m.hi == k.hi && m.lo < k.lo))
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < p->t->rois.n && key_eq(p->roikey[p->by_key[lo]], k); lo++)
        if (p->write_left[p->by_key[lo]] > 0)
            return true;
    return false;
}

bool plan_needs_assembled(const struct apply_plan *p, uint64_t id, const bool *stored)
{
    const struct task *t = p->t;
    int nd = t->out.ndim;
    int64_t k = roi_index_find(t->index, id);
    size_t nr = 0;
    const uint32_t *rois = k >= 0 ? roi_index_rois(t->index, (size_t)k, &nr) : NULL;
    for (size_t i = 0; i < nr; i++) {
        if (stored[rois[i]])
            continue;
        uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
        roi_chunks(t, rois[i], true, c0, c1);
        memcpy(idx, c0, sizeof(uint64_t) * nd);
        do
            if (p->cstate[nd_linear(idx, t->grid, nd)] == PC_REPLACED)
                return true;
        while (nd_next_index(idx, c0, c1, nd));
    }
    return false;
}
