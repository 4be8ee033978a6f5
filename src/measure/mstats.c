/* mstats.c: the partial statistics of [measure] and their merging (see mstats.h). */
#include "mstats.h"

#include <stdlib.h>
#include <string.h>

void mstats_init(struct mstats *s, int ndim, int nch)
{
    s->ndim = ndim;
    s->nch = nch;
    s->rec = sizeof(struct mobj) + (size_t)nch * sizeof(struct mchan);
    map_init(&s->idx, sizeof(uint64_t), 64);
    s->blocks = NULL;
    s->ids = NULL;
    s->n = s->cap = 0;
}

void mstats_destroy(struct mstats *s)
{
    map_destroy(&s->idx);
    for (size_t b = 0; b < s->cap / MSTATS_BLOCK; b++)
        free(s->blocks[b]);
    free(s->blocks);
    free(s->ids);
    s->blocks = NULL;
    s->ids = NULL;
    s->n = s->cap = 0;
}

struct mobj *mstats_get(const struct mstats *s, uint64_t id)
{
    const uint64_t *i = map_get(&s->idx, id, 0);
    return i ? mstats_obj(s, *i) : NULL;
}

struct mobj *mstats_put(struct mstats *s, uint64_t id, bool *added)
{
    uint64_t *i = map_put(&s->idx, id, 0, added);
    if (!*added)
        return mstats_obj(s, *i);
    if (s->n == s->cap) {
        size_t nb = s->cap / MSTATS_BLOCK;
        s->blocks = xrealloc(s->blocks, (nb + 1) * sizeof *s->blocks);
        s->blocks[nb] = xmalloc(MSTATS_BLOCK * s->rec);
        s->cap += MSTATS_BLOCK;
        s->ids = xrealloc(s->ids, s->cap * sizeof *s->ids);
    }
    *i = s->n;
    s->ids[s->n] = id;
    struct mobj *o = mstats_obj(s, s->n++);
    memset(o, 0, s->rec);
    return o;
}

static uint64_t label_at(const struct dtype *dt, const unsigned char *p)
{
    uint64_t u = dtype_load_bits(p, dt->size);
    return dt->kind == DT_INT && dtype_sign_extend(u, dt->size) < 0 ? 0 : u;
}

#define BLOCK 4096 /* elements whose intensities are loaded at once */

/* Pass 1 over elements [e0, e0 + m) of block vals: counts, boxes, coordinate sums, sums, min and
 * max. i is element e0's index (advanced past the block); *last and *o the object at hand. */
static void pass1(struct mstats *s, const struct dtype *dt, const unsigned char *lab,
                  const uint64_t *origin, const uint64_t *shape, uint64_t e0, size_t m,
                  const double *vals, uint64_t *i, uint64_t *last, struct mobj **o)
{
    int nd = s->ndim, nch = s->nch;
    for (size_t b = 0; b < m; b++) {
        uint64_t id = label_at(dt, lab + (e0 + b) * dt->size);
        if (id) {
            bool added = false;
            if (id != *last || !*o) {
                *o = mstats_put(s, id, &added);
                *last = id;
            }
            struct mobj *ob = *o;
            if (added) {
                for (int d = 0; d < nd; d++)
                    ob->lo[d] = ob->hi[d] = origin[d] + i[d];
                for (int c = 0; c < nch; c++)
                    mstats_chan(ob, c)->min = mstats_chan(ob, c)->max = vals[c * BLOCK + b];
            }
            ob->n++;
            for (int d = 0; d < nd; d++) {
                uint64_t p = origin[d] + i[d];
                ob->csum[d] += p;
                if (p < ob->lo[d])
                    ob->lo[d] = p;
                if (p > ob->hi[d])
                    ob->hi[d] = p;
            }
            for (int c = 0; c < nch; c++) {
                struct mchan *ch = mstats_chan(ob, c);
                double x = vals[c * BLOCK + b];
                ch->sum += x;
                if (x < ch->min)
                    ch->min = x;
                if (x > ch->max)
                    ch->max = x;
            }
        }
        for (int d = nd - 1; d >= 0 && ++i[d] == shape[d]; d--)
            i[d] = 0;
    }
}

