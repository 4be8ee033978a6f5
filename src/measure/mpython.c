/* mpython.c: [measure] python (see mpython.h). */
#include "mpython.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include "../map.h"
#include "../proc/proc.h"

#define OUT_CAP (64u << 10) /* bytes of one object's JSON reply */

struct mpython {
    const struct measure *m;
    struct proc *proc;
    int nd;
    uint64_t halo[ROIFS_MAX_DIM];
    char *params;       /* the params as the function sees them (JSON) */
    uint64_t code_hash; /* of the function's file's content (0: a module) */
};

void mpy_values_free(struct mpy_values *v)
{
    for (size_t j = 0; j < v->ncols; j++)
        free(v->names[j]);
    free(v->names);
    free(v->ids);
    free(v->vals);
    *v = (struct mpy_values){0};
}

/* The content of FILE.py of spec (relative to the configuration's directory), hashed. */
static uint64_t code_hash(const struct config *cfg, const char *spec)
{
    const char *colon = strrchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len < 3 || strncmp(spec + len - 3, ".py", 3) != 0)
        return 0;
    char *file = xmalloc(len + 1);
    memcpy(file, spec, len);
    file[len] = '\0';
    char *path = file[0] == '/' || !cfg->dir ? xstrdup(file) : path_join(cfg->dir, file);
    char *data = NULL;
    size_t n = 0;
    uint64_t h = file_read_all(path, &data, &n) == 0 ? hash64(HASH64_INIT, data, n) : 1;
    free(data);
    free(path);
    free(file);
    return h;
}

/* [measure] halo for t's label image of nd dimensions. */
static int resolve_halo(const struct task *t, uint64_t *halo, struct errbuf *err)
{
    const struct config *cfg = &t->cfg;
    int nd = t->out.ndim;
    memset(halo, 0, ROIFS_MAX_DIM * sizeof *halo);
    if (cfg->measure_halo_ndim == 1)
        for (int d = 0; d < nd; d++)
            halo[d] = cfg->measure_halo[0];
    else if (cfg->measure_halo_ndim == nd)
        memcpy(halo, cfg->measure_halo, (size_t)nd * sizeof *halo);
    else if (cfg->measure_halo_ndim)
        return config_error(cfg, err, "measure", "halo",
                            "[measure] halo has %d entries: one, or one per dimension of the "
                            "label image (%d)",
                            cfg->measure_halo_ndim, nd);
    if (cfg->measure_halo_ndim && !cfg->measure_python)
        return config_error(cfg, err, "measure", "halo", "[measure] halo needs python");
    return 0;
}

int mpython_check(const struct task *t, struct errbuf *err)
{
    uint64_t halo[ROIFS_MAX_DIM];
    return resolve_halo(t, halo, err);
}

int mpython_new(const struct measure *m, struct mpython **out, struct errbuf *err)
{
    const struct task *t = measure_task(m);
    const struct config *cfg = &t->cfg;
    struct mpython *p = xcalloc(1, sizeof *p);
    p->m = m;
    p->nd = t->out.ndim;
    int r = resolve_halo(t, p->halo, err);
    if (r == 0)
        r = proc_params_json(cfg, &p->params, err);
    if (r == 0)
        r = proc_python_create_measure(cfg, cfg->measure_python, &p->proc, err);
    if (r < 0) {
        mpython_free(p);
        return r;
    }
    p->code_hash = code_hash(cfg, cfg->measure_python);
    *out = p;
    return 0;
}

void mpython_free(struct mpython *p)
{
    if (!p)
        return;
    if (p->proc)
        proc_destroy(p->proc);
    free(p->params);
    free(p);
}

static struct key128 record_key(const struct config *cfg, const char *table_record, uint64_t code,
                                const char *params, const uint64_t *halo, int nd)
{
    struct keyhash h;
    key_init(&h, "roifs-measure-python 1");
    key_add_str(&h, table_record);
    key_add_str(&h, cfg->measure_python);
    key_add_u64(&h, code);
    key_add_str(&h, params ? params : "");
    for (int d = 0; d < nd; d++)
        key_add_u64(&h, halo[d]);
    return key_final(&h);
}

