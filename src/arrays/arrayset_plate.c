/* arrayset_plate.c: the array set of an HCS plate with ome = labels (docs/plates.md): the
 * plate group read through, and in each selected image's directory that image's overlay
 * (labels/NAME, tables/NAME) exactly as a mount of the image alone presents it. Each image is
 * its own task (task_open_image), with its own cache directory, overlay and engines; an image
 * that cannot be opened fails alone: its added files give EIO, the status lists it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../engine/turns.h"
#include "../plate/plate.h"
#include "arrayset_plate.h"
#include "../zarr/zarr.h"
#include "overlay_remote.h"
#include "overlay_tree.h"
#include "pyramid.h"

/* Opens image k: its task, its overlay and table; its arrays pushed. A failure of the image
 * (its metadata, ROI table, ...) is kept as its error, not returned. */
static void open_image(struct arrayset *s, size_t k, const struct engine_opts *eo)
{
    struct set_image *im = &s->images[k];
    im->opened = true;
    if (im->pim->error) {
        im->error = xstrdup(im->pim->error);
        return;
    }
    struct errbuf e = {{0}};
    int r = task_open_image(s->plate_task->cfg.path, im->pim, 0, &im->task, &e);
    if (r < 0) {
        im->task = NULL;
        im->error = xstrdup(e.msg);
        return;
    }
    im->first = s->n;
    struct engine_opts ko = *eo; /* the image's ROIs run within the plate's threads */
    ko.turns = s->turns;
    ko.turn_client = k;
    arrayset_push(s,
                  (struct array){.task = im->task, .opts = ko, .level_k = true, .image = (int)k});
    if (im->task->cfg.ome_labels) {
        r = arrayset_open_overlay(s, im->first, eo, &im->overlay, &im->table, &e);
    } else { /* ome = true: the computed image with its pyramid, as one image alone */
        r = pyramid_build(im->task, &im->pyramid, &e);
        for (int l = 1; r == 0 && l < pyramid_nlevels(im->pyramid); l++)
            arrayset_push(
                s, (struct array){.task = pyramid_level(im->pyramid, l), .opts = *eo, .level = l});
    }
    im->n = s->n - im->first;
    for (size_t i = im->first; i < s->n; i++) /* its label image's other levels too */
        s->arrays[i].image = (int)k;
    if (r < 0) { /* nothing of it is presented: its arrays are dropped */
        otable_free(im->table);
        overlay_free(im->overlay);
        pyramid_free(im->pyramid);
        im->table = NULL;
        im->overlay = NULL;
        im->pyramid = NULL;
        task_close(im->task);
        im->task = NULL;
        s->n = im->first;
        im->n = 0;
        im->error = xstrdup(e.msg);
    }
    if (s->pimages && im->table) { /* the plate's table, made after it: its rows count now */
        s->pimages[k].table = im->table;
        ptable_add_image(s->ptable, im->table);
    }
}

static void fill_image(void *ctx, uint64_t k, const char *name);

/* The lazy indices of a remote plate's array directories (an image's are its number). */
#define REMOTE_LAZY (1ULL << 62)

/* ptable_hold's: image k opened, started and held (-ENOENT: it failed), and let go. */
static int ptable_get(void *ctx, size_t k)
{
    struct arrayset *s = ctx;
    fill_image(s, k, NULL); /* its n set under s->lazy, once */
    return s->images[k].n && arrayset_plate_engine_get(s, s->images[k].first, true) ? 0 : -ENOENT;
}

static void ptable_put(void *ctx, size_t k)
{
    arrayset_plate_engine_put(ctx, ((struct arrayset *)ctx)->images[k].first);
}

/* table_name: the plate's table over every selected image's (a failed image has no rows);
 * refused when the plate has a table of that name. */
