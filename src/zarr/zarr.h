/* zarr.h: Zarr array metadata, chunk codecs and the input array reader. No FUSE here. */
#ifndef ROIFS_ZARR_H
#define ROIFS_ZARR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"
#include "../util.h"

enum zarr_codec_id { ZC_NONE, ZC_BLOSC, ZC_ZLIB, ZC_GZIP, ZC_ZSTD };

/* A v2 compressor (the only bytes-to-bytes stage roifs supports in format 2). */
struct zarr_codec {
    enum zarr_codec_id id;
    int level;      /* blosc clevel, zlib/gzip level, zstd level */
    char cname[16]; /* blosc inner codec: lz4, lz4hc, blosclz, zstd, zlib, snappy */
    int shuffle;    /* blosc: 0 none, 1 byte, 2 bit, -1 auto (bit if itemsize 1 else byte) */
    int blocksize;  /* blosc: 0 = automatic */
};

struct zarr_meta {
    int format; /* 2 (3 later) */
    int ndim;
    uint64_t shape[ROIFS_MAX_DIM];
    uint64_t chunks[ROIFS_MAX_DIM];
    struct dtype dtype;
    bool fortran_order; /* "order": "F" */
    struct zarr_codec compressor;
    char separator;        /* '.' or '/' */
    unsigned char fill[8]; /* one element, native byte order */
    bool fill_null;        /* "fill_value": null (treated as 0 on read) */
};

/* Parses .zarray JSON text. Rejects non-null, non-empty filters, unknown compressors and
 * unsupported dtypes with a message naming the key. 0 or -EINVAL. */
int zarr_meta_parse_v2(const char *json, size_t len, struct zarr_meta *m, struct errbuf *err);
/* Serialises m as .zarray JSON (malloc'd, pretty-printed, "filters": null, "order": "C"). */
char *zarr_meta_emit_v2(const struct zarr_meta *m);
/* Number of chunks along each dimension: ceil(shape / chunks). */
void zarr_meta_grid(const struct zarr_meta *m, uint64_t *grid);
/* Decoded byte size of one (full) chunk. */
size_t zarr_meta_chunk_nbytes(const struct zarr_meta *m);
/* Chunk key of grid index idx, e.g. "1.0.3" or "1/0/3". buf must hold 32*ndim bytes. */
void zarr_meta_chunk_key(const struct zarr_meta *m, const uint64_t *idx, char *buf, size_t len);

/* Decodes src (src_len bytes) into exactly dst_len bytes. typesize is the element size.
 * Any mismatch (wrong decoded size, corrupt stream) is -EIO with a message. */
int zarr_codec_decode(const struct zarr_codec *c, const void *src, size_t src_len, void *dst,
                      size_t dst_len, unsigned typesize, struct errbuf *err);
/* Encodes len bytes into a malloc'd buffer. 0 or -EIO. */
int zarr_codec_encode(const struct zarr_codec *c, const void *src, size_t len, unsigned typesize,
                      void **out, size_t *out_len, struct errbuf *err);
/* Exact encoded size of a raw_len-byte chunk when it does not depend on the data (none;
 * blosc with clevel 0), else -1. */
int64_t zarr_codec_fixed_size(const struct zarr_codec *c, size_t raw_len);
/* JSON object for .zarray "compressor" (a jansson json_t*, returned as void* to keep jansson
 * out of this header), or NULL for none. */
void *zarr_codec_to_json(const struct zarr_codec *c, unsigned typesize);

/* The input array: metadata plus a thread-safe, bounded LRU of decoded chunks. */
struct zarr_input;

/* Opens the Zarr v2 array at path (a directory with .zarray). lru_bytes bounds the memory
 * held by decoded chunks (at least two chunks are always kept). 0 or -errno. */
int zarr_input_open(const char *path, size_t lru_bytes, struct zarr_input **out,
                    struct errbuf *err);
const struct zarr_meta *zarr_input_meta(const struct zarr_input *in);
/* The raw .zarray text and the .zattrs text (NULL when absent). */
const char *zarr_input_zarray_text(const struct zarr_input *in);
const char *zarr_input_zattrs_text(const struct zarr_input *in);
/* Reads the box [start, start + shape) (must lie inside the array) into dst: C order, native
 * byte order, the input's dtype. Missing chunks read as the fill value. Thread-safe.
 * 0, or -EIO for an unreadable or corrupt chunk (message names the chunk file). */
int zarr_input_read(struct zarr_input *in, const uint64_t *start, const uint64_t *shape, void *dst,
                    struct errbuf *err);
/* A hash of the identity (size, mtime, inode, or absence) of every chunk file the box
 * [start, start + shape) reads, and of the metadata: it changes when any of them is
 * rewritten. 0 or -EINVAL. */
int zarr_input_signature(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                         uint64_t *sig);
void zarr_input_close(struct zarr_input *in);

/* Counters of the decoded-chunk cache (for status reports and tests). */
struct zarr_input_stats {
    uint64_t loads;     /* chunk files read and decoded (missing files included) */
    uint64_t hits;      /* chunk lookups served from the cache */
    uint64_t waits;     /* lookups that waited for another thread decoding the same chunk */
    uint64_t evictions; /* chunks dropped to stay within lru_bytes */
    size_t bytes;       /* memory currently held by cached chunks */
};
void zarr_input_get_stats(struct zarr_input *in, struct zarr_input_stats *st);

#endif
