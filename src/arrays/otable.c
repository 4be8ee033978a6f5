/* otable.c: the masking ROI table of ome = labels (see otable.h): the bounding box of every
 * label id of the computed level, from its chunks as the engine serves them, and the
 * record of the rows in the cache; with [measure], the feature table made the same way
 * (otable_measure.c, src/measure/). */
#include "otable.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"
#include "otable_measure.h"
#include "upread.h"

#define RECORD_MAGIC "roifs-table-rows 1\n"
#define ROW_BOUND    256 /* bytes a row adds to any file of the table, at most */

/* ---- the boxes ---- */

/* Adds element pos[z, y, x] of label to its box. */
static void boxes_add(struct map *boxes, uint64_t label, const uint64_t *pos)
{
    bool added;
    struct box *b = map_put(boxes, label, 0, &added);
    if (added) {
        memcpy(b->lo, pos, sizeof b->lo);
        memcpy(b->hi, pos, sizeof b->hi);
        return;
    }
    for (int a = 0; a < 3; a++) {
        if (pos[a] < b->lo[a])
            b->lo[a] = pos[a];
        if (pos[a] > b->hi[a])
            b->hi[a] = pos[a];
    }
}

/* Element e of a decoded chunk as a label; 0 for background and negative values. */
static uint64_t label_at(const struct dtype *dt, const unsigned char *p)
{
    uint64_t u = dtype_load_bits(p, dt->size);
    return dt->kind == DT_INT && dtype_sign_extend(u, dt->size) < 0 ? 0 : u;
}

/* Adds the labels of chunk id (decoded in buf) to the boxes. Lock held. */
static void scan_chunk(struct otable *t, uint64_t id, const unsigned char *buf)
{
    const struct task *k = t->g.t;
    int nd = k->out.ndim;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM], i[ROIFS_MAX_DIM] = {0},
                                                                       stride[ROIFS_MAX_DIM];
    engine_chunk_box(k, id, c0, c1, ext);
    for (int d = nd - 1; d >= 0; d--)
        stride[d] = d == nd - 1 ? 1 : stride[d + 1] * k->out.chunks[d + 1];
    uint64_t n = nd_prod(ext, nd);
    size_t es = k->out.dtype.size;
    for (uint64_t e = 0; e < n; e++) {
        uint64_t off = 0;
        for (int d = 0; d < nd; d++)
            off += i[d] * stride[d];
        uint64_t label = label_at(&k->out.dtype, buf + off * es);
        if (label) {
            uint64_t pos[3];
            for (int a = 0; a < 3; a++)
                pos[a] = t->g.axis[a] >= 0 ? c0[t->g.axis[a]] + i[t->g.axis[a]] : 0;
            boxes_add(&t->boxes, label, pos);
        }
        for (int d = nd - 1; d >= 0 && ++i[d] == ext[d]; d--)
            i[d] = 0;
    }
}

/* The rows of the boxes, in micrometres (malloc'd, *n of them). */
static struct table_row *rows_of(const struct otable *t, size_t *n)
{
    size_t count = map_count(&t->boxes);
    struct table_row *rows = xmalloc((count ? count : 1) * sizeof *rows);
    *n = 0;
    size_t it = 0;
    struct map_key label;
    void *v;
    while (map_next(&t->boxes, &it, &label, &v)) {
        const struct box *b = v;
        struct table_row *r = &rows[(*n)++];
        r->label = label.lo;
        for (int a = 0; a < 3; a++) {
            int ax = t->g.axis[a];
            r->start[a] = ax < 0 ? 0 : t->g.translation[ax] + (double)b->lo[a] * t->g.scale[ax];
            r->length[a] = ax < 0 ? 1 : (double)(b->hi[a] + 1 - b->lo[a]) * t->g.scale[ax];
        }
    }
    return rows;
}

/* The masking table's rows of the merged partials s ([measure] with [output] table_name). */
static struct table_row *rows_of_stats(const struct otable *t, const struct mstats *s, size_t *n)
{
    struct table_row *rows = xmalloc((s->n ? s->n : 1) * sizeof *rows);
    for (size_t i = 0; i < s->n; i++) {
        const struct mobj *o = mstats_get(s, s->ids[i]);
        struct table_row *r = &rows[i];
        r->label = s->ids[i];
        for (int a = 0; a < 3; a++) {
            int ax = t->g.axis[a];
            r->start[a] = ax < 0 ? 0 : t->g.translation[ax] + (double)o->lo[ax] * t->g.scale[ax];
            r->length[a] = ax < 0 ? 1 : (double)(o->hi[ax] + 1 - o->lo[ax]) * t->g.scale[ax];
        }
    }
    *n = s->n;
    return rows;
}

