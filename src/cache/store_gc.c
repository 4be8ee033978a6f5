/* store_gc.c: garbage collection of the result store (store.h): packs rewritten without the
 * records nobody wants, safely while other processes read and append (the retirement of packs
 * that another process compacted away is store_pack.c's). */
#include "store_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../crc32c.h"
#include "claim.h"

void (*store_compact_hook)(int step);

#define COPY_BATCH (64u << 20) /* bytes of records copied per append */

static void hook(int step)
{
    if (store_compact_hook)
        store_compact_hook(step);
}

/* ---- compaction ---- */

static int by_offset(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* The records of pack n that the index names there and live wants, by offset (index lock
 * taken). *kept_bytes gets their size on disk, *indexed the number of results the index
 * names in the pack. */
static struct entry *wanted_records(struct store *s, uint32_t n, store_live_fn live, void *ctx,
                                    size_t *count, uint64_t *kept_bytes, size_t *indexed)
{
    size_t k = 0, cap = 0;
    struct entry *out = NULL;
    *kept_bytes = 0;
    *indexed = 0;
    pthread_mutex_lock(&s->index_lock);
    size_t it = 0;
    void *v;
    while (map_next(&s->index, &it, NULL, &v)) {
        const struct entry *e = v;
        if (e->pack != n)
            continue;
        ++*indexed;
        if (!live(ctx, e->key))
            continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 256;
            out = xrealloc(out, cap * sizeof *out);
        }
        out[k++] = *e;
        *kept_bytes += sizeof(struct rec_header) + e->stored_len;
    }
    pthread_mutex_unlock(&s->index_lock);
    if (k)
        qsort(out, k, sizeof *out, by_offset);
    *count = k;
    return out;
}

/* Reads record e of pack fd whole (header and stored bytes) into p, checking it; false for a
 * record that does not verify (it is not copied: its ROI is computed again when wanted). */
static bool read_whole(int fd, const struct entry *e, struct pending *p)
{
    p->buf = xmalloc(e->stored_len ? e->stored_len : 1);
    p->body = p->buf;
    struct iovec iov[2] = {{&p->h, sizeof p->h}, {p->buf, e->stored_len}};
    ssize_t got = preadv(fd, iov, 2, (off_t)e->off);
    bool ok = got == (ssize_t)(sizeof p->h + e->stored_len) && store_header_ok(&p->h) &&
              p->h.key_lo == e->key.lo && p->h.key_hi == e->key.hi &&
              p->h.stored_len == e->stored_len &&
              zarr_crc32c(0, p->buf, e->stored_len) == p->h.data_crc;
    if (!ok) {
        free(p->buf);
        p->buf = NULL;
    }
    return ok;
}

/* Makes the packs [first, last] (none when first is 0) and the directory durable. The copies
 * went to packs of ours, which nobody removes while we hold them; a number between them may be
 * another writer's pack (each writer appends to its own), which that writer may have removed
 * meanwhile: a pack not found is not one of ours. */
