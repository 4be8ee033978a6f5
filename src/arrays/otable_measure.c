/* otable_measure.c: [measure]'s side of the table of ome = labels (otable_measure.h): the names
 * of the table's records, the records of the merged partials and of each label chunk's partial,
 * the request that reads the partials it can from their records and asks for the other label
 * chunks from several threads, and the names of the records `clean --unused` keeps. The measuring
 * itself is src/measure/. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../nd.h"
#include "upread.h"
#include "otable_measure.h"

/* ---- the records' names ---- */

/* The record of the table made from the label chunks of t->record_key. */
char *otable_record_path(const struct otable *t)
{
    char hex[33];
    key_hex(t->record_key, hex);
    return xasprintf("%s/%s-%s.rows", t->g.t->cache_dir, t->ms ? "features" : "table", hex);
}

/* The record's name: what the rows depend on (every chunk's key as it is now, so it changes
 * with the input and with whatever else the label chunks follow; the geometry). */
struct key128 otable_key_now(const struct overlay_geometry *g)
{
    const struct task *k = g->t;
    struct keyhash h;
    key_init(&h, "roifs-table-rows 1");
    key_add(&h, g->scale, sizeof g->scale);
    key_add(&h, g->translation, sizeof g->translation);
    key_add(&h, g->axis, sizeof g->axis);
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    for (uint64_t id = 0; id < k->nchunks; id++) {
        if (!task_chunk_present(k, id))
            continue;
        struct chunk_keys ck;
        engine_chunk_keys_now(k, id, memo, &ck);
        key_add_u64(&h, id);
        key_add_key(&h, ck.chunk);
        chunk_keys_free(&ck);
    }
    zarr_sigmemo_free(memo);
    return key_final(&h);
}

/* ---- the partials' records ---- */

/* The partials' record ([measure]): its name as the rows' (record_path), its content the
 * merged partials, so that a later mount makes the table without a label chunk. */
void otable_stats_record_write(const struct otable *t)
{
    char *path = otable_record_path(t);
    int dfd = open(t->g.t->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || measure_record_write(&t->stats, dfd, strrchr(path, '/') + 1) < 0)
        log_warn("%s: cannot write the feature table's record", path);
    if (dfd >= 0)
        close(dfd);
    free(path);
}

/* 0 when the record was read into t->stats (then complete); else t->stats stays empty. */
int otable_stats_record_read(struct otable *t)
{
    char *path = otable_record_path(t);
    int r = measure_record_read(&t->stats, path);
    if (r == -EIO)
        log_warn("%s: damaged; the table is computed again", path);
    if (r < 0) {
        mstats_destroy(&t->stats);
        measure_stats_init(t->ms, &t->stats);
    }
    free(path);
    return r;
}

/* A decoded chunk at the edge of the array holds ext elements per dimension at the strides of
 * a whole chunk: moved together in place (C order over ext), as measure_piece reads it. */
void otable_compact_chunk(const struct task *k, const uint64_t *ext, unsigned char *buf)
{
    int nd = k->out.ndim;
    bool whole = true;
    for (int d = 0; d < nd; d++)
        whole = whole && ext[d] == k->out.chunks[d];
    if (whole)
        return;
    uint64_t stride[ROIFS_MAX_DIM], i[ROIFS_MAX_DIM] = {0}, n = nd_prod(ext, nd);
    for (int d = nd - 1; d >= 0; d--)
        stride[d] = d == nd - 1 ? 1 : stride[d + 1] * k->out.chunks[d + 1];
    size_t es = k->out.dtype.size;
    for (uint64_t e = 0; e < n; e++) {
        uint64_t off = 0;
        for (int d = 0; d < nd; d++)
            off += i[d] * stride[d];
        memmove(buf + e * es, buf + off * es, es); /* off >= e: nothing unread is overwritten */
        for (int d = nd - 1; d >= 0 && ++i[d] == ext[d]; d--)
            i[d] = 0;
    }
}

static char *piece_path(const struct otable *t, struct key128 key)
{
    char hex[33];
    key_hex(key, hex);
    return xasprintf("%s/mpiece-%s.rows", t->g.t->cache_dir, hex);
}

void otable_piece_write(const struct otable *t, struct key128 key, const struct mstats *piece)
{
    char *path = piece_path(t, key);
    int dfd = open(t->g.t->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || measure_record_write(piece, dfd, strrchr(path, '/') + 1) < 0)
        log_warn("%s: cannot write a chunk's partial statistics", path);
    if (dfd >= 0)
        close(dfd);
    free(path);
}

/* The name of the partial of chunk id of key chunk (as made) with the intensities of its box
 * [c0, c0 + ext) as they are now. */
static struct key128 made_key(const struct otable *t, struct key128 chunk, const uint64_t *c0,
                              const uint64_t *ext)
{
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    struct key128 key = measure_piece_key(t->ms, chunk, c0, ext, memo);
    zarr_sigmemo_free(memo);
    return key;
}

