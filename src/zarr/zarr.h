/* zarr.h: Zarr v2 and v3 array metadata, chunk codecs (v2 compressors, v3 codec chains and
 * shards) and the input array reader. No FUSE here. */
#ifndef ROIFS_ZARR_H
#define ROIFS_ZARR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../crc32c.h" /* zarr_crc32c: the v3 crc32c codec, shard indexes */
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

/* ---- Zarr v3 codec chains ---- */

#define ZARR_MAX_BB 8 /* bytes-to-bytes codecs in one chain */

/* A bytes-to-bytes codec of a v3 chain: a compressor (blosc, gzip, zstd) or crc32c. */
struct zarr_bb {
    bool crc32c;         /* the crc32c checksum (c is unused) */
    struct zarr_codec c; /* the compressor */
};

/* A v3 codec chain ending in the "bytes" codec: [transpose] bytes [bytes-to-bytes ...].
 * Several transposes are composed into one; a chain holds at most one compressor. */
struct zarr_chain {
    bool transpose;
    uint8_t order[ROIFS_MAX_DIM]; /* encoded dimension i is decoded dimension order[i] */
    bool big_endian;              /* the bytes codec's "endian" */
    int nbb;
    struct zarr_bb bb[ZARR_MAX_BB]; /* in encoding order */
};

/* The sharding_indexed codec: a chunk (the "shard") is a grid of inner chunks, each encoded
 * with codecs, plus an index of (offset, nbytes) uint64 pairs encoded with index_codecs. */
struct zarr_shard {
    uint64_t inner[ROIFS_MAX_DIM];  /* inner chunk shape; divides the shard shape */
    struct zarr_chain codecs;       /* of each inner chunk */
    struct zarr_chain index_codecs; /* of the index: bytes and crc32c only (fixed size) */
    bool index_at_start;            /* "index_location": "start" (default "end") */
};

struct zarr_meta {
    int format; /* 2 or 3 */
    int ndim;
    uint64_t shape[ROIFS_MAX_DIM];
    uint64_t chunks[ROIFS_MAX_DIM]; /* the storage unit: with sharding, the shard shape */
    struct dtype dtype;             /* v3: big_endian is the bytes codec's (codecs.big_endian) */
    bool fortran_order;             /* "order": "F" (v2) */
    struct zarr_codec compressor;   /* v2; v3: the chain's compressor, for reports only */
    char separator;                 /* '.' or '/' */
    unsigned char fill[8];          /* one element, native byte order */
    bool fill_null;                 /* "fill_value": null (treated as 0 on read) */
    /* format 3 */
    bool key_prefix_c;        /* chunk_key_encoding "default": keys "c/1/0" ("c" when 0-d) */
    struct zarr_chain codecs; /* unsharded: the chain of each chunk */
    bool sharded;             /* the array-to-bytes codec is sharding_indexed */
    struct zarr_shard shard;
};

/* Parses .zarray JSON text. Rejects non-null, non-empty filters, unknown compressors and
 * unsupported dtypes with a message naming the key. 0 or -EINVAL. */
int zarr_meta_parse_v2(const char *json, size_t len, struct zarr_meta *m, struct errbuf *err);
/* Parses the .zarray of a 1-D v2 string array (dtype "|O", filters [vlen-utf8], as AnnData
 * writes its indexes): its length, chunk length and compressor. 0 or -EINVAL. */
int zarr_meta_parse_v2_vlen_utf8(const char *json, size_t len, uint64_t *n, uint64_t *chunk,
                                 struct zarr_codec *c, struct errbuf *err);
/* Serialises m as .zarray JSON (malloc'd, pretty-printed, "filters": null, "order": "C"). */
char *zarr_meta_emit_v2(const struct zarr_meta *m);
/* 0 when a and b describe the same layout (shape, chunks, dtype, codecs, fill value, order,
 * chunk keys: what decides how chunks are read; attributes may differ), else -EINVAL with
 * what differs ("its shape changed from [64, 64] to [64, 80]") in err (meta_diff.c). */
int zarr_meta_difference(const struct zarr_meta *a, const struct zarr_meta *b, struct errbuf *err);
/* Number of chunks along each dimension: ceil(shape / chunks). */
void zarr_meta_grid(const struct zarr_meta *m, uint64_t *grid);
/* Decoded byte size of one (full) chunk. */
size_t zarr_meta_chunk_nbytes(const struct zarr_meta *m);
/* Chunk key of grid index idx, e.g. "1.0.3", "1/0/3" or (v3 default encoding) "c/1/0/3".
 * buf must hold 32*ndim (at least 2) bytes. */
