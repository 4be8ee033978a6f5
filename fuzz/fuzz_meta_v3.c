/* fuzz_meta_v3.c: libFuzzer harness for the zarr.json parsers (zarr_meta_parse_v3, and
 * zarr_meta_parse_v3_vlen_utf8 for AnnData's string arrays). Any bytes must either be rejected
 * with a message or give metadata that emits, parses again to the same array and emits the
 * same text (a string array: one dimension, a chunk length, a sane chunk key). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarr/zarr.h"

#define FUZZ_NAME "fuzz_meta_v3"
#include "fuzz.h"

static void check_meta(const struct zarr_meta *m)
{
    FUZZ_ASSERT(m->format == 3, "format %d", m->format);
    FUZZ_ASSERT(m->ndim >= 0 && m->ndim <= ROIFS_MAX_DIM, "ndim %d", m->ndim);
    FUZZ_ASSERT(m->dtype.size >= 1 && m->dtype.size <= 8, "dtype size");
    const uint64_t *rc = zarr_meta_read_chunks(m);
    for (int d = 0; d < m->ndim; d++) {
        FUZZ_ASSERT(m->shape[d] > 0 && m->chunks[d] > 0 && rc[d] > 0, "dimension %d", d);
        FUZZ_ASSERT(m->chunks[d] % rc[d] == 0, "inner chunks do not divide the shard");
    }
    FUZZ_ASSERT(zarr_meta_chunk_nbytes(m) <= INT32_MAX, "chunk of %zu bytes",
                zarr_meta_chunk_nbytes(m));
    uint64_t grid[ROIFS_MAX_DIM], last[ROIFS_MAX_DIM];
    zarr_meta_grid(m, grid);
    for (int d = 0; d < m->ndim; d++)
        last[d] = grid[d] - 1;
    char key[32 * ROIFS_MAX_DIM + 8];
    memset(key, 'x', sizeof key);
    zarr_meta_chunk_key(m, last, key, sizeof key);
    FUZZ_ASSERT(memchr(key, '\0', sizeof key) != NULL, "chunk key not terminated");
    FUZZ_ASSERT(strstr(key, "..") == NULL && key[0] != '/', "key '%s'", key);
}

static void check_strings(const uint8_t *data, size_t size)
{
    struct zarr_meta m;
    struct errbuf err;
    err.msg[0] = '\0';
    if (zarr_meta_parse_v3_vlen_utf8((const char *)data, size, &m, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0', "string array rejected without a message");
        return;
    }
    FUZZ_ASSERT(m.format == 3 && m.ndim == 1 && m.chunks[0] > 0, "string array shape");
    FUZZ_ASSERT(m.codecs.nbb <= ZARR_MAX_BB && !m.codecs.transpose, "string array codecs");
    uint64_t last = m.shape[0] ? (m.shape[0] - 1) / m.chunks[0] : 0;
    char key[48];
    memset(key, 'x', sizeof key);
    zarr_meta_chunk_key(&m, &last, key, sizeof key);
    FUZZ_ASSERT(memchr(key, '\0', sizeof key) != NULL, "chunk key not terminated");
    FUZZ_ASSERT(strstr(key, "..") == NULL && key[0] != '/', "key '%s'", key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct zarr_meta m, m2;
    struct errbuf err;
    check_strings(data, size);
    char *attrs = NULL, *dims = NULL, *attrs2 = NULL, *dims2 = NULL;
    err.msg[0] = '\0';
    if (zarr_meta_parse_v3((const char *)data, size, &m, &attrs, &dims, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0', "rejected without a message");
        FUZZ_ASSERT(!attrs && !dims, "outputs set on failure");
        return 0;
    }
    check_meta(&m);
    char *text = zarr_meta_emit_v3(&m, attrs, dims);
    int r = zarr_meta_parse_v3(text, strlen(text), &m2, &attrs2, &dims2, &err);
    FUZZ_ASSERT(r == 0, "emitted zarr.json does not parse: %s\n%s", err.msg, text);
    FUZZ_ASSERT(m2.ndim == m.ndim && m2.dtype.kind == m.dtype.kind &&
                    m2.dtype.size == m.dtype.size && m2.sharded == m.sharded &&
                    memcmp(m2.shape, m.shape, sizeof m.shape) == 0 &&
                    memcmp(m2.chunks, m.chunks, sizeof m.chunks) == 0 &&
                    memcmp(m2.fill, m.fill, sizeof m.fill) == 0,
                "round trip changed the metadata:\n%s", text);
    char *text2 = zarr_meta_emit_v3(&m2, attrs2, dims2);
    FUZZ_ASSERT(strcmp(text, text2) == 0, "emit is not stable:\n%s\n---\n%s", text, text2);
    free(text);
    free(text2);
    free(attrs);
    free(dims);
    free(attrs2);
    free(dims2);
    return 0;
}
