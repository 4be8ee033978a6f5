/* dtype.c: numeric element types: parsing numpy typestrs and Zarr v3 names, byte swapping,
 * numpy-style casts to and from double / long double, and IEEE binary16 conversion. */
#include "dtype.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- names ---- */

static const struct {
    const char *name;
    enum dtype_kind kind;
    unsigned size;
} v3_names[] = {
    {"bool", DT_BOOL, 1},     {"int8", DT_INT, 1},      {"int16", DT_INT, 2},
    {"int32", DT_INT, 4},     {"int64", DT_INT, 8},     {"uint8", DT_UINT, 1},
    {"uint16", DT_UINT, 2},   {"uint32", DT_UINT, 4},   {"uint64", DT_UINT, 8},
    {"float16", DT_FLOAT, 2}, {"float32", DT_FLOAT, 4}, {"float64", DT_FLOAT, 8},
};

static const char *unsupported_kind(char k)
{
    switch (k) {
    case 'c':
        return "complex numbers are not supported";
    case 'S':
    case 'U':
        return "string types are not supported";
    case 'O':
        return "object arrays are not supported";
    case 'V':
        return "raw (void) and structured types are not supported";
    case 'm':
    case 'M':
        return "datetime and timedelta types are not supported";
    default:
        return NULL;
    }
}

static bool size_ok(enum dtype_kind kind, unsigned size)
{
    switch (kind) {
    case DT_BOOL:
        return size == 1;
    case DT_INT:
    case DT_UINT:
        return size == 1 || size == 2 || size == 4 || size == 8;
    case DT_FLOAT:
        return size == 2 || size == 4 || size == 8;
    }
    return false;
}

static int parse_typestr(const char *text, struct dtype *out, struct errbuf *err)
{
    char order = text[0], k = text[1];
    const char *why = unsupported_kind(k);
    if (why)
        return err_set(err, -EINVAL, "unsupported dtype \"%s\": %s", text, why);
    enum dtype_kind kind;
    switch (k) {
    case 'b':
        kind = DT_BOOL;
        break;
    case 'i':
        kind = DT_INT;
        break;
    case 'u':
        kind = DT_UINT;
        break;
    case 'f':
        kind = DT_FLOAT;
        break;
    default:
        return err_set(err, -EINVAL, "unknown dtype \"%s\"", text);
    }
    unsigned size = (unsigned)(text[2] - '0');
    if (strlen(text) != 3 || text[2] < '1' || text[2] > '8' || !size_ok(kind, size))
        return err_set(err, -EINVAL, "unknown dtype \"%s\"", text);
    if (order == '|' && size != 1)
        return err_set(err, -EINVAL, "dtype \"%s\": byte order '|' is only valid for 1-byte types",
                       text);
    out->kind = kind;
    out->size = size;
    out->big_endian = order == '>' && size > 1;
    return 0;
}

int dtype_parse(const char *text, struct dtype *out, struct errbuf *err)
{
    if (!text || !*text)
        return err_set(err, -EINVAL, "empty dtype");
    for (size_t i = 0; i < sizeof v3_names / sizeof v3_names[0]; i++) {
        if (strcmp(text, v3_names[i].name) == 0) {
            out->kind = v3_names[i].kind;
            out->size = v3_names[i].size;
            out->big_endian = false;
            return 0;
        }
    }
    if (text[0] == '<' || text[0] == '>' || text[0] == '|')
        return parse_typestr(text, out, err);
    const char *why = unsupported_kind(text[0]);
    if (why)
        return err_set(err, -EINVAL, "unsupported dtype \"%s\": %s", text, why);
    if (strchr("biuf", text[0]) && text[1] >= '0' && text[1] <= '9')
        return err_set(err, -EINVAL, "dtype \"%s\" lacks a byte order ('<', '>' or '|')", text);
    if (strncmp(text, "complex", 7) == 0)
        return err_set(err, -EINVAL, "unsupported dtype \"%s\": %s", text, unsupported_kind('c'));
    return err_set(err, -EINVAL, "unknown dtype \"%s\"", text);
}

static char kind_char(enum dtype_kind k)
{
    return k == DT_BOOL ? 'b' : k == DT_INT ? 'i' : k == DT_UINT ? 'u' : 'f';
}

