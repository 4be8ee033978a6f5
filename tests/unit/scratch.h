/* scratch.h: files the unit tests write into their scratch directories (check_mkdtemp). */
#ifndef ROIFS_TEST_SCRATCH_H
#define ROIFS_TEST_SCRATCH_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "util.h"

/* Writes len bytes of data to dir/name, making the directories on the way. */
static inline void scratch_write_file(const char *dir, const char *name, const void *data,
                                      size_t len)
{
    char *path = xasprintf("%s/%s", dir, name);
    char *parent = path_dirname(path);
    CHECK_EQ_INT(mkdir_p(parent, 0755), 0);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        CHECK_EQ_INT(fwrite(data, 1, len, f), len);
        fclose(f);
    }
    free(parent);
    free(path);
}

/* Whether dir/name exists. */
static inline bool scratch_exists(const char *dir, const char *name)
{
    char *path = xasprintf("%s/%s", dir, name);
    bool there = access(path, F_OK) == 0;
    free(path);
    return there;
}

/* Waits up to 20 s for dir/name (a processor's sign, say): false (a failed check) when it does
 * not come. */
static inline bool scratch_wait_for(const char *dir, const char *name)
{
    for (int i = 0; i < 2000; i++) {
        if (scratch_exists(dir, name))
            return true;
        usleep(10000);
    }
    fprintf(stderr, "%s did not appear within 20 s\n", name);
    CHECK(false);
    return false;
}

/* dir/name/.zarray: an uncompressed 2-d <i4 Zarr v2 array of that shape and chunk shape, fill
 * value 0 (its chunks are the caller's to write). */
static inline void scratch_zarray_i4(const char *dir, const char *name, int rows, int cols,
                                     int chunk_rows, int chunk_cols)
{
    char *zarray = xasprintf("{\"zarr_format\": 2, \"shape\": [%d, %d], \"chunks\": [%d, %d], "
                             "\"dtype\": \"<i4\", \"compressor\": null, \"fill_value\": 0, "
                             "\"order\": \"C\", \"filters\": null}",
                             rows, cols, chunk_rows, chunk_cols);
    char *file = xasprintf("%s/.zarray", name);
    scratch_write_file(dir, file, zarray, strlen(zarray));
    free(file);
    free(zarray);
}

/* A task from files: writes the configuration ini as dir/task.ini; its path (malloc'd), for
 * task_open. */
static inline char *scratch_task_ini(const char *dir, const char *ini)
{
    scratch_write_file(dir, "task.ini", ini, strlen(ini));
    return xasprintf("%s/task.ini", dir);
}

#endif
