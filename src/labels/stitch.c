/* stitch.c: IoU stitching (docs/labels.md, Stitching): per overlap zone, the pairs of objects whose
 * IoU in the zone reaches the threshold; a union-find (a map.h table of the ids merged) keeping the
 * smallest id as each object's representative; and the resulting id mapping. */
#include "stitch.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../map.h"
#include "ids.h"

struct stitch_uf {
    struct map parent; /* id -> its parent id (its own when it represents its object) */
};

struct stitch_uf *stitch_uf_new(void)
{
    struct stitch_uf *uf = xcalloc(1, sizeof *uf);
    map_init(&uf->parent, sizeof(uint64_t), 512);
    return uf;
}

void stitch_uf_free(struct stitch_uf *uf)
{
    if (!uf)
        return;
    map_destroy(&uf->parent);
    free(uf);
}

/* Adds x as its own object when new. */
static void node(struct stitch_uf *uf, uint64_t x)
{
    bool added;
    uint64_t *p = map_put(&uf->parent, x, 0, &added);
    if (added)
        *p = x;
}

static uint64_t *parent_of(struct stitch_uf *uf, uint64_t x)
{
    return map_get(&uf->parent, x, 0);
}

static uint64_t find(struct stitch_uf *uf, uint64_t x)
{
    uint64_t root = x;
    for (;;) {
        uint64_t *p = parent_of(uf, root);
        if (!p || *p == root)
            break;
        root = *p;
    }
    while (x != root) { /* path compression */
        uint64_t *p = parent_of(uf, x);
        uint64_t next = *p;
        *p = root;
        x = next;
    }
    return root;
}

void stitch_uf_union(struct stitch_uf *uf, uint64_t x, uint64_t y)
{
    node(uf, x);
    node(uf, y);
    uint64_t rx = find(uf, x), ry = find(uf, y);
    if (rx == ry)
        return;
    /* the smaller id represents the merged object */
    *parent_of(uf, rx > ry ? rx : ry) = rx < ry ? rx : ry;
}

static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

uint64_t *stitch_uf_mapping(struct stitch_uf *uf, size_t *n)
{
    uint64_t *pairs = NULL;
    size_t k = 0;
    size_t it = 0;
    struct map_key key;
    while (map_next(&uf->parent, &it, &key, NULL)) {
        uint64_t x = key.lo, r = find(uf, x);
        if (r == x)
            continue;
        pairs = xrealloc(pairs, (k + 1) * 2 * sizeof *pairs);
        pairs[2 * k] = x;
        pairs[2 * k + 1] = r;
        k++;
    }
    if (k)
        qsort(pairs, k, 2 * sizeof *pairs, cmp_pair);
    *n = k;
    return pairs;
}

static int cmp_xy(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Element count of value v among sorted vals[0..n) (v present). */
static uint64_t count_of(const uint64_t *vals, size_t n, uint64_t v)
{
    size_t lo = 0, hi = n;
    while (lo < hi) { /* first >= v */
        size_t mid = lo + (hi - lo) / 2;
        if (vals[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t a = lo;
    hi = n;
    while (lo < hi) { /* first > v */
        size_t mid = lo + (hi - lo) / 2;
        if (vals[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - a;
}

void stitch_zone(const struct dtype *dt, const void *a, const void *b, size_t n, double threshold,
                 uint64_t base_a, uint64_t base_b, struct stitch_uf *uf)
{
    /* sizes of each object in the zone, and the pairs of objects met at the same place */
    uint64_t *va = xmalloc((n ? n : 1) * sizeof *va), *vb = xmalloc((n ? n : 1) * sizeof *vb);
    uint64_t *pairs = xmalloc((n ? n : 1) * 2 * sizeof *pairs);
    size_t na = 0, nb = 0, np = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = labels_get(dt, a, i), y = labels_get(dt, b, i);
        if (x)
            va[na++] = x;
        if (y)
            vb[nb++] = y;
        if (x && y) {
            pairs[2 * np] = x;
            pairs[2 * np + 1] = y;
            np++;
        }
    }
    qsort(va, na, sizeof *va, cmp_u64);
    qsort(vb, nb, sizeof *vb, cmp_u64);
    qsort(pairs, np, 2 * sizeof *pairs, cmp_xy);
    for (size_t i = 0; i < np;) {
        size_t j = i;
        while (j < np && pairs[2 * j] == pairs[2 * i] && pairs[2 * j + 1] == pairs[2 * i + 1])
            j++;
        uint64_t x = pairs[2 * i], y = pairs[2 * i + 1], inter = j - i;
        uint64_t uni = count_of(va, na, x) + count_of(vb, nb, y) - inter;
        if ((double)inter / (double)uni >= threshold)
            stitch_uf_union(uf, base_a + x, base_b + y);
        i = j;
    }
    free(va);
    free(vb);
    free(pairs);
}

void stitch_map_apply(const struct dtype *dt, void *buf, size_t n, const uint64_t *pairs,
                      size_t npairs)
{
    if (npairs == 0)
        return;
    uint64_t last = 0, to = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = labels_get(dt, buf, i);
        if (x == 0)
            continue;
        if (x != last) {
            size_t lo = 0, hi = npairs;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (pairs[2 * mid] < x)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            last = x;
            to = lo < npairs && pairs[2 * lo] == x ? pairs[2 * lo + 1] : x;
        }
        if (to != x)
            labels_put(dt, buf, i, to);
    }
}
