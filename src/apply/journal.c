/* journal.c: the journal of `roifs apply`: one file, a checksummed header holding the input's
 * original identities, then fixed-size checksummed records appended and made durable one by
 * one (a torn last record is what a kill leaves, and is cut off at the next open). */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define JOURNAL     "journal"
#define HEAD_MAGIC  "roifsAJ2"  /* 2: identities carry a content hash */
#define REC_MAGIC   0x724a4172u /* "rAJr" */
#define MAX_STORAGE (UINT64_C(1) << 32)

enum rec_type { REC_INTENT = 1, REC_REPLACED = 2, REC_FINISH = 3 };

struct head {
    char magic[8];
    uint64_t gen, fingerprint, nstorage, started;
    uint32_t origin_crc; /* of the identities that follow */
    uint32_t crc;        /* of the bytes above */
};

struct ident_rec {
    uint64_t exists, size, mtime_ns, ino, hash;
};

struct rec {
    uint32_t magic, type;
    uint64_t sid, value; /* REC_INTENT: the length; REC_FINISH: the time */
    uint32_t crc32c;     /* REC_INTENT: of the new file's bytes */
    uint32_t crc;        /* of the bytes above */
};

static void free_state(struct journal *j)
{
    free(j->origin);
    free(j->state);
    free(j->intent_len);
    free(j->intent_crc);
    j->origin = NULL;
    j->state = NULL;
    j->intent_len = NULL;
    j->intent_crc = NULL;
    j->begun = j->finished = false;
    j->nreplaced = 0;
}

static void alloc_state(struct journal *j, uint64_t n)
{
    j->nstorage = n;
    j->origin = xcalloc(n ? n : 1, sizeof *j->origin);
    j->state = xcalloc(n ? n : 1, 1);
    j->intent_len = xcalloc(n ? n : 1, sizeof *j->intent_len);
    j->intent_crc = xcalloc(n ? n : 1, sizeof *j->intent_crc);
}

static void apply_rec(struct journal *j, const struct rec *r)
{
    if (r->type == REC_FINISH) {
        j->finished = true;
        j->finished_at = r->value;
    } else if (r->type == REC_INTENT) {
        if (j->state[r->sid] != JC_REPLACED)
            j->state[r->sid] = JC_INTENT;
        j->intent_len[r->sid] = r->value;
        j->intent_crc[r->sid] = r->crc32c;
    } else if (j->state[r->sid] != JC_REPLACED) {
        j->state[r->sid] = JC_REPLACED;
        j->nreplaced++;
    }
}

static bool rec_valid(const struct journal *j, const struct rec *r)
{
    return r->magic == REC_MAGIC && r->crc == zarr_crc32c(0, r, offsetof(struct rec, crc)) &&
           r->type >= REC_INTENT && r->type <= REC_FINISH &&
           (r->type == REC_FINISH || r->sid < j->nstorage);
}

/* Parses the journal file (len bytes at p); returns the length of its valid part. */
static int parse(struct journal *j, const char *p, size_t len, uint64_t *valid, struct errbuf *err)
{
    struct head h;
    if (len < sizeof h)
        return err_set(err, -EBADMSG, "%s: shorter than its header", JOURNAL);
    memcpy(&h, p, sizeof h);
    if (memcmp(h.magic, HEAD_MAGIC, 8) != 0 ||
        h.crc != zarr_crc32c(0, &h, offsetof(struct head, crc)) || h.nstorage > MAX_STORAGE ||
        len - sizeof h < h.nstorage * sizeof(struct ident_rec) ||
        h.origin_crc != zarr_crc32c(0, p + sizeof h, h.nstorage * sizeof(struct ident_rec)))
        return err_set(err, -EBADMSG, "%s: its header is damaged", JOURNAL);
    alloc_state(j, h.nstorage);
    j->begun = true;
    j->gen = h.gen;
    j->fingerprint = h.fingerprint;
    j->started = h.started;
    const char *q = p + sizeof h;
    for (uint64_t i = 0; i < h.nstorage; i++, q += sizeof(struct ident_rec)) {
        struct ident_rec ir;
        memcpy(&ir, q, sizeof ir);
        j->origin[i] =
            (struct zarr_file_identity){ir.exists != 0, ir.size, ir.mtime_ns, ir.ino, ir.hash};
    }
    size_t off = (size_t)(q - p);
    while (off + sizeof(struct rec) <= len) {
        struct rec r;
        memcpy(&r, p + off, sizeof r);
        if (!rec_valid(j, &r))
            break; /* a torn record: the kill came while it was written */
        apply_rec(j, &r);
        off += sizeof r;
    }
    *valid = off;
    return 0;
}

