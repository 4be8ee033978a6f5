/* namespace.h: the presented tree as inode numbers and names, without FUSE (the FUSE side and
 * `export` walk it). Whoever builds the tree (the array set) adds a small table of entries:
 * directories, files of fixed content, the status file, and, attached to a directory, the
 * chunk files of an array, whose names and inodes are computed from the array's chunk grid
 * and ROI index (no node per chunk): flat keys ("0.1", "c.0.1"), or nested in directories
 * when the separator is "/" (format 3: under the directory "c", as c/0/1). */
#ifndef ROIFS_NAMESPACE_H
#define ROIFS_NAMESPACE_H

#include <stdbool.h>
#include <stdint.h>

#include "../task.h"

/* NS_INPUT: a file of the input image read through (ome = labels); NS_TABLE: a file of the
 * masking table, whose content exists once the table is computed; NS_GEN: a file whose
 * content its owner makes at each look (the overlay's labels and tables lists). A directory may
 * mirror a directory of the file system (ns_mirror): its own entries first, then what that
 * directory holds now, each name found there an entry of the tree's live range (live.h). */
enum ns_kind { NS_DIR, NS_META, NS_STATUS, NS_CHUNK, NS_INPUT, NS_TABLE, NS_GEN };

#define NS_ROOT      0            /* the entry of the root directory */
#define NS_INO_ROOT  1            /* its inode */
#define NS_INO_LIVE  (1ULL << 62) /* inodes from here on: entries found in mirrored directories */
#define NS_INO_LIMIT (1ULL << 63) /* inodes from here on are the FUSE side's (fs/versions.h) */

struct ns_node {
    enum ns_kind kind;
    uint64_t ino;
    const char *text; /* NS_META: the file's content; NS_INPUT and mirrored directories: the
                         path in the file system (an NS_INPUT not live: its URL) */
    bool live;        /* found in a mirrored directory: it may be gone at the next look */
    bool mirrored;    /* a directory whose listing follows the file system */
    size_t len;
    int array;      /* NS_CHUNK and chunk directories: the array they belong to, else -1 */
    uint64_t chunk; /* NS_CHUNK: the chunk's linear id; NS_TABLE, NS_GEN: the file's index;
                       an NS_INPUT not live (a remote file): its size */
    /* chunk directories and files: how many chunk indices their path holds, and the C-order
     * linear index of those indices (the chunk id at full depth); a directory found in a
     * mirrored one: its depth below the mirrored root (live.h) */
    int depth;
    uint64_t path_index;
};

struct ns;

struct ns *ns_new(void);
void ns_free(struct ns *ns);
/* Adds a directory, a file whose content is text (borrowed: it must outlive the tree), or the
 * status file, under directory entry parent, listed in the order added. Returns the new
 * entry. */
int ns_add_dir(struct ns *ns, int parent, const char *name);
int ns_add_file(struct ns *ns, int parent, const char *name, const char *text);
int ns_add_status(struct ns *ns, int parent, const char *name);
/* A file of the masking table (its index in the table's files); a file made at each look
 * (its index in its owner's files). */
int ns_add_table(struct ns *ns, int parent, const char *name, uint64_t index);
int ns_add_generated(struct ns *ns, int parent, const char *name, uint64_t index);
/* A file of a remote input read through (ome = labels of a remote image, docs/remote.md): an
 * NS_INPUT entry that is not live, its text the URL (borrowed), its chunk its size. */
int ns_add_input(struct ns *ns, int parent, const char *name, const char *url, uint64_t size);
/* Makes directory entry dir mirror the directory at path (copied): after its own entries it
 * lists, and resolves, the regular files (as NS_INPUT) and directories (mirrored too) that
 * path holds at that moment, except hide (NULL: none) and the names of its own entries. */
void ns_mirror(struct ns *ns, int dir, const char *path, const char *hide);
/* A directory whose entries its owner adds when it is first needed (a plate's image,
 * docs/plates.md): ns_lookup and ns_readdir in directory entry dir call fill(ctx, index,
 * name) first, until ns_filled(ns, dir); name is the name a lookup looks for (NULL: a listing,
 * which needs every entry), so that a filler may add that entry alone and leave dir lazy. fill runs
 * with the tree unlocked: it adds the entries with ns_add_* (each addition locks the tree, which
 * lookups elsewhere share meanwhile), and makes concurrent calls for the same directory wait for
 * the first one. */
typedef void (*ns_fill_fn)(void *ctx, uint64_t index, const char *name);
void ns_set_filler(struct ns *ns, ns_fill_fn fill, void *ctx);
void ns_set_lazy(struct ns *ns, int dir, uint64_t index);
void ns_filled(struct ns *ns, int dir);
/* True when directory entry dir mirrors one. */
bool ns_is_mirror(const struct ns *ns, int dir);
/* The entry named name in directory entry dir (entries only, not chunks), or -1. */
int ns_child(const struct ns *ns, int dir, const char *name);
/* Adds the chunk files of array number `array` (task t, borrowed) under directory entry dir,
 * listed after dir's entries (format 3 with "/" keys: under a new directory "c"). -EINVAL
 * (err set) when the tree has no inode numbers left for them. */
int ns_add_chunks(struct ns *ns, int dir, const struct task *t, int array, struct errbuf *err);

/* An array's metadata files (format 2: .zarray, .zattrs; format 3: zarr.json, t's texts)
 * followed by its chunk files, in directory entry dir. */
int ns_add_array(struct ns *ns, int dir, const struct task *t, int array, struct errbuf *err);

/* The inode of chunk id (a file at full depth) of array number `array`, or 0 when the tree
 * has no chunks of that array. */
uint64_t ns_chunk_ino(const struct ns *ns, int array, uint64_t id);

/* True when the names directory ino holds may change (a mirrored directory). */
bool ns_follows(const struct ns *ns, uint64_t ino);
/* A name found in a mirrored directory keeps its node while lookups of it are held: each
 * ns_lookup that gives one (node.live) holds one, until ns_forget of as many (the FUSE side:
 * a failed reply, the kernel's FORGET). ns_live_count: the names held. */
void ns_forget(const struct ns *ns, uint64_t ino, uint64_t n);
size_t ns_live_count(const struct ns *ns);

/* Resolves name in directory parent: 0, -ENOENT or -ENOTDIR. A chunk name is accepted only
 * in canonical form: decimal indices without sign or leading zeros, inside the chunk grid,
 * with exactly the array's number of dimensions, of a chunk that exists. */
int ns_lookup(const struct ns *ns, uint64_t parent, const char *name, struct ns_node *out);
/* Describes inode ino: 0 or -ENOENT. */
int ns_get(const struct ns *ns, uint64_t ino, struct ns_node *out);

/* Lists directory ino from offset off (0 = start). emit returns non-zero to stop (buffer
 * full); next_off is the offset that resumes after the entry. A listing of a mirrored
 * directory keeps in *keep (one per listing: an open directory's, NULL at first; keep NULL:
 * none) the names its call from offset 0 found, which its later calls go on from, so that
 * a name there throughout the listing is listed once whatever else happens meanwhile (live.h);
 * ns_listing_free lets it go when the listing ends. 0, -ENOENT, -ENOTDIR, or the file
 * system's error for a mirrored directory (-EACCES). */
struct live_listing;
typedef int (*ns_emit)(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off);
int ns_readdir(const struct ns *ns, uint64_t ino, uint64_t off, struct live_listing **keep,
               ns_emit emit, void *ctx);
void ns_listing_free(struct live_listing *keep);

#endif
