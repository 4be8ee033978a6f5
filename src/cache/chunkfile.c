/* chunkfile.c: the cached chunk files, DIR/chunks/<id>, served as they are (passthrough), and
 * their records {version, chunk key, length, inode, stamp, crc32c}: in the extended attribute
 * user.roifs.chunk, set on the temporary file before the rename so that content and record
 * appear together, or where the file system keeps no user xattrs in a sidecar <id>.meta
 * written before the data's rename. A file is current when its record names the key wanted;
 * its length is checked at every open. Its checksum is checked only when the file is not
 * exactly as written: roifs stamps each file it writes with a modification time to the
 * nanosecond (the precise clock, which no later write(2) reproduces: the kernel stamps writes
 * with the coarse clock of the last tick) and records it with the inode; any write to the
 * file since, a copy, or a restore changes one of them. Such a file's checksum is read once
 * per process and file state (inode, modification time). */
#include "cache_internal.h"
#include "claim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../atomic_file.h"
#include "../crc32c.h"

#define META_VERSION 3

/* The record as stored (host byte order, which crc32c.c requires to be little-endian). */
struct chunk_record {
    char magic[4]; /* "rcr3" */
    uint32_t version;
    uint64_t key_lo, key_hi;
    uint64_t length;
    uint64_t ino;     /* the data file's inode when written */
    int64_t mtime_ns; /* its modification time as roifs stamped it */
    uint32_t crc;
    uint32_t record_crc; /* of the bytes above */
};
_Static_assert(sizeof(struct chunk_record) == 56, "the chunk record is 56 bytes");

static void name_of(uint64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIu64, id);
}

static void sidecar_of(uint64_t id, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRIu64 ".meta", id);
}

static int64_t mtime_of(const struct stat *st)
{
    return ts_to_ns(st->st_mtim);
}

static void record_fill(struct chunk_record *rec, const struct cache_chunk_meta *m,
                        const struct stat *st)
{
    memset(rec, 0, sizeof *rec);
    memcpy(rec->magic, "rcr3", 4);
    rec->version = META_VERSION;
    rec->key_lo = m->key.lo;
    rec->key_hi = m->key.hi;
    rec->length = m->length;
    rec->ino = (uint64_t)st->st_ino;
    rec->mtime_ns = mtime_of(st);
    rec->crc = m->crc;
    rec->record_crc = zarr_crc32c(0, rec, offsetof(struct chunk_record, record_crc));
}

static bool record_ok(const struct chunk_record *rec)
{
    return memcmp(rec->magic, "rcr3", 4) == 0 && rec->version == META_VERSION &&
           rec->record_crc == zarr_crc32c(0, rec, offsetof(struct chunk_record, record_crc));
}

/* The record of roifs before the stamp (its files are checked in full once per process). */
struct chunk_record_v2 {
    char magic[4]; /* "rcr2" */
    uint32_t version;
    uint64_t key_lo, key_hi;
    uint64_t length;
    uint64_t ino; /* sidecar: the data file's inode; xattr: 0 */
    uint32_t crc;
    uint32_t record_crc;
};
_Static_assert(sizeof(struct chunk_record_v2) == 48, "the version 2 record is 48 bytes");

static bool record_v2_read(const void *buf, size_t len, bool sidecar, uint64_t ino,
                           struct chunk_record *rec)
{
    struct chunk_record_v2 old;
    if (len != sizeof old)
        return false;
    memcpy(&old, buf, sizeof old);
    if (memcmp(old.magic, "rcr2", 4) != 0 || old.version != 2 ||
        old.record_crc != zarr_crc32c(0, &old, offsetof(struct chunk_record_v2, record_crc)) ||
        (sidecar && old.ino != ino))
        return false;
    *rec = (struct chunk_record){.key_lo = old.key_lo,
                                 .key_hi = old.key_hi,
                                 .length = old.length,
                                 .ino = 0,
                                 .mtime_ns = -1,
                                 .crc = old.crc};
    return true;
}

/* ---- the verified chunks of this process ---- */

static bool is_verified_locked(struct cache *c, uint64_t id, const struct stat *st,
                               struct key128 key)
{
    const struct verified *v = map_get(&c->ver, id, 0);
    return v && v->ino == (uint64_t)st->st_ino && v->mtime_ns == mtime_of(st) &&
           key_eq(v->key, key);
}

static bool being_verified(const struct cache *c, uint64_t id)
{
    for (size_t i = 0; i < c->nverifying; i++)
        if (c->verifying[i] == id)
            return true;
    return false;
}

