/* overlay_tree.c: the tree of ome = labels (overlay.h): every file of the input image group
 * as a file read through (walked once, at mount), the overlay's metadata files in the place
 * of the input's of the same path, the label image's levels and the masking table. */
#include "overlay_tree.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WALK_MAX_DEPTH 32 /* deeper than any Zarr hierarchy roifs reads; stops symlink loops */

static bool replaced(const struct overlay *ov, const char *rel)
{
    size_t n;
    const struct overlay_file *f = overlay_files(ov, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].path, rel) == 0)
            return true;
    return false;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names in directory path, sorted (malloc'd), without . and ..; -errno. */
static int list_dir(const char *path, char ***names, size_t *n)
{
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    size_t cap = 16;
    *names = xmalloc(cap * sizeof **names);
    *n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if (*n == cap)
            *names = xrealloc(*names, (cap *= 2) * sizeof **names);
        (*names)[(*n)++] = xstrdup(de->d_name);
    }
    closedir(d);
    qsort(*names, *n, sizeof **names, by_name);
    return 0;
}

/* Adds the files of the input directory path (rel below the image group) under entry dir. */
static int walk(const struct overlay *ov, struct ns *ns, int dir, const char *path, const char *rel,
                int depth, struct errbuf *err)
{
    char **names = NULL;
    size_t n = 0;
    int r = list_dir(path, &names, &n);
    if (r < 0)
        return err_set(err, r, "%s: cannot list: %s", path, strerror(-r));
    for (size_t i = 0; i < n && r == 0; i++) {
        char *p = path_join(path, names[i]);
        char *q = *rel ? xasprintf("%s/%s", rel, names[i]) : xstrdup(names[i]);
        struct stat st;
        if (!*rel && strcmp(names[i], ".roifs") == 0) {
            /* the status of the roifs mount the image is read from (a chained mount): not a
             * file of the image; this mount's own takes its place */
        } else if (stat(p, &st) < 0 || replaced(ov, q) || overlay_hides(ov, q)) {
            /* gone since listed, or a file or group the overlay replaces */
        } else if (S_ISDIR(st.st_mode) && depth < WALK_MAX_DEPTH) {
            r = walk(ov, ns, ns_add_dir(ns, dir, names[i]), p, q, depth + 1, err);
        } else if (S_ISREG(st.st_mode)) {
            ns_add_input(ns, dir, names[i], p);
        }
        free(p);
        free(q);
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return r;
}

/* The directory entry of rel's directories (made when absent; with whole, rel itself is one
 * too); *base gets rel's last name. */
static int dir_of(struct ns *ns, const char *rel, bool whole, const char **base)
{
    int dir = NS_ROOT;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (!slash && !whole)
            break;
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        char *name = xmalloc(len + 1);
        memcpy(name, p, len);
        name[len] = '\0';
        int c = ns_child(ns, dir, name);
        dir = c >= 0 ? c : ns_add_dir(ns, dir, name);
        free(name);
        p += len;
        if (!slash)
            break;
        p++;
    }
    if (base)
        *base = p;
    return dir;
}

int overlay_tree_build(const struct overlay *ov, const struct otable *tab, struct ns *ns,
                       bool status, struct errbuf *err)
{
    int r = walk(ov, ns, NS_ROOT, overlay_image_dir(ov), "", 0, err);
    if (r < 0)
        return r;
    size_t nf;
    const struct overlay_file *f = overlay_files(ov, &nf);
    for (size_t i = 0; i < nf; i++) {
        const char *base;
        int dir = dir_of(ns, f[i].path, false, &base);
        ns_add_file(ns, dir, base, f[i].text);
    }
    if (status && ns_child(ns, NS_ROOT, ".roifs") < 0)
        ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    for (size_t i = 0; i < overlay_narrays(ov) && r == 0; i++)
        r = ns_add_array(ns, dir_of(ns, overlay_level_path(ov, i), true, NULL),
                         overlay_array_task(ov, i), (int)i, err);
    if (!tab || r < 0)
        return r;
    for (size_t i = 0; i < otable_nfiles(tab); i++) {
        char *rel = xasprintf("%s/%s", overlay_table_dir(ov), otable_path(tab, i));
        const char *base;
        int dir = dir_of(ns, rel, false, &base);
        ns_add_table(ns, dir, base, i);
        free(rel);
    }
    return 0;
}