struct key128 mpython_record_key(const struct mpython *p, const char *table_record)
{
    return record_key(&measure_task(p->m)->cfg, table_record, p->code_hash, p->params, p->halo,
                      p->nd);
}

int mpython_record_key_now(const struct task *t, const char *table_record, struct key128 *out)
{
    uint64_t halo[ROIFS_MAX_DIM];
    char *params = NULL;
    struct errbuf e = {{0}};
    if (resolve_halo(t, halo, &e) < 0 || proc_params_json(&t->cfg, &params, &e) != 0)
        return -EINVAL;
    *out = record_key(&t->cfg, table_record, code_hash(&t->cfg, t->cfg.measure_python), params,
                      halo, t->out.ndim);
    free(params);
    return 0;
}

static int by_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The values of reply (a JSON object) into row, in the order of v's names (set from the first
 * object's reply). */
static int take_reply(struct mpy_values *v, const struct measure *m, uint64_t id, const char *reply,
                      double *row, bool first, struct errbuf *err)
{
    json_error_t je;
    json_t *o = json_loads(reply, JSON_DECODE_ANY, &je);
    int r = 0;
    if (!json_is_object(o)) {
        json_decref(o);
        return err_set(err, -EIO, "object %" PRIu64 ": a reply that is no dict", id);
    }
    if (first) {
        if (json_object_size(o) > MPY_MAX_COLS)
            r = err_set(err, -EIO, "object %" PRIu64 ": %zu features (at most %d)", id,
                        json_object_size(o), MPY_MAX_COLS);
        v->names = xcalloc(json_object_size(o) + 1, sizeof *v->names);
        const char *k;
        json_t *x;
        json_object_foreach(o, k, x)
        {
            if (r)
                break;
            if (strlen(k) == 0 || strlen(k) > MPY_MAX_NAME)
                r = err_set(err, -EIO, "object %" PRIu64 ": feature name '%s' (1 to %d bytes)", id,
                            k, MPY_MAX_NAME);
            for (size_t j = 0; j < measure_ncols(m) && !r; j++)
                if (strcmp(measure_colnames(m)[j], k) == 0)
                    r = err_set(err, -EIO,
                                "object %" PRIu64 ": feature '%s' is a builtin column's name", id,
                                k);
            if (!r)
                v->names[v->ncols++] = xstrdup(k);
        }
    } else if (json_object_size(o) != v->ncols) {
        r = err_set(err, -EIO,
                    "object %" PRIu64 ": %zu features, where object %" PRIu64 " gave %zu (the "
                    "same names for every object)",
                    id, json_object_size(o), v->ids[0], v->ncols);
    }
    for (size_t j = 0; j < v->ncols && !r; j++) {
        json_t *x = json_object_get(o, v->names[j]);
        if (json_is_number(x))
            row[j] = json_number_value(x);
        else if (json_is_string(x)) /* nan, inf, -inf */
            row[j] = strtod(json_string_value(x), NULL);
        else
            r = err_set(err, -EIO,
                        "object %" PRIu64 ": no feature '%s', which object %" PRIu64
                        " gave (the same names for every object)",
                        id, v->names[j], v->ids[0]);
    }
    json_decref(o);
    return r;
}

/* ---- the values of each object, by what its crops hold ---- */

#define OBJECTS_MAGIC "roifs-measure-python-objects 1\n"

/* The record of the last table's values per object: names, then (key, values) per object. */
static char *objects_path(const struct mpython *p, const char *cache_dir)
{
    char hex[33];
    key_hex(mpython_record_key(p, "objects"), hex);
    return xasprintf("%s/mpyobj-%s.rows", cache_dir, hex);
}