/* True when chunk id's file (inode ino, made of key) is verified already. Else the caller
 * verifies it and then calls end_verify; another thread verifying the same chunk (an open
 * and the check ahead of it) is waited for rather than repeated. */
static bool begin_verify(struct cache *c, uint64_t id, const struct stat *st, struct key128 key)
{
    pthread_mutex_lock(&c->verified_lock);
    while (!is_verified_locked(c, id, st, key) && being_verified(c, id))
        pthread_cond_wait(&c->verified_cv, &c->verified_lock);
    bool yes = is_verified_locked(c, id, st, key);
    if (!yes) {
        if (c->nverifying == c->verifying_cap) {
            c->verifying_cap = c->verifying_cap ? 2 * c->verifying_cap : 8;
            c->verifying = xrealloc(c->verifying, c->verifying_cap * sizeof *c->verifying);
        }
        c->verifying[c->nverifying++] = id;
    }
    pthread_mutex_unlock(&c->verified_lock);
    return yes;
}

static void set_verified(struct cache *c, uint64_t id, const struct stat *st, struct key128 key);

static void end_verify(struct cache *c, uint64_t id, const struct stat *st, struct key128 key,
                       bool ok)
{
    if (ok)
        set_verified(c, id, st, key);
    pthread_mutex_lock(&c->verified_lock);
    for (size_t i = 0; i < c->nverifying; i++)
        if (c->verifying[i] == id) {
            c->verifying[i] = c->verifying[--c->nverifying];
            break;
        }
    pthread_cond_broadcast(&c->verified_cv);
    pthread_mutex_unlock(&c->verified_lock);
}

static void set_verified(struct cache *c, uint64_t id, const struct stat *st, struct key128 key)
{
    pthread_mutex_lock(&c->verified_lock);
    *(struct verified *)map_put(&c->ver, id, 0, NULL) =
        (struct verified){.ino = (uint64_t)st->st_ino, .mtime_ns = mtime_of(st), .key = key};
    pthread_mutex_unlock(&c->verified_lock);
}

/* ---- records ---- */

union record_buf {
    struct chunk_record now;
    struct chunk_record_v2 old;
};

/* The bytes of chunk id's record, kept in a sidecar file (sidecar) or fd's extended
 * attribute: their length, or -1. */
