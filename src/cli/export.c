/* export.c: `roifs export [-j N] CONFIG DEST`: writes the presented tree as a plain Zarr array
 * at DEST, from the cache, computing what is missing; with --into IMAGE (ome = labels), the
 * label image and masking table into an OME-Zarr image. Every file appears by rename of a
 * complete copy, the metadata last, so an interrupted export is resumed by running it again. */
#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../arrays/otable.h"
#include "../arrays/overlay.h"
#include "../tree/namespace.h"
#include "../zarr/zarr.h"
#include "cli.h"

#define MARKER     ".roifs-export"
#define TMP_PREFIX ".roifs-tmp."

struct meta_file {
    char *rel;
    const char *text;
    size_t len;
};

struct export
{
    const char *dest;
    int destfd;
    uint64_t *ids; /* chunks, in the order the tree lists them */
    int *arrays;   /* the array of the set each belongs to */
    char **rel;    /* their paths under DEST */
    size_t n, cap;
    struct meta_file *meta;
    size_t nmeta;
    atomic_size_t written, kept;
    _Atomic bool warned_xattr;
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

/* Frees what the walk of the tree listed (the destination's descriptor stays the caller's). */
static void export_free(struct export *x)
{
    for (size_t k = 0; k < x->n; k++)
        free(x->rel[k]);
    for (size_t k = 0; k < x->nmeta; k++)
        free(x->meta[k].rel);
    free(x->rel);
    free(x->ids);
    free(x->arrays);
    free(x->meta);
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
    static atomic_ulong counter;
    const char *slash = strrchr(rel, '/');
    int dirlen = slash ? (int)(slash - rel + 1) : 0;
    char *tmp = xasprintf("%.*s" TMP_PREFIX "%ld.%lu", dirlen, rel, (long)getpid(),
                          (unsigned long)++counter);
    int out = openat(x->destfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    int r = out < 0 ? -errno : 0;
    uint32_t crc = 0;
    if (r == 0)
        r = data ? write_full(out, data, (size_t)size)
                 : copy_and_crc(out, fd, (uint64_t)size, &crc);
    if (r == 0 && meta && crc != meta->crc)
        r = -EBADMSG; /* the cache's copy does not match its record */
    if (r == 0 && meta) {
        struct export_record rec;
        record_fill(&rec, meta);
        if (fsetxattr(out, EXPORT_XATTR, &rec, sizeof rec, 0) < 0 && !x->warned_xattr) {
            x->warned_xattr = true; /* resuming then rewrites every chunk */
            run_message("roifs: %s: cannot record what chunk files are made of (%s); an "
                        "interrupted export will write every chunk again",
                        x->dest, strerror(errno));
        }
    }
    if (out >= 0 && close(out) < 0 && r == 0)
        r = -errno;
    if (r == 0 && renameat(x->destfd, tmp, x->destfd, rel) < 0)
        r = -errno;
    if (r < 0) {
        if (out >= 0)
            unlinkat(x->destfd, tmp, 0);
        err_set(err, r, "%s/%s: cannot write: %s", x->dest, rel,
                r == -EBADMSG ? "the cached chunk does not match its checksum" : strerror(-r));
    }
    free(tmp);
    return r;
}

/* The resume rule: a chunk file already in DEST is kept when it was made of exactly what the
 * cache's chunk is made of now and its bytes verify; any other is written again. */
static int export_chunk(void *ctx, size_t k, int fd, const struct cache_chunk_meta *meta,
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

static int write_meta(struct export *x, const struct meta_file *m, struct errbuf *err)
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
            x->meta[x->nmeta++] = (struct meta_file){path, node.text, node.len};
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

/* ---- DEST ---- */

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

/* Opens DEST, which must be new, empty, or an earlier export of this configuration, and
 * takes its marker's lock against a second export into it. 0 or an exit status. */
static int open_dest(struct export *x, const struct task *t, int *lock)
{
    struct stat st;
    int r;
    if (stat(x->dest, &st) < 0 && (r = mkdir_p(x->dest, 0777)) < 0) {
        fprintf(stderr, "roifs: %s: cannot create: %s\n", x->dest, strerror(-r));
        return EXIT_RUNTIME;
    }
    x->destfd = open(x->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (x->destfd < 0) {
        fprintf(stderr, "roifs: %s: %s\n", x->dest,
                errno == ENOTDIR ? "not a directory" : strerror(errno));
        return errno == ENOTDIR ? EXIT_USAGE : EXIT_RUNTIME;
    }
    char *want = marker_text(t), *have = NULL;
    char fp[40];
    snprintf(fp, sizeof fp, "\nfingerprint %016llx\n", (unsigned long long)t->fingerprint);
    r = file_read_all_at(x->destfd, MARKER, &have, NULL);
    if (r == 0 && (strncmp(have, "roifs-export 1\n", 15) != 0 || !strstr(have, fp))) {
        fprintf(stderr,
                "roifs: %s: holds an export of another configuration or input (see %s/%s); "
                "export to a new or empty directory\n",
                x->dest, x->dest, MARKER);
        r = EXIT_USAGE;
    } else if (r < 0 && !dir_is_empty(x->destfd)) {
        fprintf(stderr,
                "roifs: %s: not empty, and not an earlier export of this configuration; "
                "export to a new or empty directory\n",
                x->dest);
        r = EXIT_USAGE;
    } else if (r < 0 && (r = file_write_atomic(x->destfd, MARKER, want, strlen(want), true)) < 0) {
        fprintf(stderr, "roifs: %s/%s: cannot write: %s\n", x->dest, MARKER, strerror(-r));
        r = EXIT_RUNTIME;
    } else {
        r = 0;
    }
    free(want);
    free(have);
    if (r)
        return r;
    *lock = openat(x->destfd, MARKER, O_RDONLY | O_CLOEXEC);
    if (*lock < 0 || flock(*lock, LOCK_EX | LOCK_NB) < 0) {
        fprintf(stderr, "roifs: %s: %s\n", x->dest,
                errno == EWOULDBLOCK ? "another roifs export is writing there" : strerror(errno));
        return EXIT_RUNTIME;
    }
    return 0;
}

/* ---- export --into IMAGE (ome = labels): the overlay's new groups written into an image ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Removes what an interrupted export --into left in IMAGE/group: the hidden directories
 * .roifs-tmp.NAME.* and .roifs-old.NAME.* (never named by a list). */
static void remove_stale_dirs(const char *dir, const char *name)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char *tmp = xasprintf(".roifs-tmp.%s.", name), *old = xasprintf(".roifs-old.%s.", name);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, tmp, strlen(tmp)) == 0 ||
            strncmp(de->d_name, old, strlen(old)) == 0) {
            char *p = path_join(dir, de->d_name);
            rm_tree(p);
            free(p);
        }
    }
    closedir(d);
    free(tmp);
    free(old);
}

