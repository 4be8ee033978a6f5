/* into.h: `roifs export --into IMAGE` (ome = labels): an overlay's label image and masking
 * table written into an OME-Zarr image as labels/NAME and tables/NAME, each first complete in
 * a hidden temporary directory, then renamed into place, then named in its group's list, so
 * that an interrupted export leaves the image as it was (and is resumed by running it again). */
#ifndef ROIFS_EXPORT_INTO_H
#define ROIFS_EXPORT_INTO_H

#include <stdbool.h>

#include "export.h"

struct export_into {
    const char *image;
    bool overwrite;
    int format;                /* the image's Zarr format */
    const char *label, *table; /* the names (table NULL: none) */
    /* [measure] with [output] table_name: the masking table's name, written beside the
     * feature table `table` (NULL: none; docs/measurements.md) */
    const char *mask;
    /* [measure] labels = NAME into the input image itself: labels/NAME is the image's own,
     * kept as it is; only the table is written (set by export_into_check) */
    bool table_only;
    char *dirs[3][3]; /* [label, table, mask]: the group dir, the temporary, the final */
};

/* in->image must be an OME-Zarr image of t's output format without in->label, in->table and
 * in->mask (unless in->overwrite), and t an ome = labels configuration. 0 or -EINVAL (err
 * set). */
int export_into_check(struct export_into *in, const struct task *t, struct errbuf *err);
/* [measure] labels = NAME (docs/measurements.md): the label images measured are the input's
 * own, so into (IMAGE, or PLATE of a plate) must be the input image (or plate) itself: 0, or
 * -EINVAL (err set) when it is another directory (a copy too). */
int export_into_check_own(const char *into, const struct task *t, struct errbuf *err);
/* Makes the temporary directories and lists the label image of s into x (made here, writing
 * into the label's temporary directory): the caller then runs x's chunks (none when
 * in->table_only). */
int export_into_begin(struct export_into *in, struct arrayset *s, struct export *x,
                      struct errbuf *err);
/* Once every chunk of x is written: the label image's metadata, the table (and the masking
 * table; the engines of s started again), the directories renamed into place, the lists naming
 * them. */
int export_into_finish(struct export_into *in, struct arrayset *s, struct export *x,
                       struct errbuf *err);
/* Frees in; with failed, removes the temporary directories. */
void export_into_end(struct export_into *in, bool failed);

/* A plate (docs/plates.md): in->image is an image of the plate at PLATE (its path in the
 * plate: rel) or PLATE itself (rel "", in->table_only, plate: the plate's table). Checks it is
 * an OME-Zarr image (or plate) group of the plate's Zarr format without in->label, in->table
 * and in->mask (unless in->overwrite): 0 or -EINVAL (err set). */
int export_into_check_image(struct export_into *in, int format, bool plate, struct errbuf *err);
/* Makes the temporary directories and lists the tree's rel/labels/NAME into x (none with
 * in->table_only): the caller runs x's chunks and writes its metadata. */
int export_into_begin_at(struct export_into *in, struct arrayset *s, const char *rel,
                         struct export *x, struct errbuf *err);
/* Writes the tree's rel/tables/NAME (and rel/tables/MASK with in->mask; s's engines started:
 * its tables are asked for) into the tables' temporary directories. */
int export_into_stage_table(struct export_into *in, struct arrayset *s, const char *rel,
                            struct errbuf *err);
/* The staged directories renamed into place, then named in their groups' lists. */
int export_into_place(struct export_into *in, struct errbuf *err);

#endif
