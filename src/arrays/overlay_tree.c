/* overlay_tree.c: the tree of ome = labels (overlay.h): the input image group as it is at
 * each look (its directories mirrored, namespace.h: files added or removed while mounted are
 * seen; a remote image's derived from its metadata, overlay_remote.h), the overlay's
 * metadata files in the place of the input's of the same path, the label image's levels and
 * the masking table. */
#include "overlay_tree.h"

#include <stdlib.h>
#include <string.h>

#include "../zarr/zarr.h"

/* The directory entry of rel's directories (made when absent; with whole, rel itself is one
 * too); *base gets rel's last name. A directory made inside a mirrored one mirrors the
 * input's directory of the same path, unless the overlay owns it (labels/NAME, tables/NAME). */
static int dir_of(const struct overlay *ov, struct ns *ns, int root, const char *rel, bool whole,
                  const char **base)
{
    int dir = root;
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
        if (c < 0) {
            c = ns_add_dir(ns, dir, name);
            size_t plen = (size_t)(p - rel) + len;
            char *prefix = xmalloc(plen + 1);
            memcpy(prefix, rel, plen);
            prefix[plen] = '\0';
            if (ns_is_mirror(ns, dir) && !overlay_owns(ov, prefix)) {
                char *path = path_join(overlay_image_dir(ov), prefix);
                ns_mirror(ns, c, path, NULL);
                free(path);
            }
            free(prefix);
        }
        dir = c;
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

int overlay_tree_build(struct overlay *ov, const struct otable *tab, struct ns *ns, int root,
                       int array_base, uint64_t index_base, bool status, struct errbuf *err)
{
    int r = 0;
    /* the input image as it is now; not its .roifs, the status of the roifs mount it may be
     * read from (a chained mount): this mount's own takes its place. A remote image cannot
     * be listed: a mount's (or serve's) tree of it is derived from its metadata once the
     * overlay's entries are in (overlay_remote.h); warm and export --into read none of it. */
    bool remote = zarr_is_url(overlay_image_dir(ov));
    if (!remote)
        ns_mirror(ns, root, overlay_image_dir(ov), ".roifs");
    size_t nf;
    const struct overlay_file *f = overlay_files(ov, &nf);
    for (size_t i = 0; i < nf; i++) {
        const char *base;
        int dir = dir_of(ov, ns, root, f[i].path, false, &base);
        if (f[i].group) /* the input's list as it is now, with the overlay's name */
            ns_add_generated(ns, dir, base, index_base + i);
        else
            ns_add_file(ns, dir, base, f[i].text);
    }
    if (status && ns_child(ns, NS_ROOT, ".roifs") < 0)
        ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    for (size_t i = 0; overlay_presents_levels(ov) && i < overlay_narrays(ov) && r == 0; i++)
        r = ns_add_array(ns, dir_of(ov, ns, root, overlay_level_path(ov, i), true, NULL),
                         overlay_array_task(ov, i), array_base + (int)i, err);
    if (r < 0)
        return r;
    if (!tab)
        return remote && status ? overlay_build_remote_tree(ov, ns, root, err) : 0;
    for (size_t i = 0; i < otable_nfiles(tab); i++) {
        char *rel = xasprintf("tables/%s/%s", otable_table_name(tab, i), otable_path(tab, i));
        const char *base;
        int dir = dir_of(ov, ns, root, rel, false, &base);
        ns_add_table(ns, dir, base, index_base + i);
        free(rel);
    }
    return remote && status ? overlay_build_remote_tree(ov, ns, root, err) : 0;
}
