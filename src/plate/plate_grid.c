/* plate_grid.c: a plate's rows and columns from the status document's wells (plate_grid.h). */
#include "plate_grid.h"

#include <stdlib.h>
#include <string.h>

#include "../util.h"

static int by_name(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t lx = strlen(x), ly = strlen(y);
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x, y);
}

/* Adds name to the set v[0..*n) (kept unsorted, without duplicates). */
static void add_name(const char **v, size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(v[i], name) == 0)
            return;
    v[(*n)++] = name;
}

void plate_grid_of(json_t *wells, struct plate_grid *g)
{
    size_t n = json_object_size(wells);
    memset(g, 0, sizeof *g);
    g->rows = xcalloc(n + 1, sizeof *g->rows);
    g->cols = xcalloc(n + 1, sizeof *g->cols);
    g->names = xcalloc(n + 1, sizeof *g->names);
    const char *key;
    json_t *v;
    json_object_foreach(wells, key, v)
    {
        char *name = xstrdup(key), *slash = strchr(name, '/');
        g->names[g->nnames++] = name;
        if (!slash)
            continue;
        *slash = '\0';
        add_name(g->rows, &g->nrows, name);
        add_name(g->cols, &g->ncols, slash + 1);
    }
    qsort(g->rows, g->nrows, sizeof *g->rows, by_name);
    qsort(g->cols, g->ncols, sizeof *g->cols, by_name);
}

void plate_grid_free(struct plate_grid *g)
{
    for (size_t i = 0; i < g->nnames; i++)
        free(g->names[i]);
    free(g->names);
    free(g->rows);
    free(g->cols);
    memset(g, 0, sizeof *g);
}
