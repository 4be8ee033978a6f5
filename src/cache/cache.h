/* cache.h: the backing directory, the only persistent state of roifs (layout 4: claims between
 * hosts, a pack per writer; layout 3 shared packs under byte-range locks and named processes by
 * pid alone, layout 2 had a home-made hash, layout 1 one file per result):
 *   DIR/format          "roifs-cache 4"
 *   DIR/chunks/<id>     encoded output chunks by linear chunk id, each with its record
 *                       {version, chunk key, length, crc32c}: the extended attribute
 *                       user.roifs.chunk, or on file systems without user xattrs the sidecar
 *                       chunks/<id>.meta (valid only for the data file's inode)
 *   DIR/results/        every ROI result, by key (store.h)
 *   DIR/locks/          claims (claim.h): c<hex> a chunk being made, r<hex> a ROI result
 *                       shared by chunks, p<n> a pack's writer, u1 the users check, each
 *                       created exclusively, naming its holder (host, process) and renewed
 *                       under a lease; all: byte-range locks, for waits on one host
 *   DIR/users/          per process using the directory: a claim named by configuration,
 *                       host and pid, and NAME.info naming its configuration and version
 *   DIR/inputs/<id>     the content hashes of an input array's files by identity (one file
 *                       per input array, rewritten whole; docs/design.md)
 *   DIR/L<n>/           the cache of pyramid level n ([output] ome), laid out the same
 * The directory is used only when it and its subdirectories belong to the user running roifs
 * and nobody else may write there; every entry is opened relative to it without following
 * symbolic links. Keys name what every result was made from, so nothing made for another
 * configuration or input is ever taken for current. */
/* src/cache/: the cache directory and the result store, the one header other modules include
 * (the result store, store.h; the key set, keyset.h; the order of eviction, evict.h, are its
 * parts, included below; cache_internal.h and store_internal.h are private to src/cache/).
 * It includes nothing of src/engine/. What it promises (docs/design.md, "The cache
 * directory" and the items after it):
 * - Layout: the one above, named by DIR/format; a directory of an older layout is emptied at
 *   cache_open, any other non-empty directory that is not a roifs cache is refused; the
 *   directory and its subdirectories are used only when they belong to the user and nobody
 *   else may write there, every entry opened relative to it with O_NOFOLLOW.
 * - Exactly once between processes and hosts, whatever the file system's byte-range locks do:
 *   computing chunk id holds its claim (cache_lock_chunk), a ROI result that spans chunks the
 *   claim chosen by its key (cache_lock_result), appending to a pack that pack's claim (one
 *   writer per pack, never two processes or hosts); a claim of a dead process of this host is
 *   taken over at once, one of another host once its lease ran out unrenewed, so a killed
 *   holder's work is taken over, never waited on forever. No state is named or judged by a
 *   pid alone: registrations, claims and temporary files name their host.
 * - Atomic appearance: every file appears by rename of a complete temporary file (chunk
 *   files, their sidecars, the format marker), so a reader never sees a partial one; results
 *   are appended records, a torn tail of which readers ignore and the pack's next holder
 *   truncates.
 * - Checked: every chunk file carries its record {version, chunk key, length, inode, stamp,
 *   crc32c}, every stored result its header {key, raw and stored length, codec, crc32c of the
 *   stored bytes, crc32c of the header}; what does not verify (or has no record) is never
 *   served as current: it is logged and made again.
 * - kill -9 at any moment leaves a cache from which a remount serves only correct data: the
 *   chunk files renamed into place and the results appended whole survive; a temporary file,
 *   a torn record or an interrupted compaction (the old pack is unlinked only once the copy is
 *   durable) loses nothing kept.
 * - Not promised: a file altered and then given back its exact modification time on purpose,
 *   and damage below the file system that changes no time (they pass the stamp; see
 *   cache_chunk_open_current). */
#ifndef ROIFS_CACHE_H
#define ROIFS_CACHE_H

/* DIR/format of this layout; a directory of an older layout is emptied at cache_open. */
#define CACHE_FORMAT_TEXT "roifs-cache 4\n"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../key.h"
#include "../util.h"
#include "evict.h"
#include "keyset.h"
#include "store.h"

struct cache;
struct store;

/* Opens (creating with mode 0700) the cache directory dir (absolute). With config_path (the
 * configuration file the cache serves; NULL for a cache nested in another one, such as a
 * pyramid level's, whose parent is registered), the process registers in DIR/users and is
 * refused when a live process serves another configuration from it; version names the
 * version of that configuration it serves (task_version: a nested cache gives its parent's),
 * which cache_other_version compares. -EINVAL (a
 * configuration error, exit status 2) with the reason in err when the directory is not
 * trusted (owner, mode, symbolic links), not a roifs cache, or in use by another
 * configuration; a cache of the older layout is emptied (and logged). Other failures are
 * -errno. */
int cache_open(const char *dir, const char *config_path, uint64_t version, struct cache **out,
               struct errbuf *err);
void cache_close(struct cache *c);
struct zarr_input;
/* Keeps the content hashes of input in's files in DIR/inputs (zarr_input_keep_hashes); a
 * failure is logged and costs only reading the input again after a remount. */
