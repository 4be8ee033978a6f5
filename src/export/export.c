/* export.c: writing the tree of a set of arrays into a directory (export.h): the files, each
 * by rename of a complete copy; the resume rule for the chunk files an earlier run left; the
 * listing of the tree; the checks and the marker of DEST. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../atomic_file.h"
#include "../zarr/zarr.h"
#include "export.h"

#define TMP_PREFIX ".roifs-tmp."

struct export_meta {
    char *rel;
    const char *text;
    size_t len;
};

/* ---- writing files ---- */

/* What a chunk file in DEST was made of, in the extended attribute user.roifs.export (set on
 * the temporary file before its rename): resuming keeps a file only when this matches the
 * chunk as the cache has it now and the file's bytes verify. */
#define EXPORT_XATTR "user.roifs.export"

struct export_record {
    char magic[4]; /* "rxp1" */
    uint32_t crc;  /* crc32c of the file's bytes */
    uint64_t key_lo, key_hi, length;
    uint32_t pad, record_crc; /* of the bytes above */
};

static void record_fill(struct export_record *rec, const struct cache_chunk_meta *m)
{
    memset(rec, 0, sizeof *rec);
    memcpy(rec->magic, "rxp1", 4);
    rec->crc = m->crc;
    rec->key_lo = m->key.lo;
    rec->key_hi = m->key.hi;
    rec->length = m->length;
    rec->record_crc = zarr_crc32c(0, rec, offsetof(struct export_record, record_crc));
}

/* crc32c of the first size bytes of fd, and (out >= 0) a copy of them into out: mapped when
 * large, so that checking costs no extra copy. */
static int copy_and_crc(int out, int in, uint64_t size, uint32_t *crc)
{
    if (size >= (64u << 10) && size <= SIZE_MAX) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, in, 0);
        if (p != MAP_FAILED) {
            *crc = zarr_crc32c(0, p, (size_t)size);
            int r = out >= 0 ? write_full(out, p, (size_t)size) : 0;
            munmap(p, (size_t)size);
            return r;
        }
    }
    char buf[1 << 16];
    uint32_t c = 0;
    for (uint64_t off = 0; off < size;) {
        size_t want = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf, got = 0;
        int r = pread_full(in, buf, want, off, &got);
        if (r == 0 && got != want)
            r = -EIO; /* the source shrank */
        if (r == 0 && out >= 0)
            r = write_full(out, buf, got);
        if (r < 0)
            return r;
        c = zarr_crc32c(c, buf, got);
        off += got;
    }
    *crc = c;
    return 0;
}

static void warn(struct export *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct export *x, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (x->warn)
        x->warn("%s", msg);
    else
        fprintf(stderr, "%s\n", msg);
}

void export_init(struct export *x, const char *dest,
                 void (*warn_fn)(const char *fmt, ...) __attribute__((format(printf, 1, 2))))
{
    memset(x, 0, sizeof *x);
    x->dest = dest;
    x->destfd = -1;
    x->warn = warn_fn;
}

void export_close(struct export *x)
{
    for (size_t k = 0; k < x->n; k++)
        free(x->rel[k]);
    for (size_t k = 0; k < x->nmeta; k++)
        free(x->meta[k].rel);
    free(x->rel);
    free(x->ids);
    free(x->arrays);
    free(x->meta);
    if (x->destfd >= 0)
        close(x->destfd);
    export_init(x, x->dest, x->warn);
}

/* True when DEST/rel holds exactly the chunk m describes: its record names m's key, length
 * and checksum, and its bytes have that length and checksum. */
