/* stitch.c: the engine's side of stitch = iou (SPEC §9). Each ROI's result comes with a strip
 * record: its values in the zones where its read region overlaps other ROIs' (halo included),
 * stored beside the result. The global pass is exactly once across processes: under the lock
 * of the mapping's key (every ROI's result key and the threshold), after a fresh look in the
 * store, it makes sure every ROI is done, then walks the pairs of overlapping ROIs holding two
 * strip records at a time, and stores the id mapping as one more verified record. Each
 * process keeps the mapping in memory: later chunks only look ids up. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../labels/stitch.h"
#include "../nd.h"
#include "engine_internal.h"
#include "compute.h"
#include "label_rules.h"
#include "stitch.h"
#include "strips.h"
#include "../cache/cache.h"

struct stitch_state {
    pthread_mutex_t lock;
    bool known;
    struct key128 key;
    uint64_t *pairs;
    size_t n;
};

/* ROI r's strip record (elements of the output dtype), computing r again when the record
 * went missing (a compaction dropped it). NULL with err on failure. */
static void *load_strips(struct engine *e, uint32_t r, struct key128 k, uint64_t total,
                         struct errbuf *err)
{
    struct store *st = cache_store(e->f.c);
    size_t len = total * e->f.t->out.dtype.size;
    void *buf = xmalloc(len ? len : 1);
    for (int attempt = 0; attempt < 2; attempt++) {
        if (engine_roi_ensure(e, r, &k, attempt > 0, err) < 0)
            break;
        struct key128 sk = engine_stitch_strips_key(k); /* k: what r is made from */
        store_refresh(st);
        if (store_get(st, sk, buf, len) == 0)
            return buf;
        err_set(err, -EIO, "roi %u: its stitching strips are not stored", r);
    }
    free(buf);
    return NULL;
}

/* Overlapping read regions: ROI r's neighbours nbr[first[r] .. first[r + 1]) in ascending
 * order, each with the offset of its zone in r's strip record (elements); total[r]. */
struct adjacency {
    size_t *first;
    uint32_t *nbr;
    uint64_t *off, *total;
};

static void adjacency_build(const struct task *t, struct adjacency *a)
{
    size_t n = t->rois.n, cap = 16, k = 0;
    int nd = t->rois.ndim;
    /* every read region once: the pairs are tested with plain comparisons (n^2 of them) */
    uint64_t *lo = xmalloc((n ? n : 1) * (size_t)nd * sizeof *lo);
    uint64_t *hi = xmalloc((n ? n : 1) * (size_t)nd * sizeof *hi);
    for (size_t r = 0; r < n; r++) {
        uint64_t sh[ROIFS_MAX_DIM];
        roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, &lo[r * nd], sh);
        for (int d = 0; d < nd; d++)
            hi[r * nd + d] = lo[r * nd + d] + sh[d];
    }
    a->first = xmalloc((n + 1) * sizeof *a->first);
    a->total = xcalloc(n ? n : 1, sizeof *a->total);
    a->nbr = xmalloc(cap * sizeof *a->nbr);
    a->off = xmalloc(cap * sizeof *a->off);
    for (uint32_t r = 0; r < n; r++) {
        a->first[r] = k;
        for (uint32_t q = 0; q < n; q++) {
            uint64_t elems = 1;
            for (int d = 0; d < nd && elems; d++) {
                uint64_t z0 = lo[r * nd + d] > lo[q * nd + d] ? lo[r * nd + d] : lo[q * nd + d];
                uint64_t z1 = hi[r * nd + d] < hi[q * nd + d] ? hi[r * nd + d] : hi[q * nd + d];
                elems = z1 > z0 ? elems * (z1 - z0) : 0;
            }
            if (q == r || elems == 0)
                continue;
            if (k == cap) {
                cap *= 2;
                a->nbr = xrealloc(a->nbr, cap * sizeof *a->nbr);
                a->off = xrealloc(a->off, cap * sizeof *a->off);
            }
            a->nbr[k] = q;
            a->off[k++] = a->total[r];
            a->total[r] += elems;
        }
    }
    a->first[n] = k;
    free(lo);
    free(hi);
}

static void adjacency_free(struct adjacency *a)
{
    free(a->first);
    free(a->nbr);
    free(a->off);
    free(a->total);
}

/* Offset of s's zone in r's record (s is a neighbour of r). */
static uint64_t adjacency_off(const struct adjacency *a, uint32_t r, uint32_t s)
{
    for (size_t i = a->first[r]; i < a->first[r + 1]; i++)
        if (a->nbr[i] == s)
            return a->off[i];
    return 0;
}

/* The global pass: every pair of ROIs whose read regions overlap, two strip records at a
 * time. Returns the mapping record (npairs, then the pairs) or NULL with err; keys[s] is then
 * the key of the result of s that was used (engine_labels_ensure). */
