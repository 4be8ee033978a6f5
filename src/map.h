/* map.h: the one open-addressing hash table of roifs: 128-bit keys (a 64-bit key is one with
 * hi = 0) to values of a fixed size kept in the table. Linear probing, at most half full,
 * doubling as it grows; deletion by backward shift (no tombstones, so a table that is used
 * and emptied again keeps its probes short); iteration in slot order (no order promised).
 * Not thread-safe: callers hold their own lock. A value's address holds until the next
 * map_put or map_del. Used by idlru.c, the labels' union-find, the overlay tables' boxes, the
 * input's signature memo and kept content hashes, the live tree's entries, the engine's chunk
 * jobs, the cache's verified chunks, the result store's index and keyset.c. */
#ifndef ROIFS_MAP_H
#define ROIFS_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct map_key {
    uint64_t lo, hi;
};

struct map {
    struct map_key *keys;
    unsigned char *used; /* one byte a slot: 1 when it holds a key */
    unsigned char *vals; /* vsize bytes a slot */
    size_t cap, n, vsize, min_cap;
};

/* An empty table of values of vsize bytes (0: a set), room for hint keys before it grows.
 * Allocates nothing until the first map_put. */
void map_init(struct map *m, size_t vsize, size_t hint);
/* Frees the table (not what its values point to); m is then empty as after map_init, with
 * the same value size and first capacity, ready for use again. */
void map_destroy(struct map *m);

static inline size_t map_count(const struct map *m)
{
    return m->n;
}

/* The value of (lo, hi), or NULL when the key is not in. For a set (vsize 0), a non-NULL
 * pointer that must not be read. */
void *map_get(const struct map *m, uint64_t lo, uint64_t hi);
/* The value of (lo, hi), added (zeroed) when the key was not in; *added (when not NULL) says
 * which. */
void *map_put(struct map *m, uint64_t lo, uint64_t hi, bool *added);
/* Takes (lo, hi) out, copying its value to out (when not NULL); false when it was not in. */
bool map_del(struct map *m, uint64_t lo, uint64_t hi, void *out);

/* Iteration: size_t it = 0; while (map_next(m, &it, &k, &v)) ... The table must not change
 * meanwhile (the values may). k and v may be NULL. */
bool map_next(const struct map *m, size_t *it, struct map_key *k, void **v);

/* The pointer a table of pointers (vsize sizeof(void *)) holds for (lo, hi), or NULL. */
static inline void *map_get_ptr(const struct map *m, uint64_t lo, uint64_t hi)
{
    void **v = (void **)map_get(m, lo, hi);
    return v ? *v : NULL;
}

#endif
