/* test_v3_codecs.c: unit tests for zarr.json emission, the Zarr v3 codecs (bytes, transpose, blosc,
 * gzip, zstd, crc32c), shards (index at start and end, empty inner chunks) and the input reader on
 * v3 arrays, sharded or not. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "scratch.h"
#include "nd.h"
#include "zarr/zarr.h"

#define BYTES_LE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}"

static char tmp_root[256];

static uint64_t rnd_state = 0x2545F4914F6CDD1DULL;
static uint64_t rnd(void)
{
    return check_xorshift(&rnd_state);
}

static int parse(const char *json, struct zarr_meta *m, struct errbuf *err)
{
    return zarr_meta_parse_v3(json, strlen(json), m, NULL, NULL, err);
}

static struct zarr_chain chain_of(bool big, int nbb, const struct zarr_bb *bb)
{
    struct zarr_chain ch = {.big_endian = big, .nbb = nbb};
    if (nbb)
        memcpy(ch.bb, bb, (size_t)nbb * sizeof *bb);
    return ch;
}

/* Encodes and decodes src with ch and checks the round trip; returns the encoded length. */
static size_t round_trip(const struct zarr_chain *ch, const struct dtype *dt, const uint64_t *shape,
                         int nd, const void *src)
{
    size_t n = (size_t)nd_prod(shape, nd) * dt->size;
    void *enc = NULL, *back = malloc(n + 1);
    size_t len = 0;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_chain_encode(ch, dt, shape, nd, src, &enc, &len, &err), 0);
    CHECK_EQ_INT(zarr_chain_decode(ch, dt, shape, nd, enc, len, back, &err), 0);
    CHECK(memcmp(back, src, n) == 0);
    int64_t fixed = zarr_chain_fixed_size(ch, n);
    CHECK(fixed < 0 || (size_t)fixed == len);
    /* every truncation fails cleanly */
    for (size_t cut = 1; cut <= 5 && cut <= len; cut++) {
        bool crc = ch->nbb && ch->bb[ch->nbb - 1].crc32c;
        if (crc || fixed >= 0)
            CHECK(zarr_chain_decode(ch, dt, shape, nd, enc, len - cut, back, &err) < 0);
    }
    free(enc);
    free(back);
    return len;
}

