/* test_dtype.c: unit tests for dtype parsing, naming, casting, float16 and byte swapping
 * (the N-dimensional helpers of nd.c are in test_nd.c). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "dtype.h"

static struct dtype parse_ok(const char *s)
{
    struct dtype dt = {0};
    struct errbuf err = {{0}};
    int r = dtype_parse(s, &dt, &err);
    CHECK_EQ_INT(r, 0);
    if (r < 0)
        fprintf(stderr, "  dtype_parse(%s): %s\n", s, err.msg);
    return dt;
}

static void test_parse_typestr_round_trip(void)
{
    static const char *const ok[] = {"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2",
                                     "<u4", "<u8", "<f2", "<f4", "<f8", ">i2", ">i4",
                                     ">i8", ">u2", ">u4", ">u8", ">f2", ">f4", ">f8"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        struct dtype dt = parse_ok(ok[i]);
        char buf[8];
        CHECK(strcmp(dtype_typestr(&dt, buf), ok[i]) == 0);
        struct dtype back = parse_ok(dtype_v3_name(&dt));
        CHECK(dtype_equal_ignoring_order(&dt, &back));
        CHECK(!back.big_endian);
        CHECK(dtype_typestr_le(&dt, buf)[0] != '>');
    }
    struct dtype dt = parse_ok(">u2");
    CHECK(dt.big_endian && dt.kind == DT_UINT && dt.size == 2);
    dt = parse_ok("<u1"); /* a 1-byte type with an explicit order is still order-free */
    CHECK(!dt.big_endian);
    char buf[8];
    CHECK(strcmp(dtype_typestr(&dt, buf), "|u1") == 0);
    dt = parse_ok("float16");
    CHECK(dt.kind == DT_FLOAT && dt.size == 2);
    CHECK(strcmp(dtype_v3_name(&dt), "float16") == 0);
    dt = parse_ok("bool");
    CHECK(dt.kind == DT_BOOL && dt.size == 1);
    CHECK(strcmp(dtype_typestr(&dt, buf), "|b1") == 0);
    dt = parse_ok("uint64");
    CHECK(strcmp(dtype_typestr(&dt, buf), "<u8") == 0);
}

static void test_parse_errors(void)
{
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"<c8", "complex"},       {"<c16", "complex"},    {"|S12", "string"},
        {"<U4", "string"},        {"|O", "object"},       {"|V8", "structured"},
        {"<M8[ns]", "datetime"},  {"u2", "byte order"},   {"|u2", "1-byte"},
        {"<u3", "unknown"},       {"<f1", "unknown"},     {"<b2", "unknown"},
        {"<u22", "unknown"},      {"uint128", "unknown"}, {"", "empty"},
        {"complex64", "complex"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct dtype dt;
        struct errbuf err = {{0}};
        CHECK_EQ_INT(dtype_parse(bad[i].text, &dt, &err), -EINVAL);
        CHECK_STR_CONTAINS(err.msg, bad[i].msg);
        if (bad[i].text[0])
            CHECK_STR_CONTAINS(err.msg, bad[i].text);
    }
}

static int64_t to_i64(const char *ts, double v)
{
    struct dtype dt = parse_ok(ts);
    unsigned char b[8] = {0};
    dtype_from_double(&dt, &v, b, 1);
    long double l;
    dtype_to_ldouble(&dt, b, &l, 1);
    return (int64_t)l;
}