static int open_ptable(struct arrayset *s, const struct task *t, struct errbuf *err)
{
    const struct config *c = &t->cfg;
    char *mine = xasprintf("%s/tables/%s", s->plate->dir, c->table_name);
    struct stat st;
    bool exists = lstat(mine, &st) == 0;
    free(mine);
    if (exists && !s->overwrite) { /* export --into --overwrite replaces it */
        const char *sec = c->measure_table_name ? "measure" : "output";
        return config_error(c, err, sec, "table_name",
                            "[%s] table_name: the plate %s has a table %s already", sec,
                            s->plate->dir, c->table_name);
    }
    s->pimages = xcalloc(s->nimages, sizeof *s->pimages);
    for (size_t k = 0; k < s->nimages; k++) {
        const struct plate_image *p = s->images[k].pim;
        s->pimages[k] = (struct ptable_image){
            .table = s->images[k].table,
            .path_in_plate = p->path_in_plate,
            .text = {p->row, p->column, p->path_in_well, p->path_in_plate, p->acquisition_id}};
    }
    return ptable_new(s->pimages, s->nimages, s->plate->format,
                      c->table_format == 1 ? TABLE_CSV : TABLE_ANNDATA,
                      &(struct ptable_hold){ptable_get, ptable_put, s}, &s->ptable, err);
}

int arrayset_open_plate(struct arrayset *s, const struct task *t, const struct engine_opts *eo,
                        bool lazy, struct errbuf *err)
{
    s->plate = t->plate;
    s->plate_task = t;
    s->nimages = t->plate->n;
    s->images = xcalloc(s->nimages, sizeof *s->images);
    s->eo = *eo;
    s->lazy_images = lazy;
    s->turns = turns_new(eo->threads, s->nimages);
    pthread_mutex_init(&s->lazy, NULL);
    pthread_cond_init(&s->let_go, NULL);
    /* every image's arrays fit (an image has at most 64 levels): an image opened while the
     * tree is looked at never moves the arrays others read */
    s->cap = s->nimages *
             (OVERLAY_MAX_LEVELS > PYRAMID_MAX_LEVELS ? OVERLAY_MAX_LEVELS : PYRAMID_MAX_LEVELS);
    s->arrays = xcalloc(s->cap, sizeof *s->arrays);
    bool one = false; /* lazy: the images up to the first one that opens (none: refused) */
    for (size_t k = 0; k < s->nimages; k++) {
        s->images[k].pim = &t->plate->images[k];
        if (!lazy || !one || t->plate->images[k].error)
            open_image(s, k, eo);
        one = one || s->n > 0;
    }
    if (t->cfg.ome) {
        int r = plate_new_files(t->plate, &s->new_files, &s->nnew_files, err);
        if (r < 0)
            return r;
    }
    if (s->n > 0 && t->cfg.table_name && t->cfg.ome_labels) {
        int r = open_ptable(s, t, err);
        if (r < 0)
            return r;
    }
    if (s->n == 0) /* the mount would serve nothing of what it computes */
        return err_set(err, -EINVAL, "%s: no image of the plate %s can be opened: %s %s",
                       t->cfg.path, t->plate->dir, s->images[0].pim->path_in_plate,
                       s->images[0].error);
    return 0;
}

/* The directory entry of the image's path in the plate (made, mirroring the plate's
 * directories that exist). */
static int image_dir(struct arrayset *s, const struct plate_image *pim)
{
    struct ns *ns = s->tree;
    int dir = NS_ROOT;
    const char *parts[] = {pim->row, pim->column, pim->path_in_well};
    char *path = xstrdup(s->plate->dir);
    for (size_t i = 0; i < 3 && *parts[i]; i++) {
        char *next = path_join(path, parts[i]);
        free(path);
        path = next;
        int c = ns_child(ns, dir, parts[i]);
        if (c < 0) {
            c = ns_add_dir(ns, dir, parts[i]);
            struct stat st;
            if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
                ns_mirror(ns, c, path, NULL);
        }
        dir = c;
    }
    free(path);
    return dir;
}

