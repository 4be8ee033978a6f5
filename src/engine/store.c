/* store.c: the result store (see store.h). Locks, outermost first: append (one appender per
 * process, held with the byte-range lock that makes it one appender across processes), scan
 * (one reader of pack tails at a time; owns the packs' scan positions), index (the key table
 * and the pack table, never held across I/O). */
#include "store.h"

#include <blosc.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../zarr/zarr.h"

uint64_t store_pack_limit = 1ULL << 30;

#define MAGIC       "roifsP1"
#define CODEC_RAW   0
#define CODEC_BLOSC 1
#define SCAN_WINDOW (256u << 10)

/* A record's header, little-endian as the host (crc32c.c requires one). */
struct rec_header {
    char magic[8];
    uint64_t key_lo, key_hi;
    uint64_t raw_len;
    uint64_t stored_len;
    uint32_t codec;
    uint32_t data_crc;   /* of the stored bytes */
    uint32_t reserved;   /* 0 */
    uint32_t header_crc; /* of the bytes above */
};
_Static_assert(sizeof(struct rec_header) == 56, "the record header is 56 bytes on disk");

struct entry {
    struct key128 key;
    uint64_t off, stored_len, raw_len;
    uint32_t pack;
    bool used;
};

struct pack {
    int fd;           /* -1: no such pack */
    uint64_t scanned; /* records up to here are indexed */
    uint64_t size;    /* file size at the last scan */
};

struct store {
    char *path;
    int dirfd, locks_fd;
    pthread_mutex_t append_lock, scan_lock, index_lock;
    struct pack *packs; /* by number; packs[0] unused */
    uint32_t npacks;    /* highest number + 1 */
    struct entry *tab;
    size_t cap, n;
    uint64_t damaged;
    /* records still to store raw without trying to compress them (see encode) */
    _Atomic unsigned raw_streak;
};

/* ---- the index (index_lock held) ---- */

static size_t slot_of(const struct store *s, struct key128 k)
{
    size_t i = (size_t)(k.lo ^ (k.hi >> 7)) & (s->cap - 1);
    while (s->tab[i].used && !key_eq(s->tab[i].key, k))
        i = (i + 1) & (s->cap - 1);
    return i;
}

static void index_put(struct store *s, const struct entry *e)
{
    if (2 * (s->n + 1) > s->cap) {
        struct entry *old = s->tab;
        size_t ocap = s->cap;
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->tab = xcalloc(s->cap, sizeof *s->tab);
        for (size_t i = 0; i < ocap; i++)
            if (old[i].used)
                s->tab[slot_of(s, old[i].key)] = old[i];
        free(old);
    }
    size_t i = slot_of(s, e->key);
    if (!s->tab[i].used)
        s->n++;
    s->tab[i] = *e; /* a later record of the same key replaces the earlier one */
    s->tab[i].used = true;
}

/* Removes k when it still points at (pack, off): backward-shift deletion keeps probing exact. */
static void index_drop(struct store *s, struct key128 k, uint32_t pack, uint64_t off)
{
    if (!s->cap)
        return;
    size_t i = slot_of(s, k);
    if (!s->tab[i].used || s->tab[i].pack != pack || s->tab[i].off != off)
        return;
    s->tab[i].used = false;
    s->n--;
    for (size_t j = (i + 1) & (s->cap - 1); s->tab[j].used; j = (j + 1) & (s->cap - 1)) {
        struct entry e = s->tab[j];
        s->tab[j].used = false;
        s->tab[slot_of(s, e.key)] = e;
    }
}

/* ---- records ---- */

static uint32_t header_crc(const struct rec_header *h)
{
    return zarr_crc32c(0, h, offsetof(struct rec_header, header_crc));
}

static bool header_ok(const struct rec_header *h)
{
    return memcmp(h->magic, MAGIC, sizeof h->magic) == 0 && h->header_crc == header_crc(h) &&
           (h->codec == CODEC_BLOSC || (h->codec == CODEC_RAW && h->stored_len == h->raw_len));
}

static void pack_name(uint32_t n, char *buf, size_t len)
{
    snprintf(buf, len, "pack-%06u", n);
}

/* Records the open pack n (scan_lock held; the index lock guards the table itself, which
 * readers look up). */
static void add_pack(struct store *s, uint32_t n, int fd)
{
    pthread_mutex_lock(&s->index_lock);
    if (n >= s->npacks) {
        s->packs = xrealloc(s->packs, (n + 1) * sizeof *s->packs);
        for (uint32_t i = s->npacks; i <= n; i++)
            s->packs[i] = (struct pack){.fd = -1};
        s->npacks = n + 1;
    }
    s->packs[n].fd = fd;
    pthread_mutex_unlock(&s->index_lock);
}

/* Opens pack n for reading if it exists as a regular file (a symbolic link or anything else
 * is not ours: removed). Descriptors held open are read-only, so that the file system can be
 * remounted read-only under a running mount. 0, -ENOENT or -errno. */
