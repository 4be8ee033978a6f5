/* overlay_remote.c: the tree of a remote input image under ome = labels, derived from its
 * metadata (overlay_remote.h). Never a directory's URL: every request names a metadata file
 * or a chunk key. */
#include "overlay_remote.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../zarr/remote.h"

#define RT_MAX_DEPTH 16           /* groups below the image: a cycle of names cannot loop */
#define RT_MAX_KEYS  (1ULL << 24) /* chunk keys of one array's grid */

/* An array whose chunk keys are found when its directory is first looked into. */
struct rt_array {
    char *url; /* the array's URL */
    int dir;   /* its directory entry */
    int ndim;
    uint64_t grid[ROIFS_MAX_DIM];
    char sep;         /* between indices */
    const char *zero; /* the key of a 0-d array */
    bool prefix_c;    /* v3 default encoding: "c" + sep first */
    uint64_t n;       /* keys */
    uint8_t *state;   /* per key: 0 not asked yet (or the answer failed), 1 shown, 2 absent */
    bool nested;      /* separator "/": a directory per index but the last */
    int cdir;         /* nested with prefix_c: the entry of "c" once shown, else 0 */
    int *dent[ROIFS_MAX_DIM]; /* nested: dent[m][prefix of m indices]: its directory's entry
                                 once shown, else 0 (m = 1 .. ndim - 1) */
};

/* A directory of an array's keys, filled as it is looked into: the array's own (k = -1 with
 * "c": its child "c"), else the one whose path fixes the first k indices to prefix p (nested),
 * or that holds every key (flat, k = 0). */
struct rt_dir {
    size_t array;
    int k;
    uint64_t p;
    int dir;
    const char *image; /* else: the URL of an image read through at the first look (kept) */
    bool v3;           /* its format */
};

struct overlay_remote {
    struct ns *ns;
    pthread_mutex_t lock; /* the fills: one at a time, a second waits for the first */
    struct rt_array *a;
    size_t na;
    struct rt_dir *d;
    size_t nd;
    char **strs; /* the texts and URLs the tree's entries name */
    size_t nstrs;
    uint64_t lazy_base; /* its lazy directories' indices: lazy_base + their own */
};

struct walk {
    struct overlay_remote *rt;
    const struct overlay *ov;
    const char *base; /* the image's URL */
    bool v3;
    int root;
    overlay_remote_image_fn image; /* a plate's walk: each well's image given to it */
    void *ctx;
};

static const char *keep(struct overlay_remote *rt, char *s)
{
    rt->strs = xrealloc(rt->strs, (rt->nstrs + 1) * sizeof *rt->strs);
    rt->strs[rt->nstrs++] = s;
    return s;
}