int journal_open(const char *cache_dir, struct journal *j, struct errbuf *err)
{
    memset(j, 0, sizeof *j);
    j->fd = -1;
    char *dir = path_join(cache_dir, "apply");
    int r = mkdir(dir, 0700) < 0 && errno != EEXIST ? -errno : 0;
    if (r == 0 && (j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        r = -errno;
    if (r < 0) {
        err_set(err, r, "%s: %s", dir, strerror(-r));
        free(dir);
        j->dirfd = -1;
        return r;
    }
    free(dir);
    j->fd = openat(j->dirfd, JOURNAL, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (j->fd < 0)
        return errno == ENOENT ? 0 : err_set(err, -errno, "%s: %s", JOURNAL, strerror(errno));
    char *data = NULL;
    size_t len = 0;
    if ((r = file_read_max(j->dirfd, JOURNAL, SIZE_MAX, &data, &len)) < 0)
        return err_set(err, r, "%s: %s", JOURNAL, file_strerror(r));
    uint64_t valid = 0;
    r = parse(j, data, len, &valid, err);
    free(data);
    if (r < 0)
        return r;
    if (valid < len && (ftruncate(j->fd, (off_t)valid) < 0 || fdatasync(j->fd) < 0))
        return err_set(err, -errno, "%s: cannot cut its torn end: %s", JOURNAL, strerror(errno));
    j->end = valid;
    return 0;
}

void journal_close(struct journal *j)
{
    free_state(j);
    if (j->fd >= 0)
        close(j->fd);
    if (j->dirfd >= 0)
        close(j->dirfd);
    j->fd = j->dirfd = -1;
}

int journal_begin(struct journal *j, uint64_t fingerprint, const struct zarr_file_identity *ids,
                  uint64_t n, struct errbuf *err)
{
    struct head h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, HEAD_MAGIC, 8);
    h.gen = j->begun ? j->gen + 1 : 1;
    h.fingerprint = fingerprint;
    h.nstorage = n;
    h.started = (uint64_t)time(NULL);
    size_t olen = (size_t)n * sizeof(struct ident_rec);
    char *buf = xmalloc(sizeof h + olen);
    for (uint64_t i = 0; i < n; i++) {
        struct ident_rec ir = {ids[i].exists, ids[i].size, ids[i].mtime_ns, ids[i].ino,
                               ids[i].hash};
        memcpy(buf + sizeof h + i * sizeof ir, &ir, sizeof ir);
    }
    h.origin_crc = zarr_crc32c(0, buf + sizeof h, olen);
    h.crc = zarr_crc32c(0, &h, offsetof(struct head, crc));
    memcpy(buf, &h, sizeof h);
    int r = file_write_atomic(j->dirfd, JOURNAL, buf, sizeof h + olen, true);
    free(buf);
    if (r == 0 && fsync(j->dirfd) < 0)
        r = -errno;
    if (r < 0)
        return err_set(err, r, "%s: cannot write: %s", JOURNAL, strerror(-r));
    if (j->fd >= 0)
        close(j->fd);
    if ((j->fd = openat(j->dirfd, JOURNAL, O_RDWR | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return err_set(err, -errno, "%s: %s", JOURNAL, strerror(errno));
    free_state(j);
    alloc_state(j, n);
    memcpy(j->origin, ids, (size_t)n * sizeof *ids);
    j->begun = true;
    j->gen = h.gen;
    j->fingerprint = fingerprint;
    j->started = h.started;
    j->end = sizeof h + olen;
    return 0;
}

/* durable: fdatasync before returning. A "replaced" record need not be: without it the next
 * run finds the file that the intent record names in place, and notes it then. */
static int append(struct journal *j, uint32_t type, uint64_t sid, uint64_t value, uint32_t c,
                  bool durable, struct errbuf *err)
{
    struct rec r = {REC_MAGIC, type, sid, value, c, 0};
    r.crc = zarr_crc32c(0, &r, offsetof(struct rec, crc));
    errno = 0;
    ssize_t w = pwrite(j->fd, &r, sizeof r, (off_t)j->end);
    if (w != (ssize_t)sizeof r || (durable && fdatasync(j->fd) < 0))
        return err_set(err, w < 0 || w == (ssize_t)sizeof r ? -errno : -EIO,
                       "%s: cannot append: %s", JOURNAL, strerror(errno ? errno : EIO));
    j->end += sizeof r;
    apply_rec(j, &r);
    return 0;
}

int journal_intent(struct journal *j, uint64_t sid, uint64_t len, uint32_t crc, struct errbuf *err)
{
    return append(j, REC_INTENT, sid, len, crc, true, err);
}

int journal_replaced(struct journal *j, uint64_t sid, struct errbuf *err)
{
    return append(j, REC_REPLACED, sid, 0, 0, false, err);
}

int journal_finish(struct journal *j, struct errbuf *err)
{
    return append(j, REC_FINISH, 0, (uint64_t)time(NULL), 0, true, err);
}

int journal_peek(const char *cache_dir, struct journal_summary *s)
{
    memset(s, 0, sizeof *s);
    char *path = path_join(cache_dir, "apply");
    int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    free(path);
    if (dirfd < 0)
        return errno == ENOENT ? 0 : -errno;
    char *data = NULL;
    size_t len = 0;
    int r = file_read_max(dirfd, JOURNAL, SIZE_MAX, &data, &len);
    close(dirfd);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    struct journal j;
    memset(&j, 0, sizeof j);
    j.fd = j.dirfd = -1;
    struct errbuf err = {{0}};
    uint64_t valid = 0;
    r = parse(&j, data, len, &valid, &err); /* a torn end is left for apply to cut */
    free(data);
    if (r == 0) {
        *s = (struct journal_summary){j.begun, j.finished, j.gen, j.nreplaced, j.nstorage};
    }
    free_state(&j);
    return r;
}
