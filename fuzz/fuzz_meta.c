/* fuzz_meta.c: libFuzzer harness for the .zarray parser (zarr_meta_parse_v2). Any bytes must
 * either be rejected with a message or give metadata whose chunk grid and keys are sane and
 * whose emitted .zarray parses again and emits the same text. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarr/zarr.h"

#define FUZZ_NAME "fuzz_meta"
#include "fuzz.h"

static void check_meta(const struct zarr_meta *m)
{
    FUZZ_ASSERT(m->ndim >= 0 && m->ndim <= ROIFS_MAX_DIM, "ndim %d", m->ndim);
    FUZZ_ASSERT(m->separator == '.' || m->separator == '/', "separator %d", m->separator);
    FUZZ_ASSERT(m->dtype.size >= 1 && m->dtype.size <= 8, "dtype size %u", (unsigned)m->dtype.size);
    for (int d = 0; d < m->ndim; d++)
        FUZZ_ASSERT(m->shape[d] > 0 && m->chunks[d] > 0, "dimension %d", d);
    /* the parser promises chunks that blosc and the input LRU can hold */
    FUZZ_ASSERT(zarr_meta_chunk_nbytes(m) <= INT32_MAX, "chunk of %zu bytes",
                zarr_meta_chunk_nbytes(m));

    /* the key of the last chunk is the longest; it must fit the documented 32*ndim bytes */
    uint64_t grid[ROIFS_MAX_DIM], last[ROIFS_MAX_DIM];
    zarr_meta_grid(m, grid);
    for (int d = 0; d < m->ndim; d++) {
        FUZZ_ASSERT(grid[d] >= 1, "grid[%d] = 0", d);
        last[d] = grid[d] - 1;
    }
    char key[32 * ROIFS_MAX_DIM + 1];
    memset(key, 'x', sizeof key);
    zarr_meta_chunk_key(m, last, key, 32 * (size_t)(m->ndim ? m->ndim : 1));
    FUZZ_ASSERT(memchr(key, '\0', sizeof key) != NULL, "chunk key not terminated");
    FUZZ_ASSERT(strstr(key, "..") == NULL && key[0] != '/' && key[0] != '.', "key '%s'", key);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct zarr_meta m, m2;
    struct errbuf err;
    err.msg[0] = '\0';
    if (zarr_meta_parse_v2((const char *)data, size, &m, &err) < 0) {
        FUZZ_ASSERT(err.msg[0] != '\0', "rejected without a message");
        return 0;
    }
    check_meta(&m);
    char *text = zarr_meta_emit_v2(&m);
    int r = zarr_meta_parse_v2(text, strlen(text), &m2, &err);
    FUZZ_ASSERT(r == 0, "emitted .zarray does not parse: %s\n%s", err.msg, text);
    FUZZ_ASSERT(m2.ndim == m.ndim && m2.dtype.kind == m.dtype.kind &&
                    m2.dtype.size == m.dtype.size && m2.separator == m.separator &&
                    m2.compressor.id == m.compressor.id,
                "round trip changed the metadata:\n%s", text);
    FUZZ_ASSERT(memcmp(m2.shape, m.shape, sizeof m.shape) == 0 &&
                    memcmp(m2.chunks, m.chunks, sizeof m.chunks) == 0,
                "round trip changed shape or chunks:\n%s", text);
    char *text2 = zarr_meta_emit_v2(&m2);
    FUZZ_ASSERT(strcmp(text, text2) == 0, "emit is not stable:\n%s\n---\n%s", text, text2);
    free(text);
    free(text2);
    return 0;
}
