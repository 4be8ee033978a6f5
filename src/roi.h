/* roi.h: the ROI list (docs/configuration.md, ROI list file, or a grid) and the index from output
 * chunks to the ROIs that touch them, in list order. The index is a sorted array of (chunk, roi)
 * pairs, so its memory grows with the number of ROI-chunk contacts, never with the size of the
 * array. */
#ifndef ROIFS_ROI_H
#define ROIFS_ROI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

struct roi_set {
    int ndim;
    size_t n;
    uint64_t *start; /* n * ndim, ROI i at start[i * ndim] */
    uint64_t *stop;  /* exclusive */
    /* masked ROIs (docs/masks.md): n labels, 0 for a ROI without one; NULL when no ROI has one */
    uint64_t *label;
};

/* The label of ROI i, 0 when it is not masked. */
static inline uint64_t roi_label(const struct roi_set *rs, size_t i)
{
    return rs->label ? rs->label[i] : 0;
}

/* Parses a ROI list file (docs/configuration.md, ROI list file) for an array of the given shape.
 * Errors: -EINVAL with err->msg = "PATH:LINE: ..." (wrong number of dimensions, start >= stop,
 * outside the array, not an integer); -errno with "PATH: ..." when the file cannot be read. An
 * empty list is an error ("no ROIs"). */
int roi_parse_file(const char *path, int ndim, const uint64_t *shape, struct roi_set *out,
                   struct errbuf *err);
/* Parses ROI list text held in memory; `name` is used in messages. */
int roi_parse_text(const char *name, const char *text, int ndim, const uint64_t *shape,
                   struct roi_set *out, struct errbuf *err);
/* The same with flags: ROI_PARSE_LABELS accepts `@ LABEL` at the end of a line (a positive
 * integer: a masked ROI, docs/masks.md); without it such a line is an error ("needs [rois] mask").
 */
#define ROI_PARSE_LABELS 1u
int roi_parse_file_flags(const char *path, int ndim, const uint64_t *shape, unsigned flags,
                         struct roi_set *out, struct errbuf *err);
int roi_parse_text_flags(const char *name, const char *text, int ndim, const uint64_t *shape,
                         unsigned flags, struct roi_set *out, struct errbuf *err);
/* Tiles the array with boxes of shape tile (C order of tiles; edge boxes clipped). */
int roi_grid(const uint64_t *tile, int ndim, const uint64_t *shape, struct roi_set *out,
             struct errbuf *err);
void roi_set_free(struct roi_set *rs);

/* Read region of ROI i: its box grown by halo (NULL = no halo) and clipped to shape. */
void roi_read_region(const struct roi_set *rs, size_t i, const uint64_t *halo,
                     const uint64_t *shape, uint64_t *rstart, uint64_t *rshape);

/* Range of chunk grid indices [c0, c1) per dimension touched by ROI i's box. */
void roi_chunk_range(const struct roi_set *rs, size_t i, const uint64_t *chunks, uint64_t *c0,
                     uint64_t *c1);

/* ---- ROI tables (roi_table.c): OME-NGFF / Fractal tables in micrometers ---- */

/* Micrometer-to-index rules. FRACTAL: fractal-tasks-core's convert_ROI_table_to_indices,
 * start = round_half_even(x / px), stop = round_half_even((x + len_x) / px), in float32 as
 * NumPy 2 computes it when the table is float32 (double otherwise); a negative index is an
 * error. NGIO: ngio's world_to_pixel in float64: values within 0.01 of an integer snap to it,
 * then floor(start) and ceil(start + len), clamped at 0. */
enum roi_rounding { ROI_ROUND_FRACTAL, ROI_ROUND_NGIO };

enum { ROI_TX, ROI_TY, ROI_TZ, ROI_TLX, ROI_TLY, ROI_TLZ, ROI_TCOLS };

/* The six ROI columns of a table, row by row. */
struct roi_table {
    size_t n;
    double *v;   /* n * ROI_TCOLS: x, y, z, len_x, len_y, len_z (micrometers) */
    bool single; /* the values are float32 (an AnnData X of dtype <f4) */
    /* a masking table ("type": "masking_roi_table"): each row's label (its instance_key
     * column, or the index) and the label image its region.path names (absolute); else NULL */
    uint64_t *label;
    char *region;
};

/* Where the table's spatial axes are in the image and how large its pixels are. */
struct roi_pixels {
    int axis[3];    /* dimension of z, y, x; -1 when the image lacks the axis (z of 2-D) */
    double size[3]; /* pixel size along z, y, x in micrometers */
};

/* Reads a table group: AnnData on Zarr v2 (X plus the column names in var/<_index>) or
 * ngio's CSV backend (table.csv). -EINVAL / -errno with a message naming the file. */
int roi_table_read(const char *path, struct roi_table *t, struct errbuf *err);
/* The table name of OME-Zarr image group (local or a URL) as its tables group lists it (no
 * listing): *path malloc'd GROUP/tables/NAME; -ENOENT when the list does not name it. */
int roi_table_find(const char *group, const char *name, char **path, struct errbuf *err);
void roi_table_free(struct roi_table *t);
/* Converts the table to boxes of an ndim-dimensional array of the given shape: axes other
 * than z, y, x are taken whole; boxes are clipped to the array, and rows left empty are
 * dropped with a warning (none left is an error); a masking table's labels go with them.
 * `name` is used in messages. */
int roi_table_to_set(const char *name, const struct roi_table *t, const struct roi_pixels *px,
                     enum roi_rounding rounding, int ndim, const uint64_t *shape,
                     struct roi_set *out, struct errbuf *err);

struct roi_index;

/* Builds the index for output chunks of shape `chunks` over an array of shape `shape`.
 * 0 or -ENOMEM / -E2BIG (more than 2^32 ROIs). */
int roi_index_build(const struct roi_set *rs, const uint64_t *shape, const uint64_t *chunks,
                    struct roi_index **out, struct errbuf *err);
void roi_index_free(struct roi_index *ix);
/* Number of distinct chunks touched by at least one ROI. */
size_t roi_index_nchunks(const struct roi_index *ix);
/* Linear (C order over the chunk grid) id of the k-th touched chunk; ids ascend with k. */
uint64_t roi_index_chunk_id(const struct roi_index *ix, size_t k);
/* k of the chunk with this linear id, or -1 when no ROI touches it. */
int64_t roi_index_find(const struct roi_index *ix, uint64_t chunk_id);
/* Smallest k whose chunk id is >= chunk_id (nchunks when none). */
size_t roi_index_lower_bound(const struct roi_index *ix, uint64_t chunk_id);
/* The ROIs touching the k-th touched chunk, ascending (list order). */
const uint32_t *roi_index_rois(const struct roi_index *ix, size_t k, size_t *count);
/* Number of chunks ROI i touches. */
uint64_t roi_index_roi_nchunks(const struct roi_index *ix, size_t i);
/* Total (chunk, roi) contacts. */
size_t roi_index_ncontacts(const struct roi_index *ix);

#endif
