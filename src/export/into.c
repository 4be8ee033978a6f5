/* into.c: `roifs export --into IMAGE` (into.h): the label image and table of an overlay into
 * an OME-Zarr image, through hidden temporary directories renamed into place. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../arrays/otable.h"
#include "../arrays/overlay.h"
#include "../plate/plate.h"
#include "into.h"

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Removes what an interrupted export --into left in IMAGE/group: the hidden directories
 * .roifs-tmp.NAME.* and .roifs-old.NAME.* (never named by a list). */
static void remove_stale_dirs(const char *dir, const char *name)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *tmp = xasprintf(".roifs-tmp.%s.", name), *old = xasprintf(".roifs-old.%s.", name);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, tmp, strlen(tmp)) == 0 ||
            strncmp(de->d_name, old, strlen(old)) == 0) {
            char *p = path_join(dir, de->d_name);
            rm_tree(p);
            free(p);
        }
    }
    closedir(d);
    free(tmp);
    free(old);
}

/* A temporary directory IMAGE/group/.roifs-tmp.NAME.PID, made empty. */
static int into_tmp(struct export_into *in, int which, const char *group, const char *name,
                    struct errbuf *err)
{
    char *dir = path_join(in->image, group);
    in->dirs[which][0] = dir;
    in->dirs[which][1] = xasprintf("%s/.roifs-tmp.%s.%ld", dir, name, (long)getpid());
    in->dirs[which][2] = path_join(dir, name);
    int r = mkdir_p(dir, 0777);
    if (r == 0) {
        remove_stale_dirs(dir, name);
        r = mkdir(in->dirs[which][1], 0777) < 0 ? -errno : 0;
    }
    if (r < 0)
        return err_set(err, r == -EINVAL ? -EIO : r, "%s: cannot create: %s", in->dirs[which][1],
                       strerror(-r));
    return 0;
}

struct sync_table {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int err;
};

static void table_done(void *ctx, int err)
{
    struct sync_table *st = ctx;
    pthread_mutex_lock(&st->m);
    st->err = err;
    st->done = true;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->m);
}

/* The table (and the masking table), computed with the engines started again (every chunk is
 * cached now), each file written into its table's temporary directory. */