static void test_cast_rounding_clipping(void)
{
    CHECK_EQ_INT(to_i64("<i4", 2.5), 2);
    CHECK_EQ_INT(to_i64("<i4", 3.5), 4);
    CHECK_EQ_INT(to_i64("<i4", -2.5), -2);
    CHECK_EQ_INT(to_i64("<i4", -3.5), -4);
    CHECK_EQ_INT(to_i64("<i4", 0.49999999999999994), 0);
    CHECK_EQ_INT(to_i64("|u1", 300), 255);
    CHECK_EQ_INT(to_i64("|u1", -5), 0);
    CHECK_EQ_INT(to_i64("|u1", 254.5), 254);
    CHECK_EQ_INT(to_i64("|u1", 255.5), 255);
    CHECK_EQ_INT(to_i64("|i1", -1000), -128);
    CHECK_EQ_INT(to_i64("|i1", 127.6), 127);
    CHECK_EQ_INT(to_i64("<u2", NAN), 0);
    CHECK_EQ_INT(to_i64("<i8", NAN), 0);
    CHECK_EQ_INT(to_i64("<u2", INFINITY), 65535);
    CHECK_EQ_INT(to_i64("<i2", -INFINITY), -32768);
    CHECK_EQ_INT(to_i64("<u4", 4294967295.4), 4294967295LL);
    CHECK_EQ_INT(to_i64("<i8", 1e300), INT64_MAX);
    CHECK_EQ_INT(to_i64("<i8", -1e300), INT64_MIN);
    CHECK_EQ_INT(to_i64("<i8", 9223372036854775808.0), INT64_MAX);
    CHECK_EQ_INT(to_i64("|b1", 0.0), 0);
    CHECK_EQ_INT(to_i64("|b1", -0.1), 1);
    CHECK_EQ_INT(to_i64("|b1", NAN), 1);
    /* the same through the long double path */
    struct dtype u1 = parse_ok("|u1"), i4 = parse_ok("<i4");
    long double lv[] = {2.5L, 3.5L, -2.5L, 300.0L, -5.0L, (long double)NAN};
    uint8_t b[6];
    dtype_from_ldouble(&u1, lv, b, 6);
    CHECK(b[0] == 2 && b[1] == 4 && b[2] == 0 && b[3] == 255 && b[4] == 0 && b[5] == 0);
    int32_t w[6];
    dtype_from_ldouble(&i4, lv, w, 6);
    CHECK(w[0] == 2 && w[1] == 4 && w[2] == -2 && w[3] == 300 && w[4] == -5 && w[5] == 0);
}

static void test_int64_extremes_exact(void)
{
    struct dtype i8 = parse_ok("<i8"), u8 = parse_ok("<u8");
    int64_t iv[] = {INT64_MIN, INT64_MAX, INT64_MAX - 1, -1, 0, (1LL << 53) + 1};
    long double l[6];
    int64_t iback[6];
    dtype_to_ldouble(&i8, iv, l, 6);
    dtype_from_ldouble(&i8, l, iback, 6);
    CHECK(memcmp(iv, iback, sizeof iv) == 0);
    uint64_t uv[] = {UINT64_MAX, UINT64_MAX - 1, 0, 1, (1ULL << 63) + 1, (1ULL << 53) + 1};
    uint64_t uback[6];
    dtype_to_ldouble(&u8, uv, l, 6);
    dtype_from_ldouble(&u8, l, uback, 6);
    CHECK(memcmp(uv, uback, sizeof uv) == 0);
    long double big[] = {0x1p64L, -1.0L, 0x1p63L, -0x1p63L - 4096.0L};
    uint64_t ub[4];
    int64_t ib[4];
    dtype_from_ldouble(&u8, big, ub, 4);
    dtype_from_ldouble(&i8, big, ib, 4);
    CHECK(ub[0] == UINT64_MAX && ub[1] == 0 && ub[2] == (1ULL << 63));
    CHECK(ib[0] == INT64_MAX && ib[1] == -1 && ib[2] == INT64_MAX && ib[3] == INT64_MIN);
}