static void test_codec_round_trips(void)
{
    uint64_t shape[] = {5, 7, 6};
    struct dtype dt = {.kind = DT_UINT, .size = 4};
    uint32_t src[5 * 7 * 6];
    for (size_t i = 0; i < sizeof src / 4; i++)
        src[i] = (uint32_t)(i * 2654435761u) % 1000;
    struct zarr_bb crc = {.crc32c = true};
    struct zarr_bb blosc = {.c = {.id = ZC_BLOSC, .level = 5, .cname = "lz4", .shuffle = 1}};
    struct zarr_bb blosc0 = {.c = {.id = ZC_BLOSC, .level = 0, .cname = "zstd", .shuffle = 2}};
    struct zarr_bb gzip = {.c = {.id = ZC_GZIP, .level = 6}};
    struct zarr_bb zstd = {.c = {.id = ZC_ZSTD, .level = 3}};
    size_t raw = sizeof src;

    struct zarr_chain ch = chain_of(false, 0, NULL);
    CHECK_EQ_INT(round_trip(&ch, &dt, shape, 3, src), raw);
    /* bytes little-endian is the memory layout itself */
    void *enc;
    size_t len;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_chain_encode(&ch, &dt, shape, 3, src, &enc, &len, &err), 0);
    CHECK(memcmp(enc, src, raw) == 0);
    free(enc);
    /* big-endian: every element byte-swapped */
    ch = chain_of(true, 0, NULL);
    CHECK_EQ_INT(zarr_chain_encode(&ch, &dt, shape, 3, src, &enc, &len, &err), 0);
    const unsigned char *e = enc;
    CHECK(e[4] == (src[1] >> 24) && e[7] == (src[1] & 0xff));
    free(enc);
    CHECK_EQ_INT(round_trip(&ch, &dt, shape, 3, src), raw);

    ch = chain_of(false, 1, &crc);
    CHECK_EQ_INT(round_trip(&ch, &dt, shape, 3, src), raw + 4);
    ch = chain_of(false, 1, &blosc);
    CHECK(round_trip(&ch, &dt, shape, 3, src) < raw);
    ch = chain_of(false, 1, &blosc0);
    CHECK_EQ_INT(round_trip(&ch, &dt, shape, 3, src), raw + 16);
    CHECK_EQ_INT(zarr_chain_fixed_size(&ch, raw), raw + 16);
    ch = chain_of(false, 1, &gzip);
    CHECK(round_trip(&ch, &dt, shape, 3, src) < raw);
    CHECK_EQ_INT(zarr_chain_fixed_size(&ch, raw), -1);
    ch = chain_of(false, 1, &zstd);
    CHECK(round_trip(&ch, &dt, shape, 3, src) < raw);
    struct zarr_bb both[] = {crc, gzip, crc};
    ch = chain_of(true, 3, both);
    round_trip(&ch, &dt, shape, 3, src);
    struct zarr_bb two[] = {blosc0, crc};
    ch = chain_of(true, 2, two);
    CHECK_EQ_INT(round_trip(&ch, &dt, shape, 3, src), raw + 20);

    /* a flipped bit fails the checksum */
    ch = chain_of(false, 2, (struct zarr_bb[]){gzip, crc});
    CHECK_EQ_INT(zarr_chain_encode(&ch, &dt, shape, 3, src, &enc, &len, &err), 0);
    ((unsigned char *)enc)[len / 2] ^= 0x10;
    uint32_t back[5 * 7 * 6];
    CHECK_EQ_INT(zarr_chain_decode(&ch, &dt, shape, 3, enc, len, back, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "crc32c: checksum mismatch");
    free(enc);
    /* a wrong decoded size is an error */
    uint64_t other[] = {5, 7, 5};
    ch = chain_of(false, 1, &zstd);
    CHECK_EQ_INT(zarr_chain_encode(&ch, &dt, other, 3, src, &enc, &len, &err), 0);
    CHECK_EQ_INT(zarr_chain_decode(&ch, &dt, shape, 3, enc, len, back, &err), -EIO);
    free(enc);
    ch = chain_of(false, 0, NULL);
    CHECK_EQ_INT(zarr_chain_decode(&ch, &dt, shape, 3, src, raw - 4, back, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "expected");

    /* every core data type through bytes big-endian + crc32c */
    static const char *const types[] = {"bool",   "int8",    "int16",   "int32",
                                        "int64",  "uint8",   "uint16",  "uint32",
                                        "uint64", "float16", "float32", "float64"};
    unsigned char buf[210 * 8];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)rnd();
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        struct dtype d;
        CHECK_EQ_INT(dtype_parse(types[t], &d, &err), 0);
        if (d.kind == DT_BOOL)
            for (size_t i = 0; i < sizeof buf; i++)
                buf[i] &= 1;
        struct zarr_bb st[] = {zstd, crc};
        ch = chain_of(true, 2, st);
        round_trip(&ch, &d, shape, 3, buf);
    }
}

/* The transpose codec against the definition: B[pos_B] = A[pos_A], pos_B[i] = pos_A[order[i]]. */
static void test_transpose(void)
{
    uint64_t shape[] = {3, 4, 5};
    uint16_t a[60];
    for (int i = 0; i < 60; i++)
        a[i] = (uint16_t)i;
    struct dtype dt = {.kind = DT_UINT, .size = 2};
    static const uint8_t orders[][3] = {{2, 0, 1}, {1, 2, 0}, {2, 1, 0}, {0, 2, 1}, {1, 0, 2}};
    for (size_t o = 0; o < sizeof orders / sizeof orders[0]; o++) {
        struct zarr_chain ch = {.transpose = true};
        memcpy(ch.order, orders[o], 3);
        void *enc;
        size_t len;
        struct errbuf err = {{0}};
        CHECK_EQ_INT(zarr_chain_encode(&ch, &dt, shape, 3, a, &enc, &len, &err), 0);
        uint64_t bshape[3], pa[3], pb[3];
        for (int d = 0; d < 3; d++)
            bshape[d] = shape[orders[o][d]];
        bool ok = len == sizeof a;
        for (uint64_t k = 0; k < 60 && ok; k++) {
            nd_unlinear(k, shape, 3, pa);
            for (int d = 0; d < 3; d++)
                pb[d] = pa[orders[o][d]];
            uint16_t v;
            memcpy(&v, (char *)enc + 2 * nd_linear(pb, bshape, 3), 2);
            ok = v == a[k];
        }
        CHECK(ok);
        free(enc);
        round_trip(&ch, &dt, shape, 3, a);
    }
    /* zarr.json transposes compose: [1,2,0] then [1,2,0] is [2,0,1] */
    struct zarr_meta m;
    struct errbuf err = {{0}};
    char *j = xasprintf("{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[3,4,5],"
                        "\"data_type\":\"uint16\",\"chunk_grid\":{\"name\":\"regular\","
                        "\"configuration\":{\"chunk_shape\":[3,4,5]}},\"chunk_key_encoding\":"
                        "{\"name\":\"default\"},\"fill_value\":0,\"codecs\":["
                        "{\"name\":\"transpose\",\"configuration\":{\"order\":[1,2,0]}},"
                        "{\"name\":\"transpose\",\"configuration\":{\"order\":[1,2,0]}},"
                        "%s]}",
                        BYTES_LE);
    CHECK_EQ_INT(parse(j, &m, &err), 0);
    CHECK(m.codecs.transpose && m.codecs.order[0] == 2 && m.codecs.order[1] == 0 &&
          m.codecs.order[2] == 1);
    free(j);
}

