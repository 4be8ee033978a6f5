/* test_label.c: unit tests of the connected-components labeller (src/proc/label.c) and the
 * `label` builtin: hand-made cases, every dtype, 1-D to 5-D against a flood-fill reference.
 * `test_label --bench IN.raw SHAPE DTYPE VALUE OUT.raw REPS` times it (bench/experiments). */
#include "check.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <time.h>

#include "proc/label.h"
#include "proc/proc.h"

static const struct dtype U1 = {DT_UINT, 1, false}, U2 = {DT_UINT, 2, false},
                          U4 = {DT_UINT, 4, false}, U8 = {DT_UINT, 8, false},
                          I1 = {DT_INT, 1, false}, I2 = {DT_INT, 2, false}, I4 = {DT_INT, 4, false},
                          I8 = {DT_INT, 8, false}, F2 = {DT_FLOAT, 2, false},
                          F4 = {DT_FLOAT, 4, false}, F8 = {DT_FLOAT, 8, false},
                          B1 = {DT_BOOL, 1, false};

static struct label_value val(const char *text)
{
    struct label_value v;
    CHECK(label_value_parse(text, &v) == 0);
    return v;
}

/* Labels a uint8 image (value 0) into int32; returns the count, or -errno. */
static long label_u8(int ndim, const uint64_t *shape, const uint8_t *in, int32_t *out)
{
    struct label_block blk = {ndim, shape, U1};
    struct label_value v = val("0");
    struct errbuf err = {{0}};
    size_t count;
    int rc = label_run(&blk, in, &v, &I4, out, NULL, &count, &err);
    if (rc)
        fprintf(stderr, "label_run: %s\n", err.msg);
    return rc ? rc : (long)count;
}

static void check_labels(const int32_t *got, const int32_t *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += got[i] != want[i];
    CHECK_EQ_INT(bad, 0);
}

static void test_empty_and_full(void)
{
    uint64_t shape[2] = {3, 5};
    uint8_t in[15] = {0};
    int32_t out[15], zero[15] = {0}, ones[15];
    memset(out, 0x55, sizeof out);
    CHECK_EQ_INT(label_u8(2, shape, in, out), 0);
    check_labels(out, zero, 15);
    memset(in, 7, sizeof in);
    for (int i = 0; i < 15; i++)
        ones[i] = 1;
    CHECK_EQ_INT(label_u8(2, shape, in, out), 1);
    check_labels(out, ones, 15);
    /* a zero-sized block is no error */
    uint64_t none[2] = {0, 5};
    CHECK_EQ_INT(label_u8(2, none, in, out), 0);
}

static void test_diagonal_not_connected(void)
{
    uint64_t shape[2] = {3, 3};
    const uint8_t in[9] = {1, 0, 1, 0, 1, 0, 1, 0, 1};
    const int32_t want[9] = {1, 0, 2, 0, 3, 0, 4, 0, 5};
    int32_t out[9];
    CHECK_EQ_INT(label_u8(2, shape, in, out), 5);
    check_labels(out, want, 9);
}

/* Prongs that meet only at the bottom: their provisional labels merge late, the later ones
 * into the earlier, and the object after them still gets the next id. */