static int open_pack(struct store *s, uint32_t n, bool create)
{
    char name[32];
    pack_name(n, name, sizeof name);
    if (create) {
        int w = openat(s->dirfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (w < 0)
            return -errno;
        close(w);
    }
    int fd = openat(s->dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) {
        int e = errno;
        log_warn("%s/%s: not a regular file (%s); removing it", s->path, name, strerror(e));
        unlinkat(s->dirfd, name, 0);
        return -e;
    }
    if (fd < 0)
        return -ENOENT;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        log_warn("%s/%s: not a regular file; removing it", s->path, name);
        unlinkat(s->dirfd, name, 0);
        return -EINVAL;
    }
    add_pack(s, n, fd);
    return 0;
}

/* Indexes the records of pack n from where the last scan stopped to the first record that is
 * incomplete or does not verify (scan_lock held). */
static void scan_pack(struct store *s, uint32_t n)
{
    struct pack *pk = &s->packs[n];
    struct stat st;
    if (pk->fd < 0 || fstat(pk->fd, &st) < 0)
        return;
    uint64_t size = (uint64_t)st.st_size, off = pk->scanned, wstart = 0, wlen = 0;
    pk->size = size;
    if (off >= size)
        return;
    char *win = NULL;
    while (size - off >= sizeof(struct rec_header)) {
        if (!win || off < wstart || off + sizeof(struct rec_header) > wstart + wlen) {
            size_t want = size - off < SCAN_WINDOW ? (size_t)(size - off) : SCAN_WINDOW, got = 0;
            if (!win)
                win = xmalloc(SCAN_WINDOW);
            if (pread_full(pk->fd, win, want, off, &got) < 0 || got < sizeof(struct rec_header))
                break;
            wstart = off;
            wlen = got;
        }
        struct rec_header h;
        memcpy(&h, win + (off - wstart), sizeof h);
        uint64_t left = size - off - sizeof h;
        if (!header_ok(&h) || h.stored_len > left)
            break;
        struct entry e = {.key = {h.key_lo, h.key_hi},
                          .off = off,
                          .stored_len = h.stored_len,
                          .raw_len = h.raw_len,
                          .pack = n};
        pthread_mutex_lock(&s->index_lock);
        index_put(s, &e);
        pthread_mutex_unlock(&s->index_lock);
        off += sizeof h + h.stored_len;
    }
    free(win);
    pk->scanned = off;
}

/* Opens packs numbered after the highest known one as long as they exist (scan_lock held). */
static void discover_packs(struct store *s)
{
    uint32_t n = s->npacks ? s->npacks : 1;
    while (open_pack(s, n, false) != -ENOENT)
        n++;
}

int store_open(int results_fd, int locks_fd, const char *path, struct store **out,
               struct errbuf *err)
{
    struct store *s = xcalloc(1, sizeof *s);
    s->path = xstrdup(path);
    s->dirfd = results_fd;
    s->locks_fd = locks_fd;
    pthread_mutex_init(&s->append_lock, NULL);
    pthread_mutex_init(&s->scan_lock, NULL);
    pthread_mutex_init(&s->index_lock, NULL);
    /* Every pack there is, also after a gap in the numbers. */
    int fd = openat(results_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int r = -errno;
        if (fd >= 0)
            close(fd);
        err_set(err, r, "%s: %s", path, strerror(-r));
        store_close(s);
        return r;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned n;
        char tail;
        if (sscanf(de->d_name, "pack-%u%c", &n, &tail) == 1 && n > 0 && n < (1u << 30))
            open_pack(s, n, false);
    }
    closedir(d);
    pthread_mutex_lock(&s->scan_lock);
    discover_packs(s);
    for (uint32_t n = 1; n < s->npacks; n++)
        scan_pack(s, n);
    pthread_mutex_unlock(&s->scan_lock);
    *out = s;
    return 0;
}

void store_close(struct store *s)
{
    if (!s)
        return;
    for (uint32_t n = 0; n < s->npacks; n++)
        if (s->packs[n].fd >= 0)
            close(s->packs[n].fd);
    free(s->packs);
    free(s->tab);
    pthread_mutex_destroy(&s->append_lock);
    pthread_mutex_destroy(&s->scan_lock);
    pthread_mutex_destroy(&s->index_lock);
    free(s->path);
    free(s);
}

bool store_has(struct store *s, struct key128 k)
{
    pthread_mutex_lock(&s->index_lock);
    bool yes = s->cap && s->tab[slot_of(s, k)].used;
    pthread_mutex_unlock(&s->index_lock);
    return yes;
}

/* The highest pack number in use, 0 when none (scan_lock held). */
static uint32_t current_pack(const struct store *s)
{
    for (uint32_t n = s->npacks; n-- > 1;)
        if (s->packs[n].fd >= 0)
            return n;
    return 0;
}

void store_refresh(struct store *s)
{
    pthread_mutex_lock(&s->scan_lock);
    /* Only the newest pack grows: older ones were complete when the next one was made. */
    uint32_t cur = current_pack(s);
    discover_packs(s);
    for (uint32_t n = cur ? cur : 1; n < s->npacks; n++)
        scan_pack(s, n);
    pthread_mutex_unlock(&s->scan_lock);
}

/* ---- appending ---- */

