/* input.c: the Zarr input array reader (v2, and v3 with or without shards): assembles boxes
 * from chunk files through a bounded, thread-safe LRU of decoded chunks in which each chunk is
 * decoded by one thread at a time. A sharded array is read inner chunk by inner chunk: the
 * LRU holds decoded inner chunks and decoded shard indexes, and an inner chunk costs one pread
 * of its own bytes, so memory never scales with the shard size. */
#include "zarr.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "../nd.h"
#include "input_state.h"
#include "remote.h"

/* ---- the cache of decoded chunks (callers hold in->lock) ---- */

static struct chunk *lookup(struct zarr_input *in, uint64_t id)
{
    struct idlru_node *n = idlru_find(&in->lru, id);
    return n ? IDLRU_ENTRY(n, struct chunk, node) : NULL;
}

/* Drops least recently used, unpinned chunks until the cache fits its budget. */
static void evict(struct zarr_input *in)
{
    struct idlru_node *n = idlru_oldest(&in->lru);
    while (in->bytes > in->cap && n) {
        struct idlru_node *newer = idlru_newer(&in->lru, n);
        struct chunk *c = IDLRU_ENTRY(n, struct chunk, node);
        if (c->refs == 0) {
            idlru_del(&in->lru, n);
            in->bytes -= c->cost;
            in->stats.evictions++;
            free(c->data);
            free(c);
        }
        n = newer;
    }
}

/* ---- loading one chunk ---- */

/* The storage grid index holding read unit uid; *pos gets its place inside the shard. */
uint64_t input_storage_of_unit(const struct zarr_input *in, uint64_t uid, uint64_t *pos)
{
    const struct zarr_meta *m = &in->meta;
    *pos = 0;
    if (!m->sharded)
        return uid;
    uint64_t idx[ROIFS_MAX_DIM], sidx[ROIFS_MAX_DIM], in_shard[ROIFS_MAX_DIM];
    uint64_t cps[ROIFS_MAX_DIM];
    nd_unlinear(uid, in->ugrid, m->ndim, idx);
    for (int d = 0; d < m->ndim; d++) {
        cps[d] = m->chunks[d] / m->shard.inner[d];
        sidx[d] = idx[d] / cps[d];
        in_shard[d] = idx[d] % cps[d];
    }
    *pos = nd_linear(in_shard, cps, m->ndim);
    return nd_linear(sidx, in->grid, m->ndim);
}

/* The storage key of LRU entry id. */
static void chunk_key(const struct zarr_input *in, uint64_t id, char *key, size_t len)
{
    uint64_t pos;
    zarr_input_storage_key(
        in, id & INDEX_ENTRY ? id & ~INDEX_ENTRY : input_storage_of_unit(in, id, &pos), key, len);
}

/* Identity of the file holding LRU entry id. */
static void stat_chunk(const struct zarr_input *in, uint64_t id, struct file_id *fid)
{
    uint64_t pos;
    input_stat_storage(
        in, id & INDEX_ENTRY ? id & ~INDEX_ENTRY : input_storage_of_unit(in, id, &pos), fid);
}

/* Identity of the chunk (or shard) file of storage grid index sid. */
void input_stat_storage(const struct zarr_input *in, uint64_t sid, struct file_id *fid)
{
    if (in->remote) {
        input_remote_stat(in, sid, fid); /* with a look at the objects after it */
        return;
    }
    char key[ROIFS_MAX_DIM * 24 + 4];
    zarr_input_storage_key(in, sid, key, sizeof key);
    input_stat_key(in, key, fid);
}

static int acquire(struct zarr_input *in, uint64_t id, struct chunk **out, struct errbuf *err);
static void release(struct zarr_input *in, struct chunk *c);

/* Takes entry c out of the cache (lock held): its file changed. Its last reader frees it. */
static void forget_locked(struct zarr_input *in, struct chunk *c)
{
    if (c->stale)
        return;
    idlru_del(&in->lru, &c->node);
    in->bytes -= c->cost;
    c->stale = true;
}

