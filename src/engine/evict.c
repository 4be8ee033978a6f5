/* evict.c: the least-recently-used order of cached chunks, for [cache] max_size (see
 * engine_internal.h). A hash table from chunk id to a node of a doubly linked list, most
 * recently used at the head; the engine's lock guards it. */
#include <stdlib.h>

#include "engine_internal.h"

struct evict_node {
    uint64_t id, size;
    struct evict_node *prev, *next; /* LRU list */
    struct evict_node *hnext;       /* hash chain */
};

struct evict {
    uint64_t max_size, usage, evicted;
    struct evict_node head; /* sentinel: head.next is the most recently used */
    struct evict_node **buckets;
    size_t nbuckets, n;
};

static size_t bucket(const struct evict *ev, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & (ev->nbuckets - 1);
}

struct evict *evict_new(uint64_t max_size)
{
    struct evict *ev = xcalloc(1, sizeof *ev);
    ev->max_size = max_size;
    ev->head.next = ev->head.prev = &ev->head;
    ev->nbuckets = 64;
    ev->buckets = xcalloc(ev->nbuckets, sizeof *ev->buckets);
    return ev;
}

void evict_free(struct evict *ev)
{
    if (!ev)
        return;
    struct evict_node *n = ev->head.next;
    while (n != &ev->head) {
        struct evict_node *next = n->next;
        free(n);
        n = next;
    }
    free(ev->buckets);
    free(ev);
}

static struct evict_node **find(struct evict *ev, uint64_t id)
{
    struct evict_node **p = &ev->buckets[bucket(ev, id)];
    while (*p && (*p)->id != id)
        p = &(*p)->hnext;
    return p;
}

static void grow(struct evict *ev)
{
    size_t old = ev->nbuckets;
    struct evict_node **ob = ev->buckets;
    ev->nbuckets = old * 2;
    ev->buckets = xcalloc(ev->nbuckets, sizeof *ev->buckets);
    for (size_t i = 0; i < old; i++)
        for (struct evict_node *n = ob[i], *next; n; n = next) {
            next = n->hnext;
            size_t b = bucket(ev, n->id);
            n->hnext = ev->buckets[b];
            ev->buckets[b] = n;
        }
    free(ob);
}

static void unlink_lru(struct evict_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
}

static void push_front(struct evict *ev, struct evict_node *n)
{
    n->prev = &ev->head;
    n->next = ev->head.next;
    n->next->prev = n;
    ev->head.next = n;
}

void evict_add(struct evict *ev, uint64_t id, uint64_t size)
{
    struct evict_node **p = find(ev, id), *n = *p;
    if (n) {
        ev->usage -= n->size;
        unlink_lru(n);
    } else {
        n = xcalloc(1, sizeof *n);
        n->id = id;
        *p = n;
        if (++ev->n > ev->nbuckets)
            grow(ev);
    }
    n->size = size;
    ev->usage += size;
    push_front(ev, n);
}

void evict_touch(struct evict *ev, uint64_t id)
{
    struct evict_node *n = *find(ev, id);
    if (n) {
        unlink_lru(n);
        push_front(ev, n);
    }
}

void evict_remove(struct evict *ev, uint64_t id)
{
    struct evict_node **p = find(ev, id), *n = *p;
    if (!n)
        return;
    *p = n->hnext;
    unlink_lru(n);
    ev->usage -= n->size;
    ev->n--;
    free(n);
}

size_t evict_victims(struct evict *ev, uint64_t keep, uint64_t **ids)
{
    size_t k = 0, cap = 0;
    *ids = NULL;
    struct evict_node *n = ev->head.prev;
    while (ev->usage > ev->max_size && n != &ev->head) {
        struct evict_node *prev = n->prev;
        if (n->id != keep) {
            if (k == cap) {
                cap = cap ? 2 * cap : 8;
                *ids = xrealloc(*ids, cap * sizeof **ids);
            }
            (*ids)[k++] = n->id;
            evict_remove(ev, n->id);
            ev->evicted++;
        }
        n = prev;
    }
    return k;
}

void evict_stats(const struct evict *ev, uint64_t *usage, uint64_t *max_size, uint64_t *evicted)
{
    *usage = ev->usage;
    *max_size = ev->max_size;
    *evicted = ev->evicted;
}

struct scan_entry {
    uint64_t id, size;
    int64_t mtime_ns;
};

struct scan {
    struct cache *c;
    const struct task *t;
    struct scan_entry *v;
    size_t n, cap;
};

static void scan_one(void *ctx, uint64_t id)
{
    struct scan *s = ctx;
    struct scan_entry en = {.id = id};
    if (!task_chunk_present(s->t, id) || cache_chunk_stat(s->c, id, &en.size, &en.mtime_ns) < 0)
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = en;
}

static int by_mtime(const void *a, const void *b)
{
    const struct scan_entry *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns ? 1 : 0;
}

size_t evict_scan(struct evict *ev, struct cache *c, const struct task *t, uint64_t **victims)
{
    struct scan s = {.c = c, .t = t};
    cache_chunk_each(c, scan_one, &s);
    /* Oldest first, so that the most recently written chunk ends up the most recently used. */
    if (s.n)
        qsort(s.v, s.n, sizeof *s.v, by_mtime);
    for (size_t i = 0; i < s.n; i++)
        evict_add(ev, s.v[i].id, s.v[i].size);
    free(s.v);
    return evict_victims(ev, UINT64_MAX, victims);
}
