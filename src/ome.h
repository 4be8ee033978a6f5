/* ome.h: OME-NGFF image groups (multiscales 0.4 in .zattrs, 0.5 in zarr.json attributes.ome):
 * which array an [input] path names, and the physical pixel size of each of its axes. */
#ifndef ROIFS_OME_H
#define ROIFS_OME_H

#include <jansson.h>
#include <stdbool.h>

#include "util.h"

struct ome_image {
    char *array_path;           /* the Zarr array to read (malloc'd) */
    bool is_group;              /* the path named the image group, array_path is datasets[level] */
    bool found;                 /* multiscales metadata describes array_path (fields below valid) */
    char *group_path;           /* the image group (malloc'd; NULL when !found) */
    int level;                  /* index of the dataset in datasets */
    int ndim;                   /* number of axes */
    int axis_z, axis_y, axis_x; /* dimension of each spatial axis, -1 when absent */
    double scale[ROIFS_MAX_DIM]; /* per axis: dataset scale times the multiscale-level scale */
    char *axes_json;             /* the multiscales "axes" as JSON text (malloc'd) */
};

/* Resolves path: an image group (a directory whose metadata holds "multiscales") gives its
 * datasets[level] array; an array gives itself, described by its parent group's multiscales
 * when the parent is an image group with a dataset of that name (found). Anything else is
 * left for the array reader to refuse (array_path = path). 0 or -EINVAL with a message. */
int ome_resolve(const char *path, int level, struct ome_image *img, struct errbuf *err);
void ome_image_free(struct ome_image *img);
/* The index of the channel called name in the image group's omero.channels: the first whose
 * "label" is name, else the first whose "wavelength_id" is. 0, or -EINVAL saying why. */
int ome_channel_index(const char *group, const char *name, int *index, struct errbuf *err);

/* The OME-NGFF "axes" of an image of ndim dimensions made from img: img's axes when they
 * describe ndim dimensions (string axes become objects; a missing "type" is inferred from
 * the names t, c, z, y, x), else the last ndim of t, c, z, y, x. NULL with err->msg saying
 * why when they break a MUST of OME-NGFF 0.4 and 0.5: 2 to 5 axes with unique names, 2 or 3
 * of type space, at most one time and one channel or custom axis, in that order. */
json_t *ome_output_axes(const struct ome_image *img, int ndim, struct errbuf *err);

/* The attributes of the image group dir (a new reference in *attrs: .zattrs, or zarr.json's
 * "attributes") and its first multiscale (*ms, borrowed from them). -EINVAL with a message
 * when dir is not an image group. */
int ome_group_attrs(const char *dir, json_t **attrs, json_t **ms, struct errbuf *err);

/* The names of axes as a JSON list (new reference). */
json_t *ome_axes_names(const json_t *axes);

#endif
