/* key.h: 128-bit keys that name cached results by everything they depend on (CACHE.md):
 * a streaming hash over a canonical byte string, with a domain tag so that keys of different
 * kinds (processor identity, ROI result, chunk) never collide by construction. */
#ifndef ROIFS_KEY_H
#define ROIFS_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct key128 {
    uint64_t lo, hi;
};

/* The state of one key being hashed; feed it bytes in a canonical order. */
struct keyhash {
    uint64_t a, b;    /* two independent lanes */
    uint64_t pending; /* bytes not yet absorbed, little-endian */
    unsigned npending;
    uint64_t len;
};

void key_init(struct keyhash *h, const char *domain);
void key_add(struct keyhash *h, const void *data, size_t len);
void key_add_u64(struct keyhash *h, uint64_t v);
/* A length-prefixed string: "ab" + "c" and "a" + "bc" hash differently. */
void key_add_str(struct keyhash *h, const char *s);
void key_add_key(struct keyhash *h, struct key128 k);
struct key128 key_final(const struct keyhash *h);

static inline bool key_eq(struct key128 x, struct key128 y)
{
    return x.lo == y.lo && x.hi == y.hi;
}

/* 32 hex digits and a NUL. */
void key_hex(struct key128 k, char out[33]);

#endif
