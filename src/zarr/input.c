/* input.c: the Zarr v2 input array reader: assembles boxes from chunk files through a bounded,
 * thread-safe LRU of decoded chunks in which each chunk is decoded by one thread at a time. */
#include "zarr.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"

/* A decoded chunk (C order, native byte order) or, with data == NULL, a missing chunk file. */
/* Identity of a chunk file as it was read: a rewrite changes it, so nothing decoded from an
 * older version is used again. */
struct file_id {
    bool exists;
    uint64_t size, mtime_ns, ino;
};

struct chunk {
    uint64_t id; /* C-order linear index in the chunk grid */
    struct file_id fid;
    void *data;
    size_t cost;  /* bytes charged to the LRU */
    int refs;     /* readers copying out of data; never evicted while > 0 */
    bool loading; /* being read and decoded by one thread; others wait */
    bool stale;   /* replaced by a newer version of the file; freed by its last reader */
    struct chunk *hnext;
    struct chunk *prev, *next; /* LRU list, most recent first; only loaded chunks */
};

struct zarr_input {
    char *path;
    int dirfd;
    struct zarr_meta meta;
    char *zarray, *zattrs;
    uint64_t grid[ROIFS_MAX_DIM];
    size_t chunk_nbytes;

    pthread_mutex_t lock;
    pthread_cond_t loaded; /* a loading chunk finished (or failed) */
    struct chunk **buckets;
    size_t nbuckets, count;
    struct chunk *head, *tail;
    size_t bytes, cap;
    struct zarr_input_stats stats;
};

/* ---- hash table and LRU list (callers hold in->lock) ---- */

static size_t bucket_of(const struct zarr_input *in, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> 32) & (in->nbuckets - 1);
}

static struct chunk *lookup(struct zarr_input *in, uint64_t id)
{
    for (struct chunk *c = in->buckets[bucket_of(in, id)]; c; c = c->hnext)
        if (c->id == id)
            return c;
    return NULL;
}

static void hash_insert(struct zarr_input *in, struct chunk *c)
{
    if (in->count >= in->nbuckets) {
        size_t old_n = in->nbuckets;
        struct chunk **old = in->buckets;
        in->nbuckets *= 2;
        in->buckets = xcalloc(in->nbuckets, sizeof *in->buckets);
        for (size_t i = 0; i < old_n; i++)
            for (struct chunk *e = old[i], *next; e; e = next) {
                next = e->hnext;
                size_t b = bucket_of(in, e->id);
                e->hnext = in->buckets[b];
                in->buckets[b] = e;
            }
        free(old);
    }
    size_t b = bucket_of(in, c->id);
    c->hnext = in->buckets[b];
    in->buckets[b] = c;
    in->count++;
}

static void hash_remove(struct zarr_input *in, struct chunk *c)
{
    struct chunk **pp = &in->buckets[bucket_of(in, c->id)];
    while (*pp != c)
        pp = &(*pp)->hnext;
    *pp = c->hnext;
    in->count--;
}

static void lru_unlink(struct zarr_input *in, struct chunk *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        in->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        in->tail = c->prev;
    c->prev = c->next = NULL;
}

static void lru_push_front(struct zarr_input *in, struct chunk *c)
{
    c->prev = NULL;
    c->next = in->head;
    if (in->head)
        in->head->prev = c;
    in->head = c;
    if (!in->tail)
        in->tail = c;
}

/* Drops least recently used, unpinned chunks until the cache fits its budget. */
static void evict(struct zarr_input *in)
{
    struct chunk *c = in->tail;
    while (in->bytes > in->cap && c) {
        struct chunk *prev = c->prev;
        if (c->refs == 0) {
            lru_unlink(in, c);
            hash_remove(in, c);
            in->bytes -= c->cost;
            in->stats.evictions++;
            free(c->data);
            free(c);
        }
        c = prev;
    }
}

/* ---- loading one chunk ---- */

static bool missing_errno(int r)
{
    return r == -ENOENT || r == -ENOTDIR || r == -EISDIR;
}

static void chunk_key(const struct zarr_input *in, uint64_t id, char *key, size_t len)
{
    uint64_t idx[ROIFS_MAX_DIM];
    nd_unlinear(id, in->grid, in->meta.ndim, idx);
    zarr_meta_chunk_key(&in->meta, idx, key, len);
}

static void stat_chunk(const struct zarr_input *in, uint64_t id, struct file_id *fid)
{
    char key[ROIFS_MAX_DIM * 24 + 2];
    struct stat st;
    chunk_key(in, id, key, sizeof key);
    memset(fid, 0, sizeof *fid);
    if (fstatat(in->dirfd, key, &st, 0) == 0 && S_ISREG(st.st_mode)) {
        fid->exists = true;
        fid->size = (uint64_t)st.st_size;
        fid->mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
        fid->ino = (uint64_t)st.st_ino;
    }
}

static bool same_file(const struct file_id *a, const struct file_id *b)
{
    return a->exists == b->exists && a->size == b->size && a->mtime_ns == b->mtime_ns &&
           a->ino == b->ino;
}

