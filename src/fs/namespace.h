/* namespace.h: the mounted tree as inode numbers and names, derived from the task alone
 * (no table of nodes): root, .zarray and .zattrs (format 2) or zarr.json (format 3),
 * .roifs/status, and the chunk files, nested in directories when the separator is "/"
 * (format 3: under the directory "c", as c/0/1). No FUSE here. */
#ifndef ROIFS_NAMESPACE_H
#define ROIFS_NAMESPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "../task.h"

enum ns_kind { NS_DIR, NS_META, NS_STATUS, NS_CHUNK };

#define NS_INO_ROOT   1
#define NS_INO_ZARRAY 2 /* the array metadata: .zarray, or zarr.json for format 3 */
#define NS_INO_ZATTRS 3 /* format 2 only */
#define NS_INO_ROIFS  4
#define NS_INO_STATUS 5
#define NS_INO_CDIR   6  /* format 3 with "/" keys: the directory "c" */
#define NS_INO_CHUNKS 16 /* first inode of chunk files and chunk directories */

struct ns_node {
    enum ns_kind kind;
    uint64_t ino;
    int depth;        /* chunk directories and files: number of chunk indices in the path */
    uint64_t prefix;  /* C-order linear index of those indices; the chunk id at full depth */
    const char *text; /* NS_META: the file's content */
    size_t len;
    int level; /* [output] ome: the pyramid level of a node under MNT/<level> (else 0) */
};

/* [output] ome: MNT is an image group (root, .zgroup and .zattrs or zarr.json, .roifs/status
 * at the fixed inodes above) and level L's array tree is that of its task, its inodes offset
 * by (L + 1) << NS_LEVEL_SHIFT (its root is the directory MNT/L). */
#define NS_LEVEL_SHIFT 56

struct ns {
    const struct task *t;
    int ndim;
    bool nested;                       /* separator "/" */
    bool v3;                           /* format 3: zarr.json, keys start with "c" */
    uint64_t base[ROIFS_MAX_DIM + 1];  /* first inode offset of each depth */
    uint64_t count[ROIFS_MAX_DIM + 1]; /* number of prefixes of each depth */
    int nlevels;                       /* [output] ome: number of pyramid levels, else 0 */
};

void ns_init(struct ns *ns, const struct task *t);
/* The inode of chunk id of pyramid level `level` (0 without [output] ome). */
uint64_t ns_chunk_ino(const struct ns *ns, int level, uint64_t id);
/* Resolves name in directory parent: 0, -ENOENT or -ENOTDIR. */
int ns_lookup(const struct ns *ns, uint64_t parent, const char *name, struct ns_node *out);
/* Describes inode ino: 0 or -ENOENT. */
int ns_get(const struct ns *ns, uint64_t ino, struct ns_node *out);

/* Lists directory ino from offset off (0 = start). emit returns non-zero to stop (buffer
 * full); next_off is the offset that resumes after the entry. 0, -ENOENT or -ENOTDIR. */
typedef int (*ns_emit)(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off);
int ns_readdir(const struct ns *ns, uint64_t ino, uint64_t off, ns_emit emit, void *ctx);

#endif
