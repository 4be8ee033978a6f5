/* ptable.h: a plate's table (docs/plates.md, plate-level tables): MNT/tables/NAME, the
 * selected images' tables/NAME concatenated in plate order (wells, then each well's images),
 * with the string columns row, column, path_in_well, path_in_plate and acquisition_id and the
 * index PATH_IN_PLATE:LABEL (table_encode_concat); with [measure], their feature tables with
 * every column of the images' (the builtin and the Python ones). A request is made one image
 * after another by a thread of the table's: image k held (ptable_hold: its engines started
 * within [mount] images_open), its table asked (otable.h: each computed once, from the cache's
 * record when it has one) and waited for, what the concatenation takes of it copied, the image
 * let go; then image k + 1; the concatenation encoded at the end. So a plate's table holds one
 * image at a time, however many the plate has. An image that failed to open has no rows in
 * it. FUSE-free. */
#ifndef ROIFS_PTABLE_H
#define ROIFS_PTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../table_write.h"
#include "otable.h"

struct ptable;

/* One image of the table: its table (NULL: a failed image, no rows) and its values of the
 * extra columns. */
struct ptable_image {
    struct otable *table;
    const char *path_in_plate;
    const char *text[5]; /* row, column, path_in_well, path_in_plate, acquisition_id */
};

/* How a request holds image k while it asks its table: get (opens and starts it; < 0: the
 * image failed, no rows of it) and put (lets it go), on the table's thread, never a compute
 * thread. Without one the images' tables are asked as they are. */
struct ptable_hold {
    int (*get)(void *ctx, size_t k);
    void (*put)(void *ctx, size_t k);
    void *ctx;
};

/* The table of images[0..n) (borrowed, they must outlive it) in Zarr format `format` with
 * backend, holding the images through hold (copied; NULL: none); its file names known at once.
 * 0 or -EINVAL. */
int ptable_new(const struct ptable_image *images, size_t n, int format, enum table_backend backend,
               const struct ptable_hold *hold, struct ptable **out, struct errbuf *err);
/* After ptable_wait's conditions (the engines stopped): the request being made ends at once. */
void ptable_free(struct ptable *p);
/* Whether requests may hold images (true at first; NULL p: nothing). false (before the engines
 * stop) returns once no image's table is being asked, and a request being made then fails at
 * its next image (-EIO); true again when they start again. */
void ptable_allow(struct ptable *p, bool allow);
/* Returns once no request is being made, every callback returned (after the engines stopped:
 * at once). NULL p: nothing. */
void ptable_wait(struct ptable *p);
/* An image opened after the table was made (a mount opens its images when first looked
 * into): its table's rows count in the size bound from now on. */
void ptable_add_image(struct ptable *p, struct otable *table);

size_t ptable_nfiles(const struct ptable *p);
const char *ptable_path(const struct ptable *p, size_t i);
/* Exact once made, else an upper bound. */
uint64_t ptable_size(struct ptable *p, size_t i, bool *exact);
/* Makes the table from every image's table as it is now, one image after another: cb(ctx, 0)
 * once made, or cb(ctx, -EIO) when an image's table failed (a later request tries again). cb
 * runs on the table's thread. A request made while one is being made waits for the next round,
 * which begins when that one ends and answers every request made meanwhile. */
void ptable_request(struct ptable *p, otable_cb cb, void *ctx);
/* After a cb(ctx, 0): a copy of file i of the latest table (malloc'd; NULL: no such file). */
char *ptable_copy(struct ptable *p, size_t i, size_t *len);

#endif
