/* marker.h: the input's own record of an unfinished `roifs apply` (docs/operations.md), the
 * file IN/.roifs-apply: written whole (a temporary file, fsync, rename, fsync of the directory)
 * before the first replacement of an application, removed once the journal says it finished.
 * It names the job by what it does (apply_job_id), not by where its configuration lies, and
 * the cache directory that holds its journal and results, so that a run from any
 * configuration finds and finishes it, or refuses (another job). A dot file at the array's
 * top: no Zarr reader takes it for a chunk or an array. */
#ifndef ROIFS_APPLY_MARKER_H
#define ROIFS_APPLY_MARKER_H

#include <stdbool.h>
#include <stdint.h>

#include "../task.h"
#include "../util.h"

#define APPLY_MARKER     ".roifs-apply"
#define APPLY_MARKER_TMP ".roifs-apply.new"

struct apply_marker {
    bool present;
    char job[33];     /* apply_job_id, hex */
    uint64_t gen;     /* the journal's number of the application */
    uint64_t started; /* when it began (seconds since the epoch) */
    char *cache;      /* the cache directory holding its journal (absolute) */
    char *config;     /* the configuration it began from (messages only) */
};

/* What identifies an application, independent of where its configuration file or cache lies
 * and of how its input is named: the task's manifest (the input's metadata, processor,
 * params, halo, output, ROI list) and its result identity (the contents of the processor's
 * files, masks, labels), both without the input's path and roifs's version. */
void apply_job_id(const struct task *t, char hex[33]);

/* Reads dirfd's marker: 0 with m->present false when there is none; -EBADMSG (err set) when
 * it is not one roifs wrote; other -errno (err set). m is freed with apply_marker_free. */
int apply_marker_read(int dirfd, struct apply_marker *m, struct errbuf *err);
/* Writes m as dirfd's marker, durably. 0 or -errno (err set). */
int apply_marker_write(int dirfd, const struct apply_marker *m, struct errbuf *err);
/* Removes dirfd's marker (and a temporary one a kill left), durably; 0 or -errno (err set). */
int apply_marker_remove(int dirfd, struct errbuf *err);
void apply_marker_free(struct apply_marker *m);

#endif
