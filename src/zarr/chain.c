/* chain.c: Zarr v3 codec chains (transpose, bytes, blosc/gzip/zstd, crc32c) and the entry
 * points that encode, decode and size one storage unit of either format. */
#include "zarr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"

/* Moves the elements of the C-order array a (shape ashape) to or from b, its transpose in C
 * order (b's dimension i is a's dimension order[i]), walking b contiguously. */
static void transpose_move(unsigned char *a, unsigned char *b, const uint64_t *ashape,
                           const uint8_t *order, int nd, size_t is, bool a_to_b)
{
    if (nd == 0) {
        memcpy(a_to_b ? b : a, a_to_b ? a : b, is);
        return;
    }
    uint64_t astride[ROIFS_MAX_DIM], bshape[ROIFS_MAX_DIM], step[ROIFS_MAX_DIM];
    uint64_t pos[ROIFS_MAX_DIM] = {0};
    uint64_t s = is;
    for (int d = nd - 1; d >= 0; d--) {
        astride[d] = s;
        s *= ashape[d];
    }
    for (int d = 0; d < nd; d++) {
        bshape[d] = ashape[order[d]];
        step[d] = astride[order[d]]; /* bytes moved in a per step along b's dimension d */
    }
    uint64_t total = nd_prod(bshape, nd), inner = bshape[nd - 1], istep = step[nd - 1];
    if (total == 0)
        return;
    uint64_t aoff = 0;
    unsigned char *bp = b;
    for (uint64_t o = 0; o < total / inner; o++) {
        unsigned char *ap = a + aoff;
        if (a_to_b)
            for (uint64_t j = 0; j < inner; j++, bp += is, ap += istep)
                memcpy(bp, ap, is);
        else
            for (uint64_t j = 0; j < inner; j++, bp += is, ap += istep)
                memcpy(ap, bp, is);
        for (int d = nd - 2; d >= 0; d--) {
            aoff += step[d];
            if (++pos[d] < bshape[d])
                break;
            aoff -= step[d] * bshape[d];
            pos[d] = 0;
        }
    }
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int zarr_chain_encode(const struct zarr_chain *ch, const struct dtype *dt, const uint64_t *shape,
                      int ndim, const void *src, void **out, size_t *out_len, struct errbuf *err)
{
    size_t n = (size_t)nd_prod(shape, ndim), raw = n * dt->size;
    unsigned char *cur = xmalloc(raw + 4);
    if (ch->transpose)
        transpose_move((unsigned char *)src, cur, shape, ch->order, ndim, dt->size, true);
    else
        memcpy(cur, src, raw);
    if (ch->big_endian)
        dtype_byteswap(cur, n, dt->size);
    size_t len = raw;
    for (int k = 0; k < ch->nbb; k++) {
        if (ch->bb[k].crc32c) {
            cur = xrealloc(cur, len + 4);
            put_le32(cur + len, zarr_crc32c(0, cur, len));
            len += 4;
            continue;
        }
        void *enc;
        size_t enc_len;
        int r = zarr_codec_encode(&ch->bb[k].c, cur, len, dt->size, &enc, &enc_len, err);
        free(cur);
        if (r < 0)
            return r;
        cur = enc;
        len = enc_len;
    }
    *out = cur;
    *out_len = len;
    return 0;
}

int zarr_chain_decode(const struct zarr_chain *ch, const struct dtype *dt, const uint64_t *shape,
                      int ndim, const void *src, size_t len, void *dst, struct errbuf *err)
{
    size_t n = (size_t)nd_prod(shape, ndim), raw = n * dt->size;
    /* Input size of each stage when encoding: known up to the (single) compressor. */
    size_t in_size[ZARR_MAX_BB + 1];
    in_size[0] = raw;
    for (int k = 0; k < ch->nbb; k++)
        in_size[k + 1] = in_size[k] + (ch->bb[k].crc32c ? 4 : 0);
    const unsigned char *cur = src;
    unsigned char *owned = NULL;
    int r = 0;
    for (int k = ch->nbb - 1; k >= 0 && r == 0; k--) {
        if (ch->bb[k].crc32c) {
            if (len < 4) {
                r = err_set(err, -EIO, "crc32c: %zu bytes, too short for a checksum", len);
                break;
            }
            uint32_t stored = get_le32(cur + len - 4), computed = zarr_crc32c(0, cur, len - 4);
            if (stored != computed)
                r = err_set(err, -EIO, "crc32c: checksum mismatch (stored 0x%08x, computed 0x%08x)",
                            stored, computed);
            len -= 4;
            continue;
        }
        /* Decode straight into dst when nothing is left to undo but the byte order. */
        bool last = in_size[k] == raw && !ch->transpose;
        unsigned char *buf = last ? dst : xmalloc(in_size[k] ? in_size[k] : 1);
        r = zarr_codec_decode(&ch->bb[k].c, cur, len, buf, in_size[k], dt->size, err);
        free(owned);
        owned = last ? NULL : buf;
        cur = buf;
        len = in_size[k];
    }
    if (r == 0 && len != raw)
        r = err_set(err, -EIO, "bytes: %zu bytes, expected %zu", len, raw);
    if (r == 0) {
        if (ch->transpose)
            transpose_move(dst, (unsigned char *)cur, shape, ch->order, ndim, dt->size, false);
        else if (cur != dst)
            memcpy(dst, cur, raw);
        if (ch->big_endian)
            dtype_byteswap(dst, n, dt->size);
    }
    free(owned);
    return r;
}

int64_t zarr_chain_fixed_size(const struct zarr_chain *ch, size_t raw_len)
{
    int64_t size = (int64_t)raw_len;
    for (int k = 0; k < ch->nbb && size >= 0; k++)
        size = ch->bb[k].crc32c ? size + 4 : zarr_codec_fixed_size(&ch->bb[k].c, (size_t)size);
    return size;
}

uint64_t zarr_chain_size_bound(const struct zarr_chain *ch, uint64_t raw_len)
{
    uint64_t size = raw_len;
    for (int k = 0; k < ch->nbb && size != UINT64_MAX; k++)
        size = ch->bb[k].crc32c ? (size > UINT64_MAX - 4 ? UINT64_MAX : size + 4)
                                : zarr_codec_size_bound(&ch->bb[k].c, size);
    return size;
}

/* ---- whole storage units ---- */

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
        transpose_move((unsigned char *)buf, tmp, m->chunks, order, m->ndim, is, true);
    } else {
        memcpy(tmp, buf, len);
    }
    if (m->dtype.big_endian)
        dtype_byteswap(tmp, len / is, is);
    int r = zarr_codec_encode(&m->compressor, tmp, len, is, out, out_len, err);
    free(tmp);
    return r;
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
        transpose_move(dst, tmp, m->chunks, order, m->ndim, is, false);
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
