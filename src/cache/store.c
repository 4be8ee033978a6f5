/* store.c: the result store (see store.h and store_internal.h for its locks): opening it and
 * catching up with other processes, appends and reads. The index and the packs are in
 * store_pack.c, compaction in store_gc.c. */
#include "store_internal.h"

#include <blosc.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../crc32c.h"
#include "claim.h"

uint64_t store_pack_limit = 1ULL << 30;

/* Opens packs numbered after the highest known one as long as they exist (scan_lock held). */
static void discover_packs(struct store *s)
{
    uint32_t n = s->npacks ? s->npacks : 1;
    while (store_open_pack(s, n, false) != -ENOENT)
        n++;
}

static int64_t dir_mtime(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? ts_to_ns(st.st_mtim) : -1;
}

/* Opens every pack of the directory not known yet (scan lock held). Numbers only grow (a
 * compaction copies into a new pack above the highest), but one made and compacted away
 * since the last look leaves a gap that discover_packs stops at. 0 or -errno. */
static int open_listed_packs(struct store *s)
{
    DIR *d = opendir_at(s->dirfd, ".");
    if (!d)
        return -errno;
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned n;
        char tail;
        if (sscanf(de->d_name, "pack-%u%c", &n, &tail) == 1 && n > 0 && n < (1u << 30) &&
            (n >= s->npacks || s->packs[n].fd < 0))
            store_open_pack(s, n, false);
    }
    closedir(d);
    return 0;
}

/* Indexes what pack n gained, looking at it through a descriptor opened now unless it is our
 * own (scan lock held): a network file system shows another host's appends to an open, not
 * to the size of a descriptor opened before them (close-to-open consistency). */
