/* test_proc_builtin.c: unit tests of the builtin processors: casting of copy, add, multiply and
 * threshold, gaussian against scipy, parameter errors, delay and its shutdown. */
#include "proc_harness.h"

#include <math.h>

static void test_copy(void)
{
    uint16_t a[5] = {0, 1, 300, 65535, 7}, b[5];
    CHECK_EQ_INT(run_builtin("copy", NULL, U2, a, U2, b, 5), 0);
    CHECK(!memcmp(a, b, sizeof a));
    float f[5];
    CHECK_EQ_INT(run_builtin("copy", NULL, U2, a, F4, f, 5), 0);
    CHECK(f[2] == 300.0f && f[3] == 65535.0f);
    /* f4 -> u2: round half to even, then clip */
    float g[7] = {0.5f, 1.5f, 2.5f, -0.5f, 70000.0f, -3.0f, 2.6f};
    uint16_t h[7];
    CHECK_EQ_INT(run_builtin("copy", NULL, F4, g, U2, h, 7), 0);
    uint16_t want[7] = {0, 2, 2, 0, 65535, 0, 3};
    CHECK(!memcmp(h, want, sizeof want));
    /* 64-bit integers stay exact */
    int64_t i8[2] = {INT64_MAX - 1, -(INT64_C(1) << 62) - 1}, j8[2];
    CHECK_EQ_INT(run_builtin("copy", NULL, I8, i8, I8, j8, 2), 0);
    CHECK(j8[0] == INT64_MAX - 1 && j8[1] == i8[1]);
    uint64_t u8[2] = {UINT64_MAX, (UINT64_C(1) << 63) + 3};
    int64_t k8[2];
    CHECK_EQ_INT(run_builtin("copy", NULL, U8, u8, I8, k8, 2), 0);
    CHECK(k8[0] == INT64_MAX && k8[1] == INT64_MAX);
    uint8_t bo[3];
    float bf[3] = {0.0f, 0.25f, -2.0f};
    CHECK_EQ_INT(run_builtin("copy", NULL, F4, bf, B1, bo, 3), 0);
    CHECK(bo[0] == 0 && bo[1] == 1 && bo[2] == 1);
}

