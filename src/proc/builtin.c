/* builtin.c: the builtin processors of docs/configuration.md, Builtin processors (copy, add,
 * multiply, threshold, gaussian, label), for demos, tests and benchmarks. Elementwise ops stream
 * through small blocks; gaussian works on the whole read region in double precision, matching
 * scipy.ndimage.gaussian_filter; label is label.c. */
#include "builtin_int.h"
#include "label.h"
#include "proc.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* OP_ADD, OP_MULTIPLY and OP_THRESHOLD in the order of enum builtin_int_op. */
enum builtin_op { OP_COPY, OP_ADD, OP_MULTIPLY, OP_THRESHOLD, OP_GAUSSIAN, OP_LABEL };

/* Elements converted per block: small enough to stay in cache, large enough to amortise. */
#define BLOCK_ELEMS 4096
/* Columns blurred together along a non-innermost axis, so rows are copied contiguously. */
#define GAUSS_COLS 64
/* Outputs computed together along the innermost axis. */
#define GAUSS_RUN 512
/* scipy's truncate = 4.0; larger sigmas would only build absurdly wide kernels. */
#define GAUSS_TRUNCATE 4.0
#define SIGMA_MAX      1e5

static const struct builtin_def {
    const char *name;
    enum builtin_op op;
    const char *param; /* the one parameter besides delay, or NULL */
    double def;
} builtin_defs[] = {
    {"copy", OP_COPY, NULL, 0},
    {"add", OP_ADD, "value", 1},
    {"multiply", OP_MULTIPLY, "value", 1},
    {"threshold", OP_THRESHOLD, "value", 0},
    {"gaussian", OP_GAUSSIAN, "sigma", 1},
    {"label", OP_LABEL, "value", 0},
};

struct builtin {
    struct proc base;
    enum builtin_op op;
    double value;
    struct label_value threshold; /* label: `value` as written, exact for 64-bit integers */
    double sigma[ROIFS_MAX_DIM];
    int nsigma; /* 1: the same for every axis */
    double delay;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC; broadcast at shutdown to cut delays short */
    bool stopping;
};

static int parse_param_number(const struct config *cfg, const struct config_param *pm,
                              const char *text, double *out, struct errbuf *err)
{
    if (parse_double(text, out) < 0)
        return err_at(err, -EINVAL, cfg->path, pm->line, "param.%s: '%s' is not a number", pm->name,
                      text);
    return 0;
}

static int parse_sigma(const struct config *cfg, const struct config_param *pm, struct builtin *b,
                       struct errbuf *err)
{
    char *copy = xstrdup(pm->value), *save = NULL;
    int rc = 0, n = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        double s;
        if (n == ROIFS_MAX_DIM)
            rc = err_at(err, -EINVAL, cfg->path, pm->line, "param.sigma: more than %d values",
                        ROIFS_MAX_DIM);
        else if (!(rc = parse_param_number(cfg, pm, tok, &s, err)) && !(s >= 0 && s <= SIGMA_MAX))
            rc = err_at(err, -EINVAL, cfg->path, pm->line,
                        "param.sigma: %s is not between 0 and %g", tok, SIGMA_MAX);
        else if (!rc)
            b->sigma[n++] = s;
    }
    if (!rc && n == 0)
        rc = err_at(err, -EINVAL, cfg->path, pm->line, "param.sigma: '%s' is not a number",
                    pm->value);
    free(copy);
    b->nsigma = n;
    return rc;
}