static void scan_fresh(struct store *s, uint32_t n)
{
    if (s->packs[n].fd < 0)
        return;
    if (n == s->own && s->own_pid == getpid()) {
        store_scan_pack(s, n);
        return;
    }
    char name[32];
    store_pack_name(n, name, sizeof name);
    int fd = openat(s->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat a, b;
    if (fd >= 0 && fstat(fd, &a) == 0 && fstat(s->packs[n].fd, &b) == 0 && a.st_ino == b.st_ino &&
        a.st_dev == b.st_dev)
        store_scan_pack_fd(s, n, fd);
    else
        store_scan_pack(s, n); /* another file has the name, or none: the old one tells */
    if (fd >= 0)
        close(fd);
}

void store_catch_up(struct store *s)
{
    /* Every pack may grow (each has its own writer): one fstat each tells which did. */
    uint32_t cur = store_current_pack(s);
    discover_packs(s);
    int64_t m = dir_mtime(s->dirfd);
    struct stat st;
    bool cur_gone = cur && fstat(s->packs[cur].fd, &st) == 0 && st.st_nlink == 0;
    if (m != s->dir_mtime_ns || cur_gone) {
        /* packs were made or removed: look at all of them */
        s->dir_mtime_ns = m;
        open_listed_packs(s);
        for (uint32_t n = 1; n < s->npacks; n++)
            if (s->packs[n].fd >= 0 && fstat(s->packs[n].fd, &st) == 0)
                s->packs[n].unlinked = st.st_nlink == 0;
    }
    for (uint32_t n = 1; n < s->npacks; n++)
        scan_fresh(s, n);
    store_retire_unlinked(s);
}

int store_open(int results_fd, int locks_fd, const char *path, struct store **out,
               struct errbuf *err)
{
    struct store *s = xcalloc(1, sizeof *s);
    s->path = xstrdup(path);
    s->dirfd = results_fd;
    s->locks_fd = locks_fd;
    s->own_claim = -1;
    pthread_mutex_init(&s->append_lock, NULL);
    pthread_mutex_init(&s->scan_lock, NULL);
    pthread_mutex_init(&s->index_lock, NULL);
    map_init(&s->index, sizeof(struct entry), 512);
    pthread_rwlock_init(&s->fd_lock, NULL);
    /* Every pack there is, also after a gap in the numbers. */
    pthread_mutex_lock(&s->scan_lock);
    s->dir_mtime_ns = dir_mtime(results_fd);
    int r = open_listed_packs(s);
    if (r < 0) {
        pthread_mutex_unlock(&s->scan_lock);
        err_set(err, r, "%s: %s", path, strerror(-r));
        store_close(s);
        return r;
    }
    discover_packs(s);
    for (uint32_t n = 1; n < s->npacks; n++)
        store_scan_pack(s, n);
    store_retire_unlinked(s); /* compacted away between the listing and the opening */
    pthread_mutex_unlock(&s->scan_lock);
    *out = s;
    return 0;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    if (s->own_claim >= 0 && s->own_pid == getpid())
        claim_release(s->own_claim);
    for (uint32_t n = 0; n < s->npacks; n++)
        if (s->packs[n].fd >= 0)
            close(s->packs[n].fd);
    free(s->packs);
    map_destroy(&s->index);
    pthread_mutex_destroy(&s->append_lock);
    pthread_mutex_destroy(&s->scan_lock);
    pthread_mutex_destroy(&s->index_lock);
    pthread_rwlock_destroy(&s->fd_lock);
    free(s->path);
    free(s);
}

bool store_has(struct store *s, struct key128 k)
{
    pthread_mutex_lock(&s->index_lock);
    bool yes = store_index_get(s, k) != NULL;
    pthread_mutex_unlock(&s->index_lock);
    return yes;
}

/* The highest pack number in use, 0 when none (scan_lock held). */
uint32_t store_current_pack(const struct store *s)
{
    for (uint32_t n = s->npacks; n-- > 1;)
        if (s->packs[n].fd >= 0)
            return n;
    return 0;
}

void store_refresh(struct store *s)
{
    pthread_mutex_lock(&s->scan_lock);
    store_catch_up(s);
    pthread_mutex_unlock(&s->scan_lock);
}

/* ---- appending ---- */

int store_claim_pack(struct store *s, uint32_t n)
{
    char name[24];
    snprintf(name, sizeof name, "p%u", n);
    return claim_take(s->locks_fd, name, UINT64_MAX, false);
}

/* Whether pack n is still the file of the directory that this process has open. */
static bool still_there(struct store *s, uint32_t n)
{
    char name[32];
    store_pack_name(n, name, sizeof name);
    struct stat a, b;
    return fstatat(s->dirfd, name, &a, AT_SYMLINK_NOFOLLOW) == 0 &&
           fstat(s->packs[n].fd, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* Makes a pack numbered at least floor (1 at least) this process's own (append and scan locks
 * held): the one it has, else the first existing one whose claim is free (its writer ended:
 * appends to it resume), else a new one above every pack there is. Its number, or -errno. */
static int64_t own_pack(struct store *s, uint32_t floor)
{
    floor = floor ? floor : 1;
    pid_t me = getpid();
    if (s->own_pid == me && s->own >= floor && s->own < s->npacks && s->packs[s->own].fd >= 0 &&
        !s->packs[s->own].unlinked)
        return s->own;
    if (s->own_pid == me && s->own_claim >= 0)
        claim_release(s->own_claim);
    s->own = 0;
    s->own_claim = -1;
    s->own_pid = me;
    for (uint32_t n = floor;; n++) {
        bool exists = n < s->npacks && s->packs[n].fd >= 0 && !s->packs[n].unlinked;
        if (!exists && n < s->npacks)
            continue; /* a gap: numbers only grow, new packs go above every one */
        int h = store_claim_pack(s, n);
        if (h == -EWOULDBLOCK)
            continue;
        if (h < 0)
            return h;
        if (exists && !still_there(s, n)) {
            /* compacted away since our look (its claim let go after the unlink) */
            claim_release(h);
            s->packs[n].unlinked = true;
            continue;
        }
        int r = exists ? 0 : store_open_pack(s, n, true);
        if (r < 0) {
            claim_release(h);
            return r;
        }
        s->own = n;
        s->own_claim = h;
        return n;
    }
}

/* Compression must save this share of a record to be kept; after a record where it did not,
 * the next RAW_STREAK are stored raw without trying (one probe in RAW_STREAK + 1): one task's
 * results compress alike, and results are read back rarely, so a small saving is not worth
 * the time (blosc with shuffle costs about as much as the processor on small ROIs). */
#define MIN_SAVING 4 /* a quarter */
#define RAW_STREAK 63

/* The stored form of data: blosc when it saves enough, else the data itself. */
static void encode(struct store *s, const struct store_item *it, size_t typesize, struct pending *p)
{
    struct key128 k = it->key;
    const void *data = it->data;
    size_t len = it->len;
    memset(p, 0, sizeof *p);
    struct rec_header *h = &p->h;
    memcpy(h->magic, STORE_MAGIC, sizeof h->magic);
    h->key_lo = k.lo;
    h->key_hi = k.hi;
    h->raw_len = len;
    h->codec = STORE_CODEC_RAW;
    h->stored_len = len;
    p->body = data;
    unsigned streak = s->raw_streak;
    bool try =
        len >= 256 && len <= BLOSC_MAX_BUFFERSIZE &&
        (streak == 0 || !atomic_compare_exchange_strong(&s->raw_streak, &streak, streak - 1));
    if (try) {
        size_t ts = typesize >= 1 && typesize <= BLOSC_MAX_TYPESIZE ? typesize : 1;
        void *out = xmalloc(len + BLOSC_MAX_OVERHEAD);
        int r = blosc_compress_ctx(5, BLOSC_SHUFFLE, ts, len, data, out, len + BLOSC_MAX_OVERHEAD,
                                   "lz4", 0, 1);
        if (r > 0 && (size_t)r <= len - len / MIN_SAVING) {
            p->buf = out;
            p->body = out;
            h->codec = STORE_CODEC_BLOSC;
            h->stored_len = (size_t)r;
        } else {
            free(out);
            s->raw_streak = RAW_STREAK;
        }
    }
    h->made = (uint32_t)time(NULL);
    h->data_crc = !p->buf && it->has_crc ? it->crc : zarr_crc32c(0, p->body, h->stored_len);
    h->header_crc = store_header_crc(h);
}

/* Writes the n buffers of iov at off of w, all of them or an error (iov is consumed). */
static int write_all(int w, uint64_t off, struct iovec *iov, int n)
{
    while (n > 0) {
        ssize_t k = pwritev(w, iov, n > IOV_MAX ? IOV_MAX : n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        off += (uint64_t)k;
        while (n > 0 && (size_t)k >= iov->iov_len) {
            k -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= (size_t)k;
        }
    }
    return 0;
}

/* Opens the current pack for writing and brings its index up to date, truncating a torn tail
 * (append and scan locks held). Its number in *n; a descriptor or -errno. */
static int open_for_append(struct store *s, uint32_t *n, struct errbuf *err)
{
    int r;
    store_catch_up(s);
    int64_t own = own_pack(s, s->own_floor);
    if (own < 0)
        return err_set(err, (int)own, "%s: cannot claim a pack to append to: %s", s->path,
                       strerror((int)-own));
    *n = (uint32_t)own;
    char name[32];
    store_pack_name(*n, name, sizeof name);
    int w = openat(s->dirfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (w < 0)
        return err_set(err, -errno, "%s/%s: cannot append: %s", s->path, name, strerror(errno));
    store_scan_pack(s, *n); /* what others appended since we looked */
    struct pack *pk = &s->packs[*n];
    if (pk->scanned < pk->size) {
        log_info("%s/%s: dropping %llu bytes of an incomplete record at its end (its last "
                 "writer died)",
                 s->path, name, (unsigned long long)(pk->size - pk->scanned));
        if (ftruncate(w, (off_t)pk->scanned) < 0) {
            r = err_set(err, -errno, "%s/%s: cannot truncate: %s", s->path, name, strerror(errno));
            close(w);
            return r;
        }
        pk->size = pk->scanned;
    }
    return w;
}

int store_append_records(struct store *s, struct pending *recs, size_t nrec, uint32_t *first,
                         uint32_t *last, struct errbuf *err)
{
    uint32_t n;
    int w = open_for_append(s, &n, err), r = 0;
    if (w < 0)
        return w;
    if (first)
        *first = n;
    struct iovec *iov = xmalloc(2 * nrec * sizeof *iov);
    for (size_t i = 0; i < nrec && r == 0;) {
        struct pack *pk = &s->packs[n];
        uint64_t total = sizeof recs[i].h + recs[i].h.stored_len;
        if (pk->scanned > 0 && pk->scanned + total > store_pack_limit) {
            close(w);
            w = -1;
            uint32_t floor = s->own_floor;
            s->own_floor = n + 1; /* full: a pack of our own above it */
            w = r = open_for_append(s, &n, err);
            s->own_floor = floor;
            if (w < 0)
                break;
            r = 0;
            pk = &s->packs[n];
        }
        /* the records that fit in this pack, in one write */
        uint64_t off = pk->scanned, end = off;
        size_t j = i;
        int niov = 0;
        while (j < nrec &&
               (j == i || end + sizeof recs[j].h + recs[j].h.stored_len <= store_pack_limit)) {
            iov[niov++] = (struct iovec){&recs[j].h, sizeof recs[j].h};
            iov[niov++] = (struct iovec){(void *)recs[j].body, recs[j].h.stored_len};
            end += sizeof recs[j].h + recs[j].h.stored_len;
            j++;
        }
        if ((r = write_all(w, off, iov, niov)) < 0) {
            if (ftruncate(w, (off_t)off) == 0) /* no torn record of ours left behind */
                pk->size = off;
            err_set(err, r, "%s/pack-%06u: cannot append: %s", s->path, n, strerror(-r));
            break;
        }
        pthread_mutex_lock(&s->index_lock);
        for (uint64_t at = off; i < j; at += sizeof recs[i].h + recs[i].h.stored_len, i++) {
            struct entry e = {.key = {recs[i].h.key_lo, recs[i].h.key_hi},
                              .off = at,
                              .stored_len = recs[i].h.stored_len,
                              .raw_len = recs[i].h.raw_len,
                              .pack = n,
                              .made = recs[i].h.made};
            store_index_put(s, &e);
        }
        pthread_mutex_unlock(&s->index_lock);
        pk->scanned = pk->size = end;
    }
    if (last)
        *last = n;
    free(iov);
    if (w >= 0)
        close(w);
    return r;
}

int store_put_many(struct store *s, size_t n, const struct store_item *items, size_t typesize,
                   struct errbuf *err)
{
    if (n == 0)
        return 0;
    struct pending *recs = xmalloc(n * sizeof *recs);
    for (size_t i = 0; i < n; i++)
        encode(s, &items[i], typesize, &recs[i]);
    pthread_mutex_lock(&s->append_lock);
    pthread_mutex_lock(&s->scan_lock);
    int r = store_append_records(s, recs, n, NULL, NULL, err);
    pthread_mutex_unlock(&s->scan_lock);
    pthread_mutex_unlock(&s->append_lock);
    for (size_t i = 0; i < n; i++)
        free(recs[i].buf);
    free(recs);
    return r;
}

int store_put(struct store *s, struct key128 k, const void *data, size_t len, size_t typesize,
              struct errbuf *err)
{
    struct store_item it = {.key = k, .data = data, .len = len, .has_crc = false};
    return store_put_many(s, 1, &it, typesize, err);
}

/* ---- reading ---- */

static int damaged(struct store *s, const struct entry *e, const char *why)
{
    char hex[33];
    key_hex(e->key, hex);
    log_warn("%s/pack-%06u: the stored result %s at byte %llu %s; computing it again", s->path,
             e->pack, hex, (unsigned long long)e->off, why);
    pthread_mutex_lock(&s->index_lock);
    store_index_drop(s, e->key, e->pack, e->off);
    s->damaged++;
    pthread_mutex_unlock(&s->index_lock);
    return -EBADMSG;
}

/* Why the last read_record of this thread failed. */
static _Thread_local const char *record_why;

/* Reads and checks the record of e (the result named k, len bytes) from fd into data:
 * 0, or -EBADMSG with record_why set. */
static int read_record(int fd, const struct entry *ep, struct key128 k, void *data, size_t len)
{
    struct entry e = *ep;
    struct rec_header h;
    void *buf = e.stored_len == len ? data : xmalloc(e.stored_len ? e.stored_len : 1);
    struct iovec iov[2] = {{&h, sizeof h}, {buf, e.stored_len}};
    ssize_t got = fd >= 0 ? preadv(fd, iov, 2, (off_t)e.off) : -1;
    const char *why = NULL;
    if (got != (ssize_t)(sizeof h + e.stored_len))
        why = "is truncated";
    else if (!store_header_ok(&h) || h.key_lo != k.lo || h.key_hi != k.hi || h.raw_len != len ||
             h.stored_len != e.stored_len)
        why = "has a damaged header";
    else if (zarr_crc32c(0, buf, e.stored_len) != h.data_crc)
        why = "fails its checksum";
    else if (h.codec == STORE_CODEC_BLOSC && blosc_decompress_ctx(buf, data, len, 1) != (int)len)
        why = "does not decompress";
    if (buf != data)
        free(buf);
    record_why = why;
    return why ? -EBADMSG : 0;
}

int store_get(struct store *s, struct key128 k, void *data, size_t len)
{
    pthread_rwlock_rdlock(&s->fd_lock); /* the pack's descriptor stays open while we read */
    pthread_mutex_lock(&s->index_lock);
    const struct entry *in = store_index_get(s, k);
    struct entry e = in ? *in : (struct entry){0};
    int fd = e.used && e.pack < s->npacks ? s->packs[e.pack].fd : -1;
    pthread_mutex_unlock(&s->index_lock);
    int r = !e.used ? -ENOENT : e.raw_len != len ? -EBADMSG : 0;
    if (r == 0)
        r = read_record(fd, &e, k, data, len);
    pthread_rwlock_unlock(&s->fd_lock);
    if (r == -EBADMSG)
        return damaged(s, &e, e.raw_len != len ? "has the wrong length" : record_why);
    return r;
}

bool store_lookup(struct store *s, struct key128 k, struct store_info *info)
{
    pthread_mutex_lock(&s->index_lock);
    const struct entry *in = store_index_get(s, k);
    struct entry e = in ? *in : (struct entry){0};
    pthread_mutex_unlock(&s->index_lock);
    if (e.used && info)
        *info = (struct store_info){.stored_len = e.stored_len + sizeof(struct rec_header),
                                    .raw_len = e.raw_len,
                                    .made = e.made};
    return e.used;
}

void store_each(struct store *s, void (*fn)(void *ctx, struct key128 k, const struct store_info *i),
                void *ctx)
{
    pthread_mutex_lock(&s->index_lock);
    size_t n = 0;
    struct entry *copy = xmalloc((map_count(&s->index) ? map_count(&s->index) : 1) * sizeof *copy);
    size_t it = 0;
    void *v;
    while (map_next(&s->index, &it, NULL, &v))
        copy[n++] = *(const struct entry *)v;
    pthread_mutex_unlock(&s->index_lock);
    for (size_t i = 0; i < n; i++) {
        struct store_info info = {.stored_len = copy[i].stored_len + sizeof(struct rec_header),
                                  .raw_len = copy[i].raw_len,
                                  .made = copy[i].made};
        fn(ctx, copy[i].key, &info);
    }
    free(copy);
}

void store_get_stats(struct store *s, struct store_stats *st)
{
    memset(st, 0, sizeof *st);
    pthread_mutex_lock(&s->scan_lock);
    for (uint32_t n = 1; n < s->npacks; n++)
        if (s->packs[n].fd >= 0) {
            st->packs++;
            st->bytes += s->packs[n].scanned;
        }
    pthread_mutex_unlock(&s->scan_lock);
    pthread_mutex_lock(&s->index_lock);
    st->results = map_count(&s->index);
    st->damaged = s->damaged;
    pthread_mutex_unlock(&s->index_lock);
}
