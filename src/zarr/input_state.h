/* input_state.h: the input reader's state, shared by input.c (decoded-chunk cache, box
 * reads), input_file.c (the chunk files and their identities), input_dir.c (the input's
 * directory) and input_sig.c (signatures of what a box reads). */
#ifndef ROIFS_ZARR_INPUT_STATE_H
#define ROIFS_ZARR_INPUT_STATE_H

#include <pthread.h>
#include <sys/stat.h>

#include "../idlru.h"
#include "../map.h"
#include "zarr.h"

/* Identity of a chunk file as it was read: a rewrite changes it, so nothing decoded from an
 * older version is used again. */
struct file_id {
    bool exists;
    uint64_t size, mtime_ns, ctime_ns, ino;
};

/* An LRU entry: a decoded chunk (C order, native byte order; with shards, an inner chunk) or a
 * decoded shard index (id with INDEX_ENTRY set). data == NULL: the chunk file is missing (or
 * the inner chunk is empty): fill value. */
struct chunk {
    /* node.id: C-order linear index in the read-unit grid, or INDEX_ENTRY | shard id. In the
     * order of use only once loaded. */
    struct idlru_node node;
    struct file_id fid;
    uint64_t hash;   /* content hash of the storage file it came from (input_hash.c) */
    uint64_t ixhash; /* a shard index: XXH3-64 of its bytes as read */
    void *data;
    size_t cost;  /* bytes charged to the LRU */
    int refs;     /* readers copying out of data; never evicted while > 0 */
    bool loading; /* being read and decoded by one thread; others wait */
    bool stale;   /* replaced by a newer version of the file; freed by its last reader */
    bool racy;    /* read when the file may have been changing: never used again */
};

/* The content hashes of the input's storage files by identity (input_hash.c), each recorded
 * only when the file provably did not change while it was hashed; kept in the cache directory
 * (zarr_input_keep_hashes) so that a remount need not read the input again. */
struct hash_entry {
    uint64_t sid, hash;
    struct file_id fid;
};
struct input_hashes {
    pthread_mutex_t lock;
    struct map e;       /* storage id -> struct hash_entry */
    int dirfd;          /* where they are kept, or -1 */
    char name[24];      /* their file there */
    bool dirty;         /* entries not yet written */
    uint64_t saved_ns;  /* when they were last written */
    bool verify;        /* [input] verify = content: no identity is trusted */
    bool by_identity;   /* a FUSE input (another roifs mount): files named by identity */
    uint64_t margin_ns; /* the racy-timestamp margin */
    uint64_t passes;    /* whole files hashed (tests) */
};

/* The input's directory (input_dir.c). The input is its path: the directory held is
 * replaced by the one at the path when that holds an array of the same layout. */
struct input_dir;
int input_dir_open(const char *path, struct input_dir **out);
/* The descriptor held: only while no other thread uses the reader (at its opening). */
int input_dir_fd(const struct input_dir *d);
/* The descriptor held, for one use by this thread that ends with input_dir_leave: it stays
 * open until then, even if another directory is held meanwhile. */
int input_dir_enter(struct input_dir *d);
void input_dir_leave(struct input_dir *d);
/* Changes each time another directory is held: a read that saw it change may mix two. */
unsigned input_dir_generation(const struct input_dir *d);
/* failed (a descriptor input_dir_fd gave) failed with ENOTCONN: true when there is a newer
 * one, of in's path opened again and holding the same array. */
bool input_dir_reconnect(const struct zarr_input *in, int failed);
/* A look at in's path, one stat: 0 when it is the directory held, or another one holding an
 * array of the same layout, held from now on; -EIO with the reason (logged once) when the
 * path holds no directory, no array or another array. */
int input_dir_look(const struct zarr_input *in, struct errbuf *err);
void input_dir_close(struct input_dir *d);
/* zarr_input_park's part of the directory: its descriptor closed when nothing holds it (dev
 * and ino kept: what the path held; zarr_input_resume looks again). */
void input_dir_park(struct zarr_input *in);

struct input_remote;

struct zarr_input {
    char *path;
    struct input_dir *dir;       /* NULL for a remote input */
    struct input_remote *remote; /* an http(s) input (input_remote.c), else NULL */
    struct zarr_meta meta;
    char *zarray, *zattrs, *dimnames;
    uint64_t meta_hash;            /* of zarray: where every signature starts */
    uint64_t grid[ROIFS_MAX_DIM];  /* of storage keys (chunks, or shards) */
    const uint64_t *unit;          /* the chunk shape decoded at once (inner chunks if sharded) */
    uint64_t ugrid[ROIFS_MAX_DIM]; /* of read units */
    size_t chunk_nbytes;           /* of one read unit */
    size_t index_nbytes;           /* sharded: of one decoded shard index */
    const struct zarr_file_identity *pinned; /* signatures "now" use these (roifs apply) */

