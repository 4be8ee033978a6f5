/* fuzz_decode_v3.c: libFuzzer harness for the decoder of Zarr v3 storage units
 * (zarr_decode_chunk): codec chains and shards, whose index (offsets and sizes) comes from
 * the file. Input layout: one byte choosing one of the arrays below, then the stored unit.
 * A decoder must never read past the unit nor write past the decoded size; what it accepts
 * must encode and decode back to the same bytes. The unit ends at an inaccessible page, as
 * in fuzz_decode.c, since the codec libraries are not instrumented.
 * ROIFS_FUZZ_SEEDS=DIR writes one valid unit per array into DIR (the seed corpus). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "zarr/zarr.h"

#define FUZZ_NAME "fuzz_decode_v3"
#include "fuzz.h"

#define ARRAY(dtype, shape, chunks, codecs)                                                        \
    "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":" shape ",\"data_type\":\"" dtype        \
    "\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":" chunks "}},"     \
    "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":0,\"codecs\":" codecs "}"
#define BYTES_LE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}"
#define BYTES_BE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"big\"}}"
#define SHARD(inner, codecs, index_codecs, where)                                                  \
    "[{\"name\":\"sharding_indexed\",\"configuration\":{\"chunk_shape\":" inner                    \
    ",\"codecs\":" codecs ",\"index_codecs\":" index_codecs ",\"index_location\":\"" where "\"}}]"

static const char *const arrays[] = {
    ARRAY("uint16", "[8,8]", "[4,4]", "[" BYTES_LE "]"),
    ARRAY("int32", "[6,10]", "[3,5]",
          "[{\"name\":\"transpose\",\"configuration\":{\"order\":[1,0]}}," BYTES_BE
          ",{\"name\":\"gzip\",\"configuration\":{\"level\":1}},\"crc32c\"]"),
    ARRAY("float32", "[16]", "[8]",
          "[" BYTES_LE ",{\"name\":\"blosc\",\"configuration\":{\"cname\":\"lz4\",\"clevel\":5,"
          "\"shuffle\":\"shuffle\",\"typesize\":4,\"blocksize\":0}},\"crc32c\"]"),
    ARRAY("uint8", "[32,32]", "[16,16]",
          "[\"bytes\",{\"name\":\"zstd\",\"configuration\":{\"level\":1,\"checksum\":false}}]"),
    ARRAY("uint16", "[16,16]", "[8,8]",
          SHARD("[2,4]", "[" BYTES_LE "]", "[" BYTES_LE ",\"crc32c\"]", "end")),
    ARRAY("int16", "[8,8,8]", "[4,4,4]",
          SHARD("[2,2,2]", "[" BYTES_LE ",{\"name\":\"zstd\",\"configuration\":{\"level\":1}}]",
                "[" BYTES_BE ",\"crc32c\"]", "start")),
    ARRAY("float64", "[12]", "[6]",
          SHARD("[2]",
                "[" BYTES_BE ",{\"name\":\"blosc\",\"configuration\":{\"cname\":\"zstd\","
                "\"clevel\":1,\"shuffle\":\"bitshuffle\",\"typesize\":8,\"blocksize\":0}},"
                "\"crc32c\"]",
                "[" BYTES_LE "]", "end")),
    ARRAY("bool", "[9,9]", "[9,9]",
          SHARD("[3,3]", "[\"bytes\",{\"name\":\"gzip\",\"configuration\":{\"level\":1}}]",
                "[" BYTES_LE ",\"crc32c\"]", "end")),
};
#define NARRAYS (sizeof arrays / sizeof arrays[0])
#define MAX_IN  (1u << 20)

static struct zarr_meta metas[NARRAYS];

/* One valid unit per array, for the seed corpus: the bytes 0, 1, 2, ... (bool: 0/1). */
static void write_seeds(const char *dir)
{
    for (size_t i = 0; i < NARRAYS; i++) {
        size_t n = zarr_meta_chunk_nbytes(&metas[i]);
        uint8_t *buf = malloc(n);
        for (size_t k = 0; k < n; k++)
            buf[k] = metas[i].dtype.kind == DT_BOOL ? (uint8_t)(k % 3 == 0) : (uint8_t)(k * 7);
        void *enc;
        size_t len;
        struct errbuf err;
        FUZZ_ASSERT(zarr_encode_chunk(&metas[i], buf, n, &enc, &len, &err) == 0, "%s", err.msg);
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-array%zu", dir, i);
        FILE *f = fopen(path, "wb");
        FUZZ_ASSERT(f != NULL, "cannot write %s", path);
        uint8_t sel = (uint8_t)i;
        fwrite(&sel, 1, 1, f);
        fwrite(enc, 1, len, f);
        fclose(f);
        free(enc);
        free(buf);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < NARRAYS; i++) {
        struct errbuf err;
        FUZZ_ASSERT(zarr_meta_parse_v3(arrays[i], strlen(arrays[i]), &metas[i], NULL, NULL, &err) ==
                        0,
                    "array %zu: %s", i, err.msg);
    }
    const char *seeds = getenv("ROIFS_FUZZ_SEEDS");
    if (seeds)
        write_seeds(seeds);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *in_end;
    if (!in_end)
        in_end = fuzz_guarded_end(MAX_IN);
    if (size < 1 || size - 1 > MAX_IN)
        return 0;
    const struct zarr_meta *m = &metas[data[0] % NARRAYS];
    size_t len = size - 1, n = zarr_meta_chunk_nbytes(m);
    uint8_t *src = in_end - len;
    memcpy(src, data + 1, len);
    uint8_t *dst = malloc(n), *back = malloc(n);
    struct errbuf err;
    err.msg[0] = '\0';
    int r = zarr_decode_chunk(m, src, len, dst, &err);
    if (r < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0', "rejected without a message");
    } else {
        void *enc;
        size_t enc_len;
        FUZZ_ASSERT(zarr_encode_chunk(m, dst, n, &enc, &enc_len, &err) == 0,
                    "cannot encode what was decoded: %s", err.msg);
        FUZZ_ASSERT(zarr_decode_chunk(m, enc, enc_len, back, &err) == 0,
                    "cannot decode what was encoded: %s", err.msg);
        FUZZ_ASSERT(memcmp(back, dst, n) == 0, "round trip changed the data");
        free(enc);
    }
    free(dst);
    free(back);
    return 0;
}
