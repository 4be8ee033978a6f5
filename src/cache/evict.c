/* evict.c: the order of use of the cached chunks, for [cache] max_size (see evict.h); the
 * engine's lock guards it. */
#include "evict.h"

#include <stdlib.h>

#include "../idlru.h"
#include "../util.h"

struct evict_entry {
    struct idlru_node node; /* node.id: the chunk id */
    uint64_t size, ino;
};

/* A chunk found in the cache at mount, before the order of use is known. */
struct evict_found {
    uint64_t id, size, ino;
    int64_t mtime_ns;
};

struct evict {
    uint64_t max_size, usage, evicted;
    uint64_t other; /* bytes of the cache besides chunk files (the result store) */
    struct idlru lru;
    struct evict_found *found; /* evict_found() until evict_settle() */
    size_t nfound, capfound;
};

struct evict *evict_new(uint64_t max_size)
{
    struct evict *ev = xcalloc(1, sizeof *ev);
    ev->max_size = max_size;
    idlru_init(&ev->lru);
    return ev;
}

static void free_entry(struct idlru_node *n, void *ctx)
{
    (void)ctx;
    free(IDLRU_ENTRY(n, struct evict_entry, node));
}

void evict_free(struct evict *ev)
{
    if (!ev)
        return;
    idlru_each(&ev->lru, free_entry, NULL);
    idlru_destroy(&ev->lru);
    free(ev->found);
    free(ev);
}

void evict_add(struct evict *ev, uint64_t id, uint64_t size, uint64_t ino)
{
    struct idlru_node *n = idlru_find(&ev->lru, id);
    struct evict_entry *en;
    if (n) {
        en = IDLRU_ENTRY(n, struct evict_entry, node);
        ev->usage -= en->size;
    } else {
        en = xcalloc(1, sizeof *en);
        en->node.id = id;
        idlru_add(&ev->lru, &en->node);
    }
    en->size = size;
    en->ino = ino;
    ev->usage += size;
    idlru_use(&ev->lru, &en->node);
}

void evict_touch(struct evict *ev, uint64_t id)
{
    struct idlru_node *n = idlru_find(&ev->lru, id);
    if (n)
        idlru_use(&ev->lru, n);
}

void evict_remove(struct evict *ev, uint64_t id)
{
    struct idlru_node *n = idlru_find(&ev->lru, id);
    if (!n)
        return;
    struct evict_entry *en = IDLRU_ENTRY(n, struct evict_entry, node);
    idlru_del(&ev->lru, n);
    ev->usage -= en->size;
    free(en);
}

size_t evict_victims(struct evict *ev, uint64_t keep, struct evict_victim **victims)
{
    size_t k = 0, cap = 0;
    *victims = NULL;
    struct idlru_node *n = idlru_oldest(&ev->lru);
    while (ev->usage + ev->other > ev->max_size && n) {
        struct idlru_node *newer = idlru_newer(&ev->lru, n);
        if (n->id != keep) {
            if (k == cap) {
                cap = cap ? 2 * cap : 8;
                *victims = xrealloc(*victims, cap * sizeof **victims);
            }
            (*victims)[k++] =
                (struct evict_victim){n->id, IDLRU_ENTRY(n, struct evict_entry, node)->ino};
            evict_remove(ev, n->id);
            ev->evicted++;
        }
        n = newer;
    }
    return k;
}

void evict_set_other(struct evict *ev, uint64_t bytes)
{
    ev->other = bytes;
}

void evict_stats(const struct evict *ev, uint64_t *usage, uint64_t *max_size, uint64_t *evicted)
{
    *usage = ev->usage + ev->other;
    *max_size = ev->max_size;
    *evicted = ev->evicted;
}

void evict_found(struct evict *ev, uint64_t id, uint64_t size, int64_t mtime_ns, uint64_t ino)
{
    if (ev->nfound == ev->capfound) {
        ev->capfound = ev->capfound ? 2 * ev->capfound : 256;
        ev->found = xrealloc(ev->found, ev->capfound * sizeof *ev->found);
    }
    ev->found[ev->nfound++] = (struct evict_found){id, size, ino, mtime_ns};
}

static int by_mtime(const void *a, const void *b)
{
    const struct evict_found *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns ? 1 : 0;
}

void evict_settle_order(struct evict *ev)
{
    /* Oldest first, so that the most recently written chunk ends up the most recently used. */
    if (ev->nfound)
        qsort(ev->found, ev->nfound, sizeof *ev->found, by_mtime);
    for (size_t i = 0; i < ev->nfound; i++)
        evict_add(ev, ev->found[i].id, ev->found[i].size, ev->found[i].ino);
    free(ev->found);
    ev->found = NULL;
    ev->nfound = ev->capfound = 0;
}

size_t evict_settle(struct evict *ev, struct evict_victim **victims)
{
    evict_settle_order(ev);
    return evict_victims(ev, UINT64_MAX, victims);
}

uint64_t evict_chunk_bytes(const struct evict *ev)
{
    return ev->usage;
}
