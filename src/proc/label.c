/* label.c: connected components of `in > value` (scipy.ndimage.label, default structure) by
 * union-find over runs of foreground along the innermost axis, in one raster pass. */
#include "label.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../nd.h"

/* A maximal run [start, end) of foreground in one line, with its provisional label. Runs
 * rather than pixels carry the labels: blobs have few runs per line, so merging, flattening
 * and writing the output touch runs, and the input is read exactly once. */
struct label_run {
    uint32_t start, end, label;
};

/* ---- the threshold ---- */

int label_value_parse(const char *text, struct label_value *out)
{
    memset(out, 0, sizeof *out);
    if (parse_double(text, &out->real) < 0)
        return -EINVAL;
    const char *s = text;
    while (*s == ' ' || *s == '\t')
        s++;
    bool negative = *s == '-';
    if (*s == '-' || *s == '+')
        s++;
    const char *digits = s;
    while (*s >= '0' && *s <= '9')
        s++;
    const char *end = s;
    while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
        s++;
    if (end == digits || *s)
        return 0; /* not a plain decimal integer: compared through `real` */
    uint64_t mag = 0;
    for (const char *d = digits; d < end; d++) {
        unsigned digit = (unsigned)(*d - '0');
        if (mag > (UINT64_MAX - digit) / 10)
            return 0; /* beyond 64 bits: as a double it is beyond every integer type too */
        mag = mag * 10 + digit;
    }
    out->integral = true;
    out->negative = negative && mag != 0;
    out->mag = mag;
    return 0;
}

enum cut_mode { CUT_NONE, CUT_ALL, CUT_CMP };

/* `in > value` in the input's type: integers against floor(value), exactly; floats against
 * value cast to their type (as numpy does for a Python scalar); float16 through an order key. */
struct cut {
    enum cut_mode mode;
    int64_t s;  /* signed integer inputs */
    uint64_t u; /* unsigned integer inputs */
    float f;
    double d;
    int32_t half_key;
};

/* floor(value) as a sign and magnitude; *beyond: |floor(value)| >= 2^64. false for NaN. */
static bool value_floor(const struct label_value *v, bool *negative, uint64_t *mag, bool *beyond)
{
    *beyond = false;
    if (v->integral) {
        *negative = v->negative;
        *mag = v->mag;
        return true;
    }
    if (isnan(v->real))
        return false;
    double fl = floor(v->real);
    *negative = fl < 0;
    if (fabs(fl) >= 18446744073709551616.0) {
        *beyond = true;
        *mag = UINT64_MAX;
    } else {
        *mag = (uint64_t)fabs(fl);
    }
    return true;
}

/* For integers x: x > value <=> x > floor(value). */
static void cut_integer(const struct label_value *v, const struct dtype *dt, struct cut *c)
{
    bool negative, beyond;
    uint64_t mag;
    if (!value_floor(v, &negative, &mag, &beyond)) {
        c->mode = CUT_NONE;
        return;
    }
    unsigned bits = 8 * dt->size;
    if (dt->kind == DT_UINT) {
        uint64_t max = bits == 64 ? UINT64_MAX : (1ULL << bits) - 1;
        c->mode = negative ? CUT_ALL : (beyond || mag >= max) ? CUT_NONE : CUT_CMP;
        c->u = mag;
        return;
    }
    uint64_t lim = 1ULL << (bits - 1); /* -min, and max + 1 */
    if (negative) {
        c->mode = beyond || mag > lim ? CUT_ALL : CUT_CMP;
        c->s = mag == lim ? -(int64_t)(lim - 1) - 1 : -(int64_t)mag;
    } else {
        c->mode = beyond || mag >= lim - 1 ? CUT_NONE : CUT_CMP;
        c->s = (int64_t)mag;
    }
}

/* Sign-magnitude bits of a non-NaN float16 -> an int that orders like the value (+0 == -0). */
static inline int32_t half_key(uint16_t h)
{
    int32_t a = h & 0x7fff;
    return (h & 0x8000) ? -a : a;
}

/* numpy's float32(value): round to nearest even, overflowing to infinity past FLT_MAX plus
 * half an ulp (a C cast of such a double would be undefined). */
