/* shard.c: the sharding_indexed codec: a shard is its inner chunks, each encoded with the
 * inner chain, plus an index of (offset, nbytes) per inner chunk at its start or end. */
#include "zarr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"

static const struct dtype index_dtype = {.kind = DT_UINT, .size = 8, .big_endian = false};

static void shard_grid(const struct zarr_meta *m, uint64_t *cps)
{
    for (int d = 0; d < m->ndim; d++)
        cps[d] = m->chunks[d] / m->shard.inner[d];
}

uint64_t zarr_shard_count(const struct zarr_meta *m)
{
    uint64_t cps[ROIFS_MAX_DIM];
    shard_grid(m, cps);
    return nd_prod(cps, m->ndim);
}

size_t zarr_shard_index_size(const struct zarr_meta *m)
{
    /* index chains are fixed-size by construction (bytes and crc32c only) */
    return (size_t)zarr_chain_fixed_size(&m->shard.index_codecs, 16 * zarr_shard_count(m));
}

int zarr_shard_index_decode(const struct zarr_meta *m, const void *src, uint64_t shard_len,
                            uint64_t *entries, struct errbuf *err)
{
    uint64_t n = zarr_shard_count(m), nv = 2 * n;
    int r = zarr_chain_decode(&m->shard.index_codecs, &index_dtype, &nv, 1, src,
                              zarr_shard_index_size(m), entries, err);
    if (r < 0)
        return err_prefix(err, -EIO, "shard index");
    for (uint64_t k = 0; k < n; k++) {
        uint64_t off = entries[2 * k], len = entries[2 * k + 1];
        if (off == ZARR_SHARD_EMPTY && len == ZARR_SHARD_EMPTY)
            continue;
        if (off > shard_len || len > shard_len - off)
            return err_set(err, -EIO,
                           "shard index: inner chunk %llu at bytes %llu+%llu lies outside the "
                           "shard of %llu bytes",
                           (unsigned long long)k, (unsigned long long)off, (unsigned long long)len,
                           (unsigned long long)shard_len);
    }
    return 0;
}

/* True when the n elements of size is at p all equal value (bit for bit). */
static bool all_equal(const unsigned char *p, size_t n, const unsigned char *value, size_t is)
{
    for (size_t i = 0; i < n; i++, p += is)
        if (memcmp(p, value, is) != 0)
            return false;
    return true;
}

int zarr_shard_encode(const struct zarr_meta *m, const void *buf, void **out, size_t *out_len,
                      struct errbuf *err)
{
    int nd = m->ndim;
    size_t is = m->dtype.size;
    uint64_t cps[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
    shard_grid(m, cps);
    uint64_t n = nd_prod(cps, nd), inner_n = nd_prod(m->shard.inner, nd);
    size_t inner_bytes = (size_t)inner_n * is, index_size = zarr_shard_index_size(m);
    /* Fixed-size encodings store every inner chunk, so that the shard's size is known. */
    bool keep_fill = zarr_chain_fixed_size(&m->shard.codecs, inner_bytes) >= 0;
    uint64_t *entries = xmalloc(16 * n);
    unsigned char *inner = xmalloc(inner_bytes ? inner_bytes : 1);
    struct strbuf data = {0};
    uint64_t data_start = m->shard.index_at_start ? index_size : 0;
    int r = 0;
    for (uint64_t k = 0; k < n && r == 0; k++) {
        nd_unlinear(k, cps, nd, ci);
        for (int d = 0; d < nd; d++)
            off[d] = ci[d] * m->shard.inner[d];
        nd_copy(inner, m->shard.inner, zero, buf, m->chunks, off, m->shard.inner, nd, is);
        if (!keep_fill && all_equal(inner, inner_n, m->fill, is)) {
            entries[2 * k] = entries[2 * k + 1] = ZARR_SHARD_EMPTY;
            continue;
        }
        void *enc;
        size_t enc_len;
        r = zarr_chain_encode(&m->shard.codecs, &m->dtype, m->shard.inner, nd, inner, &enc,
                              &enc_len, err);
        if (r < 0)
            break;
        entries[2 * k] = data_start + data.len;
        entries[2 * k + 1] = enc_len;
        sb_append(&data, enc, enc_len);
        free(enc);
    }
    free(inner);
    void *index = NULL;
    size_t index_len = 0;
    uint64_t nv = 2 * n;
    if (r == 0)
        r = zarr_chain_encode(&m->shard.index_codecs, &index_dtype, &nv, 1, entries, &index,
                              &index_len, err);
    free(entries);
    if (r < 0) {
        sb_free(&data);
        return err_prefix(err, r, "shard");
    }
    unsigned char *o = xmalloc(data.len + index_len + 1);
    if (m->shard.index_at_start) {
        memcpy(o, index, index_len);
        if (data.len)
            memcpy(o + index_len, data.buf, data.len);
    } else {
        if (data.len)
            memcpy(o, data.buf, data.len);
        memcpy(o + data.len, index, index_len);
    }
    *out = o;
    *out_len = data.len + index_len;
    free(index);
    sb_free(&data);
    return 0;
}

int zarr_shard_decode(const struct zarr_meta *m, const void *src, size_t len, void *dst,
                      struct errbuf *err)
{
    int nd = m->ndim;
    size_t is = m->dtype.size, index_size = zarr_shard_index_size(m);
    if (len < index_size)
        return err_set(err, -EIO, "shard of %zu bytes is shorter than its index (%zu bytes)", len,
                       index_size);
    uint64_t cps[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM], off[ROIFS_MAX_DIM], zero[ROIFS_MAX_DIM] = {0};
    shard_grid(m, cps);
    uint64_t n = nd_prod(cps, nd);
    const unsigned char *s = src;
    uint64_t *entries = xmalloc(16 * n);
    int r = zarr_shard_index_decode(m, m->shard.index_at_start ? s : s + len - index_size, len,
                                    entries, err);
    size_t inner_bytes = (size_t)nd_prod(m->shard.inner, nd) * is;
    unsigned char *inner = xmalloc(inner_bytes ? inner_bytes : 1);
    for (uint64_t k = 0; k < n && r == 0; k++) {
        nd_unlinear(k, cps, nd, ci);
        for (int d = 0; d < nd; d++)
            off[d] = ci[d] * m->shard.inner[d];
        if (entries[2 * k] == ZARR_SHARD_EMPTY) {
            nd_fill_box(dst, m->chunks, off, m->shard.inner, nd, m->fill, is);
            continue;
        }
        r = zarr_chain_decode(&m->shard.codecs, &m->dtype, m->shard.inner, nd, s + entries[2 * k],
                              (size_t)entries[2 * k + 1], inner, err);
        if (r < 0)
            r = err_prefix(err, r, "inner chunk %llu", (unsigned long long)k);
        else
            nd_copy(dst, m->chunks, off, inner, m->shard.inner, zero, m->shard.inner, nd, is);
    }
    free(inner);
    free(entries);
    return r;
}
