/* test_codec.c: unit tests for the Zarr v2 compressors: round trips, exact-size checks,
 * corrupt and truncated input, predictable sizes and the .zarray JSON form. */
#include <blosc.h>
#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "check.h"
#include "zarr/zarr.h"

static uint64_t rnd_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    return check_xorshift(&rnd_state);
}

/* Smooth, compressible data when smooth, else random bytes. */
static unsigned char *make_data(size_t len, bool smooth)
{
    unsigned char *p = malloc(len + 1);
    for (size_t i = 0; i < len; i++)
        p[i] = smooth ? (unsigned char)((i / 64) ^ (i % 7 == 0)) : (unsigned char)rnd();
    return p;
}

static struct zarr_codec codec(enum zarr_codec_id id, int level)
{
    struct zarr_codec c;
    memset(&c, 0, sizeof c);
    c.id = id;
    c.level = level;
    if (id == ZC_BLOSC) {
        strcpy(c.cname, "lz4");
        c.shuffle = 1;
    }
    return c;
}

/* Encodes and decodes; returns 0 when the bytes come back unchanged. */
static int round_trip(const struct zarr_codec *c, const void *data, size_t len, unsigned ts)
{
    struct errbuf err = {{0}};
    void *enc = NULL;
    size_t enc_len = 0;
    int r = zarr_codec_encode(c, data, len, ts, &enc, &enc_len, &err);
    if (r < 0) {
        fprintf(stderr, "  encode: %s\n", err.msg);
        return r;
    }
    unsigned char *dec = malloc(len + 1);
    r = zarr_codec_decode(c, enc, enc_len, dec, len, ts, &err);
    if (r < 0)
        fprintf(stderr, "  decode (id %d, %zu bytes): %s\n", (int)c->id, len, err.msg);
    else if (memcmp(dec, data, len) != 0)
        r = -1;
    free(dec);
    free(enc);
    return r;
}

static void test_round_trips(void)
{
    static const size_t sizes[] = {0, 1, 8, 24, 120, 127, 128, 1000, 4096, 65536 + 8, 1 << 20};
    static const unsigned typesizes[] = {1, 2, 4, 8};
    static const enum zarr_codec_id ids[] = {ZC_NONE, ZC_BLOSC, ZC_ZLIB, ZC_GZIP, ZC_ZSTD};
    int failures = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int smooth = 0; smooth < 2; smooth++) {
            unsigned char *data = make_data(sizes[s], smooth);
            for (size_t t = 0; t < 4; t++)
                for (size_t k = 0; k < 5; k++) {
                    if (sizes[s] % typesizes[t])
                        continue;
                    struct zarr_codec c = codec(ids[k], ids[k] == ZC_ZSTD ? 3 : 5);
                    if (round_trip(&c, data, sizes[s], typesizes[t]) != 0)
                        failures++;
                }
            free(data);
        }
    CHECK_EQ_INT(failures, 0);
}

static void test_blosc_all_cnames_shuffles(void)
{
    char *list = strdup(blosc_list_compressors());
    int failures = 0, tried = 0;
    unsigned char *data = make_data(50000 * 4, true);
    for (char *save, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save))
        for (int shuffle = -1; shuffle <= 2; shuffle++)
            for (int level = 0; level <= 9; level += 4) {
                struct zarr_codec c = codec(ZC_BLOSC, level);
                snprintf(c.cname, sizeof c.cname, "%s", name);
                c.shuffle = shuffle;
                for (unsigned ts = 1; ts <= 8; ts *= 2) {
                    tried++;
                    if (round_trip(&c, data, 50000 * 4, ts) != 0) {
                        fprintf(stderr, "  blosc %s shuffle %d level %d ts %u\n", name, shuffle,
                                level, ts);
                        failures++;
                    }
                }
            }
    CHECK_EQ_INT(failures, 0);
    CHECK(tried >= 4 * 4 * 3 * 4);
    /* an explicit block size is honoured and recorded in the frame */
    struct zarr_codec c = codec(ZC_BLOSC, 5);
    c.blocksize = 16384;
    CHECK_EQ_INT(round_trip(&c, data, 50000 * 4, 4), 0);
    free(data);
    free(list);
}