static float float_of(double d)
{
    if (d >= 0x1.ffffffp127)
        return INFINITY;
    if (d <= -0x1.ffffffp127)
        return -INFINITY;
    if (d > FLT_MAX)
        return FLT_MAX;
    if (d < -FLT_MAX)
        return -FLT_MAX;
    return (float)d;
}

static void cut_make(const struct label_value *v, const struct dtype *dt, struct cut *c)
{
    memset(c, 0, sizeof *c);
    c->mode = CUT_CMP;
    switch (dt->kind) {
    case DT_BOOL: /* x is 0 or 1 */
        c->mode = 0 > v->real ? CUT_ALL : 1 > v->real ? CUT_CMP : CUT_NONE;
        return;
    case DT_INT:
    case DT_UINT:
        cut_integer(v, dt, c);
        return;
    case DT_FLOAT:
        if (isnan(v->real)) {
            c->mode = CUT_NONE;
        } else if (dt->size == 8) {
            c->d = v->real;
        } else if (dt->size == 4) {
            c->f = float_of(v->real);
        } else {
            const struct dtype half = {DT_FLOAT, 2, false};
            uint16_t h;
            dtype_from_double(&half, &v->real, &h, 1);
            c->half_key = half_key(h);
        }
        return;
    }
}

/* ---- one line of the mask ---- */

/* Loads through memcpy: the block need not be aligned. Fixed-length inner blocks let gcc -O2
 * (whose cheap cost model refuses loops that need a scalar epilogue) vectorise the compare. */
#define MASK_BLOCK 64
#define MASK_LOOP(T, TEST)                                                                         \
    do {                                                                                           \
        size_t i = 0;                                                                              \
        for (; i + MASK_BLOCK <= w; i += MASK_BLOCK)                                               \
            for (size_t j = i; j < i + MASK_BLOCK; j++) {                                          \
                T x;                                                                               \
                memcpy(&x, src + j * sizeof x, sizeof x);                                          \
                m[j] = (uint8_t)(TEST);                                                            \
            }                                                                                      \
        for (; i < w; i++) {                                                                       \
            T x;                                                                                   \
            memcpy(&x, src + i * sizeof x, sizeof x);                                              \
            m[i] = (uint8_t)(TEST);                                                                \
        }                                                                                          \
    } while (0)

/* Not inlined: inside its caller gcc loses `restrict` and then refuses to vectorise. */
__attribute__((noinline)) static void mask_line(const struct cut *c, const struct dtype *dt,
                                                const unsigned char *restrict src, size_t w,
                                                uint8_t *restrict m)
{
    if (c->mode == CUT_ALL) {
        memset(m, 1, w);
        return;
    }
    /* In CUT_CMP mode the threshold lies within the input type's range. */
    uint8_t u1 = (uint8_t)c->u;
    uint16_t u2 = (uint16_t)c->u;
    uint32_t u4 = (uint32_t)c->u;
    uint64_t u8 = c->u;
    int8_t s1 = (int8_t)c->s;
    int16_t s2 = (int16_t)c->s;
    int32_t s4 = (int32_t)c->s;
    int64_t s8 = c->s;
    float f = c->f;
    double d = c->d;
    int32_t hk = c->half_key;
    switch (dt->kind * 16 + dt->size) {
    case DT_BOOL * 16 + 1:
        MASK_LOOP(uint8_t, x != 0);
        break;
    case DT_UINT * 16 + 1:
        MASK_LOOP(uint8_t, x > u1);
        break;
    case DT_UINT * 16 + 2:
        MASK_LOOP(uint16_t, x > u2);
        break;
    case DT_UINT * 16 + 4:
        MASK_LOOP(uint32_t, x > u4);
        break;
    case DT_UINT * 16 + 8:
        MASK_LOOP(uint64_t, x > u8);
        break;
    case DT_INT * 16 + 1:
        MASK_LOOP(int8_t, x > s1);
        break;
    case DT_INT * 16 + 2:
        MASK_LOOP(int16_t, x > s2);
        break;
    case DT_INT * 16 + 4:
        MASK_LOOP(int32_t, x > s4);
        break;
    case DT_INT * 16 + 8:
        MASK_LOOP(int64_t, x > s8);
        break;
    case DT_FLOAT * 16 + 2:
        MASK_LOOP(uint16_t, (x & 0x7fff) <= 0x7c00 && half_key(x) > hk);
        break;
    case DT_FLOAT * 16 + 4:
        MASK_LOOP(float, x > f);
        break;
    default:
        MASK_LOOP(double, x > d);
        break;
    }
}