/* ---- the record of the rows ---- */

static struct key128 record_key_now(const struct otable *t)
{
    struct key128 k = otable_key_now(&t->g);
    if (!t->ms)
        return k;
    struct keyhash h; /* the feature table's: the label chunks', [measure]'s and the input's */
    key_init(&h, "roifs-feature-partials 1");
    key_add_key(&h, k);
    measure_identity(t->ms, &h);
    return key_final(&h);
}

static void record_write(const struct otable *t, const struct table_row *rows, size_t n)
{
    struct strbuf sb = {0};
    sb_append(&sb, RECORD_MAGIC, strlen(RECORD_MAGIC));
    uint64_t count = n;
    sb_append(&sb, (const char *)&count, sizeof count);
    sb_append(&sb, (const char *)rows, n * sizeof *rows);
    uint64_t sum = hash64(HASH64_INIT, sb.buf, sb.len);
    sb_append(&sb, (const char *)&sum, sizeof sum);
    char *path = otable_record_path(t);
    int dfd = open(t->g.t->cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *name = strrchr(path, '/') + 1;
    if (dfd < 0 || file_write_atomic(dfd, name, sb.buf, sb.len, false) < 0)
        log_warn("%s: cannot write the table's record", path);
    if (dfd >= 0)
        close(dfd);
    free(path);
    free(sb.buf);
}

/* The rows of the record, or NULL when there is none or it is damaged. */
static struct table_row *record_read(const struct otable *t, size_t *n)
{
    char *path = otable_record_path(t), *data = NULL;
    size_t len = 0, head = strlen(RECORD_MAGIC) + sizeof(uint64_t);
    struct table_row *rows = NULL;
    uint64_t count, sum;
    if (file_read_all(path, &data, &len) == 0 && len >= head + sizeof sum &&
        memcmp(data, RECORD_MAGIC, strlen(RECORD_MAGIC)) == 0) {
        memcpy(&count, data + strlen(RECORD_MAGIC), sizeof count);
        memcpy(&sum, data + len - sizeof sum, sizeof sum);
        if (count <= TABLE_MAX_ROWS && len == head + count * sizeof *rows + sizeof sum &&
            hash64(HASH64_INIT, data, len - sizeof sum) == sum) {
            rows = xmalloc((count ? count : 1) * sizeof *rows);
            memcpy(rows, data + head, count * sizeof *rows);
            *n = count;
        } else {
            log_warn("%s: damaged; the table is computed again", path);
        }
    }
    free(data);
    free(path);
    return rows;
}

/* ---- requests ---- */

static void free_names(char **names, size_t n)
{
    for (size_t j = 0; j < n; j++)
        free(names[j]);
    free(names);
}

/* [measure]: the feature table's columns (copies: the builtin ones, then with python those the
 * function returned, as the table encodes them) and *vals (n rows of the builtin columns)
 * widened to all of them; *ncols their number. The Python values are of the same objects in the
 * same order (measure_encode_extra checked it). */
static char **feature_rows(const struct otable *t, size_t n, size_t *ncols, double **vals)
{
    size_t nb = measure_ncols(t->ms), nx = t->py ? t->pyvals.ncols : 0, nc = nb + nx;
    const char *const *builtin = measure_colnames(t->ms);
    char **cols = xmalloc((nc ? nc : 1) * sizeof *cols);
    for (size_t j = 0; j < nb; j++)
        cols[j] = xstrdup(builtin[j]);
    for (size_t j = 0; j < nx; j++)
        cols[nb + j] = xstrdup(t->pyvals.names[j]);
    *ncols = nc;
    if (nx == 0)
        return cols;
    double *all = xmalloc((n ? n : 1) * (nc ? nc : 1) * sizeof *all);
    for (size_t i = 0; i < n; i++) {
        memcpy(all + i * nc, *vals + i * nb, nb * sizeof *all);
        memcpy(all + i * nc + nb, t->pyvals.vals + i * nx, nx * sizeof *all);
    }
    free(*vals);
    *vals = all;
    return cols;
}

/* Encodes rows (made from the label chunks of key) as the table, replacing the one before, and
 * answers every waiter. */
static void finish(struct otable *t, struct table_row *rows, size_t n, struct key128 key, bool ok)
{
    struct table_files files = {0};
    struct errbuf err = {{0}};
    uint64_t *fids = NULL;
    double *fvals = NULL;
    size_t fn = ok && t->ms ? measure_rows(t->ms, &t->stats, &fids, &fvals) : 0;
    int r = 0;
    if (ok && t->py)
        r = measure_encode_extra(t->ms, &t->spec, &t->stats, t->pyvals.ncols,
                                 (const char *const *)t->pyvals.names, t->pyvals.ids,
                                 t->pyvals.vals, &files, &err);
    else if (ok)
        r = t->ms ? measure_encode(t->ms, &t->spec, &t->stats, &files, &err)
                  : table_encode(&t->spec, rows, n, &files, &err);
    if (r < 0) {
        log_error("%s: the %s table: %s", t->g.t->cfg.path, t->ms ? "feature" : "masking", err.msg);
        ok = false;
    }
    size_t fncols = t->ms ? measure_ncols(t->ms) : 0;
    char **fcols = NULL;
    if (ok && t->ms) /* the rows a plate's table takes: every column of the image's */
        fcols = feature_rows(t, fn, &fncols, &fvals);
    struct table_files mfiles = {0};
    if (ok && t->mask) {
        size_t nm;
        struct table_row *mrows = rows_of_stats(t, &t->stats, &nm);
        if (table_encode(&t->mspec, mrows, nm, &mfiles, &err) < 0) {
            log_error("%s: the masking table: %s", t->g.t->cfg.path, err.msg);
            ok = false;
        }
        free(mrows);
    }
    pthread_mutex_lock(&t->m);
    map_destroy(&t->boxes);
    if (t->ms && ok)
        t->objects = t->stats.n;
    else if (t->ms)
        t->failures++;
    if (t->ms) {
        mstats_destroy(&t->stats);
        measure_stats_init(t->ms, &t->stats);
        mpy_values_free(&t->pyvals);
    }
    t->state = ok ? DONE : IDLE;
    if (ok) { /* the one before goes: nothing points into it (otable_copy copies) */
        struct table_files old = t->files;
        t->files = files;
        files = old;
        struct table_row *was = t->rows;
        t->rows = rows;
        t->nrows = n;
        rows = was;
        old = t->mfiles;
        t->mfiles = mfiles;
        mfiles = old;
        uint64_t *fids_was = t->fids;
        double *fvals_was = t->fvals;
        t->fids = fids, t->fvals = fvals, t->fn = fn;
        fids = fids_was, fvals = fvals_was;
        char **fcols_was = t->fcols;
        size_t fncols_was = t->fncols;
        t->fcols = fcols, t->fncols = fncols;
        fcols = fcols_was, fncols = fcols_was ? fncols_was : 0;
        t->have_files = true;
        t->files_key = key;
    }
    struct waiter *w = t->waiters;
    t->waiters = NULL;
    pthread_mutex_unlock(&t->m);
    free(rows);
    free(fids);
    free(fvals);
    free_names(fcols, fcols ? fncols : 0);
    if (ok)
        table_files_free(&files);
    table_files_free(&mfiles);
    while (w) {
        struct waiter *next = w->next;
        w->cb(w->ctx, ok ? 0 : -EIO);
        free(w);
        w = next;
    }
}

/* One chunk fewer to wait for; the last one finishes the table. */
static void release(struct otable *t)
{
    pthread_mutex_lock(&t->m);
    bool last = --t->outstanding == 0;
    bool ok = !t->failed;
    pthread_mutex_unlock(&t->m);
    if (!last)
        return;
    size_t n = 0;
    struct table_row *rows = ok && !t->ms ? rows_of(t, &n) : NULL;
    /* The record only when the chunks scanned are those of its name: had the input changed
     * during the scan, the rows could be of newer chunks (the next request, seeing another
     * key, makes the table again). */
    bool same = ok && key_eq(record_key_now(t), t->record_key);
    if (ok && t->py)
        ok = otable_python_values(t, same);
    if (ok && same) {
        if (t->ms)
            otable_stats_record_write(t);
        else
            record_write(t, rows, n);
    }
    finish(t, rows, n, t->record_key, ok);
}

/* The engine's answer for a struct ask (malloc'd, taken). */
static void chunk_answered(void *ctx, int err, int fd, int flags)
{
    (void)flags;
    struct ask ask = *(struct ask *)ctx;
    struct otable *t = ask.t;
    uint64_t id = ask.id;
    free(ctx);
    const struct task *k = t->g.t;
    if (!err && t->ms && otable_piece_read(t, ask.piece)) { /* made with the chunk */
        close(fd);
        release(t);
        return;
    }
    unsigned char *buf = err ? NULL : xmalloc(k->chunk_nbytes);
    struct errbuf e = {{0}};
    if (!err) {
        err = upread_decode_fd(k, engine_cache(overlay_engine(t->ov)), id, fd, buf, NULL, &e);
        close(fd);
    }
    struct mstats piece;
    bool have_piece = !err && t->ms;
    if (have_piece) { /* the chunk's partial, outside the lock: then merged */
        uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], ext[ROIFS_MAX_DIM];
        engine_chunk_box(k, id, c0, c1, ext);
        otable_compact_chunk(k, ext, buf);
        measure_stats_init(t->ms, &piece);
        if ((err = measure_piece(t->ms, c0, ext, buf, &piece, &e)) < 0)
            log_error("%s: the feature table: %s", k->cfg.path, e.msg);
        else if (key_eq(otable_piece_key_now(t, id, c0, ext), ask.piece))
            otable_piece_write(t, ask.piece,
                               &piece); /* else the input changed meanwhile: the
                                         * partial may be of newer data than its name */
    }
    pthread_mutex_lock(&t->m);
    if (err)
        t->failed = true;
    else if (t->ms)
        mstats_merge(&t->stats, &piece), t->pieces++;
    else
        scan_chunk(t, id, buf);
    pthread_mutex_unlock(&t->m);
    if (have_piece)
        mstats_destroy(&piece);
    free(buf);
    release(t);
}

