/* arrayset.c: the arrays a mount, warm or export presents (see arrayset.h): their engine
 * options, caches, engines in dependency order, the tree of names, and the status document. */
#include "arrayset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "../zarr/remote.h"
#include "../plate/plate.h"
#include "otable.h"
#include "overlay.h"
#include "overlay_tree.h"
#include "ptable.h"
#include "pyramid.h"

#include "arrayset_plate.h"

_Static_assert(READAHEAD_AUTO == ENGINE_READAHEAD_AUTO, "readahead = auto passes as it is");

/* The engine options of the configuration, with the command line's thread count and the
 * command's retry_after when the configuration sets none. */
static void engine_opts_of(const struct config *cfg, int threads, double retry_after_unset,
                           struct engine_opts *o)
{
    *o = (struct engine_opts){.threads = cfg->threads,
                              .readahead = cfg->readahead,
                              .retries = cfg->retries,
                              .retry_after =
                                  cfg->retry_after >= 0 ? cfg->retry_after : retry_after_unset,
                              .max_size = cfg->max_size};
    if (threads <= 0)
        return;
    o->threads = threads;
    /* readahead = -1 (as many as threads) follows the command line's thread count */
    if (cfg->readahead_is_threads)
        o->readahead = threads;
}

/* The tree: the array at the root, or the pyramid's image group with a directory per level;
 * .roifs/status at the root only. Listed in the order added. */
