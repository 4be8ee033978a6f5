/* idlru.c: see idlru.h. Chained hashing with a table that doubles when it holds as many nodes
 * as buckets; a circular doubly linked list around a sentinel for the order of use. */
#include "idlru.h"

#include <stdlib.h>

#include "util.h"

static size_t bucket(const struct idlru *l, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> 32) & (l->nbuckets - 1);
}

void idlru_init(struct idlru *l)
{
    l->nbuckets = 64;
    l->buckets = xcalloc(l->nbuckets, sizeof *l->buckets);
    l->count = 0;
    l->order.prev = l->order.next = &l->order;
}

void idlru_destroy(struct idlru *l)
{
    free(l->buckets);
    l->buckets = NULL;
    l->nbuckets = l->count = 0;
}

struct idlru_node *idlru_find(const struct idlru *l, uint64_t id)
{
    for (struct idlru_node *n = l->buckets[bucket(l, id)]; n; n = n->hnext)
        if (n->id == id)
            return n;
    return NULL;
}

void idlru_add(struct idlru *l, struct idlru_node *n)
{
    if (l->count >= l->nbuckets) {
        size_t old_n = l->nbuckets;
        struct idlru_node **old = l->buckets;
        l->nbuckets *= 2;
        l->buckets = xcalloc(l->nbuckets, sizeof *l->buckets);
        for (size_t i = 0; i < old_n; i++)
            for (struct idlru_node *e = old[i], *next; e; e = next) {
                next = e->hnext;
                size_t b = bucket(l, e->id);
                e->hnext = l->buckets[b];
                l->buckets[b] = e;
            }
        free(old);
    }
    size_t b = bucket(l, n->id);
    n->hnext = l->buckets[b];
    l->buckets[b] = n;
    n->prev = n->next = NULL;
    l->count++;
}

static void unlist(struct idlru_node *n)
{
    if (!n->prev)
        return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
}

void idlru_del(struct idlru *l, struct idlru_node *n)
{
    struct idlru_node **pp = &l->buckets[bucket(l, n->id)];
    while (*pp != n)
        pp = &(*pp)->hnext;
    *pp = n->hnext;
    l->count--;
    unlist(n);
}

void idlru_use(struct idlru *l, struct idlru_node *n)
{
    unlist(n);
    n->prev = &l->order;
    n->next = l->order.next;
    n->next->prev = n;
    l->order.next = n;
}

struct idlru_node *idlru_oldest(const struct idlru *l)
{
    return l->order.prev == &l->order ? NULL : l->order.prev;
}

struct idlru_node *idlru_newer(const struct idlru *l, const struct idlru_node *n)
{
    return n->prev == &l->order ? NULL : n->prev;
}

void idlru_each(const struct idlru *l, void (*fn)(struct idlru_node *n, void *ctx), void *ctx)
{
    for (size_t i = 0; i < l->nbuckets; i++)
        for (struct idlru_node *n = l->buckets[i], *next; n; n = next) {
            next = n->hnext;
            fn(n, ctx);
        }
}