/* forget_locked for a pinned entry (refs > 0), lock not held. */
static void forget(struct zarr_input *in, struct chunk *c)
{
    pthread_mutex_lock(&in->lock);
    forget_locked(in, c);
    pthread_mutex_unlock(&in->lock);
}

/* The end of a decode of raw (read from file key) into data with result r: frees raw, and
 * either hands data over in *out or frees it and names the file in the error. */
static int keep_decoded(const struct zarr_input *in, const char *key, int r, void *raw, void *data,
                        void **out, struct errbuf *err)
{
    free(raw);
    if (r < 0) {
        free(data);
        return err_prefix(err, -EIO, "%s/%s", in->path, key);
    }
    *out = data;
    return 0;
}

/* Reads and decodes the whole chunk file key (not sharded) into a malloc'd C-order native
 * buffer (*out NULL: missing). */
static int load_whole(struct zarr_input *in, const char *key, void **out, struct read_info *ri,
                      struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    char *raw = NULL;
    size_t len = 0;
    int r = input_read_file(in, key, &raw, &len, ri, err);
    *out = NULL;
    if (input_missing_errno(r))
        return 0;
    if (r < 0)
        return r;
    if (m->format == 2 && m->compressor.id == ZC_NONE && len == in->chunk_nbytes &&
        !m->dtype.big_endian && !(m->fortran_order && m->ndim > 1)) {
        *out = raw; /* the file is the chunk: no copy */
        return 0;
    }
    void *data = xmalloc(in->chunk_nbytes ? in->chunk_nbytes : 1);
    r = zarr_decode_chunk(m, raw, len, data, err);
    return keep_decoded(in, key, r, raw, data, out, err);
}

/* The content hash of shard sid, open as fd, whose identity was fid when a read that began at
 * start took the ranges chk[0..n) from it: the recorded hash when the shard provably did not
 * change since (not racy, the same identity now), else a pass over the whole file that saw
 * those ranges as the read did (and is recorded when safe). -EAGAIN: it changed. */
static int shard_content(struct zarr_input *in, uint64_t sid, int fd, const struct file_id *fid,
                         uint64_t start, const struct range_check *chk, size_t n, uint64_t *hash,
                         bool *racy)
{
    struct stat st;
    struct file_id now = {0};
    *racy = input_racy(in, fid, start);
    if (fstat(fd, &st) == 0)
        input_fid_of(&st, &now);
    if (!input_same_file(&now, fid))
        return -EAGAIN;
    if (input_by_identity(in) || fid->size > input_max_file_size(in)) {
        *hash = input_identity_value(fid); /* as input_hash_now */
        return 0;
    }
    if (!*racy && input_hash_known(in, sid, fid, hash))
        return 0;
    int r = input_hash_fd(fd, fid->size, chk, n, hash);
    pthread_mutex_lock(&in->hashes.lock);
    in->hashes.passes++;
    pthread_mutex_unlock(&in->hashes.lock);
    if (r == 0 && fstat(fd, &st) == 0)
        input_fid_of(&st, &now);
    if (r == 0 && !input_same_file(&now, fid))
        r = -EAGAIN;
    if (r == 0 && !*racy)
        input_hash_note(in, sid, fid, *hash);
    return r;
}

/* Where the index of a shard of size bytes lies. */
static uint64_t index_offset(const struct zarr_input *in, uint64_t size)
{
    return in->meta.shard.index_at_start ? 0 : size - zarr_shard_index_size(&in->meta);
}

/* Reads and decodes the index of shard sid (*out NULL: the shard file is missing); ri gets
 * the shard's content hash, *ixhash that of the index's bytes. */