/* ---- shards ---- */

/* A uint16 [10, 9] array in shards [4, 6] of inner chunks [2, 3], fill 7. */
static struct zarr_meta shard_meta(bool at_start, const struct zarr_bb *inner_bb)
{
    struct zarr_meta m = {.format = 3,
                          .ndim = 2,
                          .shape = {10, 9},
                          .chunks = {4, 6},
                          .dtype = {.kind = DT_UINT, .size = 2},
                          .key_prefix_c = true,
                          .separator = '/',
                          .sharded = true};
    uint16_t fill = 7;
    memcpy(m.fill, &fill, 2);
    m.shard.inner[0] = 2;
    m.shard.inner[1] = 3;
    m.shard.index_at_start = at_start;
    if (inner_bb)
        m.shard.codecs.bb[m.shard.codecs.nbb++] = *inner_bb;
    m.shard.index_codecs.bb[m.shard.index_codecs.nbb++].crc32c = true;
    return m;
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void test_shards(void)
{
    struct zarr_bb gzip = {.c = {.id = ZC_GZIP, .level = 1}};
    uint16_t shard[24], back[24];
    for (int at_start = 0; at_start < 2; at_start++) {
        for (int compressed = 0; compressed < 2; compressed++) {
            struct zarr_meta m = shard_meta(at_start, compressed ? &gzip : NULL);
            /* inner chunks 0 and 3 hold only the fill value */
            for (int i = 0; i < 24; i++) {
                int r = i / 6, c = i % 6, inner = (r / 2) * 2 + c / 3;
                shard[i] = inner == 0 || inner == 3 ? 7 : (uint16_t)(100 + i);
            }
            void *enc;
            size_t len;
            struct errbuf err = {{0}};
            CHECK_EQ_INT(zarr_encode_chunk(&m, shard, sizeof shard, &enc, &len, &err), 0);
            size_t isz = zarr_shard_index_size(&m);
            CHECK_EQ_INT(isz, 4 * 16 + 4);
            int64_t fixed = zarr_chunk_fixed_size(&m);
            if (compressed)
                CHECK_EQ_INT(fixed, -1);
            else
                CHECK_EQ_INT(fixed, 4 * 12 + 4 * 16 + 4);
            CHECK(fixed < 0 || (size_t)fixed == len);
            const unsigned char *ix = (const unsigned char *)enc + (at_start ? 0 : len - isz);
            CHECK_EQ_INT(zarr_crc32c(0, ix, 64), (uint32_t)ix[64] | (uint32_t)ix[65] << 8 |
                                                     (uint32_t)ix[66] << 16 |
                                                     (uint32_t)ix[67] << 24);
            for (int k = 0; k < 4; k++) {
                uint64_t off = get_le64(ix + 16 * k), n = get_le64(ix + 16 * k + 8);
                bool empty = compressed && (k == 0 || k == 3);
                CHECK(empty ? off == UINT64_MAX && n == UINT64_MAX
                            : off + n <= len && (!at_start || off >= isz));
                if (!compressed)
                    CHECK_EQ_INT(n, 12);
            }
            uint64_t entries[8];
            CHECK_EQ_INT(zarr_shard_index_decode(&m, ix, len, entries, &err), 0);
            memset(back, 0, sizeof back);
            CHECK_EQ_INT(zarr_decode_chunk(&m, enc, len, back, &err), 0);
            CHECK(memcmp(back, shard, sizeof shard) == 0);
            /* a corrupt index fails */
            unsigned char *bad = malloc(len);
            memcpy(bad, enc, len);
            bad[(at_start ? 0 : len - isz) + 3] ^= 1;
            CHECK_EQ_INT(zarr_decode_chunk(&m, bad, len, back, &err), -EIO);
            CHECK_STR_CONTAINS(err.msg, "shard index: crc32c");
            CHECK_EQ_INT(zarr_decode_chunk(&m, enc, isz - 1, back, &err), -EIO);
            CHECK_STR_CONTAINS(err.msg, "shorter than its index");
            free(bad);
            free(enc);
        }
    }

    /* a hand-made shard: inner chunk 1 only, stored raw, the others empty */
    struct zarr_meta m = shard_meta(false, NULL);
    unsigned char raw[12 + 68];
    for (int i = 0; i < 6; i++) {
        raw[2 * i] = (unsigned char)(50 + i);
        raw[2 * i + 1] = 0;
    }
    uint64_t ent[8] = {UINT64_MAX, UINT64_MAX, 0,          12,
                       UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    memcpy(raw + 12, ent, 64);
    uint32_t crc = zarr_crc32c(0, raw + 12, 64);
    memcpy(raw + 76, &crc, 4);
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_decode_chunk(&m, raw, sizeof raw, back, &err), 0);
    for (int i = 0; i < 24; i++) {
        int r = i / 6, c = i % 6, inner = (r / 2) * 2 + c / 3;
        uint16_t want = inner == 1 ? (uint16_t)(50 + r * 3 + (c - 3)) : 7;
        if (back[i] != want) {
            CHECK_EQ_INT(back[i], want);
            break;
        }
    }
    /* an entry pointing past the end of the shard */
    ent[2] = 70;
    memcpy(raw + 12, ent, 64);
    crc = zarr_crc32c(0, raw + 12, 64);
    memcpy(raw + 76, &crc, 4);
    CHECK_EQ_INT(zarr_decode_chunk(&m, raw, sizeof raw, back, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "lies outside the shard");
}

/* Writes the uint16 array ref (shape of m) as a v3 array in dir; shards listed in skip are
 * not written. */
static void write_v3_array(const struct zarr_meta *m, const uint16_t *ref, const char *dir,
                           uint64_t skip)
{
    char *text = zarr_meta_emit_v3(m, "{\"a\": 1}", NULL);
    scratch_write_file(dir, "zarr.json", text, strlen(text));
    free(text);
    uint64_t grid[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM], g[ROIFS_MAX_DIM], e[ROIFS_MAX_DIM];
    zarr_meta_grid(m, grid);
    size_t cn = (size_t)nd_prod(m->chunks, m->ndim);
    uint16_t *chunk = malloc(cn * 2), fill;
    memcpy(&fill, m->fill, 2);
    for (uint64_t id = 0; id < nd_prod(grid, m->ndim); id++) {
        if (id == skip)
            continue;
        nd_unlinear(id, grid, m->ndim, ci);
        for (size_t k = 0; k < cn; k++) {
            nd_unlinear(k, m->chunks, m->ndim, e);
            bool inside = true;
            for (int d = 0; d < m->ndim; d++) {
                g[d] = ci[d] * m->chunks[d] + e[d];
                inside = inside && g[d] < m->shape[d];
            }
            chunk[k] = inside ? ref[nd_linear(g, m->shape, m->ndim)] : fill;
        }
        void *enc;
        size_t len;
        struct errbuf err = {{0}};
        CHECK_EQ_INT(zarr_encode_chunk(m, chunk, cn * 2, &enc, &len, &err), 0);
        char key[256];
        zarr_meta_chunk_key(m, ci, key, sizeof key);
        scratch_write_file(dir, key, enc, len);
        free(enc);
    }
    free(chunk);
}

static void check_reads(struct zarr_input *in, const uint16_t *ref, const uint64_t *shape,
                        uint64_t skip_shard, const uint64_t *shard)
{
    struct errbuf err = {{0}};
    uint16_t out[10 * 9];
    uint64_t zero[2] = {0, 0};
    CHECK_EQ_INT(zarr_input_read(in, zero, shape, out, &err), 0);
    bool ok = true;
    for (uint64_t i = 0; i < 90 && ok; i++) {
        uint64_t r = i / 9, c = i % 9;
        bool skipped = r / shard[0] * 2 + c / shard[1] == skip_shard;
        ok = out[i] == (skipped ? 7 : ref[i]);
        if (!ok)
            fprintf(stderr, "element %llu: %u\n", (unsigned long long)i, out[i]);
    }
    CHECK(ok);
    uint64_t start[] = {3, 2}, box[] = {5, 4};
    uint16_t small[20];
    CHECK_EQ_INT(zarr_input_read(in, start, box, small, &err), 0);
    for (int i = 0; i < 20; i++) {
        uint64_t r = 3 + (uint64_t)i / 4, c = 2 + (uint64_t)i % 4;
        bool skipped = r / shard[0] * 2 + c / shard[1] == skip_shard;
        if (small[i] != (skipped ? 7 : ref[r * 9 + c])) {
            CHECK_EQ_INT(small[i], ref[r * 9 + c]);
            break;
        }
    }
}

/* Damages dir's shard c/0/0 (its index checksum, then its length): the reads that need it fail
 * with EIO naming the file, the others still work. Rewriting c/1/0 changes the signature. */
static void check_damaged_shard(const struct zarr_meta *m, const char *dir, const uint16_t *ref,
                                uint64_t sig1)
{
    struct zarr_input *in;
    struct errbuf err = {{0}};
    uint64_t sig2, zero[2] = {0, 0}, one[2] = {1, 1}, far[2] = {9, 8};
    /* the signature follows every shard file, not just the first ones */
    char *p10 = xasprintf("%s/c/1/0", dir);
    struct stat st10;
    CHECK_EQ_INT(stat(p10, &st10), 0);
    CHECK_EQ_INT(truncate(p10, st10.st_size + 1), 0);
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), 0);
    CHECK_EQ_INT(zarr_input_signature(in, zero, m->shape, &sig2), 0);
    CHECK(sig1 != sig2);
    zarr_input_close(in);
    CHECK_EQ_INT(truncate(p10, st10.st_size), 0);
    free(p10);