void otable_chunk_made(void *ctx, uint64_t id, struct key128 key, const void *data, size_t len)
{
    struct otable *t = ctx;
    const struct task *k = t->g.t;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    engine_chunk_box(k, id, c0, c1, ext);
    struct key128 piece = made_key(t, key, c0, ext);
    char *path = piece_path(t, piece);
    bool have = access(path, F_OK) == 0; /* made by another process, or before */
    free(path);
    if (have)
        return;
    unsigned char *buf = xmalloc(k->chunk_nbytes);
    struct errbuf e = {{0}};
    struct mstats s;
    measure_stats_init(t->ms, &s);
    int r = zarr_decode_chunk(&k->out, data, len, buf, &e);
    if (r == 0) {
        otable_compact_chunk(k, ext, buf);
        r = measure_piece(t->ms, c0, ext, buf, &s, &e);
    }
    if (r < 0) /* the table's request measures it from the cached chunk */
        log_warn("%s: chunk %llu's partial statistics: %s", k->cfg.path, (unsigned long long)id,
                 e.msg);
    else if (key_eq(made_key(t, key, c0, ext), piece)) { /* else the intensities changed */
        otable_piece_write(t, piece, &s);
        pthread_mutex_lock(&t->m);
        t->pieces_made++;
        pthread_mutex_unlock(&t->m);
    }
    mstats_destroy(&s);
    free(buf);
}

bool otable_piece_read(struct otable *t, struct key128 key)
{
    struct mstats piece;
    measure_stats_init(t->ms, &piece);
    char *path = piece_path(t, key);
    bool have = measure_record_read(&piece, path) == 0;
    free(path);
    if (have) {
        pthread_mutex_lock(&t->m);
        mstats_merge(&t->stats, &piece), t->pieces_recorded++;
        pthread_mutex_unlock(&t->m);
    }
    mstats_destroy(&piece);
    return have;
}

/* The name of chunk id's partial as the input is now. A memo holds the signatures of one
 * input's storage files by their index: cmemo the label chunks' input's (the label image's
 * with [measure] labels), imemo the intensities'. */
static struct key128 piece_key_memo(const struct task *k, struct measure *ms, uint64_t id,
                                    const uint64_t *c0, const uint64_t *ext,
                                    struct zarr_sigmemo *cmemo, struct zarr_sigmemo *imemo)
{
    struct chunk_keys ck;
    engine_chunk_keys_now(k, id, cmemo, &ck);
    struct key128 key = measure_piece_key(ms, ck.chunk, c0, ext, imemo);
    chunk_keys_free(&ck);
    return key;
}

/* Label chunk id's partial's key as piece_key_memo, when the chunk is present (false: it is
 * not, and has no partial). */
static bool present_piece_key(const struct task *k, struct measure *ms, uint64_t id,
                              struct zarr_sigmemo *cmemo, struct zarr_sigmemo *imemo,
                              struct key128 *key)
{
    if (!task_chunk_present(k, id))
        return false;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
    engine_chunk_box(k, id, c0, c1, ext);
    *key = piece_key_memo(k, ms, id, c0, ext, cmemo, imemo);
    return true;
}

struct key128 otable_piece_key_now(const struct otable *t, uint64_t id, const uint64_t *c0,
                                   const uint64_t *ext)
{
    struct zarr_sigmemo *cmemo = zarr_sigmemo_new(), *imemo = zarr_sigmemo_new();
    struct key128 key = piece_key_memo(t->g.t, t->ms, id, c0, ext, cmemo, imemo);
    zarr_sigmemo_free(cmemo);
    zarr_sigmemo_free(imemo);
    return key;
}

/* The label chunks a [measure] request asks for, shared by the threads that ask: a chunk the
 * engine has cached is answered (and measured) in the asking thread, so several ask at once. */
struct asking {
    struct otable *t;
    engine_chunk_cb answered;
    struct ask **asks;
    size_t n, next;
    pthread_mutex_t m;
};

static void *ask_some(void *arg)
{
    struct asking *a = arg;
    struct engine *e = overlay_engine(a->t->ov);
    for (;;) {
        pthread_mutex_lock(&a->m);
        size_t i = a->next++;
        pthread_mutex_unlock(&a->m);
        if (i >= a->n)
            return NULL;
        engine_open_chunk(e, a->asks[i]->id, a->answered, a->asks[i]);
    }
}

/* [measure]'s request without a record of the whole table: each label chunk's partial from its
 * record when the chunk and the intensities of its box are as they were (no label chunk read),
 * else from the chunk as the engine serves it (then recorded), by up to [process] threads
 * asking at once. */