/* ---- scratch ---- */

void label_scratch_free(struct label_scratch *s)
{
    free(s->runs);
    free(s->line_first);
    free(s->parent);
    free(s->mask);
    memset(s, 0, sizeof *s);
}

/* Grows *buf to hold at least `need` elements of `size` bytes, doubling. 0 or -ENOMEM. */
static int reserve(void **buf, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 1024;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : 2 * n;
    if (n > SIZE_MAX / size)
        return -ENOMEM;
    void *p = realloc(*buf, n * size);
    if (!p)
        return -ENOMEM;
    *buf = p;
    *cap = n;
    return 0;
}

/* ---- union-find: the root of a set is its smallest label ---- */

static inline uint32_t uf_find(uint32_t *parent, uint32_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]]; /* path halving */
        x = parent[x];
    }
    return x;
}

/* Joins the sets of a and b; returns the root of the union. The smaller root wins, so that a
 * set's root stays its first label in raster order, which is its first element's. */
static inline uint32_t uf_unite(uint32_t *parent, uint32_t a, uint32_t b)
{
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a == b)
        return a;
    if (a < b) {
        parent[b] = a;
        return a;
    }
    parent[a] = b;
    return b;
}

/* ---- pass 1: runs and their equivalences ---- */

/* The block with its length-1 axes dropped (they connect nothing): ns axes of shape sh. */
struct geom {
    int ns;
    uint64_t sh[ROIFS_MAX_DIM];
    size_t w, lines;
    size_t line_stride[ROIFS_MAX_DIM]; /* in lines, for the axes before the innermost */
};

/* Appends the runs of mask line m (width w) to s->runs[*nruns ..]. 0 or -ENOMEM. */
static int find_runs(struct label_scratch *s, const uint8_t *m, size_t w, size_t *nruns)
{
    const uint64_t ones = 0x0101010101010101ULL;
    size_t x = 0, k = *nruns;
    while (x < w) {
        uint64_t word;
        while (x + 8 <= w && (memcpy(&word, m + x, 8), word == 0))
            x += 8;
        while (x < w && !m[x])
            x++;
        if (x == w)
            break;
        size_t start = x;
        while (x + 8 <= w && (memcpy(&word, m + x, 8), word == ones))
            x += 8;
        while (x < w && m[x])
            x++;
        if (k == s->runs_cap && reserve((void **)&s->runs, &s->runs_cap, k + 1, sizeof *s->runs))
            return -ENOMEM;
        s->runs[k++] = (struct label_run){(uint32_t)start, (uint32_t)x, 0};
    }
    *nruns = k;
    return 0;
}

/* Gives each run of line `li` (runs[first .. last)) a label: that of the runs it touches in the
 * lines before it along each axis (uniting them), or a new one. */
static int merge_line(struct label_scratch *s, const struct geom *g, const uint64_t *coord,
                      size_t li, size_t first, size_t last, uint32_t *nlabels)
{
    struct label_run *runs = s->runs;
    size_t nb_pos[ROIFS_MAX_DIM], nb_end[ROIFS_MAX_DIM];
    int nn = 0;
    for (int d = 0; d + 1 < g->ns; d++)
        if (coord[d] > 0) {
            size_t nli = li - g->line_stride[d];
            nb_pos[nn] = s->line_first[nli];
            nb_end[nn++] = s->line_first[nli + 1];
        }
    for (size_t r = first; r < last; r++) {
        uint32_t label = 0, a = runs[r].start, b = runs[r].end;
        for (int k = 0; k < nn; k++) {
            size_t j = nb_pos[k];
            while (j < nb_end[k] && runs[j].end <= a)
                j++;
            nb_pos[k] = j; /* the next run of this line starts past a */
            for (; j < nb_end[k] && runs[j].start < b; j++) {
                uint32_t other = runs[j].label;
                label = !label ? other : label == other ? label : uf_unite(s->parent, label, other);
            }
        }
        if (!label) {
            if (*nlabels == UINT32_MAX - 1)
                return -EFBIG;
            label = ++*nlabels;
            if (label >= s->parent_cap &&
                reserve((void **)&s->parent, &s->parent_cap, (size_t)label + 1, sizeof *s->parent))
                return -ENOMEM;
            s->parent[label] = label;
        }
        runs[r].label = label;
    }
    return 0;
}