static int load_index(struct zarr_input *in, uint64_t sid, void **out, struct read_info *ri,
                      uint64_t *ixhash, struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    char key[ROIFS_MAX_DIM * 24 + 4];
    zarr_input_storage_key(in, sid, key, sizeof key);
    *out = NULL;
    if (in->remote) {
        void *raw = NULL;
        int r = input_remote_shard_index(in, key, &raw, ri, ixhash, err);
        if (r < 0)
            return r == -ENOENT ? 0 : r;
        uint64_t *entries = xmalloc(in->index_nbytes);
        r = zarr_shard_index_decode(m, raw, ri->fid.size, entries, err);
        return keep_decoded(in, key, r, raw, entries, out, err);
    }
    uint64_t start = input_now_ns();
    /* as read_chunk_file: never block in open, read regular files only */
    int fd = input_open_key(in, key);
    if (fd < 0)
        return input_missing_errno(fd) ? 0
                                       : err_set(err, -EIO, "%s/%s: cannot open shard: %s",
                                                 in->path, key, strerror(-fd));
    struct stat st;
    size_t isz = zarr_shard_index_size(m);
    void *raw = NULL;
    int r =
        fstat(fd, &st) < 0 ? err_set(err, -EIO, "%s/%s: %s", in->path, key, strerror(errno)) : 0;
    if (r == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return 0;
    }
    if (r == 0 && !S_ISREG(st.st_mode))
        r = err_set(err, -EIO, "%s/%s: cannot read shard: not a regular file", in->path, key);
    if (r == 0)
        input_fid_of(&st, &ri->fid);
    uint64_t size = r == 0 ? (uint64_t)st.st_size : 0;
    if (r == 0 && size < isz)
        r = err_set(err, -EIO, "%s/%s: shard of %llu bytes is shorter than its index (%zu bytes)",
                    in->path, key, (unsigned long long)size, isz);
    if (r == 0)
        r = input_read_range(in, fd, key, index_offset(in, size), isz, &raw, err);
    if (r == 0) {
        *ixhash = input_hash_bytes(raw, isz);
        struct range_check chk = {index_offset(in, size), isz, *ixhash};
        r = shard_content(in, sid, fd, &ri->fid, start, &chk, 1, &ri->hash, &ri->racy);
        if (r < 0)
            r = err_set(err, r, "%s/%s: %s", in->path, key,
                        r == -EAGAIN ? "the shard changed while being read" : strerror(-r));
    }
    close(fd);
    if (r < 0) {
        free(raw);
        return r;
    }
    uint64_t *entries = xmalloc(in->index_nbytes);
    r = zarr_shard_index_decode(m, raw, size, entries, err);
    return keep_decoded(in, key, r, raw, entries, out, err);
}

/* Decodes inner chunk pos (raw, n bytes, freed) of shard key into a malloc'd *out. */
static int decode_inner(struct zarr_input *in, const char *key, uint64_t pos, void *raw, uint64_t n,
                        void **out, struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    void *data = xmalloc(in->chunk_nbytes ? in->chunk_nbytes : 1);
    int r = zarr_chain_decode(&m->shard.codecs, &m->dtype, m->shard.inner, m->ndim, raw, (size_t)n,
                              data, err);
    free(raw);
    if (r < 0) {
        free(data);
        return err_prefix(err, -EIO, "%s/%s: inner chunk %llu", in->path, key,
                          (unsigned long long)pos);
    }
    *out = data;
    return 0;
}