struct into {
    const char *image;
    bool overwrite;
    int format;
    const char *label, *table; /* the names */
    char *dirs[2][3];          /* [label, table]: the group dir, the temporary, the final */
};

/* A temporary directory IMAGE/group/.roifs-tmp.NAME.PID, made empty. */
static int into_tmp(struct into *in, int which, const char *group, const char *name)
{
    char *dir = path_join(in->image, group);
    in->dirs[which][0] = dir;
    in->dirs[which][1] = xasprintf("%s/.roifs-tmp.%s.%ld", dir, name, (long)getpid());
    in->dirs[which][2] = path_join(dir, name);
    int r = mkdir_p(dir, 0777);
    if (r == 0) {
        remove_stale_dirs(dir, name);
        r = mkdir(in->dirs[which][1], 0777) < 0 ? -errno : 0;
    }
    if (r < 0)
        fprintf(stderr, "roifs: %s: cannot create: %s\n", in->dirs[which][1], strerror(-r));
    return r < 0 ? EXIT_RUNTIME : 0;
}

struct sync_table {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int err;
};

static void table_done(void *ctx, int err)
{
    struct sync_table *st = ctx;
    pthread_mutex_lock(&st->m);
    st->err = err;
    st->done = true;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->m);
}

/* The masking table, computed with the engines started again (every chunk is cached now),
 * written into its temporary directory. */