void zarr_meta_chunk_key(const struct zarr_meta *m, const uint64_t *idx, char *buf, size_t len);

/* Decodes src (src_len bytes) into exactly dst_len bytes. typesize is the element size.
 * Any mismatch (wrong decoded size, corrupt stream) is -EIO with a message. */
int zarr_codec_decode(const struct zarr_codec *c, const void *src, size_t src_len, void *dst,
                      size_t dst_len, unsigned typesize, struct errbuf *err);
/* Decodes src when the decoded size is not known in advance (variable-length data): *out
 * is malloc'd with *out_len bytes, at most max_len. 0, or -EIO with a message. */
int zarr_codec_decode_alloc(const struct zarr_codec *c, const void *src, size_t src_len,
                            size_t max_len, void **out, size_t *out_len, struct errbuf *err);
/* Encodes len bytes into a malloc'd buffer. 0 or -EIO. */
int zarr_codec_encode(const struct zarr_codec *c, const void *src, size_t len, unsigned typesize,
                      void **out, size_t *out_len, struct errbuf *err);
/* Exact encoded size of a raw_len-byte chunk when it does not depend on the data (none;
 * blosc with clevel 0), else -1. */
int64_t zarr_codec_fixed_size(const struct zarr_codec *c, size_t raw_len);
/* An upper bound of the encoded size of raw_len bytes (UINT64_MAX when it does not fit). */
uint64_t zarr_codec_size_bound(const struct zarr_codec *c, uint64_t raw_len);
/* JSON object for .zarray "compressor" (a jansson json_t*, returned as void* to keep jansson
 * out of this header), or NULL for none. */
void *zarr_codec_to_json(const struct zarr_codec *c, unsigned typesize);

/* Parses an array's zarr.json. Only core numeric data types, the regular chunk grid, the
 * default and v2 chunk key encodings and the codecs transpose, bytes, blosc, gzip, zstd,
 * crc32c and sharding_indexed are accepted; anything else (unknown codecs, extensions that
 * must be understood, groups) is -EINVAL with a message naming the key. *attributes gets
 * the "attributes" object and *dimension_names the "dimension_names" list as malloc'd JSON
 * text (NULL when absent); either pointer may be NULL. */
int zarr_meta_parse_v3(const char *json, size_t len, struct zarr_meta *m, char **attributes,
                       char **dimension_names, struct errbuf *err);
/* Serialises m (format 3) as zarr.json with the given attributes (JSON object text, NULL:
 * {}) and dimension_names (JSON list text, NULL: omitted). malloc'd, pretty-printed. */
char *zarr_meta_emit_v3(const struct zarr_meta *m, const char *attributes,
                        const char *dimension_names);
/* Parses the zarr.json of a 1-D v3 string array (data_type "string", codecs vlen-utf8 then
 * bytes-to-bytes codecs, as AnnData writes its indexes with zarr-python 3): m gets its shape,
 * chunk length, chunk key encoding and, in m->codecs, the bytes-to-bytes codecs (its dtype
 * stays unset). 0 or -EINVAL with a message naming the key. */
int zarr_meta_parse_v3_vlen_utf8(const char *json, size_t len, struct zarr_meta *m,
                                 struct errbuf *err);
/* The chunk shape a reader decodes at once: the inner chunk shape when sharded. */
const uint64_t *zarr_meta_read_chunks(const struct zarr_meta *m);

/* ---- whole storage units (v2 chunks, v3 chunks and shards; chunk.c) ---- */

/* Encodes one storage unit per m: buf holds len = zarr_meta_chunk_nbytes(m) bytes, C order,
 * native byte order. v2: byte order then compressor; v3: the codec chain, or a whole shard
 * (index where m says; with a compressor, inner chunks equal to the fill value are stored
 * empty; with fixed-size inner encodings every inner chunk is stored). *out is malloc'd. */
int zarr_encode_chunk(const struct zarr_meta *m, const void *buf, size_t len, void **out,
                      size_t *out_len, struct errbuf *err);
/* Whether zarr_encode_chunk of m gives the chunk's bytes as they are (v2, no compressor, native
 * byte order, C order): then the buffer itself may be written. */
bool zarr_encode_is_identity(const struct zarr_meta *m);
/* Decodes one stored unit (len bytes) into dst: zarr_meta_chunk_nbytes(m) bytes, C order,
 * native byte order (a shard as a whole; empty inner chunks read as the fill value).
 * -EIO with a message for anything corrupt (wrong size, bad checksum, bad index). */
int zarr_decode_chunk(const struct zarr_meta *m, const void *src, size_t len, void *dst,
                      struct errbuf *err);