/* Reads and decodes inner chunk uid of a sharded array through its shard's (cached) index. */
static int load_inner(struct zarr_input *in, uint64_t uid, void **out, struct read_info *ri,
                      struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    uint64_t pos, sid = input_storage_of_unit(in, uid, &pos);
    struct chunk *ix;
    *out = NULL;
    int r = acquire(in, INDEX_ENTRY | sid, &ix, err);
    if (r < 0)
        return r;
    /* an inner chunk is what the shard file was when its index was read */
    ri->fid = ix->fid;
    ri->hash = ix->hash;
    ri->racy = ix->racy;
    struct range_check chk[2] = {
        {index_offset(in, ix->fid.size), zarr_shard_index_size(m), ix->ixhash}};
    const uint64_t *e = ix->data ? (const uint64_t *)ix->data + 2 * pos : NULL;
    if (!e || e[0] == ZARR_SHARD_EMPTY) {
        release(in, ix);
        return 0;
    }
    uint64_t off = e[0], n = e[1];
    char key[ROIFS_MAX_DIM * 24 + 4];
    zarr_input_storage_key(in, sid, key, sizeof key);
    void *raw = NULL;
    if (in->remote) {
        r = input_remote_inner(in, key, off, n, &ix->fid, &raw, err);
        if (r == -EAGAIN)
            forget(in, ix);
        release(in, ix);
        return r < 0 ? r : decode_inner(in, key, pos, raw, n, out, err);
    }
    int fd = input_open_key(in, key);
    struct stat st;
    struct file_id now = {0};
    if (fd >= 0 && fstat(fd, &st) == 0)
        input_fid_of(&st, &now);
    if (fd >= 0 && !input_same_file(&now, &ix->fid)) {
        /* Replaced since its index was read: the offsets belong to the old file. */
        forget(in, ix);
        release(in, ix);
        close(fd);
        return err_set(err, -EAGAIN, "%s/%s: the shard changed while being read", in->path, key);
    }
    release(in, ix);
    if (fd < 0)
        return err_set(err, -EIO, "%s/%s: cannot open shard: %s", in->path, key, strerror(-fd));
    uint64_t start = input_now_ns();
    /* as read_chunk_file: no codec makes a chunk this much larger than its data */
    if (n > 2 * (uint64_t)in->chunk_nbytes + (1u << 20))
        r = err_set(err, -EIO,
                    "%s/%s: inner chunk %llu: %llu bytes is too large for a chunk of "
                    "%zu bytes",
                    in->path, key, (unsigned long long)pos, (unsigned long long)n,
                    in->chunk_nbytes);
    else
        r = input_read_range(in, fd, key, off, (size_t)n, &raw, err);
    if (r == 0 && ri->racy) { /* the index's bytes and ours: in the shard whose hash is taken */
        chk[1] = (struct range_check){off, n, input_hash_bytes(raw, (size_t)n)};
        r = shard_content(in, sid, fd, &ri->fid, start, chk, 2, &ri->hash, &ri->racy);
        ri->racy = true;
    } else if (r == 0 && fstat(fd, &st) == 0) { /* not changed since the index was read */
        input_fid_of(&st, &now);
        r = input_same_file(&now, &ri->fid) ? 0 : -EAGAIN;
    }
    if (r == -EAGAIN)
        r = err_set(err, -EAGAIN, "%s/%s: the shard changed while being read", in->path, key);
    else if (r < 0 && ri->racy && raw)
        r = err_set(err, -EIO, "%s/%s: %s", in->path, key, strerror(-r));
    close(fd);
    if (r < 0) {
        free(raw);
        return r;
    }
    return decode_inner(in, key, pos, raw, n, out, err);
}

/* Loads LRU entry id: *out is the decoded data (NULL: fill) and *cost its size. */
static int load_chunk(struct zarr_input *in, uint64_t id, void **out, size_t *cost,
                      struct read_info *ri, uint64_t *ixhash, struct errbuf *err)
{
    int r;
    memset(ri, 0, sizeof *ri); /* a missing file stays "not there" */
    if (id & INDEX_ENTRY) {
        r = load_index(in, id & ~INDEX_ENTRY, out, ri, ixhash, err);
        *cost = in->index_nbytes;
    } else if (in->meta.sharded) {
        r = load_inner(in, id, out, ri, err);
        *cost = in->chunk_nbytes;
    } else {
        char key[ROIFS_MAX_DIM * 24 + 4];
        chunk_key(in, id, key, sizeof key);
        r = load_whole(in, key, out, ri, err);
        *cost = in->chunk_nbytes;
        if (r == 0 && !ri->racy)
            input_hash_note(in, id, &ri->fid, ri->hash);
    }
    if (!*out)
        *cost = 0;
    return r;
}