static bool dest_is_current(struct export *x, const char *rel, const struct cache_chunk_meta *m)
{
    int fd = openat(x->destfd, rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    struct export_record rec, want;
    record_fill(&want, m);
    uint32_t crc;
    bool yes = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == m->length &&
               fgetxattr(fd, EXPORT_XATTR, &rec, sizeof rec) == (ssize_t)sizeof rec &&
               memcmp(&rec, &want, sizeof rec) == 0 && copy_and_crc(-1, fd, m->length, &crc) == 0 &&
               crc == m->crc;
    close(fd);
    return yes;
}

/* Writes DEST/rel from fd (size bytes, with record meta: checked while copied and attached)
 * or from data: a temporary file beside it, then a rename, so that DEST never holds part of a
 * file under its final name. */
static int write_atomic(struct export *x, const char *rel, int fd, off_t size, const char *data,
                        const struct cache_chunk_meta *meta, struct errbuf *err)
{
    struct atomic_file a;
    int r = atomic_begin(&a, x->destfd, rel, NULL, TMP_PREFIX, 0666);
    uint32_t crc = 0;
    if (r == 0)
        r = data ? write_full(a.fd, data, (size_t)size)
                 : copy_and_crc(a.fd, fd, (uint64_t)size, &crc);
    if (r == 0 && meta && crc != meta->crc)
        r = -EBADMSG; /* the cache's copy does not match its record */
    if (r == 0 && meta) {
        struct export_record rec;
        record_fill(&rec, meta);
        if (fsetxattr(a.fd, EXPORT_XATTR, &rec, sizeof rec, 0) < 0 && !x->warned_xattr) {
            x->warned_xattr = true; /* resuming then rewrites every chunk */
            warn(x,
                 "roifs: %s: cannot record what chunk files are made of (%s); an "
                 "interrupted export will write every chunk again",
                 x->dest, strerror(errno));
        }
    }
    if (r == 0)
        r = atomic_commit(&a, 0);
    if (r < 0) {
        atomic_abort(&a);
        err_set(err, r, "%s/%s: cannot write: %s", x->dest, rel,
                r == -EBADMSG ? "the cached chunk does not match its checksum" : strerror(-r));
    }
    return r;
}

/* The resume rule (export.h). */
int export_chunk_ready(void *ctx, size_t k, int fd, const struct cache_chunk_meta *meta,
                       struct errbuf *err)
{
    struct export *x = ctx;
    struct stat src;
    if (fstat(fd, &src) < 0)
        return err_set(err, -errno, "chunk %s: %s", x->rel[k], strerror(errno));
    if (meta && (uint64_t)src.st_size == meta->length && dest_is_current(x, x->rel[k], meta)) {
        x->kept++;
        return 0;
    }
    int r = write_atomic(x, x->rel[k], fd, src.st_size, NULL,
                         meta && (uint64_t)src.st_size == meta->length ? meta : NULL, err);
    if (r == 0)
        x->written++;
    return r;
}

static int write_meta(struct export *x, const struct export_meta *m, struct errbuf *err)
{
    char *old = NULL;
    size_t len = 0;
    bool same = file_read_all_at(x->destfd, m->rel, &old, &len) == 0 && len == m->len &&
                memcmp(old, m->text, len) == 0;
    free(old);
    return same ? 0 : write_atomic(x, m->rel, -1, (off_t)m->len, m->text, NULL, err);
}

/* ---- the tree to write ---- */

struct listing {
    struct entry {
        char *name;
        uint64_t ino;
    } * v;
    size_t n, cap;
};

static int list_entry(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    (void)is_dir, (void)next_off;
    struct listing *l = ctx;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = xrealloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n].name = xstrdup(name);
    l->v[l->n].ino = ino;
    l->n++;
    return 0;
}

/* Removes what an interrupted export left half-written in directory rel ("" for DEST). */
static void remove_stale_temps(struct export *x, const char *rel)
{
    DIR *d = opendir_at(x->destfd, *rel ? rel : ".");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0)
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
}

static void add_chunk(struct export *x, uint64_t id, int array, char *rel)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 256;
        x->ids = xrealloc(x->ids, x->cap * sizeof *x->ids);
        x->arrays = xrealloc(x->arrays, x->cap * sizeof *x->arrays);
        x->rel = xrealloc(x->rel, x->cap * sizeof *x->rel);
    }
    x->ids[x->n] = id;
    x->arrays[x->n] = array;
    x->rel[x->n++] = rel;
}

/* Lists directory ino of the tree (at rel under DEST), creating its subdirectories in DEST. */
static int walk(struct export *x, const struct ns *ns, uint64_t ino, const char *rel,
                struct errbuf *err)
{
    struct listing l = {0};
    int r = ns_readdir(ns, ino, 0, NULL, list_entry, &l);
    if (r < 0)
        err_set(err, r, "cannot list the tree: %s", strerror(-r));
    remove_stale_temps(x, rel);
    for (size_t i = 0; i < l.n && r == 0; i++) {
        struct ns_node node;
        char *path = *rel ? xasprintf("%s/%s", rel, l.v[i].name) : xstrdup(l.v[i].name);
        if (ns_get(ns, l.v[i].ino, &node) < 0) {
            free(path);
            continue;
        }
        switch (node.kind) {
        case NS_DIR:
            if (mkdirat(x->destfd, path, 0777) < 0 && errno != EEXIST)
                r = err_set(err, -errno, "%s/%s: cannot create: %s", x->dest, path,
                            strerror(errno));
            else
                r = walk(x, ns, l.v[i].ino, path, err);
            free(path);
            break;
        case NS_META:
            x->meta = xrealloc(x->meta, (x->nmeta + 1) * sizeof *x->meta);
            x->meta[x->nmeta++] = (struct export_meta){path, node.text, node.len};
            break;
        case NS_CHUNK:
            add_chunk(x, node.chunk, node.array, path);
            break;
        default:
            free(path);
        }
    }
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].name);
    free(l.v);
    return r;
}

