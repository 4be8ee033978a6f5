/* task.h: a configuration resolved against its input: the output array's metadata, the ROI
 * list and index, the processor, and the fingerprint that names the cache. Everything
 * `check`, `mount`, `warm` and `export` validate before doing any work. */
#ifndef ROIFS_TASK_H
#define ROIFS_TASK_H

#include <stdint.h>

#include "config.h"
#include "ome.h"
#include "proc/proc.h"
#include "roi.h"
#include "zarr/zarr.h"

struct task {
    struct config cfg;
    struct ome_image ome;       /* the array [input] path resolves to, and its OME metadata */
    struct zarr_input *input;
    const struct zarr_meta *in; /* the input's metadata */
    struct zarr_meta out;       /* the presented array */
    struct roi_set rois;
    struct roi_index *index;
    uint64_t halo[ROIFS_MAX_DIM];
    uint64_t grid[ROIFS_MAX_DIM]; /* output chunk grid */
    uint64_t nchunks;             /* product of grid */
    size_t chunk_nbytes;          /* decoded bytes of one output chunk */
    int64_t chunk_fixed_size;     /* encoded size when known in advance, else -1 */
    struct proc *proc;
    char *zarray_json; /* format 2: served as .zarray (NULL for format 3) */
    char *zattrs_json; /* format 2: served as .zattrs; format 3: the attributes in zarr.json */
    char *zarr_json;   /* format 3: served as zarr.json (NULL for format 2) */
    char *manifest;    /* canonical description of everything that defines the result */
    uint64_t fingerprint;
    char *cache_dir; /* absolute */
};

/* Loads the configuration at path, opens the input, parses the ROIs and builds the index and
 * the processor. Errors are -EINVAL (bad configuration, input or ROI list: exit status 2)
 * with err->msg = "FILE[:LINE]: ..." naming the offending key or value. */
int task_open(const char *config_path, struct task **out, struct errbuf *err);
void task_close(struct task *t);

/* True when an output chunk with this linear id exists in the presented tree. */
bool task_chunk_present(const struct task *t, uint64_t chunk_id);

#endif