static void test_fixed_size(void)
{
    static const size_t sizes[] = {0, 1, 100, 127, 128, 129, 4096, 100000, 1 << 21};
    struct zarr_codec none = codec(ZC_NONE, 0), b0 = codec(ZC_BLOSC, 0), b5 = codec(ZC_BLOSC, 5);
    struct zarr_codec z = codec(ZC_ZSTD, 3);
    int mismatches = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        CHECK_EQ_INT(zarr_codec_fixed_size(&none, sizes[s]), (int64_t)sizes[s]);
        CHECK_EQ_INT(zarr_codec_fixed_size(&b0, sizes[s]), (int64_t)sizes[s] + 16);
        CHECK_EQ_INT(zarr_codec_fixed_size(&b5, sizes[s]), -1);
        CHECK_EQ_INT(zarr_codec_fixed_size(&z, sizes[s]), -1);
        /* the promise holds for every cname, shuffle and data */
        static const char *const cnames[] = {"lz4", "zstd", "blosclz", "zlib"};
        for (int smooth = 0; smooth < 2; smooth++) {
            unsigned char *data = make_data(sizes[s], smooth);
            for (int k = 0; k < 4; k++)
                for (int sh = -1; sh <= 2; sh++) {
                    snprintf(b0.cname, sizeof b0.cname, "%s", cnames[k]);
                    b0.shuffle = sh;
                    void *enc;
                    size_t n;
                    struct errbuf err;
                    if (zarr_codec_encode(&b0, data, sizes[s], 2, &enc, &n, &err) < 0 ||
                        (int64_t)n != zarr_codec_fixed_size(&b0, sizes[s]))
                        mismatches++;
                    else
                        free(enc);
                }
            free(data);
        }
    }
    CHECK_EQ_INT(mismatches, 0);
}

/* The size a chunk shows before its first open: no encoding of any data is ever larger. */
static void test_size_bound(void)
{
    static const size_t sizes[] = {0, 1, 15, 16, 100, 4096, 65537, 300000, 1 << 21};
    struct zarr_codec cs[] = {codec(ZC_NONE, 0), codec(ZC_BLOSC, 5), codec(ZC_BLOSC, 9),
                              codec(ZC_ZLIB, 1), codec(ZC_ZLIB, 9),  codec(ZC_GZIP, 0),
                              codec(ZC_GZIP, 6), codec(ZC_ZSTD, 1),  codec(ZC_ZSTD, 19)};
    int over = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int smooth = 0; smooth < 2; smooth++) {
            unsigned char *data = make_data(sizes[s], smooth);
            for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
                void *enc;
                size_t n;
                struct errbuf err;
                if (zarr_codec_encode(&cs[k], data, sizes[s], 2, &enc, &n, &err) < 0) {
                    over++;
                    continue;
                }
                uint64_t bound = zarr_codec_size_bound(&cs[k], sizes[s]);
                if (n > bound) {
                    fprintf(stderr, "  codec %d level %d: %zu bytes encode to %zu > bound %llu\n",
                            (int)cs[k].id, cs[k].level, sizes[s], n, (unsigned long long)bound);
                    over++;
                }
                free(enc);
            }
            free(data);
        }
    CHECK_EQ_INT(over, 0);
    struct zarr_codec b = codec(ZC_BLOSC, 5), none = codec(ZC_NONE, 0);
    CHECK(zarr_codec_size_bound(&b, UINT64_MAX - 3) == UINT64_MAX); /* saturates */
    CHECK(zarr_codec_size_bound(&none, 12345) == 12345);
}

/* Encodes data with c and checks that every truncation decodes to -EIO. */
static int truncations_fail(const struct zarr_codec *c, const unsigned char *data, size_t len)
{
    void *enc;
    size_t n;
    struct errbuf err;
    if (zarr_codec_encode(c, data, len, 4, &enc, &n, &err) < 0)
        return 1;
    unsigned char *dst = malloc(len + 1);
    int bad = 0;
    for (size_t cut = 0; cut<n; cut += n> 600 ? 1 + n / 300 : 1) {
        unsigned char *copy = malloc(cut + 1); /* exact size so ASan sees over-reads */
        memcpy(copy, enc, cut);
        err.msg[0] = '\0';
        int r = zarr_codec_decode(c, copy, cut, dst, len, 4, &err);
        if (r != -EIO || !err.msg[0]) {
            fprintf(stderr, "  codec %d: truncation to %zu of %zu gave %d\n", (int)c->id, cut, n,
                    r);
            bad++;
        }
        free(copy);
    }
    free(dst);
    free(enc);
    return bad;
}

