/* builtin_int.c: the elementwise builtins on integers without the conversion through double:
 * int64 arithmetic, then numpy's clipping to the output type, which equals the double path
 * wherever that path is exact (tests/unit/test_builtin_int.c compares the two, every op and
 * dtype). Same-type input and output (u2 -> u2) runs one fused loop, others three passes. */
#if defined(__GNUC__) && !defined(__clang__)
/* gcc's -O2 cost model leaves these loops scalar; clang's -O2 vectorises them already. */
#pragma GCC optimize("tree-loop-vectorize", "vect-cost-model=dynamic")
#endif
#include "builtin_int.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define BLOCK_ELEMS 4096

/* Whether the int64 results are exactly the double path's, and the value to use. Inputs have
 * at most 32 bits (|x| <= 2^32); add: integral |value| <= 2^40 and multiply: integral |value|
 * <= 2^20 keep |result| <= 2^52, exact in a double, so rounding does nothing and the clip is
 * the same. threshold takes any value: for an integer x, x > value exactly when
 * x > floor(value); NaN is never exceeded, nor is 2^40 by these inputs. */
static bool fast_ok(enum builtin_int_op op, double v, const struct proc_request *rq, int64_t *iv)
{
    const struct dtype *in = &rq->in_dtype, *out = &rq->out_dtype;
    if (in->kind == DT_FLOAT || in->size > 4 || out->kind == DT_FLOAT)
        return false;
    if (op == BI_THRESHOLD) {
        double f = isnan(v) ? 0x1p40 : floor(v);
        *iv = (int64_t)(f > 0x1p40 ? 0x1p40 : f < -0x1p40 ? -0x1p40 : f);
        return true;
    }
    double lim = op == BI_MULTIPLY ? 0x1p20 : 0x1p40;
    if (!(fabs(v) <= lim) || v != floor(v))
        return false;
    *iv = (int64_t)v;
    return true;
}

static inline int64_t clip(int64_t v, int64_t lo, int64_t hi)
{
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

static inline int32_t clip32(int32_t v, int32_t lo, int32_t hi)
{
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

/* One pass from T to T: each element read, computed in W (int64, or int32 when the caller
 * has checked that |result| < 2^31), clipped to [LO, HI], stored. */
#define FUSED(NAME, T, W, CLIP, LO, HI)                                                            \
    static void NAME(enum builtin_int_op op, int64_t v64, const void *src, void *dst, size_t n)    \
    {                                                                                              \
        const T *restrict in = src;                                                                \
        T *restrict out = dst;                                                                     \
        W v = (W)v64;                                                                              \
        switch (op) {                                                                              \
        case BI_ADD:                                                                               \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)CLIP((W)in[i] + v, LO, HI);                                            \
            break;                                                                                 \
        case BI_MULTIPLY:                                                                          \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)CLIP((W)in[i] * v, LO, HI);                                            \
            break;                                                                                 \
        case BI_THRESHOLD:                                                                         \
            for (size_t i = 0; i < n; i++)                                                         \
                out[i] = (T)((W)in[i] > v);                                                        \
            break;                                                                                 \
        }                                                                                          \
    }
FUSED(fused_u1, uint8_t, int32_t, clip32, 0, UINT8_MAX)
FUSED(fused_u2, uint16_t, int32_t, clip32, 0, UINT16_MAX)
FUSED(fused_u4, uint32_t, int64_t, clip, 0, UINT32_MAX)
FUSED(fused_i1, int8_t, int32_t, clip32, INT8_MIN, INT8_MAX)
FUSED(fused_i2, int16_t, int32_t, clip32, INT16_MIN, INT16_MAX)
FUSED(fused_i4, int32_t, int64_t, clip, INT32_MIN, INT32_MAX)

/* The fused loop for same-type input and output, or NULL. The 8- and 16-bit ones compute in
 * int32: |x| <= 2^16, so a value of |v| <= 2^14 keeps x + v and x * v within it. */
static void (*fused_for(const struct dtype *in, const struct dtype *out,
                        int64_t v))(enum builtin_int_op, int64_t, const void *, void *, size_t)
{
    if (in->kind != out->kind || in->size != out->size)
        return NULL;
    if (in->size < 4 && (v > (1 << 14) || v < -(1 << 14)))
        return NULL;
    switch (in->kind * 16 + in->size) {
    case DT_UINT * 16 + 1:
        return fused_u1;
    case DT_UINT * 16 + 2:
        return fused_u2;
    case DT_UINT * 16 + 4:
        return fused_u4;
    case DT_INT * 16 + 1:
        return fused_i1;
    case DT_INT * 16 + 2:
        return fused_i2;
    case DT_INT * 16 + 4:
        return fused_i4;
    default:
        return NULL;
    }
}

/* op with v over a block of n values, in place. */
static void op_block(enum builtin_int_op op, int64_t v, int64_t *x, size_t n)
{
    switch (op) {
    case BI_ADD:
        for (size_t i = 0; i < n; i++)
            x[i] += v;
        break;
    case BI_MULTIPLY:
        for (size_t i = 0; i < n; i++)
            x[i] *= v;
        break;
    case BI_THRESHOLD:
        for (size_t i = 0; i < n; i++)
            x[i] = x[i] > v;
        break;
    }
}

bool builtin_int_run(enum builtin_int_op op, double value, const struct proc_request *rq, size_t n)
{
    int64_t v;
    if (!fast_ok(op, value, rq, &v))
        return false;
    void (*fused)(enum builtin_int_op, int64_t, const void *, void *, size_t) =
        fused_for(&rq->in_dtype, &rq->out_dtype, v);
    size_t sz = rq->in_dtype.size;
    if (fused && (uintptr_t)rq->in % sz == 0 && (uintptr_t)rq->out % sz == 0 &&
        (const void *)rq->in != (const void *)rq->out) {
        fused(op, v, rq->in, rq->out, n);
        return true;
    }
    const unsigned char *in = rq->in;
    unsigned char *out = rq->out;
    size_t isz = rq->in_dtype.size, osz = rq->out_dtype.size;
    int64_t buf[BLOCK_ELEMS];
    for (size_t off = 0; off < n; off += BLOCK_ELEMS) {
        size_t m = n - off < BLOCK_ELEMS ? n - off : BLOCK_ELEMS;
        dtype_to_int64(&rq->in_dtype, in + off * isz, buf, m);
        op_block(op, v, buf, m);
        dtype_from_int64(&rq->out_dtype, buf, out + off * osz, m);
    }
    return true;
}
