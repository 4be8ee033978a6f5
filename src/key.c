/* key.c: the 128-bit key hash (see key.h): two lanes over 64-bit words, each word mixed with
 * the splitmix64 finaliser so that every input bit reaches every output bit. Not a
 * cryptographic hash: the cache directory is trusted (owner-only), keys only need to keep
 * honest results apart. */
#include "key.h"

#include <stdio.h>
#include <string.h>

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

static inline uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline void absorb(struct keyhash *h, uint64_t w)
{
    h->a = mix64(h->a ^ w);
    h->b = rotl(h->b + w * 0x9fb21c651e98df25ULL, 27) * 0xc2b2ae3d27d4eb4fULL;
}

void key_init(struct keyhash *h, const char *domain)
{
    h->a = 0x243f6a8885a308d3ULL;
    h->b = 0x13198a2e03707344ULL;
    h->pending = 0;
    h->npending = 0;
    h->len = 0;
    key_add_str(h, domain);
}

void key_add(struct keyhash *h, const void *data, size_t len)
{
    const unsigned char *p = data;
    h->len += len;
    while (len && h->npending) {
        h->pending |= (uint64_t)*p++ << (8 * h->npending);
        len--;
        if (++h->npending == 8) {
            absorb(h, h->pending);
            h->pending = 0;
            h->npending = 0;
        }
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        absorb(h, w);
        p += 8;
        len -= 8;
    }
    while (len--)
        h->pending |= (uint64_t)*p++ << (8 * h->npending++);
}

void key_add_u64(struct keyhash *h, uint64_t v)
{
    if (h->npending) {
        key_add(h, &v, sizeof v);
        return;
    }
    /* what key_add does with 8 bytes and nothing pending, without its loops (a ROI's key
     * takes a dozen words) */
    h->len += sizeof v;
    absorb(h, v);
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
    struct keyhash t = *h;
    /* the tail and the length close the string: no two strings end in the same state */
    absorb(&t, t.pending ^ ((uint64_t)t.npending << 56));
    absorb(&t, t.len);
    return (struct key128){.lo = mix64(t.a ^ rotl(t.b, 17)), .hi = mix64(t.b + t.a * 3)};
}

void key_hex(struct key128 k, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}