static int label_pass1(struct label_scratch *s, const struct geom *g, const unsigned char *in,
                       const struct dtype *dt, const struct cut *c, uint32_t *nlabels,
                       struct errbuf *err)
{
    *nlabels = 0;
    if (reserve((void **)&s->line_first, &s->lines_cap, g->lines + 1, sizeof *s->line_first) ||
        reserve((void **)&s->mask, &s->mask_cap, g->w, 1) ||
        reserve((void **)&s->parent, &s->parent_cap, 1, sizeof *s->parent))
        return err_set(err, -ENOMEM, "label: out of memory for a block of %zu lines", g->lines);
    s->parent[0] = 0;
    uint64_t coord[ROIFS_MAX_DIM] = {0};
    size_t nruns = 0, row_bytes = g->w * dt->size;
    for (size_t li = 0; li < g->lines; li++) {
        mask_line(c, dt, in + li * row_bytes, g->w, s->mask);
        s->line_first[li] = nruns;
        int rc = find_runs(s, s->mask, g->w, &nruns);
        if (!rc)
            rc = merge_line(s, g, coord, li, s->line_first[li], nruns, nlabels);
        if (rc == -EFBIG)
            return err_set(err, rc, "label: more than %u provisional labels in one block",
                           UINT32_MAX - 1);
        if (rc)
            return err_set(err, rc, "label: out of memory after %zu runs", nruns);
        nd_next_index(coord, NULL, g->sh, g->ns - 1);
    }
    s->line_first[g->lines] = nruns;
    return 0;
}

/* ---- pass 2: final ids in C order of first element, and the output ---- */

/* Replaces parent[l] by l's final id. Every parent is smaller than its child, so in increasing
 * order a label's parent already holds its final id; roots, met in the order of their first
 * element, take 1, 2, ... Returns the number of objects. */
static uint32_t flatten(uint32_t *parent, uint32_t nlabels)
{
    uint32_t count = 0;
    for (uint32_t l = 1; l <= nlabels; l++)
        parent[l] = parent[l] == l ? ++count : parent[parent[l]];
    return count;
}

uint64_t label_max_id(const struct dtype *dt)
{
    switch (dt->kind) {
    case DT_BOOL:
        return 1;
    case DT_UINT:
        return dt->size == 8 ? UINT64_MAX : (1ULL << (8 * dt->size)) - 1;
    case DT_INT:
        return (1ULL << (8 * dt->size - 1)) - 1;
    case DT_FLOAT:
        return dt->size == 2 ? 1ULL << 11 : dt->size == 4 ? 1ULL << 24 : 1ULL << 53;
    }
    return 0;
}

/* The bit pattern of id as one element of dt (id fits dt exactly). */
static uint64_t id_bits(const struct dtype *dt, uint32_t id)
{
    if (dt->kind != DT_FLOAT)
        return id;
    if (dt->size == 8) {
        double v = id;
        uint64_t b;
        memcpy(&b, &v, sizeof b);
        return b;
    }
    if (dt->size == 4) {
        float v = (float)id;
        uint32_t b;
        memcpy(&b, &v, sizeof b);
        return b;
    }
    double v = id;
    uint16_t h;
    dtype_from_double(dt, &v, &h, 1);
    return h;
}

#define FILL_LOOP(T)                                                                               \
    do {                                                                                           \
        T v = (T)bits;                                                                             \
        for (size_t i = 0; i < n; i++)                                                             \
            memcpy(dst + i * sizeof v, &v, sizeof v);                                              \
    } while (0)

