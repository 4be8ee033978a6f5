/* plate_grid.h: a plate's map as `roifs status` and the status page of `roifs serve` draw it
 * (docs/plates.md, docs/serve.md): the rows and the columns of the status document's wells,
 * each once, in the plate's order. FUSE-free, below cli/ and serve/, which both use it. */
#ifndef ROIFS_PLATE_GRID_H
#define ROIFS_PLATE_GRID_H

#include <jansson.h>
#include <stddef.h>

struct plate_grid {
    const char **rows, **cols; /* into names */
    size_t nrows, ncols;
    char **names; /* each well's "ROW\0COL", one per well */
    size_t nnames;
};

/* The grid of wells, an object keyed "ROW/COL" (the status document's "wells"; a key without
 * a '/' is left out): its distinct rows and columns, each sorted shorter names first ("B"
 * before "AA", "3" before "12"), then by their bytes. Free it with plate_grid_free. */
void plate_grid_of(json_t *wells, struct plate_grid *g);
void plate_grid_free(struct plate_grid *g);

#endif
