/* upread.c: one array of the mount reading a box of another through that array's engine
 * (see upread.h): the chunks the box touches, waited for, decoded and pasted; the signature
 * hashes the keys of those chunks, so a change of the array read reaches its readers. */
#include "upread.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"

/* Range [c0, c1) of up's chunk grid that box [f0, f0 + fshape) touches; false when empty. */
static bool up_range(const struct task *up, const uint64_t *f0, const uint64_t *fshape,
                     uint64_t *c0, uint64_t *c1)
{
    int nd = up->out.ndim;
    uint64_t hi[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++) {
        if (fshape[d] == 0)
            return false;
        hi[d] = f0[d] + fshape[d];
    }
    nd_chunk_range(f0, hi, up->out.chunks, nd, c0, c1);
    return true;
}

struct sync_open {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int err, fd;
};

static void sync_cb(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    struct sync_open *s = ctx;
    pthread_mutex_lock(&s->m);
    s->err = err;
    s->fd = fd;
    s->done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->m);
}

/* Opens chunk id of the array read through its engine and WAITS for it: the calling compute
 * thread of the reading array blocks on the other array's engine, which may have to compute
 * the chunk first. This cannot deadlock as long as waits go one way only (upread.h). */
static int wait_for_upper_chunk(const struct upread *lv, uint64_t id, int *fd, struct errbuf *err)
{
    struct sync_open s = {.done = false, .fd = -1};
    pthread_mutex_init(&s.m, NULL);
    pthread_cond_init(&s.cv, NULL);
    engine_open_chunk(lv->engine, id, sync_cb, &s);
    pthread_mutex_lock(&s.m);
    while (!s.done)
        pthread_cond_wait(&s.cv, &s.m);
    pthread_mutex_unlock(&s.m);
    pthread_mutex_destroy(&s.m);
    pthread_cond_destroy(&s.cv);
    if (s.err < 0)
        return err_set(err, -EIO, "level %d chunk %llu: %s", lv->level, (unsigned long long)id,
                       strerror(-s.err));
    *fd = s.fd;
    return 0;
}

/* Reads chunk id of the level above (waiting for it) and decodes it into buf (its
 * chunk_nbytes); *key gets the key of the version read. */
static int read_up_chunk(const struct upread *lv, uint64_t id, void *buf, struct key128 *key,
                         struct errbuf *err)
{
    int fd = -1, rc = wait_for_upper_chunk(lv, id, &fd, err);
    if (rc < 0)
        return rc;
    rc = upread_decode_fd(lv->up, engine_cache(lv->engine), id, fd, buf, key, err);
    close(fd);
    return rc;
}

int upread_decode_fd(const struct task *up, struct cache *cache, uint64_t id, int fd, void *buf,
                     struct key128 *key, struct errbuf *err)
{
    struct stat st;
    struct cache_chunk_meta meta;
    int rc = fstat(fd, &st) < 0 ? -errno : 0;
    if (rc == 0 && key && (rc = cache_chunk_meta_of(cache, id, fd, &meta)) == 0)
        *key = meta.key;
    void *data = NULL;
    size_t got = 0;
    if (rc == 0) {
        data = xmalloc(st.st_size > 0 ? (size_t)st.st_size : 1);
        rc = pread_full(fd, data, (size_t)st.st_size, 0, &got);
        if (rc == 0 && got != (size_t)st.st_size)
            rc = -EIO;
    }
    if (rc < 0) {
        free(data);
        return err_set(err, -EIO, "chunk %llu: cannot read its cache file", (unsigned long long)id);
    }
    rc = zarr_decode_chunk(&up->out, data, got, buf, err);
    free(data);
    return rc;
}

/* The signature of a level's input over the up chunks [c0, c1), from each one's key
 * (keys[i] in C order; a chunk that does not exist counts as zeros). */
static uint64_t level_sig(const struct task *up, const uint64_t *c0, const uint64_t *c1,
                          const struct key128 *keys)
{
    uint64_t h = hash64(HASH64_INIT, "level 2", 7), idx[ROIFS_MAX_DIM];
    int nd = up->out.ndim;
    size_t i = 0;
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    do {
        uint64_t id = nd_linear(idx, up->grid, nd);
        h = hash64(h, &id, sizeof id);
        h = hash64(h, &keys[i], sizeof keys[i]);
        i++;
    } while (nd_next_index(idx, c0, c1, nd));
    return h;
}

static size_t range_count(const uint64_t *c0, const uint64_t *c1, int nd)
{
    size_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= c1[d] - c0[d];
    return n;
}

struct paste_ctx {
    const struct task *up;
    const uint64_t *f0, *fshape;
    void *dst;
};

/* Copies the part of an up chunk (box [lo, hi), decoded in cbuf) inside box [f0, f0 + fshape)
 * into dst. */
