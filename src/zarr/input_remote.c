/* input_remote.c: the storage of an input at an http(s) URL (remote.c below): objects by
 * name, never a listing. A storage object's identity (struct file_id) is its signature (the
 * ETag, else Last-Modified and length: remote.c) and its length; the identities seen are kept
 * with the time the server last confirmed them, and a look older than `revalidate` asks again
 * with a conditional request. When the server cannot be reached to confirm, the identity last
 * confirmed stands (results keyed on it are served, counted as unconfirmed); a changed one is
 * never ignored. The input is named by identity (input_by_identity): its content hashes are
 * its signatures, so that no look reads a chunk. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "input_state.h"
#include "remote.h"

struct remote_rec {
    struct file_id fid;
    uint64_t confirmed_ns; /* when the server last said so */
    char etag[160];
};

struct input_remote {
    pthread_mutex_t lock;
    struct map recs; /* hash of the key -> struct remote_rec */
};

void input_remote_open(struct zarr_input *in)
{
    struct input_remote *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    map_init(&r->recs, sizeof(struct remote_rec), 0);
    in->remote = r;
    in->hashes.by_identity = true;
}

void input_remote_close(struct input_remote *r)
{
    if (!r)
        return;
    map_destroy(&r->recs);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static char *url_of(const struct zarr_input *in, const char *key)
{
    size_t n = strlen(in->path);
    return xasprintf("%s%s%s", in->path, n && in->path[n - 1] == '/' ? "" : "/", key);
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

/* Records what the server said of key now. */
static void note(const struct zarr_input *in, const char *key, const struct file_id *fid,
                 const char *etag)
{
    struct input_remote *r = in->remote;
    pthread_mutex_lock(&r->lock);
    struct remote_rec *rec = map_put(&r->recs, key_id(key), 0, NULL);
    rec->fid = *fid;
    rec->confirmed_ns = input_now_ns();
    snprintf(rec->etag, sizeof rec->etag, "%s", etag ? etag : "");
    pthread_mutex_unlock(&r->lock);
}

int input_remote_read_meta(const struct zarr_input *in, const char *name, char **text, size_t *len,
                           struct errbuf *err)
{
    char *url = url_of(in, name);
    int r = remote_read_text(url, text, len, err);
    free(url);
    return r;
}

void input_remote_stat(const struct zarr_input *in, const char *key, struct file_id *fid)
{
    struct input_remote *rm = in->remote;
    uint64_t now = input_now_ns();
    struct remote_rec rec;
    pthread_mutex_lock(&rm->lock);
    const struct remote_rec *e = map_get(&rm->recs, key_id(key), 0);
    bool have = e != NULL;
    if (have)
        rec = *e;
    pthread_mutex_unlock(&rm->lock);
    if (have && now - rec.confirmed_ns < remote_revalidate_ns()) {
        *fid = rec.fid;
        return;
    }
    char *url = url_of(in, key);
    struct remote_obj o;
    struct errbuf err;
    int r = remote_request(url, NULL, true, have && rec.fid.exists ? rec.etag : NULL, 0, NULL, NULL,
                           &o, &err);
    free(url);
    memset(fid, 0, sizeof *fid);
    if (r == 0 && o.status == 304) {
        *fid = rec.fid;
        note(in, key, fid, rec.etag);
    } else if (r == 0) {
        fid_of(&o, fid);
        note(in, key, fid, o.etag);
    } else if (r == -ENOENT) {
        note(in, key, fid, NULL); /* "not there": a missing chunk */
    } else if (have && o.status == 0) {
        /* not reached: the identity last confirmed stands */
        *fid = rec.fid;
        remote_note_unconfirmed();
        log_debug("%s", err.msg);
    } else {
        /* a refusal (4xx): an identity no answer gives, the read will say why */
        fid->exists = true;
        fid->size = UINT64_MAX;
        fid->mtime_ns = hash64(now, key, strlen(key));
    }
}

int input_remote_read_file(const struct zarr_input *in, const char *key, uint64_t max, char **raw,
                           size_t *len, struct read_info *ri, struct errbuf *err)
{
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
