/* input_hash.c: what the input's storage files hold: the content hash (XXH3-64) of each chunk
 * or shard file, recorded by the file's identity (inode, size, mtime, ctime) only when the
 * file provably did not change while it was hashed (git's "racy timestamp" rule: its mtime
 * and ctime are older than the start of the read by a margin), kept in the cache directory
 * so that a remount looks at identities instead of reading the input again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "../nd.h"
#include "input_state.h"

/* Writes may take this long after they set the file's times (a large pwrite throttled by the
 * kernel's dirty page limits); a file whose times are this recent is hashed at every look. */
#define RACY_MARGIN_NS (2ULL * 1000000000ULL)
/* Entries are written at most this often (and at close). */
#define SAVE_EVERY_NS (1000000000ULL)
#define HASHES_MAGIC  "roifsIH1"

void input_hashes_init(struct input_hashes *h)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    map_init(&h->e, sizeof(struct hash_entry), 0);
    h->dirfd = -1;
    h->margin_ns = RACY_MARGIN_NS;
}

/* ---- the table (lock held) ---- */

static void put_locked(struct input_hashes *h, const struct hash_entry *e)
{
    *(struct hash_entry *)map_put(&h->e, e->sid, 0, NULL) = *e;
}

bool input_hash_known(struct zarr_input *in, uint64_t sid, const struct file_id *fid,
                      uint64_t *hash)
{
    struct input_hashes *h = &in->hashes;
    if (h->verify || !fid->exists)
        return false;
    pthread_mutex_lock(&h->lock);
    const struct hash_entry *e = map_get(&h->e, sid, 0);
    bool ok = e && input_same_file(&e->fid, fid);
    if (ok)
        *hash = e->hash;
    pthread_mutex_unlock(&h->lock);
    return ok;
}

/* ---- kept in the cache directory: magic, records, crc32c of all before it ---- */

struct hash_rec {
    uint64_t sid, ino, size, mtime_ns, ctime_ns, hash;
};

/* The entries as the bytes of their file (lock held); malloc'd, *len its length. */
static char *encode_locked(const struct input_hashes *h, size_t *len)
{
    size_t n = 8 + map_count(&h->e) * sizeof(struct hash_rec);
    char *buf = xmalloc(n + 4), *p = buf + 8;
    memcpy(buf, HASHES_MAGIC, 8);
    size_t it = 0;
    void *v;
    while (map_next(&h->e, &it, NULL, &v)) {
        const struct hash_entry *e = v;
        struct hash_rec r = {e->sid,          e->fid.ino,      e->fid.size,
                             e->fid.mtime_ns, e->fid.ctime_ns, e->hash};
        memcpy(p, &r, sizeof r);
        p += sizeof r;
    }
    uint32_t crc = zarr_crc32c(0, buf, n);
    memcpy(buf + n, &crc, 4);
    *len = n + 4;
    return buf;
}

/* Writes the entries when some are new and the last write is older than SAVE_EVERY_NS (or
 * always with force). A failure only costs hashing again after a remount. */
static void save(struct input_hashes *h, bool force)
{
    pthread_mutex_lock(&h->lock);
    uint64_t now = input_now_ns();
    if (h->dirfd < 0 || !h->dirty || (!force && now - h->saved_ns < SAVE_EVERY_NS)) {
        pthread_mutex_unlock(&h->lock);
        return;
    }
    size_t len;
    char *buf = encode_locked(h, &len);
    h->dirty = false;
    h->saved_ns = now;
    int fd = h->dirfd;
    char name[sizeof h->name];
    memcpy(name, h->name, sizeof name);
    pthread_mutex_unlock(&h->lock);
    if (file_write_atomic(fd, name, buf, len, false) < 0)
        log_debug("input hashes %s: cannot write them", name);
    free(buf);
}

void input_hash_note(struct zarr_input *in, uint64_t sid, const struct file_id *fid, uint64_t hash)
{
    struct input_hashes *h = &in->hashes;
    if (h->verify || !fid->exists)
        return;
    struct hash_entry e = {.sid = sid, .hash = hash, .fid = *fid};
    pthread_mutex_lock(&h->lock);
    const struct hash_entry *old = map_get(&h->e, sid, 0);
    bool same = old && input_same_file(&old->fid, fid) && old->hash == hash;
    if (!same) {
        put_locked(h, &e);
        h->dirty = true;
    }
    pthread_mutex_unlock(&h->lock);
    if (!same)
        save(h, false);
}