    char *p = xasprintf("%s/c/0/0", dir);
    FILE *f = fopen(p, "r+b");
    CHECK(f != NULL);
    if (f) { /* a bit of the index's checksum */
        fseek(f, m->shard.index_at_start ? 2 : -3, m->shard.index_at_start ? SEEK_SET : SEEK_END);
        int ch = fgetc(f);
        fseek(f, -1, SEEK_CUR);
        fputc(ch ^ 0x40, f);
        fclose(f);
    }
    uint16_t v1;
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), 0);
    CHECK_EQ_INT(zarr_input_read(in, zero, one, &v1, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "c/0/0");
    CHECK_STR_CONTAINS(err.msg, "crc32c");
    CHECK_EQ_INT(zarr_input_read(in, far, one, &v1, &err), 0);
    CHECK_EQ_INT(v1, ref[89]);
    zarr_input_close(in);

    CHECK_EQ_INT(truncate(p, 10), 0);
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), 0);
    CHECK_EQ_INT(zarr_input_read(in, zero, one, &v1, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "shorter than its index");
    zarr_input_close(in);
    free(p);
}

/* A damaged chunk c/1/1 (unsharded) fails with EIO naming it. */
static void check_damaged_chunk(const char *dir)
{
    char *p = xasprintf("%s/c/1/1", dir);
    FILE *f = fopen(p, "r+b");
    CHECK(f != NULL);
    if (f) {
        fputc(0x55, f);
        fclose(f);
    }
    struct zarr_input *in;
    struct errbuf err = {{0}};
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), 0);
    uint16_t v1;
    uint64_t at[2] = {4, 5}, one[2] = {1, 1};
    CHECK_EQ_INT(zarr_input_read(in, at, one, &v1, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "c/1/1");
    zarr_input_close(in);
    free(p);
}

