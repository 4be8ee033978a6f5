/* test_builtin_int.c: the elementwise builtins (copy, add, multiply, threshold) against the
 * documented conversion through double (long double when a 64-bit integer is involved), byte
 * for byte, for every input × output dtype, edge and random inputs and values that exercise
 * the integer fast path's limits, saturation, rounding and NaN. */
#include "proc_harness.h"

#include <math.h>

#define NVAL 700

static const struct dtype all_dtypes[] = {
    {DT_BOOL, 1, false}, {DT_INT, 1, false},   {DT_INT, 2, false},   {DT_INT, 4, false},
    {DT_INT, 8, false},  {DT_UINT, 1, false},  {DT_UINT, 2, false},  {DT_UINT, 4, false},
    {DT_UINT, 8, false}, {DT_FLOAT, 2, false}, {DT_FLOAT, 4, false}, {DT_FLOAT, 8, false},
};
#define NDT (sizeof all_dtypes / sizeof all_dtypes[0])

/* Values of the parameter: inside and just outside the fast path's limits (add 2^40, multiply
 * 2^20), fractions with ties, huge, infinite and NaN. */
static const char *const values[] = {
    "0",
    "1",
    "-1",
    "3",
    "-7",
    "300",
    "-300",
    "65536",
    "1048576",
    "-1048576",
    "1048577",
    "2147483648",
    "1099511627776",
    "1099511627777",
    "-1099511627776",
    "35184372088832",
    "0.5",
    "-1.5",
    "2.5",
    "-0.0",
    "1e300",
    "-1e300",
    "inf",
    "-inf",
    "nan",
    "4294967295",
    "-2147483648",
    "9007199254740993",
};
#define NV (sizeof values / sizeof values[0])

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* n elements of dt: the type's extremes and their neighbours, zero, ±1, then random bits (for
 * floats: random bit patterns, NaN and infinities among them). */
static void fill_input(const struct dtype *dt, unsigned char *buf, size_t n)
{
    for (size_t i = 0; i < n * dt->size; i++)
        buf[i] = (unsigned char)rnd();
    if (dt->kind == DT_BOOL) {
        for (size_t i = 0; i < n; i++)
            buf[i] = i % 3 ? (unsigned char)(rnd() & 1) : 0;
        return;
    }
    if (dt->kind == DT_FLOAT)
        return;
    unsigned bits = dt->size * 8;
    for (int k = 0; k < 12; k++) {
        uint64_t u = 0;
        switch (k) {
        case 0:
            u = 0;
            break;
        case 1:
            u = 1;
            break;
        case 2:
            u = ~UINT64_C(0);
            break; /* -1 or the maximum */
        case 3:
            u = UINT64_C(1) << (bits - 1);
            break; /* INT_MIN or half */
        case 4:
            u = (UINT64_C(1) << (bits - 1)) - 1;
            break;
        case 5:
            u = (UINT64_C(1) << (bits - 1)) + 1;
            break;
        case 6:
            u = ~UINT64_C(0) - 1;
            break;
        default:
            u = rnd() & 0xff;
            break; /* small values: ties, thresholds near 0 */
        }
        memcpy(buf + (size_t)k * dt->size, &u, dt->size); /* little-endian: the low bytes */
    }
}

static bool is_i64(const struct dtype *dt)
{
    return dt->kind != DT_FLOAT && dt->kind != DT_BOOL && dt->size == 8;
}

/* The reference: the documented cast of the documented op, through double or long double. */
static void reference(const char *op, double v, const struct dtype *in, const void *src,
                      const struct dtype *out, void *dst, size_t n)
{
    long double *x = malloc(n * sizeof *x);
    double *d = malloc(n * sizeof *d);
    bool wide = is_i64(in) || is_i64(out);
    if (wide)
        dtype_to_ldouble(in, src, x, n);
    else
        dtype_to_double(in, src, d, n);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(op, "add")) {
            x[i] += (long double)v;
            d[i] += v;
        } else if (!strcmp(op, "multiply")) {
            x[i] *= (long double)v;
            d[i] *= v;
        } else if (!strcmp(op, "threshold")) {
            x[i] = x[i] > (long double)v ? 1 : 0;
            d[i] = d[i] > v ? 1 : 0;
        }
    }
    if (wide)
        dtype_from_ldouble(out, x, dst, n);
    else
        dtype_from_double(out, d, dst, n);
    free(x);
    free(d);
}