static void test_u_shapes_merge_late(void)
{
    uint64_t shape[4] = {4, 9};
    const uint8_t in[36] = {
        1, 0, 1, 0, 1, 0, 1, 0, 1, /* */
        1, 0, 1, 0, 1, 0, 1, 0, 0, /* */
        1, 1, 1, 0, 1, 1, 1, 0, 1, /* */
        0, 0, 1, 1, 1, 0, 0, 0, 1,
    };
    const int32_t want[36] = {
        1, 0, 1, 0, 1, 0, 1, 0, 2, /* */
        1, 0, 1, 0, 1, 0, 1, 0, 0, /* */
        1, 1, 1, 0, 1, 1, 1, 0, 3, /* */
        0, 0, 1, 1, 1, 0, 0, 0, 3,
    };
    int32_t out[36];
    CHECK_EQ_INT(label_u8(2, shape, in, out), 3);
    check_labels(out, want, 36);
    /* a spiral: the root must end up the first element even when a later prong's label
     * reaches the first one through a chain */
    uint64_t sh2[2] = {5, 5};
    const uint8_t sp[25] = {
        0, 0, 0, 0, 1, /* */
        1, 1, 1, 0, 1, /* */
        1, 0, 1, 0, 1, /* */
        1, 0, 0, 0, 1, /* */
        1, 1, 1, 1, 1,
    };
    int32_t o2[25];
    CHECK_EQ_INT(label_u8(2, sh2, sp, o2), 1);
    for (int i = 0; i < 25; i++)
        CHECK_EQ_INT(o2[i], sp[i]);
}

static void test_numbering_order(void)
{
    /* object B's lowest row is lower than A's, but A's first element comes first in C order */
    uint64_t shape[2] = {4, 6};
    const uint8_t in[24] = {
        0, 0, 0, 0, 1, 1, /* */
        1, 0, 0, 0, 0, 1, /* */
        1, 0, 1, 0, 0, 1, /* */
        1, 0, 1, 0, 0, 0,
    };
    const int32_t want[24] = {
        0, 0, 0, 0, 1, 1, /* */
        2, 0, 0, 0, 0, 1, /* */
        2, 0, 3, 0, 0, 1, /* */
        2, 0, 3, 0, 0, 0,
    };
    int32_t out[24];
    CHECK_EQ_INT(label_u8(2, shape, in, out), 3);
    check_labels(out, want, 24);
}

static void test_1d(void)
{
    uint64_t shape[1] = {10};
    const uint8_t in[10] = {0, 1, 1, 0, 1, 0, 0, 1, 1, 1};
    const int32_t want[10] = {0, 1, 1, 0, 2, 0, 0, 3, 3, 3};
    int32_t out[10];
    CHECK_EQ_INT(label_u8(1, shape, in, out), 3);
    check_labels(out, want, 10);
    /* a column (10, 1) is the same line */
    uint64_t col[2] = {10, 1};
    CHECK_EQ_INT(label_u8(2, col, in, out), 3);
    check_labels(out, want, 10);
}

static void test_3d(void)
{
    /* two planes: (0,0,0) and (1,0,0) touch through z; (0,1,1) and (1,1,2) only diagonally */
    uint64_t shape[3] = {2, 2, 3};
    const uint8_t in[12] = {1, 0, 0, 0, 1, 0, /* z = 0 */ 1, 0, 0, 0, 0, 1};
    const int32_t want[12] = {1, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 3};
    int32_t out[12];
    CHECK_EQ_INT(label_u8(3, shape, in, out), 3);
    check_labels(out, want, 12);
    /* a length-1 middle axis changes nothing */
    uint64_t sq[4] = {2, 1, 2, 3};
    CHECK_EQ_INT(label_u8(4, sq, in, out), 3);
    check_labels(out, want, 12);
}

static void test_4d(void)
{
    /* shape 2x2x2x2: (0,0,0,0) connects to (1,0,0,0) only through axis 0; (0,1,1,1) to
     * (1,1,1,1) through axis 0 too, and (1,1,1,0) to (1,1,1,1) along the last axis */
    uint64_t shape[4] = {2, 2, 2, 2};
    uint8_t in[16] = {0};
    in[0] = 1;  /* (0,0,0,0) */
    in[8] = 1;  /* (1,0,0,0) */
    in[7] = 1;  /* (0,1,1,1) */
    in[14] = 1; /* (1,1,1,0) */
    in[15] = 1; /* (1,1,1,1) */
    int32_t want[16] = {0}, out[16];
    want[0] = want[8] = 1;
    want[7] = 2;
    want[14] = want[15] = 2; /* (1,1,1,1) touches (0,1,1,1) along axis 0 */
    CHECK_EQ_INT(label_u8(4, shape, in, out), 2);
    check_labels(out, want, 16);
}