static int into_table(struct export_into *in, struct arrayset *s, struct errbuf *err)
{
    struct errbuf e = {{0}};
    if (arrayset_start(s, &e) < 0)
        return err_set(err, -EIO, "%s", e.msg);
    struct sync_table st = {.done = false};
    pthread_mutex_init(&st.m, NULL);
    pthread_cond_init(&st.cv, NULL);
    struct otable *t = arrayset_table(s);
    otable_request(t, table_done, &st);
    pthread_mutex_lock(&st.m);
    while (!st.done)
        pthread_cond_wait(&st.cv, &st.m);
    pthread_mutex_unlock(&st.m);
    int r = st.err;
    struct export x[2]; /* the table's, the masking table's */
    for (int w = 0; w < 2; w++) {
        export_init(&x[w], in->dirs[1 + w][1], NULL);
        x[w].destfd = x[w].dest ? open(x[w].dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    }
    for (size_t i = 0; r == 0 && i < otable_nfiles(t); i++) {
        const struct table_file *f = otable_file(t, i);
        if (!f)
            continue; /* an empty table has no chunk */
        const char *name = otable_table_name(t, i);
        struct export *to = &x[in->mask && strcmp(name, in->mask) == 0];
        if (!to->dest) {
            r = -EIO;
            break;
        }
        char *p = path_join(to->dest, f->path), *slash = strrchr(p, '/');
        *slash = '\0';
        r = mkdir_p(p, 0777);
        free(p);
        if (r == 0)
            r = export_write_file(to, f->path, f->data, f->len, &e);
    }
    for (int w = 0; w < 2; w++)
        export_close(&x[w]);
    arrayset_stop(s);
    pthread_cond_destroy(&st.cv);
    pthread_mutex_destroy(&st.m);
    if (r < 0)
        return err_set(err, r == -EINVAL ? -EIO : r, "the table: %s",
                       e.msg[0] ? e.msg : strerror(-r));
    return 0;
}

/* Puts the temporary directory in the place of the final one (the old one, with
 * --overwrite, moved away first and removed after). */
static int into_swap(char *const dirs[3], struct errbuf *err)
{
    char *old =
        xasprintf("%s/.roifs-old.%s.%ld", dirs[0], strrchr(dirs[2], '/') + 1, (long)getpid());
    bool had = rename(dirs[2], old) == 0;
    int r = rename(dirs[1], dirs[2]) < 0 ? -errno : 0;
    if (r < 0) {
        err_set(err, -EIO, "%s: cannot rename into place: %s", dirs[2], strerror(-r));
        if (had)
            rename(old, dirs[2]);
    } else if (had) {
        rm_tree(old);
    }
    free(old);
    return r < 0 ? -EIO : 0;
}

/* The group's list (and for format 2 its .zgroup when missing) replaced atomically. */
static int into_list(struct export_into *in, const char *group, const char *name,
                     struct errbuf *err)
{
    struct export x;
    export_init(&x, in->image, NULL);
    x.destfd = open(in->image, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char *rel, *text = overlay_list_text(in->image, in->format, group, name, &rel);
    char *zg = xasprintf("%s/.zgroup", group), *zgt = NULL;
    int r = 0;
    if (in->format == 2 && file_read_all_at(x.destfd, zg, &zgt, NULL) < 0) {
        const char *g = "{\n    \"zarr_format\": 2\n}";
        r = export_write_file(&x, zg, g, strlen(g), err);
    }
    if (r == 0)
        r = export_write_file(&x, rel, text, strlen(text), err);
    free(zgt);
    free(zg);
    free(rel);
    free(text);
    export_close(&x);
    return r < 0 ? -EIO : 0;
}

/* Whether the paths a and b (b may be NULL) name one directory. */
static bool same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && S_ISDIR(sa.st_mode) &&
           sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int export_into_check_own(const char *into, const struct task *t, struct errbuf *err)
{
    const char *input = t->plate ? t->plate->dir : t->ome.group_path;
    if (same_dir(into, input))
        return 0;
    return err_set(err, -EINVAL,
                   "%s: [measure] labels = %s: export --into writes the feature table into the %s "
                   "whose label image%s measured (%s), not into %s",
                   t->cfg.path, t->cfg.measure_labels, t->plate ? "plate" : "image",
                   t->plate ? "s are" : " is", input ? input : "its input", into);
}

/* Unless in->overwrite, -EINVAL (err set) when in->image has a label or table of in's names
 * (labels/NAME only when it is written: not with in->table_only). */
static int check_names_free(const struct export_into *in, struct errbuf *err)
{
    const char *groups[3] = {"labels", "tables", "tables"};
    const char *names[3] = {in->label, in->table, in->mask};
    for (int i = in->table_only ? 1 : 0; i < 3 && !in->overwrite; i++) {
        char *p = names[i] ? xasprintf("%s/%s/%s", in->image, groups[i], names[i]) : NULL;
        struct stat st;
        bool there = p && stat(p, &st) == 0;
        free(p);
        if (there)
            return err_set(err, -EINVAL,
                           "--into: %s already has a %s '%s' (--overwrite replaces it)", in->image,
                           i ? "table" : "label", names[i]);
    }
    return 0;
}

/* The temporary directories of the table and the masking table (those in names). */
static int tables_tmp(struct export_into *in, struct errbuf *err)
{
    int r = in->table ? into_tmp(in, 1, "tables", in->table, err) : 0;
    if (r == 0 && in->mask)
        r = into_tmp(in, 2, "tables", in->mask, err);
    return r;
}

int export_into_check(struct export_into *in, const struct task *t, struct errbuf *err)
{
    json_t *attrs, *ms;
    struct errbuf e = {{0}};
    if (!t->cfg.ome_labels)
        return err_set(err, -EINVAL, "%s: export --into needs [output] ome = labels", t->cfg.path);
    if (t->cfg.measure_labels) { /* the input image's own label image (measurements.md) */
        int r = export_into_check_own(in->image, t, err);
        if (r < 0)
            return r;
        in->table_only = true;
    }
    if (ome_group_attrs(in->image, &attrs, &ms, &e) < 0)
        return err_set(err, -EINVAL, "--into: %s", e.msg);
    json_decref(attrs);
    char *zj = path_join(in->image, "zarr.json");
    struct stat st;
    in->format = stat(zj, &st) == 0 ? 3 : 2;
    free(zj);
    if (in->format != t->out.format)
        return err_set(err, -EINVAL, "--into: %s is a Zarr v%d image, the label image is v%d",
                       in->image, in->format, t->out.format);
    return check_names_free(in, err);
}

int export_into_begin(struct export_into *in, struct arrayset *s, struct export *x,
                      struct errbuf *err)
{
    if (in->table_only) /* labels/NAME is the image's: the tables alone */
        return tables_tmp(in, err);
    int r = into_tmp(in, 0, "labels", in->label, err);
    if (r == 0)
        r = tables_tmp(in, err);
    if (r < 0)
        return r;
    x->dest = in->dirs[0][1];
    x->destfd = open(x->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const struct ns *ns = arrayset_tree(s);
    struct ns_node labels, node;
    struct errbuf e = {{0}};
    r = x->destfd < 0 ? -errno : 0;
    if (r == 0 && (ns_lookup(ns, NS_INO_ROOT, "labels", &labels) < 0 ||
                   ns_lookup(ns, labels.ino, in->label, &node) < 0))
        r = -ENOENT;
    if (r == 0)
        r = export_list(x, ns, node.ino, &e);
    if (r < 0)
        return err_set(err, r == -EINVAL ? -EIO : r, "%s: %s", x->dest,
                       e.msg[0] ? e.msg : strerror(-r));
    return 0;
}

int export_into_finish(struct export_into *in, struct arrayset *s, struct export *x,
                       struct errbuf *err)
{
    int r = in->table_only ? 0 : export_write_metadata(x, err);
    if (r == 0 && in->table)
        r = into_table(in, s, err);
    if (r == 0) /* everything is complete: into place */
        r = export_into_place(in, err);
    return r == -EINVAL ? -EIO : r;
}

void export_into_end(struct export_into *in, bool failed)
{
    for (int i = 0; i < 3; i++) {
        if (failed && in->dirs[i][1])
            rm_tree(in->dirs[i][1]);
        for (int k = 0; k < 3; k++) {
            free(in->dirs[i][k]);
            in->dirs[i][k] = NULL;
        }
    }
}

/* ---- a plate (docs/plates.md): one image's additions at a time, placed all at the end ---- */

/* The tree's entry at the relative path rel ("" the root; lazy directories filled). */
static int tree_at(const struct ns *ns, const char *rel, struct ns_node *out)
{
    int r = ns_get(ns, NS_INO_ROOT, out);
    char *copy = xstrdup(rel), *save = NULL;
    for (char *p = strtok_r(copy, "/", &save); p && r == 0; p = strtok_r(NULL, "/", &save))
        r = ns_lookup(ns, out->ino, p, out);
    free(copy);
    return r;
}

/* NS_TABLE node index's content, asked of s (its engines started). */
static char *table_file(struct arrayset *s, uint64_t index, size_t *len, int *err)
{
    struct sync_table w = {.done = false};
    pthread_mutex_init(&w.m, NULL);
    pthread_cond_init(&w.cv, NULL);
    arrayset_table_request(s, index, table_done, &w);
    pthread_mutex_lock(&w.m);
    while (!w.done)
        pthread_cond_wait(&w.cv, &w.m);
    pthread_mutex_unlock(&w.m);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.m);
    char *data = w.err == 0 ? arrayset_table_copy(s, index, len) : NULL;
    *err = w.err < 0 ? w.err : data ? 0 : -EIO;
    return data;
}

struct names {
    char **v;
    uint64_t *ino;
    size_t n;
};

static int add_name(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    (void)is_dir, (void)next_off;
    struct names *l = ctx;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
    l->ino = xrealloc(l->ino, (l->n + 1) * sizeof *l->ino);
    l->v[l->n] = xstrdup(name);
    l->ino[l->n++] = ino;
    return 0;
}

/* Writes the files of the tree's directory ino (a table's: directories, fixed files and
 * table files, whose tables s's started engines make) into x->dest at rel. */
static int write_tree(struct export *x, struct arrayset *s, uint64_t ino, const char *rel,
                      struct errbuf *err)
{
    const struct ns *ns = arrayset_tree(s);
    struct names l = {0};
    int r = ns_readdir(ns, ino, 0, NULL, add_name, &l);
    for (size_t i = 0; i < l.n && r == 0; i++) {
        struct ns_node node;
        char *path = *rel ? xasprintf("%s/%s", rel, l.v[i]) : xstrdup(l.v[i]);
        r = ns_get(ns, l.ino[i], &node);
        size_t len = 0;
        char *data = NULL;
        if (r == 0 && node.kind == NS_DIR) {
            r = mkdirat(x->destfd, path, 0777) < 0 && errno != EEXIST ? -errno : 0;
            if (r == 0)
                r = write_tree(x, s, node.ino, path, err);
        } else if (r == 0 && node.kind == NS_META) {
            r = export_write_file(x, path, node.text, node.len, err);
        } else if (r == 0 && node.kind == NS_TABLE) {
            data = table_file(s, node.chunk, &len, &r);
            if (r == 0)
                r = export_write_file(x, path, data, len, err);
        } else if (r == 0 && node.kind == NS_GEN) {
            data = arrayset_generated(s, node.chunk, &len);
            r = data ? export_write_file(x, path, data, len, err) : -EIO;
        }
        if (r < 0 && !err->msg[0])
            err_set(err, r, "%s/%s: %s", x->dest, path, strerror(-r));
        free(data);
        free(path);
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i]);
    free(l.v);
    free(l.ino);
    return r;
}

int export_into_check_image(struct export_into *in, int format, bool plate, struct errbuf *err)
{
    json_t *attrs, *ms;
    struct errbuf e = {{0}};
    if (plate && plate_detect(in->image) != 1)
        return err_set(err, -EINVAL, "--into: %s is not an OME-Zarr HCS plate", in->image);
    if (!plate && ome_group_attrs(in->image, &attrs, &ms, &e) < 0)
        return err_set(err, -EINVAL, "--into: %s (PLATE must have the plate's images)", e.msg);
    if (!plate)
        json_decref(attrs);
    in->format = format;
    return check_names_free(in, err);
}

int export_into_begin_at(struct export_into *in, struct arrayset *s, const char *rel,
                         struct export *x, struct errbuf *err)
{
    int r = in->table_only ? 0 : into_tmp(in, 0, "labels", in->label, err);
    if (r == 0)
        r = tables_tmp(in, err);
    if (r < 0 || in->table_only)
        return r;
    x->dest = in->dirs[0][1];
    x->destfd = open(x->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct ns_node node;
    struct errbuf e = {{0}};
    char *p = *rel ? xasprintf("%s/labels/%s", rel, in->label) : xasprintf("labels/%s", in->label);
    r = x->destfd < 0 ? -errno : tree_at(arrayset_tree(s), p, &node);
    free(p);
    if (r == 0)
        r = export_list(x, arrayset_tree(s), node.ino, &e);
    if (r == 0 && x->nmeta == 0) /* a failed image's label group: its metadata fails */
        return err_set(err, -EIO, "%s: the image failed (`roifs check` says why)", in->image);
    if (r < 0)
        return err_set(err, r == -EINVAL ? -EIO : r, "%s: %s", x->dest,
                       e.msg[0] ? e.msg : strerror(-r));
    return 0;
}

/* Writes the tree's rel/tables/name into the temporary directory dir. */
static int stage_one(struct export_into *in, struct arrayset *s, const char *rel, const char *name,
                     const char *dir, struct errbuf *err)
{
    struct ns_node node;
    char *p = *rel ? xasprintf("%s/tables/%s", rel, name) : xasprintf("tables/%s", name);
    int r = tree_at(arrayset_tree(s), p, &node);
    free(p);
    struct export x;
    export_init(&x, dir, NULL);
    x.destfd = open(x.dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (r == 0)
        r = x.destfd < 0 ? -errno : write_tree(&x, s, node.ino, "", err);
    export_close(&x);
    if (r < 0 && !err->msg[0])
        err_set(err, r, "%s: tables/%s: %s", in->image, name, strerror(-r));
    return r < 0 ? (r == -EINVAL ? -EIO : r) : 0;
}

int export_into_stage_table(struct export_into *in, struct arrayset *s, const char *rel,
                            struct errbuf *err)
{
    int r = in->table ? stage_one(in, s, rel, in->table, in->dirs[1][1], err) : 0;
    if (r == 0 && in->mask)
        r = stage_one(in, s, rel, in->mask, in->dirs[2][1], err);
    return r;
}

int export_into_place(struct export_into *in, struct errbuf *err)
{
    /* the groups take their places, then the lists name them */
    int r = in->table_only ? 0 : into_swap(in->dirs[0], err);
    if (r == 0 && in->table)
        r = into_swap(in->dirs[1], err);
    if (r == 0 && in->mask)
        r = into_swap(in->dirs[2], err);
    if (r == 0 && !in->table_only)
        r = into_list(in, "labels", in->label, err);
    if (r == 0 && in->table)
        r = into_list(in, "tables", in->table, err);
    if (r == 0 && in->mask)
        r = into_list(in, "tables", in->mask, err);
    return r == -EINVAL ? -EIO : r;
}