static void fill(unsigned char *dst, size_t n, unsigned size, uint64_t bits)
{
    switch (size) {
    case 1:
        memset(dst, (int)(uint8_t)bits, n);
        break;
    case 2:
        FILL_LOOP(uint16_t);
        break;
    case 4:
        FILL_LOOP(uint32_t);
        break;
    default:
        FILL_LOOP(uint64_t);
        break;
    }
}

/* Writes every line: zeros between runs, each run its final id. */
static void label_pass2(const struct label_scratch *s, const struct geom *g,
                        const struct dtype *odt, unsigned char *out)
{
    unsigned osz = odt->size;
    for (size_t li = 0; li < g->lines; li++) {
        unsigned char *row = out + li * g->w * osz;
        size_t x = 0;
        uint32_t prev_label = 0;
        uint64_t bits = 0;
        for (size_t r = s->line_first[li]; r < s->line_first[li + 1]; r++) {
            const struct label_run *run = &s->runs[r];
            memset(row + x * osz, 0, (run->start - x) * osz);
            if (run->label != prev_label) {
                prev_label = run->label;
                bits = id_bits(odt, s->parent[run->label]);
            }
            fill(row + (size_t)run->start * osz, run->end - run->start, osz, bits);
            x = run->end;
        }
        memset(row + x * osz, 0, (g->w - x) * osz);
    }
}

/* ---- entry ---- */

static int geom_make(const struct label_block *blk, struct geom *g, size_t *n, struct errbuf *err)
{
    memset(g, 0, sizeof *g);
    *n = 1;
    for (int d = 0; d < blk->ndim; d++) {
        if (blk->shape[d] == 0) {
            *n = 0;
            return 0;
        }
        if (__builtin_mul_overflow(*n, (size_t)blk->shape[d], n))
            return err_set(err, -EFBIG, "label: a block of more than %zu elements", SIZE_MAX);
        if (blk->shape[d] > 1)
            g->sh[g->ns++] = blk->shape[d];
    }
    if (g->ns == 0)
        g->sh[g->ns++] = 1;
    g->w = (size_t)g->sh[g->ns - 1];
    if (g->w > UINT32_MAX)
        return err_set(err, -EFBIG, "label: an innermost axis of %zu elements (at most %u)", g->w,
                       UINT32_MAX);
    g->lines = *n / g->w;
    size_t stride = 1;
    for (int d = g->ns - 2; d >= 0; d--) {
        g->line_stride[d] = stride;
        stride *= (size_t)g->sh[d];
    }
    return 0;
}

int label_run(const struct label_block *blk, const void *in, const struct label_value *value,
              const struct dtype *out_dtype, void *out, struct label_scratch *scratch,
              size_t *count, struct errbuf *err)
{
    if (count)
        *count = 0;
    if (blk->ndim < 1 || blk->ndim > ROIFS_MAX_DIM)
        return err_set(err, -EINVAL, "label: %d dimensions (1 to %d)", blk->ndim, ROIFS_MAX_DIM);
    struct geom g;
    size_t n;
    int rc = geom_make(blk, &g, &n, err);
    if (rc || n == 0)
        return rc;
    struct cut c;
    cut_make(value, &blk->dtype, &c);
    if (c.mode == CUT_NONE) {
        memset(out, 0, n * out_dtype->size);
        return 0;
    }
    struct label_scratch own = {0}, *s = scratch ? scratch : &own;
    uint32_t nlabels;
    rc = label_pass1(s, &g, in, &blk->dtype, &c, &nlabels, err);
    if (!rc) {
        uint32_t objects = flatten(s->parent, nlabels);
        if (objects > label_max_id(out_dtype))
            rc = err_set(err, -EOVERFLOW,
                         "label: %u objects do not fit the output dtype %s (ids up to %llu)",
                         objects, dtype_v3_name(out_dtype),
                         (unsigned long long)label_max_id(out_dtype));
        else
            label_pass2(s, &g, out_dtype, out);
        if (count && !rc)
            *count = objects;
    }
    if (!scratch)
        label_scratch_free(&own);
    return rc;
}