/* Overflow of the output dtype: the ROI fails with the count and the dtype, writing nothing. */
static void test_overflow(void)
{
    uint64_t shape[1] = {600};
    uint8_t in[600] = {0};
    for (int i = 0; i < 600; i += 2)
        in[i] = 1; /* 300 objects */
    uint8_t out[600];
    memset(out, 0xab, sizeof out);
    struct label_block blk = {1, shape, U1};
    struct label_value v = val("0");
    struct errbuf err = {{0}};
    size_t count = 99;
    CHECK_EQ_INT(label_run(&blk, in, &v, &U1, out, NULL, &count, &err), -EOVERFLOW);
    CHECK_STR_CONTAINS(err.msg, "300 objects");
    CHECK_STR_CONTAINS(err.msg, "uint8");
    CHECK_EQ_INT(count, 0);
    CHECK_EQ_INT(out[0], 0xab);
    /* 255 fit uint8; 128 do not fit int8, 127 do */
    shape[0] = 510;
    CHECK_EQ_INT(label_run(&blk, in, &v, &U1, out, NULL, &count, &err), 0);
    CHECK_EQ_INT(count, 255);
    CHECK_EQ_INT(out[508], 255);
    shape[0] = 256;
    CHECK_EQ_INT(label_run(&blk, in, &v, &I1, out, NULL, &count, &err), -EOVERFLOW);
    CHECK_STR_CONTAINS(err.msg, "128 objects");
    CHECK_STR_CONTAINS(err.msg, "int8");
    shape[0] = 254;
    CHECK_EQ_INT(label_run(&blk, in, &v, &I1, out, NULL, &count, &err), 0);
    CHECK_EQ_INT(count, 127);
    /* float16 holds ids exactly up to 2048; bool holds one object */
    uint64_t big[1] = {4098};
    uint8_t *in2 = calloc(4098, 1);
    uint16_t *o2 = malloc(4098 * 2);
    for (int i = 0; i < 4098; i += 2)
        in2[i] = 1; /* 2049 objects */
    blk.shape = big;
    CHECK_EQ_INT(label_run(&blk, in2, &v, &F2, o2, NULL, &count, &err), -EOVERFLOW);
    CHECK_STR_CONTAINS(err.msg, "2049 objects");
    CHECK_STR_CONTAINS(err.msg, "float16");
    big[0] = 4096;
    CHECK_EQ_INT(label_run(&blk, in2, &v, &F2, o2, NULL, &count, &err), 0);
    CHECK_EQ_INT(o2[4094], 0x6800); /* 2048.0 in binary16 */
    CHECK_EQ_INT(o2[2], 0x4000);    /* 2.0 */
    big[0] = 3;
    CHECK_EQ_INT(label_run(&blk, in2, &v, &B1, o2, NULL, &count, &err), -EOVERFLOW);
    free(in2);
    free(o2);
}

/* Labels a 1-D block of 6 elements of dt, `in > value`; returns the foreground as a bitmask. */
static unsigned fg_bits(const struct dtype *dt, const void *in, const char *value)
{
    uint64_t shape[1] = {6};
    struct label_block blk = {1, shape, *dt};
    struct label_value v = val(value);
    struct errbuf err = {{0}};
    int64_t out[6];
    int rc = label_run(&blk, in, &v, &I8, out, NULL, NULL, &err);
    CHECK_EQ_INT(rc, 0);
    unsigned bits = 0;
    for (int i = 0; i < 6; i++)
        bits |= (out[i] != 0) << i;
    return bits;
}

