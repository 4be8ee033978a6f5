/* task_measured.c: [measure] labels = NAME (see task_measured.h). */
#include "task_measured.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int zarr_source_read(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                            uint64_t *sig, struct errbuf *err)
{
    return sig ? zarr_input_read_sig(ctx, start, shape, dst, sig, err)
               : zarr_input_read(ctx, start, shape, dst, err);
}

static int zarr_source_signature(void *ctx, const uint64_t *start, const uint64_t *shape,
                                 struct zarr_sigmemo *memo, uint64_t *sig)
{
    return zarr_input_signature_memo(ctx, start, shape, memo, sig);
}

void task_zarr_source(struct zarr_input *r, struct input_source *s)
{
    *s = (struct input_source){.meta = zarr_input_meta(r),
                               .read = zarr_source_read,
                               .signature = zarr_source_signature,
                               .ctx = r};
}

/* The image's c axis by its OME axes (name "c" or type "channel"), -1 when none. */
static int ome_c_axis(const struct ome_image *o)
{
    json_t *axes = o->axes_json ? json_loads(o->axes_json, 0, NULL) : NULL;
    int c = -1;
    for (size_t i = 0; i < json_array_size(axes) && c < 0; i++) {
        json_t *a = json_array_get(axes, i);
        const char *name = json_is_string(a) ? json_string_value(a)
                                             : json_string_value(json_object_get(a, "name"));
        const char *type = json_string_value(json_object_get(a, "type"));
        if ((name && strcmp(name, "c") == 0) || (type && strcmp(type, "channel") == 0))
            c = (int)i;
    }
    json_decref(axes);
    return c;
}

/* Whether the image array im (OME metadata o) has the label array lm's shape, but for its c
 * axis. */
static bool same_shape_but_c(const struct zarr_meta *im, const struct ome_image *o,
                             const struct zarr_meta *lm)
{
    int c = im->ndim == lm->ndim + 1 ? ome_c_axis(o) : -1;
    if (im->ndim != lm->ndim + (c >= 0))
        return false;
    for (int d = 0, k = 0; d < im->ndim; d++)
        if (d != c && im->shape[d] != lm->shape[k++])
            return false;
    return true;
}

/* The image's level measured: the one whose shape is the label level's (docs/measurements.md),
 * in the place of the level [input] level named when that one has another shape. */
static int match_image_level(struct task *t, const struct zarr_meta *lm, struct errbuf *err)
{
    if (same_shape_but_c(t->in_meta, &t->ome, lm))
        return 0;
    for (int j = 0; j < 64 && t->ome.is_group; j++) {
        struct ome_image o;
        struct zarr_input *in;
        struct errbuf e;
        if (ome_resolve(t->ome.group_path, j, &o, &e) < 0)
            break;
        if (zarr_input_open(o.array_path, 64u << 20, &in, &e) < 0) {
            ome_image_free(&o);
            continue;
        }
        if (!same_shape_but_c(zarr_input_meta(in), &o, lm)) {
            zarr_input_close(in);
            ome_image_free(&o);
            continue;
        }
        zarr_input_close(t->reader);
        ome_image_free(&t->ome);
        t->ome = o;
        t->reader = in;
        zarr_input_set_verify(t->reader, t->cfg.verify == 1);
        task_zarr_source(t->reader, &t->source);
        t->in_meta = t->source.meta;
        return 0;
    }
    return config_error(
        &t->cfg, err, "measure", "labels",
        "[measure] labels: no level of the image %s has the shape of level %d of the label "
        "image '%s'",
        t->ome.group_path, t->cfg.level, t->cfg.measure_labels);
}

/* [measure] labels = NAME (docs/measurements.md): the level [input] level of the input image's
 * label image labels/NAME, opened beside the intensities' reader (then of the image's level of
 * its shape). An image with one dimension
 * more than it (its c axis) is viewed as one channel ([input] channel 0 unless set), so that the
 * presented axes are the label image's; measure.c reads every channel through reader. */
int task_open_measured(struct task *t, struct errbuf *err)
{
    if (!t->cfg.measure_labels)
        return 0;
    if (!t->ome.found || !t->ome.group_path)
        return config_error(
            &t->cfg, err, "measure", "labels",
            "[measure] labels: [input] path %s is not an OME-Zarr image (group or dataset)",
            t->cfg.input_path);
    char *dir = xasprintf("%s/labels/%s", t->ome.group_path, t->cfg.measure_labels);
    struct ome_image lo;
    struct errbuf e;
    int r = ome_resolve(dir, t->cfg.level, &lo, &e);
    if (r == 0 && (!lo.found || !lo.is_group)) {
        r = -EINVAL;
        snprintf(e.msg, sizeof e.msg, "%s is not an OME-Zarr label image", dir);
    }
    if (r == 0)
        r = zarr_input_open(lo.array_path, 64u << 20, &t->measured, &e);
    ome_image_free(&lo);
    free(dir);
    if (r < 0)
        return config_error(&t->cfg, err, "measure", "labels", "[measure] labels: %s", e.msg);
    zarr_input_set_verify(t->measured, t->cfg.verify == 1);
    const struct zarr_meta *lm = zarr_input_meta(t->measured);
    if (lm->dtype.kind != DT_INT && lm->dtype.kind != DT_UINT)
        return config_error(&t->cfg, err, "measure", "labels",
                            "[measure] labels: the label image '%s' is not of an integer dtype",
                            t->cfg.measure_labels);
    if ((r = match_image_level(t, lm, err)) < 0)
        return r;
    if (t->in_meta->ndim == lm->ndim + 1 && t->cfg.channel < 0)
        t->cfg.channel = 0;
    return 0;
}

/* After the channel view: the task's input is the label image (each ROI, a chunk of it, is
 * copied), so that every chunk's key follows the label image's content. */
void task_read_measured(struct task *t)
{
    if (!t->measured)
        return;
    task_zarr_source(t->measured, &t->source);
    t->in_meta = t->source.meta;
}
