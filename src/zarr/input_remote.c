/* input_remote.c: the storage of an input at an http(s) URL (remote.c below): objects by
 * name, never a listing. A storage object's identity (struct file_id) is its signature (the
 * ETag, else Last-Modified and length: remote.c) and its length; the identities seen are kept
 * with the time the server last confirmed them, and a look older than `revalidate` asks again
 * with a conditional request. When the server cannot be reached to confirm, the identity last
 * confirmed stands (results keyed on it are served, counted as unconfirmed); a changed one is
 * never ignored. The input is named by identity (input_by_identity): its content hashes are
 * its signatures, so that no look reads a chunk. Between input_file.c (and input.c) above and
 * input_content.c below: it calls nothing else of the reader. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"
#include "input_state.h"
#include "remote.h"

struct remote_rec {
    struct file_id fid;
    uint64_t confirmed_ns; /* when the server last said so */
    char etag[160];
    bool known;   /* fid is what the server said once */
    bool looking; /* a thread is asking the server: the others wait for its answer */
};

/* A body fetched with a look (a never-seen chunk of a batch), kept for its read. */
struct stashed {
    uint64_t id; /* key_id, 0: free */
    struct file_id fid;
    char *body;
    size_t len;
};
#define STASH_MAX (2 * REMOTE_BATCH_MAX)

struct input_remote {
    pthread_mutex_t lock;
    struct stashed stash[STASH_MAX]; /* a ring: the oldest goes first */
    size_t stash_next;
    pthread_cond_t looked;          /* a look ended */
    struct map recs;                /* hash of the key -> struct remote_rec */
    _Atomic uint64_t down_until_ns; /* the server was not reached: no look until then */
};

/* After a look that reached no server, the identities last confirmed stand this long without
 * another look (a server down is not asked again at every open). */
#define DOWN_NS (1000000000ULL)

void input_remote_open(struct zarr_input *in)
{
    struct input_remote *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->looked, NULL);
    map_init(&r->recs, sizeof(struct remote_rec), 0);
    in->remote = r;
    in->hashes.by_identity = true;
}

void input_remote_close(struct input_remote *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < STASH_MAX; i++)
        free(r->stash[i].body);
    map_destroy(&r->recs);
    pthread_cond_destroy(&r->looked);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static char *url_of(const struct zarr_input *in, const char *key)
{
    size_t n = strlen(in->path);
    return xasprintf("%s%s%s", in->path, n && in->path[n - 1] == '/' ? "" : "/", key);
}

/* The key of storage object sid (as input_file.c's zarr_input_storage_key, which is above). */
static void storage_key(const struct zarr_input *in, uint64_t sid, char *buf, size_t len)
{
    uint64_t idx[ROIFS_MAX_DIM];
    nd_unlinear(sid, in->grid, in->meta.ndim, idx);
    zarr_meta_chunk_key(&in->meta, idx, buf, len);
}

static uint64_t key_id(const char *key)
{
    return hash64(HASH64_INIT, key, strlen(key));
}

static void fid_of(const struct remote_obj *o, struct file_id *fid)
{
    memset(fid, 0, sizeof *fid);
    fid->exists = true;
    fid->size = o->length;
    fid->mtime_ns = o->sig;
}

/* Ends a look at key (or a read of it): fid (not NULL) is what the server said now. */
static void note(const struct zarr_input *in, const char *key, const struct file_id *fid,
                 const char *etag)
{
    struct input_remote *r = in->remote;
    pthread_mutex_lock(&r->lock);
    struct remote_rec *rec = map_put(&r->recs, key_id(key), 0, NULL);
    if (fid) {
        rec->fid = *fid;
        rec->confirmed_ns = input_now_ns();
        rec->known = true;
        snprintf(rec->etag, sizeof rec->etag, "%s", etag ? etag : "");
    }
    rec->looking = false;
    pthread_cond_broadcast(&r->looked);
    pthread_mutex_unlock(&r->lock);
}

/* Whether record e may be used without a look (lock held): confirmed within revalidate, or
 * the server was not reached a moment ago (then it is served unconfirmed). */