const char *dtype_typestr(const struct dtype *dt, char buf[8])
{
    buf[0] = dt->size == 1 ? '|' : dt->big_endian ? '>' : '<';
    buf[1] = kind_char(dt->kind);
    buf[2] = (char)('0' + dt->size);
    buf[3] = '\0';
    return buf;
}

const char *dtype_typestr_le(const struct dtype *dt, char buf[8])
{
    struct dtype le = *dt;
    le.big_endian = false;
    return dtype_typestr(&le, buf);
}

const char *dtype_v3_name(const struct dtype *dt)
{
    for (size_t i = 0; i < sizeof v3_names / sizeof v3_names[0]; i++)
        if (v3_names[i].kind == dt->kind && v3_names[i].size == dt->size)
            return v3_names[i].name;
    return "unknown";
}

bool dtype_equal_ignoring_order(const struct dtype *a, const struct dtype *b)
{
    return a->kind == b->kind && a->size == b->size;
}

/* Swaps each of n elements of BITS bits at p in place. */
#define BSWAP_LOOP(BITS)                                                                           \
    for (size_t i = 0; i < n; i++, p += (BITS) / 8) {                                              \
        uint##BITS##_t v;                                                                          \
        memcpy(&v, p, (BITS) / 8);                                                                 \
        v = __builtin_bswap##BITS(v);                                                              \
        memcpy(p, &v, (BITS) / 8);                                                                 \
    }

void dtype_byteswap(void *buf, size_t n, unsigned size)
{
    unsigned char *p = buf;
    switch (size) {
    case 2:
        BSWAP_LOOP(16)
        break;
    case 4:
        BSWAP_LOOP(32)
        break;
    case 8:
        BSWAP_LOOP(64)
        break;
    default:
        if (size > 1)
            for (size_t i = 0; i < n; i++, p += size)
                for (unsigned a = 0, b = size - 1; a < b; a++, b--) {
                    unsigned char t = p[a];
                    p[a] = p[b];
                    p[b] = t;
                }
        break;
    }
}

/* ---- float16 ---- */

float dtype_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in float */
        float f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Rounds m >> shift to nearest, ties to even. shift is in 1..63. */
static uint64_t shift_round_even(uint64_t m, unsigned shift)
{
    uint64_t q = m >> shift, rem = m & ((1ULL << shift) - 1), half = 1ULL << (shift - 1);
    if (rem > half || (rem == half && (q & 1)))
        q++;
    return q;
}

/* Converting from double directly avoids the double rounding of double -> float -> half. */
static uint16_t half_from_double(double d)
{
    uint64_t bits;
    memcpy(&bits, &d, 8);
    uint16_t sign = (uint16_t)((bits >> 48) & 0x8000);
    int exp = (int)((bits >> 52) & 0x7ff);
    uint64_t mant = bits & ((1ULL << 52) - 1);
    if (exp == 0x7ff)
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 | (mant >> 42) : 0));
    int e = exp - 1023 + 15; /* biased half exponent */
    if (e >= 31)
        return sign | 0x7c00;
    if (e <= 0) {
        if (e < -10 || exp == 0)
            return sign; /* below half the smallest subnormal (or a double subnormal) */
        return (uint16_t)(sign | shift_round_even(mant | (1ULL << 52), (unsigned)(43 - e)));
    }
    /* a carry out of the mantissa correctly bumps the exponent, up to infinity */
    uint64_t h = ((uint64_t)e << 10) + shift_round_even(mant, 42);
    return (uint16_t)(sign | h);
}

uint16_t dtype_float_to_half(float f)
{
    return half_from_double((double)f);
}

/* ---- casts ---- */

/* Round half to even without a libm call per element: adding and subtracting 2^52 leaves the
 * nearest integer under the default rounding mode (compilers do not reassociate floating point
 * without -ffast-math, which roifs never uses); larger magnitudes are integers already. */
static inline double round_half_even(double v)
{
    double a = fabs(v);
    if (!(a < 0x1p52))
        return v;
    return copysign((a + 0x1p52) - 0x1p52, v);
}

/* Saturating casts to integers, NaN to 0, from double (rounded with round_half_even) and
 * from long double (nearbyintl: the default mode rounds half to even). */
