/* scratch.h: files the unit tests write into their scratch directories (check_mkdtemp). */
#ifndef ROIFS_TEST_SCRATCH_H
#define ROIFS_TEST_SCRATCH_H

#include <stdio.h>
#include <stdlib.h>

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

#endif