static bool usable(const struct input_remote *r, const struct remote_rec *e, bool *unconfirmed)
{
    uint64_t now = input_now_ns();
    *unconfirmed = false;
    if (!e || !e->known)
        return false;
    if (now - e->confirmed_ns < remote_revalidate_ns())
        return true;
    *unconfirmed = now < r->down_until_ns;
    return *unconfirmed;
}

/* Takes the look at key for this thread: true, with *rec what was known of it (rec->known).
 * false with *rec usable as it is, or (no_wait) when another thread is looking at it; else
 * waits for that thread's answer. */
static bool claim(const struct zarr_input *in, const char *key, struct remote_rec *rec,
                  bool no_wait)
{
    struct input_remote *r = in->remote;
    bool unconfirmed, mine = false;
    pthread_mutex_lock(&r->lock);
    for (;;) {
        struct remote_rec *e = map_get(&r->recs, key_id(key), 0);
        if (usable(r, e, &unconfirmed)) {
            *rec = *e;
            if (unconfirmed && !no_wait)
                remote_note_unconfirmed();
            break;
        }
        if (e && e->looking && no_wait)
            break;
        if (e && e->looking) {
            pthread_cond_wait(&r->looked, &r->lock);
            continue;
        }
        e = map_put(&r->recs, key_id(key), 0, NULL); /* zeroed when new */
        e->looking = mine = true;
        *rec = *e;
        break;
    }
    pthread_mutex_unlock(&r->lock);
    return mine;
}

/* Keeps body (taken) of key, whose identity is fid, for its read. */
static void stash_put(const struct zarr_input *in, const char *key, const struct file_id *fid,
                      char *body, size_t len)
{
    struct input_remote *r = in->remote;
    pthread_mutex_lock(&r->lock);
    struct stashed *e = &r->stash[r->stash_next++ % STASH_MAX];
    free(e->body);
    *e = (struct stashed){key_id(key), *fid, body, len};
    pthread_mutex_unlock(&r->lock);
}

