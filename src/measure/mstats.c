/* mstats.c: the partial statistics of [measure] and their merging (see mstats.h). */
#include "mstats.h"

#include <string.h>

void mstats_init(struct mstats *s, int ndim, int nch)
{
    s->ndim = ndim;
    s->nch = nch;
    s->rec = sizeof(struct mobj) + (size_t)nch * sizeof(struct mchan);
    map_init(&s->objs, s->rec, 64);
}

void mstats_destroy(struct mstats *s)
{
    map_destroy(&s->objs);
}

static uint64_t label_at(const struct dtype *dt, const unsigned char *p)
{
    uint64_t u = dtype_load_bits(p, dt->size);
    return dt->kind == DT_INT && dtype_sign_extend(u, dt->size) < 0 ? 0 : u;
}

void mstats_piece(struct mstats *s, const struct dtype *dt, const void *labels,
                  const uint64_t *origin, const uint64_t *shape, const double *inten)
{
    int nd = s->ndim, nch = s->nch;
    uint64_t n = 1, i[ROIFS_MAX_DIM] = {0};
    for (int d = 0; d < nd; d++)
        n *= shape[d];
    const unsigned char *lab = labels;
    /* Pass 1: counts, boxes, coordinate sums, sums, min and max. The last object seen is kept
     * at hand: neighbouring pixels are mostly of the same object. */
    uint64_t last = 0;
    struct mobj *o = NULL;
    for (uint64_t e = 0; e < n; e++) {
        uint64_t id = label_at(dt, lab + e * dt->size);
        if (id) {
            bool added = false;
            if (id != last || !o) {
                o = map_put(&s->objs, id, 0, &added);
                last = id;
            }
            if (added) {
                memset(o, 0, s->rec);
                for (int d = 0; d < nd; d++)
                    o->lo[d] = o->hi[d] = origin[d] + i[d];
                for (int c = 0; c < nch; c++) {
                    struct mchan *ch = mstats_chan(o, c);
                    ch->min = ch->max = inten[(uint64_t)c * n + e];
                }
            }
            o->n++;
            for (int d = 0; d < nd; d++) {
                uint64_t p = origin[d] + i[d];
                o->csum[d] += p;
                if (p < o->lo[d])
                    o->lo[d] = p;
                if (p > o->hi[d])
                    o->hi[d] = p;
            }
            for (int c = 0; c < nch; c++) {
                struct mchan *ch = mstats_chan(o, c);
                double x = inten[(uint64_t)c * n + e];
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
    if (!nch)
        return;
    size_t it = 0;
    struct map_key k;
    void *v;
    while (map_next(&s->objs, &it, &k, &v)) {
        struct mobj *ob = v;
        for (int c = 0; c < nch; c++)
            mstats_chan(ob, c)->mean = mstats_chan(ob, c)->sum / (double)ob->n;
    }
    /* Pass 2: the squared deviations from the piece's own mean. */
    last = 0;
    o = NULL;
    for (uint64_t e = 0; e < n; e++) {
        uint64_t id = label_at(dt, lab + e * dt->size);
        if (!id)
            continue;
        if (id != last || !o) {
            o = map_get(&s->objs, id, 0);
            last = id;
        }
        for (int c = 0; c < nch; c++) {
            struct mchan *ch = mstats_chan(o, c);
            double dx = inten[(uint64_t)c * n + e] - ch->mean;
            ch->m2 += dx * dx;
        }
    }
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
    size_t it = 0;
    struct map_key k;
    void *v;
    while (map_next(&from->objs, &it, &k, &v)) {
        bool added;
        struct mobj *a = map_put(&into->objs, k.lo, k.hi, &added);
        if (added)
            memcpy(a, v, into->rec);
        else
            mstats_merge_one(a, v, into->ndim, into->nch);
    }
}