static ssize_t record_bytes(struct cache *c, uint64_t id, int fd, bool sidecar,
                            union record_buf *buf)
{
    if (sidecar) {
        char name[40];
        sidecar_of(id, name, sizeof name);
        int sfd = openat(c->chunks_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        size_t got = 0;
        struct stat st;
        int r = sfd < 0 ? -ENODATA
                : fstat(sfd, &st) < 0 || !S_ISREG(st.st_mode)
                    ? -ENODATA
                    : pread_full(sfd, buf, sizeof *buf, 0, &got);
        if (sfd >= 0)
            close(sfd);
        return r < 0 ? -1 : (ssize_t)got;
    }
    return fgetxattr(fd, CACHE_CHUNK_XATTR, buf, sizeof *buf);
}

/* The record of chunk id's open file fd (whose state is *fst). 0 or -ENODATA. *as_written:
 * the file is the one the record was made for, unchanged since (same inode and stamp).
 * Where this process writes records is looked at first, then the other place: a process of
 * another host may have written it the other way (sshfs has no xattrs). A sidecar whose
 * inode is not the data file's (written through another host's view: sshfs numbers inodes
 * its own way; or left by an earlier file) is taken as a record of a file not as written:
 * its checksum is then verified against the data before it is served. */
static int read_record(struct cache *c, uint64_t id, int fd, const struct stat *fst,
                       struct cache_chunk_meta *m, bool *as_written)
{
    struct chunk_record rec;
    union record_buf buf;
    uint64_t ino = (uint64_t)fst->st_ino;
    bool sidecar = c->sidecar;
    ssize_t len = record_bytes(c, id, fd, sidecar, &buf);
    if (len < 0) {
        sidecar = !sidecar;
        len = record_bytes(c, id, fd, sidecar, &buf);
    }
    if (len == (ssize_t)sizeof rec) {
        memcpy(&rec, &buf, sizeof rec);
        if (!record_ok(&rec))
            return -ENODATA; /* (a sidecar's inode not the file's: not as written, below) */
    } else if (len < 0 || !record_v2_read(&buf, (size_t)len, sidecar, ino, &rec)) {
        return -ENODATA;
    }
    *as_written = rec.ino == ino && rec.mtime_ns == mtime_of(fst);
    m->key = (struct key128){rec.key_lo, rec.key_hi};
    m->length = rec.length;
    m->crc = rec.crc;
    return 0;
}

int cache_chunk_meta_of(struct cache *c, uint64_t id, int fd, struct cache_chunk_meta *meta)
{
    struct stat st;
    bool as_written;
    if (fstat(fd, &st) < 0)
        return -errno;
    return read_record(c, id, fd, &st, meta, &as_written);
}

/* crc32c of the first size bytes of fd, read through a buffer that stays in the CPU's cache
 * (measured faster than mapping the file: no page tables to build, one pass over memory). */
static int crc_of_file(int fd, uint64_t size, uint32_t *crc)
{
    enum { BUF = 256 << 10 };
    char *buf = xmalloc(size < BUF ? (size_t)size + 1 : BUF);
    uint32_t c = 0;
    for (uint64_t off = 0; off < size;) {
        size_t want = size - off < BUF ? (size_t)(size - off) : BUF, got = 0;
        int r = pread_full(fd, buf, want, off, &got);
        if (r == 0 && got != want)
            r = -EIO;
        if (r < 0) {
            free(buf);
            return r;
        }
        c = zarr_crc32c(c, buf, got);
        off += got;
    }
    free(buf);
    *crc = c;
    return 0;
}

/* ---- opening ---- */

/* Removes chunk id's entry when it is not a regular file (a symbolic link, a directory, a
 * FIFO put there), under the chunk's lock and only if it still is not one: a chunk file that
 * another process renamed over it meanwhile stays. While the lock is held elsewhere nothing
 * is done: the holder's rename replaces the entry. */
static void remove_not_regular(struct cache *c, uint64_t id)
{
    int lock = cache_lock_chunk(c, id, false);
    if (lock < 0)
        return;
    char name[32];
    struct stat st;
    name_of(id, name, sizeof name);
    if (fstatat(c->chunks_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode) &&
        unlinkat(c->chunks_fd, name, 0) < 0 && errno == EISDIR)
        unlinkat(c->chunks_fd, name, AT_REMOVEDIR);
    cache_unlock(c, lock);
}

static enum cache_chunk_state damaged(struct cache *c, uint64_t id, const char *why, bool remove)
{
    log_warn("chunk %" PRIu64 ": its cache file %s/chunks/%" PRIu64 " %s; computing it again", id,
             c->path, id, why);
    if (remove)
        remove_not_regular(c, id);
    return CHUNK_DAMAGED;
}

/* open_current's answer for a file replaced while it was looked at (never returned) */
#define CHUNK_REPLACED ((enum cache_chunk_state)(CHUNK_DAMAGED + 1))

/* Whether the file named name is no longer the one open as st (renamed over by another
 * process, maybe of another host, since it was opened). */
static bool replaced_since(struct cache *c, const char *name, const struct stat *st)
{
    struct stat now;
    return fstatat(c->chunks_fd, name, &now, AT_SYMLINK_NOFOLLOW) != 0 ||
           now.st_ino != st->st_ino || now.st_dev != st->st_dev || now.st_size != st->st_size ||
           ts_to_ns(now.st_mtim) != ts_to_ns(st->st_mtim) ||
           ts_to_ns(now.st_ctim) != ts_to_ns(st->st_ctim);
}

static enum cache_chunk_state open_current(struct cache *c, uint64_t id, struct key128 want,
                                           int *fd, struct cache_chunk_meta *meta, bool last)
{
    char name[32];
    name_of(id, name, sizeof name);
    int f = openat(c->chunks_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0 && errno == ENOENT)
        return CHUNK_ABSENT;
    if (f < 0)
        return damaged(c, id, errno == ELOOP ? "is a symbolic link" : strerror(errno), true);
    struct stat st;
    struct cache_chunk_meta m;
    bool as_written = false;
    enum cache_chunk_state s = CHUNK_CURRENT;
    if (fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
        s = damaged(c, id, "is not a regular file", true);
    } else if (read_record(c, id, f, &st, &m, &as_written) < 0) {
        log_info("chunk %" PRIu64 ": its cache file has no record of what it was made from "
                 "(copied without extended attributes?); computing it again",
                 id);
        s = CHUNK_STALE;
    } else if (!key_eq(m.key, want)) {
        log_info("chunk %" PRIu64 ": the input or configuration changed since it was computed; "
                 "computing it again",
                 id);
        s = CHUNK_STALE;
    } else if ((uint64_t)st.st_size != m.length) {
        s = damaged(c, id, "has the wrong length", false);
    } else if (!as_written && !begin_verify(c, id, &st, want)) {
        /* written to, copied or restored since roifs wrote it: the content must show it */
        uint32_t crc = 0;
        int r = crc_of_file(f, m.length, &crc);
        end_verify(c, id, &st, want, r == 0 && crc == m.crc);
        log_debug("chunk %" PRIu64 ": checksum of %" PRIu64 " bytes verified", id, m.length);
        if (r == 0 && crc != m.crc && !last && replaced_since(c, name, &st)) {
            /* its record read by name may be the new file's (a file system that reads extended
             * attributes by path, or a sidecar): not damage, a file replaced; look again */
            close(f);
            return CHUNK_REPLACED;
        }
        if (r < 0 || crc != m.crc)
            s = damaged(c, id, r < 0 ? "cannot be read" : "fails its checksum", false);
    }
    if (s != CHUNK_CURRENT) {
        close(f);
        return s;
    }
    if (meta)
        *meta = m;
    *fd = f;
    return s;
}

enum cache_chunk_state cache_chunk_open_current(struct cache *c, uint64_t id, struct key128 want,
                                                int *fd, struct cache_chunk_meta *meta)
{
    enum cache_chunk_state s = CHUNK_REPLACED;
    for (int i = 0; i < 4 && s == CHUNK_REPLACED; i++)
        s = open_current(c, id, want, fd, meta, i == 3);
    return s;
}

int cache_chunk_open_plain(struct cache *c, uint64_t id, int *fd)
{
    char name[32];
    name_of(id, name, sizeof name);
    int f = openat(c->chunks_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0)
        return -errno;
    struct stat st;
    if (fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(f);
        return -EINVAL;
    }
    *fd = f;
    return 0;
}

int cache_chunk_stat(struct cache *c, uint64_t id, uint64_t *size, int64_t *mtime_ns, uint64_t *ino)
{
    char name[32];
    struct stat st;
    name_of(id, name, sizeof name);
    if (fstatat(c->chunks_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -errno;
    if (!S_ISREG(st.st_mode))
        return -ENOENT; /* never the size of what a link points to */
    *size = (uint64_t)st.st_size;
    *mtime_ns = ts_to_ns(st.st_mtim);
    if (ino)
        *ino = (uint64_t)st.st_ino;
    return 0;
}

bool cache_chunk_exists(struct cache *c, uint64_t id)
{
    uint64_t size;
    int64_t mtime_ns;
    return cache_chunk_stat(c, id, &size, &mtime_ns, NULL) == 0;
}

/* ---- writing ---- */

/* Sets fd's modification time to the precise clock's now, and *st to the file's state after.
 * A write(2) to the file later stamps it with the coarse clock (the time of the last tick,
 * before now or after it, never exactly now), so the stamp in the record tells a file that
 * nobody wrote since from any other. */
static int stamp(int fd, struct stat *st)
{
    struct timespec t[2] = {{.tv_nsec = UTIME_OMIT}, {0}};
    if (clock_gettime(CLOCK_REALTIME, &t[1]) < 0 || futimens(fd, t) < 0 || fstat(fd, st) < 0)
        return -errno;
    return 0;
}

static int chunk_write_once(struct cache *c, uint64_t id, const void *data, size_t len,
                            struct key128 key, bool *replaced, int *fd_out)
{
    char name[32], side[40];
    name_of(id, name, sizeof name);
    int dirfd = c->chunks_fd;
    struct atomic_file a;
    int r = atomic_begin(&a, dirfd, name, NULL, ".tmp.", 0600);
    if (r < 0)
        return r;
    struct cache_chunk_meta m = {.key = key, .length = len, .crc = zarr_crc32c(0, data, len)};
    struct chunk_record rec;
    struct stat st;
    r = write_full(a.fd, data, len);
    if (r == 0)
        r = stamp(a.fd, &st);
    if (r == 0 && !c->sidecar)
        cache_follow_sidecar_mark(c); /* a host without xattrs joined since */
    if (r == 0 && !c->sidecar) {
        record_fill(&rec, &m, &st);
        if (fsetxattr(a.fd, CACHE_CHUNK_XATTR, &rec, sizeof rec, 0) < 0)
            r = -errno;
    } else if (r == 0) {
        record_fill(&rec, &m, &st);
        sidecar_of(id, side, sizeof side);
        struct atomic_file sa;
        r = atomic_begin(&sa, dirfd, side, NULL, ".tmp.", 0600);
        if (r == 0)
            r = write_full(sa.fd, &rec, sizeof rec);
        /* the record first: a data file without its record is only ever "not current" (and a
         * sidecar naming a file that never appeared is never valid) */
        if (r == 0)
            r = atomic_commit(&sa, ATOMIC_OVER_DIR);
        if (r < 0)
            atomic_abort(&sa);
    }
    int cr = atomic_close(&a, 0);
    if (r == 0)
        r = cr;
    /* read-only, and opened before the rename: whoever removes or replaces the name later,
     * the caller still has the bytes it wrote */
    int rfd = r < 0 || !fd_out ? -1 : openat(dirfd, a.tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (r == 0 && fd_out && rfd < 0)
        r = -errno;
    struct stat old;
    *replaced = fstatat(dirfd, name, &old, AT_SYMLINK_NOFOLLOW) == 0;
    if (r == 0)
        r = atomic_commit(&a, ATOMIC_OVER_DIR);
    if (r < 0) {
        if (rfd >= 0)
            close(rfd);
        atomic_abort(&a);
        return r;
    }
    set_verified(c, id, &st, key);
    if (fd_out)
        *fd_out = rfd;
    return 0;
}

int cache_chunk_write(struct cache *c, uint64_t id, const void *data, size_t len, struct key128 key,
                      int *fd)
{
    bool replaced = false;
    int r = chunk_write_once(c, id, data, len, key, &replaced, fd);
    if (r == -ENOENT && cache_repair(c) == 0)
        r = chunk_write_once(c, id, data, len, key, &replaced, fd);
    if (r == -ENOTSUP || r == -EOPNOTSUPP) {
        /* the file system changed under us (e.g. remounted without xattrs): sidecars now */
        c->sidecar = true;
        r = chunk_write_once(c, id, data, len, key, &replaced, fd);
    }
    return r < 0 ? r : replaced ? 1 : 0;
}

/* A removal by name alone could delete a newer file renamed there since the caller looked
 * (another job's, another process's); writers hold the chunk's lock while they rename, so
 * the inode is compared under that lock. */
int cache_chunk_remove_if(struct cache *c, uint64_t id, uint64_t ino)
{
    int lock = cache_lock_chunk(c, id, false);
    if (lock == -EWOULDBLOCK)
        return -EBUSY;
    if (lock < 0)
        return lock;
    char name[40];
    struct stat st;
    name_of(id, name, sizeof name);
    int r = 0;
    if (fstatat(c->chunks_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        r = -errno;
    else if ((uint64_t)st.st_ino != ino)
        r = -ESTALE;
    else
        r = cache_chunk_remove(c, id);
    cache_unlock(c, lock);
    return r;
}

int cache_chunk_remove(struct cache *c, uint64_t id)
{
    char name[40];
    name_of(id, name, sizeof name);
    if (unlinkat(c->chunks_fd, name, 0) < 0)
        return -errno;
    sidecar_of(id, name, sizeof name);
    unlinkat(c->chunks_fd, name, 0);
    return 0;
}

int cache_chunk_each(struct cache *c, void (*fn)(void *ctx, uint64_t id), void *ctx)
{
    DIR *d = opendir_at(c->chunks_fd, ".");
    if (!d)
        return -errno;
    struct dirent *de;
    while ((de = readdir(d))) {
        uint64_t id;
        if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && parse_u64(de->d_name, &id) == 0 &&
            (de->d_type == DT_REG || de->d_type == DT_UNKNOWN))
            fn(ctx, id);
    }
    closedir(d);
    return 0;
}

/* Temporary files older than this were left by a writer that died. */
#define LEFTOVER_AGE_S 3600

/* cache_chunk_remove_leftovers (moved from src/engine/gc.c, which may not see struct cache). */
size_t cache_chunk_remove_leftovers(struct cache *c)
{
    DIR *d = opendir_at(c->chunks_fd, ".");
    if (!d)
        return 0;
    size_t n = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        struct stat st;
        if (fstatat(c->chunks_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        bool gone = false;
        if (strncmp(name, ".tmp.", 5) == 0 || strncmp(name, ".probe.", 7) == 0) {
            gone = now - st.st_mtime > LEFTOVER_AGE_S;
        } else {
            const char *dot = strstr(name, ".meta");
            uint64_t id;
            char data[32];
            if (dot && strcmp(dot, ".meta") == 0 && (size_t)(dot - name) < sizeof data) {
                snprintf(data, sizeof data, "%.*s", (int)(dot - name), name);
                gone = parse_u64(data, &id) == 0 && !cache_chunk_exists(c, id) &&
                       now - st.st_mtime > LEFTOVER_AGE_S;
            }
        }
        if (gone && unlinkat(c->chunks_fd, name, 0) == 0)
            n++;
    }
    closedir(d);
    return n + claim_remove_dead(c->locks_fd);
}