static void test_float16(void)
{
    CHECK_EQ_INT(dtype_float_to_half(1.0f), 0x3c00);
    CHECK_EQ_INT(dtype_float_to_half(-2.0f), 0xc000);
    CHECK_EQ_INT(dtype_float_to_half(65504.0f), 0x7bff);
    CHECK_EQ_INT(dtype_float_to_half(65519.0f), 0x7bff); /* rounds down to the maximum */
    CHECK_EQ_INT(dtype_float_to_half(65520.0f), 0x7c00); /* rounds up to infinity */
    CHECK_EQ_INT(dtype_float_to_half(INFINITY), 0x7c00);
    CHECK_EQ_INT(dtype_float_to_half(-INFINITY), 0xfc00);
    CHECK((dtype_float_to_half(NAN) & 0x7c00) == 0x7c00 && (dtype_float_to_half(NAN) & 0x3ff));
    CHECK_EQ_INT(dtype_float_to_half(0x1p-24f), 0x0001);        /* smallest subnormal */
    CHECK_EQ_INT(dtype_float_to_half(0x1p-25f), 0x0000);        /* tie rounds to even (zero) */
    CHECK_EQ_INT(dtype_float_to_half(0x1.8p-24f), 0x0002);      /* 1.5 ulp: tie to even (2) */
    CHECK_EQ_INT(dtype_float_to_half(0x1p-14f), 0x0400);        /* smallest normal */
    CHECK_EQ_INT(dtype_float_to_half(0x1.ffcp-15f), 0x0400);    /* subnormal rounding carries */
    CHECK_EQ_INT(dtype_float_to_half(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    CHECK_EQ_INT(dtype_float_to_half(1.0f + 0x1.8p-10f), 0x3c02);
    CHECK_EQ_INT(dtype_float_to_half(-0.0f), 0x8000);
    CHECK(dtype_half_to_float(0x3c00) == 1.0f);
    CHECK(dtype_half_to_float(0x7bff) == 65504.0f);
    CHECK(dtype_half_to_float(0x0001) == 0x1p-24f);
    CHECK(dtype_half_to_float(0x03ff) == 0x1.ff8p-15f);
    CHECK(isinf(dtype_half_to_float(0xfc00)) && dtype_half_to_float(0xfc00) < 0);
    CHECK(isnan(dtype_half_to_float(0x7e00)));
    /* every finite half survives half -> float -> half */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue;
        if (dtype_float_to_half(dtype_half_to_float((uint16_t)h)) != h)
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* the bulk path converts double directly (no double rounding through float) */
    struct dtype f2 = parse_ok("<f2");
    double d[] = {1.0 + 0x1p-11 + 0x1p-40, 65504.0, 1e9};
    uint16_t h[3];
    dtype_from_double(&f2, d, h, 3);
    CHECK_EQ_INT(h[0], 0x3c01);
    CHECK_EQ_INT(h[1], 0x7bff);
    CHECK_EQ_INT(h[2], 0x7c00);
    double back[3];
    dtype_to_double(&f2, h, back, 3);
    CHECK(back[1] == 65504.0 && isinf(back[2]));
}

static void test_byteswap(void)
{
    uint16_t a[] = {0x0102, 0xa0b0};
    dtype_byteswap(a, 2, 2);
    CHECK(a[0] == 0x0201 && a[1] == 0xb0a0);
    uint32_t b[] = {0x01020304};
    dtype_byteswap(b, 1, 4);
    CHECK(b[0] == 0x04030201);
    uint64_t c[] = {0x0102030405060708ULL, 1};
    dtype_byteswap(c, 2, 8);
    CHECK(c[0] == 0x0807060504030201ULL && c[1] == 0x0100000000000000ULL);
    uint8_t d[] = {1, 2, 3};
    dtype_byteswap(d, 3, 1);
    CHECK(d[0] == 1 && d[1] == 2 && d[2] == 3);
}

static void test_parse_value(void)
{
    struct errbuf err = {{0}};
    struct dtype u1 = parse_ok("|u1"), i2 = parse_ok("<i2"), f4 = parse_ok("<f4");
    struct dtype b1 = parse_ok("|b1"), u8 = parse_ok("<u8"), f2 = parse_ok("<f2");
    uint8_t v8;
    CHECK_EQ_INT(dtype_parse_value(&u1, "255", &v8, &err), 0);
    CHECK_EQ_INT(v8, 255);
    CHECK_EQ_INT(dtype_parse_value(&u1, "256", &v8, &err), -ERANGE);
    CHECK_EQ_INT(dtype_parse_value(&u1, "-1", &v8, &err), -ERANGE);
    CHECK_EQ_INT(dtype_parse_value(&u1, "1.5", &v8, &err), -EINVAL);
    CHECK_EQ_INT(dtype_parse_value(&u1, "x", &v8, &err), -EINVAL);
    int16_t v16;
    CHECK_EQ_INT(dtype_parse_value(&i2, "-3", &v16, &err), 0);
    CHECK_EQ_INT(v16, -3);
    CHECK_EQ_INT(dtype_parse_value(&i2, "-32769", &v16, &err), -ERANGE);
    uint64_t v64;
    CHECK_EQ_INT(dtype_parse_value(&u8, "18446744073709551615", &v64, &err), 0);
    CHECK(v64 == UINT64_MAX);
    float f;
    CHECK_EQ_INT(dtype_parse_value(&f4, "1.5", &f, &err), 0);
    CHECK(f == 1.5f);
    CHECK_EQ_INT(dtype_parse_value(&f4, "nan", &f, &err), 0);
    CHECK(isnan(f));
    CHECK_EQ_INT(dtype_parse_value(&f4, "-inf", &f, &err), 0);
    CHECK(isinf(f) && f < 0);
    CHECK_EQ_INT(dtype_parse_value(&f4, "1e39", &f, &err), -ERANGE);
    uint16_t h;
    CHECK_EQ_INT(dtype_parse_value(&f2, "65504", &h, &err), 0);
    CHECK_EQ_INT(h, 0x7bff);
    CHECK_EQ_INT(dtype_parse_value(&f2, "70000", &h, &err), -ERANGE);
    CHECK_EQ_INT(dtype_parse_value(&b1, "true", &v8, &err), 0);
    CHECK_EQ_INT(v8, 1);
    CHECK_EQ_INT(dtype_parse_value(&b1, "false", &v8, &err), 0);
    CHECK_EQ_INT(v8, 0);
    CHECK_EQ_INT(dtype_parse_value(&b1, "maybe", &v8, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "maybe");
}

/* dtype_load_bits / dtype_sign_extend / dtype_store_bits at every size, against the C types. */
static void test_load_store_bits(void)
{
    int8_t i1 = -5;
    int16_t i2 = -300;
    int32_t i4 = -70000;
    int64_t i8 = INT64_MIN + 3;
    CHECK(dtype_load_bits(&i1, 1) == (uint8_t)i1 &&
          dtype_sign_extend(dtype_load_bits(&i1, 1), 1) == i1);
    CHECK(dtype_load_bits(&i2, 2) == (uint16_t)i2 &&
          dtype_sign_extend(dtype_load_bits(&i2, 2), 2) == i2);
    CHECK(dtype_load_bits(&i4, 4) == (uint32_t)i4 &&
          dtype_sign_extend(dtype_load_bits(&i4, 4), 4) == i4);
    CHECK(dtype_load_bits(&i8, 8) == (uint64_t)i8 &&
          dtype_sign_extend(dtype_load_bits(&i8, 8), 8) == i8);
    uint8_t u1 = 0x7f;
    uint16_t u2 = 0x7fff;
    CHECK(dtype_sign_extend(dtype_load_bits(&u1, 1), 1) == 0x7f);
    CHECK(dtype_sign_extend(dtype_load_bits(&u2, 2), 2) == 0x7fff);
    unsigned char buf[8];
    memset(buf, 0xee, sizeof buf);
    dtype_store_bits(buf, 2, 0x12345678u);
    uint16_t got2;
    memcpy(&got2, buf, 2);
    CHECK(got2 == 0x5678 && buf[2] == 0xee);
    dtype_store_bits(buf, 4, 0xffffffff00000001ULL);
    CHECK(dtype_load_bits(buf, 4) == 1 && buf[4] == 0xee);
    dtype_store_bits(buf, 1, 0x1ff);
    CHECK(dtype_load_bits(buf, 1) == 0xff);
    dtype_store_bits(buf, 8, UINT64_MAX - 1);
    CHECK(dtype_load_bits(buf, 8) == UINT64_MAX - 1);
}

int main(void)
{
    RUN(test_load_store_bits);
    RUN(test_parse_typestr_round_trip);
    RUN(test_parse_errors);
    RUN(test_cast_rounding_clipping);
    RUN(test_int64_extremes_exact);
    RUN(test_float16);
    RUN(test_byteswap);
    RUN(test_parse_value);
    return check_done();
}