/* Reads and decodes chunk id into a malloc'd C-order native buffer (*out NULL: missing). */
static int load_chunk(struct zarr_input *in, uint64_t id, void **out, struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    char key[ROIFS_MAX_DIM * 24 + 2];
    chunk_key(in, id, key, sizeof key);
    char *raw;
    size_t len;
    int r = file_read_all_at(in->dirfd, key, &raw, &len);
    *out = NULL;
    if (missing_errno(r))
        return 0;
    if (r < 0)
        return err_set(err, -EIO, "%s/%s: cannot read chunk: %s", in->path, key, strerror(-r));
    void *data;
    if (m->compressor.id == ZC_NONE && len == in->chunk_nbytes) {
        data = raw; /* the file is the chunk: no copy */
    } else {
        data = xmalloc(in->chunk_nbytes);
        r = zarr_codec_decode(&m->compressor, raw, len, data, in->chunk_nbytes, m->dtype.size, err);
        free(raw);
        if (r < 0) {
            free(data);
            return err_prefix(err, -EIO, "%s/%s", in->path, key);
        }
    }
    size_t n = in->chunk_nbytes / m->dtype.size;
    if (m->dtype.big_endian)
        dtype_byteswap(data, n, m->dtype.size);
    if (m->fortran_order && m->ndim > 1) {
        void *c_order = xmalloc(in->chunk_nbytes);
        nd_f_to_c(c_order, data, m->chunks, m->ndim, m->dtype.size);
        free(data);
        data = c_order;
    }
    *out = data;
    return 0;
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
    if (c && !same_file(&c->fid, now)) {
        /* The file changed since it was decoded: forget that version. */
        hash_remove(in, c);
        lru_unlink(in, c);
        in->bytes -= c->cost;
        c->stale = true;
        if (c->refs == 0) {
            free(c->data);
            free(c);
        }
        c = NULL;
    }
    if (c) {
        c->refs++;
        in->stats.hits++;
        if (c != in->head) {
            lru_unlink(in, c);
            lru_push_front(in, c);
        }
        pthread_mutex_unlock(&in->lock);
        *out = c;
        return 0;
    }
    c = xcalloc(1, sizeof *c);
    c->id = id;
    c->fid = *now;
    c->loading = true;
    c->refs = 1;
    hash_insert(in, c);
    in->stats.loads++;
    pthread_mutex_unlock(&in->lock);

    void *data;
    int r = load_chunk(in, id, &data, err);

    pthread_mutex_lock(&in->lock);
    if (r < 0) {
        hash_remove(in, c);
        free(c);
        c = NULL;
    } else {
        c->data = data;
        c->loading = false;
        c->cost = sizeof *c + (data ? in->chunk_nbytes : 0);
        in->bytes += c->cost;
        lru_push_front(in, c);
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

/* Copies the part of chunk ci that lies in the box [start, start + shape) into dst. */
static int read_from_chunk(struct zarr_input *in, const uint64_t *ci, const uint64_t *start,
                           const uint64_t *stop, const uint64_t *shape, void *dst,
                           struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    int nd = m->ndim;
    uint64_t lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM], o0[ROIFS_MAX_DIM], o1[ROIFS_MAX_DIM];
    uint64_t src_off[ROIFS_MAX_DIM], dst_off[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++) {
        lo[d] = ci[d] * m->chunks[d];
        hi[d] = lo[d] + m->chunks[d];
    }
    nd_intersect(start, stop, lo, hi, o0, o1, nd);
    for (int d = 0; d < nd; d++) {
        src_off[d] = o0[d] - lo[d];
        dst_off[d] = o0[d] - start[d];
        ext[d] = o1[d] - o0[d];
    }
    struct chunk *c;
    int r = acquire(in, nd_linear(ci, in->grid, nd), &c, err);
    if (r < 0)
        return r;
    if (c->data)
        nd_copy(dst, shape, dst_off, c->data, m->chunks, src_off, ext, nd, m->dtype.size);
    else
        nd_fill_box(dst, shape, dst_off, ext, nd, m->fill, m->dtype.size);
    release(in, c);
    return 0;
}

int zarr_input_read(struct zarr_input *in, const uint64_t *start, const uint64_t *shape, void *dst,
                    struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    int nd = m->ndim;
    uint64_t stop[ROIFS_MAX_DIM], c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++) {
        if (start[d] > m->shape[d] || shape[d] > m->shape[d] - start[d])
            return err_set(err, -EINVAL, "%s: read box outside the array in dimension %d", in->path,
                           d);
        if (shape[d] == 0)
            return 0;
        stop[d] = start[d] + shape[d];
        c0[d] = ci[d] = start[d] / m->chunks[d];
        c1[d] = (stop[d] - 1) / m->chunks[d] + 1;
    }
    for (;;) {
        int r = read_from_chunk(in, ci, start, stop, shape, dst, err);
        if (r < 0)
            return r;
        int d = nd - 1;
        for (; d >= 0; d--) {
            if (++ci[d] < c1[d])
                break;
            ci[d] = c0[d];
        }
        if (d < 0)
            return 0;
    }
}

