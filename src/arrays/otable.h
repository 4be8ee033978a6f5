/* otable.h: the masking ROI table of ome = labels (docs/mounted-tree.md, OME-Zarr label overlay:
 * tables/NAME): one row per label id present in the computed level, its bounding box in
 * micrometres. Its content depends on the whole output, so a request asks the computed level's
 * engine for every chunk (each computed once), scans them as they come and encodes the table
 * (table_write.h); the rows are then kept in a checksummed record in the cache, named by the keys
 * of every chunk, which a later mount of the same result reads instead of scanning. The table
 * follows the label image as it is now: every request computes the chunks' keys again, and a table
 * made from other chunks (the input changed while mounted) is made again, from the record of those
 * keys or by a scan. FUSE-free. */
#ifndef ROIFS_OTABLE_H
#define ROIFS_OTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../table_write.h"
#include "overlay.h"

struct otable;

/* The table of ov (borrowed), with the names of its files known at once. 0 or -EINVAL. */
int otable_new(const struct overlay *ov, struct otable **out, struct errbuf *err);
/* After the engines are gone (every request was answered). */
void otable_free(struct otable *t);

size_t otable_nfiles(const struct otable *t);
/* File i's path relative to tables/NAME ("obs/.zattrs", "table.csv"), and that NAME: the
 * table's, or with [measure] and [output] table_name the feature table's files then the
 * masking table's (docs/measurements.md). */
const char *otable_path(const struct otable *t, size_t i);
const char *otable_table_name(const struct otable *t, size_t i);
/* File i's size: exact (*exact) when the table is made from the label chunks as they were at
 * the last request, else an upper bound (before the first request, or while it is made again). */
uint64_t otable_size(struct otable *t, size_t i, bool *exact);

/* Asks for the table of the label chunks as they are now: cb(ctx, 0) once it is complete
 * (before this returns when it is), or cb(ctx, -EIO) when a chunk of the output failed (a later
 * request tries again). cb runs on a compute thread of the engine or in the caller. */
typedef void (*otable_cb)(void *ctx, int err);
void otable_request(struct otable *t, otable_cb cb, void *ctx);
/* After a cb(ctx, 0): file i's content (NULL: the table has no such file, e.g. the chunk of
 * an empty column); it stays valid until the next request made the table again (export: one
 * request) or otable_free. */
const struct table_file *otable_file(struct otable *t, size_t i);
/* After a cb(ctx, 0): a copy of file i of the latest table (malloc'd, *len bytes; NULL as
 * above), for readers while other requests may make the table again (the mount). */
char *otable_copy(struct otable *t, size_t i, size_t *len);
/* After a cb(ctx, 0): a copy of the latest table's rows (malloc'd, *n of them), for a plate's
 * table (docs/plates.md). */
struct table_row *otable_rows(struct otable *t, size_t *n);
/* [measure]: after a cb(ctx, 0), a copy of the latest feature table's rows: *ids (sorted),
 * *cols (*ncols names: the table's columns, the builtin ones then python's) and *vals (rows of
 * those columns), all malloc'd (each name too); returns how many rows. */
size_t otable_features(struct otable *t, uint64_t **ids, double **vals, char ***cols,
                       size_t *ncols);
/* [measure]'s builtin column names (*ncols of them, owned by t), or NULL without [measure]. */
const char *const *otable_feature_columns(const struct otable *t, size_t *ncols);
/* [measure] python: how many columns the function may add (0 without it). */
size_t otable_python_max_columns(const struct otable *t);
/* How many rows the table may have at most (the elements of the label image's level). */
uint64_t otable_max_rows(const struct otable *t);
/* How many times the rows were computed from the chunks, and read from the record. */
void otable_counts(struct otable *t, uint64_t *scans, uint64_t *records);

/* [measure] (docs/measurements.md): objects of the last table made, label chunks measured,
 * chunk partials read from their records, requests that failed. False without [measure]. */
struct otable_measure_counts {
    uint64_t objects, pieces, pieces_recorded, failed;
    uint64_t calls; /* [measure] python's calls */
    uint64_t made;  /* label chunks whose partial was made as the engine made them */
};
bool otable_measure_counts(struct otable *t, struct otable_measure_counts *out);
/* [measure] (engine_opts.chunk_made of the label image's engine, ctx the table): the partial
 * of label chunk id, made and recorded while the chunk (its key, its encoded bytes) is in
 * memory, so that the table's first read after the chunks were made reads no label chunk. */
void otable_chunk_made(void *ctx, uint64_t id, struct key128 key, const void *data, size_t len);

/* roifs clean --unused: removes the records of ov's cache other than the one of the label
 * chunks as they are now (those of inputs gone by); *removed counts them. 0 or -errno. */
int otable_clean_records(const struct overlay *ov, size_t *removed);

#endif
