/* store_internal.h: the result store's state (store.h), shared by store.c (index, scans,
 * appends, reads) and store_gc.c (compaction, and the retirement of packs another process
 * compacted away). Every pack has one writer at a time, the process holding its claim
 * (claim.h): no file is ever appended to by two processes, or two hosts. Locks, outermost
 * first: append (one appender per process), scan (one reader of pack
 * tails at a time; owns the packs' scan positions and descriptors), fds (read: a read in
 * progress; write: a pack descriptor being closed), index (the key table and the pack table,
 * never held across I/O). */
#ifndef ROIFS_STORE_INTERNAL_H
#define ROIFS_STORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "../map.h"
#include "store.h"

#define STORE_MAGIC       "roifsP1"
#define STORE_CODEC_RAW   0
#define STORE_CODEC_BLOSC 1

/* A record's header, little-endian as the host (crc32c.c requires one). */
struct rec_header {
    char magic[8];
    uint64_t key_lo, key_hi;
    uint64_t raw_len;
    uint64_t stored_len;
    uint32_t codec;
    uint32_t data_crc;   /* of the stored bytes */
    uint32_t made;       /* when the result was made: seconds since the epoch (0: unknown) */
    uint32_t header_crc; /* of the bytes above */
};
_Static_assert(sizeof(struct rec_header) == 56, "the record header is 56 bytes on disk");

struct entry {
    struct key128 key;
    uint64_t off, stored_len, raw_len;
    uint32_t pack;
    uint32_t made;
    bool used; /* true in the index; a copy of no entry has it false */
};

struct pack {
    int fd;           /* -1: no such pack (or retired) */
    uint64_t scanned; /* records up to here are indexed */
    uint64_t size;    /* file size at the last scan */
    bool unlinked;    /* removed from the directory (a compaction): retire it */
};

struct store {
    char *path;
    int dirfd, locks_fd;
    pthread_mutex_t append_lock, scan_lock, index_lock;
    pthread_rwlock_t fd_lock;
    struct pack *packs; /* by number; packs[0] unused */
    uint32_t npacks;    /* highest number + 1 */
    struct map index;   /* key -> struct entry: the results by key */
    uint64_t damaged;
    int64_t dir_mtime_ns; /* of the directory at the last full look (scan lock) */
    /* the pack this process appends to (0: none yet), whose claim ("p<n>" in locks/, claim.h)
     * it holds, and the process that took it (a forked child takes its own); appends go to
     * a pack numbered at least own_floor (a compaction's copies above the packs it reads) */
    uint32_t own, own_floor;
    int own_claim;
    pid_t own_pid;
    /* records still to store raw without trying to compress them (see encode) */
    _Atomic unsigned raw_streak;
};

/* A record ready to append: header and stored bytes. */
struct pending {
    struct rec_header h;
    const void *body;
    void *buf; /* bytes to free, or NULL when body is the caller's */
};

/* ---- store_pack.c: the index and the packs, for store.c and store_gc.c ---- */

/* The index's entry of k, or NULL (index lock held). */
const struct entry *store_index_get(const struct store *s, struct key128 k);
/* Puts e in the index, replacing what it held for e's key (index lock held). */
void store_index_put(struct store *s, const struct entry *e);
/* Removes k when it still points at (pack, off) (index lock held). */
void store_index_drop(struct store *s, struct key128 k, uint32_t pack, uint64_t off);
uint32_t store_header_crc(const struct rec_header *h);
bool store_header_ok(const struct rec_header *h);
void store_pack_name(uint32_t n, char *buf, size_t len);
/* Opens pack n (creating it when create) and records it (scan lock held). 0 or -errno. */
int store_open_pack(struct store *s, uint32_t n, bool create);
/* Indexes what pack n gained since the last scan (scan lock held). */
void store_scan_pack(struct store *s, uint32_t n);
/* The same through descriptor fd of the pack (one opened just now: on a network file system
 * an open is what shows another host's appends, close-to-open consistency). */
void store_scan_pack_fd(struct store *s, uint32_t n, int fd);
/* Closes the packs removed from the directory once the index points at what they held that
 * was copied elsewhere; what was not copied is dropped (scan lock held). */
void store_retire_unlinked(struct store *s);

/* ---- store.c, for store_gc.c ---- */

/* The highest pack number in use, 0 when none (scan lock held). */
uint32_t store_current_pack(const struct store *s);
/* Brings the index up to date with the directory: new packs (also past a gap in the
 * numbers, when the directory changed) and their records; packs removed are retired
 * (scan lock held). */
void store_catch_up(struct store *s);
/* Takes the claim of pack n without waiting (a handle for claim_release, -EWOULDBLOCK when
 * a live writer has it, or -errno). */
int store_claim_pack(struct store *s, uint32_t n);
/* Appends records (append and scan locks held), rolling over to new packs; the index then
 * points at the new copies. The packs written are [*first, *last] (when not NULL). */
int store_append_records(struct store *s, struct pending *recs, size_t nrec, uint32_t *first,
                         uint32_t *last, struct errbuf *err);

#endif