/* A request that finds no table of the label chunks as they are now (t->record_key): the
 * record, or every chunk. */
static void start(struct otable *t)
{
    size_t n = 0;
    struct table_row *rows = t->ms ? NULL : record_read(t, &n);
    if (t->ms && otable_stats_record_read(t) == 0) {
        pthread_mutex_lock(&t->m);
        t->records++;
        pthread_mutex_unlock(&t->m);
        bool ok = !t->py || otable_python_values(t, true);
        finish(t, NULL, 0, t->record_key, ok);
        return;
    }
    if (rows) {
        pthread_mutex_lock(&t->m);
        t->records++;
        pthread_mutex_unlock(&t->m);
        finish(t, rows, n, t->record_key, true);
        return;
    }
    if (t->ms) {
        otable_start_measure(t, chunk_answered, release);
        return;
    }
    const struct task *k = t->g.t;
    pthread_mutex_lock(&t->m);
    t->scans++;
    t->failed = false;
    t->outstanding = 1;
    for (uint64_t id = 0; id < k->nchunks; id++)
        t->outstanding += task_chunk_present(k, id);
    pthread_mutex_unlock(&t->m);
    struct engine *e = overlay_engine(t->ov);
    for (uint64_t id = 0; id < k->nchunks; id++) {
        if (!task_chunk_present(k, id))
            continue;
        struct ask *ask = xmalloc(sizeof *ask);
        *ask = (struct ask){t, id, {0}};
        engine_open_chunk(e, id, chunk_answered, ask);
    }
    release(t);
}