/* A failed image's added files: each fails with EIO (arrayset_plate_generated gives NULL). */
static void failed_files(struct arrayset *s, size_t k, int dir);

/* Image k's files in the tree below its directory entry dir: its overlay's (labels/NAME,
 * tables/NAME), or with ome = true its computed image's; a failed image's give EIO. */
static int image_files(struct arrayset *s, size_t k, int dir, struct errbuf *err)
{
    struct ns *ns = s->tree;
    struct set_image *im = &s->images[k];
    bool v3 = s->plate->format == 3;
    if (!s->plate_task->cfg.ome) {
        if (!im->overlay) {
            failed_files(s, k, dir);
            struct errbuf e; /* (the image failed already: what its metadata shows of it) */
            if (s->remote)
                overlay_remote_add(s->remote, NULL, im->pim->dir, v3, dir, &e);
            return 0;
        }
        int r = overlay_tree_build(im->overlay, im->table, ns, dir, (int)im->first,
                                   (uint64_t)k << ARRAYSET_FILE_BITS, false, err);
        if (r == 0 && s->remote) /* its own files, from its metadata (docs/remote.md) */
            r = overlay_remote_add(s->remote, im->overlay, im->pim->dir, v3, dir, err);
        return r;
    }
    if (!im->pyramid) {
        uint64_t index = ((uint64_t)k << ARRAYSET_FILE_BITS) | ARRAYSET_FILE_MASK;
        ns_add_generated(ns, dir, v3 ? "zarr.json" : ".zattrs", index);
        return 0;
    }
    ns_add_file(ns, dir, v3 ? "zarr.json" : ".zgroup", pyramid_group_meta(im->pyramid));
    if (!v3)
        ns_add_file(ns, dir, ".zattrs", pyramid_group_attrs(im->pyramid));
    for (size_t i = 0; i < im->n; i++) {
        char name[16];
        snprintf(name, sizeof name, "%d", s->arrays[im->first + i].level);
        int r = ns_add_array(ns, ns_add_dir(ns, dir, name), s->arrays[im->first + i].task,
                             (int)(im->first + i), err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Image k opened (when it was not) and its files added to the tree; s->lazy held. An image
 * that fails to open, or whose files cannot be numbered, fails alone (logged once). */
static void fill_locked(struct arrayset *s, size_t k)
{
    struct set_image *im = &s->images[k];
    if (!im->opened) {
        open_image(s, k, &s->eo);
        if (im->error && s->started)
            log_error("image %s of the plate failed: %s", im->pim->path_in_plate, im->error);
    }
    if (!im->lazy_dir)
        return;
    struct errbuf e = {{0}};
    if (image_files(s, k, im->dir, &e) < 0 && !im->error) {
        im->error = xstrdup(e.msg);
        log_error("image %s of the plate failed: %s", im->pim->path_in_plate, im->error);
    }
    im->lazy_dir = false;
    ns_filled(s->tree, im->dir);
}

/* ns_fill_fn: the first look into image k's directory. */
static void fill_image(void *ctx, uint64_t k, const char *name)
{
    struct arrayset *s = ctx;
    if (k & REMOTE_LAZY) { /* a remote plate's array directory (overlay_remote.h) */
        overlay_remote_fill(s->remote, k, name);
        return;
    }
    pthread_mutex_lock(&s->lazy);
    fill_locked(s, (size_t)k);
    pthread_mutex_unlock(&s->lazy);
}

/* Every image opened (the plate's table asks each one's). */
static void fill_every_image(struct arrayset *s)
{
    pthread_mutex_lock(&s->lazy);
    for (size_t k = 0; k < s->nimages; k++)
        fill_locked(s, k);
    pthread_mutex_unlock(&s->lazy);
}

/* Image k's directory: its files now when it is open, else when it is first looked into. */
static int image_dir_files(struct arrayset *s, size_t k, int dir, struct errbuf *err)
{
    struct set_image *im = &s->images[k];
    im->dir = dir;
    if (im->opened)
        return image_files(s, k, dir, err);
    im->lazy_dir = true;
    ns_set_lazy(s->tree, dir, k);
    return 0;
}

static void failed_files(struct arrayset *s, size_t k, int dir)
{
    const struct config *c = &s->plate_task->cfg;
    const char *meta = s->plate->format == 3 ? "zarr.json" : ".zattrs";
    const char *names[2] = {c->label_name, c->table_name};
    const char *groups[2] = {"labels", "tables"};
    for (int g = 0; g < 2; g++) {
        if (!names[g])
            continue;
        int gd = ns_child(s->tree, dir, groups[g]);
        if (gd < 0)
            gd = ns_add_dir(s->tree, dir, groups[g]);
        int nd = ns_add_dir(s->tree, gd, names[g]);
        ns_add_generated(s->tree, nd, meta,
                         ((uint64_t)k << ARRAYSET_FILE_BITS) | ARRAYSET_FILE_MASK);
    }
}

/* The directory entry of rel below dir (made when absent, not mirrored: the plate's table). */
static int table_dir_of(struct ns *ns, int dir, const char *rel, const char **base)
{
    const char *p = rel, *slash;
    while ((slash = strchr(p, '/'))) {
        char *name = xmalloc((size_t)(slash - p) + 1);
        memcpy(name, p, (size_t)(slash - p));
        name[slash - p] = '\0';
        int c = ns_child(ns, dir, name);
        dir = c >= 0 ? c : ns_add_dir(ns, dir, name);
        free(name);
        p = slash + 1;
    }
    *base = p;
    return dir;
}

/* MNT/tables: the plate's tables list with NAME, and tables/NAME (docs/plates.md). */
static void ptable_tree(struct arrayset *s)
{
    struct ns *ns = s->tree;
    const struct config *c = &s->plate_task->cfg;
    bool v3 = s->plate->format == 3;
    char *dir = path_join(s->plate->dir, "tables");
    struct stat st;
    bool has = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
    int tables = ns_child(ns, NS_ROOT, "tables");
    if (tables < 0)
        tables = ns_add_dir(ns, NS_ROOT, "tables");
    if (has)
        ns_mirror(ns, tables, dir, c->table_name);
    char *zg = path_join(dir, ".zgroup");
    if (!v3 && stat(zg, &st) < 0)
        ns_add_file(ns, tables, ".zgroup", "{\n    \"zarr_format\": 2\n}");
    free(zg);
    free(dir);
    uint64_t base = (uint64_t)s->nimages << ARRAYSET_FILE_BITS;
    ns_add_generated(ns, tables, v3 ? "zarr.json" : ".zattrs", base);
    int mine = ns_add_dir(ns, tables, c->table_name);
    for (size_t i = 0; i < ptable_nfiles(s->ptable); i++) {
        const char *name;
        int d = table_dir_of(ns, mine, ptable_path(s->ptable, i), &name);
        ns_add_table(ns, d, name, base + i);
    }
}

/* The directory entry of rel (made, with its parents, not mirrored). */
static int new_dir(struct ns *ns, const char *rel)
{
    const char *base;
    char *whole = xasprintf("%s/", rel);
    int d = table_dir_of(ns, NS_ROOT, whole, &base);
    free(whole);
    return d;
}

/* ome = true: the new plate (docs/plates.md): the narrowed plate and well groups, each
 * selected image the computed image group of its pyramid; a failed image's group files give
 * EIO. */
static int new_plate_tree(struct arrayset *s, bool status, struct errbuf *err)
{
    struct ns *ns = s->tree;
    for (size_t i = 0; i < s->nnew_files; i++) {
        const char *base;
        int d = table_dir_of(ns, NS_ROOT, s->new_files[i].path, &base);
        ns_add_file(ns, d, base, s->new_files[i].text);
        if (i == 0 && status)
            ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    }
    for (size_t k = 0; k < s->nimages; k++) {
        struct set_image *im = &s->images[k];
        if (!*im->pim->path_in_well)
            continue;
        int r = image_dir_files(s, k, new_dir(ns, im->pim->path_in_plate), err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* overlay_remote_image_fn: a well's image of a remote plate (ctx: the images placed). */
static int remote_image(void *ctx, const char *rel, int dir, struct errbuf *err)
{
    struct arrayset *s = ((void **)ctx)[0];
    bool *placed = ((void **)ctx)[1];
    for (size_t k = 0; k < s->nimages; k++)
        if (!placed[k] && strcmp(s->images[k].pim->path_in_plate, rel) == 0) {
            placed[k] = true;
            return image_dir_files(s, k, dir, err);
        }
    char *url = xasprintf("%s/%s", s->plate->dir, rel); /* not selected: read through */
    overlay_remote_lazy_image(s->remote, url, s->plate->format == 3, dir);
    free(url);
    return 0;
}

/* A remote plate's mount: the plate's and its wells' files from their metadata, each
 * selected image's directory filled when first looked into (docs/remote.md). */
static int remote_plate_tree(struct arrayset *s, struct errbuf *err)
{
    s->remote = overlay_remote_new(s->tree, REMOTE_LAZY);
    bool *placed = xcalloc(s->nimages, sizeof *placed);
    void *ctx[2] = {s, placed};
    int r = overlay_remote_plate(s->remote, s->plate->dir, s->plate->format == 3, remote_image, ctx,
                                 err);
    for (size_t k = 0; k < s->nimages && r == 0; k++) /* a well that did not list it */
        if (!placed[k] && *s->images[k].pim->path_in_well)
            r = image_dir_files(s, k, image_dir(s, s->images[k].pim), err);
    free(placed);
    return r;
}

static int plate_tree_rest(struct arrayset *s, bool status, bool placed, struct errbuf *err);

int arrayset_plate_tree(struct arrayset *s, bool status, struct errbuf *err)
{
    ns_set_filler(s->tree, fill_image, s);
    if (s->plate_task->cfg.ome)
        return new_plate_tree(s, status, err);
    struct ns *ns = s->tree;
    if (zarr_is_url(s->plate->dir) && status) /* a mount, serve; warm and export read none */
    {
        int r = remote_plate_tree(s, err);
        return r < 0 ? r : plate_tree_rest(s, status, true, err);
    }
    ns_mirror(ns, NS_ROOT, s->plate->dir, ".roifs");
    return plate_tree_rest(s, status, false, err);
}

/* The tree's status, the plate's table and (unless placed already) each image's files. */
static int plate_tree_rest(struct arrayset *s, bool status, bool placed, struct errbuf *err)
{
    struct ns *ns = s->tree;
    if (status)
        ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    if (s->ptable)
        ptable_tree(s);
    for (size_t k = 0; k < s->nimages; k++) {
        struct set_image *im = &s->images[k];
        if (!*im->pim->path_in_well || placed) /* a missing well: nothing of it to add to */
            continue;
        int r = image_dir_files(s, k, image_dir(s, im->pim), err);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Creates image k's engines (level k first, which the others read); s->lazy held. 0 or
 * -errno with err set and none of them left. */
/* Opens image k's caches (its label image's level k registers the configuration, the others
 * do not), as arrayset_open does for one image; s->lazy held. */
static int open_image_caches(struct arrayset *s, struct set_image *im, struct errbuf *err)
{
    uint64_t version = task_version(s->arrays[im->first].task);
    for (size_t i = im->first; i < im->first + im->n; i++) {
        struct array *a = &s->arrays[i];
        if (a->cache)
            continue;
        cache_set_lease((unsigned)a->task->cfg.cache_lease);
        int r = cache_open(a->task->cache_dir, i == im->first ? a->task->cfg.path : NULL, version,
                           &a->cache, err);
        if (r < 0)
            return r;
        if (a->task->reader)
            cache_keep_input_hashes(a->cache, a->task->reader);
    }
    return 0;
}

static int start_image(struct arrayset *s, struct set_image *im, struct errbuf *err)
{
    if (im->task->reader) /* closed with the image (close_image) */
        zarr_input_resume(im->task->reader);
    int r0 = open_image_caches(s, im, err);
    if (r0 < 0)
        return r0;
    for (size_t i = im->first; i < im->first + im->n; i++) {
        struct array *a = &s->arrays[i];
        int r = engine_create(a->task, a->cache, &a->opts, &a->engine, err);
        if (r < 0) {
            a->engine = NULL;
            for (size_t j = i; j-- > im->first;) {
                engine_destroy(s->arrays[j].engine);
                s->arrays[j].engine = NULL;
            }
            if (im->pyramid)
                for (size_t j = 0; j < im->n; j++)
                    pyramid_set_engine(im->pyramid, (int)j, NULL);
            else
                overlay_set_engine(im->overlay, NULL);
            return r;
        }
        if (im->pyramid) /* before the next level's, which reads it */
            pyramid_set_engine(im->pyramid, (int)(i - im->first), a->engine);
        else if (i == im->first) /* before the other levels', which read it */
            overlay_set_engine(im->overlay, a->engine);
    }
    return 0;
}

/* Destroys image im's engines (the levels reading level k first) and closes its caches (their
 * directories stay); s->lazy held, nobody holding them. */
static void close_image(struct arrayset *s, struct set_image *im)
{
    json_decref(im->closed_status); /* what the status shows of it until it is open again */
    im->closed_status = engine_status(s->arrays[im->first].engine);
    for (size_t i = im->first + im->n; i-- > im->first;) {
        struct array *a = &s->arrays[i];
        if (a->engine)
            engine_destroy(a->engine);
        a->engine = NULL;
        if (im->pyramid)
            pyramid_set_engine(im->pyramid, (int)(i - im->first), NULL);
        else if (i == im->first)
            overlay_set_engine(im->overlay, NULL);
        cache_close(a->cache);
        a->cache = NULL;
    }
    if (im->task->reader) /* its input's descriptors too: started again, it opens them */
        zarr_input_park(im->task->reader);
    s->nopen--;
}

/* Open images that nobody holds kept open (their engines, caches and input descriptors) when
 * another image starts: the most recently used ones, so that a reader going from chunk to chunk
 * of an image, or between a few images, does not reopen them; any other idle image is closed
 * (its descriptors and memory returned, its cache directories stay), whatever images_open
 * allows. About 13 descriptors an image: 32 idle ones would dominate the daemon's. */
#define IDLE_KEPT_OPEN 4

/* [mount] images_open: while as many images are open, the least recently used one that nobody
 * holds is closed; and so is it while IDLE_KEPT_OPEN images are idle. When every open image is
 * held, it waits for an image whose holds are all ending (arrayset_plate_engine_ending: an open
 * answered, about to let go; a status read), for as long as that takes, since such holders wait
 * on no other work; else up to 200 ms for one to be let go, then the bound is exceeded until
 * the next image starts (bounded, so never a deadlock with a holder waiting on this thread).
 * s->lazy held. */
static void make_room(struct arrayset *s)
{
    size_t bound = (size_t)s->plate_task->cfg.images_open;
    struct timespec until = deadline_in(CLOCK_REALTIME, ts_from_ns(200 * 1000 * 1000));
    for (;;) {
        struct set_image *lru = NULL;
        size_t idle = 0;
        size_t ending = 0; /* images whose holders are all letting go: idle in a moment */
        for (size_t k = 0; k < s->nimages; k++) {
            struct set_image *im = &s->images[k];
            if (!im->n || !s->arrays[im->first].engine)
                continue;
            if (im->uses) {
                ending += im->uses == im->ending;
                continue;
            }
            idle++;
            if (!lru || im->last_use < lru->last_use)
                lru = im;
        }
        if (s->nopen < bound && idle + ending < IDLE_KEPT_OPEN)
            return;
        if (!lru && ending) {
            pthread_cond_wait(&s->let_go, &s->lazy);
            continue;
        }
        if (!lru && pthread_cond_timedwait(&s->let_go, &s->lazy, &until) == 0)
            continue;
        if (!lru)
            return;
        close_image(s, lru);
    }
}

/* Image k's engines, started (and room made for them) when they do not exist; s->lazy held. */
static void start_locked(struct arrayset *s, size_t k)
{
    struct set_image *im = &s->images[k];
    if (!s->started || im->error || !im->n || s->arrays[im->first].engine)
        return;
    make_room(s);
    if (im->error || s->arrays[im->first].engine) /* started while make_room waited */
        return;
    struct errbuf e = {{0}};
    if (start_image(s, im, &e) < 0) {
        im->error = xstrdup(e.msg);
        log_error("image %s of the plate failed: %s", im->pim->path_in_plate, im->error);
        return;
    }
    s->nopen++;
}

struct engine *arrayset_plate_engine(struct arrayset *s, size_t i, bool start)
{
    pthread_mutex_lock(&s->lazy);
    if (start)
        start_locked(s, (size_t)s->arrays[i].image);
    struct engine *e = s->arrays[i].engine;
    pthread_mutex_unlock(&s->lazy);
    return e;
}

struct engine *arrayset_plate_engine_get(struct arrayset *s, size_t i, bool start)
{
    pthread_mutex_lock(&s->lazy);
    struct set_image *im = &s->images[s->arrays[i].image];
    if (start)
        start_locked(s, (size_t)s->arrays[i].image);
    struct engine *e = s->arrays[i].engine;
    if (e) {
        im->uses++;
        im->last_use = ++s->clock;
    }
    pthread_mutex_unlock(&s->lazy);
    return e;
}

static void put_locked(struct arrayset *s, struct set_image *im, bool ending)
{
    im->ending -= ending;
    if (--im->uses == 0)
        pthread_cond_broadcast(&s->let_go);
}

void arrayset_plate_engine_put(struct arrayset *s, size_t i)
{
    pthread_mutex_lock(&s->lazy);
    put_locked(s, &s->images[s->arrays[i].image], false);
    pthread_mutex_unlock(&s->lazy);
}

void arrayset_plate_engine_ending(struct arrayset *s, size_t i)
{
    pthread_mutex_lock(&s->lazy);
    s->images[s->arrays[i].image].ending++;
    pthread_mutex_unlock(&s->lazy);
}

void arrayset_plate_engine_put_ending(struct arrayset *s, size_t i)
{
    pthread_mutex_lock(&s->lazy);
    put_locked(s, &s->images[s->arrays[i].image], true);
    pthread_mutex_unlock(&s->lazy);
}

/* An image's table request holding its image until it is answered. */
struct held_request {
    struct arrayset *s;
    void (*cb)(void *ctx, int err);
    void *ctx;
    size_t array; /* the image's first array */
};

static void held_answered(void *ctx, int err)
{
    struct held_request *h = ctx;
    arrayset_plate_engine_ending(h->s, h->array);
    h->cb(h->ctx, err);
    arrayset_plate_engine_put_ending(h->s, h->array);
    free(h);
}

void arrayset_plate_table_request(struct arrayset *s, uint64_t index,
                                  void (*cb)(void *ctx, int err), void *ctx)
{
    size_t k = (size_t)(index >> ARRAYSET_FILE_BITS);
    if (k == s->nimages) { /* the plate's: one image held at a time (ptable_hold) */
        ptable_request(s->ptable, cb, ctx);
        return;
    }
    struct set_image *im = &s->images[k];
    if (!im->n || !arrayset_plate_engine_get(s, im->first, true)) { /* failed, or not started */
        cb(ctx, -EIO);
        return;
    }
    struct held_request *h = xmalloc(sizeof *h);
    *h = (struct held_request){.s = s, .cb = cb, .ctx = ctx, .array = im->first};
    otable_request(im->table, held_answered, h);
}

uint64_t arrayset_plate_ptable_size(struct arrayset *s, uint64_t file, bool *exact)
{
    fill_every_image(s); /* an upper bound counts every image's rows */
    return ptable_size(s->ptable, (size_t)file, exact);
}

/* No cache is opened and no engine created here: each image's when it is first needed
 * (arrayset_plate_engine), so that the threads and open files are those of the images read. */
int arrayset_start_plate(struct arrayset *s, struct errbuf *err)
{
    (void)err;
    for (size_t k = 0; k < s->nimages; k++)
        if (s->images[k].error)
            log_error("image %s of the plate failed: %s", s->images[k].pim->path_in_plate,
                      s->images[k].error);
    pthread_mutex_lock(&s->lazy);
    s->started = true;
    pthread_mutex_unlock(&s->lazy);
    ptable_allow(s->ptable, true);
    return 0;
}

void arrayset_stop_plate(struct arrayset *s)
{
    ptable_allow(s->ptable, false); /* its engines asked: ptable_wait below when they are gone */
    pthread_mutex_lock(&s->lazy);
    s->started = false;
    s->nopen = 0;
    pthread_mutex_unlock(&s->lazy);
    for (size_t k = s->nimages; k-- > 0;) {
        struct set_image *im = &s->images[k];
        for (size_t i = im->first + im->n; i-- > im->first;) {
            struct array *a = &s->arrays[i];
            if (!a->engine)
                continue;
            engine_destroy(a->engine);
            a->engine = NULL;
            if (im->pyramid)
                pyramid_set_engine(im->pyramid, (int)(i - im->first), NULL);
            else if (i == im->first)
                overlay_set_engine(im->overlay, NULL);
        }
    }
    ptable_wait(s->ptable);
}

void arrayset_close_plate(struct arrayset *s)
{
    ptable_free(s->ptable);
    free(s->pimages);
    overlay_remote_free(s->remote);
    if (s->images)
        pthread_mutex_destroy(&s->lazy);
    pthread_cond_destroy(&s->let_go);
    plate_files_free(s->new_files, s->nnew_files);
    turns_free(s->turns);
    for (size_t k = 0; k < s->nimages; k++) {
        struct set_image *im = &s->images[k];
        otable_free(im->table);
        overlay_free(im->overlay);
        pyramid_free(im->pyramid);
        task_close(im->task);
        free(im->error);
        json_decref(im->closed_status);
    }
    free(s->images);
}

struct otable *arrayset_plate_table(const struct arrayset *s, uint64_t index)
{
    size_t k = (size_t)(index >> ARRAYSET_FILE_BITS);
    return k < s->nimages ? s->images[k].table : NULL;
}

bool arrayset_plate_is_ptable(const struct arrayset *s, uint64_t index)
{
    return (size_t)(index >> ARRAYSET_FILE_BITS) == s->nimages;
}

char *arrayset_plate_generated(const struct arrayset *s, uint64_t index)
{
    size_t k = (size_t)(index >> ARRAYSET_FILE_BITS);
    if (k == s->nimages) { /* the plate's tables list, as it is now, with NAME */
        char *rel;
        char *text = overlay_list_text(s->plate->dir, s->plate->format, "tables",
                                       s->plate_task->cfg.table_name, &rel);
        free(rel);
        return text;
    }
    if (k >= s->nimages || !s->images[k].overlay)
        return NULL;
    return overlay_file_now(s->images[k].overlay, (size_t)(index & ARRAYSET_FILE_MASK));
}