/* `in > value` compared exactly, in the input's type. */
static void test_dtypes_exact(void)
{
    const int64_t i8[6] = {INT64_MIN, -1, 0, (1LL << 62) + 1, (1LL << 62) + 2, INT64_MAX};
    CHECK_EQ_INT(fg_bits(&I8, i8, "4611686018427387905"), 0x30); /* 2^62 + 1: exact */
    CHECK_EQ_INT(fg_bits(&I8, i8, "-9223372036854775808"), 0x3e);
    CHECK_EQ_INT(fg_bits(&I8, i8, "-9223372036854775809"), 0x3f);
    CHECK_EQ_INT(fg_bits(&I8, i8, "9223372036854775807"), 0);
    CHECK_EQ_INT(fg_bits(&I8, i8, "-0.5"), 0x3c);
    CHECK_EQ_INT(fg_bits(&I8, i8, "1e300"), 0);
    CHECK_EQ_INT(fg_bits(&I8, i8, "-inf"), 0x3f);
    CHECK_EQ_INT(fg_bits(&I8, i8, "nan"), 0);
    const uint64_t u8[6] = {0, 1, UINT64_MAX - 2, UINT64_MAX - 1, UINT64_MAX, 5};
    CHECK_EQ_INT(fg_bits(&U8, u8, "18446744073709551614"), 0x10);
    CHECK_EQ_INT(fg_bits(&U8, u8, "-1"), 0x3f);
    CHECK_EQ_INT(fg_bits(&U8, u8, "0.5"), 0x3e);
    CHECK_EQ_INT(fg_bits(&U8, u8, "99999999999999999999999"), 0);
    const int16_t i2[6] = {-300, -6, -5, -4, 0, 300};
    CHECK_EQ_INT(fg_bits(&I2, i2, "-5"), 0x38);
    CHECK_EQ_INT(fg_bits(&I2, i2, "-5.5"), 0x3c);
    CHECK_EQ_INT(fg_bits(&I2, i2, "-40000"), 0x3f);
    CHECK_EQ_INT(fg_bits(&I2, i2, "40000"), 0);
    const int8_t i1[6] = {-128, -1, 0, 1, 126, 127};
    CHECK_EQ_INT(fg_bits(&I1, i1, "126"), 0x20);
    CHECK_EQ_INT(fg_bits(&I1, i1, "-128"), 0x3e);
    const uint8_t u1[6] = {0, 1, 2, 254, 255, 3};
    CHECK_EQ_INT(fg_bits(&U1, u1, "254"), 0x10);
    CHECK_EQ_INT(fg_bits(&U1, u1, "255"), 0);
    CHECK_EQ_INT(fg_bits(&U1, u1, "1.9999"), 0x3c);
    const uint16_t u2[6] = {0, 65535, 1, 2, 3, 4};
    CHECK_EQ_INT(fg_bits(&U2, u2, "2"), 0x32);
    const int32_t i4[6] = {INT32_MIN, -1, 0, 1, INT32_MAX, 7};
    CHECK_EQ_INT(fg_bits(&I4, i4, "0"), 0x38);
    const uint32_t u4[6] = {0, UINT32_MAX, 1, 2, 3, 4};
    CHECK_EQ_INT(fg_bits(&U4, u4, "4294967294"), 0x02);
    /* float32: 0.1f is above 0.1 in double, but numpy compares float32(0.1) in float32 */
    const float f4[6] = {0.1f, nextafterf(0.1f, 1), NAN, -INFINITY, INFINITY, -0.0f};
    CHECK_EQ_INT(fg_bits(&F4, f4, "0.1"), 0x12);
    CHECK_EQ_INT(fg_bits(&F4, f4, "-inf"), 0x33);
    CHECK_EQ_INT(fg_bits(&F4, f4, "1e300"), 0); /* float32(1e300) is inf */
    CHECK_EQ_INT(fg_bits(&F4, f4, "3.4e38"), 0x10);
    CHECK_EQ_INT(fg_bits(&F4, f4, "-1e-50"), 0x13); /* float32(-1e-50) is -0: -0 > -0 false */
    const double f8[6] = {0.1, nextafter(0.1, 1), NAN, -1, 1e300, 0};
    CHECK_EQ_INT(fg_bits(&F8, f8, "0.1"), 0x12);
    CHECK_EQ_INT(fg_bits(&F8, f8, "nan"), 0);
    /* float16: half(0.1) = 0x2e66; 0x2e67 is above it; 0x7e00 is NaN; 0xfc00 is -inf; 0x8000
     * is -0; 0xae66 is -half(0.1) */
    const uint16_t f2[6] = {0x2e66, 0x2e67, 0x7e00, 0xfc00, 0x8000, 0xae66};
    CHECK_EQ_INT(fg_bits(&F2, f2, "0.1"), 0x02);
    CHECK_EQ_INT(fg_bits(&F2, f2, "-0.1"), 0x13);
    CHECK_EQ_INT(fg_bits(&F2, f2, "-1e9"), 0x33); /* half(-1e9) is -inf */
    CHECK_EQ_INT(fg_bits(&F2, f2, "0"), 0x03);
    const uint8_t b1[6] = {0, 1, 1, 0, 1, 0};
    CHECK_EQ_INT(fg_bits(&B1, b1, "0"), 0x16);
    CHECK_EQ_INT(fg_bits(&B1, b1, "-0.5"), 0x3f);
    CHECK_EQ_INT(fg_bits(&B1, b1, "1"), 0);
    struct label_value v;
    CHECK_EQ_INT(label_value_parse("x", &v), -EINVAL);
    CHECK_EQ_INT(label_value_parse("", &v), -EINVAL);
    CHECK_EQ_INT(label_value_parse("1,5", &v), -EINVAL);
}

