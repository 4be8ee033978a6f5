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
    uint8_t *state;   /* per key: 0 not asked yet (or the answer failed), 1 exists, 2 absent */
    bool done;        /* every key answered */
};

struct overlay_remote {
    struct ns *ns;
    pthread_mutex_t lock; /* the fills: one at a time, a second waits for the first */
    struct rt_array *a;
    size_t na;
    char **strs; /* the texts and URLs the tree's entries name */
    size_t nstrs;
};

struct walk {
    struct overlay_remote *rt;
    const struct overlay *ov;
    const char *base; /* the image's URL */
    bool v3;
    int root;
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

static void name_add(struct names *ns, const char *s)
{
    if (!s || !*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 || strstr(s, "/../") ||
        strncmp(s, "../", 3) == 0 || s[0] == '/' || strstr(s, "//"))
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
 * parts by its encoding-type; *files the files an ngio table of another backend keeps
 * (table.csv, table.parquet). A "dict" element (uns, obsm, ...) names nothing. */
static void group_names(const json_t *attrs, struct names *out, struct names *files)
{
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
    if (!enc)
        return;
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
    struct names names = {0}, files = {0};
    group_names(attrs, &names, &files);
    int r = 0;
    for (size_t i = 0; i < files.n && r == 0; i++)
        r = file_child(w, rel, files.v[i], err);
    for (size_t i = 0; i < files.n; i++)
        free(files.v[i]);
    free(files.v);
    for (size_t i = 0; i < names.n && r == 0; i++) {
        char *child = *rel ? xasprintf("%s/%s", rel, names.v[i]) : xstrdup(names.v[i]);
        if (!overlay_owns(w->ov, child) && strcmp(child, ".roifs") != 0) {
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
        rt->a = xrealloc(rt->a, (rt->na + 1) * sizeof *rt->a);
        rt->a[rt->na] = a;
        ns_set_lazy(ns, dir, rt->na++);
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

/* Array index's chunk keys that exist, found by HEAD requests the first time its directory
 * is looked into; a key whose answer failed (not a 404) is asked again at the next look. */
static void fill(void *ctx, uint64_t index)
{
    struct overlay_remote *rt = ctx;
    pthread_mutex_lock(&rt->lock);
    struct rt_array *a = &rt->a[index];
    for (uint64_t id = 0; id < a->n && !a->done;) {
        const char *urls[REMOTE_BATCH_MAX], *inm[REMOTE_BATCH_MAX] = {0};
        char *keys[REMOTE_BATCH_MAX];
        uint64_t ids[REMOTE_BATCH_MAX];
        size_t k = 0;
        for (; id < a->n && k < REMOTE_BATCH_MAX; id++) {
            if (a->state[id])
                continue;
            keys[k] = chunk_key(a, id);
            urls[k] = xasprintf("%s/%s", a->url, keys[k]);
            ids[k++] = id;
        }
        struct remote_obj objs[REMOTE_BATCH_MAX];
        int rcs[REMOTE_BATCH_MAX];
        struct errbuf errs[REMOTE_BATCH_MAX];
        memset(errs, 0, sizeof errs);
        if (k)
            remote_head_many(urls, inm, k, objs, rcs, errs);
        for (size_t i = 0; i < k; i++) {
            if (rcs[i] == 0 && objs[i].exists) {
                a->state[ids[i]] = 1;
                char *slash = strrchr(keys[i], '/');
                int d = a->dir;
                if (slash) {
                    *slash = '\0';
                    d = dir_at(rt->ns, a->dir, keys[i]);
                }
                ns_add_input(rt->ns, d, slash ? slash + 1 : keys[i], keep(rt, (char *)urls[i]),
                             objs[i].length);
                urls[i] = NULL;
            } else if (rcs[i] == -ENOENT) {
                a->state[ids[i]] = 2;
            } else {
                log_warn("%s", errs[i].msg);
            }
            free(keys[i]);
            free((char *)urls[i]);
        }
    }
    bool done = true;
    for (uint64_t id = 0; id < a->n && done; id++)
        done = a->state[id] != 0;
    if (done && !a->done) {
        a->done = true;
        ns_filled(rt->ns, a->dir);
    }
    pthread_mutex_unlock(&rt->lock);
}

int overlay_remote_build(const struct overlay *ov, struct ns *ns, int root,
                         struct overlay_remote **out, struct errbuf *err)
{
    struct overlay_remote *rt = xcalloc(1, sizeof *rt);
    rt->ns = ns;
    pthread_mutex_init(&rt->lock, NULL);
    const struct task *t = overlay_array_task(ov, 0);
    struct walk w = {.rt = rt,
                     .ov = ov,
                     .base = overlay_image_dir(ov),
                     .v3 = t->in_meta->format == 3,
                     .root = root};
    *out = rt;
    int r = node(&w, "", 0, err);
    if (r == -ENOENT)
        r = err_set(err, -ENOENT, "%s: no group metadata", w.base);
    if (r == 0)
        ns_set_filler(ns, fill, rt);
    return r;
}

void overlay_remote_free(struct overlay_remote *rt)
{
    if (!rt)
        return;
    for (size_t i = 0; i < rt->na; i++) {
        free(rt->a[i].url);
        free(rt->a[i].state);
    }
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
