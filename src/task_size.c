/* task_size.c: the size checks of a configured task (task_size.h). */
#include "task_size.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

#include "config.h"
#include "roi.h"
#include "util.h"

/* "FILE:LINE: message" with the line of section.key (config_error); returns -EINVAL. */
#define TASK_ERR(t, err, section, key, ...)                                                        \
    return config_error(&(t)->cfg, err, section, key, __VA_ARGS__)

/* A decoded output chunk (a shard with `shard`): the engine assembles whole chunks in memory,
 * and blosc compresses at most 2 GiB; the same limit as for input chunks. */
#define TASK_MAX_CHUNK_BYTES ((uint64_t)INT_MAX - 16)

static void shape_text(const uint64_t *v, int n, char *buf, size_t len)
{
    size_t k = 0;
    buf[0] = '\0';
    for (int d = 0; d < n && k < len; d++)
        k += (size_t)snprintf(buf + k, len - k, "%s%llu", d ? "x" : "", (unsigned long long)v[d]);
}

int task_check_chunk_bytes(struct task *t, struct errbuf *err)
{
    const struct zarr_meta *o = &t->out;
    uint64_t n = o->dtype.size;
    bool over = false;
    for (int d = 0; d < o->ndim; d++)
        over = over || __builtin_mul_overflow(n, o->chunks[d], &n);
    if (!over && n <= TASK_MAX_CHUNK_BYTES)
        return 0;
    /* the chunks come from the input when not configured: then the wider dtype is to blame */
    const char *key = t->cfg.shard_ndim ? "shard" : t->cfg.chunks_ndim ? "chunks" : "dtype";
    char shape[400], bytes[48];
    shape_text(o->chunks, o->ndim, shape, sizeof shape);
    if (over)
        snprintf(bytes, sizeof bytes, "more than 2^64");
    else
        snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)n);
    TASK_ERR(t, err, "output", key,
             "[output] %s: a chunk of %s elements of %u bytes (%s bytes) is larger than the "
             "2 GiB a chunk may have",
             key, shape, (unsigned)o->dtype.size, bytes);
}

/* Bytes ROI r needs at once: its read region in the input and the output dtype, and its box. */
static bool roi_bytes(const struct task *t, size_t r, uint64_t *bytes, bool *box_fits)
{
    int nd = t->rois.ndim;
    uint64_t rstart[ROIFS_MAX_DIM], rshape[ROIFS_MAX_DIM], n = 1, box = 1, a, b;
    roi_read_region(&t->rois, r, t->halo, t->in_meta->shape, rstart, rshape);
    bool over = false, box_over = false;
    for (int d = 0; d < nd; d++) {
        over = over || __builtin_mul_overflow(n, rshape[d], &n);
        box_over = box_over || __builtin_mul_overflow(
                                   box, t->rois.stop[r * nd + d] - t->rois.start[r * nd + d], &box);
    }
    box_over = box_over || __builtin_mul_overflow(box, t->out.dtype.size, &b);
    over = over || box_over ||
           __builtin_mul_overflow(n, (uint64_t)t->in_meta->dtype.size + t->out.dtype.size, &a) ||
           __builtin_add_overflow(a, b, bytes);
    *box_fits = !box_over && b <= mem_physical_bytes() / 3;
    return !over;
}

/* A ROI's buffers must fit this machine's memory: one that cannot is refused with the key,
 * rather than aborting the daemon at its first read. */
int task_check_roi_bytes(struct task *t, struct errbuf *err)
{
    uint64_t limit = mem_physical_bytes(), bytes = 0;
    for (size_t r = 0; r < t->rois.n; r++) {
        bool box_fits, fits = roi_bytes(t, r, &bytes, &box_fits);
        if (fits && bytes <= limit)
            continue;
        /* a halo that makes a reasonable box too large is the halo's fault */
        const char *key = t->cfg.halo_ndim && box_fits
                              ? "halo"
                              : (t->cfg.rois_kind == ROIS_GRID    ? "grid"
                                 : t->cfg.rois_kind == ROIS_TABLE ? "table"
                                                                  : "file");
        char start[400], stop[400], need[48];
        shape_text(&t->rois.start[r * (size_t)t->rois.ndim], t->rois.ndim, start, sizeof start);
        shape_text(&t->rois.stop[r * (size_t)t->rois.ndim], t->rois.ndim, stop, sizeof stop);
        if (fits)
            snprintf(need, sizeof need, "%llu", (unsigned long long)bytes);
        else
            snprintf(need, sizeof need, "more than 2^64");
        TASK_ERR(t, err, "rois", key,
                 "[rois] %s: ROI %zu (start %s, stop %s) needs %s bytes of memory for its read "
                 "region, more than this machine has (%llu)",
                 key, r, start, stop, need, (unsigned long long)limit);
    }
    return 0;
}
