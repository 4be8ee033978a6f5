/* keyset.h: a set of 128-bit keys (a map.h table): the keys of current results, which gc
 * keeps and the rest of which it removes. */
#ifndef ROIFS_KEYSET_H
#define ROIFS_KEYSET_H

#include <stdbool.h>
#include <stddef.h>

#include "../key.h"

struct keyset;
struct keyset *keyset_new(size_t hint);
void keyset_free(struct keyset *ks);
void keyset_add(struct keyset *ks, struct key128 k);
bool keyset_has(const struct keyset *ks, struct key128 k);
/* The store_live_fn of a keyset (ctx: the keyset). */
bool keyset_live(void *ctx, struct key128 k);

#endif