/* Ids written in each output dtype. */
static void test_output_dtypes(void)
{
    uint64_t shape[1] = {5};
    const uint8_t in[5] = {1, 0, 1, 0, 1};
    struct label_block blk = {1, shape, U1};
    struct label_value v = val("0");
    struct errbuf err = {{0}};
    const struct dtype *outs[] = {&U1, &U2, &U4, &U8, &I1, &I2, &I4, &I8, &F2, &F4, &F8};
    for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
        unsigned char out[48];
        double back[5];
        memset(out, 0xee, sizeof out);
        CHECK_EQ_INT(label_run(&blk, in, &v, outs[k], out, NULL, NULL, &err), 0);
        dtype_to_double(outs[k], out, back, 5);
        CHECK(back[0] == 1 && back[1] == 0 && back[2] == 2 && back[3] == 0 && back[4] == 3);
        CHECK_EQ_INT(out[5 * outs[k]->size], 0xee); /* nothing past the block */
    }
}

/* ---- against a flood fill ---- */

/* The definition itself: scan in C order; an unlabelled foreground element starts a new
 * object, flooded through face neighbours. */
static size_t reference(int ndim, const uint64_t *shape, const uint8_t *fg, int64_t *out)
{
    size_t n = 1, stride[ROIFS_MAX_DIM], *stack;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = n;
        n *= shape[d];
    }
    memset(out, 0, n * sizeof *out);
    stack = malloc(n * sizeof *stack);
    int64_t next = 0;
    for (size_t i = 0; i < n; i++) {
        if (!fg[i] || out[i])
            continue;
        size_t top = 0;
        out[i] = ++next;
        stack[top++] = i;
        while (top) {
            size_t p = stack[--top];
            for (int d = 0; d < ndim; d++) {
                size_t c = p / stride[d] % shape[d];
                size_t nb[2] = {p - stride[d], p + stride[d]};
                bool ok[2] = {c > 0, c + 1 < shape[d]};
                for (int k = 0; k < 2; k++)
                    if (ok[k] && fg[nb[k]] && !out[nb[k]]) {
                        out[nb[k]] = next;
                        stack[top++] = nb[k];
                    }
            }
        }
    }
    free(stack);
    return (size_t)next;
}

