/* crc32c.c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) for the v3 crc32c codec,
 * shard indexes and the cache's checksums. On x86-64 with SSE4.2 the crc32 instruction runs
 * three independent streams at once (its latency is three times its throughput) whose
 * results are combined with precomputed "append N zero bytes" tables; elsewhere it is
 * table-driven, eight bytes per step ("slicing by 8"). */
#include "crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the eight-byte steps below assume a little-endian host"
#endif

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

/* The CRC register after len bytes from register c (no pre- or post-inversion). */
static uint32_t sw_update(uint32_t c, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c; /* little-endian: the low four bytes take the running CRC */
        c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
            table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
            table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Bytes per stream in one round of three. */
#define LANE 8192

static bool have_hw;
/* shift[k][v]: the register after LANE zero bytes from a register holding v at byte k */
static uint32_t shift[4][256];

static uint32_t shift_lane(uint32_t c)
{
    return shift[0][c & 0xff] ^ shift[1][(c >> 8) & 0xff] ^ shift[2][(c >> 16) & 0xff] ^
           shift[3][c >> 24];
}

static void make_shift(void)
{
    static const unsigned char zeros[LANE];
    uint32_t basis[32];
    /* The register update is linear: the image of each bit, then of each byte value. */
    for (int i = 0; i < 32; i++)
        basis[i] = sw_update(1u << i, zeros, LANE);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t s = 0;
            for (int j = 0; j < 8; j++)
                if (v >> j & 1)
                    s ^= basis[8 * k + j];
            shift[k][v] = s;
        }
}

__attribute__((target("sse4.2"))) static uint32_t hw_update(uint32_t c, const unsigned char *p,
                                                            size_t len)
{
    uint64_t c0 = c;
    while (len && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    while (len >= 3 * LANE) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *q = p + LANE, *r = p + 2 * LANE;
        for (size_t i = 0; i < LANE; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, q + i, 8);
            memcpy(&d, r + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        /* crc(A B C) = zeros(zeros(crc(A)) ^ crc(B)) ^ crc(C), from registers started at 0 */
        c0 = shift_lane(shift_lane((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * LANE;
        len -= 3 * LANE;
    }
    while (len >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        len -= 8;
    }
    while (len--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

static void init(void)
{
    make_table();
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
    if (have_hw)
        make_shift();
#endif
}

uint32_t zarr_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&table_once, init);
#if defined(__x86_64__)
    if (have_hw)
        return ~hw_update(~crc, buf, len);
#endif
    return ~sw_update(~crc, buf, len);
}

uint32_t zarr_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&table_once, init);
    return ~sw_update(~crc, buf, len);
}