/* Exact encoded size of a storage unit when it does not depend on the data, else -1. */
int64_t zarr_chunk_fixed_size(const struct zarr_meta *m);
/* An upper bound of the encoded size of any storage unit of m (UINT64_MAX: none fits). */
uint64_t zarr_chunk_size_bound(const struct zarr_meta *m);

/* ---- v3 chains (chain.c) and shards (shard.c, built on chains) ---- */

/* Encodes a C-order native array of the given shape with chain ch. *out is malloc'd. */
int zarr_chain_encode(const struct zarr_chain *ch, const struct dtype *dt, const uint64_t *shape,
                      int ndim, const void *src, void **out, size_t *out_len, struct errbuf *err);
/* Decodes src into dst (prod(shape) elements, C order, native byte order). 0 or -EIO. */
int zarr_chain_decode(const struct zarr_chain *ch, const struct dtype *dt, const uint64_t *shape,
                      int ndim, const void *src, size_t len, void *dst, struct errbuf *err);
/* Undoes only the bytes-to-bytes codecs of ch (no transpose, no byte order): *out (malloc'd,
 * at most max_len bytes) gets what the array-to-bytes codec wrote. 0 or -EIO. */
int zarr_chain_decode_bytes(const struct zarr_chain *ch, const void *src, size_t len,
                            size_t max_len, void **out, size_t *out_len, struct errbuf *err);
/* Exact encoded size of raw_len bytes, or -1 when it depends on the data. */
int64_t zarr_chain_fixed_size(const struct zarr_chain *ch, size_t raw_len);
/* An upper bound of the encoded size of raw_len bytes (UINT64_MAX when it does not fit). */
uint64_t zarr_chain_size_bound(const struct zarr_chain *ch, uint64_t raw_len);
/* Number of inner chunks of one shard. */
uint64_t zarr_shard_count(const struct zarr_meta *m);
/* Encoded size of the shard index. */
size_t zarr_shard_index_size(const struct zarr_meta *m);
/* Marks an empty inner chunk in the index (offset and nbytes). */
#define ZARR_SHARD_EMPTY UINT64_MAX
/* Decodes a shard's index (the zarr_shard_index_size(m) bytes at src) into entries
 * (2 * zarr_shard_count(m) values: offset, nbytes per inner chunk, C order), checking its
 * checksum and that every non-empty entry lies inside a shard of shard_len bytes. */
int zarr_shard_index_decode(const struct zarr_meta *m, const void *src, uint64_t shard_len,
                            uint64_t *entries, struct errbuf *err);
/* A whole shard of m (zarr_encode_chunk and zarr_decode_chunk call these for sharded m). */
int zarr_shard_encode(const struct zarr_meta *m, const void *buf, void **out, size_t *out_len,
                      struct errbuf *err);
int zarr_shard_decode(const struct zarr_meta *m, const void *src, size_t len, void *dst,
                      struct errbuf *err);

/* The input array: metadata plus a thread-safe, bounded LRU of decoded chunks. */
struct zarr_input;

/* Opens the Zarr array at path (a directory with .zarray, or v3 zarr.json). lru_bytes bounds
 * the memory held by decoded chunks (at least two chunks are always kept). A sharded v3
 * array is read inner chunk by inner chunk: the LRU holds decoded inner chunks and decoded
 * shard indexes, never whole shards. 0 or -errno. */
/* The input's metadata and tables by path, a local file or an http(s) URL (store.c):
 * zarr_store_read as file_read_all (-ENOENT when absent, else err set); never a listing. */
bool zarr_is_url(const char *path);
int zarr_store_read(const char *path, char **data, size_t *len, struct errbuf *err);
bool zarr_store_exists(const char *path);
/* As file_read_optional (*data NULL when dir/name is absent). */
int zarr_store_read_optional(const char *dir, const char *name, char **data, size_t *len,
                             struct errbuf *err);
/* Whether path is a file, or (a URL) an object or a Zarr node (its metadata is there). */
bool zarr_store_node_exists(const char *path);

int zarr_input_open(const char *path, size_t lru_bytes, struct zarr_input **out,
                    struct errbuf *err);
const struct zarr_meta *zarr_input_meta(const struct zarr_input *in);
/* The raw .zarray (or zarr.json) text, and the attributes: the .zattrs text or zarr.json's
 * "attributes" (NULL when absent). */
const char *zarr_input_zarray_text(const struct zarr_input *in);
const char *zarr_input_zattrs_text(const struct zarr_input *in);
/* zarr.json's "dimension_names" as JSON text; NULL when absent (always for v2). */
const char *zarr_input_dimension_names_text(const struct zarr_input *in);
/* Reads the box [start, start + shape) (must lie inside the array) into dst: C order, native
 * byte order, the input's dtype. Missing chunks read as the fill value. Thread-safe.
 * 0, or -EIO for an unreadable or corrupt chunk (message names the chunk file). */
