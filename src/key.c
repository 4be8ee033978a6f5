/* key.c: the 128-bit key hash (see key.h): XXH3-128 of the bytes fed, through a buffer so
 * that short keys cost one call. Not a cryptographic hash: the cache directory is trusted
 * (owner-only), keys only need to keep honest results apart. */
#include "key.h"

#include <stdio.h>
#include <string.h>

void key_init(struct keyhash *h, const char *domain)
{
    h->n = 0;
    h->streaming = false;
    key_add_str(h, domain);
}

/* Moves the buffer into the streaming state. */
static void flush(struct keyhash *h)
{
    if (!h->streaming) {
        XXH3_128bits_reset(&h->st);
        h->streaming = true;
    }
    XXH3_128bits_update(&h->st, h->buf, h->n);
    h->n = 0;
}

void key_add(struct keyhash *h, const void *data, size_t len)
{
    if (len > KEY_BUFFER - h->n) {
        flush(h);
        if (len >= KEY_BUFFER) {
            XXH3_128bits_update(&h->st, data, len);
            return;
        }
    }
    memcpy(h->buf + h->n, data, len);
    h->n += len;
}

void key_add_u64(struct keyhash *h, uint64_t v)
{
    /* little-endian whatever the host, so that a key means the same bytes everywhere */
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    key_add(h, b, sizeof b);
}

void key_add_str(struct keyhash *h, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    key_add_u64(h, s ? n : UINT64_MAX);
    key_add(h, s, n);
}

void key_add_key(struct keyhash *h, struct key128 k)
{
    key_add_u64(h, k.lo);
    key_add_u64(h, k.hi);
}

struct key128 key_final(const struct keyhash *h)
{
    XXH128_hash_t d;
    if (!h->streaming) {
        d = XXH3_128bits(h->buf, h->n);
    } else {
        XXH3_state_t st = h->st;
        XXH3_128bits_update(&st, h->buf, h->n);
        d = XXH3_128bits_digest(&st);
    }
    return (struct key128){.lo = d.low64, .hi = d.high64};
}

void key_hex(struct key128 k, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}
