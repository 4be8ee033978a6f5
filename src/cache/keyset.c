/* keyset.c: a set of 128-bit keys (open addressing), as gc, the cache budget and the labels'
 * live results use it (keyset.h). */
#include "keyset.h"

#include <stdlib.h>

#include "../util.h"

struct keyset {
    struct key128 *tab;
    bool *used;
    size_t cap, n;
};

static size_t ks_slot(const struct keyset *ks, struct key128 k)
{
    size_t i = (size_t)(k.lo ^ (k.hi >> 11)) & (ks->cap - 1);
    while (ks->used[i] && !key_eq(ks->tab[i], k))
        i = (i + 1) & (ks->cap - 1);
    return i;
}

struct keyset *keyset_new(size_t hint)
{
    struct keyset *ks = xcalloc(1, sizeof *ks);
    ks->cap = 64;
    while (ks->cap < 2 * hint)
        ks->cap *= 2;
    ks->tab = xcalloc(ks->cap, sizeof *ks->tab);
    ks->used = xcalloc(ks->cap, sizeof *ks->used);
    return ks;
}

void keyset_free(struct keyset *ks)
{
    if (!ks)
        return;
    free(ks->tab);
    free(ks->used);
    free(ks);
}

void keyset_add(struct keyset *ks, struct key128 k)
{
    if (2 * (ks->n + 1) > ks->cap) {
        struct keyset old = *ks;
        ks->cap *= 2;
        ks->tab = xcalloc(ks->cap, sizeof *ks->tab);
        ks->used = xcalloc(ks->cap, sizeof *ks->used);
        for (size_t i = 0; i < old.cap; i++)
            if (old.used[i]) {
                size_t j = ks_slot(ks, old.tab[i]);
                ks->tab[j] = old.tab[i];
                ks->used[j] = true;
            }
        free(old.tab);
        free(old.used);
    }
    size_t i = ks_slot(ks, k);
    if (!ks->used[i]) {
        ks->used[i] = true;
        ks->tab[i] = k;
        ks->n++;
    }
}

bool keyset_has(const struct keyset *ks, struct key128 k)
{
    return ks->used[ks_slot(ks, k)];
}

bool keyset_live(void *ctx, struct key128 k)
{
    return keyset_has(ctx, k);
}