/* Byte for byte, except that any two NaNs are equal (their payloads are not specified: copy
 * moves the bits, the reference quiets signalling NaNs). */
static bool same(const struct dtype *dt, const unsigned char *a, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(a + i * dt->size, b + i * dt->size, dt->size))
            continue;
        double x, y;
        dtype_to_double(dt, a + i * dt->size, &x, 1);
        dtype_to_double(dt, b + i * dt->size, &y, 1);
        if (dt->kind != DT_FLOAT || !isnan(x) || !isnan(y))
            return false;
    }
    return true;
}

static void test_every_op_and_dtype(void)
{
    static const char *const ops[] = {"copy", "add", "multiply", "threshold"};
    unsigned char *in = malloc(NVAL * 8), *got = malloc(NVAL * 8), *want = malloc(NVAL * 8);
    size_t cases = 0, bad = 0;
    for (size_t o = 0; o < 4; o++)
        for (size_t vi = 0; vi < (o ? NV : 1); vi++) {
            char param[64];
            snprintf(param, sizeof param, "value=%s", values[vi]);
            double v = strtod(values[vi], NULL);
            for (size_t a = 0; a < NDT; a++)
                for (size_t b = 0; b < NDT; b++) {
                    const struct dtype *di = &all_dtypes[a], *dout = &all_dtypes[b];
                    fill_input(di, in, NVAL);
                    memset(got, 0xA5, NVAL * 8);
                    memset(want, 0x5A, NVAL * 8);
                    int rc = run_builtin(ops[o], o ? param : NULL, *di, in, *dout, got, NVAL);
                    CHECK_EQ_INT(rc, 0);
                    reference(ops[o], o ? v : 0, di, in, dout, want, NVAL);
                    cases++;
                    if (!same(dout, got, want, NVAL)) {
                        if (bad++ < 10)
                            fprintf(stderr, "%s %s: %c%u -> %c%u differs\n", ops[o], param,
                                    "biuf"[di->kind], di -> size, "biuf"[dout->kind], dout -> size);
                    }
                }
        }
    CHECK_EQ_INT(bad, 0);
    CHECK(cases > 4000);
    free(in);
    free(got);
    free(want);
}

/* Saturation and casting rules as the documentation states them, on the fast path's types. */
static void test_stated_rules(void)
{
    uint16_t a[4] = {0, 1, 65534, 65535}, b[4];
    CHECK_EQ_INT(run_builtin("add", "value=1", U2, a, U2, b, 4), 0);
    CHECK(b[0] == 1 && b[1] == 2 && b[2] == 65535 && b[3] == 65535); /* clipped, no wrap */
    int16_t c[4];
    CHECK_EQ_INT(run_builtin("multiply", "value=-1", U2, a, I2, c, 4), 0);
    CHECK(c[0] == 0 && c[1] == -1 && c[2] == INT16_MIN && c[3] == INT16_MIN);
    uint8_t t[4];
    CHECK_EQ_INT(run_builtin("threshold", "value=1.5", U2, a, B1, t, 4), 0);
    CHECK(t[0] == 0 && t[1] == 0 && t[2] == 1 && t[3] == 1);
    CHECK_EQ_INT(run_builtin("threshold", "value=nan", U2, a, U1, t, 4), 0);
    CHECK(t[0] == 0 && t[1] == 0 && t[2] == 0 && t[3] == 0); /* nothing is > NaN */
    uint64_t u[4];
    CHECK_EQ_INT(run_builtin("add", "value=-2", U2, a, U8, u, 4), 0);
    CHECK(u[0] == 0 && u[1] == 0 && u[2] == 65532 && u[3] == 65533);
}

int main(void)
{
    if (proc_test_begin("builtin-int"))
        return 1;
    RUN(test_every_op_and_dtype);
    RUN(test_stated_rules);
    return proc_test_end();
}
