/* input_file.c: the input's chunk and shard files: opened without ever blocking in open(),
 * regular files only, read whole, in a range, or straight into place; their identities, and
 * the content hashes a box read saw (input_seen_note). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../nd.h"
#include "input_state.h"

/* The name of storage file sid (a chunk, or a shard) in the input's directory. */
void zarr_input_storage_key(const struct zarr_input *in, uint64_t sid, char *buf, size_t len)
{
    uint64_t idx[ROIFS_MAX_DIM];
    nd_unlinear(sid, in->grid, in->meta.ndim, idx);
    zarr_meta_chunk_key(&in->meta, idx, buf, len);
}

void input_fid_of(const struct stat *st, struct file_id *fid)
{
    memset(fid, 0, sizeof *fid);
    if (S_ISREG(st->st_mode)) {
        fid->exists = true;
        fid->size = (uint64_t)st->st_size;
        fid->mtime_ns = (uint64_t)ts_to_ns(st->st_mtim);
        fid->ctime_ns = (uint64_t)ts_to_ns(st->st_ctim);
        fid->ino = (uint64_t)st->st_ino;
    }
}

/* fd, of the input's directory, failed with r: true when it went away (ENOTCONN: a FUSE input
 * whose daemon ended, such as another roifs mount) and a newer descriptor of the same array
 * is there to try again with. */
static bool reconnected(const struct zarr_input *in, int fd, int r)
{
    return r == -ENOTCONN && input_dir_reconnect(in, fd);
}

/* openat of the input file key, read-only, never blocking in open: a descriptor or -errno. */
int input_open_key(const struct zarr_input *in, const char *key)
{
    if (in->remote)
        return -EOPNOTSUPP; /* its readers go through input_remote.c */
    for (int attempt = 0;; attempt++) {
        int dfd = input_dir_enter(in->dir);
        int fd = openat(dfd, key, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        int r = fd >= 0 ? fd : -errno; /* before reconnected, whose own calls set errno */
        bool again = fd < 0 && attempt == 0 && reconnected(in, dfd, r);
        input_dir_leave(in->dir);
        if (!again)
            return r;
    }
}

void input_stat_key(const struct zarr_input *in, const char *key, struct file_id *fid)
{
    struct stat st;
    if (in->remote) {
        input_remote_stat_key(in, key, fid);
        return;
    }
    memset(fid, 0, sizeof *fid);
    int dfd = input_dir_enter(in->dir);
    bool ok = fstatat(dfd, key, &st, 0) == 0;
    if (!ok && reconnected(in, dfd, -errno)) {
        input_dir_leave(in->dir);
        dfd = input_dir_enter(in->dir);
        ok = fstatat(dfd, key, &st, 0) == 0;
    }
    input_dir_leave(in->dir);
    if (ok)
        input_fid_of(&st, fid);
}

/* The end of a read of the whole file fd, begun at start, as ri->fid (fstat before the read),
 * of the bytes p[0..n): their hash, and whether the file may have changed while they were
 * read without a change of identity (ri->racy: nothing learnt from them is kept as the
 * file's). */
static void read_done(const struct zarr_input *in, int fd, uint64_t start, const void *p, size_t n,
                      struct read_info *ri)
{
    struct stat st;
    struct file_id after = {0};
    if (fstat(fd, &st) == 0)
        input_fid_of(&st, &after);
    ri->hash = input_hash_read(in, &ri->fid, p, n);
    ri->racy = input_racy(in, &ri->fid, start) || !input_same_file(&ri->fid, &after);
}

/* Reads chunk file key whole into a malloc'd buffer. Only a regular file is read: the open
 * does not block and anything else is refused, since a FIFO would hang the compute thread in
 * open() and a link to a device such as /dev/zero would never end. A directory is -EISDIR
 * (missing, as in zarr-python); other failures are -EIO with a message. */
int input_read_file(const struct zarr_input *in, const char *key, char **raw, size_t *len,
                    struct read_info *ri, struct errbuf *err)
{
    if (in->remote)
        return input_remote_read_file(in, key, input_max_file_size(in), raw, len, ri, err);
    uint64_t start = input_now_ns();
    int fd = input_open_key(in, key);
    if (fd < 0) {
        int r = fd;
        if (input_missing_errno(r))
            return r;
        return err_set(err, -EIO, "%s/%s: cannot read chunk: %s", in->path, key, strerror(-r));
    }
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    if (r == 0 && !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, -EIO, "%s/%s: cannot read chunk: not a regular file", in->path, key);
    }
    if (r == 0) /* taken before the bytes are read: what they are made of is this file or newer */
        input_fid_of(&st, &ri->fid);
    /* No codec makes a chunk this much larger than its data: refuse before allocating. */
    if (r == 0 && (uint64_t)st.st_size > 2 * (uint64_t)in->chunk_nbytes + (1u << 20)) {
        close(fd);
        return err_set(err, -EIO,
                       "%s/%s: cannot read chunk: %lld bytes is too large for a chunk "
                       "of %zu bytes",
                       in->path, key, (long long)st.st_size, in->chunk_nbytes);
    }
    size_t size = r == 0 ? (size_t)st.st_size : 0, got = 0;
    char *buf = xmalloc(size + 1);
    if (r == 0) /* one byte more than the size, to notice a file growing under us */
        r = pread_full(fd, buf, size + 1, 0, &got);
    if (r == 0 && got != size)
        r = -EAGAIN;
    if (r == 0)
        read_done(in, fd, start, buf, size, ri);
    close(fd);
    if (r < 0) {
        free(buf);
        return err_set(err, -EIO, "%s/%s: cannot read chunk: %s", in->path, key,
                       r == -EAGAIN ? "it changed while being read" : strerror(-r));
    }
    buf[size] = '\0';
    *raw = buf;
    *len = size;
    return 0;
}

