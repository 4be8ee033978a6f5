/* map.c: see map.h. Three arrays of cap slots (keys, used bytes, values); the home slot of a
 * key is a mix of its two words. */
#include "map.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAP_MIN_CAP 64

static size_t home(const struct map *m, uint64_t lo, uint64_t hi)
{
    uint64_t h = lo * 0x9E3779B97F4A7C15ULL ^ hi * 0xC2B2AE3D27D4EB4FULL;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 32;
    return (size_t)h & (m->cap - 1);
}

void map_init(struct map *m, size_t vsize, size_t hint)
{
    memset(m, 0, sizeof *m);
    m->vsize = vsize;
    m->min_cap = MAP_MIN_CAP;
    while (m->min_cap < 2 * hint)
        m->min_cap *= 2;
}

void map_destroy(struct map *m)
{
    size_t vsize = m->vsize, min_cap = m->min_cap;
    free(m->keys);
    free(m->used);
    free(m->vals);
    memset(m, 0, sizeof *m);
    m->vsize = vsize;
    m->min_cap = min_cap;
}

static void *val_at(const struct map *m, size_t i)
{
    return m->vals + i * m->vsize;
}

/* The slot of (lo, hi), or the empty slot where it would go (cap > 0). */
static size_t slot_of(const struct map *m, uint64_t lo, uint64_t hi)
{
    size_t i = home(m, lo, hi);
    while (m->used[i] && (m->keys[i].lo != lo || m->keys[i].hi != hi))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static void alloc_slots(struct map *m, size_t cap)
{
    m->cap = cap;
    m->keys = xmalloc(cap * sizeof *m->keys);
    m->used = xcalloc(cap, 1);
    m->vals = m->vsize ? xmalloc(cap * m->vsize) : NULL;
}

static void grow(struct map *m)
{
    struct map old = *m;
    alloc_slots(m, old.cap ? 2 * old.cap : old.min_cap);
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.used[i])
            continue;
        size_t j = slot_of(m, old.keys[i].lo, old.keys[i].hi);
        m->used[j] = 1;
        m->keys[j] = old.keys[i];
        if (m->vsize)
            memcpy(val_at(m, j), val_at(&old, i), m->vsize);
    }
    free(old.keys);
    free(old.used);
    free(old.vals);
}

void *map_get(const struct map *m, uint64_t lo, uint64_t hi)
{
    if (!m->n)
        return NULL;
    size_t i = slot_of(m, lo, hi);
    if (!m->used[i])
        return NULL;
    return m->vsize ? val_at(m, i) : (void *)m->used;
}

void *map_put(struct map *m, uint64_t lo, uint64_t hi, bool *added)
{
    if (2 * (m->n + 1) > m->cap)
        grow(m);
    size_t i = slot_of(m, lo, hi);
    bool is_new = !m->used[i];
    if (is_new) {
        m->used[i] = 1;
        m->keys[i] = (struct map_key){lo, hi};
        if (m->vsize)
            memset(val_at(m, i), 0, m->vsize);
        m->n++;
    }
    if (added)
        *added = is_new;
    return m->vsize ? val_at(m, i) : (void *)m->used;
}

bool map_del(struct map *m, uint64_t lo, uint64_t hi, void *out)
{
    if (!m->n)
        return false;
    size_t i = slot_of(m, lo, hi);
    if (!m->used[i])
        return false;
    if (out && m->vsize)
        memcpy(out, val_at(m, i), m->vsize);
    /* Backward shift: each later key of the run whose home is not cyclically in (i, j] moves
     * into the hole, which moves on to where it was. */
    size_t mask = m->cap - 1;
    for (size_t j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
        size_t k = home(m, m->keys[j].lo, m->keys[j].hi);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        if (m->vsize)
            memcpy(val_at(m, i), val_at(m, j), m->vsize);
        i = j;
    }
    m->used[i] = 0;
    m->n--;
    return true;
}

bool map_next(const struct map *m, size_t *it, struct map_key *k, void **v)
{
    for (size_t i = *it; i < m->cap; i++) {
        if (!m->used[i])
            continue;
        if (k)
            *k = m->keys[i];
        if (v)
            *v = m->vsize ? val_at(m, i) : NULL;
        *it = i + 1;
        return true;
    }
    *it = m->cap;
    return false;
}