void otable_request(struct otable *t, otable_cb cb, void *ctx)
{
    /* The keys of the label chunks as they are now (the input's files looked at, outside the
     * lock): a table made from other chunks is made again. */
    struct key128 now = record_key_now(t);
    pthread_mutex_lock(&t->m);
    if (t->state == DONE && key_eq(t->files_key, now)) {
        pthread_mutex_unlock(&t->m);
        cb(ctx, 0);
        return;
    }
    struct waiter *w = xmalloc(sizeof *w);
    *w = (struct waiter){cb, ctx, t->waiters};
    t->waiters = w;
    bool first = t->state != RUNNING;
    if (first) {
        t->state = RUNNING;
        t->record_key = now;
    }
    pthread_mutex_unlock(&t->m);
    if (first)
        start(t);
}

/* ---- the table ---- */

int otable_new(const struct overlay *ov, struct otable **out, struct errbuf *err)
{
    struct otable *t = xcalloc(1, sizeof *t);
    map_init(&t->boxes, sizeof(struct box), 512);
    t->ov = ov;
    overlay_geometry(ov, &t->g);
    const struct config *c = &t->g.t->cfg;
    t->region = xasprintf("../labels/%s", c->label_name);
    t->spec = (struct table_spec){.zarr_format = t->g.t->out.format,
                                  .backend = c->table_format == 1 ? TABLE_CSV : TABLE_ANNDATA,
                                  .region_path = t->region,
                                  .type = c->measure ? "feature_table" : NULL};
    struct table_row one = {.label = 1, .length = {1, 1, 1}};
    int r = c->measure ? measure_new(t->g.t, &t->ms, err) : 0;
    if (r == 0 && t->ms && c->measure_python)
        r = mpython_new(t->ms, &t->py, err);
    if (r == 0 && t->ms && c->mask_table_name) { /* the masking table too */
        t->mask = true;
        t->mspec =
            (struct table_spec){.zarr_format = t->g.t->out.format,
                                .backend = c->mask_table_format == 1 ? TABLE_CSV : TABLE_ANNDATA,
                                .region_path = t->region};
        r = table_encode(&t->mspec, &one, 1, &t->mnames, err);
    }
    if (r == 0 && t->ms) { /* the files of a table of one row (any values) */
        struct mstats s;
        measure_stats_init(t->ms, &s);
        mstats_put(&s, 1, &(bool){false})->n = 1;
        r = measure_encode(t->ms, &t->spec, &s, &t->names, err);
        mstats_destroy(&s);
        measure_stats_init(t->ms, &t->stats);
    } else if (r == 0) {
        r = table_encode(&t->spec, &one, 1, &t->names, err);
    }
    if (r < 0) {
        table_files_free(&t->mnames);
        mpython_free(t->py);
        measure_free(t->ms);
        free(t->region);
        free(t);
        return r;
    }
    uint64_t elements = nd_prod(t->g.t->out.shape, t->g.t->out.ndim);
    t->nmax = elements < TABLE_MAX_ROWS ? elements : TABLE_MAX_ROWS;
    pthread_mutex_init(&t->m, NULL);
    *out = t;
    return 0;
}

