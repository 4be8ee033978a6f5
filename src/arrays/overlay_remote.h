/* overlay_remote.h: the tree of a remote input image under ome = labels (docs/remote.md, The
 * label overlay): what a local image's mirrored directories would show, derived from its
 * metadata instead of a listing, which a remote store does not have. A group's entries are
 * what its metadata names (multiscales datasets, the labels and tables lists, an AnnData
 * table's elements by their encodings); an array's are its metadata files and the chunk keys
 * of its grid that exist, found by HEAD requests (at most REMOTE_BATCH_MAX at once, over
 * `connections`) when its directory is first looked into, kept for the process. */
#ifndef ROIFS_OVERLAY_REMOTE_H
#define ROIFS_OVERLAY_REMOTE_H

#include <stddef.h>

#include "../tree/namespace.h"
#include "overlay.h"

struct overlay_remote;

/* Adds the input image's (ov's remote image) files below directory entry root of ns, after
 * the overlay's own entries (a name ns already has there is the overlay's: the input's is not
 * shown; nothing under a path overlay_owns), and makes ns ask *out for each array's chunks
 * (ns_set_filler: the tree is an image's, not a plate's). 0, or -errno with err set (a
 * metadata object that cannot be read, other than absent: the URL and the status). */
int overlay_remote_build(const struct overlay *ov, struct ns *ns, int root,
                         struct overlay_remote **out, struct errbuf *err);
/* After the tree, whose entries name its strings. */
void overlay_remote_free(struct overlay_remote *rt);

/* A file of the remote image (an NS_INPUT entry that is not live: its text is its URL) read
 * whole: 0 with *data (malloc'd) and *len, -ENOENT when it is gone, else -EIO with err set. */
int overlay_remote_read(const char *url, char **data, size_t *len, struct errbuf *err);

#endif