static void test_truncated_streams(void)
{
    unsigned char *data = make_data(40000, true);
    static const enum zarr_codec_id ids[] = {ZC_NONE, ZC_BLOSC, ZC_ZLIB, ZC_GZIP, ZC_ZSTD};
    for (int k = 0; k < 5; k++) {
        struct zarr_codec c = codec(ids[k], 5);
        CHECK_EQ_INT(truncations_fail(&c, data, 40000), 0);
        CHECK_EQ_INT(truncations_fail(&c, data, 100), 0);
    }
    struct zarr_codec b = codec(ZC_BLOSC, 5);
    strcpy(b.cname, "zstd");
    CHECK_EQ_INT(truncations_fail(&b, data, 40000), 0);
    free(data);
}

/* Random bytes, and valid streams with random bytes overwritten: never a crash, and never
 * success with garbage in the header. */
static void test_garbage(void)
{
    static const enum zarr_codec_id ids[] = {ZC_BLOSC, ZC_ZLIB, ZC_GZIP, ZC_ZSTD};
    unsigned char *data = make_data(20000, true);
    unsigned char *dst = malloc(20000);
    int bad = 0;
    for (int k = 0; k < 4; k++) {
        struct zarr_codec c = codec(ids[k], 5);
        for (int iter = 0; iter < 300; iter++) {
            size_t n = (size_t)(rnd() % 3000);
            unsigned char *g = malloc(n + 1);
            for (size_t i = 0; i < n; i++)
                g[i] = (unsigned char)rnd();
            struct errbuf err;
            if (zarr_codec_decode(&c, g, n, dst, 20000, 4, &err) != -EIO)
                bad++;
            free(g);
        }
        void *enc;
        size_t n;
        struct errbuf err;
        zarr_codec_encode(&c, data, 20000, 4, &enc, &n, &err);
        for (int iter = 0; iter < 500; iter++) {
            unsigned char *g = malloc(n);
            memcpy(g, enc, n);
            for (int f = 0; f < 1 + iter % 8; f++)
                g[rnd() % n] = (unsigned char)rnd();
            int r = zarr_codec_decode(&c, g, n, dst, 20000, 4, &err);
            if (r != 0 && r != -EIO)
                bad++;
            free(g);
        }
        free(enc);
    }
    CHECK_EQ_INT(bad, 0);
    free(dst);
    free(data);
}

static void test_wrong_size(void)
{
    static const enum zarr_codec_id ids[] = {ZC_NONE, ZC_BLOSC, ZC_ZLIB, ZC_GZIP, ZC_ZSTD};
    unsigned char *data = make_data(5000, true);
    unsigned char *dst = malloc(5001);
    for (int k = 0; k < 5; k++) {
        struct zarr_codec c = codec(ids[k], 5);
        void *enc;
        size_t n;
        struct errbuf err;
        CHECK_EQ_INT(zarr_codec_encode(&c, data, 5000, 1, &enc, &n, &err), 0);
        memset(dst, 0xee, 5001);
        CHECK_EQ_INT(zarr_codec_decode(&c, enc, n, dst, 4999, 1, &err), -EIO);
        CHECK_STR_CONTAINS(err.msg, "decoded");
        CHECK_STR_CONTAINS(err.msg, "expected 4999");
        CHECK(dst[4999] == 0xee); /* nothing written past dst_len */
        CHECK_EQ_INT(zarr_codec_decode(&c, enc, n, dst, 5001, 1, &err), -EIO);
        CHECK_STR_CONTAINS(err.msg, "decoded 5000 bytes, expected 5001");
        CHECK_EQ_INT(zarr_codec_decode(&c, enc, n, dst, 5000, 1, &err), 0);
        free(enc);
    }
    free(dst);
    free(data);
}

