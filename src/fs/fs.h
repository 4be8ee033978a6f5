/* fs.h: the FUSE side of roifs: mounts a set of arrays and serves it until unmounted. */
#ifndef ROIFS_FS_H
#define ROIFS_FS_H

#include <stdbool.h>

#include "../arrays/arrayset.h"

struct fs_options {
    const char *mountpoint;
    const char *fuse_opts; /* extra -o options, or NULL */
    bool debug;            /* log each request */
    int ready_fd;          /* >= 0: write "R" there once the mount answers requests */
};

/* Starts the engines of s (arrayset_start), mounts its tree at o->mountpoint and serves it
 * until it is unmounted or a SIGINT/SIGTERM/SIGHUP arrives, then stops the engines. 0 after a
 * clean unmount; -errno (message in err) when mounting failed. */
int fs_run(struct arrayset *s, const struct fs_options *o, struct errbuf *err);

#endif