/* Reads chunk file key, stored as its plain bytes (v2, no compressor, little-endian C
 * order) of exactly n = chunk_nbytes bytes, straight into dst. 1: the file is not that
 * (another size, not a regular file, missing): the caller reads it the general way, which
 * gives each case its answer. */
int input_read_plain(const struct zarr_input *in, const char *key, void *dst, size_t n,
                     struct read_info *ri, struct errbuf *err)
{
    uint64_t start = input_now_ns();
    int fd = input_open_key(in, key);
    if (fd < 0)
        return 1;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != n) {
        close(fd);
        return 1;
    }
    input_fid_of(&st, &ri->fid); /* before the bytes are read, as read_chunk_file */
    size_t got = 0;
    char more;
    int r = pread_full(fd, dst, n, 0, &got);
    if (r == 0 && got == n) /* a byte beyond the size: the file grew under us */
        r = pread(fd, &more, 1, (off_t)n) == 0 ? 0 : -EAGAIN;
    else if (r == 0)
        r = -EAGAIN;
    if (r == 0)
        read_done(in, fd, start, dst, n, ri);
    close(fd);
    if (r < 0)
        return err_set(err, -EIO, "%s/%s: cannot read chunk: %s", in->path, key,
                       r == -EAGAIN ? "it changed while being read" : strerror(-r));
    return 0;
}

/* Reads n bytes at off of the open file fd (named key) into a malloc'd buffer. */
int input_read_range(struct zarr_input *in, int fd, const char *key, uint64_t off, size_t n,
                     void **out, struct errbuf *err)
{
    void *buf = xmalloc(n ? n : 1);
    size_t got;
    int r = pread_full(fd, buf, n, off, &got);
    if (r == 0 && got != n)
        r = -ENODATA;
    if (r < 0) {
        free(buf);
        return err_set(err, -EIO, "%s/%s: cannot read %zu bytes at %llu: %s", in->path, key, n,
                       (unsigned long long)off, r == -ENODATA ? "file truncated" : strerror(-r));
    }
    *out = buf;
    return 0;
}

void input_seen_note(const struct zarr_input *in, struct seen *sn, uint64_t sid, bool exists,
                     uint64_t hash)
{
    int nd = in->meta.ndim;
    uint64_t idx[ROIFS_MAX_DIM];
    nd_unlinear(sid, in->grid, nd, idx);
    for (int d = 0; d < nd; d++)
        idx[d] -= sn->s0[d];
    size_t pos = (size_t)nd_linear(idx, sn->sn, nd);
    if (sn->set[pos] && (sn->exists[pos] != exists || sn->hash[pos] != hash))
        sn->conflict = true;
    sn->exists[pos] = exists;
    sn->hash[pos] = exists ? hash : 0;
    sn->set[pos] = true;
}