/* Takes the append lock (byte 0 of locks/all): a descriptor to close, or -errno. */
static int lock_appends(struct store *s)
{
    int fd = openat(s->locks_fd, "all", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    while (fcntl(fd, F_OFD_SETLKW, &fl) < 0)
        if (errno != EINTR) {
            int e = -errno;
            close(fd);
            return e;
        }
    return fd;
}

/* A record ready to append: header and stored bytes. */
struct pending {
    struct rec_header h;
    const void *body;
    void *buf; /* compressed bytes, or NULL when body is the caller's data */
};

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
    memcpy(h->magic, MAGIC, sizeof h->magic);
    h->key_lo = k.lo;
    h->key_hi = k.hi;
    h->raw_len = len;
    h->codec = CODEC_RAW;
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
            h->codec = CODEC_BLOSC;
            h->stored_len = (size_t)r;
        } else {
            free(out);
            s->raw_streak = RAW_STREAK;
        }
    }
    h->data_crc = !p->buf && it->has_crc ? it->crc : zarr_crc32c(0, p->body, h->stored_len);
    h->header_crc = header_crc(h);
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
    if ((*n = current_pack(s)) == 0 && (r = open_pack(s, *n = 1, true)) < 0)
        return err_set(err, r, "%s/pack-000001: cannot create: %s", s->path, strerror(-r));
    char name[32];
    pack_name(*n, name, sizeof name);
    int w = openat(s->dirfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
    if (w < 0)
        return err_set(err, -errno, "%s/%s: cannot append: %s", s->path, name, strerror(errno));
    scan_pack(s, *n); /* what others appended since we looked */
    struct pack *pk = &s->packs[*n];
    if (pk->scanned < pk->size) {
        log_warn("%s/%s: dropping %llu bytes of an incomplete record at its end (a writer "
                 "that died)",
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

/* Appends the records (append and scan locks held), rolling over to a new pack when the
 * current one is full. */
static int append_records(struct store *s, struct pending *recs, size_t nrec, struct errbuf *err)
{
    uint32_t n;
    int w = open_for_append(s, &n, err), r = 0;
    if (w < 0)
        return w;
    struct iovec *iov = xmalloc(2 * nrec * sizeof *iov);
    for (size_t i = 0; i < nrec && r == 0;) {
        struct pack *pk = &s->packs[n];
        uint64_t total = sizeof recs[i].h + recs[i].h.stored_len;
        if (pk->scanned > 0 && pk->scanned + total > store_pack_limit) {
            close(w);
            w = -1;
            if ((r = open_pack(s, n + 1, true)) < 0) {
                err_set(err, r, "%s/pack-%06u: cannot create: %s", s->path, n + 1, strerror(-r));
                break;
            }
            if ((w = r = open_for_append(s, &n, err)) < 0)
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
                              .pack = n};
            index_put(s, &e);
        }
        pthread_mutex_unlock(&s->index_lock);
        pk->scanned = pk->size = end;
    }
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
    int lock = lock_appends(s), r = 0;
    if (lock < 0) {
        r = err_set(err, lock, "%s: cannot lock for appending: %s", s->path, strerror(-lock));
    } else {
        pthread_mutex_lock(&s->scan_lock);
        r = append_records(s, recs, n, err);
        pthread_mutex_unlock(&s->scan_lock);
        close(lock);
    }
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
    index_drop(s, e->key, e->pack, e->off);
    s->damaged++;
    pthread_mutex_unlock(&s->index_lock);
    return -EBADMSG;
}

int store_get(struct store *s, struct key128 k, void *data, size_t len)
{
    pthread_mutex_lock(&s->index_lock);
    struct entry e = {0};
    if (s->cap)
        e = s->tab[slot_of(s, k)];
    int fd = e.used && e.pack < s->npacks ? s->packs[e.pack].fd : -1;
    pthread_mutex_unlock(&s->index_lock);
    if (!e.used)
        return -ENOENT;
    if (e.raw_len != len)
        return damaged(s, &e, "has the wrong length");
    struct rec_header h;
    void *buf = e.stored_len == len ? data : xmalloc(e.stored_len ? e.stored_len : 1);
    struct iovec iov[2] = {{&h, sizeof h}, {buf, e.stored_len}};
    ssize_t got = fd >= 0 ? preadv(fd, iov, 2, (off_t)e.off) : -1;
    const char *why = NULL;
    if (got != (ssize_t)(sizeof h + e.stored_len))
        why = "is truncated";
    else if (!header_ok(&h) || h.key_lo != k.lo || h.key_hi != k.hi || h.raw_len != len ||
             h.stored_len != e.stored_len)
        why = "has a damaged header";
    else if (zarr_crc32c(0, buf, e.stored_len) != h.data_crc)
        why = "fails its checksum";
    else if (h.codec == CODEC_BLOSC && blosc_decompress_ctx(buf, data, len, 1) != (int)len)
        why = "does not decompress";
    if (buf != data)
        free(buf);
    return why ? damaged(s, &e, why) : 0;
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
    st->results = s->n;
    st->damaged = s->damaged;
    pthread_mutex_unlock(&s->index_lock);
}
