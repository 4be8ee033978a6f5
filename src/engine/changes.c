/* changes.c: input changes seen while the engine runs ([input] watch): the output chunks
 * (of every pyramid level) that depend on a changed input file, the ROIs whose read region
 * reads it, and what the engine forgets about them; and the input that may not be served any
 * more (its metadata changed). Keys alone already keep every open from serving anything
 * stale; this keeps the status honest and tells the FUSE side which inodes the kernel must
 * drop. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "engine_internal.h"

/* ---- the chunks known to be stale ---- */

struct stale {
    struct idlru_node node; /* id: the chunk */
    bool uncounted;         /* its file was counted in n_cached, and taken out */
};

/* Notes chunk id as stale (lock held); exists: its file is there (counted in n_cached). */
static void stale_add(struct engine *e, uint64_t id, bool exists)
{
    if (idlru_find(&e->stale, id))
        return;
    struct stale *s = xcalloc(1, sizeof *s);
    s->node.id = id;
    idlru_add(&e->stale, &s->node);
    s->uncounted = exists && e->n_cached > 0;
    if (s->uncounted)
        e->n_cached--;
    e->nstale++;
}

bool engine_stale_take(struct engine *e, uint64_t id)
{
    struct idlru_node *n = idlru_find(&e->stale, id);
    if (!n)
        return false;
    struct stale *s = IDLRU_ENTRY(n, struct stale, node);
    bool uncounted = s->uncounted;
    idlru_del(&e->stale, n);
    free(s);
    e->nstale--;
    return uncounted;
}

bool engine_is_stale(struct engine *e, uint64_t id)
{
    return idlru_find(&e->stale, id) != NULL;
}

static void free_stale(struct idlru_node *n, void *ctx)
{
    (void)ctx;
    free(IDLRU_ENTRY(n, struct stale, node));
}

void engine_stale_free(struct engine *e)
{
    idlru_each(&e->stale, free_stale, NULL);
    idlru_destroy(&e->stale);
}

/* ---- which chunks ---- */

/* A growable list of chunk ids. */
struct ids {
    uint64_t *v;
    size_t n, cap;
};

static void ids_add(struct ids *l, uint64_t id)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = id;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void ids_unique(struct ids *l)
{
    if (!l->n)
        return;
    qsort(l->v, l->n, sizeof *l->v, by_value);
    size_t k = 1;
    for (size_t i = 1; i < l->n; i++)
        if (l->v[i] != l->v[k - 1])
            l->v[k++] = l->v[i];
    l->n = k;
}

/* Calls fn for every index of the box of chunk grid indices [c0, c1) in C order. */
static void each_index(const uint64_t *c0, const uint64_t *c1, int nd, const uint64_t *grid,
                       struct ids *out)
{
    uint64_t idx[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++)
        if (c0[d] >= c1[d])
            return;
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    for (;;) {
        ids_add(out, nd_linear(idx, grid, nd));
        int d = nd - 1;
        while (d >= 0 && ++idx[d] == c1[d]) {
            idx[d] = c0[d];
            d--;
        }
        if (d < 0)
            return;
    }
}

/* The chunk grid range of box [b0, b1) for chunks of shape ch. */
static void chunk_range_of(const uint64_t *b0, const uint64_t *b1, const uint64_t *ch, int nd,
                           uint64_t *c0, uint64_t *c1)
{
    for (int d = 0; d < nd; d++) {
        c0[d] = b0[d] / ch[d];
        c1[d] = b1[d] > b0[d] ? (b1[d] - 1) / ch[d] + 1 : c0[d];
    }
}

/* Level 0: the chunks whose content depends on input box [b0, b1) (ROIs whose read region
 * touches it; the box itself with outside = input), and those ROIs (roi ids). */
static void level0_affected(const struct task *t, const uint64_t *b0, const uint64_t *b1,
                            struct ids *chunks, struct ids *rois)
{
    int nd = t->out.ndim;
    uint64_t g0[ROIFS_MAX_DIM], g1[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM];
    /* a ROI whose read region touches the box has its box inside the box grown by the halo */
    for (int d = 0; d < nd; d++) {
        g0[d] = b0[d] > t->halo[d] ? b0[d] - t->halo[d] : 0;
        g1[d] = b1[d] + t->halo[d] < t->out.shape[d] ? b1[d] + t->halo[d] : t->out.shape[d];
    }
    chunk_range_of(g0, g1, t->out.chunks, nd, c0, c1);
    struct ids cand = {0};
    each_index(c0, c1, nd, t->grid, &cand);
    for (size_t i = 0; i < cand.n; i++) {
        int64_t k = roi_index_find(t->index, cand.v[i]);
        size_t n = 0;
        const uint32_t *list = k >= 0 ? roi_index_rois(t->index, (size_t)k, &n) : NULL;
        for (size_t j = 0; j < n; j++) {
            uint64_t rs[ROIFS_MAX_DIM], rsh[ROIFS_MAX_DIM];
            roi_read_region(&t->rois, list[j], t->halo, t->in->shape, rs, rsh);
            bool hit = true;
            for (int d = 0; d < nd && hit; d++)
                hit = rs[d] < b1[d] && b0[d] < rs[d] + rsh[d];
            if (hit)
                ids_add(rois, list[j]);
        }
    }
    free(cand.v);
    ids_unique(rois);
    for (size_t i = 0; i < rois->n; i++) {
        roi_chunk_range(&t->rois, rois->v[i], t->out.chunks, c0, c1);
        each_index(c0, c1, nd, t->grid, chunks);
    }
    if (t->cfg.outside == OUTSIDE_INPUT) {
        chunk_range_of(b0, b1, t->out.chunks, nd, c0, c1);
        each_index(c0, c1, nd, t->grid, chunks);
    }
}

