/* table_write.h: encodes a masking ROI table (docs/ome-fractal.md, Masking ROI tables written by
 * roifs) as the files of its Zarr group tables/NAME/, in memory: AnnData's Zarr encoding or ngio's
 * CSV back end, Zarr v2 or v3. */
#ifndef ROIFS_TABLE_WRITE_H
#define ROIFS_TABLE_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* How the table is stored: an AnnData object, or table.csv next to the group attributes. */
enum table_backend { TABLE_ANNDATA, TABLE_CSV };

/* One object: its id in the label image and its bounding box in micrometres, per axis in the
 * order z, y, x. An image without a z axis has start[0] = 0 and length[0] = 1
 * (docs/ome-fractal.md). */
struct table_row {
    uint64_t label;
    double start[3];
    double length[3];
};

struct table_spec {
    int zarr_format; /* 2 or 3: the format of the image the table belongs to */
    enum table_backend backend;
    const char *region_path; /* the label image, relative to the table group: "../labels/NAME" */
    const char *type;        /* the table's "type"; NULL: "masking_roi_table" */
};

/* One file of the table group; path is relative to tables/NAME/ ("X/.zarray", "table.csv").
 * Directories are the paths' prefixes; data is not NUL-terminated. */
struct table_file {
    char *path;
    unsigned char *data;
    size_t len;
};

/* The whole group, sorted by path (strcmp), so that lookups can bisect. */
struct table_files {
    struct table_file *v;
    size_t n;
};

/* Largest number of rows table_encode accepts (every array is one chunk). */
#define TABLE_MAX_ROWS ((size_t)1 << 24)

/* Encodes rows[0..nrows) (any order; written sorted by label, so the same set of rows always
 * gives the same bytes) into *out. Refuses (-EINVAL with a message) a format other than 2 or
 * 3, a missing region path, label 0, a label given twice, a non-finite number or one beyond
 * float32's range, and more than TABLE_MAX_ROWS rows (-EFBIG). *out is untouched on failure. */
int table_encode(const struct table_spec *spec, const struct table_row *rows, size_t nrows,
                 struct table_files *out, struct errbuf *err);
/* A feature table ([measure], docs/measurements.md): labels[0..n) strictly increasing and
 * nonzero, values n rows of ncols float64 (row-major), cols the column names. AnnData: obs
 * (index the ids as strings, a label column), var (index the column names), X float64; csv: a
 * label column then the columns. Refuses as table_encode does (-EINVAL, -EFBIG). */
int table_encode_features(const struct table_spec *spec, const uint64_t *labels, size_t n,
                          const char *const *cols, size_t ncols, const double *values,
                          struct table_files *out, struct errbuf *err);
/* A table concatenated from parts (docs/plates.md, plate-level tables): each part one
 * image's rows, every row of it taking the part's value in each of the extra string columns,
 * its index "PREFIX:LABEL". The rows keep the parts' order, each part's sorted by label. */
struct table_part {
    const struct table_row *rows;
    size_t n;
    const char *prefix;      /* the index's prefix: the image's path in the plate */
    const char *const *text; /* ntext values: the part's in each extra column */
};
struct table_concat {
    const char *const *text_names; /* the extra columns' names */
    size_t ntext;
};
/* Encodes the parts as one table (a "roi_table" without region, index_key "index"): AnnData
 * (X the boxes, obs the label, the extra columns and the index) or csv (index, label, the box,
 * the extra columns); spec->region_path is not used. The refusals of table_encode within a
 * part (a label given twice in one part only). */
int table_encode_concat(const struct table_spec *spec, const struct table_concat *c,
                        const struct table_part *parts, size_t nparts, struct table_files *out,
                        struct errbuf *err);
/* A feature table concatenated from parts (docs/plates.md, plate-level feature tables): each
 * part one image's feature table (labels strictly increasing, nonzero; values n rows of ncols),
 * its rows taking the part's extra string columns and the index "PREFIX:LABEL". The columns
 * are every part's, each once in the order first seen; a part without one has NaN there (csv:
 * an empty field). AnnData (X float64, obs the index, label and extra columns, var the column
 * names) or csv (index, label, the features, the extra columns); spec->type the table's type
 * ("roi_table" when NULL), spec->region_path not used. -EINVAL (a part's labels out of order),
 * -EFBIG. */
struct table_fpart {
    const uint64_t *labels;
    const double *values;
    size_t n;
    const char *const *cols;
    size_t ncols;
    const char *prefix;
    const char *const *text;
};
int table_encode_concat_features(const struct table_spec *spec, const struct table_concat *c,
                                 const struct table_fpart *parts, size_t nparts,
                                 struct table_files *out, struct errbuf *err);
/* The file at path, or NULL. */
const struct table_file *table_files_find(const struct table_files *f, const char *path);
void table_files_free(struct table_files *f);

#endif