static void objects_write(const struct mpy_values *v, const struct key128 *keys, const char *path)
{
    struct strbuf sb = {0};
    sb_append(&sb, OBJECTS_MAGIC, strlen(OBJECTS_MAGIC));
    uint64_t head[2] = {v->ncols, v->n};
    sb_append(&sb, (const char *)head, sizeof head);
    for (size_t j = 0; j < v->ncols; j++)
        sb_append(&sb, v->names[j], strlen(v->names[j]) + 1);
    sb_append(&sb, (const char *)keys, v->n * sizeof *keys);
    sb_append(&sb, (const char *)v->vals, v->n * v->ncols * sizeof *v->vals);
    uint64_t sum = hash64(HASH64_INIT, sb.buf, sb.len);
    sb_append(&sb, (const char *)&sum, sizeof sum);
    char *dir = xstrdup(path);
    *strrchr(dir, '/') = '\0';
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || file_write_atomic(dfd, strrchr(path, '/') + 1, sb.buf, sb.len, false) < 0)
        log_warn("%s: cannot write the Python features' record", path);
    if (dfd >= 0)
        close(dfd);
    free(dir);
    free(sb.buf);
}

/* The last table's values (v: names, n, vals; *keys) of path, or nothing (v empty). */
static void objects_read(const char *path, struct mpy_values *v, struct key128 **keys)
{
    char *data = NULL;
    size_t len = 0, magic = strlen(OBJECTS_MAGIC);
    uint64_t head[2], sum;
    *v = (struct mpy_values){0};
    *keys = NULL;
    if (file_read_all(path, &data, &len) < 0)
        return;
    bool ok = len >= magic + sizeof head + sizeof sum && memcmp(data, OBJECTS_MAGIC, magic) == 0 &&
              (memcpy(&sum, data + len - sizeof sum, sizeof sum),
               hash64(HASH64_INIT, data, len - sizeof sum) == sum);
    if (ok) {
        memcpy(head, data + magic, sizeof head);
        ok = head[0] <= MPY_MAX_COLS;
    }
    const char *q = data + magic + sizeof head, *end = data + len - sizeof sum;
    if (ok)
        v->names = xcalloc(head[0] + 1, sizeof *v->names);
    for (uint64_t j = 0; ok && j < head[0]; j++) {
        const char *z = memchr(q, '\0', (size_t)(end - q));
        if ((ok = z != NULL)) {
            v->names[v->ncols++] = xstrdup(q);
            q = z + 1;
        }
    }
    size_t each = sizeof(struct key128) + (ok ? head[0] : 0) * sizeof(double);
    ok = ok && head[1] <= (uint64_t)(end - q) / each && (size_t)(end - q) == head[1] * each;
    if (ok) {
        v->n = head[1];
        *keys = xmalloc((v->n ? v->n : 1) * sizeof **keys);
        memcpy(*keys, q, v->n * sizeof **keys);
        v->vals = xmalloc((v->n * v->ncols > 0 ? v->n * v->ncols : 1) * sizeof *v->vals);
        memcpy(v->vals, q + v->n * sizeof **keys, v->n * v->ncols * sizeof *v->vals);
    } else {
        if (len)
            log_warn("%s: damaged; its objects are computed again", path);
        mpy_values_free(v);
    }
    free(data);
}

/* What an object's values depend on besides the function: its id, its boxes and its crops. */
static struct key128 object_key(uint64_t id, int nd, const uint64_t *start, const uint64_t *stop,
                                const uint64_t *lo, const uint64_t *hi, const void *in, size_t len)
{
    struct keyhash h;
    key_init(&h, "roifs-measure-object 1");
    key_add_u64(&h, id);
    for (int d = 0; d < nd; d++) {
        key_add_u64(&h, start[d]);
        key_add_u64(&h, stop[d]);
        key_add_u64(&h, lo[d]);
        key_add_u64(&h, hi[d]);
    }
    key_add_u64(&h, hash64(HASH64_INIT, in, len));
    return key_final(&h);
}