static void test_add_multiply(void)
{
    uint8_t a[4] = {0, 1, 200, 255}, b[4];
    CHECK_EQ_INT(run_builtin("add", "value=300", U1, a, U1, b, 4), 0);
    CHECK(b[0] == 255 && b[1] == 255 && b[3] == 255);
    CHECK_EQ_INT(run_builtin("add", NULL, U1, a, U1, b, 4), 0); /* value 1 */
    CHECK(b[0] == 1 && b[2] == 201 && b[3] == 255);
    int16_t c[4] = {3, 4, -3, -4}, d[4];
    CHECK_EQ_INT(run_builtin("add", "value=-1.5", I2, c, I2, d, 4), 0);
    CHECK(d[0] == 2 && d[1] == 2 && d[2] == -4 && d[3] == -6); /* 1.5 2.5 -4.5 -5.5 */
    int64_t e[1] = {(INT64_C(1) << 62) + 1}, f[1];
    CHECK_EQ_INT(run_builtin("add", "value=1", I8, e, I8, f, 1), 0);
    CHECK(f[0] == (INT64_C(1) << 62) + 2);
    double g[3] = {1.0, -2.0, 0.5}, h[3];
    CHECK_EQ_INT(run_builtin("multiply", "value=2.5", F8, g, F8, h, 3), 0);
    CHECK(h[0] == 2.5 && h[1] == -5.0 && h[2] == 1.25);
    CHECK_EQ_INT(run_builtin("multiply", "value=-1", U1, a, U1, b, 4), 0);
    CHECK(b[0] == 0 && b[1] == 0 && b[3] == 0);
    /* several blocks, and an odd tail */
    size_t n = 10007;
    uint16_t *in = malloc(n * 2);
    float *out = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        in[i] = (uint16_t)(i * 7);
    CHECK_EQ_INT(run_builtin("add", "value=0.5", U2, in, F4, out, n), 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += out[i] != (float)in[i] + 0.5f;
    CHECK_EQ_INT(bad, 0);
    free(in);
    free(out);
}

static void test_threshold(void)
{
    float a[5] = {0.5f, 1.0f, 1.5f, NAN, -9.0f};
    uint8_t b[5];
    CHECK_EQ_INT(run_builtin("threshold", "value=1", F4, a, U1, b, 5), 0);
    CHECK(b[0] == 0 && b[1] == 0 && b[2] == 1 && b[3] == 0 && b[4] == 0);
    CHECK_EQ_INT(run_builtin("threshold", NULL, F4, a, B1, b, 5), 0); /* value 0 */
    CHECK(b[0] == 1 && b[1] == 1 && b[4] == 0);
    uint64_t c[2] = {(UINT64_C(1) << 60) + 1, UINT64_C(1) << 60};
    uint16_t d[2];
    CHECK_EQ_INT(run_builtin("threshold", "value=1152921504606846976", U8, c, U2, d, 2), 0);
    CHECK(d[0] == 1 && d[1] == 0);
}

static void check_create_error(const char *name, const char *param, const char *want)
{
    struct errbuf err = {{0}};
    const char *params[1] = {param};
    struct proc *p = make_proc(PROC_BUILTIN, name, params, param ? 1 : 0, 0, &err);
    CHECK(p == NULL);
    if (p)
        proc_destroy(p);
    else
        CHECK_STR_CONTAINS(err.msg, want);
}

static void test_builtin_errors(void)
{
    char want[256];
    snprintf(want, sizeof want, "%s:10: param.value: 'abc' is not a number", cfg_path);
    check_create_error("add", "value=abc", want);
    snprintf(want, sizeof want, "%s:10: param.sigma", cfg_path);
    check_create_error("gaussian", "sigma=1,x", want);
    check_create_error("gaussian", "sigma=-1", want);
    check_create_error("gaussian", "sigma=", want);
    snprintf(want, sizeof want, "%s:10: param.delay", cfg_path);
    check_create_error("copy", "delay=-2", want);
    check_create_error("copy", "delay=soon", want);
    snprintf(want, sizeof want, "%s:10: param.value: unknown parameter", cfg_path);
    check_create_error("copy", "value=1", want);
    snprintf(want, sizeof want, "%s:10: param.sigma: unknown parameter", cfg_path);
    check_create_error("add", "sigma=1", want);
    check_create_error("blur", NULL, "builtin: unknown 'blur' (expected copy, add, multiply");
    struct errbuf err = {{0}};
    CHECK(make_proc(PROC_WORKER, " ", NULL, 0, 0, &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "[process] worker: empty command");
    /* a sigma list must match the array's dimensions */
    const char *params[1] = {"sigma=1,2,3"};
    struct proc *p = make_proc(PROC_BUILTIN, "gaussian", params, 1, 0, &err);
    CHECK(p != NULL);
    double a[4] = {0}, b[4];
    struct req r;
    uint64_t shape[2] = {2, 2};
    make_req(&r, 2, shape, F8, F8, a, b);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "param.sigma: 3 values for a 2-dimensional array");
    CHECK_EQ_INT(p->calls, 1);
    proc_destroy(p);
}

/* Blurs pseudo-random float64 data of the given shape with roifs and with scipy, and returns
 * the largest relative difference (or -1 when scipy is unavailable). */
static double gaussian_vs_scipy(int ndim, const uint64_t *shape, const char *sigma)
{
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= (size_t)shape[d];
    double *in = malloc(n * 8), *out = malloc(n * 8), *ref = malloc(n * 8);
    uint32_t seed = 12345;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        in[i] = (double)(seed >> 8) / (1 << 24) * 1000.0 - 200.0;
    }
    char param[64], shape_s[64] = "", in_path[128], out_path[128], cmd[1024];
    snprintf(param, sizeof param, "sigma=%s", sigma);
    for (int d = 0; d < ndim; d++)
        snprintf(shape_s + strlen(shape_s), sizeof shape_s - strlen(shape_s), "%llu,",
                 (unsigned long long)shape[d]);
    struct errbuf err = {{0}};
    const char *params[1] = {param};
    struct proc *p = make_proc(PROC_BUILTIN, "gaussian", params, 1, 0, &err);
    struct req r;
    make_req(&r, ndim, shape, F8, F8, in, out);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    proc_destroy(p);
    snprintf(in_path, sizeof in_path, "%s/g_in.f8", tmpdir);
    snprintf(out_path, sizeof out_path, "%s/g_out.f8", tmpdir);
    FILE *f = fopen(in_path, "wb");
    fwrite(in, 8, n, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import sys, numpy as np, scipy.ndimage as nd\n"
             "a = np.fromfile(sys.argv[1]).reshape((%s))\n"
             "s = [float(x) for x in sys.argv[3].split(\",\")]\n"
             "s = s[0] if len(s) == 1 else s\n"
             "nd.gaussian_filter(a, s, mode=\"reflect\", truncate=4.0).tofile(sys.argv[2])' "
             "%s %s %s 2>/dev/null",
             shape_s, in_path, out_path, sigma);
    double worst = -1;
    if (system(cmd) == 0 && (f = fopen(out_path, "rb"))) {
        CHECK_EQ_INT(fread(ref, 8, n, f), n);
        fclose(f);
        worst = 0;
        for (size_t i = 0; i < n; i++) {
            double rel = fabs(out[i] - ref[i]) / (fabs(ref[i]) + 1e-300);
            worst = rel > worst ? rel : worst;
        }
    }
    free(in);
    free(out);
    free(ref);
    return worst;
}