    pthread_mutex_t lock;
    pthread_cond_t loaded; /* a loading chunk finished (or failed) */
    struct idlru lru;      /* the chunks, by id and by use */
    size_t bytes, cap;
    struct zarr_input_stats stats;
    struct input_hashes hashes;
};

#define INDEX_ENTRY (1ULL << 63)

/* An errno of a chunk file that is not there (the array's fill value stands for it). */
static inline bool input_missing_errno(int r)
{
    return r == -ENOENT || r == -ENOTDIR || r == -EISDIR;
}
/* input_file.c: the input's files. openat of file key, read-only, never blocking in open(): a
 * descriptor or -errno. */
int input_open_key(const struct zarr_input *in, const char *key);
/* Identity of file key as it is now (*fid "not there" if it is not a regular file). */
void input_stat_key(const struct zarr_input *in, const char *key, struct file_id *fid);
/* What a read of a whole file saw: its identity (taken before the bytes), the hash of the
 * bytes, and whether the file may have changed during the read with no change of identity
 * (input_racy, or another identity after the read): then neither the bytes nor their hash
 * are kept as the file's. */
struct read_info {
    struct file_id fid;
    uint64_t hash;
    bool racy;
};
/* Reads chunk file key whole into a malloc'd buffer (*raw, *len; ri: what was read). A missing
 * one is its errno (input_missing_errno) without a message, other failures -EIO with one; a
 * FIFO, device or anything not a regular file is refused. */
int input_read_file(const struct zarr_input *in, const char *key, char **raw, size_t *len,
                    struct read_info *ri, struct errbuf *err);
/* Reads chunk file key of exactly n bytes straight into dst: 0, -EIO with a message, or 1 when
 * the file is not a regular file of n bytes (the caller reads it with input_read_file). */
int input_read_plain(const struct zarr_input *in, const char *key, void *dst, size_t n,
                     struct read_info *ri, struct errbuf *err);
/* Reads n bytes at off of the open file fd (named key) into a malloc'd *out. */
int input_read_range(struct zarr_input *in, int fd, const char *key, uint64_t off, size_t n,
                     void **out, struct errbuf *err);
/* The identity of the file st describes ("not there" unless a regular file). */
void input_fid_of(const struct stat *st, struct file_id *fid);
/* Identity, as it is now, of the chunk (or shard) file of storage grid index sid. */
void input_stat_storage(const struct zarr_input *in, uint64_t sid, struct file_id *fid);
bool input_same_file(const struct file_id *a, const struct file_id *b);
/* The storage grid index holding read unit uid; *pos gets its place inside the shard. */
uint64_t input_storage_of_unit(const struct zarr_input *in, uint64_t uid, uint64_t *pos);
/* 0 when the box lies inside the array, 1 when it is empty, or -EINVAL. */
int input_check_box(const struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                    struct errbuf *err);

/* The storage files (chunks, or shards) of a box, and the content hash of what was read of
 * each (0 for a missing file). */
struct seen {
    uint64_t s0[ROIFS_MAX_DIM], sn[ROIFS_MAX_DIM]; /* first storage index and count per dim */
    size_t n;
    uint64_t *hash;
    bool *exists, *set;
    bool conflict; /* one file seen as two versions: the read mixed them */
};
/* Notes that storage file sid was read with content hash (exists: it was there). */
void input_seen_note(const struct zarr_input *in, struct seen *sn, uint64_t sid, bool exists,
                     uint64_t hash);

/* ---- content hashes (input_hash.c) ---- */

/* A byte range of a file and the XXH3-64 of the bytes a read found there. */
struct range_check {
    uint64_t off, len, hash;
};
void input_hashes_init(struct input_hashes *h);
void input_hashes_destroy(struct input_hashes *h);
/* Writes the hashes and closes their directory's descriptor (zarr_input_park). */
void input_hashes_let_go(struct input_hashes *h);
/* The time now (CLOCK_REALTIME, ns), taken before a file's identity, for input_racy. */
uint64_t input_now_ns(void);
/* Whether a read of the file fid that began at start (input_now_ns before its fstat) may have
 * seen it change with no change of identity: its mtime or ctime is within the margin of start
 * (the kernel sets them when a write begins, and a write may go on after), or verify is on. */
