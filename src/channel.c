/* channel.c: [input] channel: the input seen without its c axis, an input source wrapping the
 * input's that reads boxes whose c range is [N, N+1) (an extent of 1 leaves the C-order
 * layout of the box unchanged). */
#include "channel.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ome.h"

struct channel_view {
    struct input_source inner; /* the whole input */
    int axis;                  /* the c axis among the input's dimensions */
    uint64_t idx;              /* the channel */
    int ndim;                  /* the input's dimensions, c included */
    struct zarr_meta meta;
    char *names; /* dimension names without c (JSON), or NULL */
};

/* The box of the whole input for a box of the view: c range [idx, idx+1) inserted. */
static void widen(const struct channel_view *v, const uint64_t *start, const uint64_t *shape,
                  uint64_t *s, uint64_t *n)
{
    for (int d = 0, j = 0; d < v->ndim; d++) {
        if (d == v->axis) {
            s[d] = v->idx;
            n[d] = 1;
        } else {
            s[d] = start[j];
            n[d] = shape[j++];
        }
    }
}

static int view_read(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                     uint64_t *sig, struct errbuf *err)
{
    struct channel_view *v = ctx;
    uint64_t s[ROIFS_MAX_DIM], n[ROIFS_MAX_DIM];
    widen(v, start, shape, s, n);
    return v->inner.read(v->inner.ctx, s, n, dst, sig, err);
}

static int view_signature(void *ctx, const uint64_t *start, const uint64_t *shape,
                          struct zarr_sigmemo *memo, uint64_t *sig)
{
    struct channel_view *v = ctx;
    uint64_t s[ROIFS_MAX_DIM], n[ROIFS_MAX_DIM];
    widen(v, start, shape, s, n);
    return v->inner.signature(v->inner.ctx, s, n, memo, sig);
}

/* Index of the entry named "c" (or of type "channel") in a JSON list of names or OME axes. */
static int find_c(const json_t *list, int ndim)
{
    if (!json_is_array(list) || json_array_size(list) != (size_t)ndim)
        return -1;
    for (int i = 0; i < ndim; i++) {
        const json_t *a = json_array_get(list, (size_t)i);
        const char *name = json_is_string(a) ? json_string_value(a)
                                             : json_string_value(json_object_get(a, "name"));
        const char *type = json_string_value(json_object_get(a, "type"));
        if ((name && strcmp(name, "c") == 0) || (type && strcmp(type, "channel") == 0))
            return i;
    }
    return -1;
}

/* The c axis and the list it was found in (new reference, for the names without it). */
static int locate_axis(const struct ome_image *ome, const struct zarr_input *reader, int nd,
                       json_t **names)
{
    int axis = -1;
    *names = NULL;
    if (ome->found && ome->axes_json) {
        json_t *axes = json_loads(ome->axes_json, 0, NULL);
        if ((axis = find_c(axes, nd)) >= 0)
            *names = ome_axes_names(axes);
        json_decref(axes);
        if (axis >= 0)
            return axis;
    }
    const char *text = zarr_input_dimension_names_text(reader);
    json_t *dn = text ? json_loads(text, 0, NULL) : NULL;
    if ((axis = find_c(dn, nd)) >= 0) {
        *names = dn;
        return axis;
    }
    json_decref(dn);
    text = zarr_input_zattrs_text(reader);
    json_t *attrs = text ? json_loads(text, 0, NULL) : NULL;
    json_t *ad = json_object_get(attrs, "_ARRAY_DIMENSIONS");
    if ((axis = find_c(ad, nd)) >= 0)
        *names = json_incref(ad);
    json_decref(attrs);
    return axis;
}

/* Removes entry d of an array of n values. */
static void drop_u64(uint64_t *v, int n, int d)
{
    memmove(&v[d], &v[d + 1], sizeof *v * (size_t)(n - d - 1));
    v[n - 1] = 0;
}

/* The OME description of the view: the axes, scales and spatial indices without c. */
static void drop_ome_axis(struct ome_image *o, int c)
{
    json_t *axes = o->axes_json ? json_loads(o->axes_json, 0, NULL) : NULL;
    if (json_is_array(axes)) {
        json_array_remove(axes, (size_t)c);
        free(o->axes_json);
        o->axes_json = json_dumps(axes, JSON_COMPACT);
    }
    json_decref(axes);
    memmove(&o->scale[c], &o->scale[c + 1], sizeof o->scale[0] * (size_t)(o->ndim - c - 1));
    int *ax[3] = {&o->axis_z, &o->axis_y, &o->axis_x};
    for (int i = 0; i < 3; i++)
        if (*ax[i] > c)
            (*ax[i])--;
    o->ndim--;
}

int channel_open(const struct config *cfg, const struct input_source *inner,
                 const struct ome_image *ome, const struct zarr_input *reader,
                 struct channel_view **out, struct errbuf *err)
{
    *out = NULL;
    if (cfg->channel < 0)
        return 0;
    const struct zarr_meta *in = inner->meta;
    json_t *names;
    int c = locate_axis(ome, reader, in->ndim, &names);
    if (c < 0)
        return config_error(cfg, err, "input", "channel",
                            "[input] channel: the input %s has no c axis (no OME axis, "
                            "dimension_names or _ARRAY_DIMENSIONS entry is named c)",
                            ome->array_path);
    if ((uint64_t)cfg->channel >= in->shape[c]) {
        json_decref(names);
        return config_error(cfg, err, "input", "channel",
                            "[input] channel: %d is out of range (the c axis, dimension %d, has "
                            "%llu channels: 0 to %llu)",
                            cfg->channel, c, (unsigned long long)in->shape[c],
                            (unsigned long long)in->shape[c] - 1);
    }
    if (in->ndim < 2 || cfg->watch) {
        json_decref(names);
        return config_error(cfg, err, "input", "channel",
                            in->ndim < 2 ? "[input] channel: the input has no axis besides c"
                                         : "[input] channel cannot be used with watch = true");
    }
    struct channel_view *v = xcalloc(1, sizeof *v);
    v->inner = *inner;
    v->axis = c;
    v->idx = (uint64_t)cfg->channel;
    v->ndim = in->ndim;
    v->meta = *in;
    drop_u64(v->meta.shape, v->ndim, c);
    drop_u64(v->meta.chunks, v->ndim, c);
    drop_u64(v->meta.shard.inner, v->ndim, c);
    v->meta.ndim--;
    if (json_is_array(names)) {
        json_array_remove(names, (size_t)c);
        v->names = json_dumps(names, JSON_COMPACT);
    }
    json_decref(names);
    *out = v;
    return 0;
}

struct input_source channel_source(struct channel_view *v)
{
    return (struct input_source){&v->meta, view_read, view_signature, v};
}

void channel_ome(const struct channel_view *v, struct ome_image *ome)
{
    if (ome->found)
        drop_ome_axis(ome, v->axis);
}

const char *channel_dimension_names(const struct channel_view *v)
{
    return v ? v->names : NULL;
}

void channel_close(struct channel_view *v)
{
    if (!v)
        return;
    free(v->names);
    free(v);
}

int channel_axis(const struct channel_view *v)
{
    return v->axis;
}