static int build_tree(struct arrayset *s, bool status, struct errbuf *err)
{
    struct ns *ns = s->tree = ns_new();
    const struct task *t0 = s->arrays[0].task;
    bool v3 = t0->out.format == 3;
    if (s->plate)
        return arrayset_plate_tree(s, status, err);
    if (s->overlay)
        return overlay_tree_build(s->overlay, s->table, ns, NS_ROOT, 0, 0, status, err);
    if (!s->pyramid) { /* the status before the chunks: "c" of format 3 comes after it */
        if (v3) {
            ns_add_file(ns, NS_ROOT, "zarr.json", t0->zarr_json);
        } else {
            ns_add_file(ns, NS_ROOT, ".zarray", t0->zarray_json);
            ns_add_file(ns, NS_ROOT, ".zattrs", t0->zattrs_json);
        }
        if (status)
            ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
        return ns_add_chunks(ns, NS_ROOT, t0, 0, err);
    }
    ns_add_file(ns, NS_ROOT, v3 ? "zarr.json" : ".zgroup", pyramid_group_meta(s->pyramid));
    if (!v3)
        ns_add_file(ns, NS_ROOT, ".zattrs", pyramid_group_attrs(s->pyramid));
    if (status)
        ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    for (size_t i = 0; i < s->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d", s->arrays[i].level);
        int r = ns_add_array(ns, ns_add_dir(ns, NS_ROOT, name), s->arrays[i].task, (int)i, err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Opens each array's cache: the configured array's registers the configuration it serves,
 * the levels' (inside it) do not, and look at its registrations. */
static int open_caches(struct arrayset *s, struct errbuf *err)
{
    if (s->plate) /* each image's when it starts (arrayset_plate.c) */
        return 0;
    uint64_t version = 0;
    for (size_t i = 0; i < s->n; i++) {
        const struct task *t = s->arrays[i].task;
        bool first = i == 0; /* every level serves that version */
        if (first)
            version = task_version(t);
        cache_set_lease((unsigned)t->cfg.cache_lease);
        int r =
            cache_open(t->cache_dir, first ? t->cfg.path : NULL, version, &s->arrays[i].cache, err);
        if (r < 0)
            return r;
        if (t->reader)
            cache_keep_input_hashes(s->arrays[i].cache, t->reader);
        if (t->measured) /* [measure] labels: the label image's too */
            cache_keep_input_hashes(s->arrays[i].cache, t->measured);
    }
    return 0;
}

int arrayset_open(struct task *t, const struct arrayset_opts *o, struct arrayset **out,
                  struct errbuf *err)
{
    struct arrayset *s = xcalloc(1, sizeof *s);
    struct engine_opts eo;
    engine_opts_of(&t->cfg, o->threads, o->retry_after_unset, &eo);
    s->overwrite = o->overlay_overwrite;
    int r = 0;
    if (t->plate) {
        r = arrayset_open_plate(s, t, &eo, o->status_file, err);
        goto opened;
    }
    arrayset_push(s, (struct array){.task = t, .opts = eo});
    /* one level alone is presented as the plain array, as before the array set existed */
    r = t->cfg.ome && t->cfg.levels > 1 ? pyramid_build(t, &s->pyramid, err) : 0;
    for (int l = 1; r == 0 && s->pyramid && l < pyramid_nlevels(s->pyramid); l++)
        arrayset_push(s,
                      (struct array){.task = pyramid_level(s->pyramid, l), .opts = eo, .level = l});
    if (r == 0 && t->cfg.ome_labels)
        r = arrayset_open_overlay(s, 0, &eo, &s->overlay, &s->table, err);
opened:
    if (r == 0)
        r = open_caches(s, err);
    struct errbuf e = {{0}};
    if (r == 0 && (r = build_tree(s, o->status_file, &e)) < 0)
        err_set(err, r, "%s: %s", t->cfg.path, e.msg);
    if (r < 0) {
        arrayset_close(s);
        return r;
    }
    *out = s;
    return 0;
}

int arrayset_start(struct arrayset *s, struct errbuf *err)
{
    if (s->plate)
        return arrayset_start_plate(s, err);
    for (size_t i = 0; i < s->n; i++) {
        struct array *a = &s->arrays[i];
        int r = engine_create(a->task, a->cache, &a->opts, &a->engine, err);
        if (r < 0) {
            a->engine = NULL;
            arrayset_stop(s);
            return r;
        }
        if (s->pyramid) /* before the next level's engine, whose threads read through it */
            pyramid_set_engine(s->pyramid, (int)i, a->engine);
        if (s->overlay && i == 0) /* before the other levels', which read it */
            overlay_set_engine(s->overlay, a->engine);
    }
    return 0;
}

void arrayset_stop(struct arrayset *s)
{
    if (s->plate) {
        arrayset_stop_plate(s);
        return;
    }
    for (size_t i = s->n; i-- > 0;) {
        struct array *a = &s->arrays[i];
        if (!a->engine)
            continue;
        engine_destroy(a->engine); /* the arrays after it, which read it, are stopped */
        a->engine = NULL;
        if (s->pyramid)
            pyramid_set_engine(s->pyramid, (int)i, NULL);
        if (s->overlay && i == 0)
            overlay_set_engine(s->overlay, NULL);
    }
}

void arrayset_close(struct arrayset *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        cache_close(s->arrays[i].cache);
    arrayset_close_plate(s);
    free(s->arrays);
    pyramid_free(s->pyramid);
    otable_free(s->table);
    overlay_free(s->overlay);
    ns_free(s->tree);
    free(s);
}

struct engine *arrayset_engine(struct arrayset *s, size_t i, bool start)
{
    if (s->plate)
        return arrayset_plate_engine(s, i, start);
    return s->arrays[i].engine;
}

struct engine *arrayset_engine_get(struct arrayset *s, size_t i, bool start)
{
    if (s->plate)
        return arrayset_plate_engine_get(s, i, start);
    return s->arrays[i].engine;
}

void arrayset_engine_put(struct arrayset *s, size_t i)
{
    if (s->plate)
        arrayset_plate_engine_put(s, i);
}

/* An open of a plate's chunk: its image held until cb has returned; listed in s->held until
 * then (arrayset_withdraw_chunk finds it by cb and ctx). */
struct held_open {
    struct arrayset *s;
    size_t i;
    uint64_t id;
    engine_chunk_cb cb;
    void *ctx;
    struct held_open *next;
};

static void held_unlist(struct held_open *h)
{
    pthread_mutex_lock(&h->s->lazy);
    for (struct held_open **p = &h->s->held; *p; p = &(*p)->next)
        if (*p == h) {
            *p = h->next;
            break;
        }
    pthread_mutex_unlock(&h->s->lazy);
}

static void held_opened(void *ctx, int err, int fd, int flags)
{
    struct held_open *h = ctx;
    held_unlist(h);
    if (h->s->plate) /* answered: an image started meanwhile waits for this one to go */
        arrayset_plate_engine_ending(h->s, h->i);
    h->cb(h->ctx, err, fd, flags);
    if (h->s->plate) /* the image may be closed from now on */
        arrayset_plate_engine_put_ending(h->s, h->i);
    free(h);
}

void arrayset_open_chunk(struct arrayset *s, size_t i, uint64_t id, engine_chunk_cb cb, void *ctx)
{
    if (!s->plate) { /* the engines live from arrayset_start to arrayset_stop */
        engine_open_chunk(s->arrays[i].engine, id, cb, ctx);
        return;
    }
    struct engine *e = arrayset_engine_get(s, i, true); /* let go by held_opened */
    if (!e) {                                           /* the image could not start (logged) */
        cb(ctx, -EIO, -1, 0);
        return;
    }
    struct held_open *h = xmalloc(sizeof *h);
    *h = (struct held_open){.s = s, .i = i, .id = id, .cb = cb, .ctx = ctx};
    pthread_mutex_lock(&s->lazy);
    h->next = s->held;
    s->held = h;
    pthread_mutex_unlock(&s->lazy);
    /* held here too until engine_open_chunk returns: it may answer (held_opened lets the image
     * go) and go on with read-ahead, while another open closes the idle image; a hold that
     * waits on no other work (arrayset_plate_engine_ending) */
    arrayset_engine_get(s, i, false);
    arrayset_plate_engine_ending(s, i);
    engine_open_chunk(e, id, held_opened, h);
    arrayset_plate_engine_put_ending(s, i);
}

bool arrayset_withdraw_chunk(struct arrayset *s, size_t i, uint64_t id, engine_chunk_cb cb,
                             void *ctx)
{
    if (!s->plate)
        return engine_withdraw_chunk(s->arrays[i].engine, id, cb, ctx);
    /* the image held for the time of the withdrawal: the open's own hold may go meanwhile */
    struct engine *e = arrayset_engine_get(s, i, false);
    if (!e)
        return false;
    pthread_mutex_lock(&s->lazy);
    struct held_open *h = s->held;
    while (h && !(h->i == i && h->id == id && h->cb == cb && h->ctx == ctx))
        h = h->next;
    pthread_mutex_unlock(&s->lazy);
    /* h is only compared by the engine: if held_opened freed it meanwhile, the waiter is gone
     * and nothing is withdrawn */
    bool withdrawn = h && engine_withdraw_chunk(e, id, held_opened, h);
    if (withdrawn) { /* held_opened will never run: its work is done here */
        held_unlist(h);
        arrayset_engine_put(s, i);
        free(h);
    }
    arrayset_engine_put(s, i);
    return withdrawn;
}

size_t arrayset_count(const struct arrayset *s)
{
    return s->n;
}

const struct array *arrayset_array(const struct arrayset *s, size_t i)
{
    return &s->arrays[i];
}

const struct ns *arrayset_tree(const struct arrayset *s)
{
    return s->tree;
}

bool arrayset_is_plate(const struct arrayset *s)
{
    return s->plate != NULL;
}

bool arrayset_is_overlay(const struct arrayset *s)
{
    return s->overlay != NULL || s->plate != NULL;
}

struct otable *arrayset_table(const struct arrayset *s)
{
    return s->table;
}

uint64_t arrayset_table_size(const struct arrayset *s, uint64_t index, bool *exact)
{
    size_t file = (size_t)(index & ARRAYSET_FILE_MASK);
    if (s->plate && arrayset_plate_is_ptable(s, index)) /* its bound opens every image */
        return arrayset_plate_ptable_size((struct arrayset *)s, file, exact);
    return otable_size(s->plate ? arrayset_plate_table(s, index) : s->table, file, exact);
}

void arrayset_table_request(struct arrayset *s, uint64_t index, void (*cb)(void *ctx, int err),
                            void *ctx)
{
    if (s->plate) { /* the image's engines, or every image's for the plate's table, held */
        arrayset_plate_table_request(s, index, cb, ctx);
        return;
    }
    if (s->plate && arrayset_plate_is_ptable(s, index))
        ptable_request(s->ptable, cb, ctx);
    else
        otable_request(s->plate ? arrayset_plate_table(s, index) : s->table, cb, ctx);
}

char *arrayset_table_copy(const struct arrayset *s, uint64_t index, size_t *len)
{
    size_t file = (size_t)(index & ARRAYSET_FILE_MASK);
    if (s->plate && arrayset_plate_is_ptable(s, index))
        return ptable_copy(s->ptable, file, len);
    return otable_copy(s->plate ? arrayset_plate_table(s, index) : s->table, file, len);
}

char *arrayset_generated(const struct arrayset *s, uint64_t index, size_t *len)
{
    char *text;
    if (s->plate)
        text = arrayset_plate_generated(s, index);
    else
        text = s->overlay ? overlay_file_now(s->overlay, (size_t)index) : xstrdup("");
    *len = text ? strlen(text) : 0;
    return text;
}

json_t *arrayset_status(struct arrayset *s)
{
    if (s->plate)
        return arrayset_plate_status(s);
    json_t *doc = engine_status(s->arrays[0].engine);
    if ((s->pyramid || s->overlay) && s->n > 1) {
        json_t *levels = json_array();
        for (size_t i = 0; i < s->n; i++)
            json_array_append_new(levels, arrayset_level_status(&s->arrays[i]));
        json_object_set_new(doc, "levels", levels);
    }
    struct remote_stats rs; /* a remote input (docs/remote.md) */
    remote_get_stats(&rs);
    if (rs.requests)
        json_object_set_new(doc, "remote",
                            json_pack("{s:I, s:I, s:I, s:I}", "requests", (json_int_t)rs.requests,
                                      "retried", (json_int_t)rs.retried, "failed",
                                      (json_int_t)rs.failed, "unconfirmed",
                                      (json_int_t)rs.unconfirmed));
    if (s->table) {
        uint64_t scans, records;
        otable_counts(s->table, &scans, &records);
        json_object_set_new(doc, "table",
                            json_pack("{s:I, s:I}", "scans", (json_int_t)scans, "from_record",
                                      (json_int_t)records));
        struct otable_measure_counts mc;
        if (otable_measure_counts(s->table, &mc))
            json_object_set_new(doc, "measure",
                                json_pack("{s:I, s:I, s:I, s:I, s:I}", "objects",
                                          (json_int_t)mc.objects, "pieces", (json_int_t)mc.pieces,
                                          "pieces_from_record", (json_int_t)mc.pieces_recorded,
                                          "failed", (json_int_t)mc.failed, "calls",
                                          (json_int_t)mc.calls));
        if (otable_measure_counts(s->table, &mc)) /* partials made with their chunks */
            json_object_set_new(json_object_get(doc, "measure"), "pieces_made",
                                json_integer((json_int_t)mc.made));
    }
    return doc;
}

/* ---- input changes ([input] watch) ---- */

/* The boxes of t's input that its storage files sids[0..n) hold (malloc'd, ndim each). */
static void storage_boxes(const struct task *t, const uint64_t *sids, size_t n, uint64_t **lo,
                          uint64_t **hi)
{
    const struct zarr_meta *in = t->in_meta;
    int nd = in->ndim;
    uint64_t grid[ROIFS_MAX_DIM];
    zarr_meta_grid(in, grid);
    *lo = xmalloc((n ? n : 1) * nd * sizeof **lo);
    *hi = xmalloc((n ? n : 1) * nd * sizeof **hi);
    for (size_t i = 0; i < n; i++) {
        uint64_t idx[ROIFS_MAX_DIM];
        nd_unlinear(sids[i], grid, nd, idx);
        nd_chunk_box(idx, in->chunks, in->shape, nd, *lo + i * nd, *hi + i * nd);
    }
}

void arrayset_input_changed(struct arrayset *s, const uint64_t *sids, size_t n, bool all,
                            void (*fn)(void *ctx, int array, uint64_t id), void *ctx)
{
    if (s->plate) /* refused with a plate input ([input] watch) */
        return;
    uint64_t *lo, *hi, *chunks = NULL;
    storage_boxes(s->arrays[0].task, sids, all ? 0 : n, &lo, &hi);
    size_t nboxes = all ? 0 : n;
    for (size_t i = 0; i < s->n && s->arrays[i].engine; i++) {
        if (i > 0) { /* a level: where the chunks of the level above that changed go */
            free(lo);
            free(hi);
            nboxes =
                pyramid_changed_boxes(s->pyramid, s->arrays[i].level, chunks, nboxes, &lo, &hi);
        }
        free(chunks);
        nboxes = engine_input_changed(s->arrays[i].engine, lo, hi, nboxes, all, &chunks);
        for (size_t k = 0; k < nboxes && fn; k++)
            fn(ctx, (int)i, chunks[k]);
    }
    free(chunks);
    free(lo);
    free(hi);
}

void arrayset_input_broken(struct arrayset *s, const char *reason)
{
    char *was = s->arrays[0].engine ? engine_input_error(s->arrays[0].engine) : NULL;
    if (!was)
        log_error("[input] watch: %s; every chunk fails with EIO until the mount is made again",
                  reason);
    free(was);
    for (size_t i = 0; i < s->n; i++)
        if (s->arrays[i].engine)
            engine_input_broken(s->arrays[i].engine, reason);
}
