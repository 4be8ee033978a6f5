/* provenance.h: the "roifs" attribute of the presented array (.zattrs, or the attributes in
 * zarr.json; also the image group's with [output] ome): where the output comes from. It is
 * fixed for the life of a mount, so what it says about the cached results is about those
 * there when the mount started (docs/mounted-tree.md, "Provenance"). */
#ifndef ROIFS_PROVENANCE_H
#define ROIFS_PROVENANCE_H

#include <stddef.h>
#include <stdint.h>

struct task;

/* The attribute as task_open builds it (a jansson json_t *, as void * to keep jansson out of
 * this header): roifs's version, the configuration and input, the fingerprint, the processor
 * (kind, value, params, identity and the content hashes of the files it runs). */
void *provenance_new(const struct task *t);

/* What the cache held for the task when the mount (or export) started. */
struct provenance_results {
    size_t cached, total;        /* ROIs whose current result was stored, of all ROIs */
    uint32_t made_min, made_max; /* when those were made, seconds since the epoch (0: none) */
    int64_t started;             /* the mount's (or export's) start, seconds since the epoch */
};
/* Adds "results" to the attribute of t, replacing the attribute texts t serves (an image
 * group copies it from there: arrayset_set_provenance); called once, before the mount serves
 * anything. */
void provenance_set_results(struct task *t, const struct provenance_results *r);

#endif