/* Returns chunk id pinned (refs + 1), loading it if needed. Only one thread loads a given
 * chunk; the others wait for it. A failed load is not cached: waiters then try themselves. */
static int acquire(struct zarr_input *in, uint64_t id, struct chunk **out, struct errbuf *err)
{
    struct file_id current;
    const struct file_id *now = &current;
    stat_chunk(in, id, &current);
    pthread_mutex_lock(&in->lock);
    struct chunk *c;
    bool waited = false;
    while ((c = lookup(in, id)) && c->loading) {
        in->stats.waits += !waited;
        waited = true;
        pthread_cond_wait(&in->loaded, &in->lock);
    }
    if (c && (!input_same_file(&c->fid, now) || (c->racy && !waited))) {
        /* The file changed since it was decoded, or may have while it was read (a reader
         * that waited for that read may use it: the read was as late as its own): forget
         * that version. */
        forget_locked(in, c);
        if (c->refs == 0) {
            free(c->data);
            free(c);
        }
        c = NULL;
    }
    if (c) {
        c->refs++;
        in->stats.hits++;
        idlru_use(&in->lru, &c->node);
        pthread_mutex_unlock(&in->lock);
        *out = c;
        return 0;
    }
    c = xcalloc(1, sizeof *c);
    c->node.id = id;
    c->loading = true;
    c->refs = 1;
    idlru_add(&in->lru, &c->node);
    in->stats.loads++;
    pthread_mutex_unlock(&in->lock);

    void *data;
    size_t cost;
    struct read_info ri;
    uint64_t ixhash = 0;
    int r = load_chunk(in, id, &data, &cost, &ri, &ixhash, err);

    pthread_mutex_lock(&in->lock);
    if (r < 0) {
        idlru_del(&in->lru, &c->node);
        free(c);
        c = NULL;
    } else {
        c->fid = ri.fid; /* of the file as read, which may be newer than the stat above */
        c->hash = ri.hash;
        c->racy = ri.racy;
        c->ixhash = ixhash;
        c->data = data;
        c->loading = false;
        c->cost = sizeof *c + cost;
        in->bytes += c->cost;
        idlru_use(&in->lru, &c->node);
        evict(in);
    }
    pthread_cond_broadcast(&in->loaded);
    pthread_mutex_unlock(&in->lock);
    *out = c;
    return r;
}

static void release(struct zarr_input *in, struct chunk *c)
{
    pthread_mutex_lock(&in->lock);
    c->refs--;
    if (c->refs == 0 && c->stale) {
        free(c->data);
        free(c);
    } else if (c->refs == 0 && in->bytes > in->cap) {
        evict(in);
    }
    pthread_mutex_unlock(&in->lock);
}

/* ---- reading boxes ---- */

/* Whether the box [start, stop) is exactly read unit ci of an array that is not sharded. */
static bool box_is_chunk(const struct zarr_input *in, const uint64_t *ci, const uint64_t *start,
                         const uint64_t *stop)
{
    if (in->meta.sharded || in->remote) /* remote: kept, a second fetch costs a round trip */
        return false;
    for (int d = 0; d < in->meta.ndim; d++)
        if (start[d] != ci[d] * in->unit[d] || stop[d] - start[d] != in->unit[d])
            return false;
    return true;
}

/* A box that is exactly one chunk not in the cache, the read region of a ROI that is a chunk
 * (grid ROIs = chunks, one FOV per chunk): the file is read and decoded straight into dst,
 * without a buffer of its own, a first touch of fresh pages and a copy, and not cached, since
 * no other ROI of such a layout reads it. 1: the chunk is cached (the caller copies it out). */