static void paste_up_chunk(void *ctx, const uint64_t *lo, const uint64_t *hi, const void *cbuf)
{
    const struct paste_ctx *p = ctx;
    int nd = p->up->out.ndim;
    uint64_t doff[ROIFS_MAX_DIM], soff[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    for (int d = 0; d < nd; d++) {
        uint64_t a = lo[d] > p->f0[d] ? lo[d] : p->f0[d];
        uint64_t b = hi[d] < p->f0[d] + p->fshape[d] ? hi[d] : p->f0[d] + p->fshape[d];
        doff[d] = a - p->f0[d];
        soff[d] = a - lo[d];
        ext[d] = b - a;
    }
    nd_copy(p->dst, p->fshape, doff, cbuf, p->up->out.chunks, soff, ext, nd, p->up->out.dtype.size);
}

int upread_each(const struct upread *lv, const uint64_t *f0, const uint64_t *fshape,
                upread_chunk_fn fn, void *ctx, uint64_t *sig, struct errbuf *err)
{
    const struct task *up = lv->up;
    int nd = up->out.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    if (sig)
        *sig = hash64(HASH64_INIT, "level 2", 7);
    if (!up_range(up, f0, fshape, c0, c1))
        return 0;
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    void *cbuf = xmalloc(up->chunk_nbytes);
    struct key128 *keys = xcalloc(range_count(c0, c1, nd), sizeof *keys);
    size_t pos = 0;
    int rc = 0;
    do {
        uint64_t id = nd_linear(idx, up->grid, nd);
        if (!task_chunk_present(up, id)) {
            pos++;
            continue;
        }
        if ((rc = read_up_chunk(lv, id, cbuf, &keys[pos++], err)) < 0)
            break;
        uint64_t lo[ROIFS_MAX_DIM], hi[ROIFS_MAX_DIM];
        nd_chunk_box(idx, up->out.chunks, up->out.shape, nd, lo, hi);
        fn(ctx, lo, hi, cbuf);
    } while (nd_next_index(idx, c0, c1, nd));
    if (rc == 0 && sig)
        *sig = level_sig(up, c0, c1, keys);
    free(keys);
    free(cbuf);
    return rc;
}

int upread_box(const struct upread *lv, const uint64_t *f0, const uint64_t *fshape, void *dst,
               uint64_t *sig, struct errbuf *err)
{
    const struct task *up = lv->up;
    nd_fill(dst, nd_prod(fshape, up->out.ndim), up->out.fill, up->out.dtype.size);
    struct paste_ctx p = {up, f0, fshape, dst};
    return upread_each(lv, f0, fshape, paste_up_chunk, &p, sig, err);
}

uint64_t upread_signature(const struct task *up, const uint64_t *f0, const uint64_t *fshape,
                          struct zarr_sigmemo *memo)
{
    int nd = up->out.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM];
    uint64_t sig = hash64(HASH64_INIT, "level 2", 7);
    if (!f0 || !up_range(up, f0, fshape, c0, c1))
        return sig;
    struct key128 *keys = xcalloc(range_count(c0, c1, nd), sizeof *keys);
    size_t pos = 0;
    memcpy(idx, c0, sizeof(uint64_t) * nd);
    do {
        uint64_t id = nd_linear(idx, up->grid, nd);
        if (task_chunk_present(up, id)) {
            struct chunk_keys k;
            engine_chunk_keys_now(up, id, memo, &k);
            keys[pos] = k.chunk;
            chunk_keys_free(&k);
        }
        pos++;
    } while (nd_next_index(idx, c0, c1, nd));
    sig = level_sig(up, c0, c1, keys);
    free(keys);
    return sig;
}

bool upread_touches_present(const struct task *up, const uint64_t *f0, const uint64_t *fshape)
{
    int nd = up->out.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
    if (!up_range(up, f0, fshape, c0, c1))
        return false;
    memcpy(ci, c0, sizeof(uint64_t) * nd);
    do {
        if (task_chunk_present(up, nd_linear(ci, up->grid, nd)))
            return true;
    } while (nd_next_index(ci, c0, c1, nd));
    return false;
}

/* ---- the copy processor of derived arrays ---- */

static int copy_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    (void)p;
    (void)err;
    memcpy(rq->out, rq->in, rq->out_nbytes < rq->in_nbytes ? rq->out_nbytes : rq->in_nbytes);
    return 0;
}

static void copy_destroy(struct proc *p)
{
    free(p);
}

static const struct proc_ops copy_ops = {.run = copy_run, .destroy = copy_destroy};

struct proc *upread_copy_proc(void)
{
    struct proc *copy = xcalloc(1, sizeof *copy);
    copy->ops = &copy_ops;
    return copy;
}

void upread_level_rois(const struct task *up, const struct zarr_meta *o, upread_footprint_fn fp,
                       const void *ctx, struct roi_set *rs)
{
    int nd = o->ndim;
    uint64_t grid[ROIFS_MAX_DIM];
    zarr_meta_grid(o, grid);
    uint64_t nchunks = nd_prod(grid, nd);
    size_t cap = 16;
    *rs = (struct roi_set){.ndim = nd};
    rs->start = xmalloc(cap * nd * sizeof(uint64_t));
    rs->stop = xmalloc(cap * nd * sizeof(uint64_t));
    for (uint64_t id = 0; id < nchunks; id++) {
        uint64_t idx[ROIFS_MAX_DIM], b0[ROIFS_MAX_DIM], b1[ROIFS_MAX_DIM], bs[ROIFS_MAX_DIM],
            f0[ROIFS_MAX_DIM], fs[ROIFS_MAX_DIM];
        nd_unlinear(id, grid, nd, idx);
        nd_chunk_box(idx, o->chunks, o->shape, nd, b0, b1);
        for (int d = 0; d < nd; d++)
            bs[d] = b1[d] - b0[d];
        fp(ctx, b0, bs, f0, fs);
        if (!upread_touches_present(up, f0, fs))
            continue;
        if (rs->n == cap) {
            cap *= 2;
            rs->start = xrealloc(rs->start, cap * nd * sizeof(uint64_t));
            rs->stop = xrealloc(rs->stop, cap * nd * sizeof(uint64_t));
        }
        memcpy(&rs->start[rs->n * nd], b0, nd * sizeof(uint64_t));
        memcpy(&rs->stop[rs->n * nd], b1, nd * sizeof(uint64_t));
        rs->n++;
    }
}
