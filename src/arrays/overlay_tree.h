/* overlay_tree.h: the presented tree of ome = labels: the input image group read through,
 * with the overlay's files, label levels and masking table (overlay.h, otable.h). */
#ifndef ROIFS_OVERLAY_TREE_H
#define ROIFS_OVERLAY_TREE_H

#include <stdbool.h>

#include "../tree/namespace.h"
#include "otable.h"
#include "overlay.h"

/* Fills ns below directory entry root (NS_ROOT: a new tree; a plate: the image's directory):
 * tab may be NULL (no table_name); status adds .roifs/status. The label levels' chunks name
 * the arrays as overlay.h numbers them plus array_base; the generated and table files' indices
 * are index_base plus their own. With status (a mount, serve) and a remote image, the image's
 * own files come from its metadata (overlay_remote.h). 0 or -errno with err set (too many
 * chunks, a remote metadata file that cannot be read). */
int overlay_tree_build(struct overlay *ov, const struct otable *tab, struct ns *ns, int root,
                       int array_base, uint64_t index_base, bool status, struct errbuf *err);

#endif