static int read_direct(struct zarr_input *in, uint64_t uid, void *dst, struct seen *sn,
                       struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    pthread_mutex_lock(&in->lock);
    bool cached = lookup(in, uid) != NULL;
    in->stats.loads += !cached;
    pthread_mutex_unlock(&in->lock);
    if (cached)
        return 1;
    char key[ROIFS_MAX_DIM * 24 + 4];
    chunk_key(in, uid, key, sizeof key);
    struct read_info ri;
    memset(&ri, 0, sizeof ri); /* a missing file stays "not there" */
    int r = 1;
    if (m->format == 2 && m->compressor.id == ZC_NONE && !m->dtype.big_endian &&
        !(m->fortran_order && m->ndim > 1))
        r = input_read_plain(in, key, dst, in->chunk_nbytes, &ri, err);
    if (r == 1) {
        char *raw = NULL;
        size_t len = 0;
        r = input_read_file(in, key, &raw, &len, &ri, err);
        if (r == 0) {
            r = zarr_decode_chunk(m, raw, len, dst, err);
            free(raw);
            if (r < 0)
                r = err_prefix(err, -EIO, "%s/%s", in->path, key);
        } else if (input_missing_errno(r)) {
            uint64_t zero[ROIFS_MAX_DIM] = {0};
            nd_fill_box(dst, in->unit, zero, in->unit, m->ndim, m->fill, m->dtype.size);
            r = 0;
        }
    }
    if (r == 0 && ri.fid.exists && !ri.racy)
        input_hash_note(in, uid, &ri.fid, ri.hash);
    if (r == 0 && sn)
        input_seen_note(in, sn, uid, ri.fid.exists, ri.hash);
    return r;
}

/* Copies the part of chunk ci that lies in the box [start, start + shape) into dst. */
static int read_from_chunk(struct zarr_input *in, const uint64_t *ci, const uint64_t *start,
                           const uint64_t *stop, const uint64_t *shape, void *dst, struct seen *sn,
                           struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    int nd = m->ndim;
    uint64_t lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM], o0[ROIFS_MAX_DIM], o1[ROIFS_MAX_DIM];
    uint64_t src_off[ROIFS_MAX_DIM], dst_off[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    const uint64_t *unit = in->unit;
    for (int d = 0; d < nd; d++) {
        lo[d] = ci[d] * unit[d];
        hi[d] = lo[d] + unit[d];
    }
    nd_intersect(start, stop, lo, hi, o0, o1, nd);
    for (int d = 0; d < nd; d++) {
        src_off[d] = o0[d] - lo[d];
        dst_off[d] = o0[d] - start[d];
        ext[d] = o1[d] - o0[d];
    }
    struct chunk *c;
    uint64_t uid = nd_linear(ci, in->ugrid, nd), pos;
    int r = box_is_chunk(in, ci, start, stop) ? read_direct(in, uid, dst, sn, err) : 1;
    if (r != 1)
        return r;
    r = acquire(in, uid, &c, err);
    if (r < 0)
        return r;
    if (sn)
        input_seen_note(in, sn, input_storage_of_unit(in, uid, &pos), c->fid.exists, c->hash);
    if (c->data)
        nd_copy(dst, shape, dst_off, c->data, unit, src_off, ext, nd, m->dtype.size);
    else
        nd_fill_box(dst, shape, dst_off, ext, nd, m->fill, m->dtype.size);
    release(in, c);
    return 0;
}