/* ---- DEST and its marker ---- */

static char *marker_text(const struct task *t)
{
    return xasprintf("roifs-export 1\nfingerprint %016llx\nconfig %s\n",
                     (unsigned long long)t->fingerprint, t->cfg.path);
}

static bool dir_is_empty(int fd)
{
    int dup_fd = dup(fd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        if (dup_fd >= 0)
            close(dup_fd);
        return false;
    }
    bool empty = true;
    struct dirent *de;
    while (empty && (de = readdir(d)))
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    closedir(d);
    return empty;
}

int export_open_dest(struct export *x, const struct task *t, int *lock, struct errbuf *err)
{
    struct stat st;
    int r;
    if (stat(x->dest, &st) < 0 && (r = mkdir_p(x->dest, 0777)) < 0)
        return err_set(err, r == -EINVAL ? -EIO : r, "%s: cannot create: %s", x->dest,
                       strerror(-r));
    x->destfd = open(x->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (x->destfd < 0)
        return err_set(err, errno == ENOTDIR ? -EINVAL : -EIO, "%s: %s", x->dest,
                       errno == ENOTDIR ? "not a directory" : strerror(errno));
    char *want = marker_text(t), *have = NULL;
    char fp[40];
    snprintf(fp, sizeof fp, "\nfingerprint %016llx\n", (unsigned long long)t->fingerprint);
    r = file_read_all_at(x->destfd, EXPORT_MARKER, &have, NULL);
    if (r == 0 && (strncmp(have, "roifs-export 1\n", 15) != 0 || !strstr(have, fp))) {
        r = err_set(err, -EINVAL,
                    "%s: holds an export of another configuration or input (see %s/%s); "
                    "export to a new or empty directory",
                    x->dest, x->dest, EXPORT_MARKER);
    } else if (r < 0 && !dir_is_empty(x->destfd)) {
        r = err_set(err, -EINVAL,
                    "%s: not empty, and not an earlier export of this configuration; "
                    "export to a new or empty directory",
                    x->dest);
    } else if (r < 0 &&
               (r = file_write_atomic(x->destfd, EXPORT_MARKER, want, strlen(want), true)) < 0) {
        r = err_set(err, -EIO, "%s/%s: cannot write: %s", x->dest, EXPORT_MARKER, strerror(-r));
    } else {
        r = 0;
    }
    free(want);
    free(have);
    if (r)
        return r;
    *lock = openat(x->destfd, EXPORT_MARKER, O_RDONLY | O_CLOEXEC);
    if (*lock < 0 || flock(*lock, LOCK_EX | LOCK_NB) < 0)
        return err_set(err, -EIO, "%s: %s", x->dest,
                       errno == EWOULDBLOCK ? "another roifs export is writing there"
                                            : strerror(errno));
    return 0;
}

/* ---- the listing, the metadata ---- */

int export_list(struct export *x, const struct ns *ns, uint64_t ino, struct errbuf *err)
{
    return walk(x, ns, ino, "", err);
}

int export_list_set(struct export *x, struct arrayset *s, struct errbuf *err)
{
    /* the same metadata as a mount's: it depends only on the job */
    return walk(x, arrayset_tree(s), NS_INO_ROOT, "", err);
}

int export_write_metadata(struct export *x, struct errbuf *err)
{
    for (size_t i = 0; i < x->nmeta; i++) {
        int r = write_meta(x, &x->meta[i], err);
        if (r < 0)
            return r;
    }
    return 0;
}

int export_write_file(struct export *x, const char *rel, const void *data, size_t len,
                      struct errbuf *err)
{
    return write_atomic(x, rel, -1, (off_t)len, data, NULL, err);
}
