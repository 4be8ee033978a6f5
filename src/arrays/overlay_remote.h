/* overlay_remote.h: the tree of a remote input image under ome = labels (docs/remote.md, The
 * label overlay): what a local image's mirrored directories would show, derived from its
 * metadata instead of a listing, which a remote store does not have. A group's entries are
 * what its metadata names (multiscales datasets, the labels and tables lists, an AnnData
 * table's elements by their encodings); an array's are its metadata files and the chunk keys
 * of its grid that exist, found by HEAD requests (at most REMOTE_BATCH_MAX at once, over
 * `connections`) when its directory is first looked into, kept for the process. */
#ifndef ROIFS_OVERLAY_REMOTE_H
#define ROIFS_OVERLAY_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
/* A plate's (arrayset_plate.c): an empty tree of ns whose lazy directories are numbered from
 * lazy_base (the plate's filler hands overlay_remote_fill those indices; no filler is set). */
struct overlay_remote *overlay_remote_new(struct ns *ns, uint64_t lazy_base);
/* Each image a well's `images` lists, at rel (relative to the plate, "B/03/0") whose
 * directory entry is dir: 0, or -errno with err set (which stops the walk). */
typedef int (*overlay_remote_image_fn)(void *ctx, const char *rel, int dir, struct errbuf *err);
/* The plate group at url (format 3 when v3) below NS_ROOT: its metadata files, each row's
 * and each well's its `wells` list names, and each well's images given to image (their
 * files are not read). 0, or -errno with err set as overlay_remote_build. */
int overlay_remote_plate(struct overlay_remote *rt, const char *url, bool v3,
                         overlay_remote_image_fn image, void *ctx, struct errbuf *err);
/* The image at url's files below directory entry root as overlay_remote_build adds them (ov:
 * its overlay, whose paths are not the input's; NULL: an image not selected, all of it); any
 * thread (the fills of rt wait). 0, or -errno with err set. */
int overlay_remote_add(struct overlay_remote *rt, const struct overlay *ov, const char *url,
                       bool v3, int root, struct errbuf *err);
/* The image at url (format 3 when v3) read through below directory entry dir (all of it, as
 * overlay_remote_add with ov NULL) when dir is first looked into; a walk that fails is
 * logged (with the URL and the status) and what it found is shown. */
void overlay_remote_lazy_image(struct overlay_remote *rt, const char *url, bool v3, int dir);
/* A look into rt's lazy directory index (as ns gives it: lazy_base + its own; name: a
 * lookup's, NULL: a listing). */
void overlay_remote_fill(struct overlay_remote *rt, uint64_t index, const char *name);
/* After the tree, whose entries name its strings. */
void overlay_remote_free(struct overlay_remote *rt);

/* A file of the remote image (an NS_INPUT entry that is not live: its text is its URL) read
 * whole: 0 with *data (malloc'd) and *len, -ENOENT when it is gone, else -EIO with err set. */
int overlay_remote_read(const char *url, char **data, size_t *len, struct errbuf *err);

#endif
