/* test_plate_grid.c: src/plate/plate_grid.c, the plate map's rows and columns that `roifs
 * status` and the status page of `roifs serve` draw: each once, shorter names first, then by
 * their bytes; a well key without '/' left out; an empty plate. */
#include <jansson.h>
#include <string.h>

#include "check.h"
#include "plate/plate_grid.h"

static json_t *wells_of(const char *const *keys, size_t n)
{
    json_t *w = json_object();
    for (size_t i = 0; i < n; i++)
        json_object_set_new(w, keys[i], json_object());
    return w;
}

static void test_rows_and_columns_in_the_plate_s_order(void)
{
    static const char *const keys[] = {"AA/12", "B/3", "C/12", "B/12", "AA/3", "A/10", "odd"};
    json_t *w = wells_of(keys, sizeof keys / sizeof *keys);
    struct plate_grid g;
    plate_grid_of(w, &g);
    static const char *const rows[] = {"A", "B", "C", "AA"}, *const cols[] = {"3", "10", "12"};
    CHECK_EQ_INT(g.nrows, 4);
    CHECK_EQ_INT(g.ncols, 3);
    for (size_t i = 0; i < g.nrows && i < 4; i++)
        CHECK(strcmp(g.rows[i], rows[i]) == 0);
    for (size_t i = 0; i < g.ncols && i < 3; i++)
        CHECK(strcmp(g.cols[i], cols[i]) == 0);
    plate_grid_free(&g);
    CHECK(g.rows == NULL && g.nrows == 0);
    json_decref(w);
}

static void test_an_empty_plate(void)
{
    json_t *w = json_object();
    struct plate_grid g;
    plate_grid_of(w, &g);
    CHECK_EQ_INT(g.nrows, 0);
    CHECK_EQ_INT(g.ncols, 0);
    plate_grid_free(&g);
    plate_grid_of(NULL, &g); /* a status without wells */
    CHECK_EQ_INT(g.nrows + g.ncols, 0);
    plate_grid_free(&g);
    json_decref(w);
}

int main(void)
{
    RUN(test_rows_and_columns_in_the_plate_s_order);
    RUN(test_an_empty_plate);
    return check_done();
}
