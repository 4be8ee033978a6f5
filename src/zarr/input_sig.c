/* input_sig.c: input signatures, the content hashes (or absence) of the chunk files a box
 * reads, hashed with the metadata: of the files as they are now (through a memo that looks at
 * each file once), or of exactly the bytes a read used (zarr_input_read_sig). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../map.h"
#include "../nd.h"
#include "input_state.h"

/* ---- what a read saw ---- */

/* The storage range of the box [start, start + shape) (no dimension empty). */
static void storage_range(const struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                          uint64_t *s0, uint64_t *sn)
{
    const struct zarr_meta *m = &in->meta;
    for (int d = 0; d < m->ndim; d++) {
        s0[d] = start[d] / m->chunks[d];
        sn[d] = (start[d] + shape[d] - 1) / m->chunks[d] + 1 - s0[d];
    }
}

static void seen_init(const struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                      struct seen *sn)
{
    storage_range(in, start, shape, sn->s0, sn->sn);
    sn->n = (size_t)nd_prod(sn->sn, in->meta.ndim);
    sn->hash = xcalloc(sn->n ? sn->n : 1, sizeof *sn->hash);
    sn->exists = xcalloc(sn->n ? sn->n : 1, sizeof *sn->exists);
    sn->set = xcalloc(sn->n ? sn->n : 1, sizeof *sn->set);
    sn->conflict = false;
}

static void seen_free(struct seen *sn)
{
    free(sn->hash);
    free(sn->exists);
    free(sn->set);
}

/* The content hash of storage file sid (*exists false: not there; pos: its place in the box's
 * storage files). */
typedef uint64_t (*hash_fn)(void *ctx, uint64_t sid, size_t pos, bool *exists);

/* The signature of box [start, start + shape) from the content of each storage file, in C
 * order of the storage grid (pos: the file's place in that order). */
static uint64_t signature_of(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                             hash_fn fn, void *ctx)
{
    int nd = in->meta.ndim;
    uint64_t s0[ROIFS_MAX_DIM], sn[ROIFS_MAX_DIM], s1[ROIFS_MAX_DIM], ci[ROIFS_MAX_DIM];
    /* "content": no signature of the identities that named files before can equal one */
    uint64_t h = hash64(in->meta_hash, "content", 7);
    storage_range(in, start, shape, s0, sn);
    for (int d = 0; d < nd; d++)
        s1[d] = s0[d] + sn[d];
    memcpy(ci, s0, sizeof(uint64_t) * nd);
    size_t pos = 0;
    do {
        bool exists;
        uint64_t id = nd_linear(ci, in->grid, nd);
        uint64_t content = fn(ctx, id, pos++, &exists);
        uint64_t rec[3] = {id, exists, exists ? content : 0};
        h = hash64(h, rec, sizeof rec);
    } while (nd_next_index(ci, s0, s1, nd));
    return h;
}

struct seen_ctx {
    struct zarr_input *in;
    const struct seen *sn;
};

static uint64_t hash_from_seen(void *ctx, uint64_t sid, size_t pos, bool *exists)
{
    const struct seen_ctx *s = ctx;
    if (s->sn->set[pos]) {
        *exists = s->sn->exists[pos];
        return s->sn->hash[pos];
    }
    struct file_id fid; /* not read (cannot happen): as it is now */
    input_stat_storage(s->in, sid, &fid);
    return input_hash_now(s->in, sid, &fid, exists);
}

int zarr_input_read_sig(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                        void *dst, uint64_t *sig, struct errbuf *err)
{
    int r = input_check_box(in, start, shape, err);
    if (r != 0) {
        if (sig)
            *sig = in->meta_hash;
        return r < 0 ? r : 0;
    }
    if (!sig)
        return input_read_box(in, start, shape, dst, NULL, err);
    for (int attempt = 0;; attempt++) {
        struct seen sn;
        seen_init(in, start, shape, &sn);
        r = input_read_box(in, start, shape, dst, &sn, err);
        bool again = r == -EAGAIN || (r == 0 && sn.conflict);
        if (r == 0 && !sn.conflict) {
            struct seen_ctx ctx = {in, &sn};
            *sig = signature_of(in, start, shape, hash_from_seen, &ctx);
        }
        seen_free(&sn);
        if (!again)
            return r;
        if (attempt == 2)
            return r < 0 ? err_prefix(err, -EIO, "input kept changing")
                         : err_set(err, -EIO, "%s: the input kept changing while being read",
                                   in->path);
    }
}