static int sync_packs(struct store *s, uint32_t first, uint32_t last)
{
    int r = 0;
    for (uint32_t n = first; n <= last && n > 0; n++) {
        char name[32];
        store_pack_name(n, name, sizeof name);
        int w = openat(s->dirfd, name, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
        if (w < 0 && errno == ENOENT && n != first && n != last)
            continue;
        if (w < 0 || fdatasync(w) < 0)
            r = -errno;
        if (w >= 0)
            close(w);
    }
    if (r == 0 && fsync(s->dirfd) < 0 && errno != EINVAL)
        r = -errno;
    return r;
}

/* Copies the records to keep of pack n to the newest pack, in batches (append and scan locks
 * held). The packs written are [*first, *last] (0 when none). */
static int copy_records(struct store *s, uint32_t n, const struct entry *keep, size_t nkeep,
                        size_t *copied, uint32_t *first, uint32_t *last, struct errbuf *err)
{
    struct pending *batch = xmalloc((nkeep ? nkeep : 1) * sizeof *batch);
    int r = 0;
    *first = *last = 0;
    *copied = 0;
    for (size_t i = 0; i < nkeep && r == 0;) {
        size_t nb = 0;
        uint64_t bytes = 0;
        for (; i < nkeep && (nb == 0 || bytes + keep[i].stored_len <= COPY_BATCH); i++)
            if (read_whole(s->packs[n].fd, &keep[i], &batch[nb])) {
                bytes += sizeof(struct rec_header) + keep[i].stored_len;
                nb++;
            } else {
                log_warn("%s/pack-%06u: a stored result at byte %llu does not verify; not "
                         "kept",
                         s->path, n, (unsigned long long)keep[i].off);
            }
        uint32_t f = 0, l = 0;
        if (nb)
            r = store_append_records(s, batch, nb, &f, &l, err);
        if (r == 0 && nb) {
            *first = *first ? *first : f;
            *last = l;
            *copied += nb;
        }
        for (size_t j = 0; j < nb; j++)
            free(batch[j].buf);
    }
    free(batch);
    return r;
}

/* Rewrites pack n (below end, the first pack number made by this compaction) without what
 * live does not want (append and scan locks held). */
static int compact_pack(struct store *s, uint32_t n, uint32_t end, store_live_fn live, void *ctx,
                        struct store_compaction *out, struct errbuf *err)
{
    store_catch_up(s); /* everything appended elsewhere is in the index: nothing is lost */
    if (n >= s->npacks || s->packs[n].fd < 0 || s->packs[n].unlinked)
        return 0; /* compacted by another process meanwhile */
    /* The pack's claim: no other writer appends to it while it is rewritten. A pack a live
     * writer holds (a process of this host or another) is left for a later compaction. */
    int claim;
    if (n == s->own && s->own_pid == getpid()) {
        claim = s->own_claim; /* ours: our appends go on in a new pack */
        s->own = 0;
        s->own_claim = -1;
    } else if ((claim = store_claim_pack(s, n)) < 0) {
        if (claim != -EWOULDBLOCK)
            return err_set(err, claim, "%s/pack-%06u: cannot claim it: %s", s->path, n,
                           strerror(-claim));
        out->packs_in_use++;
        return 0;
    }
    store_scan_pack(s, n); /* what its last writer appended before we held it */
    struct pack *pk = &s->packs[n];
    size_t nkeep, indexed;
    uint64_t kept_bytes;
    struct entry *keep = wanted_records(s, n, live, ctx, &nkeep, &kept_bytes, &indexed);
    if (kept_bytes >= pk->scanned && pk->scanned == pk->size) {
        free(keep);
        claim_release(claim);
        return 0; /* nothing to remove */
    }
    /* The copies go to a pack of ours above those this compaction looks at, so that none is
     * copied twice, and appends go on above the removed ones: pack numbers only ever grow. */
    size_t copied = 0;
    uint32_t first, last;
    s->own_floor = end;
    int r = copy_records(s, n, keep, nkeep, &copied, &first, &last, err);
    s->own_floor = 0;
    free(keep);
    hook(1);
    if (r == 0 && (r = sync_packs(s, first, last)) < 0)
        err_set(err, r, "%s: cannot make the copies durable: %s", s->path, strerror(-r));
    if (r < 0) {
        claim_release(claim);
        return r; /* the pack stays as it is: the copies are only duplicates */
    }
    hook(2);
    char name[32];
    store_pack_name(n, name, sizeof name);
    if (unlinkat(s->dirfd, name, 0) < 0) {
        r = err_set(err, -errno, "%s/%s: cannot remove: %s", s->path, name, strerror(errno));
        claim_release(claim);
        return r;
    }
    hook(3);
    claim_release(claim);
    out->packs_rewritten++;
    out->kept += copied;
    out->removed += indexed - copied;
    s->packs[n].unlinked = true; /* (pk is stale: copies may have grown the table) */
    store_retire_unlinked(s);    /* what is not copied leaves the index */
    return 0;
}

static uint64_t pack_bytes(const struct store *s)
{
    uint64_t b = 0;
    for (uint32_t n = 1; n < s->npacks; n++)
        if (s->packs[n].fd >= 0)
            b += s->packs[n].size;
    return b;
}

int store_compact(struct store *s, store_live_fn live, void *ctx, struct store_compaction *out,
                  struct errbuf *err)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->scan_lock);
    store_catch_up(s);
    uint32_t end = s->npacks; /* packs made from here on hold copies, or newer results */
    out->bytes_before = pack_bytes(s);
    pthread_mutex_unlock(&s->scan_lock);
    int r = 0;
    for (uint32_t n = 1; n < end && r == 0; n++) {
        pthread_mutex_lock(&s->append_lock);
        pthread_mutex_lock(&s->scan_lock);
        r = compact_pack(s, n, end, live, ctx, out, err);
        pthread_mutex_unlock(&s->scan_lock);
        pthread_mutex_unlock(&s->append_lock);
    }
    pthread_mutex_lock(&s->scan_lock);
    out->bytes_after = pack_bytes(s);
    pthread_mutex_unlock(&s->scan_lock);
    return r;
}