static void test_zstd_frames(void)
{
    unsigned char *data = make_data(300000, true);
    unsigned char *dst = malloc(300000);
    struct zarr_codec c = codec(ZC_ZSTD, 1);
    struct errbuf err;
    /* a streamed frame without a content size: input handed over before the end directive */
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    size_t cap = ZSTD_compressBound(300000) + 64;
    unsigned char *enc = malloc(2 * cap);
    ZSTD_inBuffer in = {data, 300000, 0};
    ZSTD_outBuffer out = {enc, cap, 0};
    size_t rem;
    rem = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_continue);
    CHECK(!ZSTD_isError(rem) && in.pos == in.size);
    do
        rem = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end);
    while (rem > 0 && !ZSTD_isError(rem));
    CHECK(!ZSTD_isError(rem));
    CHECK(ZSTD_getFrameContentSize(enc, out.pos) == ZSTD_CONTENTSIZE_UNKNOWN);
    size_t n1 = out.pos;
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, n1, dst, 300000, 1, &err), 0);
    CHECK(memcmp(dst, data, 300000) == 0);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, n1, dst, 299999, 1, &err), -EIO);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, n1, dst, 300000, 1, &err), 0);
    unsigned char *big = malloc(300001);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, n1, big, 300001, 1, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "decoded 300000 bytes, expected 300001");
    free(big);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, n1 - 3, dst, 300000, 1, &err), -EIO);
    /* two concatenated frames, the first without a content size */
    unsigned char *second = malloc(cap);
    size_t n2 = ZSTD_compress(second, cap, data + 100000, 200000, 3);
    CHECK(!ZSTD_isError(n2));
    in = (ZSTD_inBuffer){data, 100000, 0};
    out = (ZSTD_outBuffer){enc, cap, 0};
    ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
    rem = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_continue);
    CHECK(!ZSTD_isError(rem) && in.pos == in.size);
    do
        rem = ZSTD_compressStream2(cc, &out, &in, ZSTD_e_end);
    while (rem > 0 && !ZSTD_isError(rem));
    memcpy(enc + out.pos, second, n2);
    free(second);
    memset(dst, 0, 300000);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, out.pos + n2, dst, 300000, 1, &err), 0);
    CHECK(memcmp(dst, data, 300000) == 0);
    size_t a = ZSTD_compress(enc, cap, data, 100000, 3);
    size_t b = ZSTD_compress(enc + a, cap, data + 100000, 200000, 3);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, a + b, dst, 300000, 1, &err), 0);
    CHECK(memcmp(dst, data, 300000) == 0);
    CHECK_EQ_INT(zarr_codec_decode(&c, enc, a, dst, 300000, 1, &err), -EIO);
    ZSTD_freeCCtx(cc);
    free(enc);
    free(dst);
    free(data);
}

static void test_gzip_members_and_headers(void)
{
    unsigned char *data = make_data(10000, true), dst[10000];
    struct zarr_codec g = codec(ZC_GZIP, 6), z = codec(ZC_ZLIB, 6);
    void *e1, *e2;
    size_t n1, n2;
    struct errbuf err;
    CHECK_EQ_INT(zarr_codec_encode(&g, data, 4000, 1, &e1, &n1, &err), 0);
    CHECK_EQ_INT(zarr_codec_encode(&g, data + 4000, 6000, 1, &e2, &n2, &err), 0);
    unsigned char *both = malloc(n1 + n2);
    memcpy(both, e1, n1);
    memcpy(both + n1, e2, n2);
    CHECK_EQ_INT(zarr_codec_decode(&g, both, n1 + n2, dst, 10000, 1, &err), 0);
    CHECK(memcmp(dst, data, 10000) == 0);
    /* RFC1952 vs RFC1950 framing: magic bytes, and each decoder rejects the other */
    CHECK(((unsigned char *)e1)[0] == 0x1f && ((unsigned char *)e1)[1] == 0x8b);
    CHECK_EQ_INT(zarr_codec_decode(&z, e1, n1, dst, 4000, 1, &err), -EIO);
    void *e3;
    size_t n3;
    CHECK_EQ_INT(zarr_codec_encode(&z, data, 4000, 1, &e3, &n3, &err), 0);
    CHECK(((unsigned char *)e3)[0] == 0x78);
    CHECK_EQ_INT(zarr_codec_decode(&g, e3, n3, dst, 4000, 1, &err), -EIO);
    /* zlib output is what zlib's own uncompress() reads */
    uLongf ul = 4000;
    CHECK_EQ_INT(uncompress(dst, &ul, e3, (uLong)n3), Z_OK);
    CHECK(ul == 4000 && memcmp(dst, data, 4000) == 0);
    free(both);
    free(e1);
    free(e2);
    free(e3);
    free(data);
}

