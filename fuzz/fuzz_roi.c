/* fuzz_roi.c: libFuzzer harness for the ROI list parser (roi_parse_text) and, for small
 * lists, the chunk index built from it. Input layout: one byte (ndim - 1, modulo 32), then
 * two bytes per dimension (little-endian extent; 0xffff means 2^64-1, 0xfffe means 2^40),
 * then the ROI list text. Accepted ROIs must be non-empty boxes inside the array, and the
 * index must find every ROI in every chunk it touches. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "roi.h"

#define FUZZ_NAME "fuzz_roi"
#include "fuzz.h"

/* The index over chunks of about 1/4 of each extent (at most 5 chunks per dimension). */
static void check_index(const struct roi_set *rs, const uint64_t *shape)
{
    uint64_t chunks[ROIFS_MAX_DIM], grid[ROIFS_MAX_DIM];
    for (int d = 0; d < rs->ndim; d++) {
        chunks[d] = shape[d] / 4 ? shape[d] / 4 : 1;
        grid[d] = shape[d] / chunks[d] + (shape[d] % chunks[d] != 0);
    }
    struct roi_index *ix;
    struct errbuf err;
    int r = roi_index_build(rs, shape, chunks, &ix, &err);
    FUZZ_ASSERT(r == 0, "index: %s", err.msg);
    size_t contacts = 0;
    for (size_t i = 0; i < rs->n; i++) {
        uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
        roi_chunk_range(rs, i, chunks, c0, c1);
        uint64_t n = 1;
        for (int d = 0; d < rs->ndim; d++) {
            FUZZ_ASSERT(c0[d] < c1[d] && c1[d] <= grid[d], "chunk range of ROI %zu", i);
            n *= c1[d] - c0[d];
            idx[d] = c0[d];
        }
        FUZZ_ASSERT(roi_index_roi_nchunks(ix, i) == n, "ROI %zu chunk count", i);
        contacts += n;
        /* every chunk of the ROI's range lists the ROI */
        for (uint64_t j = 0; j < n; j++) {
            uint64_t id = 0;
            for (int d = 0; d < rs->ndim; d++)
                id = id * grid[d] + idx[d];
            int64_t k = roi_index_find(ix, id);
            FUZZ_ASSERT(k >= 0, "chunk %llu of ROI %zu missing", (unsigned long long)id, i);
            size_t cnt;
            const uint32_t *list = roi_index_rois(ix, (size_t)k, &cnt);
            bool found = false;
            for (size_t q = 0; q < cnt; q++) {
                FUZZ_ASSERT(q == 0 || list[q - 1] < list[q], "ROIs of a chunk out of order");
                found = found || list[q] == i;
            }
            FUZZ_ASSERT(found, "ROI %zu not listed in chunk %llu", i, (unsigned long long)id);
            for (int d = rs->ndim - 1; d >= 0 && ++idx[d] == c1[d]; d--)
                idx[d] = c0[d];
        }
    }
    FUZZ_ASSERT(roi_index_ncontacts(ix) == contacts, "contacts %zu != %zu", roi_index_ncontacts(ix),
                contacts);
    for (size_t k = 1; k < roi_index_nchunks(ix); k++)
        FUZZ_ASSERT(roi_index_chunk_id(ix, k - 1) < roi_index_chunk_id(ix, k), "chunk order");
    roi_index_free(ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int ndim = 1 + data[0] % ROIFS_MAX_DIM;
    if (size < 1 + 2 * (size_t)ndim)
        return 0;
    uint64_t shape[ROIFS_MAX_DIM];
    for (int d = 0; d < ndim; d++) {
        unsigned v = data[1 + 2 * d] | (unsigned)data[2 + 2 * d] << 8;
        shape[d] = v == 0xffff ? UINT64_MAX : v == 0xfffe ? (uint64_t)1 << 40 : v;
    }
    size_t off = 1 + 2 * (size_t)ndim, len = size - off;
    char *text = malloc(len + 1);
    memcpy(text, data + off, len);
    text[len] = '\0';

    struct roi_set rs;
    struct errbuf err;
    err.msg[0] = '\0';
    int r = roi_parse_text("fuzz.txt", text, ndim, shape, &rs, &err);
    free(text);
    if (r < 0) {
        FUZZ_ASSERT(strncmp(err.msg, "fuzz.txt:", 9) == 0, "message '%s'", err.msg);
        return 0;
    }
    FUZZ_ASSERT(rs.n >= 1 && rs.ndim == ndim, "n %zu ndim %d", rs.n, rs.ndim);
    for (size_t i = 0; i < rs.n; i++)
        for (int d = 0; d < ndim; d++) {
            uint64_t a = rs.start[i * (size_t)ndim + d], b = rs.stop[i * (size_t)ndim + d];
            FUZZ_ASSERT(a < b && b <= shape[d], "ROI %zu dimension %d: %llu:%llu of %llu", i, d,
                        (unsigned long long)a, (unsigned long long)b, (unsigned long long)shape[d]);
        }
    if (ndim <= 3 && rs.n <= 64)
        check_index(&rs, shape);
    roi_set_free(&rs);
    return 0;
}