int mpython_run(struct mpython *p, const struct mstats *s, mpython_labels_fn labels, void *ctx,
                const char *cache_dir, struct mpy_values *out, uint64_t *calls, struct errbuf *err)
{
    char *opath = cache_dir ? objects_path(p, cache_dir) : NULL;
    struct mpy_values prev;
    struct key128 *pkeys = NULL;
    if (opath)
        objects_read(opath, &prev, &pkeys);
    else
        prev = (struct mpy_values){0};
    struct map pidx; /* the previous table's objects by key */
    map_init(&pidx, sizeof(size_t), prev.n + 1);
    for (size_t i = 0; i < prev.n; i++)
        *(size_t *)map_put(&pidx, pkeys[i].lo, pkeys[i].hi, &(bool){false}) = i;
    struct key128 *keys = xmalloc((s->n ? s->n : 1) * sizeof *keys);
    bool have_names = prev.names != NULL;
    const struct task *t = measure_task(p->m);
    int nd = p->nd, nch = measure_nchannels(p->m);
    const struct dtype *ldt = &t->out.dtype, *idt = measure_input_dtype(p->m);
    struct mpy_values v = {.n = s->n};
    if (have_names) { /* the same function: the same names */
        v.ncols = prev.ncols;
        v.names = xcalloc(v.ncols + 1, sizeof *v.names);
        for (size_t j = 0; j < v.ncols; j++)
            v.names[j] = xstrdup(prev.names[j]);
        v.vals = xmalloc((s->n * v.ncols > 0 ? s->n * v.ncols : 1) * sizeof *v.vals);
    }
    v.ids = xmalloc((s->n ? s->n : 1) * sizeof *v.ids);
    memcpy(v.ids, s->ids, s->n * sizeof *v.ids);
    qsort(v.ids, s->n, sizeof *v.ids, by_id);
    char *reply = xmalloc(OUT_CAP);
    double *row = xmalloc(MPY_MAX_COLS * sizeof *row);
    int r = 0;
    for (size_t i = 0; i < s->n && r == 0; i++) {
        const struct mobj *o = mstats_get(s, v.ids[i]);
        uint64_t start[ROIFS_MAX_DIM], stop[ROIFS_MAX_DIM], shape[ROIFS_MAX_DIM];
        uint64_t bstop[ROIFS_MAX_DIM], n = 1;
        for (int d = 0; d < nd; d++) {
            start[d] = o->lo[d] > p->halo[d] ? o->lo[d] - p->halo[d] : 0;
            stop[d] = o->hi[d] + 1 + p->halo[d];
            if (stop[d] > t->out.shape[d])
                stop[d] = t->out.shape[d];
            shape[d] = stop[d] - start[d];
            bstop[d] = o->hi[d] + 1;
            n *= shape[d];
        }
        size_t lbytes = n * ldt->size;
        size_t ioff = (lbytes + PROC_MEASURE_ALIGN - 1) / PROC_MEASURE_ALIGN * PROC_MEASURE_ALIGN;
        size_t total = ioff + n * (uint64_t)nch * idt->size;
        unsigned char *in = xcalloc(1, total + 1);
        r = labels(ctx, start, shape, in, err);
        if (r == 0)
            r = measure_intensity_crop(p->m, start, shape, in + ioff, err);
        const size_t *hit = NULL;
        if (r == 0) {
            keys[i] = object_key(v.ids[i], nd, start, stop, o->lo, bstop, in, total);
            hit = map_get(&pidx, keys[i].lo, keys[i].hi);
        }
        if (r == 0 && hit) { /* its crops as they were: its values as they were */
            memcpy(v.vals + i * v.ncols, prev.vals + *hit * prev.ncols, v.ncols * sizeof *v.vals);
        } else if (r == 0) {
            struct proc_request rq = {.kind = PROC_REQ_MEASURE,
                                      .roi = (size_t)nch,
                                      .ndim = nd,
                                      .start = start,
                                      .stop = stop,
                                      .in_start = o->lo,
                                      .in_shape = bstop,
                                      .in_dtype = *ldt,
                                      .out_dtype = *idt,
                                      .in = in,
                                      .in_nbytes = total,
                                      .out = reply,
                                      .out_nbytes = OUT_CAP,
                                      .label = v.ids[i]};
            (*calls)++;
            struct errbuf e = {{0}};
            if (proc_run(p->proc, &rq, &e) < 0) {
                if (strncmp(e.msg, "object ", 7) == 0) /* the worker's message names it */
                    r = err_set(err, -EIO, "%s", e.msg);
                else
                    r = err_set(err, -EIO, "object %" PRIu64 ": %s", v.ids[i], e.msg);
            } else {
                reply[OUT_CAP - 1] = '\0';
                r = take_reply(&v, p->m, v.ids[i], reply, row, !have_names, err);
                if (r == 0 && !have_names) {
                    have_names = true;
                    v.vals = xmalloc((s->n * v.ncols > 0 ? s->n * v.ncols : 1) * sizeof *v.vals);
                }
                if (r == 0)
                    memcpy(v.vals + i * v.ncols, row, v.ncols * sizeof *row);
            }
        }
        free(in);
    }
    free(row);
    free(reply);
    if (r == 0 && !v.vals)
        v.vals = xmalloc(sizeof *v.vals);
    if (r == 0 && opath)
        objects_write(&v, keys, opath);
    map_destroy(&pidx);
    mpy_values_free(&prev);
    free(pkeys);
    free(keys);
    free(opath);
    if (r < 0) {
        mpy_values_free(&v);
        return r;
    }
    *out = v;
    return 0;
}