/* The body kept for key when it is of identity fid: true and *body (taken), *len. */
static bool stash_take(const struct zarr_input *in, const char *key, const struct file_id *fid,
                       char **body, size_t *len)
{
    struct input_remote *r = in->remote;
    uint64_t id = key_id(key);
    bool found = false;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < STASH_MAX && !found; i++) {
        struct stashed *e = &r->stash[i];
        if (e->body && e->id == id) {
            found = input_same_file(&e->fid, fid);
            if (found)
                *body = e->body, *len = e->len;
            else
                free(e->body);
            e->body = NULL, e->id = 0;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return found;
}

int input_remote_read_meta(const struct zarr_input *in, const char *name, char **text, size_t *len,
                           struct errbuf *err)
{
    char *url = url_of(in, name);
    int r = remote_read_text(url, text, len, err);
    free(url);
    return r;
}

/* What the answer (r, o, err) to a look at key says of its identity (*fid), recorded; rec:
 * what was known before. Ends the look. */
static void look_done(const struct zarr_input *in, const char *key, const struct remote_rec *rec,
                      int r, const struct remote_obj *o, const struct errbuf *err,
                      struct file_id *fid)
{
    memset(fid, 0, sizeof *fid);
    if (r == 0 && o->status == 304 && rec->known) {
        *fid = rec->fid;
        note(in, key, fid, rec->etag);
    } else if (r == 0) {
        fid_of(o, fid);
        note(in, key, fid, o->etag);
    } else if (r == -ENOENT) {
        note(in, key, fid, NULL); /* "not there": a missing chunk */
    } else if (rec->known && o->status == 0) {
        /* not reached: the identity last confirmed stands */
        *fid = rec->fid;
        remote_note_unconfirmed();
        in->remote->down_until_ns = input_now_ns() + DOWN_NS;
        log_debug("%s", err->msg);
        note(in, key, NULL, NULL);
    } else {
        /* a refusal (4xx): an identity no answer gives, the read will say why */
        fid->exists = true;
        fid->size = UINT64_MAX;
        fid->mtime_ns = hash64(input_now_ns(), key, strlen(key));
        note(in, key, NULL, NULL);
    }
}

void input_remote_stat_key(const struct zarr_input *in, const char *key, struct file_id *fid)
{
    struct remote_rec rec;
    if (!claim(in, key, &rec, false)) {
        *fid = rec.fid;
        return;
    }
    char *url = url_of(in, key);
    struct remote_obj o;
    struct errbuf err = {{0}};
    int r = remote_request(url, NULL, true, rec.known && rec.fid.exists ? rec.etag : NULL, 0, NULL,
                           NULL, &o, &err);
    free(url);
    look_done(in, key, &rec, r, &o, &err, fid);
}

/* Whether storage object sid was read by an earlier process (its identity is among the
 * content hashes kept in the cache, input_hash.c): a remount then asks for its signature
 * only (a HEAD), not its bytes, which its stored results may make unneeded. */
static bool kept(const struct zarr_input *in, uint64_t sid)
{
    struct input_hashes *h = (struct input_hashes *)&in->hashes;
    pthread_mutex_lock(&h->lock);
    bool found = map_get(&h->e, sid, 0) != NULL;
    pthread_mutex_unlock(&h->lock);
    return found;
}

/* How far past a storage object a look goes for others to ask in the same batch. */
#define LOOK_AHEAD 4

void input_remote_stat(const struct zarr_input *in, uint64_t sid, struct file_id *fid)
{
    enum { KEYLEN = ROIFS_MAX_DIM * 24 + 4, B = REMOTE_BATCH_MAX };
    char keys[B][KEYLEN];
    struct remote_rec recs[B];
    storage_key(in, sid, keys[0], KEYLEN);
    if (!claim(in, keys[0], &recs[0], false)) {
        *fid = recs[0].fid;
        return;
    }
    /* The objects after it in storage order that need a look too, and no other thread looks
     * at: asked at once, so that a cold read's looks cost a round trip per batch, not per
     * chunk. */
    size_t n = 1, want = (size_t)remote_connections();
    want = want > B ? B : want;
    /* Never seen (a cold read): its bytes with its signature, one round trip instead of two,
     * kept for its read; not for shards (read by ranges) nor chunks too large to keep. */
    uint64_t max = input_max_file_size(in);
    bool get = !recs[0].known && !kept(in, sid) && !in->meta.sharded && max * want <= in->cap / 2;
    uint64_t total = nd_prod(in->grid, in->meta.ndim);
    for (uint64_t s = sid + 1; n < want && s < total && s <= sid + LOOK_AHEAD * want; s++) {
        storage_key(in, s, keys[n], KEYLEN);
        if (!claim(in, keys[n], &recs[n], true))
            continue;
        if (get && (recs[n].known || kept(in, s)))
            note(in, keys[n], NULL, NULL); /* a revalidation: another batch's */
        else
            n++;
    }
    const char *urls[B], *inm[B];
    struct remote_obj objs[B];
    int rcs[B];
    struct errbuf errs[B];
    for (size_t i = 0; i < n; i++) {
        urls[i] = url_of(in, keys[i]);
        inm[i] = recs[i].known && recs[i].fid.exists ? recs[i].etag : NULL;
        errs[i].msg[0] = 0;
    }
    char *bodies[B];
    size_t lens[B];
    remote_fetch_many(urls, inm, n, (size_t)max, get ? bodies : NULL, lens, objs, rcs, errs);
    for (size_t i = 0; i < n; i++) {
        struct file_id f;
        if (get && bodies[i] && rcs[i] == 0 && objs[i].status != 304) {
            fid_of(&objs[i], &f); /* kept before the look ends: its waiters read it next */
            stash_put(in, keys[i], &f, bodies[i], lens[i]);
        } else if (get) {
            free(bodies[i]);
        }
        look_done(in, keys[i], &recs[i], rcs[i] == -EFBIG ? -EIO : rcs[i], &objs[i], &errs[i], &f);
        if (i == 0)
            *fid = f;
        free((char *)urls[i]);
    }
}

int input_remote_read_file(const struct zarr_input *in, const char *key, uint64_t max, char **raw,
                           size_t *len, struct read_info *ri, struct errbuf *err)
{
    struct remote_rec rec = {0};
    pthread_mutex_lock(&in->remote->lock);
    const struct remote_rec *e = map_get(&in->remote->recs, key_id(key), 0);
    if (e)
        rec = *e;
    pthread_mutex_unlock(&in->remote->lock);
    if (rec.known && !rec.fid.exists && input_now_ns() - rec.confirmed_ns < remote_revalidate_ns())
        return -ENOENT; /* a 404 its look has just had: a missing chunk */
    if (rec.known && rec.fid.exists && stash_take(in, key, &rec.fid, raw, len)) {
        ri->fid = rec.fid; /* fetched with its look */
        ri->hash = input_identity_value(&ri->fid);
        ri->racy = false;
        return 0;
    }
    char *url = url_of(in, key);
    struct remote_obj o;
    int r = remote_request(url, NULL, false, NULL, (size_t)max, raw, len, &o, err);
    free(url);
    if (r == -ENOENT) {
        struct file_id none = {0};
        note(in, key, &none, NULL);
        return r;
    }
    if (r == -EFBIG)
        return err_prefix(err, -EIO, "cannot read chunk: too large for a chunk of %zu bytes",
                          in->chunk_nbytes);
    if (r < 0)
        return err_prefix(err, -EIO, "cannot read chunk");
    fid_of(&o, &ri->fid);
    note(in, key, &ri->fid, o.etag);
    ri->hash = input_identity_value(&ri->fid);
    ri->racy = false;
    return 0;
}

int input_remote_read_range(const struct zarr_input *in, const char *key, const char *range,
                            const struct file_id *expect, void **raw, size_t *len,
                            struct file_id *fid, struct errbuf *err)
{
    char *url = url_of(in, key);
    struct remote_obj o;
    char *body = NULL;
    int r = remote_request(url, range, false, NULL, (size_t)input_max_file_size(in), &body, len, &o,
                           err);
    free(url);
    if (r == -ENOENT) {
        struct file_id none = {0};
        note(in, key, &none, NULL);
        return expect ? err_set(err, -EAGAIN, "%s/%s: the shard went away while being read",
                                in->path, key)
                      : r;
    }
    if (r < 0)
        return err_prefix(err, -EIO, "cannot read shard");
    fid_of(&o, fid);
    note(in, key, fid, o.etag);
    if (expect && !input_same_file(expect, fid)) {
        free(body);
        return err_set(err, -EAGAIN, "%s/%s: the shard changed while being read", in->path, key);
    }
    *raw = body;
    return 0;
}

int input_remote_shard_index(const struct zarr_input *in, const char *key, void **raw,
                             struct read_info *ri, uint64_t *ixhash, struct errbuf *err)
{
    const struct zarr_meta *m = &in->meta;
    size_t isz = zarr_shard_index_size(m), len = 0;
    char range[48];
    if (m->shard.index_at_start)
        snprintf(range, sizeof range, "0-%zu", isz - 1);
    else
        snprintf(range, sizeof range, "-%zu", isz);
    int r = input_remote_read_range(in, key, range, NULL, raw, &len, &ri->fid, err);
    if (r < 0)
        return r;
    if (len < isz || ri->fid.size < isz) {
        free(*raw);
        return err_set(err, -EIO,
                       "%s/%s: shard of %llu bytes is shorter than its index (%zu bytes)", in->path,
                       key, (unsigned long long)ri->fid.size, isz);
    }
    *ixhash = input_hash_bytes(*raw, isz);
    ri->hash = input_identity_value(&ri->fid);
    ri->racy = false;
    return 0;
}

int input_remote_inner(const struct zarr_input *in, const char *key, uint64_t off, uint64_t n,
                       const struct file_id *expect, void **raw, struct errbuf *err)
{
    if (n == 0 || n > 2 * (uint64_t)in->chunk_nbytes + (1u << 20))
        return err_set(err, -EIO, "%s/%s: an inner chunk of %llu bytes for a chunk of %zu bytes",
                       in->path, key, (unsigned long long)n, in->chunk_nbytes);
    char range[48];
    snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)off,
             (unsigned long long)(off + n - 1));
    struct file_id now;
    size_t len = 0;
    int r = input_remote_read_range(in, key, range, expect, raw, &len, &now, err);
    if (r == 0 && len != n) {
        free(*raw);
        r = err_set(err, -EIO, "%s/%s: a range of %zu bytes, %llu asked", in->path, key, len,
                    (unsigned long long)n);
    }
    return r;
}