/* Variant v of the test array: sharded with the index at the end (0) or start (1), with gzip
 * (0, 1) or raw (2) inner chunks; or (3) unsharded, transposed, big-endian, gzip, crc32c. */
static struct zarr_meta input_variant(int v)
{
    struct zarr_bb gzip = {.c = {.id = ZC_GZIP, .level = 1}};
    struct zarr_meta m = shard_meta(v == 1, v == 2 ? NULL : &gzip);
    if (v == 3) {
        m.sharded = false;
        m.chunks[0] = 3;
        m.chunks[1] = 4;
        m.codecs.transpose = true;
        m.codecs.order[0] = 1;
        m.codecs.order[1] = 0;
        m.codecs.big_endian = true;
        m.codecs.bb[m.codecs.nbb++] = gzip;
        m.codecs.bb[m.codecs.nbb++].crc32c = true;
    }
    return m;
}

static void test_input_v3(void)
{
    uint16_t ref[90];
    for (int i = 0; i < 90; i++)
        ref[i] = (uint16_t)(1000 + i * 7);
    /* inner chunk (0, 1) of shard 0 holds the fill value: stored empty with gzip */
    for (int r = 0; r < 2; r++)
        for (int c = 3; c < 6; c++)
            ref[r * 9 + c] = 7;
    struct errbuf err = {{0}};
    for (int v = 0; v < 4; v++) {
        struct zarr_meta m = input_variant(v);
        char *dir = xasprintf("%s/in%d", tmp_root, v);
        uint64_t skip = m.sharded ? 3 : UINT64_MAX; /* shard (1, 1) missing: fill */
        write_v3_array(&m, ref, dir, skip);
        struct zarr_input *in;
        int r = zarr_input_open(dir, 1 << 20, &in, &err);
        CHECK_EQ_INT(r, 0);
        if (r < 0) {
            fprintf(stderr, "%s\n", err.msg);
            free(dir);
            continue;
        }
        /* written just now: without this no decoded chunk would be used twice for 2 s (the
         * racy-timestamp margin, test_input_hash.c) and the loads below would not count */
        zarr_input_set_racy_margin(in, 0);
        CHECK_EQ_INT(zarr_input_meta(in)->format, 3);
        CHECK(strcmp(zarr_input_zattrs_text(in), "{\"a\":1}") == 0);
        CHECK(zarr_input_dimension_names_text(in) == NULL);
        uint64_t shard[2] = {m.chunks[0], m.chunks[1]};
        check_reads(in, ref, m.shape, skip, shard);
        struct zarr_input_stats st;
        zarr_input_get_stats(in, &st);
        if (m.sharded) /* 15 inner chunks and 6 shard indexes, each loaded once */
            CHECK_EQ_INT(st.loads, 15 + 6);
        zarr_input_close(in);
        /* the smallest cache (two inner chunks and an index) gives the same data */
        CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), 0);
        check_reads(in, ref, m.shape, skip, shard);
        uint64_t sig, zero[2] = {0, 0};
        CHECK_EQ_INT(zarr_input_signature(in, zero, m.shape, &sig), 0);
        zarr_input_close(in);
        if (m.sharded)
            check_damaged_shard(&m, dir, ref, sig);
        else
            check_damaged_chunk(dir);
        free(dir);
    }
}

