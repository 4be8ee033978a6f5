/* cache_internal.h: the cache's state, shared by cache.c (the directory: trust, format,
 * users, locks) and chunkfile.c (chunk files and their records). */
#ifndef ROIFS_CACHE_INTERNAL_H
#define ROIFS_CACHE_INTERNAL_H

#include <pthread.h>
#include <sys/types.h>

#include "../map.h"
#include "cache.h"

#define CACHE_MAX_OLD     64
#define CACHE_CHUNK_XATTR "user.roifs.chunk" /* a chunk file's record (chunkfile.c) */
/* chunks/.sidecars: made by a process whose view of the cache keeps no user xattrs (sshfs);
 * every process that sees it writes chunk records in sidecar files, which all can read */
#define CACHE_SIDECAR_MARK ".sidecars"

/* A chunk file this process has verified (or written): trusted until its inode changes. */
struct verified {
    uint64_t ino;
    int64_t mtime_ns; /* the file's state when its checksum was checked */
    struct key128 key;
};

struct cache {
    char *path;
    /* Replaced (never closed before cache_close) when the directory is recreated. */
    _Atomic int dirfd, chunks_fd, results_fd, locks_fd;
    struct store *_Atomic store;
    int old_fds[CACHE_MAX_OLD];
    struct store *old_stores[CACHE_MAX_OLD];
    int nold, nold_stores;
    pthread_mutex_t repair_lock;
    /* users/: this process's registration (a claim, claim.h) and the process it names */
    int user_claim, users_fd;
    pid_t user_pid;
    char *user_name, *config_path;
    uint64_t version; /* of the configuration served (cache_other_version) */
    /* chunk records: in the extended attribute CACHE_CHUNK_XATTR, or sidecar files (decided
     * at open by trying, and for good once chunks/CACHE_SIDECAR_MARK exists: a host without
     * user xattrs shares the cache); readers look for both */
    _Atomic bool sidecar;
    /* chunk files verified by this process, and those being verified (by id) */
    pthread_mutex_t verified_lock;
    pthread_cond_t verified_cv;
    struct map ver; /* chunk id -> struct verified */
    uint64_t *verifying;
    size_t nverifying, verifying_cap;
};

/* Recreates a directory removed under a running mount (chunks/, results/, locks/, format)
 * and points new writes there. 0 or -errno. */
int cache_repair(struct cache *c);

/* Whether chunks/CACHE_SIDECAR_MARK exists: then c->sidecar is set (cache.c; chunkfile.c
 * asks before each record it writes). */
bool cache_follow_sidecar_mark(struct cache *c);

#endif