void cache_keep_input_hashes(struct cache *c, struct zarr_input *in);
/* The trust check of cache_open alone, changing nothing: 0, or -EINVAL with the reason. */
int cache_check_trusted(const char *path, struct errbuf *err);
const char *cache_path(const struct cache *c);
/* The result store in DIR/results (replaced, never freed before cache_close, when the
 * directory is recreated). */
struct store *cache_store(struct cache *c);
/* Called by the process that serves the cache (after a fork): its pid is what users/ names. */
void cache_adopt(struct cache *c);
/* Whether a live process other than this one serves another version of the configuration
 * (its ROI list, params, processor or input edited since it started) from this directory:
 * 1 with "CONFIG (pid N)" in who, 0, or -errno. */
int cache_other_version(struct cache *c, char *who, size_t len);

/* ---- chunk files (chunkfile.c) ---- */

/* What a chunk file was made of, as recorded with it. */
struct cache_chunk_meta {
    struct key128 key;
    uint64_t length;
    uint32_t crc;
};

/* Why cache_chunk_open_current refused a chunk file. */
enum cache_chunk_state { CHUNK_ABSENT, CHUNK_CURRENT, CHUNK_STALE, CHUNK_DAMAGED };

/* Opens chunk id read-only if it is current: a regular file whose record names key want and
 * whose length (always) and crc32c (once per file version and process) match. Returns the
 * state; *fd is set only for CHUNK_CURRENT. A stale or damaged file is left for the next
 * write to replace (a symbolic link or other non-regular entry is removed at once); each is
 * logged with the reason. *meta (when not NULL) gets the file's record. */
enum cache_chunk_state cache_chunk_open_current(struct cache *c, uint64_t id, struct key128 want,
                                                int *fd, struct cache_chunk_meta *meta);
/* Opens chunk id read-only as it is, without checking it (one just written or verified):
 * 0 and *fd, -ENOENT, or -errno (-ELOOP for a symbolic link). */
int cache_chunk_open_plain(struct cache *c, uint64_t id, int *fd);
/* The record of the open chunk file fd of chunk id: 0, or -ENODATA when it has none. */
int cache_chunk_meta_of(struct cache *c, uint64_t id, int fd, struct cache_chunk_meta *meta);
/* Size, modification time (ns since the epoch) and (ino not NULL) inode of a cached chunk (a
 * regular file): 0 or -errno. */
int cache_chunk_stat(struct cache *c, uint64_t id, uint64_t *size, int64_t *mtime_ns,
                     uint64_t *ino);
bool cache_chunk_exists(struct cache *c, uint64_t id);
/* Writes chunk id atomically (temporary file, record, rename) as made of key; *fd (when not
 * NULL) gets a read-only descriptor of the file written, which stays valid whatever happens
 * to the name afterwards. Returns 1 when it replaced an existing file, 0 when it is new, or
 * -errno. The caller holds the chunk's lock (cache_lock_chunk). */
int cache_chunk_write(struct cache *c, uint64_t id, const void *data, size_t len, struct key128 key,
                      int *fd);
/* Removes chunk id's file (and sidecar) only if it is still inode ino, under the chunk's lock:
 * 0 removed, -ESTALE another file has the name now (renamed there since ino was seen),
 * -ENOENT none has, -EBUSY the lock is held (the chunk is being made), other -errno. */
int cache_chunk_remove_if(struct cache *c, uint64_t id, uint64_t ino);
/* Removes chunk id's file and sidecar, whatever file it is: the caller holds the chunk's lock
 * and has judged that very file (gc.c). 0 or -errno. */
int cache_chunk_remove(struct cache *c, uint64_t id);
/* Calls fn for every chunk file's id. */
int cache_chunk_each(struct cache *c, void (*fn)(void *ctx, uint64_t id), void *ctx);
/* Removes what writers that died left in chunks/: temporary files older than an hour and
 * sidecars whose data file is gone (roifs clean --unused). Returns how many. */
size_t cache_chunk_remove_leftovers(struct cache *c);

/* Where this process writes chunk records: in sidecar files (true) or in the extended
 * attribute. Chosen at cache_open (a view without user xattrs, or the mark another such
 * process left, means sidecars) and switched to sidecars at a write that finds the mark; a
 * record is read from either place whatever this says. cache_set_sidecars is for tests that
 * play a process of each kind on one file system. */
bool cache_sidecars(const struct cache *c);
void cache_set_sidecars(struct cache *c, bool on);

/* ---- locks (claims between hosts, claim.h) ---- */

/* The lease of this process's claims, [cache] lease (seconds, at least 5; default 30). */
void cache_set_lease(unsigned seconds);

/* Takes the lock of chunk id (wait = false: -EWOULDBLOCK when another process holds it).
 * Returns a lock handle for cache_unlock, or -errno. */
int cache_lock_chunk(struct cache *c, uint64_t id, bool wait);
/* Takes (waiting) the lock of the ROI result named key: one computation of it at a time
 * across processes. Returns a lock handle or -errno. */
int cache_lock_result(struct cache *c, struct key128 key);
void cache_unlock(struct cache *c, int lock);

#endif