bool input_racy(const struct zarr_input *in, const struct file_id *fid, uint64_t start);
/* The recorded content hash of storage file sid as identity fid: true and *hash, or false. */
bool input_hash_known(struct zarr_input *in, uint64_t sid, const struct file_id *fid,
                      uint64_t *hash);
/* Records the content hash of storage file sid as fid: call only when the bytes hashed were
 * read while fid held, before and after, and input_racy was false at the start. */
void input_hash_note(struct zarr_input *in, uint64_t sid, const struct file_id *fid, uint64_t hash);
/* XXH3-64 of the whole open file fd of size bytes, read in blocks; each of chk[0..n) must see
 * bytes hashing to its hash, else -EAGAIN (also when the file is not size bytes long). */
int input_hash_fd(int fd, uint64_t size, const struct range_check *chk, size_t n, uint64_t *hash);
/* The content hash of storage file sid, whose identity now is fid: the recorded one, or the
 * file hashed now (and recorded when that is safe). *exists false: the file is not there (or
 * went away). Never fails: a file that cannot be read gets a value no read gives. */
uint64_t input_hash_now(struct zarr_input *in, uint64_t sid, const struct file_id *fid,
                        bool *exists);
/* XXH3-64 of n bytes. */
uint64_t input_hash_bytes(const void *p, size_t n);
/* What names the bytes p[0..n) read whole from the file fid: their hash, or with an input named
 * by identity (a FUSE input), the identity's. */
uint64_t input_hash_read(const struct zarr_input *in, const struct file_id *fid, const void *p,
                         size_t n);
/* The largest storage file the input hashes whole: a chunk file larger is refused by every
 * read; a shard larger (than its index and every inner chunk at the largest a read takes) is
 * named by its identity instead, so that no look reads a huge (sparse) file. */
uint64_t input_max_file_size(const struct zarr_input *in);
/* The value that names file fid by its identity alone. */
uint64_t input_identity_value(const struct file_id *fid);
/* Whether the input's files are named by identity instead of content (a FUSE input, whose
 * files another roifs mount may compute when they are read, or lose when it goes; not with
 * verify = content). */
bool input_by_identity(const struct zarr_input *in);
/* Reads a non-empty box inside the array into dst, noting in sn (when not NULL) what it saw.
 * -EAGAIN when a shard changed between its index and its data, or another directory was
 * held meanwhile (input_dir_look): read again. */
int input_read_box(struct zarr_input *in, const uint64_t *start, const uint64_t *shape, void *dst,
                   struct seen *sn, struct errbuf *err);

/* ---- an input at an http(s) URL (input_remote.c) ---- */

/* Makes in (whose path is a URL) read through remote.c, named by identity. */
void input_remote_open(struct zarr_input *in);
void input_remote_close(struct input_remote *r);
/* Metadata file name of the input, whole: -ENOENT when the server has none. */
int input_remote_read_meta(const struct zarr_input *in, const char *name, char **text, size_t *len,
                           struct errbuf *err);
/* The identity of object key: the one confirmed within `revalidate`, else the server's answer
 * to a (conditional) HEAD, else, unreachable, the one last confirmed. */
void input_remote_stat_key(const struct zarr_input *in, const char *key, struct file_id *fid);
/* The same of storage object sid, asking at once (remote_head_many) for the objects after it
 * in storage order whose identity is not fresh either. */
void input_remote_stat(const struct zarr_input *in, uint64_t sid, struct file_id *fid);
/* input_read_file of a remote input (max: the largest body taken). */
int input_remote_read_file(const struct zarr_input *in, const char *key, uint64_t max, char **raw,
                           size_t *len, struct read_info *ri, struct errbuf *err);
/* Bytes range ("A-B", or "-N": the last N) of object key into a malloc'd *raw (*len), *fid its
 * identity; expect (not NULL): -EAGAIN when the object is no longer that one. -ENOENT: absent. */
int input_remote_read_range(const struct zarr_input *in, const char *key, const char *range,
                            const struct file_id *expect, void **raw, size_t *len,
                            struct file_id *fid, struct errbuf *err);
/* The index of remote shard key (its bytes in *raw; ri: the shard's identity; *ixhash: the
 * index's hash): one range request, a suffix one when the index is at the end. */
int input_remote_shard_index(const struct zarr_input *in, const char *key, void **raw,
                             struct read_info *ri, uint64_t *ixhash, struct errbuf *err);
/* Bytes [off, off + n) of remote shard key, which must still be expect: -EAGAIN when not. */
int input_remote_inner(const struct zarr_input *in, const char *key, uint64_t off, uint64_t n,
                       const struct file_id *expect, void **raw, struct errbuf *err);

#endif