void otable_free(struct otable *t)
{
    if (!t)
        return;
    table_files_free(&t->names);
    table_files_free(&t->files);
    table_files_free(&t->mnames);
    table_files_free(&t->mfiles);
    map_destroy(&t->boxes);
    if (t->ms)
        mstats_destroy(&t->stats);
    mpy_values_free(&t->pyvals);
    mpython_free(t->py);
    measure_free(t->ms);
    for (struct waiter *w = t->waiters, *next; w; w = next) {
        next = w->next;
        free(w);
    }
    pthread_mutex_destroy(&t->m);
    free(t->region);
    free(t->rows);
    free(t->fids);
    free(t->fvals);
    free_names(t->fcols, t->fcols ? t->fncols : 0);
    free(t);
}

size_t otable_nfiles(const struct otable *t)
{
    return t->names.n + t->mnames.n;
}

/* File i's name and files: the feature (or only) table's, then the masking table's. */
static const struct table_file *name_of(const struct otable *t, size_t i,
                                        const struct table_files **files)
{
    if (files)
        *files = i < t->names.n ? &t->files : &t->mfiles;
    return i < t->names.n ? &t->names.v[i] : &t->mnames.v[i - t->names.n];
}

const char *otable_path(const struct otable *t, size_t i)
{
    return name_of(t, i, NULL)->path;
}

const char *otable_table_name(const struct otable *t, size_t i)
{
    const struct config *c = &t->g.t->cfg;
    return i < t->names.n ? c->table_name : c->mask_table_name;
}

const struct table_file *otable_file(struct otable *t, size_t i)
{
    pthread_mutex_lock(&t->m);
    bool have = t->have_files;
    pthread_mutex_unlock(&t->m);
    const struct table_files *files;
    const char *path = name_of(t, i, &files)->path;
    return have ? table_files_find(files, path) : NULL;
}

char *otable_copy(struct otable *t, size_t i, size_t *len)
{
    char *copy = NULL;
    const struct table_files *files;
    const char *path = name_of(t, i, &files)->path;
    pthread_mutex_lock(&t->m);
    const struct table_file *f = t->have_files ? table_files_find(files, path) : NULL;
    if (f) {
        copy = xmalloc(f->len ? f->len : 1);
        memcpy(copy, f->data, f->len);
        *len = f->len;
    }
    pthread_mutex_unlock(&t->m);
    return copy;
}

uint64_t otable_size(struct otable *t, size_t i, bool *exact)
{
    const struct table_files *files;
    const struct table_file *nm = name_of(t, i, &files);
    pthread_mutex_lock(&t->m);
    const struct table_file *f = t->state == DONE ? table_files_find(files, nm->path) : NULL;
    uint64_t len = f ? f->len : 0;
    pthread_mutex_unlock(&t->m);
    *exact = f != NULL;
    if (f)
        return len;
    bool feature = t->ms && i < t->names.n;
    uint64_t row = ROW_BOUND + (feature ? 32 * (uint64_t)measure_ncols(t->ms) : 0) +
                   (feature && t->py ? 32 * (uint64_t)MPY_MAX_COLS : 0);
    return nm->len + row * (t->nmax + 1);
}

