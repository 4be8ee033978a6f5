/* store.h: the result store, DIR/results/: every ROI result, named by its key, checksummed and
 * compressed, in append-only pack files shared by every process using the directory (so that
 * 100,000 ROIs are a few files, not 100,000). A record is a fixed header {magic, key, raw and
 * stored length, codec, crc32c of the stored bytes, the time it was made, crc32c of the
 * header} and the stored bytes. Appends take an exclusive byte-range lock (byte 0 of
 * locks/all); a pack rolls over to the next number beyond 1 GiB; a torn tail (a writer that
 * died mid-record) is truncated by the next writer. Each process keeps an index key -> place,
 * built by scanning the headers at open and refreshed to see what other processes appended
 * (and compacted). */
#ifndef ROIFS_STORE_H
#define ROIFS_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../util.h"

struct store;

/* Opens the store in directory results_fd (borrowed), locking appends through the file
 * "all" in locks_fd (borrowed); path names the directory in messages. Scans every pack.
 * Only read-only descriptors stay open (writes open their file for the time of the write).
 * 0 or -errno. */
int store_open(int results_fd, int locks_fd, const char *path, struct store **out,
               struct errbuf *err);
void store_close(struct store *s);

/* True when the index holds a result for k (no I/O). */
bool store_has(struct store *s, struct key128 k);
/* Adds to the index what other processes appended since the last look: the new tail of the
 * current pack and any newer pack. */
void store_refresh(struct store *s);
/* Appends the result (len bytes of elements of typesize bytes) under key k: compressed with
 * blosc lz4 + shuffle when that helps, raw otherwise. 0 or -errno with err set. */
int store_put(struct store *s, struct key128 k, const void *data, size_t len, size_t typesize,
              struct errbuf *err);
/* store_put of n results under one lock (the first failure stops it: those before it are
 * stored). */
struct store_item {
    struct key128 key;
    const void *data;
    size_t len;
    bool has_crc; /* crc is the crc32c of data (taken while it was in the CPU's cache) */
    uint32_t crc;
};
int store_put_many(struct store *s, size_t n, const struct store_item *items, size_t typesize,
                   struct errbuf *err);
/* Reads the result stored under k into data (exactly len bytes): 0, -ENOENT when there is
 * none, or -EBADMSG when the record does not verify (wrong length, checksum or key): it is
 * then dropped from the index, with a warning in the log, and counts as missing. */
int store_get(struct store *s, struct key128 k, void *data, size_t len);

/* What the index knows of a stored result. */
struct store_info {
    uint64_t stored_len; /* bytes of its record on disk, header included */
    uint64_t raw_len;    /* bytes of the result */
    uint32_t made;       /* when it was made: seconds since the epoch (0: unknown) */
};
/* True when the index holds a result for k; *info (when not NULL) gets what it knows. */
bool store_lookup(struct store *s, struct key128 k, struct store_info *info);
/* Calls fn for every result the index holds (on a snapshot: fn may use the store). */
void store_each(struct store *s, void (*fn)(void *ctx, struct key128 k, const struct store_info *i),
                void *ctx);

struct store_stats {
    size_t results;   /* distinct keys indexed */
    uint64_t bytes;   /* bytes of the packs scanned */
    uint32_t packs;   /* pack files */
    uint64_t damaged; /* records found damaged by this process */
};
void store_get_stats(struct store *s, struct store_stats *st);

/* Pack size beyond which appends go to a new pack (tests may lower it). */
extern uint64_t store_pack_limit;

/* ---- compaction (store_gc.c) ---- */

/* Whether the result named k is still wanted (called with the store's locks held: a lookup,
 * nothing more). */
typedef bool (*store_live_fn)(void *ctx, struct key128 k);

struct store_compaction {
    size_t kept, removed;               /* records */
    uint64_t bytes_before, bytes_after; /* of the packs */
    uint32_t packs_rewritten;
    uint32_t packs_in_use; /* left as they are: a live writer (of any host) holds them */
};

/* Removes the records live does not want: each pack holding any is rewritten, one at a time
 * under the append lock (other processes' appends wait for it, their reads go on): the
 * records it keeps are copied to the newest pack (a new one when it is the newest), made
 * durable (fdatasync), and only then is the pack unlinked. A kill at any moment loses
 * nothing kept: before the unlink the pack is whole, and a copy cut short is a torn tail that
 * the next writer truncates, or a duplicate. Other processes notice a pack unlinked at their
 * next look, after indexing the copies, and close it. 0 or -errno with err set. */
int store_compact(struct store *s, store_live_fn live, void *ctx, struct store_compaction *out,
                  struct errbuf *err);
/* Test hook: called at each step of a pack's compaction (1: copies written, 2: made durable,
 * 3: the pack unlinked), so that unit tests can kill the process there. */
extern void (*store_compact_hook)(int step);

#endif
