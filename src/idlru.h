/* idlru.h: an intrusive table of nodes keyed by a 64-bit id, with an order of use (most
 * recent first). Embed a struct idlru_node in your entry and get back to the entry with
 * IDLRU_ENTRY. A node may be in the table without being in the order (an entry being loaded,
 * say). Not thread-safe: callers hold their own lock. Used by the input reader's cache of
 * decoded chunks, the engine's [cache] max_size accounting and the FUSE side's backing
 * files. The table is map.h's; the order of use a list through the nodes. */
#ifndef ROIFS_IDLRU_H
#define ROIFS_IDLRU_H

#include <stddef.h>
#include <stdint.h>

#include "map.h"

struct idlru_node {
    uint64_t id;
    struct idlru_node *prev, *next; /* order of use; NULL when not in it */
};

struct idlru {
    struct map by_id;        /* id -> struct idlru_node * */
    struct idlru_node order; /* sentinel: order.next is the most recently used */
};

#define IDLRU_ENTRY(node, type, member) ((type *)(void *)((char *)(node)-offsetof(type, member)))

void idlru_init(struct idlru *l);
/* Frees the table, not the nodes (empty it first, or free them yourself). */
void idlru_destroy(struct idlru *l);
struct idlru_node *idlru_find(const struct idlru *l, uint64_t id);
/* Adds n (n->id set, not already in) to the table, not to the order of use. */
void idlru_add(struct idlru *l, struct idlru_node *n);
/* Takes n out of the table and out of the order of use. */
void idlru_del(struct idlru *l, struct idlru_node *n);
/* Makes n the most recently used (putting it in the order of use if it was not). */
void idlru_use(struct idlru *l, struct idlru_node *n);
/* The least recently used node in the order of use, or NULL; then the next more recent one
 * after n, or NULL. */
struct idlru_node *idlru_oldest(const struct idlru *l);
struct idlru_node *idlru_newer(const struct idlru *l, const struct idlru_node *n);
/* Calls fn on every node of the table; fn may free the node (but not change the table). */
void idlru_each(const struct idlru *l, void (*fn)(struct idlru_node *n, void *ctx), void *ctx);

#endif
