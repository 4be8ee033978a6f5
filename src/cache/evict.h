/* evict.h: the least-recently-used order and total size of the cached chunks an engine
 * computed or found at mount, for [cache] max_size. No locking here: the engine's lock
 * guards every call. */
#ifndef ROIFS_EVICT_H
#define ROIFS_EVICT_H

#include <stddef.h>
#include <stdint.h>

struct evict;

/* A chunk file to remove: its id and the inode it had when it was counted, so that a newer
 * file renamed over it meanwhile is left alone (cache_chunk_remove_if). */
struct evict_victim {
    uint64_t id, ino;
};

struct evict *evict_new(uint64_t max_size);
void evict_free(struct evict *ev);
/* Adds (or updates) chunk id, a file of size bytes with inode ino, as the most recently
 * used. */
void evict_add(struct evict *ev, uint64_t id, uint64_t size, uint64_t ino);
void evict_touch(struct evict *ev, uint64_t id);
void evict_remove(struct evict *ev, uint64_t id);
/* Takes out the least recently used chunks, never keep, until the total is at most max_size;
 * returns how many, in *victims (malloc'd, or NULL). */
size_t evict_victims(struct evict *ev, uint64_t keep, struct evict_victim **victims);
/* usage: the chunk files and the bytes set by evict_set_other (the result store), which
 * count against max_size too. */
void evict_stats(const struct evict *ev, uint64_t *usage, uint64_t *max_size, uint64_t *evicted);
void evict_set_other(struct evict *ev, uint64_t bytes);
/* The chunk files' part of usage. */
uint64_t evict_chunk_bytes(const struct evict *ev);
/* At mount: notes a chunk found in the cache; then evict_settle orders them (older files less
 * recently used) and returns, like evict_victims, those to remove now. */
void evict_found(struct evict *ev, uint64_t id, uint64_t size, int64_t mtime_ns, uint64_t ino);
size_t evict_settle(struct evict *ev, struct evict_victim **victims);
/* evict_settle without taking victims. */
void evict_settle_order(struct evict *ev);

#endif