#define DEFINE_TO_INT(NAME, RT, ROUND)                                                             \
    static int64_t NAME##_int(RT v, int64_t lo, int64_t hi)                                        \
    {                                                                                              \
        if (isnan(v))                                                                              \
            return 0;                                                                              \
        v = ROUND(v);                                                                              \
        if (v <= (RT)lo)                                                                           \
            return lo;                                                                             \
        if (v >= (RT)hi) /* (double)INT64_MAX rounds up to 2^63, which is out of range */          \
            return hi;                                                                             \
        return (int64_t)v;                                                                         \
    }                                                                                              \
    static uint64_t NAME##_uint(RT v, uint64_t hi)                                                 \
    {                                                                                              \
        if (isnan(v))                                                                              \
            return 0;                                                                              \
        v = ROUND(v);                                                                              \
        if (v <= 0)                                                                                \
            return 0;                                                                              \
        if (v >= (RT)hi)                                                                           \
            return hi;                                                                             \
        return (uint64_t)v;                                                                        \
    }
DEFINE_TO_INT(d_to, double, round_half_even)
DEFINE_TO_INT(ld_to, long double, nearbyintl)

static uint16_t half_from_ldouble(long double v)
{
    return half_from_double((double)v);
}

/* Element loops: T is the storage type, src/dst/n in scope. */
#define LOAD_LOOP(T, CONV)                                                                         \
    do {                                                                                           \
        const unsigned char *p_ = src;                                                             \
        for (size_t i = 0; i < n; i++) {                                                           \
            T x;                                                                                   \
            memcpy(&x, p_ + i * sizeof(T), sizeof(T));                                             \
            dst[i] = CONV;                                                                         \
        }                                                                                          \
    } while (0)

/* EXPR: element i of the result, from src[i]. */
#define STORE_LOOP(T, EXPR)                                                                        \
    do {                                                                                           \
        unsigned char *p_ = dst;                                                                   \
        for (size_t i = 0; i < n; i++) {                                                           \
            T x = (T)(EXPR);                                                                       \
            memcpy(p_ + i * sizeof(T), &x, sizeof(T));                                             \
        }                                                                                          \
    } while (0)

#define LOAD_ALL(RT)                                                                               \
    switch (dt->kind * 16 + dt->size) {                                                            \
    case DT_BOOL * 16 + 1:                                                                         \
        LOAD_LOOP(uint8_t, (RT)(x != 0));                                                          \
        break;                                                                                     \
    case DT_INT * 16 + 1:                                                                          \
        LOAD_LOOP(int8_t, (RT)x);                                                                  \
        break;                                                                                     \
    case DT_INT * 16 + 2:                                                                          \
        LOAD_LOOP(int16_t, (RT)x);                                                                 \
        break;                                                                                     \
    case DT_INT * 16 + 4:                                                                          \
        LOAD_LOOP(int32_t, (RT)x);                                                                 \
        break;                                                                                     \
    case DT_INT * 16 + 8:                                                                          \
        LOAD_LOOP(int64_t, (RT)x);                                                                 \
        break;                                                                                     \
    case DT_UINT * 16 + 1:                                                                         \
        LOAD_LOOP(uint8_t, (RT)x);                                                                 \
        break;                                                                                     \
    case DT_UINT * 16 + 2:                                                                         \
        LOAD_LOOP(uint16_t, (RT)x);                                                                \
        break;                                                                                     \
    case DT_UINT * 16 + 4:                                                                         \
        LOAD_LOOP(uint32_t, (RT)x);                                                                \
        break;                                                                                     \
    case DT_UINT * 16 + 8:                                                                         \
        LOAD_LOOP(uint64_t, (RT)x);                                                                \
        break;                                                                                     \
    case DT_FLOAT * 16 + 2:                                                                        \
        LOAD_LOOP(uint16_t, (RT)dtype_half_to_float(x));                                           \
        break;                                                                                     \
    case DT_FLOAT * 16 + 4:                                                                        \
        LOAD_LOOP(float, (RT)x);                                                                   \
        break;                                                                                     \
    case DT_FLOAT * 16 + 8:                                                                        \
        LOAD_LOOP(double, (RT)x);                                                                  \
        break;                                                                                     \
    default:                                                                                       \
        break;                                                                                     \
    }

void dtype_to_double(const struct dtype *dt, const void *src, double *dst, size_t n)
{
    LOAD_ALL(double)
}

void dtype_to_ldouble(const struct dtype *dt, const void *src, long double *dst, size_t n)
{
    LOAD_ALL(long double)
}

