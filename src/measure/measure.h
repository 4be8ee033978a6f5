/* measure.h: [measure] of one image (docs/measurements.md): which channels of the input are
 * measured and under which names, the feature columns, the partial statistics of a piece of the
 * label image against the intensities of the same box (mstats.h), and one object's row. The
 * table itself is made by otable.h from the label chunks as the engine serves them (final ids:
 * after ids = unique / sequential and stitching), each chunk's partial merged per object. Per
 * image: a plate layer can make one per image and concatenate their rows. FUSE-free. */
#ifndef ROIFS_MEASURE_H
#define ROIFS_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../table_write.h"
#include "../task.h"
#include "mstats.h"

struct measure;

/* The measurement of the label image t computes against t's input (all channels of it when t
 * reads one channel, [input] channel; else the input is the one channel). -EINVAL with
 * "FILE:LINE: [measure] ..." for an unknown channel or an input whose shape is not the label
 * image's. */
int measure_new(const struct task *t, struct measure **out, struct errbuf *err);
void measure_free(struct measure *m);

/* An empty set of partials of m's dimensions and channels. */
void measure_stats_init(const struct measure *m, struct mstats *s);
/* The partial of the label piece labels (t's output dtype, C order, the box [c0, c0 + ext)):
 * reads the intensities of that box and adds the piece's objects to s. 0 or -EIO (message). */
int measure_piece(struct measure *m, const uint64_t *c0, const uint64_t *ext, const void *labels,
                  struct mstats *s, struct errbuf *err);
/* What the table depends on besides the label chunks: the features, the channels and the
 * input's content as it is now (its signature). */
void measure_identity(struct measure *m, struct keyhash *h);

/* The name of one label chunk's partial in the cache: what it depends on (the chunk's key,
 * which follows the label image's ids as the engine makes them; the features and channels; the
 * signature of the intensities of its box [c0, c0 + ext) as they are now, through memo). */
struct key128 measure_piece_key(struct measure *m, struct key128 chunk, const uint64_t *c0,
                                const uint64_t *ext, struct zarr_sigmemo *memo);

/* The label image's task, the channels measured and the input's dtype (mpython.h). */
const struct task *measure_task(const struct measure *m);
int measure_nchannels(const struct measure *m);
const struct dtype *measure_input_dtype(const struct measure *m);
/* The intensities of the channels measured over the label box [c0, c0 + ext), channels
 * first (nchannels x ext, C order, the input's dtype) into dst. 0 or -EIO (message). */
int measure_intensity_crop(const struct measure *m, const uint64_t *c0, const uint64_t *ext,
                           void *dst, struct errbuf *err);

size_t measure_ncols(const struct measure *m);
const char *const *measure_colnames(const struct measure *m);
/* One object's features (measure_ncols values) from its merged partial. */
void measure_row(const struct measure *m, const struct mobj *o, double *row);

/* The rows of the merged partials s, sorted by id: *ids (n ids) and *vals (n rows of
 * measure_ncols values), both malloc'd; returns n. What a layer over several images
 * concatenates (with the image's own columns) before table_encode_features. */
size_t measure_rows(const struct measure *m, const struct mstats *s, uint64_t **ids, double **vals);
/* The table of the merged partials s: one row per object, sorted by id. 0 or -errno. */
int measure_encode(const struct measure *m, const struct table_spec *spec, const struct mstats *s,
                   struct table_files *out, struct errbuf *err);
/* measure_encode with nx more columns (xnames) after the builtin ones: xvals holds a row of nx
 * values per object, in the order of xids (sorted, the objects of s). */
int measure_encode_extra(const struct measure *m, const struct table_spec *spec,
                         const struct mstats *s, size_t nx, const char *const *xnames,
                         const uint64_t *xids, const double *xvals, struct table_files *out,
                         struct errbuf *err);
/* The record of merged partials in the cache (checksummed, written atomically): write, and
 * read into an empty s (-ENOENT: none; -EIO: damaged, or of other dimensions or channels). */
int measure_record_write(const struct mstats *s, int dirfd, const char *name);
int measure_record_read(struct mstats *s, const char *path);

#endif
