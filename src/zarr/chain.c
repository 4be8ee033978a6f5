/* chain.c: Zarr v3 codec chains (transpose, bytes, blosc/gzip/zstd, crc32c): encoding,
 * decoding and the encoded sizes of one chunk. Knows nothing of shards (shard.c uses it). */
#include "zarr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"

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
        nd_transpose((void *)src, cur, shape, ch->order, ndim, dt->size, true);
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

/* Checks and strips the crc32c that ends cur[0, *len). 0 or -EIO. */
static int strip_crc32c(const unsigned char *cur, size_t *len, struct errbuf *err)
{
    if (*len < 4)
        return err_set(err, -EIO, "crc32c: %zu bytes, too short for a checksum", *len);
    uint32_t stored = get_le32(cur + *len - 4), computed = zarr_crc32c(0, cur, *len - 4);
    if (stored != computed)
        return err_set(err, -EIO, "crc32c: checksum mismatch (stored 0x%08x, computed 0x%08x)",
                       stored, computed);
    *len -= 4;
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
            r = strip_crc32c(cur, &len, err);
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
            nd_transpose(dst, (void *)cur, shape, ch->order, ndim, dt->size, false);
        else if (cur != dst)
            memcpy(dst, cur, raw);
        if (ch->big_endian)
            dtype_byteswap(dst, n, dt->size);
    }
    free(owned);
    return r;
}

int zarr_chain_decode_bytes(const struct zarr_chain *ch, const void *src, size_t len,
                            size_t max_len, void **out, size_t *out_len, struct errbuf *err)
{
    const unsigned char *cur = src;
    unsigned char *owned = NULL; /* cur once a codec decoded into a buffer of ours */
    int r = 0;
    for (int k = ch->nbb - 1; k >= 0 && r == 0; k--) {
        if (ch->bb[k].crc32c) {
            r = strip_crc32c(cur, &len, err);
            continue;
        }
        void *dec;
        r = zarr_codec_decode_alloc(&ch->bb[k].c, cur, len, max_len, &dec, &len, err);
        if (r == 0) {
            free(owned);
            cur = owned = dec;
        }
    }
    if (r == 0 && len > max_len)
        r = err_set(err, -EIO, "%zu bytes, more than %zu", len, max_len);
    if (r == 0 && !owned) { /* nothing but checksums: a copy of the bytes */
        owned = xmalloc(len ? len : 1);
        memcpy(owned, cur, len);
    }
    if (r < 0) {
        free(owned);
        return r;
    }
    *out = owned;
    *out_len = len;
    return 0;
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