/* The numpy-style store into every type, with the given conversions to integers and half. */
#define STORE_ALL(TO_INT, TO_UINT, TO_HALF)                                                        \
    switch (dt->kind * 16 + dt->size) {                                                            \
    case DT_BOOL * 16 + 1:                                                                         \
        STORE_LOOP(uint8_t, src[i] != 0);                                                          \
        break;                                                                                     \
    case DT_INT * 16 + 1:                                                                          \
        STORE_LOOP(int8_t, TO_INT(src[i], INT8_MIN, INT8_MAX));                                    \
        break;                                                                                     \
    case DT_INT * 16 + 2:                                                                          \
        STORE_LOOP(int16_t, TO_INT(src[i], INT16_MIN, INT16_MAX));                                 \
        break;                                                                                     \
    case DT_INT * 16 + 4:                                                                          \
        STORE_LOOP(int32_t, TO_INT(src[i], INT32_MIN, INT32_MAX));                                 \
        break;                                                                                     \
    case DT_INT * 16 + 8:                                                                          \
        STORE_LOOP(int64_t, TO_INT(src[i], INT64_MIN, INT64_MAX));                                 \
        break;                                                                                     \
    case DT_UINT * 16 + 1:                                                                         \
        STORE_LOOP(uint8_t, TO_UINT(src[i], UINT8_MAX));                                           \
        break;                                                                                     \
    case DT_UINT * 16 + 2:                                                                         \
        STORE_LOOP(uint16_t, TO_UINT(src[i], UINT16_MAX));                                         \
        break;                                                                                     \
    case DT_UINT * 16 + 4:                                                                         \
        STORE_LOOP(uint32_t, TO_UINT(src[i], UINT32_MAX));                                         \
        break;                                                                                     \
    case DT_UINT * 16 + 8:                                                                         \
        STORE_LOOP(uint64_t, TO_UINT(src[i], UINT64_MAX));                                         \
        break;                                                                                     \
    case DT_FLOAT * 16 + 2:                                                                        \
        STORE_LOOP(uint16_t, TO_HALF(src[i]));                                                     \
        break;                                                                                     \
    case DT_FLOAT * 16 + 4:                                                                        \
        STORE_LOOP(float, src[i]);                                                                 \
        break;                                                                                     \
    case DT_FLOAT * 16 + 8:                                                                        \
        STORE_LOOP(double, src[i]);                                                                \
        break;                                                                                     \
    default:                                                                                       \
        break;                                                                                     \
    }

void dtype_from_double(const struct dtype *dt, const double *src, void *dst, size_t n)
{
    STORE_ALL(d_to_int, d_to_uint, half_from_double)
}

void dtype_from_ldouble(const struct dtype *dt, const long double *src, void *dst, size_t n)
{
    STORE_ALL(ld_to_int, ld_to_uint, half_from_ldouble)
}

/* ---- integer conversions ---- */

bool dtype_to_int64(const struct dtype *dt, const void *src, int64_t *dst, size_t n)
{
    switch (dt->kind * 16 + dt->size) {
    case DT_BOOL * 16 + 1:
        LOAD_LOOP(uint8_t, (int64_t)(x != 0));
        return true;
    case DT_INT * 16 + 1:
        LOAD_LOOP(int8_t, (int64_t)x);
        return true;
    case DT_INT * 16 + 2:
        LOAD_LOOP(int16_t, (int64_t)x);
        return true;
    case DT_INT * 16 + 4:
        LOAD_LOOP(int32_t, (int64_t)x);
        return true;
    case DT_UINT * 16 + 1:
        LOAD_LOOP(uint8_t, (int64_t)x);
        return true;
    case DT_UINT * 16 + 2:
        LOAD_LOOP(uint16_t, (int64_t)x);
        return true;
    case DT_UINT * 16 + 4:
        LOAD_LOOP(uint32_t, (int64_t)x);
        return true;
    default:
        return false;
    }
}

/* v clipped to [lo, hi]: written so that the store loops vectorise. */
static inline int64_t clip64(int64_t v, int64_t lo, int64_t hi)
{
    v = v < lo ? lo : v;
    return v > hi ? hi : v;
}

