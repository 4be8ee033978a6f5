/* table_write_tool.c: writes table_encode's files to a directory, for the end-to-end tests
 * that read them with anndata, pandas and zarr-python (tests/e2e/test_table_write.py).
 *   table_write_tool FORMAT(2|3) BACKEND(anndata|csv) REGION OUTDIR < ROWS
 * ROWS: one line per object, "label z y x len_z len_y len_x" (micrometres). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "table_write.h"
#include "util.h"

static int read_rows(FILE *in, struct table_row **rows, size_t *n)
{
    size_t cap = 0;
    struct table_row r;
    int got;
    *rows = NULL;
    *n = 0;
    while ((got = fscanf(in, "%" SCNu64 " %lf %lf %lf %lf %lf %lf", &r.label, &r.start[0],
                         &r.start[1], &r.start[2], &r.length[0], &r.length[1], &r.length[2])) ==
           7) {
        if (*n == cap)
            *rows = xrealloc(*rows, (cap = cap ? 2 * cap : 64) * sizeof **rows);
        (*rows)[(*n)++] = r;
    }
    return got == EOF ? 0 : -EINVAL;
}

static int write_files(const char *outdir, const struct table_files *files)
{
    for (size_t i = 0; i < files->n; i++) {
        char *path = path_join(outdir, files->v[i].path), *dir = path_dirname(path);
        int r = mkdir_p(dir, 0755), fd = -1;
        if (r == 0) {
            fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            r = fd < 0 ? -errno : write_full(fd, files->v[i].data, files->v[i].len);
        }
        if (fd >= 0 && close(fd) < 0 && r == 0)
            r = -errno;
        if (r < 0)
            fprintf(stderr, "table_write_tool: %s: %s\n", path, strerror(-r));
        free(dir);
        free(path);
        if (r < 0)
            return r;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[2], "anndata") != 0 && strcmp(argv[2], "csv") != 0)) {
        fprintf(stderr, "usage: table_write_tool 2|3 anndata|csv REGION OUTDIR < ROWS\n");
        return 2;
    }
    struct table_spec spec = {
        .zarr_format = atoi(argv[1]),
        .backend = strcmp(argv[2], "csv") == 0 ? TABLE_CSV : TABLE_ANNDATA,
        .region_path = argv[3],
    };
    struct table_row *rows;
    size_t n;
    if (read_rows(stdin, &rows, &n) < 0) {
        fprintf(stderr, "table_write_tool: row %zu: expected 7 numbers\n", n + 1);
        free(rows);
        return 2;
    }
    struct table_files files;
    struct errbuf err;
    int r = table_encode(&spec, rows, n, &files, &err);
    free(rows);
    if (r < 0) {
        fprintf(stderr, "table_write_tool: %s\n", err.msg);
        return 2;
    }
    r = write_files(argv[4], &files);
    table_files_free(&files);
    return r < 0 ? 1 : 0;
}