static void test_input_v3_other(void)
{
    /* a 0-d array: one chunk, key "c" */
    struct errbuf err = {{0}};
    char *zd = xasprintf("%s/zero-d", tmp_root);
    struct zarr_meta z0 = {.format = 3,
                           .dtype = {.kind = DT_FLOAT, .size = 8},
                           .key_prefix_c = true,
                           .separator = '/'};
    z0.codecs.bb[z0.codecs.nbb++].crc32c = true;
    char *zt = zarr_meta_emit_v3(&z0, NULL, NULL);
    scratch_write_file(zd, "zarr.json", zt, strlen(zt));
    free(zt);
    double pi = 3.25, got = 0;
    void *enc;
    size_t len;
    CHECK_EQ_INT(zarr_encode_chunk(&z0, &pi, 8, &enc, &len, &err), 0);
    CHECK_EQ_INT(len, 12);
    scratch_write_file(zd, "c", enc, len);
    free(enc);
    struct zarr_input *in;
    CHECK_EQ_INT(zarr_input_open(zd, 0, &in, &err), 0);
    CHECK_EQ_INT(zarr_input_read(in, NULL, NULL, &got, &err), 0);
    CHECK(got == 3.25);
    zarr_input_close(in);
    free(zd);

    /* a v3 array that roifs does not understand is refused with the file named */
    char *dir = xasprintf("%s/bad", tmp_root);
    const char *j = "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[4],\"data_type\":"
                    "\"uint8\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"
                    "{\"chunk_shape\":[2]}},\"chunk_key_encoding\":{\"name\":\"default\"},"
                    "\"fill_value\":0,\"codecs\":[\"bytes\",{\"name\":\"fancy\"}]}";
    scratch_write_file(dir, "zarr.json", j, strlen(j));
    CHECK_EQ_INT(zarr_input_open(dir, 0, &in, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "zarr.json");
    CHECK_STR_CONTAINS(err.msg, "codec \"fancy\" is not supported");
    free(dir);
}

/* Emission then parsing gives back the same metadata. */
static void test_emit_round_trip(void)
{
    struct zarr_bb blosc = {.c = {.id = ZC_BLOSC, .level = 3, .cname = "zstd", .shuffle = 2}};
    struct zarr_meta m = shard_meta(false, &blosc), back;
    char *text = zarr_meta_emit_v3(&m, "{\"x\": 1}", "[\"y\", null]");
    struct errbuf err = {{0}};
    char *attrs, *dims;
    CHECK_EQ_INT(zarr_meta_parse_v3(text, strlen(text), &back, &attrs, &dims, &err), 0);
    CHECK_STR_CONTAINS(text, "\"name\": \"sharding_indexed\"");
    CHECK_STR_CONTAINS(text, "\"index_location\": \"end\"");
    CHECK_STR_CONTAINS(text, "\"shuffle\": \"bitshuffle\"");
    CHECK_STR_CONTAINS(text, "\"typesize\": 2");
    CHECK_STR_CONTAINS(text, "\"separator\": \"/\"");
    CHECK(back.sharded && back.shard.inner[1] == 3 && back.chunks[1] == 6);
    CHECK(back.shard.codecs.bb[0].c.id == ZC_BLOSC && back.shard.codecs.bb[0].c.level == 3);
    CHECK(back.shard.index_codecs.nbb == 1 && back.shard.index_codecs.bb[0].crc32c);
    CHECK(memcmp(back.fill, m.fill, 2) == 0);
    CHECK(attrs && strcmp(attrs, "{\"x\":1}") == 0);
    CHECK(dims && strcmp(dims, "[\"y\",null]") == 0);
    free(attrs);
    free(dims);
    free(text);

    struct zarr_meta u = {.format = 3,
                          .ndim = 1,
                          .shape = {5},
                          .chunks = {2},
                          .dtype = {.kind = DT_UINT, .size = 8},
                          .key_prefix_c = true,
                          .separator = '.'};
    memset(u.fill, 0xff, 8); /* 2^64 - 1: beyond what jansson holds */
    u.codecs.big_endian = true;
    u.codecs.bb[u.codecs.nbb++].c = (struct zarr_codec){.id = ZC_ZSTD, .level = 4};
    text = zarr_meta_emit_v3(&u, NULL, NULL);
    CHECK_STR_CONTAINS(text, "\"fill_value\": 18446744073709551615");
    CHECK_STR_CONTAINS(text, "\"endian\": \"big\"");
    CHECK_STR_CONTAINS(text, "\"checksum\": false");
    CHECK(strstr(text, "dimension_names") == NULL);
    free(text);
    memset(u.fill, 0, 8); /* (jansson cannot read integers beyond INT64_MAX back) */
    text = zarr_meta_emit_v3(&u, NULL, NULL);
    CHECK_EQ_INT(parse(text, &back, &err), 0);
    CHECK(back.codecs.big_endian && back.codecs.bb[0].c.id == ZC_ZSTD && back.separator == '.');
    free(text);
}

/* ---- the input reader ---- */

int main(void)
{
    if (check_mkdtemp(tmp_root, sizeof tmp_root, "v3"))
        return 1;
    RUN(test_codec_round_trips);
    RUN(test_transpose);
    RUN(test_shards);
    RUN(test_emit_round_trip);
    RUN(test_input_v3);
    RUN(test_input_v3_other);
    check_rmtree(tmp_root);
    return check_done();
}
