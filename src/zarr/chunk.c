/* chunk.c: whole storage units of an array: the per-format dispatch of a chunk's encoding,
 * decoding and sizes to v2's compressor and byte order, a v3 codec chain (chain.c) or a shard
 * (shard.c). */
#include "zarr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"

/* The reversed dimension order: what v2's "order": "F" stores. */
static void fortran_order(int nd, uint8_t *order)
{
    for (int d = 0; d < nd; d++)
        order[d] = (uint8_t)(nd - 1 - d);
}

int zarr_encode_chunk(const struct zarr_meta *m, const void *buf, size_t len, void **out,
                      size_t *out_len, struct errbuf *err)
{
    if (len != zarr_meta_chunk_nbytes(m))
        return err_set(err, -EINVAL, "encode: %zu bytes, a chunk holds %zu", len,
                       zarr_meta_chunk_nbytes(m));
    if (m->format == 3)
        return m->sharded ? zarr_shard_encode(m, buf, out, out_len, err)
                          : zarr_chain_encode(&m->codecs, &m->dtype, m->chunks, m->ndim, buf, out,
                                              out_len, err);
    unsigned is = m->dtype.size;
    if (!m->dtype.big_endian && !(m->fortran_order && m->ndim > 1))
        return zarr_codec_encode(&m->compressor, buf, len, is, out, out_len, err);
    void *tmp = xmalloc(len);
    if (m->fortran_order && m->ndim > 1) {
        uint8_t order[ROIFS_MAX_DIM];
        fortran_order(m->ndim, order);
        nd_transpose((void *)buf, tmp, m->chunks, order, m->ndim, is, true);
    } else {
        memcpy(tmp, buf, len);
    }
    if (m->dtype.big_endian)
        dtype_byteswap(tmp, len / is, is);
    int r = zarr_codec_encode(&m->compressor, tmp, len, is, out, out_len, err);
    free(tmp);
    return r;
}

bool zarr_encode_is_identity(const struct zarr_meta *m)
{
    return m->format == 2 && m->compressor.id == ZC_NONE && !m->dtype.big_endian &&
           !(m->fortran_order && m->ndim > 1);
}

int zarr_decode_chunk(const struct zarr_meta *m, const void *src, size_t len, void *dst,
                      struct errbuf *err)
{
    if (m->format == 3)
        return m->sharded ? zarr_shard_decode(m, src, len, dst, err)
                          : zarr_chain_decode(&m->codecs, &m->dtype, m->chunks, m->ndim, src, len,
                                              dst, err);
    size_t nbytes = zarr_meta_chunk_nbytes(m);
    unsigned is = m->dtype.size;
    bool f = m->fortran_order && m->ndim > 1;
    void *tmp = f ? xmalloc(nbytes) : dst;
    int r = zarr_codec_decode(&m->compressor, src, len, tmp, nbytes, is, err);
    if (r == 0 && m->dtype.big_endian)
        dtype_byteswap(tmp, nbytes / is, is);
    if (r == 0 && f) {
        uint8_t order[ROIFS_MAX_DIM];
        fortran_order(m->ndim, order);
        nd_transpose(dst, tmp, m->chunks, order, m->ndim, is, false);
    }
    if (f)
        free(tmp);
    return r;
}

int64_t zarr_chunk_fixed_size(const struct zarr_meta *m)
{
    size_t nbytes = zarr_meta_chunk_nbytes(m);
    if (m->format != 3)
        return zarr_codec_fixed_size(&m->compressor, nbytes);
    if (!m->sharded)
        return zarr_chain_fixed_size(&m->codecs, nbytes);
    uint64_t n = zarr_shard_count(m);
    int64_t inner = zarr_chain_fixed_size(&m->shard.codecs, nbytes / n);
    if (inner < 0)
        return -1; /* inner chunks of fill may then be stored empty: the size varies */
    return (int64_t)n * inner + (int64_t)zarr_shard_index_size(m);
}

uint64_t zarr_chunk_size_bound(const struct zarr_meta *m)
{
    uint64_t nbytes = zarr_meta_chunk_nbytes(m);
    if (m->format != 3)
        return zarr_codec_size_bound(&m->compressor, nbytes);
    if (!m->sharded)
        return zarr_chain_size_bound(&m->codecs, nbytes);
    uint64_t n = zarr_shard_count(m);
    uint64_t inner = zarr_chain_size_bound(&m->shard.codecs, nbytes / n);
    if (inner == UINT64_MAX || (n && inner > (UINT64_MAX - zarr_shard_index_size(m)) / n))
        return UINT64_MAX;
    return n * inner + zarr_shard_index_size(m);
}
