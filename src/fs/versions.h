/* versions.h: which version of a chunk each inode serves, so that an open file serves one
 * version of its chunk for its whole life, with or without passthrough (no FUSE here).
 *
 * The kernel keeps one page cache, one size and (with passthrough) one backing file per
 * inode, shared by every open file of it. So an inode serves one cache file at a time: while
 * files of inode X are open on version A of a chunk, an open that is handed a different
 * version B (recomputed after an input change, evicted and made again, or replaced by another
 * process sharing the cache) is refused with -ESTALE and the chunk's name moves to a new
 * inode Y. The kernel answers ESTALE from an open by looking the path up again (LOOKUP_REVAL),
 * which finds Y, and opens Y: the new reader gets B while the files open on X keep reading A,
 * with A's size. When no file of X is open, B simply takes A's place on X (the caller then
 * drops X's pages and cached attributes). Inodes of later versions have bit 63 set (the
 * namespace never uses it) and are never reused within a mount. */
#ifndef ROIFS_VERSIONS_H
#define ROIFS_VERSIONS_H

#include <stdbool.h>
#include <stdint.h>

#define VT_INO_BIT (1ULL << 63)

struct vt;

/* Registers fd as the backing file of the first open of an inode (FUSE passthrough): its
 * backing id, or 0 to serve that inode the ordinary way while it stays open. Called with the
 * table's lock held. */
typedef int32_t (*vt_backing_open)(void *ctx, int fd);
typedef void (*vt_backing_close)(void *ctx, int32_t id);

/* bo and bc may be NULL (no passthrough). */
struct vt *vt_new(vt_backing_open bo, vt_backing_close bc, void *ctx);
void vt_free(struct vt *vt);

/* The cache file an open is about to be answered with. Its identity is all of these: a file
 * system reuses the inode number of a deleted file at once, but not within the same ctime. */
struct vt_file {
    uint64_t dev, ino, size;
    int64_t ctime_ns;
    int64_t mtime_ns; /* shown as the chunk's mtime while this inode serves it */
    /* It may differ from what a lookup told the kernel of this chunk earlier (it was made or
     * replaced since the mount started): the inode's cached attributes must go. */
    bool fresh;
};

/* How to answer an open that vt_open accepted. */
struct vt_grant {
    int32_t backing;  /* passthrough to this backing id (0: none) */
    bool keep_cache;  /* the inode's cached pages, if any, are of this very file */
    bool inval_attrs; /* the kernel's cached attributes of the inode may be of another file */
};

/* An open of inode ino (whose namespace inode is base) is about to be answered with fd, the
 * cache file f. 0 and *g: answer it, and call vt_release(ino) once that file is released (or
 * at once if the answer does not reach the kernel). -ESTALE: another inode serves this chunk
 * now (or ino is unknown): answer ESTALE, nothing to release. */
int vt_open(struct vt *vt, uint64_t ino, uint64_t base, int fd, const struct vt_file *f,
            struct vt_grant *g);
void vt_release(struct vt *vt, uint64_t ino);

/* What inode ino shows. 1: it serves (or served) a version; *size and *mtime_ns (may be NULL)
 * are that version's and *base the chunk's namespace inode. 2: it served a version that
 * vt_invalidate declared out of date, and no file is open on it (*base set: ask the engine for the
 * size). 0: ino is a namespace inode that serves nothing yet (ask the engine). -ENOENT: a
 * later-version inode this table does not know. */
int vt_attr(struct vt *vt, uint64_t ino, uint64_t *base, uint64_t *size, int64_t *mtime_ns);
/* The chunk whose namespace inode is base changed ([input] watch): the size of the version
 * its inode serves is no longer the chunk's, once no file is open on it. Fills inos with the
 * inodes whose pages and attributes the kernel must drop; returns how many (at most 2). */
int vt_invalidate(struct vt *vt, uint64_t base, uint64_t inos[2]);
/* The inode a lookup of the chunk whose namespace inode is base answers with. */
uint64_t vt_current(struct vt *vt, uint64_t base);

/* Counts, for tests and the log. */
struct vt_stats {
    uint64_t records, superseded, replaced_in_place;
};
void vt_stats(struct vt *vt, struct vt_stats *s);

#endif