void otable_start_measure(struct otable *t, engine_chunk_cb answered,
                          void (*release)(struct otable *t))
{
    const struct task *k = t->g.t;
    pthread_mutex_lock(&t->m);
    t->scans++;
    t->failed = false;
    t->outstanding = 1;
    pthread_mutex_unlock(&t->m);
    struct asking a = {
        .t = t, .answered = answered, .asks = xmalloc((k->nchunks + 1) * sizeof *a.asks)};
    struct zarr_sigmemo *cmemo = zarr_sigmemo_new(), *imemo = zarr_sigmemo_new();
    for (uint64_t id = 0; id < k->nchunks; id++) {
        struct key128 key;
        if (!present_piece_key(k, t->ms, id, cmemo, imemo, &key))
            continue;
        struct mstats piece;
        measure_stats_init(t->ms, &piece);
        char *path = piece_path(t, key);
        bool have = measure_record_read(&piece, path) == 0;
        free(path);
        pthread_mutex_lock(&t->m);
        if (have)
            mstats_merge(&t->stats, &piece), t->pieces_recorded++;
        else
            t->outstanding++;
        pthread_mutex_unlock(&t->m);
        mstats_destroy(&piece);
        if (have)
            continue;
        a.asks[a.n] = xmalloc(sizeof **a.asks);
        *a.asks[a.n++] = (struct ask){t, id, key};
    }
    zarr_sigmemo_free(cmemo);
    zarr_sigmemo_free(imemo);
    pthread_mutex_init(&a.m, NULL);
    size_t nthreads = k->cfg.threads > 1 ? (size_t)k->cfg.threads - 1 : 0, started = 0;
    pthread_t th[64];
    while (started < nthreads && started < 64 && started + 1 < a.n &&
           pthread_create(&th[started], NULL, ask_some, &a) == 0)
        started++;
    ask_some(&a);
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&a.m);
    free(a.asks);
    release(t);
}

/* A record's name (its key's 32 hexadecimal digits) as a map.h key. */
static void keep_name(struct map *keep, struct key128 key)
{
    char hex[33];
    key_hex(key, hex);
    map_put(keep, hash64(HASH64_INIT, hex, 32), hash64(1, hex, 32), &(bool){false});
}

/* The names of the records a [measure] table of ov needs now: its whole record's and every
 * label chunk's partial's (a map.h set of their hexadecimal keys). 0 or -EINVAL (the
 * configuration). */
int otable_measure_names_now(const struct overlay_geometry *g, struct map *keep)
{
    struct measure *ms;
    struct errbuf err = {{0}};
    int r = measure_new(g->t, &ms, &err);
    if (r < 0)
        return r;
    const struct task *k = g->t;
    struct keyhash h;
    key_init(&h, "roifs-feature-partials 1");
    key_add_key(&h, otable_key_now(g));
    measure_identity(ms, &h);
    struct key128 whole = key_final(&h);
    keep_name(keep, whole);
    if (k->cfg.measure_python) { /* the Python features' record of that table */
        char hex[33];
        key_hex(whole, hex);
        char *name = xasprintf("features-%s.rows", hex);
        struct key128 py;
        if (mpython_record_key_now(k, name, &py) == 0)
            keep_name(keep, py);
        if (mpython_record_key_now(k, "objects", &py) == 0) /* mpyobj-, per object */
            keep_name(keep, py);
        free(name);
    }
    struct zarr_sigmemo *cmemo = zarr_sigmemo_new(), *imemo = zarr_sigmemo_new();
    for (uint64_t id = 0; id < k->nchunks; id++) {
        struct key128 key;
        if (present_piece_key(k, ms, id, cmemo, imemo, &key))
            keep_name(keep, key);
    }
    zarr_sigmemo_free(cmemo);
    zarr_sigmemo_free(imemo);
    measure_free(ms);
    return 0;
}

bool otable_kept(const struct map *keep, const char *hex)
{
    return map_get(keep, hash64(HASH64_INIT, hex, 32), hash64(1, hex, 32)) != NULL;
}

/* ---- [measure] python ---- */

/* The record of the function's values: named by the whole table's record and the function. */
static char *python_path(const struct otable *t)
{
    char *table = otable_record_path(t), hex[33];
    key_hex(mpython_record_key(t->py, strrchr(table, '/') + 1), hex);
    free(table);
    return xasprintf("%s/mpyvals-%s.rows", t->g.t->cache_dir, hex);
}

/* A labels crop, read through level k's engine (its chunks cached by the table's scan). */
static int labels_box(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                      struct errbuf *err)
{
    const struct otable *t = ctx;
    struct upread u = {.up = t->g.t, .engine = overlay_engine(t->ov), .level = 0};
    return upread_box(&u, start, shape, dst, NULL, err);
}

bool otable_python_values(struct otable *t, bool record)
{
    char *path = python_path(t);
    mpy_values_free(&t->pyvals);
    if (mpython_record_read(&t->pyvals, path) == 0 && t->pyvals.n == t->stats.n) {
        free(path);
        return true;
    }
    mpy_values_free(&t->pyvals);
    uint64_t calls = 0;
    struct errbuf e = {{0}};
    int r = mpython_run(t->py, &t->stats, labels_box, t, t->g.t->cache_dir, &t->pyvals, &calls, &e);
    pthread_mutex_lock(&t->m);
    t->pycalls += calls;
    pthread_mutex_unlock(&t->m);
    if (r < 0)
        log_error("%s: the feature table: [measure] python: %s", t->g.t->cfg.path, e.msg);
    int dfd = r == 0 && record ? open(t->g.t->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0 && mpython_record_write(&t->pyvals, dfd, strrchr(path, '/') + 1) < 0)
        log_warn("%s: cannot write the Python features' record", path);
    if (dfd >= 0)
        close(dfd);
    free(path);
    return r == 0;
}