/* ---- opening ---- */

static int read_metadata(struct zarr_input *in, struct errbuf *err)
{
    size_t len;
    int r = file_read_all_at(in->dirfd, ".zarray", &in->zarray, &len);
    if (r == -ENOENT) {
        if (faccessat(in->dirfd, "zarr.json", F_OK, 0) == 0)
            return err_set(err, -ENOTSUP, "%s: Zarr v3 input (zarr.json) is not supported yet",
                           in->path);
        return err_set(err, -ENOENT, "%s: not a Zarr v2 array (no .zarray)", in->path);
    }
    if (r < 0)
        return err_set(err, r, "%s/.zarray: %s", in->path, strerror(-r));
    r = zarr_meta_parse_v2(in->zarray, len, &in->meta, err);
    if (r < 0)
        return err_prefix(err, r, "%s/.zarray", in->path);
    r = file_read_all_at(in->dirfd, ".zattrs", &in->zattrs, &len);
    if (r == -ENOENT) {
        in->zattrs = NULL;
        return 0;
    }
    if (r < 0)
        return err_set(err, r, "%s/.zattrs: %s", in->path, strerror(-r));
    json_error_t jerr;
    json_t *attrs = json_loadb(in->zattrs, len, 0, &jerr);
    bool ok = json_is_object(attrs);
    json_decref(attrs);
    if (!ok)
        return err_set(err, -EINVAL, "%s/.zattrs: not a JSON object%s%s", in->path,
                       attrs ? "" : ": ", attrs ? "" : jerr.text);
    return 0;
}

int zarr_input_open(const char *path, size_t lru_bytes, struct zarr_input **out, struct errbuf *err)
{
    struct zarr_input *in = xcalloc(1, sizeof *in);
    in->path = xstrdup(path);
    in->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (in->dirfd < 0) {
        int e = -errno;
        err_set(err, e, "%s: %s", path, strerror(-e));
        free(in->path);
        free(in);
        return e;
    }
    int r = read_metadata(in, err);
    if (r < 0) {
        close(in->dirfd);
        free(in->zarray);
        free(in->zattrs);
        free(in->path);
        free(in);
        return r;
    }
    zarr_meta_grid(&in->meta, in->grid);
    in->chunk_nbytes = zarr_meta_chunk_nbytes(&in->meta);
    size_t min_cap = 2 * (in->chunk_nbytes + sizeof(struct chunk));
    in->cap = lru_bytes > min_cap ? lru_bytes : min_cap;
    in->nbuckets = 64;
    in->buckets = xcalloc(in->nbuckets, sizeof *in->buckets);
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->loaded, NULL);
    *out = in;
    return 0;
}

const struct zarr_meta *zarr_input_meta(const struct zarr_input *in)
{
    return &in->meta;
}

const char *zarr_input_zarray_text(const struct zarr_input *in)
{
    return in->zarray;
}

const char *zarr_input_zattrs_text(const struct zarr_input *in)
{
    return in->zattrs;
}

void zarr_input_get_stats(struct zarr_input *in, struct zarr_input_stats *st)
{
    pthread_mutex_lock(&in->lock);
    *st = in->stats;
    st->bytes = in->bytes;
    pthread_mutex_unlock(&in->lock);
}

void zarr_input_close(struct zarr_input *in)
{
    if (!in)
        return;
    for (size_t i = 0; i < in->nbuckets; i++)
        for (struct chunk *c = in->buckets[i], *next; c; c = next) {
            next = c->hnext;
            free(c->data);
            free(c);
        }
    free(in->buckets);
    pthread_mutex_destroy(&in->lock);
    pthread_cond_destroy(&in->loaded);
    close(in->dirfd);
    free(in->zarray);
    free(in->zattrs);
    free(in->path);
    free(in);
}

int zarr_input_signature(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                         uint64_t *sig)
{
    const struct zarr_meta *m = &in->meta;
    int nd = m->ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
    uint64_t h = fnv64(FNV64_INIT, in->zarray, strlen(in->zarray));
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 0 || start[d] + shape[d] > m->shape[d]) {
            *sig = h;
            return shape[d] == 0 ? 0 : -EINVAL;
        }
        c0[d] = ci[d] = start[d] / m->chunks[d];
        c1[d] = (start[d] + shape[d] - 1) / m->chunks[d] + 1;
    }
    for (;;) {
        struct file_id fid;
        uint64_t id = nd_linear(ci, in->grid, nd);
        stat_chunk(in, id, &fid);
        uint64_t rec[5] = {id, fid.exists, fid.size, fid.mtime_ns, fid.ino};
        h = fnv64(h, rec, sizeof rec);
        int d = nd - 1;
        for (; d >= 0; d--) {
            if (++ci[d] < c1[d])
                break;
            ci[d] = c0[d];
        }
        if (d < 0)
            break;
    }
    *sig = h;
    return 0;
}
