/* store.c: the metadata and tables of an input, read by path: a local file, or an object at
 * an http(s) URL (remote.c). For the readers above the Zarr input reader (ome.c, roi_table.c,
 * the overlays), which never need a directory listing. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "remote.h"
#include "zarr.h"

bool zarr_is_url(const char *path)
{
    return remote_is_url(path);
}

int zarr_store_read(const char *path, char **data, size_t *len, struct errbuf *err)
{
    if (remote_is_url(path))
        return remote_read_text(path, data, len, err);
    int r = file_read_all(path, data, len);
    if (r < 0 && r != -ENOENT && r != -ENOTDIR)
        err_set(err, r, "%s: %s", path, file_strerror(r));
    return r == -ENOTDIR ? -ENOENT : r;
}

bool zarr_store_exists(const char *path)
{
    if (!remote_is_url(path)) {
        struct stat st;
        return stat(path, &st) == 0;
    }
    struct remote_obj o;
    return remote_request(path, NULL, true, NULL, 0, NULL, NULL, &o, NULL) == 0;
}

int zarr_store_read_optional(const char *dir, const char *name, char **data, size_t *len,
                             struct errbuf *err)
{
    if (!remote_is_url(dir))
        return file_read_optional(dir, name, data, len, err);
    char *p = path_join(dir, name);
    int r = remote_read_text(p, data, len, err);
    free(p);
    if (r == -ENOENT) {
        *data = NULL;
        r = 0;
    }
    return r < 0 ? -EINVAL : r;
}

bool zarr_store_node_exists(const char *path)
{
    if (zarr_store_exists(path)) /* a file, or an object */
        return true;
    if (!remote_is_url(path))
        return false;
    /* a URL of a Zarr node (an object store has no "directory" to ask for) */
    static const char *const names[] = {".zattrs", ".zarray", ".zgroup", "zarr.json"};
    bool found = false;
    for (size_t i = 0; !found && i < sizeof names / sizeof *names; i++) {
        char *p = path_join(path, names[i]);
        found = zarr_store_exists(p);
        free(p);
    }
    return found;
}