int input_read_box(struct zarr_input *in, const uint64_t *start, const uint64_t *shape, void *dst,
                   struct seen *sn, struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    int nd = m->ndim;
    uint64_t stop[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
    int r = input_dir_look(in, err); /* the input is its path, whatever directory is there */
    if (r < 0)
        return r;
    unsigned generation = input_dir_generation(in->dir);
    for (int d = 0; d < nd; d++)
        stop[d] = start[d] + shape[d];
    nd_chunk_range(start, stop, in->unit, nd, c0, c1);
    memcpy(ci, c0, sizeof(uint64_t) * nd);
    do {
        r = read_from_chunk(in, ci, start, stop, shape, dst, sn, err);
        if (r < 0)
            return r;
    } while (nd_next_index(ci, c0, c1, nd));
    /* A look again: the directory read may have been replaced (and its files removed, read as
     * fill values) with no other look to notice it during the read. Either way chunks of two
     * directories, maybe: read again. */
    if ((r = input_dir_look(in, err)) < 0)
        return r;
    if (input_dir_generation(in->dir) != generation)
        return err_set(err, -EAGAIN, "%s: the input's directory was replaced while being read",
                       in->path);
    return 0;
}

/* 0 when the box lies inside the array; 1 when it is empty (nothing to read). */
int input_check_box(const struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                    struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    bool empty = false;
    for (int d = 0; d < m->ndim; d++) {
        if (start[d] > m->shape[d] || shape[d] > m->shape[d] - start[d])
            return err_set(err, -EINVAL, "%s: read box outside the array in dimension %d", in->path,
                           d);
        empty = empty || shape[d] == 0;
    }
    return empty ? 1 : 0;
}

int zarr_input_read(struct zarr_input *in, const uint64_t *start, const uint64_t *shape, void *dst,
                    struct errbuf *err)
{
    int r = input_check_box(in, start, shape, err);
    for (int attempt = 0; r == 0; attempt++) {
        if ((r = input_read_box(in, start, shape, dst, NULL, err)) != -EAGAIN)
            return r;
        if (attempt == 2)
            return err_prefix(err, -EIO, "input kept changing");
        r = 0;
    }
    return r < 0 ? r : 0;
}

/* ---- opening ---- */

/* Metadata file name of the input, whole (-ENOENT when absent; a remote failure: err set). */
static int read_meta(struct zarr_input *in, const char *name, char **text, size_t *len,
                     struct errbuf *err)
{
    if (in->remote)
        return input_remote_read_meta(in, name, text, len, err);
    int r = file_read_all_at(input_dir_fd(in->dir), name, text, len);
    if (r < 0 && r != -ENOENT)
        err_set(err, r, "%s/%s: %s", in->path, name, file_strerror(r));
    return r;
}

static int read_v3_metadata(struct zarr_input *in, struct errbuf *err)
{
    size_t len;
    int r = read_meta(in, "zarr.json", &in->zarray, &len, err);
    if (r == -ENOENT)
        return err_set(err, -ENOENT,
                       in->remote ? "%s: not a Zarr v2 array (HTTP 404 for .zarray) nor a Zarr v3 "
                                    "array (HTTP 404 for zarr.json)"
                                  : "%s: not a Zarr v2 array (no .zarray) nor a Zarr v3 array (no "
                                    "zarr.json)",
                       in->path);
    if (r < 0)
        return r;
    r = zarr_meta_parse_v3(in->zarray, len, &in->meta, &in->zattrs, &in->dimnames, err);
    if (r < 0)
        return err_prefix(err, r, "%s/zarr.json", in->path);
    return 0;
}

static int read_metadata(struct zarr_input *in, struct errbuf *err)
{
    size_t len;
    int r = read_meta(in, ".zarray", &in->zarray, &len, err);
    if (r == -ENOENT)
        return read_v3_metadata(in, err);
    if (r < 0)
        return r;
    r = zarr_meta_parse_v2(in->zarray, len, &in->meta, err);
    if (r < 0)
        return err_prefix(err, r, "%s/.zarray", in->path);
    r = read_meta(in, ".zattrs", &in->zattrs, &len, err);
    if (r == -ENOENT) {
        in->zattrs = NULL;
        return 0;
    }
    if (r < 0)
        return r;
    json_error_t jerr;
    json_t *attrs = json_loadb(in->zattrs, len, 0, &jerr);
    bool ok = json_is_object(attrs);
    json_decref(attrs);
    if (!ok)
        return err_set(err, -EINVAL, "%s/.zattrs: not a JSON object%s%s", in->path,
                       attrs ? "" : ": ", attrs ? "" : jerr.text);
    return 0;
}

/* The read-unit grid; -EINVAL when it has too many units to number. */
static int setup_units(struct zarr_input *in, struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    in->unit = zarr_meta_read_chunks(m);
    uint64_t n = 1;
    for (int d = 0; d < m->ndim; d++) {
        in->ugrid[d] = (m->shape[d] + in->unit[d] - 1) / in->unit[d];
        if (__builtin_mul_overflow(n, in->ugrid[d], &n) || n >= INDEX_ENTRY)
            return err_set(err, -EINVAL, "%s: too many chunks", in->path);
    }
    in->chunk_nbytes = (size_t)nd_prod(in->unit, m->ndim) * m->dtype.size;
    in->index_nbytes = m->sharded ? (size_t)(16 * zarr_shard_count(m)) : 0;
    return 0;
}

/* Frees what zarr_input_open made before the cache: the directory and the metadata texts. */
static void free_opened(struct zarr_input *in)
{
    input_dir_close(in->dir);
    input_remote_close(in->remote);
    free(in->zarray);
    free(in->zattrs);
    free(in->dimnames);
    free(in->path);
    free(in);
}

int zarr_input_open(const char *path, size_t lru_bytes, struct zarr_input **out, struct errbuf *err)
{
    struct zarr_input *in = xcalloc(1, sizeof *in);
    in->path = xstrdup(path);
    int e = 0;
    if (remote_is_url(path))
        input_remote_open(in);
    else
        e = input_dir_open(path, &in->dir);
    if (e < 0) {
        err_set(err, e, "%s: %s", path, strerror(-e));
        free_opened(in);
        return e;
    }
    int r = read_metadata(in, err);
    if (r == 0)
        r = setup_units(in, err);
    if (r < 0) {
        free_opened(in);
        return r;
    }
    zarr_meta_grid(&in->meta, in->grid);
    in->meta_hash = hash64(HASH64_INIT, in->zarray, strlen(in->zarray));
    /* two read units, and a shard index that stays while its inner chunks are read */
    size_t min_cap = 2 * (in->chunk_nbytes + sizeof(struct chunk)) + in->index_nbytes;
    in->cap = lru_bytes > min_cap ? lru_bytes : min_cap;
    idlru_init(&in->lru);
    input_hashes_init(&in->hashes);
    struct statfs sfs; /* FUSE: reading a file may compute it (another roifs mount) */
    in->hashes.by_identity = in->remote || (fstatfs(input_dir_fd(in->dir), &sfs) == 0 &&
                                            sfs.f_type == 0x65735546 /* FUSE */);
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->loaded, NULL);
    *out = in;
    return 0;
}

