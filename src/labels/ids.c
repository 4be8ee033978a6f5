/* ids.c: label ids (docs/labels.md, How ids are numbered): configuration checks, validation of a
 * processor's values and the mappings of ids = unique and ids = sequential, over every integer
 * dtype. */
#include "ids.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config.h"

/* The largest value of an integer dtype. */
static uint64_t dtype_max(const struct dtype *dt)
{
    unsigned bits = dt->size * 8 - (dt->kind == DT_INT);
    return bits >= 64 ? UINT64_MAX : (1ULL << bits) - 1;
}

void labels_rules_of(const struct config *cfg, struct label_rules *out)
{
    *out = (struct label_rules){.on = cfg->labels,
                                .unique = cfg->label_ids == LABEL_IDS_UNIQUE,
                                .sequential = cfg->label_ids == LABEL_IDS_SEQUENTIAL,
                                .stitch = cfg->label_stitch == LABEL_STITCH_IOU,
                                .block = cfg->label_block,
                                .iou = cfg->stitch_iou};
}

int labels_check_config(const struct config *cfg, const struct dtype *out, size_t n_rois,
                        struct errbuf *err)
{
    if (!cfg->labels)
        return 0;
    char ts[8];
    if (out->kind != DT_INT && out->kind != DT_UINT)
        return config_error(cfg, err, "output", "dtype",
                            "[labels]: the output dtype %s is not an integer type (label ids "
                            "need one: set [output] dtype, e.g. <u4)",
                            dtype_typestr(out, ts));
    if (cfg->label_stitch == LABEL_STITCH_IOU && cfg->label_ids != LABEL_IDS_UNIQUE)
        return config_error(cfg, err, "labels", "stitch",
                            "[labels] stitch = iou needs ids = unique");
    if (cfg->label_ids != LABEL_IDS_UNIQUE)
        return 0;
    uint64_t top, max = dtype_max(out);
    bool over = __builtin_mul_overflow((uint64_t)(n_rois ? n_rois : 1), cfg->label_block, &top);
    if (!over && top - 1 <= max)
        return 0;
    char need[32];
    if (over)
        snprintf(need, sizeof need, "beyond 2^64");
    else
        snprintf(need, sizeof need, "up to %llu", (unsigned long long)(top - 1));
    /* the default block is refused at the line that asked for unique ids */
    const char *key = config_line(cfg, "labels", "block") ? "block" : "ids";
    return config_error(cfg, err, "labels", key,
                        "[labels] block: %llu ids for each of %zu ROIs need ids %s, more than "
                        "the output dtype %s holds (at most %llu); use a smaller block or a "
                        "wider dtype",
                        (unsigned long long)cfg->label_block, n_rois, need, dtype_typestr(out, ts),
                        (unsigned long long)max);
}

void labels_identity(const struct label_rules *lr, struct strbuf *sb)
{
    if (!lr->on)
        return;
    sb_printf(sb, "labels %s", lr->unique ? "unique" : lr->sequential ? "sequential" : "keep");
    if (lr->unique)
        sb_printf(sb, " block %llu", (unsigned long long)lr->block);
    if (lr->stitch) /* results come with their border strips */
        sb_printf(sb, " stitch");
    sb_printf(sb, "\n");
}

/* Element i of buf as a signed value (*neg) and magnitude. */
static uint64_t get(const struct dtype *dt, const void *buf, size_t i, bool *neg)
{
    uint64_t u = dtype_load_bits((const unsigned char *)buf + i * dt->size, dt->size);
    *neg = false;
    if (dt->kind == DT_INT) {
        int64_t s = dtype_sign_extend(u, dt->size);
        *neg = s < 0;
        return *neg ? 0 - (uint64_t)s : (uint64_t)s;
    }
    return u;
}

static void put(const struct dtype *dt, void *buf, size_t i, uint64_t v)
{
    dtype_store_bits((unsigned char *)buf + i * dt->size, dt->size, v);
}

uint64_t labels_get(const struct dtype *dt, const void *buf, size_t i)
{
    bool neg;
    uint64_t v = get(dt, buf, i, &neg);
    return neg ? 0 : v;
}

void labels_put(const struct dtype *dt, void *buf, size_t i, uint64_t v)
{
    put(dt, buf, i, v);
}

int labels_check_values(const struct label_rules *lr, const struct dtype *dt, const void *buf,
                        size_t n, struct errbuf *err)
{
    if (!lr->on)
        return 0;
    bool unique = lr->unique;
    for (size_t i = 0; i < n; i++) {
        bool neg;
        uint64_t v = get(dt, buf, i, &neg);
        if (neg)
            return err_set(err, -EINVAL,
                           "label value -%llu at element %zu of the result is negative (ids "
                           "are >= 0, 0 being background)",
                           (unsigned long long)v, i);
        if (unique && v >= lr->block)
            return err_set(err, -EINVAL,
                           "label value %llu at element %zu of the result is not below "
                           "[labels] block (%llu)",
                           (unsigned long long)v, i, (unsigned long long)lr->block);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

size_t labels_distinct(const struct dtype *dt, const void *buf, size_t n, uint64_t **vals)
{
    /* One pass collecting values, skipping runs of the same value (objects are runs). */
    size_t cap = 0, nv = 0;
    uint64_t *v = NULL, last = 0;
    for (size_t i = 0; i < n; i++) {
        bool neg;
        uint64_t x = get(dt, buf, i, &neg);
        if (x == 0 || x == last)
            continue;
        last = x;
        if (nv == cap) {
            cap = cap ? 2 * cap : 64;
            v = xrealloc(v, cap * sizeof *v);
        }
        v[nv++] = x;
    }
    if (nv)
        qsort(v, nv, sizeof *v, cmp_u64);
    size_t k = 0;
    for (size_t i = 0; i < nv; i++)
        if (k == 0 || v[k - 1] != v[i])
            v[k++] = v[i];
    *vals = v;
    return k;
}

/* Validated ids are non-negative: signed elements have the bits of the unsigned type of
 * their size, so the mappings work on unsigned elements. */
#define MAP_OFFSET(T)                                                                              \
    do {                                                                                           \
        T *p = buf;                                                                                \
        T add = (T)base;                                                                           \
        for (size_t i = 0; i < n; i++)                                                             \
            p[i] = p[i] ? (T)(p[i] + add) : 0;                                                     \
    } while (0)

void labels_map_offset(const struct dtype *dt, void *buf, size_t n, uint64_t base)
{
    switch (dt->size) {
    case 1:
        MAP_OFFSET(uint8_t);
        break;
    case 2:
        MAP_OFFSET(uint16_t);
        break;
    case 4:
        MAP_OFFSET(uint32_t);
        break;
    default:
        MAP_OFFSET(uint64_t);
        break;
    }
}

void labels_map_rank(const struct dtype *dt, void *buf, size_t n, uint64_t base,
                     const uint64_t *vals, size_t nv)
{
    uint64_t last = 0, last_id = 0;
    for (size_t i = 0; i < n; i++) {
        bool neg;
        uint64_t x = get(dt, buf, i, &neg);
        if (x == 0)
            continue;
        if (x != last) {
            size_t lo = 0, hi = nv;
            while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (vals[mid] < x)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            last = x;
            last_id = base + lo + 1;
        }
        put(dt, buf, i, last_id);
    }
}