static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rnd(void)
{
    return check_xorshift(&rng_state);
}

/* One random block of the given shape, `in > value` with int16 input, against the reference;
 * false (with a message) on a mismatch. */
static bool random_case(int ndim, const uint64_t *shape, struct label_scratch *scratch, int trial)
{
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    int density = (int)(rnd() % 100);
    int16_t *in = malloc(n * sizeof *in);
    uint8_t *fg = malloc(n);
    int64_t *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++) {
        in[i] = (int16_t)((int)(rnd() % 100) - 60);
        fg[i] = in[i] > density - 60;
    }
    char value[16];
    snprintf(value, sizeof value, "%d", density - 60);
    struct label_block blk = {ndim, shape, I2};
    struct label_value v = val(value);
    struct errbuf err = {{0}};
    size_t count = 0, wcount = reference(ndim, shape, fg, want);
    int rc = label_run(&blk, in, &v, &I8, got, scratch, &count, &err);
    bool ok = !rc && count == wcount && !memcmp(got, want, n * sizeof *got);
    if (!ok)
        fprintf(stderr, "trial %d (%d-D, %zu elements): rc %d, %zu objects, want %zu\n", trial,
                ndim, n, rc, count, wcount);
    free(in);
    free(fg);
    free(want);
    free(got);
    return ok;
}

/* Random blocks, 1-D to 5-D, 9-D, and ROIFS_MAX_DIM axes of which some have length 1; sparse
 * to dense; one scratch reused for half of them. */
static void test_random_vs_reference(void)
{
    struct label_scratch scratch = {0};
    int mismatches = 0;
    for (int trial = 0; trial < 700; trial++) {
        int ndim = trial < 600 ? 1 + trial % 5 : trial < 650 ? 9 : ROIFS_MAX_DIM;
        uint64_t shape[ROIFS_MAX_DIM];
        for (int d = 0; d < ndim; d++) {
            uint64_t max = ndim == 1 ? 300 : ndim == 2 ? 40 : ndim == 3 ? 12 : ndim <= 5 ? 6 : 2;
            shape[d] = 1 + rnd() % max;
        }
        if (ndim == ROIFS_MAX_DIM) /* 11 axes of 1 or 2: at most 2048 elements */
            for (int d = 0; d < ndim; d++)
                shape[d] = d % 3 == 1 ? shape[d] : 1;
        if (!random_case(ndim, shape, trial % 2 ? &scratch : NULL, trial) && mismatches++ > 3)
            break;
    }
    CHECK_EQ_INT(mismatches, 0);
    label_scratch_free(&scratch);
}

/* ---- the builtin ---- */

static struct proc *make_label_proc(const char *param, struct errbuf *err)
{
    static char path[] = "/tmp/test_label.ini";
    struct config cfg;
    struct config_param pm = {.name = (char *)"value", .value = (char *)param, .line = 12};
    memset(&cfg, 0, sizeof cfg);
    cfg.path = path;
    cfg.dir = (char *)"/tmp";
    cfg.proc_kind = PROC_BUILTIN;
    cfg.proc_value = (char *)"label";
    cfg.threads = 1;
    cfg.params = param ? &pm : NULL;
    cfg.nparams = param ? 1 : 0;
    struct proc *p = NULL;
    return proc_create(&cfg, &p, err) ? NULL : p;
}

static int run_builtin(struct proc *p, const struct dtype *odt, const int16_t *in, void *out,
                       struct errbuf *err)
{
    uint64_t start[2] = {0, 0}, stop[2] = {2, 4};
    struct proc_request rq = {
        .ndim = 2,
        .start = start,
        .stop = stop,
        .in_start = start,
        .in_shape = stop,
        .in_dtype = I2,
        .out_dtype = *odt,
        .in = in,
        .in_nbytes = 16,
        .out = out,
        .out_nbytes = 8 * odt->size,
    };
    return proc_run(p, &rq, err);
}