const struct zarr_meta *zarr_input_meta(const struct zarr_input *in)
{
    return &in->meta;
}

const char *zarr_input_path(const struct zarr_input *in)
{
    return in->path;
}

const char *zarr_input_zarray_text(const struct zarr_input *in)
{
    return in->zarray;
}

const char *zarr_input_zattrs_text(const struct zarr_input *in)
{
    return in->zattrs;
}

const char *zarr_input_dimension_names_text(const struct zarr_input *in)
{
    return in->dimnames;
}

void zarr_input_get_stats(struct zarr_input *in, struct zarr_input_stats *st)
{
    pthread_mutex_lock(&in->lock);
    *st = in->stats;
    st->bytes = in->bytes;
    pthread_mutex_unlock(&in->lock);
}

static void free_chunk(struct idlru_node *n, void *ctx)
{
    (void)ctx;
    struct chunk *c = IDLRU_ENTRY(n, struct chunk, node);
    free(c->data);
    free(c);
}

void zarr_input_close(struct zarr_input *in)
{
    if (!in)
        return;
    idlru_each(&in->lru, free_chunk, NULL);
    idlru_destroy(&in->lru);
    input_hashes_destroy(&in->hashes);
    pthread_mutex_destroy(&in->lock);
    pthread_cond_destroy(&in->loaded);
    free_opened(in);
}