/* Reads the regular file name of dirfd (not following a symbolic link, as every file of the
 * cache) of at most max bytes into a malloc'd *data: 0 or -errno. */
static int read_kept(int dirfd, const char *name, uint64_t max, char **data, size_t *len)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max))
        r = -EINVAL;
    size_t n = r == 0 ? (size_t)st.st_size : 0, got = 0;
    char *buf = xmalloc(n + 1);
    if (r == 0)
        r = pread_full(fd, buf, n, 0, &got);
    close(fd);
    if (r == 0 && got != n)
        r = -EAGAIN;
    if (r < 0) {
        free(buf);
        return r;
    }
    *data = buf;
    *len = n;
    return 0;
}

int zarr_input_keep_hashes(struct zarr_input *in, int dirfd)
{
    struct input_hashes *h = &in->hashes;
    uint64_t id = hash64(HASH64_INIT, in->path, strlen(in->path) + 1);
    id = hash64(id, in->zarray, strlen(in->zarray));
    int fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    char *data = NULL;
    size_t len = 0;
    pthread_mutex_lock(&h->lock);
    if (h->dirfd >= 0)
        close(h->dirfd);
    h->dirfd = fd;
    snprintf(h->name, sizeof h->name, "%016llx", (unsigned long long)id);
    uint64_t nstorage = nd_prod(in->grid, in->meta.ndim);
    int r = read_kept(fd, h->name, 12 + nstorage * sizeof(struct hash_rec), &data, &len);
    uint32_t crc = 0;
    if (r == 0 && len >= 12)
        memcpy(&crc, data + len - 4, 4);
    if (r == 0 && len >= 12 && memcmp(data, HASHES_MAGIC, 8) == 0 &&
        (len - 12) % sizeof(struct hash_rec) == 0 && crc == zarr_crc32c(0, data, len - 4)) {
        for (size_t off = 8; off + sizeof(struct hash_rec) <= len - 4;
             off += sizeof(struct hash_rec)) {
            struct hash_rec rec;
            memcpy(&rec, data + off, sizeof rec);
            if (rec.sid >= nstorage)
                continue;
            struct hash_entry e = {.sid = rec.sid,
                                   .hash = rec.hash,
                                   .fid = {true, rec.size, rec.mtime_ns, rec.ctime_ns, rec.ino}};
            put_locked(h, &e);
        }
    }
    pthread_mutex_unlock(&h->lock);
    free(data);
    return 0;
}

void zarr_input_set_verify(struct zarr_input *in, bool verify)
{
    in->hashes.verify = verify && !in->remote; /* a remote input: its signatures */
}

void zarr_input_set_racy_margin(struct zarr_input *in, uint64_t ns)
{
    in->hashes.margin_ns = ns;
}

uint64_t zarr_input_hash_passes(struct zarr_input *in)
{
    pthread_mutex_lock(&in->hashes.lock);
    uint64_t n = in->hashes.passes;
    pthread_mutex_unlock(&in->hashes.lock);
    return n;
}

void input_hashes_let_go(struct input_hashes *h)
{
    save(h, true);
    pthread_mutex_lock(&h->lock);
    if (h->dirfd >= 0)
        close(h->dirfd);
    h->dirfd = -1;
    pthread_mutex_unlock(&h->lock);
}

void input_hashes_destroy(struct input_hashes *h)
{
    save(h, true);
    if (h->dirfd >= 0)
        close(h->dirfd);
    map_destroy(&h->e);
    pthread_mutex_destroy(&h->lock);
}

/* ---- hashing files ---- */