bool dtype_from_int64(const struct dtype *dt, const int64_t *src, void *dst, size_t n)
{
    switch (dt->kind * 16 + dt->size) {
    case DT_BOOL * 16 + 1:
        STORE_LOOP(uint8_t, src[i] != 0);
        return true;
    case DT_INT * 16 + 1:
        STORE_LOOP(int8_t, clip64(src[i], INT8_MIN, INT8_MAX));
        return true;
    case DT_INT * 16 + 2:
        STORE_LOOP(int16_t, clip64(src[i], INT16_MIN, INT16_MAX));
        return true;
    case DT_INT * 16 + 4:
        STORE_LOOP(int32_t, clip64(src[i], INT32_MIN, INT32_MAX));
        return true;
    case DT_INT * 16 + 8:
        STORE_LOOP(int64_t, src[i]);
        return true;
    case DT_UINT * 16 + 1:
        STORE_LOOP(uint8_t, clip64(src[i], 0, UINT8_MAX));
        return true;
    case DT_UINT * 16 + 2:
        STORE_LOOP(uint16_t, clip64(src[i], 0, UINT16_MAX));
        return true;
    case DT_UINT * 16 + 4:
        STORE_LOOP(uint32_t, clip64(src[i], 0, UINT32_MAX));
        return true;
    case DT_UINT * 16 + 8:
        STORE_LOOP(uint64_t, src[i] < 0 ? 0 : src[i]);
        return true;
    default:
        return false;
    }
}

/* ---- values from text ---- */

static bool int_in_range(const struct dtype *dt, int64_t v)
{
    if (dt->size == 8)
        return true;
    int bits = (int)dt->size * 8;
    if (dt->kind == DT_UINT)
        return v >= 0 && v < (1LL << bits);
    return v >= -(1LL << (bits - 1)) && v < (1LL << (bits - 1));
}

static int parse_int_value(const struct dtype *dt, const char *text, void *out, struct errbuf *err)
{
    long double v;
    int64_t i;
    uint64_t u;
    double d;
    if (dt->kind == DT_UINT && parse_u64(text, &u) == 0) {
        v = (long double)u;
        if (dt->size < 8 && u >= (1ULL << (dt->size * 8)))
            return err_set(err, -ERANGE, "value %s is out of range for %s", text,
                           dtype_v3_name(dt));
    } else if (parse_i64(text, &i) == 0) {
        if (!int_in_range(dt, i) || (dt->kind == DT_UINT && i < 0))
            return err_set(err, -ERANGE, "value %s is out of range for %s", text,
                           dtype_v3_name(dt));
        v = (long double)i;
    } else if (parse_double(text, &d) == 0 && isfinite(d) && d == floor(d)) {
        v = d;
        long double lo = dt->kind == DT_UINT ? 0 : -ldexpl(1, (int)dt->size * 8 - 1);
        long double hi = ldexpl(1, (int)dt->size * 8 - (dt->kind == DT_INT));
        if (v < lo || v >= hi)
            return err_set(err, -ERANGE, "value %s is out of range for %s", text,
                           dtype_v3_name(dt));
    } else {
        return err_set(err, -EINVAL, "value \"%s\" is not an integer", text);
    }
    dtype_from_ldouble(dt, &v, out, 1);
    return 0;
}

int dtype_parse_value(const struct dtype *dt, const char *text, void *out, struct errbuf *err)
{
    while (*text == ' ' || *text == '\t')
        text++;
    if (dt->kind == DT_BOOL) {
        uint8_t b;
        if (strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0)
            b = 1;
        else if (strcasecmp(text, "false") == 0 || strcmp(text, "0") == 0)
            b = 0;
        else
            return err_set(err, -EINVAL, "value \"%s\" is not a boolean (true or false)", text);
        memcpy(out, &b, 1);
        return 0;
    }
    if (dt->kind == DT_FLOAT) {
        double d;
        int r = parse_double(text, &d);
        if (r == -ERANGE)
            return err_set(err, -ERANGE, "value %s is out of range for %s", text,
                           dtype_v3_name(dt));
        if (r < 0)
            return err_set(err, -EINVAL, "value \"%s\" is not a number", text);
        dtype_from_double(dt, &d, out, 1);
        double back;
        dtype_to_double(dt, out, &back, 1);
        if (isfinite(d) && !isfinite(back))
            return err_set(err, -ERANGE, "value %s is out of range for %s", text,
                           dtype_v3_name(dt));
        return 0;
    }
    return parse_int_value(dt, text, out, err);
}
