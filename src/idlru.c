/* idlru.c: see idlru.h. The nodes by id in a map.h table of pointers; a circular doubly linked
 * list around a sentinel for the order of use. */
#include "idlru.h"

void idlru_init(struct idlru *l)
{
    map_init(&l->by_id, sizeof(struct idlru_node *), 0);
    l->order.prev = l->order.next = &l->order;
}

void idlru_destroy(struct idlru *l)
{
    map_destroy(&l->by_id);
}

struct idlru_node *idlru_find(const struct idlru *l, uint64_t id)
{
    return map_get_ptr(&l->by_id, id, 0);
}

void idlru_add(struct idlru *l, struct idlru_node *n)
{
    *(struct idlru_node **)map_put(&l->by_id, n->id, 0, NULL) = n;
    n->prev = n->next = NULL;
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
    map_del(&l->by_id, n->id, 0, NULL);
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
    size_t it = 0;
    void *v;
    while (map_next(&l->by_id, &it, NULL, &v))
        fn(*(struct idlru_node **)v, ctx);
}
