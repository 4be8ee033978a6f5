/* keyset.c: a set of 128-bit keys (a map.h table without values), as gc, the cache budget and
 * the labels' live results use it (keyset.h). */
#include "keyset.h"

#include <stdlib.h>

#include "../map.h"
#include "../util.h"

struct keyset {
    struct map keys;
};

struct keyset *keyset_new(size_t hint)
{
    struct keyset *ks = xcalloc(1, sizeof *ks);
    map_init(&ks->keys, 0, hint);
    return ks;
}

void keyset_free(struct keyset *ks)
{
    if (!ks)
        return;
    map_destroy(&ks->keys);
    free(ks);
}

void keyset_add(struct keyset *ks, struct key128 k)
{
    map_put(&ks->keys, k.lo, k.hi, NULL);
}

bool keyset_has(const struct keyset *ks, struct key128 k)
{
    return map_get(&ks->keys, k.lo, k.hi) != NULL;
}

bool keyset_live(void *ctx, struct key128 k)
{
    return keyset_has(ctx, k);
}
