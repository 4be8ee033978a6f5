/* live.h: the entries of a presented tree that follow directories of the file system as they
 * are now (the input image that ome = labels presents, read through). Nothing is listed ahead
 * of time, so files added to or removed from those directories while mounted are seen at
 * once. A name's inode is a hash of its directory's inode, the name and its kind (file or
 * directory: a name that changes kind gets another), in the table's range; only the names
 * the kernel holds have an entry (from a lookup until the kernel forgets as many lookups),
 * so memory follows the kernel's inode cache, not every name ever listed.
 * Thread-safe: one lock, held while the table is consulted, never across a call out. */
#ifndef ROIFS_LIVE_H
#define ROIFS_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Directories deeper than this below the mirrored root are not shown: a link to a parent
 * directory would otherwise make an endless tree for `cp -r` or `find`. */
#define LIVE_MAX_DEPTH 32

struct live_node {
    uint64_t ino, parent;
    bool dir;         /* a directory, else a regular file */
    const char *path; /* in the file system; lives as long as the entry */
    int depth;        /* directories between it and the mirrored root, plus one */
};

struct live;

/* Inodes from ino0 on. */
struct live *live_new(uint64_t ino0);
void live_free(struct live *l);
/* True when ino is in the table's range (it may still be unknown to it). */
bool live_in_range(const struct live *l, uint64_t ino);

/* name in the directory whose inode is parent, at path dir and depth depth (its own depth:
 * the mirrored root's is 0): 0 with *out when the file system holds a regular file or a
 * directory there now (stat, following links, with this thread's file system ids), counted
 * as one lookup of its inode; -EACCES when that stat is refused; -ENOENT otherwise (missing,
 * or anything else: a FIFO, a socket or a device is never shown). out->path lives as long as the
 * inode is held (until live_forget). */
int live_lookup(struct live *l, uint64_t parent, const char *dir, int depth, const char *name,
                struct live_node *out);
/* The entry of inode ino: 0, or -ENOENT when no lookup holds it. */
int live_get(struct live *l, uint64_t ino, struct live_node *out);
/* n lookups of ino are over (the kernel forgot them); its entry goes with the last. */
void live_forget(struct live *l, uint64_t ino, uint64_t n);
/* Entries held. */
size_t live_count(struct live *l);

/* Lists directory dir (inode parent, depth depth) as it is now, in name order: its regular
 * files and directories except those skip refuses, from the first-th on. emit gets each with
 * the offset that resumes after it, base + k + 1 for the k-th, and returns non-zero to stop.
 * A listing comes in calls; *keep (the caller's, one per listing, NULL at first) holds the
 * names its call from the start (first 0) found, which its later calls go on from, so each
 * listing sees one consistent set of names whatever other listings find meanwhile; free it
 * with live_listing_free when the listing ends (keep NULL: the directory is read at each
 * call). 0, or -errno when dir cannot be listed (-ENOENT when it does not exist, -EACCES when
 * this thread's file system ids may not read it). */
struct live_listing;
typedef bool (*live_skip)(void *ctx, const char *name);
typedef int (*live_emit)(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off);
int live_list(struct live *l, struct live_listing **keep, uint64_t parent, const char *dir,
              int depth, uint64_t first, uint64_t base, live_skip skip, void *skip_ctx,
              live_emit emit, void *ctx);
void live_listing_free(struct live_listing *ls);

#endif
