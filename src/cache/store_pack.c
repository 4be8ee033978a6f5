/* store_pack.c: the result store's lowest layer (store_internal.h): the index of results by
 * key, the packs and their records, the scan of a pack into the index, and the retirement of
 * packs that another process compacted away. store.c (opening, appends, reads) and
 * store_gc.c (compaction) build on it; it calls neither. */
#include "store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../crc32c.h"

#define SCAN_WINDOW (256u << 10)

/* ---- the index (index_lock held) ---- */

const struct entry *store_index_get(const struct store *s, struct key128 k)
{
    return map_get(&s->index, k.lo, k.hi);
}

void store_index_put(struct store *s, const struct entry *e)
{
    struct entry *in = map_put(&s->index, e->key.lo, e->key.hi, NULL);
    *in = *e; /* a later record of the same key replaces the earlier one */
    in->used = true;
}

/* Removes k when it still points at (pack, off). */
void store_index_drop(struct store *s, struct key128 k, uint32_t pack, uint64_t off)
{
    const struct entry *e = store_index_get(s, k);
    if (e && e->pack == pack && e->off == off)
        map_del(&s->index, k.lo, k.hi, NULL);
}

/* ---- records ---- */

uint32_t store_header_crc(const struct rec_header *h)
{
    return zarr_crc32c(0, h, offsetof(struct rec_header, header_crc));
}

bool store_header_ok(const struct rec_header *h)
{
    return memcmp(h->magic, STORE_MAGIC, sizeof h->magic) == 0 &&
           h->header_crc == store_header_crc(h) &&
           (h->codec == STORE_CODEC_BLOSC ||
            (h->codec == STORE_CODEC_RAW && h->stored_len == h->raw_len));
}

void store_pack_name(uint32_t n, char *buf, size_t len)
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
int store_open_pack(struct store *s, uint32_t n, bool create)
{
    char name[32];
    store_pack_name(n, name, sizeof name);
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
void store_scan_pack(struct store *s, uint32_t n)
{
    store_scan_pack_fd(s, n, s->packs[n].fd);
}

void store_scan_pack_fd(struct store *s, uint32_t n, int fd)
{
    struct pack *pk = &s->packs[n];
    struct stat st;
    if (pk->fd < 0 || fd < 0 || fstat(fd, &st) < 0)
        return;
    uint64_t size = (uint64_t)st.st_size, off = pk->scanned, wstart = 0, wlen = 0;
    pk->size = size;
    pk->unlinked = st.st_nlink == 0; /* compacted away by another process */
    if (off >= size)
        return;
    char *win = NULL;
    while (size - off >= sizeof(struct rec_header)) {
        if (!win || off < wstart || off + sizeof(struct rec_header) > wstart + wlen) {
            size_t want = size - off < SCAN_WINDOW ? (size_t)(size - off) : SCAN_WINDOW, got = 0;
            if (!win)
                win = xmalloc(SCAN_WINDOW);
            if (pread_full(fd, win, want, off, &got) < 0 || got < sizeof(struct rec_header))
                break;
            wstart = off;
            wlen = got;
        }
        struct rec_header h;
        memcpy(&h, win + (off - wstart), sizeof h);
        uint64_t left = size - off - sizeof h;
        if (!store_header_ok(&h) || h.stored_len > left)
            break;
        struct entry e = {.key = {h.key_lo, h.key_hi},
                          .off = off,
                          .stored_len = h.stored_len,
                          .raw_len = h.raw_len,
                          .pack = n,
                          .made = h.made};
        pthread_mutex_lock(&s->index_lock);
        store_index_put(s, &e);
        pthread_mutex_unlock(&s->index_lock);
        off += sizeof h + h.stored_len;
    }
    free(win);
    pk->scanned = off;
}

/* ---- retiring packs removed from the directory ---- */

struct dropped {
    struct key128 key;
    uint32_t pack;
    uint64_t off;
};

void store_retire_unlinked(struct store *s)
{
    bool any = false;
    for (uint32_t n = 1; n < s->npacks; n++)
        any = any || (s->packs[n].fd >= 0 && s->packs[n].unlinked);
    if (!any)
        return;
    /* The compaction that removed them copied what it kept before the unlink: index the
     * copies first, so that only what it dropped is dropped here. */
    for (uint32_t n = 1; n < s->npacks; n++)
        if (s->packs[n].fd >= 0 && !s->packs[n].unlinked)
            store_scan_pack(s, n);
    pthread_mutex_lock(&s->index_lock);
    size_t nd = 0;
    struct dropped *d = NULL;
    size_t it = 0, cap = 0;
    void *v;
    while (map_next(&s->index, &it, NULL, &v)) {
        const struct entry *e = v;
        if (!s->packs[e->pack].unlinked)
            continue;
        if (nd == cap) {
            cap = cap ? 2 * cap : 64;
            d = xrealloc(d, cap * sizeof *d);
        }
        d[nd++] = (struct dropped){e->key, e->pack, e->off};
    }
    for (size_t i = 0; i < nd; i++)
        store_index_drop(s, d[i].key, d[i].pack, d[i].off);
    pthread_mutex_unlock(&s->index_lock);
    free(d);
    if (nd)
        log_debug("%s: %zu results dropped by a compaction elsewhere", s->path, nd);
    pthread_rwlock_wrlock(&s->fd_lock); /* no read of them in progress */
    for (uint32_t n = 1; n < s->npacks; n++)
        if (s->packs[n].fd >= 0 && s->packs[n].unlinked) {
            close(s->packs[n].fd);
            s->packs[n] = (struct pack){.fd = -1};
        }
    pthread_rwlock_unlock(&s->fd_lock);
}
