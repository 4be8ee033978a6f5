/* changes.c: input changes seen while the engine runs ([input] watch): the output chunks
 * that depend on a changed box of the input, the ROIs whose read region reads it, and what
 * the engine forgets about them; and the input that may not be served any more (its metadata
 * changed). Keys alone already keep every open from serving anything stale; this keeps the
 * status honest and tells the caller which chunks a reader (another array, the kernel) may
 * hold stale. The engine sees only its own input: whoever stacks arrays (arrayset.h) passes
 * a change on from one to the next. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "engine_internal.h"
#include "results.h"
#include "stale.h"

/* ---- the chunks known to be stale ---- */

struct stale {
    struct idlru_node node; /* id: the chunk */
    bool uncounted;         /* its file was counted in n_cached, and taken out */
};

/* Notes chunk id as stale (lock held); exists: its file is there (counted in n_cached). */
static void stale_add(struct engine *e, uint64_t id, bool exists)
{
    if (idlru_find(&e->s.stale, id))
        return;
    struct stale *s = xcalloc(1, sizeof *s);
    s->node.id = id;
    idlru_add(&e->s.stale, &s->node);
    s->uncounted = exists && e->s.n_cached > 0;
    if (s->uncounted)
        e->s.n_cached--;
    e->nstale++;
}

bool engine_stale_take(struct engine *e, uint64_t id)
{
    struct idlru_node *n = idlru_find(&e->s.stale, id);
    if (!n)
        return false;
    struct stale *s = IDLRU_ENTRY(n, struct stale, node);
    bool uncounted = s->uncounted;
    idlru_del(&e->s.stale, n);
    free(s);
    e->nstale--;
    return uncounted;
}

bool engine_is_stale(struct engine *e, uint64_t id)
{
    return idlru_find(&e->s.stale, id) != NULL;
}

static void free_stale(struct idlru_node *n, void *ctx)
{
    (void)ctx;
    free(IDLRU_ENTRY(n, struct stale, node));
}

void engine_stale_free(struct engine *e)
{
    idlru_each(&e->s.stale, free_stale, NULL);
    idlru_destroy(&e->s.stale);
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

/* Adds the ids of the chunk grid indices [c0, c1) of t to out. */
static void add_range(const struct task *t, const uint64_t *c0, const uint64_t *c1, struct ids *out)
{
    int nd = t->out.ndim;
    for (int d = 0; d < nd; d++)
        if (c0[d] >= c1[d])
            return;
    uint64_t idx[ROIFS_MAX_DIM];
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    do
        ids_add(out, nd_linear(idx, t->grid, nd));
    while (nd_next_index(idx, c0, c1, nd));
}

/* The chunks whose content depends on input box [b0, b1) (those of the ROIs whose read
 * region touches it; the box's own with outside = input), and those ROIs (roi ids). */
static void box_affected(const struct task *t, const uint64_t *b0, const uint64_t *b1,
                         struct ids *chunks, struct ids *rois)
{
    int nd = t->out.ndim;
    uint64_t g0[ROIFS_MAX_DIM], g1[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM];
    /* a ROI whose read region touches the box has its box inside the box grown by the halo */
    for (int d = 0; d < nd; d++) {
        g0[d] = b0[d] > t->halo[d] ? b0[d] - t->halo[d] : 0;
        g1[d] = b1[d] + t->halo[d] < t->out.shape[d] ? b1[d] + t->halo[d] : t->out.shape[d];
    }
    nd_chunk_range(g0, g1, t->out.chunks, nd, c0, c1);
    struct ids cand = {0};
    add_range(t, c0, c1, &cand);
    for (size_t i = 0; i < cand.n; i++) {
        int64_t row = roi_index_find(t->index, cand.v[i]);
        size_t n = 0;
        const uint32_t *list = row >= 0 ? roi_index_rois(t->index, (size_t)row, &n) : NULL;
        for (size_t j = 0; j < n; j++) {
            uint64_t rs[ROIFS_MAX_DIM], rsh[ROIFS_MAX_DIM];
            roi_read_region(&t->rois, list[j], t->halo, t->in_meta->shape, rs, rsh);
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
        add_range(t, c0, c1, chunks);
    }
    if (t->outside == OUTSIDE_INPUT) {
        nd_chunk_range(b0, b1, t->out.chunks, nd, c0, c1);
        add_range(t, c0, c1, chunks);
    }
}

/* ---- forgetting ---- */

/* Forgets ROIs rois and chunks chunks (sorted, unique) of engine e; keeps in chunks those
 * present in the tree. */
static void forget(struct engine *e, const struct ids *rois, struct ids *chunks)
{
    size_t k = 0;
    for (size_t i = 0; i < chunks->n; i++)
        if (task_chunk_present(e->f.t, chunks->v[i]))
            chunks->v[k++] = chunks->v[i];
    chunks->n = k;
    bool *exists = xcalloc(chunks->n ? chunks->n : 1, sizeof *exists);
    for (size_t i = 0; i < chunks->n; i++) /* outside the lock: one stat each */
        exists[i] = cache_chunk_exists(e->f.c, chunks->v[i]);
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < rois->n; i++) {
        struct roi_slot *s = &e->s.rois[rois->v[i]];
        if (s->state == RS_DONE && s->pins == 0)
            slot_forget(e, (uint32_t)rois->v[i]); /* a job pasting it sees the change itself */
    }
    for (size_t i = 0; i < chunks->n; i++)
        stale_add(e, chunks->v[i], exists[i]);
    pthread_mutex_unlock(&e->lock);
    free(exists);
}

size_t engine_input_changed(struct engine *e, const uint64_t *lo, const uint64_t *hi, size_t n,
                            bool all, uint64_t **chunks_out)
{
    const struct task *t = e->f.t;
    int nd = t->in_meta->ndim;
    struct ids chunks = {0}, rois = {0};
    if (all) {
        for (size_t r = 0; r < t->rois.n; r++)
            ids_add(&rois, r);
        for (uint64_t id = 0; id < t->nchunks; id++)
            ids_add(&chunks, id);
    }
    for (size_t i = 0; i < n && !all; i++)
        box_affected(t, lo + i * nd, hi + i * nd, &chunks, &rois);
    ids_unique(&chunks);
    forget(e, &rois, &chunks);
    free(rois.v);
    *chunks_out = chunks.v;
    return chunks.n;
}

void engine_input_broken(struct engine *e, const char *reason)
{
    pthread_mutex_lock(&e->lock);
    if (!e->s.broken)
        e->s.broken = xstrdup(reason);
    e->is_broken = true;
    pthread_mutex_unlock(&e->lock);
}

char *engine_input_error(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    char *r = e->s.broken ? xstrdup(e->s.broken) : NULL;
    pthread_mutex_unlock(&e->lock);
    return r;
}