uint64_t otable_max_rows(const struct otable *t)
{
    return t->nmax;
}

struct table_row *otable_rows(struct otable *t, size_t *n)
{
    pthread_mutex_lock(&t->m);
    *n = t->have_files ? t->nrows : 0;
    struct table_row *rows = xmalloc((*n ? *n : 1) * sizeof *rows);
    if (*n)
        memcpy(rows, t->rows, *n * sizeof *rows);
    pthread_mutex_unlock(&t->m);
    return rows;
}

size_t otable_features(struct otable *t, uint64_t **ids, double **vals, char ***cols, size_t *ncols)
{
    pthread_mutex_lock(&t->m);
    bool have = t->have_files && t->fcols;
    size_t n = have ? t->fn : 0, nc = have ? t->fncols : 0;
    *ids = xmalloc((n ? n : 1) * sizeof **ids);
    *vals = xmalloc((n ? n : 1) * (nc ? nc : 1) * sizeof **vals);
    *cols = xmalloc((nc ? nc : 1) * sizeof **cols);
    if (n) {
        memcpy(*ids, t->fids, n * sizeof **ids);
        memcpy(*vals, t->fvals, n * nc * sizeof **vals);
    }
    for (size_t j = 0; j < nc; j++)
        (*cols)[j] = xstrdup(t->fcols[j]);
    *ncols = nc;
    pthread_mutex_unlock(&t->m);
    return n;
}

size_t otable_python_max_columns(const struct otable *t)
{
    return t->py ? MPY_MAX_COLS : 0;
}

const char *const *otable_feature_columns(const struct otable *t, size_t *ncols)
{
    *ncols = t->ms ? measure_ncols(t->ms) : 0;
    return t->ms ? measure_colnames(t->ms) : NULL;
}

void otable_counts(struct otable *t, uint64_t *scans, uint64_t *records)
{
    pthread_mutex_lock(&t->m);
    *scans = t->scans;
    *records = t->records;
    pthread_mutex_unlock(&t->m);
}

/* Whether a file of the cache directory is a table record that the names keep (the masking
 * table's record of now, or [measure]'s records of now) leave out: "table-", "features-",
 * "mpiece-", "mpyvals-" or "mpyobj-", 32 hexadecimal digits, ".rows". */
static bool stale_record(const char *name, const char *table_keep, const struct map *keep)
{
    static const char *const prefix[] = {"table-", "features-", "mpiece-", "mpyvals-", "mpyobj-"};
    size_t n = strlen(name);
    for (int p = 0; p < 5; p++) {
        size_t l = strlen(prefix[p]);
        if (n != l + 32 + 5 || strncmp(name, prefix[p], l) != 0 || strcmp(name + n - 5, ".rows"))
            continue;
        if (p == 0)
            return strcmp(name, table_keep) != 0;
        const char *hex = name + l;
        return !otable_kept(keep, hex);
    }
    return false;
}

int otable_clean_records(const struct overlay *ov, size_t *removed)
{
    struct overlay_geometry g;
    overlay_geometry(ov, &g);
    char hex[33];
    key_hex(otable_key_now(&g), hex);
    char *table_keep = xasprintf("table-%s.rows", hex);
    struct map keep;
    map_init(&keep, 0, 64);
    *removed = 0;
    int r = g.t->cfg.measure ? otable_measure_names_now(&g, &keep) : 0;
    DIR *d = r < 0 ? NULL : opendir(g.t->cache_dir);
    if (r == 0 && !d)
        r = errno == ENOENT ? 0 : -errno;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!stale_record(de->d_name, table_keep, &keep))
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            ++*removed;
        else if (errno != ENOENT) {
            r = -errno;
            break;
        }
    }
    if (d)
        closedir(d);
    map_destroy(&keep);
    free(table_keep);
    return r;
}

bool otable_measure_counts(struct otable *t, struct otable_measure_counts *out)
{
    if (!t->ms)
        return false;
    pthread_mutex_lock(&t->m);
    *out = (struct otable_measure_counts){t->objects,  t->pieces,  t->pieces_recorded,
                                          t->failures, t->pycalls, t->pieces_made};
    pthread_mutex_unlock(&t->m);
    return true;
}