static int parse_params(const struct config *cfg, const struct builtin_def *def, struct builtin *b,
                        struct errbuf *err)
{
    for (int i = 0; i < cfg->nparams; i++) {
        const struct config_param *pm = &cfg->params[i];
        int rc;
        if (!strcmp(pm->name, "delay")) {
            rc = parse_param_number(cfg, pm, pm->value, &b->delay, err);
            if (!rc && !(b->delay >= 0 && b->delay < 1e9))
                rc = err_at(err, -EINVAL, cfg->path, pm->line,
                            "param.delay: %s is not a number of seconds", pm->value);
        } else if (def->param && !strcmp(pm->name, def->param) && def->op == OP_GAUSSIAN) {
            rc = parse_sigma(cfg, pm, b, err);
        } else if (def->param && !strcmp(pm->name, def->param)) {
            rc = parse_param_number(cfg, pm, pm->value, &b->value, err);
            if (!rc && def->op == OP_LABEL) /* accepts what parse_double accepts */
                (void)label_value_parse(pm->value, &b->threshold);
        } else {
            rc = err_at(err, -EINVAL, cfg->path, pm->line,
                        "param.%s: unknown parameter (builtin %s takes %s%sdelay)", pm->name,
                        def->name, def->param ? def->param : "only", def->param ? " and " : " ");
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- elementwise ops ---- */

static bool is_int64(const struct dtype *dt)
{
    return (dt->kind == DT_INT || dt->kind == DT_UINT) && dt->size == 8;
}

/* apply_double and apply_ldouble: the same elementwise op on n values of type T. */
#define DEFINE_APPLY(NAME, T)                                                                      \
    static void NAME(enum builtin_op op, T v, T *x, size_t n)                                      \
    {                                                                                              \
        switch (op) {                                                                              \
        case OP_ADD:                                                                               \
            for (size_t i = 0; i < n; i++)                                                         \
                x[i] += v;                                                                         \
            break;                                                                                 \
        case OP_MULTIPLY:                                                                          \
            for (size_t i = 0; i < n; i++)                                                         \
                x[i] *= v;                                                                         \
            break;                                                                                 \
        case OP_THRESHOLD:                                                                         \
            for (size_t i = 0; i < n; i++)                                                         \
                x[i] = x[i] > v ? (T)1 : (T)0;                                                     \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }
DEFINE_APPLY(apply_double, double)
DEFINE_APPLY(apply_ldouble, long double)

/* Converts through double, or long double when a 64-bit integer type is involved so that every
 * int64/uint64 value stays exact; integers of at most 32 bits take the integer fast path. */
static void run_elementwise(const struct builtin *b, const struct proc_request *rq, size_t n)
{
    const unsigned char *in = rq->in;
    unsigned char *out = rq->out;
    size_t isz = rq->in_dtype.size, osz = rq->out_dtype.size;
    if (builtin_int_run(b->op == OP_COPY ? BI_ADD : (enum builtin_int_op)(b->op - OP_ADD),
                        b->op == OP_COPY ? 0 : b->value, rq, n))
        return;
    if (is_int64(&rq->in_dtype) || is_int64(&rq->out_dtype)) {
        long double *buf = xmalloc(BLOCK_ELEMS * sizeof *buf);
        for (size_t off = 0; off < n; off += BLOCK_ELEMS) {
            size_t m = n - off < BLOCK_ELEMS ? n - off : BLOCK_ELEMS;
            dtype_to_ldouble(&rq->in_dtype, in + off * isz, buf, m);
            apply_ldouble(b->op, (long double)b->value, buf, m);
            dtype_from_ldouble(&rq->out_dtype, buf, out + off * osz, m);
        }
        free(buf);
        return;
    }
    double *buf = xmalloc(BLOCK_ELEMS * sizeof *buf);
    for (size_t off = 0; off < n; off += BLOCK_ELEMS) {
        size_t m = n - off < BLOCK_ELEMS ? n - off : BLOCK_ELEMS;
        dtype_to_double(&rq->in_dtype, in + off * isz, buf, m);
        apply_double(b->op, b->value, buf, m);
        dtype_from_double(&rq->out_dtype, buf, out + off * osz, m);
    }
    free(buf);
}

/* ---- gaussian ---- */

/* scipy.ndimage mode 'reflect' (d c b a | a b c d | d c b a), repeated for any offset. */
static size_t reflect_index(int64_t i, size_t len)
{
    int64_t period = 2 * (int64_t)len;
    int64_t m = i % period;
    if (m < 0)
        m += period;
    return (size_t)(m < (int64_t)len ? m : period - 1 - m);
}

/* Normalised half kernel w[0..radius] of exp(-x²/2σ²). */
static double *gauss_kernel(double sigma, size_t radius)
{
    double *w = xmalloc((radius + 1) * sizeof *w), sum = 0;
    for (size_t k = 0; k <= radius; k++) {
        w[k] = exp(-0.5 * (double)(k * k) / (sigma * sigma));
        sum += k ? 2 * w[k] : w[k];
    }
    for (size_t k = 0; k <= radius; k++)
        w[k] /= sum;
    return w;
}

/* One line of `padded` values with reflected margins, blurred into dst (len values). Taps are
 * the outer loop over short runs of outputs, so that the inner loop vectorises. */
static void blur_line(double *dst, const double *line, size_t len, const double *w, size_t radius)
{
    for (size_t j0 = 0; j0 < len; j0 += GAUSS_RUN) {
        size_t m = len - j0 < GAUSS_RUN ? len - j0 : GAUSS_RUN;
        double *out = dst + j0;
        const double *c = line + j0 + radius;
        for (size_t j = 0; j < m; j++)
            out[j] = w[0] * c[j];
        for (size_t k = 1; k <= radius; k++) {
            const double *lo = c - k, *hi = c + k;
            for (size_t j = 0; j < m; j++)
                out[j] += w[k] * (lo[j] + hi[j]);
        }
    }
}

/* g neighbouring columns, gathered row by row into buf, blurred into plane + i0. */
static void blur_columns(double *plane, size_t i0, size_t g, size_t len, size_t inner,
                         const double *buf, const double *w, size_t radius)
{
    for (size_t j = 0; j < len; j++) {
        double *dst = plane + j * inner + i0;
        const double *c = buf + (j + radius) * g;
        for (size_t q = 0; q < g; q++)
            dst[q] = w[0] * c[q];
        for (size_t k = 1; k <= radius; k++) {
            const double *lo = c - k * g, *hi = c + k * g;
            for (size_t q = 0; q < g; q++)
                dst[q] += w[k] * (lo[q] + hi[q]);
        }
    }
}

/* Blurs data (outer × len × inner, C order) in place along the middle axis. Along an inner
 * axis, up to GAUSS_COLS neighbouring columns are gathered (with reflected margins) and blurred
 * together, so that memory is read row by row. */
static void blur_axis(double *data, size_t outer, size_t len, size_t inner, double sigma)
{
    size_t radius = (size_t)(GAUSS_TRUNCATE * sigma + 0.5), padded = len + 2 * radius;
    double *w = gauss_kernel(sigma, radius);
    size_t *src = xmalloc(padded * sizeof *src);
    for (size_t k = 0; k < padded; k++)
        src[k] = reflect_index((int64_t)k - (int64_t)radius, len);
    size_t cols = inner < GAUSS_COLS ? inner : GAUSS_COLS;
    double *buf = xmalloc(padded * cols * sizeof *buf);
    for (size_t o = 0; o < outer; o++) {
        double *plane = data + o * len * inner;
        if (inner == 1) {
            for (size_t k = 0; k < padded; k++)
                buf[k] = plane[src[k]];
            blur_line(plane, buf, len, w, radius);
            continue;
        }
        for (size_t i0 = 0; i0 < inner; i0 += cols) {
            size_t g = inner - i0 < cols ? inner - i0 : cols;
            for (size_t k = 0; k < padded; k++)
                memcpy(buf + k * g, plane + src[k] * inner + i0, g * sizeof *buf);
            blur_columns(plane, i0, g, len, inner, buf, w, radius);
        }
    }
    free(buf);
    free(src);
    free(w);
}

static int run_gaussian(const struct builtin *b, const struct proc_request *rq, size_t n,
                        struct errbuf *err)
{
    if (b->nsigma > 1 && b->nsigma != rq->ndim)
        return err_set(err, -EINVAL, "param.sigma: %d values for a %d-dimensional array", b->nsigma,
                       rq->ndim);
    double *data = xmalloc(n * sizeof *data);
    dtype_to_double(&rq->in_dtype, rq->in, data, n);
    for (int a = 0; a < rq->ndim && n > 0; a++) {
        double sigma = b->sigma[b->nsigma > 1 ? a : 0];
        if (sigma <= 1e-15) /* as scipy: such an axis is left alone */
            continue;
        if (rq->in_shape[a] == 1) /* reflected edges: a length-1 axis blurs to itself */
            continue;
        size_t outer = 1, inner = 1;
        for (int d = 0; d < a; d++)
            outer *= (size_t)rq->in_shape[d];
        for (int d = a + 1; d < rq->ndim; d++)
            inner *= (size_t)rq->in_shape[d];
        blur_axis(data, outer, (size_t)rq->in_shape[a], inner, sigma);
    }
    dtype_from_double(&rq->out_dtype, data, rq->out, n);
    free(data);
    return 0;
}

/* ---- processor ---- */

/* Sleeps for the delay parameter; a shutdown wakes it (and any later call) with -ECANCELED. */
static int builtin_delay(struct builtin *b, struct errbuf *err)
{
    struct timespec until = deadline_in(CLOCK_MONOTONIC, ts_from_seconds(b->delay));
    pthread_mutex_lock(&b->lock);
    while (b->delay > 0 && !b->stopping)
        if (pthread_cond_timedwait(&b->wake, &b->lock, &until) == ETIMEDOUT)
            break;
    bool stopping = b->stopping;
    pthread_mutex_unlock(&b->lock);
    return stopping ? err_set(err, -ECANCELED, "shut down") : 0;
}

static int builtin_run(struct proc *p, const struct proc_request *rq, struct errbuf *err)
{
    struct builtin *b = (struct builtin *)p;
    int rc = builtin_delay(b, err);
    if (rc)
        return rc;
    size_t n = rq->in_nbytes / rq->in_dtype.size;
    if (rq->out_nbytes != n * rq->out_dtype.size)
        return err_set(err, -EINVAL, "output buffer of %zu bytes for %zu elements of size %u",
                       rq->out_nbytes, n, rq->out_dtype.size);
    if (b->op == OP_GAUSSIAN)
        return run_gaussian(b, rq, n, err);
    if (b->op == OP_LABEL) {
        struct label_block blk = {rq->ndim, rq->in_shape, rq->in_dtype};
        return label_run(&blk, rq->in, &b->threshold, &rq->out_dtype, rq->out, NULL, NULL, err);
    }
    if (b->op == OP_COPY && rq->in_dtype.kind == rq->out_dtype.kind &&
        rq->in_dtype.size == rq->out_dtype.size) {
        if (n)
            memcpy(rq->out, rq->in, rq->out_nbytes);
        return 0;
    }
    run_elementwise(b, rq, n);
    return 0;
}

static void builtin_shutdown(struct proc *p)
{
    struct builtin *b = (struct builtin *)p;
    pthread_mutex_lock(&b->lock);
    b->stopping = true;
    pthread_cond_broadcast(&b->wake);
    pthread_mutex_unlock(&b->lock);
}

static void builtin_destroy(struct proc *p)
{
    struct builtin *b = (struct builtin *)p;
    pthread_cond_destroy(&b->wake);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static const struct proc_ops builtin_ops = {
    .run = builtin_run,
    .shutdown = builtin_shutdown,
    .destroy = builtin_destroy,
};

int proc_builtin_create(const struct config *cfg, struct proc **out, struct errbuf *err)
{
    const struct builtin_def *def = NULL;
    for (size_t i = 0; i < sizeof builtin_defs / sizeof builtin_defs[0]; i++)
        if (cfg->proc_value && !strcmp(cfg->proc_value, builtin_defs[i].name))
            def = &builtin_defs[i];
    if (!def)
        return config_error(cfg, err, "process", "builtin",
                            "[process] builtin: unknown '%s' (expected copy, add, multiply, "
                            "threshold, gaussian or label)",
                            cfg->proc_value ? cfg->proc_value : "");
    struct builtin *b = xcalloc(1, sizeof *b);
    b->base.ops = &builtin_ops;
    b->op = def->op;
    b->value = def->def;
    b->sigma[0] = def->def;
    b->nsigma = 1;
    label_value_parse("0", &b->threshold);
    int rc = parse_params(cfg, def, b, err);
    if (rc) {
        free(b);
        return rc;
    }
    cond_init_monotonic(&b->wake);
    pthread_mutex_init(&b->lock, NULL);
    *out = &b->base;
    return 0;
}
