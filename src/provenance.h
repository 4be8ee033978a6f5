/* provenance.h: the "roifs" attribute of the presented array (.zattrs, or the attributes in
 * zarr.json; also the image group's with [output] ome): where the output comes from. Like
 * every metadata file it depends only on the job (the configuration, the input, the
 * processor), never on the mount's history: what a mount found in the cache and when it
 * started are in the status file (docs/mounted-tree.md, "Provenance"). */
#ifndef ROIFS_PROVENANCE_H
#define ROIFS_PROVENANCE_H

#include <stddef.h>
#include <stdint.h>

#include "key.h"

struct config;

/* What the attribute says, as task_open resolved it (values: provenance knows no task). */
struct provenance_of {
    const struct config *cfg;    /* paths, the processor's kind, value and params */
    const char *result_identity; /* its "file PATH SIZE HASH" lines list the files it runs */
    struct key128 result_id;     /* the hash of that identity */
    uint64_t fingerprint;        /* of the manifest */
    size_t nrois;
};

/* The attribute (a jansson json_t *, as void * to keep jansson out of this header): roifs's
 * version, the configuration and input, the fingerprint, the processor (kind, value, params,
 * identity and the content hashes of the files it runs). */
void *provenance_new(const struct provenance_of *o);

#endif