int input_hash_fd(int fd, uint64_t size, const struct range_check *chk, size_t n, uint64_t *hash)
{
    enum { BLOCK = 1 << 20 };
    XXH3_state_t *st = XXH3_createState(), *cs = n ? XXH3_createState() : NULL;
    char *buf = xmalloc(BLOCK);
    XXH3_64bits_reset(st);
    int r = 0;
    uint64_t off = 0;
    for (;;) { /* one block more than the size, to notice a file grown under us */
        size_t got;
        r = pread_full(fd, buf, BLOCK, (off_t)off, &got);
        if (r < 0 || got == 0)
            break;
        if (off + got > size) {
            r = -EAGAIN;
            break;
        }
        XXH3_64bits_update(st, buf, got);
        off += got;
    }
    if (r == 0 && off != size)
        r = -EAGAIN;
    /* the ranges a read used: read again, their bytes must be those it saw */
    for (size_t i = 0; r == 0 && i < n; i++) {
        XXH3_64bits_reset(cs);
        for (uint64_t o = chk[i].off; r == 0 && o < chk[i].off + chk[i].len;) {
            size_t want = chk[i].off + chk[i].len - o < BLOCK ? chk[i].off + chk[i].len - o : BLOCK;
            size_t got;
            r = pread_full(fd, buf, want, (off_t)o, &got);
            if (r == 0 && got != want)
                r = -EAGAIN;
            if (r == 0)
                XXH3_64bits_update(cs, buf, got);
            o += got;
        }
        if (r == 0 && (uint64_t)XXH3_64bits_digest(cs) != chk[i].hash)
            r = -EAGAIN;
    }
    if (r == 0)
        *hash = (uint64_t)XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (cs)
        XXH3_freeState(cs);
    free(buf);
    return r;
}

/* A value no read gives, for a file that could not be hashed: any key made with it is new. */
static uint64_t unreadable(const struct file_id *fid)
{
    uint64_t h = hash64(HASH64_INIT, "roifs unreadable", 16);
    h = hash64(h, fid, sizeof *fid);
    return hash64(h, &(uint64_t){input_now_ns()}, 8);
}

uint64_t input_hash_now(struct zarr_input *in, uint64_t sid, const struct file_id *fid,
                        bool *exists)
{
    uint64_t hash;
    *exists = fid->exists;
    if (!fid->exists)
        return 0;
    if (input_by_identity(in))
        return input_identity_value(fid);
    if (input_hash_known(in, sid, fid, &hash))
        return hash;
    char key[ROIFS_MAX_DIM * 24 + 4];
    zarr_input_storage_key(in, sid, key, sizeof key);
    uint64_t max = input_max_file_size(in);
    for (int attempt = 0; attempt < 3; attempt++) {
        uint64_t start = input_now_ns();
        int fd = input_open_key(in, key);
        if (fd < 0) {
            *exists = !input_missing_errno(fd);
            return *exists ? unreadable(fid) : 0;
        }
        struct stat st;
        struct file_id before, after;
        int r = fstat(fd, &st) < 0 ? -errno : 0;
        if (r == 0)
            input_fid_of(&st, &before);
        if (r == 0 && S_ISDIR(st.st_mode)) {
            close(fd);
            *exists = false;
            return 0;
        }
        if (r == 0 && before.exists && before.size > max) { /* never read whole */
            close(fd);
            return input_identity_value(&before);
        }
        if (r == 0 && !before.exists)
            r = -EIO;
        if (r == 0)
            r = input_hash_fd(fd, before.size, NULL, 0, &hash);
        if (r == 0)
            r = fstat(fd, &st) < 0 ? -errno : 0;
        close(fd);
        pthread_mutex_lock(&in->hashes.lock);
        in->hashes.passes++;
        pthread_mutex_unlock(&in->hashes.lock);
        if (r == 0)
            input_fid_of(&st, &after);
        if (r == 0 && input_same_file(&before, &after)) {
            if (!input_racy(in, &before, start))
                input_hash_note(in, sid, &before, hash);
            return hash;
        }
        if (r < 0 && r != -EAGAIN)
            return unreadable(fid);
    }
    return unreadable(fid);
}

/* Above the directory's part (input_dir.c), so that the reader's files call only down. */
void zarr_input_park(struct zarr_input *in)
{
    input_hashes_let_go(&in->hashes);
    input_dir_park(in);
}