static uint64_t *global_pass(struct engine *e, struct key128 *keys, size_t *len, double *rois_s,
                             struct errbuf *err)
{
    double t0 = now_monotonic();
    const struct task *t = e->f.t;
    int nd = t->rois.ndim;
    size_t isz = t->out.dtype.size;
    int rc = 0;
    for (uint32_t s = 0; s < t->rois.n && rc == 0; s++) /* every ROI first: each once */
        rc = engine_roi_ensure(e, s, &keys[s], false, err);
    *rois_s = now_monotonic() - t0;
    if (rc < 0)
        return NULL;
    struct adjacency adj;
    adjacency_build(t, &adj);
    struct stitch_uf *uf = stitch_uf_new();
    for (uint32_t r = 0; r < t->rois.n && rc == 0; r++) {
        unsigned char *ra = NULL;
        for (size_t i = adj.first[r]; i < adj.first[r + 1] && rc == 0; i++) {
            uint32_t s = adj.nbr[i];
            uint64_t z0[ROIFS_MAX_DIM], z1[ROIFS_MAX_DIM];
            if (s < r || !engine_stitch_zone(t, r, s, z0, z1))
                continue;
            if (!ra && !(ra = load_strips(e, r, keys[r], adj.total[r], err))) {
                rc = -EIO;
                break;
            }
            unsigned char *sb = load_strips(e, s, keys[s], adj.total[s], err);
            if (!sb) {
                rc = -EIO;
                break;
            }
            stitch_zone(&t->out.dtype, ra + adj.off[i] * isz, sb + adjacency_off(&adj, s, r) * isz,
                        engine_stitch_zone_elems(nd, z0, z1), engine_labels_iou(t),
                        (uint64_t)r * engine_labels_block(t), (uint64_t)s * engine_labels_block(t),
                        uf);
            free(sb);
        }
        free(ra);
    }
    adjacency_free(&adj);
    uint64_t *rec = NULL;
    if (rc == 0) {
        size_t n;
        uint64_t *pairs = stitch_uf_mapping(uf, &n);
        rec = xmalloc((1 + 2 * n) * sizeof *rec);
        rec[0] = n;
        if (n)
            memcpy(rec + 1, pairs, 2 * n * sizeof *rec);
        free(pairs);
        *len = (1 + 2 * n) * sizeof *rec;
    }
    stitch_uf_free(uf);
    return rec;
}

/* The mapping named mk: from the store, or made by the global pass and stored, under mk's
 * lock (so made once, whichever process or thread comes first). */
static uint64_t *mapping_for(struct engine *e, struct key128 mk, size_t *len, struct errbuf *err)
{
    struct store *st = cache_store(e->f.c);
    const struct task *t = e->f.t;
    int lock = cache_lock_result(e->f.c, mk);
    if (lock < 0)
        log_warn("stitching: cannot take the mapping's lock (%s); making it unlocked",
                 strerror(-lock));
    store_refresh(st);
    struct store_info info;
    uint64_t *rec = NULL;
    if (store_lookup(st, mk, &info) && info.raw_len >= 8 && info.raw_len % 16 == 8) {
        rec = xmalloc(info.raw_len);
        *len = info.raw_len;
        if (store_get(st, mk, rec, info.raw_len) != 0 || rec[0] * 16 + 8 != info.raw_len) {
            free(rec);
            rec = NULL;
        }
    }
    if (!rec) {
        struct key128 *keys = xmalloc((t->rois.n ? t->rois.n : 1) * sizeof *keys);
        struct zarr_sigmemo *memo = zarr_sigmemo_new();
        for (uint32_t s = 0; s < t->rois.n; s++)
            keys[s] = engine_roi_key(t, s, engine_roi_sig_now(t, s, memo));
        zarr_sigmemo_free(memo);
        double t0 = now_monotonic(), rois_s = 0;
        rec = global_pass(e, keys, len, &rois_s, err);
        free(keys);
        if (rec) {
            log_info("stitching: %llu objects merged into others across %zu ROIs (zones %.2f s, "
                     "after %.2f s making sure every ROI is done)",
                     (unsigned long long)rec[0], t->rois.n, now_monotonic() - t0 - rois_s, rois_s);
            struct errbuf serr = {{0}};
            if (store_put(st, mk, rec, *len, 8, &serr) < 0)
                log_error("stitching: cannot store the id mapping: %s", serr.msg);
        }
    }
    cache_unlock(e->f.c, lock);
    return rec;
}

static struct stitch_state *state_of(struct engine *e)
{
    pthread_mutex_lock(&e->lock);
    if (!e->s.stitch) {
        e->s.stitch = xcalloc(1, sizeof *e->s.stitch);
        pthread_mutex_init(&e->s.stitch->lock, NULL);
    }
    pthread_mutex_unlock(&e->lock);
    return e->s.stitch;
}

int engine_stitch_mapping(struct engine *e, const uint64_t **pairs, size_t *n, struct errbuf *err)
{
    struct stitch_state *ss = state_of(e);
    struct zarr_sigmemo *memo = zarr_sigmemo_new();
    struct key128 mk = engine_stitch_map_key(e->f.t, memo);
    zarr_sigmemo_free(memo);
    /* one thread of this process makes or loads it; the others wait for that */
    pthread_mutex_lock(&ss->lock);
    if (!ss->known || !key_eq(ss->key, mk)) {
        size_t len = 0;
        uint64_t *rec = mapping_for(e, mk, &len, err);
        if (!rec) {
            pthread_mutex_unlock(&ss->lock);
            return -EIO;
        }
        free(ss->pairs);
        ss->n = rec[0];
        ss->pairs = xmalloc((2 * ss->n + 1) * sizeof *ss->pairs);
        memcpy(ss->pairs, rec + 1, 2 * ss->n * sizeof *ss->pairs);
        free(rec);
        ss->key = mk;
        ss->known = true;
    }
    /* a copy: another thread may replace the mapping after an input change */
    uint64_t *copy = xmalloc((2 * ss->n + 1) * sizeof *copy);
    memcpy(copy, ss->pairs, 2 * ss->n * sizeof *copy);
    *pairs = copy;
    *n = ss->n;
    pthread_mutex_unlock(&ss->lock);
    return 0;
}

void engine_stitch_free(struct engine *e)
{
    if (!e->s.stitch)
        return;
    pthread_mutex_destroy(&e->s.stitch->lock);
    free(e->s.stitch->pairs);
    free(e->s.stitch);
    e->s.stitch = NULL;
}