static void test_gaussian(void)
{
    uint64_t s2[2] = {13, 17}, s3[3] = {1, 3, 10}, s3b[3] = {4, 3, 5};
    double w[5] = {gaussian_vs_scipy(2, s2, "1.5,0.8"), gaussian_vs_scipy(2, s2, "0,2.5"),
                   gaussian_vs_scipy(2, s2, "1"), gaussian_vs_scipy(3, s3, "2"),
                   gaussian_vs_scipy(3, s3b, "3,2,0.5")};
    if (w[0] < 0) {
        printf("# skip: /usr/bin/python3 with numpy and scipy is not available\n");
        return;
    }
    for (int i = 0; i < 5; i++) {
        if (!(w[i] >= 0 && w[i] < 1e-9))
            fprintf(stderr, "gaussian case %d: relative difference %g\n", i, w[i]);
        CHECK(w[i] >= 0 && w[i] < 1e-9);
    }
    /* integer output: a constant image stays constant */
    uint8_t a[60], b[60];
    memset(a, 100, sizeof a);
    uint64_t shape[2] = {6, 10};
    struct errbuf err = {{0}};
    const char *params[1] = {"sigma=2"};
    struct proc *p = make_proc(PROC_BUILTIN, "gaussian", params, 1, 0, &err);
    struct req r;
    make_req(&r, 2, shape, U1, U1, a, b);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(!memcmp(a, b, sizeof a));
    proc_destroy(p);
}

static void test_delay(void)
{
    struct errbuf err = {{0}};
    const char *short_delay[1] = {"delay=0.2"}, *long_delay[1] = {"delay=30"};
    uint8_t a[4] = {1, 2, 3, 4}, b[4];
    uint64_t shape[1] = {4};
    struct req r;
    make_req(&r, 1, shape, U1, U1, a, b);
    struct proc *p = make_proc(PROC_BUILTIN, "add", short_delay, 1, 0, &err);
    double t0 = now_monotonic();
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(now_monotonic() - t0 >= 0.19);
    CHECK(b[3] == 5);
    proc_destroy(p);

    p = make_proc(PROC_BUILTIN, "copy", long_delay, 1, 0, &err);
    struct run_arg ra = {.p = p, .rq = &r.rq};
    pthread_t th;
    pthread_create(&th, NULL, run_thread, &ra);
    usleep(200000);
    proc_shutdown(p);
    pthread_join(th, NULL);
    CHECK_EQ_INT(ra.rc, -ECANCELED);
    CHECK(ra.elapsed < 1.0);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -ECANCELED);
    proc_destroy(p);
}

int main(void)
{
    if (proc_test_begin("proc-builtin"))
        return 1;
    RUN(test_copy);
    RUN(test_add_multiply);
    RUN(test_threshold);
    RUN(test_builtin_errors);
    RUN(test_gaussian);
    RUN(test_delay);
    return proc_test_end();
}