static int into_table(struct into *in, struct arrayset *s)
{
    struct errbuf err = {{0}};
    if (arrayset_start(s, &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_RUNTIME;
    }
    struct sync_table st = {.done = false};
    pthread_mutex_init(&st.m, NULL);
    pthread_cond_init(&st.cv, NULL);
    struct otable *t = arrayset_table(s);
    otable_request(t, table_done, &st);
    pthread_mutex_lock(&st.m);
    while (!st.done)
        pthread_cond_wait(&st.cv, &st.m);
    pthread_mutex_unlock(&st.m);
    int r = st.err;
    struct export x = {.dest = in->dirs[1][1]};
    x.destfd = open(x.dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (size_t i = 0; r == 0 && i < otable_nfiles(t); i++) {
        const struct table_file *f = otable_file(t, i);
        if (!f)
            continue; /* an empty table has no chunk */
        char *p = path_join(x.dest, f->path), *slash = strrchr(p, '/');
        *slash = '\0';
        r = mkdir_p(p, 0777);
        free(p);
        if (r == 0)
            r = write_atomic(&x, f->path, -1, (off_t)f->len, (const char *)f->data, NULL, &err);
    }
    if (x.destfd >= 0)
        close(x.destfd);
    arrayset_stop(s);
    pthread_cond_destroy(&st.cv);
    pthread_mutex_destroy(&st.m);
    if (r < 0)
        fprintf(stderr, "roifs: the masking table: %s\n", err.msg[0] ? err.msg : strerror(-r));
    return r < 0 ? EXIT_RUNTIME : 0;
}

/* Puts the temporary directory in the place of the final one (the old one, with
 * --overwrite, moved away first and removed after). */
static int into_swap(char *const dirs[3])
{
    char *old =
        xasprintf("%s/.roifs-old.%s.%ld", dirs[0], strrchr(dirs[2], '/') + 1, (long)getpid());
    bool had = rename(dirs[2], old) == 0;
    int r = rename(dirs[1], dirs[2]) < 0 ? -errno : 0;
    if (r < 0) {
        fprintf(stderr, "roifs: %s: cannot rename into place: %s\n", dirs[2], strerror(-r));
        if (had)
            rename(old, dirs[2]);
    } else if (had) {
        rm_tree(old);
    }
    free(old);
    return r < 0 ? EXIT_RUNTIME : 0;
}

/* The group's list (and for format 2 its .zgroup when missing) replaced atomically. */
static int into_list(struct into *in, const char *group, const char *name)
{
    struct export x = {.dest = in->image};
    x.destfd = open(in->image, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct errbuf err = {{0}};
    char *rel, *text = overlay_list_text(in->image, in->format, group, name, &rel);
    char *zg = xasprintf("%s/.zgroup", group), *zgt = NULL;
    int r = 0;
    if (in->format == 2 && file_read_all_at(x.destfd, zg, &zgt, NULL) < 0) {
        const char *g = "{\n    \"zarr_format\": 2\n}";
        r = write_atomic(&x, zg, -1, (off_t)strlen(g), g, NULL, &err);
    }
    if (r == 0)
        r = write_atomic(&x, rel, -1, (off_t)strlen(text), text, NULL, &err);
    if (r < 0)
        fprintf(stderr, "roifs: %s\n", err.msg);
    free(zgt);
    free(zg);
    free(rel);
    free(text);
    close(x.destfd);
    return r < 0 ? EXIT_RUNTIME : 0;
}

/* IMAGE must be an OME-Zarr image of the output's format without the names (unless
 * --overwrite). 0 or EXIT_USAGE (printed). */
static int into_check(struct into *in, const struct task *t)
{
    json_t *attrs, *ms;
    struct errbuf err = {{0}};
    if (!t->cfg.ome_labels) {
        fprintf(stderr, "roifs: %s: export --into needs [output] ome = labels\n", t->cfg.path);
        return EXIT_USAGE;
    }
    if (ome_group_attrs(in->image, &attrs, &ms, &err) < 0) {
        fprintf(stderr, "roifs: --into: %s\n", err.msg);
        return EXIT_USAGE;
    }
    json_decref(attrs);
    char *zj = path_join(in->image, "zarr.json");
    struct stat st;
    in->format = stat(zj, &st) == 0 ? 3 : 2;
    free(zj);
    if (in->format != t->out.format) {
        fprintf(stderr, "roifs: --into: %s is a Zarr v%d image, the label image is v%d\n",
                in->image, in->format, t->out.format);
        return EXIT_USAGE;
    }
    const char *groups[2] = {"labels", "tables"}, *names[2] = {in->label, in->table};
    for (int i = 0; i < 2 && !in->overwrite; i++) {
        char *p = names[i] ? xasprintf("%s/%s/%s", in->image, groups[i], names[i]) : NULL;
        bool there = p && stat(p, &st) == 0;
        free(p);
        if (there) {
            fprintf(stderr, "roifs: --into: %s already has a %s '%s' (--overwrite replaces it)\n",
                    in->image, i ? "table" : "label", names[i]);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* The label image's chunks and metadata from the caches into its temporary directory. */
static int into_labels(struct into *in, struct arrayset *s)
{
    struct export x = {.dest = in->dirs[0][1]};
    struct errbuf err = {{0}};
    x.destfd = open(x.dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const struct ns *ns = arrayset_tree(s);
    struct ns_node labels, node;
    int r = x.destfd < 0 ? -errno : 0;
    if (r == 0 && (ns_lookup(ns, NS_INO_ROOT, "labels", &labels) < 0 ||
                   ns_lookup(ns, labels.ino, in->label, &node) < 0))
        r = -ENOENT;
    if (r == 0)
        r = walk(&x, ns, node.ino, "", &err);
    int rc = r < 0 ? EXIT_RUNTIME : 0;
    if (r < 0)
        fprintf(stderr, "roifs: %s: %s\n", x.dest, err.msg[0] ? err.msg : strerror(-r));
    struct run_spec spec = {.verb = "export",
                            .ids = x.ids,
                            .arrays = x.arrays,
                            .n = x.n,
                            .chunk_ready = export_chunk,
                            .ctx = &x};
    if (rc == 0)
        rc = run_chunks(s, &spec);
    for (size_t i = 0; rc == 0 && i < x.nmeta; i++)
        if (write_meta(&x, &x.meta[i], &err) < 0) {
            fprintf(stderr, "roifs: %s\n", err.msg);
            rc = EXIT_RUNTIME;
        }
    export_free(&x);
    if (x.destfd >= 0)
        close(x.destfd);
    return rc;
}

static int into_run(struct into *in, struct arrayset *s)
{
    int r = into_tmp(in, 0, "labels", in->label);
    if (r == 0 && in->table)
        r = into_tmp(in, 1, "tables", in->table);
    if (r == 0)
        r = into_labels(in, s);
    if (r == 0 && in->table)
        r = into_table(in, s);
    /* everything is complete: the groups take their places, then the lists name them */
    if (r == 0)
        r = into_swap(in->dirs[0]);
    if (r == 0 && in->table)
        r = into_swap(in->dirs[1]);
    if (r == 0)
        r = into_list(in, "labels", in->label);
    if (r == 0 && in->table)
        r = into_list(in, "tables", in->table);
    if (r == 0)
        fprintf(stderr, "roifs: export: %s: labels/%s%s%s written\n", in->image, in->label,
                in->table ? " and tables/" : "", in->table ? in->table : "");
    return r;
}

/* roifs export [-j N] --into IMAGE [--overwrite] CONFIG (argv[0] is the first option). */
static int cmd_export_into(int argc, char **argv, int threads)
{
    struct into in = {0};
    const char *config = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--into") == 0 && i + 1 < argc)
            in.image = argv[++i];
        else if (strcmp(argv[i], "--overwrite") == 0)
            in.overwrite = true;
        else if (!config && argv[i][0] != '-')
            config = argv[i];
        else
            return cli_usage_error("export: unexpected argument '%s'", argv[i]);
    }
    if (!in.image || !config)
        return cli_usage_error("export --into needs IMAGE and CONFIG%s", "");
    struct task *t;
    int r = cli_load_task(config, &t);
    if (r)
        return r;
    log_open_stderr(false);
    in.label = t->cfg.label_name;
    in.table = t->cfg.table_name;
    r = into_check(&in, t);
    struct arrayset *s = NULL;
    struct errbuf err = {{0}};
    struct arrayset_opts o = {.threads = threads, .overlay_overwrite = in.overwrite};
    if (r == 0 && (r = arrayset_open(t, &o, &s, &err)) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        r = r == -EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
        s = NULL;
    }
    if (r == 0)
        r = into_run(&in, s);
    for (int i = 0; i < 2; i++) {
        if (r && in.dirs[i][1])
            rm_tree(in.dirs[i][1]);
        for (int k = 0; k < 3; k++)
            free(in.dirs[i][k]);
    }
    arrayset_close(s);
    task_close(t);
    return r;
}

/* ---- the command ---- */

/* The tree of the set, as a mount shows it without .roifs, from the caches. */
static int export_run(struct export *x, struct arrayset *s)
{
    struct errbuf err = {{0}};
    if (walk(x, arrayset_tree(s), NS_INO_ROOT, "", &err) < 0) {
        fprintf(stderr, "roifs: %s\n", err.msg);
        return EXIT_RUNTIME;
    }
    struct run_spec spec = {.verb = "export",
                            .ids = x->ids,
                            .arrays = x->arrays,
                            .n = x->n,
                            .chunk_ready = export_chunk,
                            .ctx = x};
    int r = run_chunks(s, &spec);
    if (r)
        return r;
    /* The metadata last: until it is there, DEST is not mistaken for a complete array. */
    for (size_t i = 0; i < x->nmeta; i++)
        if (write_meta(x, &x->meta[i], &err) < 0) {
            fprintf(stderr, "roifs: %s\n", err.msg);
            return EXIT_RUNTIME;
        }
    fprintf(stderr, "roifs: export: %s: %zu chunk files written, %zu kept from an earlier run\n",
            x->dest, (size_t)x->written, (size_t)x->kept);
    return 0;
}

int cmd_export(int argc, char **argv)
{
    int threads, i, r;
    if ((r = cli_parse_jobs(argc, argv, &threads, &i)))
        return r;
    if (i < argc && (strcmp(argv[i], "--into") == 0 || strcmp(argv[i], "--overwrite") == 0))
        return cmd_export_into(argc - i, argv + i, threads);
    if (argc - i != 2)
        return cli_usage_error("export needs CONFIG and DEST%s", "");
    struct task *t;
    if ((r = cli_load_task(argv[i], &t)))
        return r;
    if (t->cfg.ome_labels) { /* the input's files are not copied: DEST would be partial */
        fprintf(stderr, "roifs: %s: ome = labels: export with --into IMAGE\n", t->cfg.path);
        task_close(t);
        return EXIT_USAGE;
    }
    log_open_stderr(false);
    struct export x = {.dest = argv[i + 1], .destfd = -1};
    struct arrayset *s = NULL;
    int lock = -1;
    r = open_dest(&x, t, &lock);
    if (r == 0)
        r = cli_open_arrays(t, threads, false, &s);
    if (r == 0)
        r = export_run(&x, s);
    arrayset_close(s);
    export_free(&x);
    if (lock >= 0)
        close(lock);
    if (x.destfd >= 0)
        close(x.destfd);
    task_close(t);
    return r;
}