/* ---- the record ---- */

#define RECORD_MAGIC "roifs-measure-python 1\n"

int mpython_record_write(const struct mpy_values *v, int dirfd, const char *name)
{
    struct strbuf sb = {0};
    sb_append(&sb, RECORD_MAGIC, strlen(RECORD_MAGIC));
    uint64_t head[2] = {v->ncols, v->n};
    sb_append(&sb, (const char *)head, sizeof head);
    for (size_t j = 0; j < v->ncols; j++)
        sb_append(&sb, v->names[j], strlen(v->names[j]) + 1);
    sb_append(&sb, (const char *)v->ids, v->n * sizeof *v->ids);
    sb_append(&sb, (const char *)v->vals, v->n * v->ncols * sizeof *v->vals);
    uint64_t sum = hash64(HASH64_INIT, sb.buf, sb.len);
    sb_append(&sb, (const char *)&sum, sizeof sum);
    int r = file_write_atomic(dirfd, name, sb.buf, sb.len, false);
    free(sb.buf);
    return r < 0 ? r : 0;
}

int mpython_record_read(struct mpy_values *v, const char *path)
{
    char *data = NULL;
    size_t len = 0, magic = strlen(RECORD_MAGIC);
    uint64_t head[2], sum;
    int r = file_read_all(path, &data, &len);
    if (r < 0)
        return r;
    r = -EIO;
    *v = (struct mpy_values){0};
    if (len >= magic + sizeof head + sizeof sum && memcmp(data, RECORD_MAGIC, magic) == 0 &&
        (memcpy(&sum, data + len - sizeof sum, sizeof sum),
         hash64(HASH64_INIT, data, len - sizeof sum) == sum)) {
        memcpy(head, data + magic, sizeof head);
        const char *p = data + magic + sizeof head, *end = data + len - sizeof sum;
        bool ok = head[0] <= MPY_MAX_COLS;
        v->names = xcalloc(head[0] + 1, sizeof *v->names);
        for (uint64_t j = 0; j < head[0] && ok; j++) {
            const char *z = memchr(p, '\0', (size_t)(end - p));
            if ((ok = z != NULL)) {
                v->names[v->ncols++] = xstrdup(p);
                p = z + 1;
            }
        }
        uint64_t n = head[1];
        if (ok && n <= (uint64_t)(end - p) / 8 &&
            (size_t)(end - p) == n * 8 + n * head[0] * sizeof(double)) {
            v->n = n;
            v->ids = xmalloc((n ? n : 1) * sizeof *v->ids);
            memcpy(v->ids, p, n * 8);
            v->vals = xmalloc((n * head[0] > 0 ? n * head[0] : 1) * sizeof *v->vals);
            memcpy(v->vals, p + n * 8, n * head[0] * sizeof(double));
            r = 0;
        }
    }
    if (r < 0)
        mpy_values_free(v);
    free(data);
    return r;
}