/* ---- signatures ---- */

/* Content hashes by storage id (a map.h table); each file looked at once per memo. */
struct memo_val {
    uint64_t hash;
    bool exists;
};

struct zarr_sigmemo {
    struct map hashes; /* storage id -> struct memo_val */
    bool looked, gone; /* the input's path looked at once per memo (input_dir_look) */
};

struct zarr_sigmemo *zarr_sigmemo_new(void)
{
    struct zarr_sigmemo *m = xcalloc(1, sizeof *m);
    map_init(&m->hashes, sizeof(struct memo_val), 0);
    return m;
}

void zarr_sigmemo_free(struct zarr_sigmemo *m)
{
    if (!m)
        return;
    map_destroy(&m->hashes);
    free(m);
}

struct memo_ctx {
    struct zarr_input *in;
    struct zarr_sigmemo *memo;
};

static uint64_t hash_from_memo(void *ctx, uint64_t sid, size_t pos, bool *exists)
{
    (void)pos;
    struct memo_ctx *c = ctx;
    if (c->in->pinned) {
        const struct zarr_file_identity *p = &c->in->pinned[sid];
        *exists = p->exists;
        return p->hash;
    }
    struct zarr_sigmemo *m = c->memo;
    if (m) {
        const struct memo_val *v = map_get(&m->hashes, sid, 0);
        if (v) {
            *exists = v->exists;
            return v->hash;
        }
    }
    struct file_id fid;
    input_stat_storage(c->in, sid, &fid);
    uint64_t h = input_hash_now(c->in, sid, &fid, exists);
    if (m)
        *(struct memo_val *)map_put(&m->hashes, sid, 0, NULL) = (struct memo_val){h, *exists};
    return h;
}

/* Whether the input's path holds no array or another one now: looked at once per memo. */
static bool input_gone(const struct zarr_input *in, struct zarr_sigmemo *memo)
{
    if (memo && memo->looked)
        return memo->gone;
    bool gone = input_dir_look(in, NULL) < 0;
    if (memo) {
        memo->looked = true;
        memo->gone = gone;
    }
    return gone;
}

int zarr_input_signature_memo(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                              struct zarr_sigmemo *memo, uint64_t *sig)
{
    if (input_gone(in, memo)) { /* a signature no read gives: nothing stored is current */
        *sig = hash64(in->meta_hash, "gone", 4);
        return -EIO;
    }
    int r = input_check_box(in, start, shape, NULL);
    if (r != 0) {
        *sig = in->meta_hash;
        return r < 0 ? r : 0;
    }
    struct memo_ctx ctx = {in, memo};
    *sig = signature_of(in, start, shape, hash_from_memo, &ctx);
    return 0;
}

int zarr_input_signature(struct zarr_input *in, const uint64_t *start, const uint64_t *shape,
                         uint64_t *sig)
{
    return zarr_input_signature_memo(in, start, shape, NULL, sig);
}

/* ---- identities of storage files (roifs apply) ---- */

uint64_t zarr_input_nstorage(const struct zarr_input *in)
{
    return nd_prod(in->grid, in->meta.ndim);
}

void zarr_input_storage_identity(struct zarr_input *in, uint64_t sid, struct zarr_file_identity *id)
{
    struct file_id fid;
    bool exists;
    input_stat_storage(in, sid, &fid);
    uint64_t h = input_hash_now(in, sid, &fid, &exists);
    *id = (struct zarr_file_identity){exists, fid.size, fid.mtime_ns, fid.ino, exists ? h : 0};
}

void zarr_input_pin_identities(struct zarr_input *in, const struct zarr_file_identity *ids)
{
    in->pinned = ids;
}
