/* key.h: 128-bit keys that name cached results by everything they depend on: XXH3-128
 * (Debian's libxxhash) of a canonical byte string that starts with a domain tag, so that keys
 * of different kinds (processor identity, ROI result, chunk) never collide by construction.
 * The key of a byte string is exactly `xxh128sum` of it, however it was fed. */
#ifndef ROIFS_KEY_H
#define ROIFS_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t by value: no allocation per key */
#include <xxhash.h>

struct key128 {
    uint64_t lo, hi;
};

/* The state of one key being hashed; feed it bytes in a canonical order. A key of up to
 * KEY_BUFFER bytes (a ROI's: a dozen words) is hashed in one call at the end; a longer one
 * (a chunk's, over its ROIs' keys) streams through the XXH3 state. */
#define KEY_BUFFER 256
struct keyhash {
    unsigned char buf[KEY_BUFFER];
    size_t n;       /* bytes in buf */
    bool streaming; /* st holds what came before buf */
    XXH3_state_t st;
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