/* Pyramid level t (>= 1): its chunks that reduce chunks `up` of the level above. */
static void level_affected(const struct task *t, const struct ids *up, struct ids *out)
{
    const struct task *u = t->up;
    int nd = t->out.ndim;
    for (size_t i = 0; i < up->n; i++) {
        uint64_t idx[ROIFS_MAX_DIM], b0[ROIFS_MAX_DIM], b1[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM],
            c1[ROIFS_MAX_DIM];
        nd_unlinear(up->v[i], u->grid, nd, idx);
        for (int d = 0; d < nd; d++) {
            uint64_t lo = idx[d] * u->out.chunks[d], hi = lo + u->out.chunks[d];
            if (hi > u->out.shape[d])
                hi = u->out.shape[d];
            bool half = d == t->axis_y || d == t->axis_x;
            b0[d] = half ? lo / 2 : lo;
            b1[d] = half ? (hi + 1) / 2 : hi;
        }
        chunk_range_of(b0, b1, t->out.chunks, nd, c0, c1);
        each_index(c0, c1, nd, t->grid, out);
    }
    ids_unique(out);
}

/* ---- forgetting ---- */

/* Forgets ROIs rois and chunks chunks of engine e (one level); calls fn for each chunk that
 * exists in the tree. */
static void forget(struct engine *e, const struct ids *rois, const struct ids *chunks, int level,
                   void (*fn)(void *ctx, int level, uint64_t id), void *ctx)
{
    bool *exists = xcalloc(chunks->n ? chunks->n : 1, sizeof *exists);
    for (size_t i = 0; i < chunks->n; i++) /* outside the lock: one stat each */
        exists[i] =
            task_chunk_present(e->t, chunks->v[i]) && cache_chunk_exists(e->c, chunks->v[i]);
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; rois && i < rois->n; i++) {
        struct roi_slot *s = &e->rois[rois->v[i]];
        if (s->state == RS_DONE && s->pins == 0)
            slot_forget(e, (uint32_t)rois->v[i]); /* a job pasting it sees the change itself */
    }
    for (size_t i = 0; i < chunks->n; i++)
        if (task_chunk_present(e->t, chunks->v[i]))
            stale_add(e, chunks->v[i], exists[i]);
    pthread_mutex_unlock(&e->lock);
    free(exists);
    for (size_t i = 0; i < chunks->n && fn; i++)
        if (task_chunk_present(e->t, chunks->v[i]))
            fn(ctx, level, chunks->v[i]);
}

void engine_input_changed(struct engine *e, const uint64_t *sids, size_t n, bool all,
                          void (*fn)(void *ctx, int level, uint64_t id), void *ctx)
{
    const struct task *t = e->t;
    const struct zarr_meta *in = zarr_input_meta(t->input);
    int nd = in->ndim;
    uint64_t grid[ROIFS_MAX_DIM];
    zarr_meta_grid(in, grid);
    struct ids chunks = {0}, rois = {0};
    if (all) {
        for (size_t r = 0; r < t->rois.n; r++)
            ids_add(&rois, r);
        for (uint64_t id = 0; id < t->nchunks; id++)
            if (task_chunk_present(t, id))
                ids_add(&chunks, id);
    }
    for (size_t i = 0; i < n && !all; i++) {
        uint64_t idx[ROIFS_MAX_DIM], b0[ROIFS_MAX_DIM], b1[ROIFS_MAX_DIM];
        nd_unlinear(sids[i], grid, nd, idx);
        for (int d = 0; d < nd; d++) {
            b0[d] = idx[d] * in->chunks[d];
            b1[d] = b0[d] + in->chunks[d] < in->shape[d] ? b0[d] + in->chunks[d] : in->shape[d];
        }
        level0_affected(t, b0, b1, &chunks, &rois);
    }
    ids_unique(&chunks);
    forget(e, &rois, &chunks, 0, fn, ctx);
    free(rois.v);
    /* the pyramid levels that reduce them, level by level */
    for (int l = 1; l < t->nlevels && l < TASK_MAX_LEVELS && e->sub[l]; l++) {
        const struct task *lt = t->levels[l];
        struct ids next = {0}, lrois = {0};
        level_affected(lt, &chunks, &next);
        for (size_t i = 0; i < next.n; i++) { /* a level's ROIs are its chunks */
            int64_t k = roi_index_find(lt->index, next.v[i]);
            size_t m = 0;
            const uint32_t *list = k >= 0 ? roi_index_rois(lt->index, (size_t)k, &m) : NULL;
            for (size_t j = 0; j < m; j++)
                ids_add(&lrois, list[j]);
        }
        forget(e->sub[l], &lrois, &next, l, fn, ctx);
        free(lrois.v);
        free(chunks.v);
        chunks = next;
    }
    free(chunks.v);
}

void engine_input_broken(struct engine *e, const char *reason)
{
    pthread_mutex_lock(&e->lock);
    bool first = !e->broken;
    if (first)
        e->broken = xstrdup(reason);
    e->is_broken = true;
    pthread_mutex_unlock(&e->lock);
    if (first && e->t->level == 0)
        log_error("[input] watch: %s; every chunk fails with EIO until the mount is made "
                  "again",
                  reason);
    for (int l = 1; l < TASK_MAX_LEVELS; l++)
        if (e->sub[l])
            engine_input_broken(e->sub[l], reason);
}

char *engine_input_error(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    char *r = e->broken ? xstrdup(e->broken) : NULL;
    pthread_mutex_unlock(&e->lock);
    return r;
}
