/* plate.h: an OME-Zarr HCS plate's metadata (docs/plates.md): the plate group's `plate`
 * (NGFF 0.4, Zarr v2: `.zattrs`; 0.5, Zarr v3: `zarr.json` `attributes.ome`) and each selected
 * well's `well`, narrowed by `[input] wells` and `acquisition`, as the list of images a plate
 * mount presents, in plate metadata order (wells) then each well's `images` order. Reads
 * only the plate's and the wells' metadata, never an image's: FUSE-free, below task.c. */
#ifndef ROIFS_PLATE_H
#define ROIFS_PLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util.h"

struct plate_image {
    char *row, *column;   /* "B", "03" */
    char *well;           /* "B/03" */
    char *path_in_well;   /* "0" */
    char *path_in_plate;  /* "B/03/0" */
    char *acquisition_id; /* "0", or "" for an image without one */
    char *dir;            /* absolute path of the image group */
    size_t well_index;    /* in plate_wells */
    int plate_format;     /* the plate's Zarr format */
    /* NULL, or why the image is failed from the start (its well's metadata is missing or
     * invalid): it is listed (a missing well counts as one image, path_in_well "") */
    char *error;
};

struct plate {
    char *dir;     /* absolute */
    int format;    /* 2 (NGFF 0.4) or 3 (0.5) */
    char *version; /* the plate metadata's "version" ("0.4", "0.5") */
    struct plate_image *images;
    size_t n;
    char **wells; /* the selected wells' paths ("B/03"), in plate metadata order */
    size_t nwells;
};

/* 1 when dir is an OME-Zarr plate group (attributes with "plate"), 0 when not (or when it
 * cannot be read: the caller's own reading then says why). */
int plate_detect(const char *dir);
/* Reads the plate at dir with the selection: wells a list of "B/03" or "B03" (comma or
 * space separated; NULL: every well), acquisition >= 0 (or -1: every image). -EINVAL with
 * err set for a plate whose metadata is invalid, a well of the list that the plate has not,
 * or a selection of no image; a well whose own metadata is missing or invalid is not an
 * error here: its image is listed with `error` set. */
int plate_open(const char *dir, const char *wells, int64_t acquisition, struct plate **out,
               struct errbuf *err);
void plate_free(struct plate *p);

/* A metadata file of the new plate of ome = true (docs/plates.md): its path relative to the
 * plate ("B/03/.zattrs") and content. */
struct plate_file {
    char *path;
    char *text;
};
/* The new plate's group files: the plate's (its `wells` narrowed to the wells with a selected
 * image, `acquisitions` to the selected images' ids), each row's, and each selected well's
 * (its `images` narrowed to the selected ones), in the plate's format, every other attribute
 * kept. *files (malloc'd, *n of them; plate_files_free). 0 or -EINVAL (the plate's metadata
 * went). */
int plate_new_files(const struct plate *p, struct plate_file **files, size_t *n,
                    struct errbuf *err);
void plate_files_free(struct plate_file *files, size_t n);

#endif
