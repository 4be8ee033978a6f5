/* ome.c: reads the OME-NGFF multiscales of an image group (0.4 and 0.5) to turn an [input]
 * path into an array and to know the pixel size that ROI tables in micrometers refer to. */
#include "ome.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The node metadata of dir: .zattrs (v2) or zarr.json's "attributes" (v3), and whether the
 * node is an array. NULL attributes when there are none. */
static json_t *node_attrs(const char *dir, bool *is_array)
{
    char *p = path_join(dir, ".zarray");
    struct stat st;
    *is_array = stat(p, &st) == 0;
    free(p);
    char *text;
    size_t len;
    json_t *attrs = NULL;
    p = path_join(dir, "zarr.json");
    if (file_read_all(p, &text, &len) == 0) {
        json_t *root = json_loadb(text, len, 0, NULL);
        free(text);
        const char *nt = json_string_value(json_object_get(root, "node_type"));
        if (nt && strcmp(nt, "array") == 0)
            *is_array = true;
        attrs = json_incref(json_object_get(root, "attributes"));
        json_decref(root);
    } else {
        char *z = path_join(dir, ".zattrs");
        if (file_read_all(z, &text, &len) == 0) {
            attrs = json_loadb(text, len, 0, NULL);
            free(text);
        }
        free(z);
    }
    free(p);
    return attrs;
}

/* attributes.ome.multiscales (0.5) or attributes.multiscales (0.4); the first one. */
static json_t *first_multiscale(json_t *attrs)
{
    json_t *ms = json_object_get(json_object_get(attrs, "ome"), "multiscales");
    if (!ms)
        ms = json_object_get(attrs, "multiscales");
    return json_array_get(ms, 0);
}

/* The "scale" vector of a coordinateTransformations list into s (ndim entries); absent: 1. */
static int read_scale(json_t *cts, int ndim, double *s, const char *where, struct errbuf *err)
{
    for (int d = 0; d < ndim; d++)
        s[d] = 1.0;
    size_t i;
    json_t *ct;
    json_array_foreach(cts, i, ct)
    {
        const char *type = json_string_value(json_object_get(ct, "type"));
        if (!type || strcmp(type, "scale") != 0)
            continue;
        json_t *v = json_object_get(ct, "scale");
        if (json_array_size(v) != (size_t)ndim)
            return err_set(err, -EINVAL, "%s: \"scale\" has %zu entries, the axes are %d", where,
                           json_array_size(v), ndim);
        for (int d = 0; d < ndim; d++) {
            json_t *x = json_array_get(v, (size_t)d);
            if (!json_is_number(x) || !(json_number_value(x) > 0))
                return err_set(err, -EINVAL, "%s: \"scale\" entry %d is not a positive number",
                               where, d);
            s[d] = json_number_value(x);
        }
    }
    return 0;
}

/* Fills img from multiscale ms for dataset k. */
static int describe(json_t *ms, size_t k, const char *where, struct ome_image *img,
                    struct errbuf *err)
{
    json_t *axes = json_object_get(ms, "axes");
    size_t n = json_array_size(axes);
    if (n < 1 || n > ROIFS_MAX_DIM)
        return err_set(err, -EINVAL, "%s: multiscales has no valid \"axes\"", where);
    img->ndim = (int)n;
    free(img->axes_json);
    img->axes_json = json_dumps(axes, JSON_COMPACT);
    img->axis_x = img->axis_y = img->axis_z = -1;
    for (size_t d = 0; d < n; d++) {
        json_t *a = json_array_get(axes, d);
        const char *name = json_is_string(a) ? json_string_value(a)
                                             : json_string_value(json_object_get(a, "name"));
        if (!name)
            return err_set(err, -EINVAL, "%s: axis %zu has no name", where, d);
        if (strcmp(name, "x") == 0)
            img->axis_x = (int)d;
        else if (strcmp(name, "y") == 0)
            img->axis_y = (int)d;
        else if (strcmp(name, "z") == 0)
            img->axis_z = (int)d;
    }
    json_t *ds = json_array_get(json_object_get(ms, "datasets"), k);
    double global[ROIFS_MAX_DIM];
    int r = read_scale(json_object_get(ds, "coordinateTransformations"), img->ndim, img->scale,
                       where, err);
    if (r == 0)
        r = read_scale(json_object_get(ms, "coordinateTransformations"), img->ndim, global, where,
                       err);
    if (r < 0)
        return r;
    for (int d = 0; d < img->ndim; d++)
        img->scale[d] *= global[d];
    img->level = (int)k;
    img->found = true;
    return 0;
}

/* Last path component of p without trailing slashes (malloc'd). */
static char *base_name(const char *p)
{
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/')
        len--;
    size_t b = len;
    while (b > 0 && p[b - 1] != '/')
        b--;
    return strndup(p + b, len - b);
}

static char *strip_slashes(const char *p)
{
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/')
        len--;
    return strndup(p, len);
}

int ome_resolve(const char *path, int level, struct ome_image *img, struct errbuf *err)
{
    memset(img, 0, sizeof *img);
    bool is_array;
    json_t *attrs = node_attrs(path, &is_array);
    json_t *ms = is_array ? NULL : first_multiscale(attrs);
    int r = 0;
    if (ms) { /* an image group: datasets[level] */
        json_t *datasets = json_object_get(ms, "datasets");
        if ((size_t)level >= json_array_size(datasets)) {
            r = err_set(err, -EINVAL, "%s: level %d is out of range (the image has %zu levels)",
                        path, level, json_array_size(datasets));
            goto out;
        }
        const char *p = json_string_value(json_object_get(json_array_get(datasets, level), "path"));
        if (!p || !p[0] || p[0] == '/' || strstr(p, "..")) {
            r = err_set(err, -EINVAL, "%s: multiscales datasets[%d] has no valid \"path\"", path,
                        level);
            goto out;
        }
        img->is_group = true;
        img->group_path = strip_slashes(path);
        img->array_path = path_join(img->group_path, p);
        r = describe(ms, (size_t)level, path, img, err);
        goto out;
    }
    img->array_path = strip_slashes(path);
    if (level != 0 && is_array) {
        r = err_set(err, -EINVAL, "level %d needs an OME-Zarr image group, %s is an array", level,
                    path);
        goto out;
    }
    if (!is_array)
        goto out; /* neither: the array reader says what is wrong */
    char *parent = path_dirname(img->array_path);
    char *name = base_name(img->array_path);
    bool parent_is_array;
    json_t *pattrs = node_attrs(parent, &parent_is_array);
    json_t *pms = parent_is_array ? NULL : first_multiscale(pattrs);
    size_t k;
    json_t *ds;
    json_array_foreach(json_object_get(pms, "datasets"), k, ds)
    {
        const char *p = json_string_value(json_object_get(ds, "path"));
        char *pp = p ? strip_slashes(p) : NULL;
        bool match = pp && strcmp(pp, name) == 0;
        free(pp);
        if (match) {
            img->group_path = xstrdup(parent);
            r = describe(pms, k, parent, img, err);
            break;
        }
    }
    json_decref(pattrs);
    free(parent);
    free(name);
out:
    json_decref(attrs);
    return r;
}

void ome_image_free(struct ome_image *img)
{
    free(img->array_path);
    free(img->group_path);
    free(img->axes_json);
    memset(img, 0, sizeof *img);
}
