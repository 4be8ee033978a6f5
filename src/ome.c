/* ome.c: reads the OME-NGFF multiscales of an image group (0.4 and 0.5) to turn an [input]
 * path into an array and to know the pixel size that ROI tables in micrometers refer to. */
#include "ome.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zarr/zarr.h"

/* The node metadata of dir: .zattrs (v2) or zarr.json's "attributes" (v3), and whether the
 * node is an array. *attrs NULL when there are none. */
static int node_attrs(const char *dir, bool *is_array, json_t **attrs, struct errbuf *err)
{
    char *p = path_join(dir, ".zarray");
    *is_array = zarr_store_exists(p);
    free(p);
    *attrs = NULL;
    char *text;
    size_t len;
    int r = zarr_store_read_optional(dir, "zarr.json", &text, &len, err);
    if (r == 0 && text) {
        json_t *root = json_loadb(text, len, 0, NULL);
        free(text);
        const char *nt = json_string_value(json_object_get(root, "node_type"));
        if (nt && strcmp(nt, "array") == 0)
            *is_array = true;
        *attrs = json_incref(json_object_get(root, "attributes"));
        json_decref(root);
    } else if (r == 0 && (r = zarr_store_read_optional(dir, ".zattrs", &text, &len, err)) == 0 &&
               text) {
        *attrs = json_loadb(text, len, 0, NULL);
        free(text);
    }
    return r;
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
    json_t *attrs;
    int r = node_attrs(path, &is_array, &attrs, err);
    if (r < 0)
        return r;
    json_t *ms = is_array ? NULL : first_multiscale(attrs);
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
    json_t *pattrs;
    r = node_attrs(parent, &parent_is_array, &pattrs, err);
    json_t *pms = r < 0 || parent_is_array ? NULL : first_multiscale(pattrs);
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

/* ---- the axes of an OME-Zarr output ---- */

static const char *const generic_names[] = {"t", "c", "z", "y", "x"};
static const char *const generic_types[] = {"time", "channel", "space", "space", "space"};

static const char *type_of_name(const char *name)
{
    for (int k = 0; k < 5; k++)
        if (strcmp(name, generic_names[k]) == 0)
            return generic_types[k];
    return NULL;
}

/* img's axes as objects, each with a "type" where its name says it. */
static json_t *input_axes(const struct ome_image *img)
{
    json_t *a = json_loads(img->axes_json, 0, NULL), *res = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        json_t *o = json_is_string(v) ? json_pack("{s:O}", "name", v) : json_deep_copy(v);
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *type = name ? type_of_name(name) : NULL;
        if (json_is_object(o) && !json_object_get(o, "type") && type)
            json_object_set_new(o, "type", json_string(type));
        json_array_append_new(res, o);
    }
    json_decref(a);
    return res;
}

/* 0 when axes keep the MUST rules of OME-NGFF 0.4 and 0.5 on "axes"; else -EINVAL. */
static int check_axes(const json_t *axes, struct errbuf *err)
{
    size_t n = json_array_size(axes), nspace = 0, ntime = 0, nother = 0;
    int rank_prev = 0;
    for (size_t d = 0; d < n; d++) {
        json_t *a = json_array_get(axes, d);
        const char *name = json_string_value(json_object_get(a, "name"));
        if (!json_is_object(a) || !name)
            return err_set(err, -EINVAL, "axis %zu has no name", d);
        for (size_t e = 0; e < d; e++) /* the earlier axes have names: checked */
            if (strcmp(name, json_string_value(json_object_get(json_array_get(axes, e), "name"))) ==
                0)
                return err_set(err, -EINVAL, "the axis name '%s' is used twice", name);
        json_t *tv = json_object_get(a, "type");
        if (tv && !json_is_string(tv))
            return err_set(err, -EINVAL, "the type of axis '%s' is not a string", name);
        const char *type = json_string_value(tv);
        int rank = type && strcmp(type, "time") == 0    ? 0
                   : type && strcmp(type, "space") == 0 ? 2
                                                        : 1;
        if (rank < rank_prev)
            return err_set(err, -EINVAL,
                           "axis '%s' comes after a %s axis (the order must be time, then channel "
                           "or custom, then space)",
                           name, rank_prev == 2 ? "space" : "channel or custom");
        rank_prev = rank;
        nspace += rank == 2;
        ntime += rank == 0;
        nother += rank == 1;
    }
    if (nspace < 2 || nspace > 3)
        return err_set(err, -EINVAL, "%zu axes of type space (2 or 3 are needed)", nspace);
    if (ntime > 1 || nother > 1)
        return err_set(err, -EINVAL, "more than one %s axis",
                       ntime > 1 ? "time" : "channel or custom");
    return 0;
}

json_t *ome_output_axes(const struct ome_image *img, int ndim, struct errbuf *err)
{
    if (ndim < 2 || ndim > 5) {
        err_set(err, -EINVAL, "OME-NGFF images have 2 to 5 axes, the input has %d dimensions",
                ndim);
        return NULL;
    }
    json_t *axes;
    bool from_input = img->found && img->ndim == ndim && img->axes_json;
    if (from_input) {
        axes = input_axes(img);
    } else {
        axes = json_array();
        for (int k = 5 - ndim; k < 5; k++)
            json_array_append_new(
                axes, json_pack("{s:s, s:s}", "name", generic_names[k], "type", generic_types[k]));
    }
    struct errbuf e;
    if (check_axes(axes, &e) < 0) {
        char *text = json_dumps(axes, JSON_COMPACT);
        err_set(err, -EINVAL, "the input's axes %s are not valid OME-NGFF axes: %s", text, e.msg);
        free(text);
        json_decref(axes);
        return NULL;
    }
    return axes;
}

json_t *ome_axes_names(const json_t *axes)
{
    json_t *names = json_array();
    for (size_t i = 0; i < json_array_size(axes); i++)
        json_array_append(names, json_object_get(json_array_get(axes, i), "name"));
    return names;
}

int ome_group_attrs(const char *dir, json_t **attrs, json_t **ms, struct errbuf *err)
{
    bool is_array;
    int r = node_attrs(dir, &is_array, attrs, err);
    if (r < 0)
        return r;
    *ms = is_array ? NULL : first_multiscale(*attrs);
    if (!json_is_object(*ms)) {
        json_decref(*attrs);
        *attrs = NULL;
        return err_set(err, -EINVAL, "%s is not an OME-Zarr image group (no multiscales)", dir);
    }
    return 0;
}
