/* overlay.h: [output] ome = labels (docs/mounted-tree.md, OME-Zarr label overlay): the input
 * OME-Zarr image presented as it is, plus the label image labels/NAME whose level k ([input] level)
 * is the configured task and whose other levels j are nearest-neighbour resamplings of level k,
 * each a derived task reading level k through its engine (upread.h), computed lazily, each chunk
 * once. This module owns the levels, the checks of the configuration and the metadata files the
 * overlay adds or replaces (the labels and tables lists, the label image's group); overlay_tree.c
 * puts them in the tree, otable.h computes the masking table. */
#ifndef ROIFS_OVERLAY_H
#define ROIFS_OVERLAY_H

#include <stdbool.h>
#include <stddef.h>

#include "../engine/engine.h"
#include "../task.h"
#include "../tree/namespace.h"

#define OVERLAY_MAX_LEVELS 64

struct overlay;

/* A metadata file of the overlay, relative to the image group ("labels/.zattrs"). It takes
 * the place of the input's file of that path, if any. A list file (group "labels" or
 * "tables") follows the input's list: overlay_file_now makes it again at each look. */
struct overlay_file {
    char *path;
    char *text;        /* as at mount */
    const char *group; /* a list file: its group, else NULL */
    const char *name;  /* a list file: the name it adds */
};

/* Checks t0 (a configured task with ome = labels; borrowed, it must outlive the overlay) and
 * builds the levels and the metadata. -EINVAL (exit status 2) with "FILE:LINE: ..." in err
 * for an input that is not an OME-Zarr image group, a non-integer output dtype, a label or
 * table of that name that exists (unless overwrite: `export --into --overwrite`; the input's
 * are then hidden), keys that contradict the overlay. */
int overlay_build(struct task *t0, bool overwrite, struct overlay **out, struct errbuf *err);
/* Frees the derived levels' tasks (after their engines are gone). */
void overlay_free(struct overlay *ov);

/* The label image's levels, as the array set numbers them: array 0 is level k (t0), arrays
 * 1.. are the other levels in increasing order. */
size_t overlay_narrays(const struct overlay *ov);
struct task *overlay_array_task(const struct overlay *ov, size_t array);
int overlay_array_level(const struct overlay *ov, size_t array);
/* False with [measure] labels (docs/measurements.md): the label image is the input's own, shown
 * as the input has it; array 0 (a copy of its level k) is measured, not presented. */
bool overlay_presents_levels(const struct overlay *ov);
/* Level k's engine (NULL: none): the other levels read it. Set before their engines start,
 * cleared after they are gone. */
void overlay_set_engine(struct overlay *ov, struct engine *e);
struct engine *overlay_engine(const struct overlay *ov);

/* A remote image's own files (overlay_remote.h) below directory entry root of ns, after the
 * overlay's entries; kept until overlay_free, which must come after the tree's. 0 or -errno
 * with err set. */
int overlay_build_remote_tree(struct overlay *ov, struct ns *ns, int root, struct errbuf *err);
const char *overlay_image_dir(const struct overlay *ov);
/* The path of level j's array, relative to the image group ("labels/NAME/0"). */
const char *overlay_level_path(const struct overlay *ov, size_t array);
/* The files the overlay adds or replaces, sorted by path. */
const struct overlay_file *overlay_files(const struct overlay *ov, size_t *n);

/* For the masking table: level k's task, its physical scale and translation per dimension
 * (micrometres) and the dimensions of z, y and x (-1 when absent). */
struct overlay_geometry {
    const struct task *t;
    double scale[ROIFS_MAX_DIM], translation[ROIFS_MAX_DIM];
    int axis[3]; /* z, y, x */
};
void overlay_geometry(const struct overlay *ov, struct overlay_geometry *g);
/* True when rel (relative to the image) is the overlay's own group, labels/NAME or
 * tables/NAME, or lies below it: nothing of the input's is shown there, even when the input
 * has (or later gets) a node of that name. */
bool overlay_owns(const struct overlay *ov, const char *rel);
/* The text of file i of overlay_files as it is now (malloc'd): a list file made from the
 * input's list as it is now (with the overlay's name added), any other as at mount. */
char *overlay_file_now(const struct overlay *ov, size_t i);
/* The list file of group ("labels" or "tables") of the image at dir in format 2 or 3 with
 * name added (once), every other content kept: its text (malloc'd) and path (*rel,
 * malloc'd, relative to the image: "labels/.zattrs", "tables/zarr.json"). */
char *overlay_list_text(const char *image, int format, const char *group, const char *name,
                        char **rel);
/* "tables/NAME", or NULL without table_name. */
const char *overlay_table_dir(const struct overlay *ov);

#endif