/* The directory entry of rel below root (each name made when absent). */
static int dir_at(struct ns *ns, int root, const char *rel)
{
    int dir = root;
    char *copy = xstrdup(rel), *save = NULL;
    for (char *p = strtok_r(copy, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        int c = ns_child(ns, dir, p);
        dir = c >= 0 ? c : ns_add_dir(ns, dir, p);
    }
    free(copy);
    return dir;
}

/* The object at url: 0 with its text, -ENOENT when absent, else the remote layer's error. */
static int fetch(const char *url, char **text, struct errbuf *err)
{
    struct errbuf e = {{0}};
    size_t len;
    int r = remote_read_text(url, text, &len, &e);
    if (r < 0 && r != -ENOENT)
        err_set(err, r, "%s", e.msg);
    return r;
}

static void add_meta(struct walk *w, int dir, const char *name, char *text)
{
    if (ns_child(w->rt->ns, dir, name) >= 0) { /* the overlay's file of that path */
        free(text);
        return;
    }
    ns_add_file(w->rt->ns, dir, name, keep(w->rt, text));
}

/* ---- the names a group's metadata gives ---- */

struct names {
    char **v;
    size_t n;
};

/* A relative path of one or more names, none empty, "." or "..", and no more than a name's
 * length each (a path the metadata names that would leave the node is not followed). */
static bool is_relative_path(const char *s)
{
    if (!s || !*s)
        return false;
    for (const char *p = s;;) {
        size_t len = strcspn(p, "/");
        if (len == 0 || len > 255 || (len == 1 && p[0] == '.') ||
            (len == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!p[len])
            return true;
        p += len + 1;
    }
}

static void name_add(struct names *ns, const char *s)
{
    if (!is_relative_path(s))
        return;
    for (size_t i = 0; i < ns->n; i++)
        if (strcmp(ns->v[i], s) == 0)
            return;
    ns->v = xrealloc(ns->v, (ns->n + 1) * sizeof *ns->v);
    ns->v[ns->n++] = xstrdup(s);
}

static void names_of_list(struct names *ns, const json_t *list)
{
    for (size_t i = 0; i < json_array_size(list); i++)
        name_add(ns, json_string_value(json_array_get(list, i)));
}

/* What attrs (a group's attributes) names below the group: the multiscales' datasets, the
 * labels and tables lists (an image: its labels and tables groups), an AnnData element's
 * parts by its encoding-type (none, with a table's "type" or "table_version": its X);
 * *files the files an ngio table of another backend keeps
 * (table.csv, table.parquet). A "dict" element (uns, obsm, ...) names nothing. */
static void group_names(const json_t *attrs, struct names *out, struct names *files,
                        struct names *images)
{
    const json_t *wells = json_object_get(json_object_get(attrs, "plate"), "wells");
    for (size_t i = 0; images && i < json_array_size(wells); i++) {
        const char *path = json_string_value(json_object_get(json_array_get(wells, i), "path"));
        if (is_relative_path(path) && strchr(path, '/')) { /* its row's group first */
            char *row = xstrdup(path);
            *strchr(row, '/') = '\0';
            name_add(out, row);
            free(row);
        }
        name_add(out, path);
    }
    const json_t *ims = json_object_get(json_object_get(attrs, "well"), "images");
    for (size_t i = 0; images && i < json_array_size(ims); i++)
        name_add(images, json_string_value(json_object_get(json_array_get(ims, i), "path")));
    const char *backend = json_string_value(json_object_get(attrs, "backend"));
    if (backend && (strcmp(backend, "csv") == 0 || strcmp(backend, "parquet") == 0)) {
        char *f = xasprintf("table.%s", backend);
        name_add(files, f);
        free(f);
    }
    const json_t *ms = json_object_get(attrs, "multiscales");
    for (size_t i = 0; i < json_array_size(ms); i++) {
        const json_t *ds = json_object_get(json_array_get(ms, i), "datasets");
        for (size_t j = 0; j < json_array_size(ds); j++)
            name_add(out, json_string_value(json_object_get(json_array_get(ds, j), "path")));
    }
    names_of_list(out, json_object_get(attrs, "labels"));
    names_of_list(out, json_object_get(attrs, "tables"));
    if (json_array_size(ms)) {
        name_add(out, "labels");
        name_add(out, "tables");
    }
    const char *enc = json_string_value(json_object_get(attrs, "encoding-type"));
    static const char *const anndata[] = {"X",    "obs",  "var",    "obsm", "varm",
                                          "obsp", "varp", "layers", "uns",  "raw"};
    static const char *const sparse[] = {"data", "indices", "indptr"};
    if (!enc) { /* a table without encodings (an ngio ROI table): its X, which roifs reads */
        if (json_object_get(attrs, "table_version") || json_object_get(attrs, "type"))
            name_add(out, "X");
        return;
    }
    if (strcmp(enc, "anndata") == 0 || strcmp(enc, "raw") == 0) {
        for (size_t i = 0; i < sizeof anndata / sizeof *anndata; i++)
            name_add(out, anndata[i]);
    } else if (strcmp(enc, "dataframe") == 0) {
        name_add(out, json_string_value(json_object_get(attrs, "_index")));
        names_of_list(out, json_object_get(attrs, "column-order"));
    } else if (strcmp(enc, "categorical") == 0) {
        name_add(out, "codes");
        name_add(out, "categories");
    } else if (strncmp(enc, "nullable-", 9) == 0) {
        name_add(out, "values");
        name_add(out, "mask");
    } else if (strcmp(enc, "csr_matrix") == 0 || strcmp(enc, "csc_matrix") == 0) {
        for (size_t i = 0; i < 3; i++)
            name_add(out, sparse[i]);
    }
}

/* ---- arrays ---- */

static int u64_list(const json_t *a, uint64_t *v, int max)
{
    if (!json_is_array(a) || json_array_size(a) > (size_t)max)
        return -1;
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_int_t x = json_integer_value(json_array_get(a, i));
        if (!json_is_integer(json_array_get(a, i)) || x < 0)
            return -1;
        v[i] = (uint64_t)x;
    }
    return (int)json_array_size(a);
}

/* The chunk grid and key form of an array's metadata doc (.zarray or zarr.json). */
static int array_grid(const json_t *doc, bool v3, struct rt_array *a, const char *url,
                      struct errbuf *err)
{
    uint64_t shape[ROIFS_MAX_DIM], chunks[ROIFS_MAX_DIM];
    const json_t *cj =
        v3 ? json_object_get(json_object_get(json_object_get(doc, "chunk_grid"), "configuration"),
                             "chunk_shape")
           : json_object_get(doc, "chunks");
    int nd = u64_list(json_object_get(doc, "shape"), shape, ROIFS_MAX_DIM);
    if (nd < 0 || u64_list(cj, chunks, ROIFS_MAX_DIM) != nd)
        return err_set(err, -EINVAL, "%s: no shape and chunks of %d dimensions at most", url,
                       ROIFS_MAX_DIM);
    a->ndim = nd;
    a->n = 1;
    for (int d = 0; d < nd; d++) {
        if (chunks[d] == 0)
            return err_set(err, -EINVAL, "%s: a chunk of size 0", url);
        a->grid[d] = (shape[d] + chunks[d] - 1) / chunks[d];
        a->n = a->grid[d] && a->n > RT_MAX_KEYS / a->grid[d] ? RT_MAX_KEYS + 1 : a->n * a->grid[d];
    }
    if (a->n > RT_MAX_KEYS)
        return err_set(err, -EINVAL, "%s: more than %llu chunks", url,
                       (unsigned long long)RT_MAX_KEYS);
    const char *sep;
    if (v3) {
        const json_t *e = json_object_get(doc, "chunk_key_encoding");
        const char *name = json_string_value(json_object_get(e, "name"));
        sep = json_string_value(json_object_get(json_object_get(e, "configuration"), "separator"));
        a->prefix_c = !name || strcmp(name, "v2") != 0;
        if (!sep)
            sep = a->prefix_c ? "/" : ".";
        a->zero = a->prefix_c ? "c" : "0";
    } else {
        sep = json_string_value(json_object_get(doc, "dimension_separator"));
        if (!sep)
            sep = ".";
        a->zero = "0";
    }
    if (strcmp(sep, ".") != 0 && strcmp(sep, "/") != 0)
        return err_set(err, -EINVAL, "%s: chunk key separator '%s'", url, sep);
    a->sep = sep[0];
    return 0;
}

static char *chunk_key(const struct rt_array *a, uint64_t id)
{
    uint64_t idx[ROIFS_MAX_DIM];
    for (int d = a->ndim - 1; d >= 0; d--) {
        idx[d] = id % a->grid[d];
        id /= a->grid[d];
    }
    if (a->ndim == 0)
        return xstrdup(a->zero);
    size_t cap = (size_t)a->ndim * 22 + 3, pos = 0;
    char *s = xmalloc(cap);
    if (a->prefix_c) {
        s[pos++] = 'c';
        s[pos++] = a->sep;
    }
    for (int d = 0; d < a->ndim; d++) {
        if (d)
            s[pos++] = a->sep;
        pos += (size_t)snprintf(s + pos, cap - pos, "%llu", (unsigned long long)idx[d]);
    }
    return s;
}

/* ---- the walk ---- */

static void lazy_dir(struct overlay_remote *rt, size_t array, int k, uint64_t p, int dir);

static int node(struct walk *w, const char *rel, int depth, struct errbuf *err);

/* A file the group at rel names (not Zarr metadata): shown when its HEAD finds it. */
static int file_child(struct walk *w, const char *rel, const char *name, struct errbuf *err)
{
    char *url =
        *rel ? xasprintf("%s/%s/%s", w->base, rel, name) : xasprintf("%s/%s", w->base, name);
    struct remote_obj o;
    struct errbuf e = {{0}};
    int r = remote_request(url, NULL, true, NULL, 0, NULL, NULL, &o, &e);
    if (r == 0 && o.exists) {
        int dir = *rel ? dir_at(w->rt->ns, w->root, rel) : w->root;
        if (ns_child(w->rt->ns, dir, name) < 0) {
            ns_add_input(w->rt->ns, dir, name, keep(w->rt, url), o.length);
            return 0;
        }
    } else if (r < 0 && r != -ENOENT) {
        err_set(err, r, "%s", e.msg);
    }
    free(url);
    return r == -ENOENT ? 0 : r;
}

static int group_children(struct walk *w, const char *rel, const json_t *attrs, int depth,
                          struct errbuf *err)
{
    struct names names = {0}, files = {0}, images = {0};
    group_names(attrs, &names, &files, w->image ? &images : NULL);
    int r = 0;
    for (size_t i = 0; i < images.n && r == 0; i++) { /* a well's: the plate's to fill */
        char *child = xasprintf("%s/%s", rel, images.v[i]);
        r = w->image(w->ctx, child, dir_at(w->rt->ns, w->root, child), err);
        free(child);
    }
    for (size_t i = 0; i < images.n; i++)
        free(images.v[i]);
    free(images.v);
    for (size_t i = 0; i < files.n && r == 0; i++)
        r = file_child(w, rel, files.v[i], err);
    for (size_t i = 0; i < files.n; i++)
        free(files.v[i]);
    free(files.v);
    for (size_t i = 0; i < names.n && r == 0; i++) {
        char *child = *rel ? xasprintf("%s/%s", rel, names.v[i]) : xstrdup(names.v[i]);
        if (!(w->ov && overlay_owns(w->ov, child)) && strcmp(child, ".roifs") != 0) {
            r = node(w, child, depth + 1, err);
            if (r == -ENOENT) /* named, not there: nothing shown, as a local image would */
                r = 0;
        }
        free(child);
    }
    for (size_t i = 0; i < names.n; i++)
        free(names.v[i]);
    free(names.v);
    return r;
}

/* The metadata of the node at url in format 3 (zarr.json) or 2 (.zarray, else .zgroup, and
 * .zattrs when present): 0, -ENOENT when it has none, else the remote layer's error. */
static int read_meta(const char *url, bool v3, char **meta, const char **meta_name,
                     char **attrs_text, bool *array, struct errbuf *err)
{
    char *u;
    *array = true;
    *meta_name = v3 ? "zarr.json" : ".zarray";
    int r = fetch(u = xasprintf("%s/%s", url, *meta_name), meta, err);
    free(u);
    if (r == -ENOENT && !v3) {
        *array = false;
        *meta_name = ".zgroup";
        r = fetch(u = xasprintf("%s/.zgroup", url), meta, err);
        free(u);
    }
    if (r == 0 && !v3) {
        r = fetch(u = xasprintf("%s/.zattrs", url), attrs_text, err);
        free(u);
        if (r == -ENOENT)
            r = 0;
    }
    if (r < 0) {
        free(*meta);
        *meta = NULL;
    }
    return r;
}

/* The node at rel (relative to the image; "" the image): its metadata files, then what they
 * name. -ENOENT when rel has no metadata. */
static int node(struct walk *w, const char *rel, int depth, struct errbuf *err)
{
    if (depth > RT_MAX_DEPTH)
        return 0;
    char *url = *rel ? xasprintf("%s/%s", w->base, rel) : xstrdup(w->base);
    char *meta = NULL, *attrs_text = NULL;
    const char *meta_name;
    bool array, v3 = w->v3; /* the image's format first, then the other (a table of its own) */
    int r = read_meta(url, v3, &meta, &meta_name, &attrs_text, &array, err);
    if (r == -ENOENT) {
        v3 = !v3;
        r = read_meta(url, v3, &meta, &meta_name, &attrs_text, &array, err);
    }
    json_t *doc = r == 0 ? json_loads(meta, 0, NULL) : NULL;
    json_t *attrs = attrs_text ? json_loads(attrs_text, 0, NULL) : NULL;
    if (r == 0 && v3)
        array = json_string_value(json_object_get(doc, "node_type")) &&
                strcmp(json_string_value(json_object_get(doc, "node_type")), "array") == 0;
    if (r == 0 && (!json_is_object(doc) || (attrs_text && !json_is_object(attrs))))
        r = err_set(err, -EINVAL, "%s/%s: not a JSON object", url,
                    attrs_text ? ".zattrs" : meta_name);
    struct rt_array a = {0};
    if (r == 0 && array)
        r = array_grid(doc, v3, &a, url, err);
    if (r < 0) {
        free(meta);
        free(attrs_text);
        json_decref(doc);
        json_decref(attrs);
        free(url);
        return r;
    }
    struct ns *ns = w->rt->ns;
    int dir = *rel ? dir_at(ns, w->root, rel) : w->root;
    add_meta(w, dir, meta_name, meta);
    if (attrs_text)
        add_meta(w, dir, ".zattrs", attrs_text);
    if (array) {
        struct overlay_remote *rt = w->rt;
        a.url = url;
        a.dir = dir;
        a.state = xcalloc(a.n ? a.n : 1, 1);
        a.nested = a.sep == '/' && a.ndim > 0;
        uint64_t prefixes = 1;
        for (int m = 1; a.nested && m < a.ndim; m++) {
            prefixes *= a.grid[m - 1];
            a.dent[m] = xcalloc(prefixes ? prefixes : 1, sizeof **a.dent);
        }
        rt->a = xrealloc(rt->a, (rt->na + 1) * sizeof *rt->a);
        rt->a[rt->na++] = a;
        lazy_dir(rt, rt->na - 1, a.nested && a.prefix_c ? -1 : 0, 0, dir);
    } else {
        const json_t *at = v3 ? json_object_get(doc, "attributes") : attrs;
        const json_t *ome = json_object_get(at, "ome"); /* OME-Zarr 0.5 */
        r = group_children(w, rel, ome ? ome : at, depth, err);
        if (r == 0 && ome)
            r = group_children(w, rel, at, depth, err);
        free(url);
    }
    json_decref(doc);
    json_decref(attrs);
    return r;
}

/* ---- the fill ---- */

/* A directory of array's keys, filled when looked into. */
static void lazy_dir(struct overlay_remote *rt, size_t array, int k, uint64_t p, int dir)
{
    rt->d = xrealloc(rt->d, (rt->nd + 1) * sizeof *rt->d);
    rt->d[rt->nd] = (struct rt_dir){.array = array, .k = k, .p = p, .dir = dir};
    ns_set_lazy(rt->ns, dir, rt->lazy_base + rt->nd++);
}

/* Keys below a directory that fixes m indices: span(a, m) of them, from prefix * span. */
static uint64_t span(const struct rt_array *a, int m)
{
    uint64_t n = 1;
    for (int d = m; d < a->ndim; d++)
        n *= a->grid[d];
    return n;
}

/* The directory of a nested key's first m indices (prefix q), made when not shown yet. */
static int prefix_dir(struct overlay_remote *rt, size_t ai, int m, uint64_t q, int parent,
                      uint64_t index)
{
    struct rt_array *a = &rt->a[ai];
    if (a->dent[m][q])
        return a->dent[m][q];
    char name[24];
    snprintf(name, sizeof name, "%llu", (unsigned long long)index);
    int dir = ns_add_dir(rt->ns, parent, name);
    a->dent[m][q] = dir;
    lazy_dir(rt, ai, m, q, dir);
    return dir;
}

/* Key id exists (size bytes, URL url, kept): its file, and the directories of its path. */
static void show_key(struct overlay_remote *rt, size_t ai, uint64_t id, char *url, uint64_t size)
{
    struct rt_array *a = &rt->a[ai];
    a->state[id] = 1;
    if (!a->nested) {
        const char *base = strrchr(url, '/') + 1;
        ns_add_input(rt->ns, a->dir, base, keep(rt, url), size);
        return;
    }
    uint64_t idx[ROIFS_MAX_DIM], rest = id;
    for (int d = a->ndim - 1; d >= 0; d--) {
        idx[d] = rest % a->grid[d];
        rest /= a->grid[d];
    }
    int dir = a->dir;
    if (a->prefix_c) {
        if (!a->cdir) {
            a->cdir = ns_add_dir(rt->ns, a->dir, "c");
            lazy_dir(rt, ai, 0, 0, a->cdir);
        }
        dir = a->cdir;
    }
    uint64_t q = 0;
    for (int m = 1; m < a->ndim; m++) {
        q = q * a->grid[m - 1] + idx[m - 1];
        dir = prefix_dir(rt, ai, m, q, dir, idx[m - 1]);
    }
    char name[24];
    snprintf(name, sizeof name, "%llu", (unsigned long long)idx[a->ndim - 1]);
    ns_add_input(rt->ns, dir, name, keep(rt, url), size);
}

/* HEAD requests of keys ids[0..k) (at most REMOTE_BATCH_MAX, not asked yet): each that exists
 * shown, each 404 absent. Returns how many failed otherwise (logged; asked again later). */
static int ask(struct overlay_remote *rt, size_t ai, const uint64_t *ids, size_t k)
{
    struct rt_array *a = &rt->a[ai];
    const char *urls[REMOTE_BATCH_MAX], *inm[REMOTE_BATCH_MAX] = {0};
    struct remote_obj objs[REMOTE_BATCH_MAX];
    int rcs[REMOTE_BATCH_MAX], failed = 0;
    struct errbuf errs[REMOTE_BATCH_MAX];
    memset(errs, 0, sizeof errs);
    for (size_t i = 0; i < k; i++) {
        char *key = chunk_key(a, ids[i]);
        urls[i] = xasprintf("%s/%s", a->url, key);
        free(key);
    }
    if (k)
        remote_head_many(urls, inm, k, objs, rcs, errs);
    for (size_t i = 0; i < k; i++) {
        if (rcs[i] == 0 && objs[i].exists) {
            show_key(rt, ai, ids[i], (char *)urls[i], objs[i].length);
            continue;
        }
        if (rcs[i] == -ENOENT) {
            a->state[ids[i]] = 2;
        } else {
            log_warn("%s", errs[i].msg);
            failed++;
        }
        free((char *)urls[i]);
    }
    return failed;
}

/* Asks the keys of [lo, hi) not asked yet, in batches; with any, stops at the first batch that
 * shows one (the first batch is the first key alone). -1 when some key could not be asked (a
 * failure: asked again at the next look), else 1 when a key of the range is shown, 0 when none
 * exists. */
static int range(struct overlay_remote *rt, size_t ai, uint64_t lo, uint64_t hi, bool any)
{
    struct rt_array *a = &rt->a[ai];
    bool shown = false, failed = false;
    size_t batch = any ? 1 : REMOTE_BATCH_MAX; /* any: the first key alone, most often there */
    for (uint64_t id = lo; id < hi; batch = REMOTE_BATCH_MAX) {
        uint64_t ids[REMOTE_BATCH_MAX];
        size_t k = 0;
        for (; id < hi && k < batch; id++) {
            if (a->state[id] == 1 && any)
                return 1;
            shown |= a->state[id] == 1;
            if (a->state[id] == 0)
                ids[k++] = id;
        }
        failed |= ask(rt, ai, ids, k) > 0;
        for (size_t i = 0; i < k; i++)
            shown |= a->state[ids[i]] == 1;
        if (shown && any)
            return 1;
    }
    return failed ? -1 : shown ? 1 : 0; /* (any: a key shown has returned 1) */
}

/* name as a canonical decimal below bound: 0 with *v, else -1. */
static int index_of(const char *name, uint64_t bound, uint64_t *v)
{
    size_t n = strlen(name);
    if (n == 0 || n > 19 || (name[0] == '0' && n > 1) || strspn(name, "0123456789") != n)
        return -1;
    *v = strtoull(name, NULL, 10);
    return *v < bound ? 0 : -1;
}

/* A flat key's id: 0, else -1 (not a key of the grid, or not in canonical form). */
static int flat_id(const struct rt_array *a, const char *name, uint64_t *id)
{
    *id = 0;
    if (a->ndim == 0)
        return strcmp(name, a->zero) == 0 ? 0 : -1;
    const char *p = name;
    if (a->prefix_c) {
        if (p[0] != 'c' || p[1] != a->sep)
            return -1;
        p += 2;
    }
    for (int d = 0; d < a->ndim; d++) {
        const char *end = d + 1 < a->ndim ? strchr(p, a->sep) : p + strlen(p);
        if (!end || (size_t)(end - p) >= 24)
            return -1;
        char part[24];
        uint64_t v;
        memcpy(part, p, (size_t)(end - p));
        part[end - p] = '\0';
        if (index_of(part, a->grid[d], &v) < 0)
            return -1;
        *id = *id * a->grid[d] + v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* Directory d's entry name (NULL: every entry, for a listing), asked when not known yet.
 * True when every entry of d is known (nothing failed). */
static bool fill_dir(struct overlay_remote *rt, const struct rt_dir *d, const char *name)
{
    struct rt_array *a = &rt->a[d->array];
    uint64_t v;
    if (!a->nested) { /* every key in the array's directory */
        if (!name)
            return range(rt, d->array, 0, a->n, false) >= 0;
        if (flat_id(a, name, &v) == 0)
            range(rt, d->array, v, v + 1, false);
        return false;
    }
    if (d->k < 0) { /* the array's directory: "c" */
        if (!name || strcmp(name, "c") == 0)
            return range(rt, d->array, 0, a->n, true) >= 0 && !name;
        return false;
    }
    uint64_t lo = 0, hi = a->grid[d->k], child = span(a, d->k + 1);
    if (name) {
        if (index_of(name, a->grid[d->k], &v) < 0)
            return false;
        lo = v;
        hi = v + 1;
    }
    bool known = true;
    if (d->k == a->ndim - 1) /* the keys themselves */
        known =
            range(rt, d->array, d->p * a->grid[d->k] + lo, d->p * a->grid[d->k] + hi, false) >= 0;
    else
        for (uint64_t j = lo; j < hi; j++) {
            uint64_t q = d->p * a->grid[d->k] + j;
            if (!a->dent[d->k + 1][q])
                known &= range(rt, d->array, q * child, (q + 1) * child, true) >= 0;
        }
    return known && !name;
}

/* ns_fill_fn: a look into the directory of lazy entry index (name: a lookup's; NULL: a
 * listing). The directory is marked filled once a listing knew every entry. */
static int walk_from(struct walk *w, struct errbuf *err);

static void fill(void *ctx, uint64_t index, const char *name)
{
    struct overlay_remote *rt = ctx;
    pthread_mutex_lock(&rt->lock);
    struct rt_dir d = rt->d[index - rt->lazy_base];
    if (d.image) { /* once: what a failed walk found is shown, the log names its URL */
        struct walk w = {.rt = rt, .base = d.image, .v3 = d.v3, .root = d.dir};
        struct errbuf e = {{0}};
        if (walk_from(&w, &e) < 0)
            log_warn("%s", e.msg);
        ns_filled(rt->ns, d.dir);
    } else if (fill_dir(rt, &d, name))
        ns_filled(rt->ns, d.dir);
    pthread_mutex_unlock(&rt->lock);
}

/* The walk of the node at url below root (w's other fields set by the caller). */
static int walk_from(struct walk *w, struct errbuf *err)
{
    int r = node(w, "", 0, err);
    return r == -ENOENT ? err_set(err, -ENOENT, "%s: no group metadata", w->base) : r;
}

int overlay_remote_build(const struct overlay *ov, struct ns *ns, int root,
                         struct overlay_remote **out, struct errbuf *err)
{
    struct overlay_remote *rt = overlay_remote_new(ns, 0);
    const struct task *t = overlay_array_task(ov, 0);
    struct walk w = {.rt = rt,
                     .ov = ov,
                     .base = overlay_image_dir(ov),
                     .v3 = t->in_meta->format == 3,
                     .root = root};
    *out = rt;
    int r = walk_from(&w, err);
    if (r == 0)
        ns_set_filler(ns, fill, rt);
    return r;
}

struct overlay_remote *overlay_remote_new(struct ns *ns, uint64_t lazy_base)
{
    struct overlay_remote *rt = xcalloc(1, sizeof *rt);
    rt->ns = ns;
    rt->lazy_base = lazy_base;
    pthread_mutex_init(&rt->lock, NULL);
    return rt;
}

int overlay_remote_plate(struct overlay_remote *rt, const char *url, bool v3,
                         overlay_remote_image_fn image, void *ctx, struct errbuf *err)
{
    struct walk w = {.rt = rt, .base = url, .v3 = v3, .root = NS_ROOT, .image = image, .ctx = ctx};
    return walk_from(&w, err);
}

int overlay_remote_add(struct overlay_remote *rt, const struct overlay *ov, const char *url,
                       bool v3, int root, struct errbuf *err)
{
    struct walk w = {.rt = rt, .ov = ov, .base = url, .v3 = v3, .root = root};
    pthread_mutex_lock(&rt->lock);
    int r = walk_from(&w, err);
    pthread_mutex_unlock(&rt->lock);
    return r;
}

void overlay_remote_lazy_image(struct overlay_remote *rt, const char *url, bool v3, int dir)
{
    pthread_mutex_lock(&rt->lock);
    rt->d = xrealloc(rt->d, (rt->nd + 1) * sizeof *rt->d);
    rt->d[rt->nd] = (struct rt_dir){.dir = dir, .image = keep(rt, xstrdup(url)), .v3 = v3};
    ns_set_lazy(rt->ns, dir, rt->lazy_base + rt->nd++);
    pthread_mutex_unlock(&rt->lock);
}

void overlay_remote_fill(struct overlay_remote *rt, uint64_t index, const char *name)
{
    fill(rt, index, name);
}

void overlay_remote_free(struct overlay_remote *rt)
{
    if (!rt)
        return;
    for (size_t i = 0; i < rt->na; i++) {
        free(rt->a[i].url);
        free(rt->a[i].state);
        for (int m = 0; m < ROIFS_MAX_DIM; m++)
            free(rt->a[i].dent[m]);
    }
    free(rt->d);
    free(rt->a);
    for (size_t i = 0; i < rt->nstrs; i++)
        free(rt->strs[i]);
    free(rt->strs);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
}

int overlay_remote_read(const char *url, char **data, size_t *len, struct errbuf *err)
{
    struct remote_obj o;
    return remote_request(url, NULL, false, NULL, (size_t)1 << 31, data, len, &o, err);
}