int zarr_input_read(struct zarr_input *in, const uint64_t *start, const uint64_t *shape, void *dst,
                    struct errbuf *err);
/* A hash of the content (or absence) of every chunk file the box [start, start + shape)
 * reads, and of the metadata: it changes when the bytes of any of them change, not when a
 * file is rewritten with the same bytes or touched. A file's content hash is taken from what
 * the input recorded for its identity (inode, size, mtime, ctime) when that is safe, else the
 * file is read and hashed (docs/design.md). 0 or -EINVAL. */
int zarr_input_signature(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                         uint64_t *sig);
/* zarr_input_read that also gives the signature of exactly the bytes it used, as
 * zarr_input_signature computes it from the files' contents: each chunk file's hash is that
 * of the bytes read (a read torn by a concurrent write gets a signature no look at the file
 * gives unless the file holds exactly those bytes); a shard's, that of a whole-file pass that
 * saw the index and inner chunks it used. A read that saw a file change between two of its
 * parts is redone (at most three times). */
int zarr_input_read_sig(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                        void *dst, uint64_t *sig, struct errbuf *err);
/* Content hashes of chunk files seen by signatures taken with it: each file is looked at once
 * per memo, which makes the signatures of many overlapping boxes cost one stat per file. */
struct zarr_sigmemo;
struct zarr_sigmemo *zarr_sigmemo_new(void);
void zarr_sigmemo_free(struct zarr_sigmemo *m);
/* zarr_input_signature through memo (NULL: no memo). */
int zarr_input_signature_memo(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                              struct zarr_sigmemo *memo, uint64_t *sig);
void zarr_input_close(struct zarr_input *in);

/* ---- identities of storage files (roifs apply) ---- */

/* What identifies one version of a chunk (or shard) file: a rewrite or a rename over it
 * changes it. */
struct zarr_file_identity {
    bool exists;
    uint64_t size, mtime_ns, ino;
    uint64_t hash; /* of its content (what signatures use) */
};
/* Number of storage files (chunks, or shards) of the input's grid. */
uint64_t zarr_input_nstorage(const struct zarr_input *in);
/* The identity of storage file sid (C-order linear index of the storage grid) as it is now. */
void zarr_input_storage_identity(struct zarr_input *in, uint64_t sid,
                                 struct zarr_file_identity *id);
/* The key of storage file sid relative to the array's directory ("1.0", "c/1/0"). */
void zarr_input_storage_key(const struct zarr_input *in, uint64_t sid, char *buf, size_t len);
const char *zarr_input_path(const struct zarr_input *in);
/* From now on, signatures of the input "as it is now" (zarr_input_signature*, never those of
 * what a read saw) use ids[sid] for every storage file instead of its identity now: `roifs
 * apply` names every result by the original input while it replaces input files. ids
 * (zarr_input_nstorage entries) is borrowed and must not change; call before any other
 * thread uses in. NULL: back to the files' own identities. */
void zarr_input_pin_identities(struct zarr_input *in, const struct zarr_file_identity *ids);

/* An input nobody reads for a while (a plate's image closed by [mount] images_open,
 * docs/plates.md), no thread using it: the descriptors of its directory and of its kept
 * hashes' directory are closed (the hashes written first). zarr_input_resume, before it is
 * read again, opens the directory at its path again as a look would (another directory
 * holding the same array is followed; none, or another array, makes its reads fail with the
 * reason until a look finds the array again); zarr_input_keep_hashes takes up the hashes. */
void zarr_input_park(struct zarr_input *in);
void zarr_input_resume(struct zarr_input *in);

/* ---- content hashes of the input's files (input_hash.c) ---- */

/* Keeps the content hashes of the input's storage files in directory dirfd (the cache's
 * inputs/; duplicated, the caller keeps its own), loading those kept there: a remount trusts
 * them for files whose identity did not change. 0 or -errno. */
int zarr_input_keep_hashes(struct zarr_input *in, int dirfd);
/* [input] verify = content: no identity is trusted; every look hashes the files again and
 * decoded chunks are never used twice. Call before any other thread uses in. */
void zarr_input_set_verify(struct zarr_input *in, bool verify);
/* The racy-timestamp margin (default 2 s): for tests. */
void zarr_input_set_racy_margin(struct zarr_input *in, uint64_t ns);
/* How many times a whole storage file was read to be hashed (for tests). */
uint64_t zarr_input_hash_passes(struct zarr_input *in);

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