static void test_blosc_header_checks(void)
{
    unsigned char *data = make_data(4096, true), dst[4096];
    struct zarr_codec b = codec(ZC_BLOSC, 5);
    void *enc;
    size_t n;
    struct errbuf err;
    CHECK_EQ_INT(zarr_codec_encode(&b, data, 4096, 2, &enc, &n, &err), 0);
    unsigned char *e = enc;
    CHECK_EQ_INT(e[0], 2); /* format version */
    CHECK_EQ_INT(e[3], 2); /* typesize */
    size_t nb, cb, bs;
    blosc_cbuffer_sizes(e, &nb, &cb, &bs);
    CHECK(nb == 4096 && cb == n);
    /* trailing bytes after a valid frame are tolerated */
    unsigned char *longer = malloc(n + 10);
    memcpy(longer, e, n);
    memset(longer + n, 0, 10);
    CHECK_EQ_INT(zarr_codec_decode(&b, longer, n + 10, dst, 4096, 2, &err), 0);
    CHECK(memcmp(dst, data, 4096) == 0);
    /* a header claiming another size is refused before decompression */
    longer[4] ^= 1;
    CHECK_EQ_INT(zarr_codec_decode(&b, longer, n + 10, dst, 4096, 2, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "expected 4096");
    /* a bad version byte */
    memcpy(longer, e, n);
    longer[0] = 9;
    CHECK_EQ_INT(zarr_codec_decode(&b, longer, n, dst, 4096, 2, &err), -EIO);
    free(longer);
    free(enc);
    free(data);
}

static void test_to_json(void)
{
    struct zarr_codec none = codec(ZC_NONE, 0);
    CHECK(zarr_codec_to_json(&none, 2) == NULL);
    struct zarr_codec b = codec(ZC_BLOSC, 7);
    strcpy(b.cname, "zstd");
    b.shuffle = -1;
    json_t *o = zarr_codec_to_json(&b, 1);
    char *s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    CHECK(strcmp(s, "{\"blocksize\":0,\"clevel\":7,\"cname\":\"zstd\",\"id\":\"blosc\","
                    "\"shuffle\":2}") == 0);
    free(s);
    json_decref(o);
    o = zarr_codec_to_json(&b, 2); /* auto shuffle: byte shuffle for multi-byte types */
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "shuffle")), 1);
    CHECK(json_object_get(o, "typesize") == NULL);
    json_decref(o);
    struct zarr_codec z = codec(ZC_ZSTD, 3), g = codec(ZC_GZIP, 5), zl = codec(ZC_ZLIB, 1);
    o = zarr_codec_to_json(&z, 2);
    s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    CHECK(strcmp(s, "{\"id\":\"zstd\",\"level\":3}") == 0);
    free(s);
    json_decref(o);
    o = zarr_codec_to_json(&g, 2);
    s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    CHECK(strcmp(s, "{\"id\":\"gzip\",\"level\":5}") == 0);
    free(s);
    json_decref(o);
    o = zarr_codec_to_json(&zl, 2);
    s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    CHECK(strcmp(s, "{\"id\":\"zlib\",\"level\":1}") == 0);
    free(s);
    json_decref(o);
}

int main(void)
{
    RUN(test_round_trips);
    RUN(test_blosc_all_cnames_shuffles);
    RUN(test_fixed_size);
    RUN(test_size_bound);
    RUN(test_truncated_streams);
    RUN(test_garbage);
    RUN(test_wrong_size);
    RUN(test_zstd_frames);
    RUN(test_gzip_members_and_headers);
    RUN(test_blosc_header_checks);
    RUN(test_to_json);
    return check_done();
}