static void test_builtin(void)
{
    struct errbuf err = {{0}};
    const int16_t in[8] = {-3, 5, 0, 9, -3, -2, 0, 9};
    struct proc *p = make_label_proc(NULL, &err); /* value 0 */
    CHECK(p != NULL);
    if (!p)
        return;
    uint16_t out[8];
    CHECK_EQ_INT(run_builtin(p, &U2, in, out, &err), 0);
    const uint16_t want0[8] = {0, 1, 0, 2, 0, 0, 0, 2};
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(out[i], want0[i]);
    proc_destroy(p);
    p = make_label_proc("-3", &err);
    CHECK(p != NULL);
    if (!p)
        return;
    CHECK_EQ_INT(run_builtin(p, &U2, in, out, &err), 0);
    const uint16_t want1[8] = {0, 1, 1, 1, 0, 1, 1, 1};
    for (int i = 0; i < 8; i++)
        CHECK_EQ_INT(out[i], want1[i]);
    proc_destroy(p);
    /* the count does not fit bool: the ROI fails with a message */
    p = make_label_proc("0", &err);
    uint8_t ob[8];
    CHECK_EQ_INT(run_builtin(p, &B1, in, ob, &err), -EOVERFLOW);
    CHECK_STR_CONTAINS(err.msg, "2 objects do not fit the output dtype bool");
    proc_destroy(p);
    CHECK(make_label_proc("lots", &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "test_label.ini:12: param.value: 'lots' is not a number");
}

/* ---- bench mode ---- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* --bench IN.raw SHAPE(a,b,..) DTYPE VALUE OUT.raw REPS: prints the objects and the median
 * and minimum wall time of REPS calls (one scratch reused, as a compute thread would), writes
 * the int32 labels of the last call. */
static int bench(char **argv)
{
    uint64_t shape[ROIFS_MAX_DIM];
    int ndim = parse_u64_list(argv[3], shape, ROIFS_MAX_DIM), reps = atoi(argv[7]);
    struct dtype dt;
    struct errbuf err = {{0}};
    struct label_value v;
    if (ndim < 1 || reps < 1 || dtype_parse(argv[4], &dt, &err) || label_value_parse(argv[5], &v))
        return fprintf(stderr, "usage: test_label --bench IN SHAPE DTYPE VALUE OUT REPS\n"), 2;
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    void *in = malloc(n * dt.size);
    int32_t *out = malloc(n * sizeof *out);
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(in, dt.size, n, f) != n)
        return fprintf(stderr, "cannot read %zu elements from %s\n", n, argv[2]), 2;
    fclose(f);
    struct label_block blk = {ndim, shape, dt};
    struct label_scratch scratch = {0};
    double *t = malloc((size_t)reps * sizeof *t);
    size_t count = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (label_run(&blk, in, &v, &I4, out, &scratch, &count, &err))
            return fprintf(stderr, "%s\n", err.msg), 1;
        t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    printf("objects %zu median_ms %.3f min_ms %.3f\n", count, t[reps / 2] * 1e3, t[0] * 1e3);
    f = fopen(argv[6], "wb");
    if (!f || fwrite(out, sizeof *out, n, f) != n)
        return fprintf(stderr, "cannot write %s\n", argv[6]), 2;
    fclose(f);
    label_scratch_free(&scratch);
    free(t);
    free(in);
    free(out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 8 && !strcmp(argv[1], "--bench"))
        return bench(argv);
    RUN(test_empty_and_full);
    RUN(test_diagonal_not_connected);
    RUN(test_u_shapes_merge_late);
    RUN(test_numbering_order);
    RUN(test_1d);
    RUN(test_3d);
    RUN(test_4d);
    RUN(test_overflow);
    RUN(test_dtypes_exact);
    RUN(test_output_dtypes);
    RUN(test_random_vs_reference);
    RUN(test_builtin);
    return check_done();
}