/* Pass 2: the squared deviations from the piece's own mean. */
static void pass2(struct mstats *s, const struct dtype *dt, const unsigned char *lab, uint64_t e0,
                  size_t m, const double *vals, uint64_t *last, struct mobj **o)
{
    for (size_t b = 0; b < m; b++) {
        uint64_t id = label_at(dt, lab + (e0 + b) * dt->size);
        if (!id)
            continue;
        if (id != *last || !*o) {
            *o = mstats_get(s, id);
            *last = id;
        }
        for (int c = 0; c < s->nch; c++) {
            struct mchan *ch = mstats_chan(*o, c);
            double dx = vals[c * BLOCK + b] - ch->mean;
            ch->m2 += dx * dx;
        }
    }
}

void mstats_piece(struct mstats *s, const struct dtype *dt, const void *labels,
                  const uint64_t *origin, const uint64_t *shape, mstats_load load, void *ctx)
{
    int nd = s->ndim, nch = s->nch;
    uint64_t n = 1, i[ROIFS_MAX_DIM] = {0};
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    double *vals = xmalloc(((size_t)nch * BLOCK + 1) * sizeof *vals);
    uint64_t last = 0;
    struct mobj *o = NULL;
    for (uint64_t e0 = 0; e0 < n; e0 += BLOCK) {
        size_t m = n - e0 < BLOCK ? (size_t)(n - e0) : BLOCK;
        for (int c = 0; c < nch; c++)
            load(ctx, c, e0, m, vals + (size_t)c * BLOCK);
        pass1(s, dt, labels, origin, shape, e0, m, vals, i, &last, &o);
    }
    if (nch) {
        for (size_t j = 0; j < s->n; j++) {
            struct mobj *ob = mstats_obj(s, j);
            for (int c = 0; c < nch; c++)
                mstats_chan(ob, c)->mean = mstats_chan(ob, c)->sum / (double)ob->n;
        }
        last = 0;
        o = NULL;
        for (uint64_t e0 = 0; e0 < n; e0 += BLOCK) {
            size_t m = n - e0 < BLOCK ? (size_t)(n - e0) : BLOCK;
            for (int c = 0; c < nch; c++)
                load(ctx, c, e0, m, vals + (size_t)c * BLOCK);
            pass2(s, dt, labels, e0, m, vals, &last, &o);
        }
    }
    free(vals);
}

void mstats_merge_one(struct mobj *a, const struct mobj *b, int ndim, int nch)
{
    double na = (double)a->n, nb = (double)b->n, nn = na + nb;
    for (int c = 0; c < nch; c++) {
        struct mchan *x = mstats_chan(a, c);
        const struct mchan *y = mstats_chan((struct mobj *)b, c);
        double delta = y->mean - x->mean;
        x->mean += delta * (nb / nn);
        x->m2 += y->m2 + delta * delta * (na * nb / nn);
        x->sum += y->sum;
        if (y->min < x->min)
            x->min = y->min;
        if (y->max > x->max)
            x->max = y->max;
    }
    a->n += b->n;
    for (int d = 0; d < ndim; d++) {
        a->csum[d] += b->csum[d];
        if (b->lo[d] < a->lo[d])
            a->lo[d] = b->lo[d];
        if (b->hi[d] > a->hi[d])
            a->hi[d] = b->hi[d];
    }
}

void mstats_merge(struct mstats *into, const struct mstats *from)
{
    for (size_t j = 0; j < from->n; j++) {
        bool added;
        struct mobj *a = mstats_put(into, from->ids[j], &added);
        if (added)
            memcpy(a, mstats_obj(from, j), into->rec);
        else
            mstats_merge_one(a, mstats_obj(from, j), into->ndim, into->nch);
    }
}
