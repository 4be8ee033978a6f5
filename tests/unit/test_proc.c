/* test_proc.c: unit tests of the processors: builtins (casting, gaussian against scipy, delay),
 * the command processor (environment, pipes, failures, timeouts, concurrency, shutdown), the
 * worker processor (protocol, broken workers, replacement, shutdown) and plugins. */
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "proc/proc.h"

/* config.c may not be linked into this test: no line numbers then. */
__attribute__((weak)) int config_line(const struct config *cfg, const char *section,
                                      const char *key)
{
    (void)cfg, (void)section, (void)key;
    return 0;
}

static char tmpdir[64];
static char cfg_path[128];

static const struct dtype U1 = {DT_UINT, 1, false}, U2 = {DT_UINT, 2, false},
                          I2 = {DT_INT, 2, false}, I8 = {DT_INT, 8, false},
                          U8 = {DT_UINT, 8, false}, F4 = {DT_FLOAT, 4, false},
                          F8 = {DT_FLOAT, 8, false}, B1 = {DT_BOOL, 1, false};

/* A hand-made configuration; params as "name=value" strings, on lines 10, 11, ... */
static void make_cfg(struct config *cfg, struct config_param *pm, enum proc_kind kind,
                     const char *value, const char *const *params, int nparams)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->path = cfg_path;
    cfg->dir = tmpdir;
    cfg->proc_kind = kind;
    cfg->proc_value = (char *)value;
    cfg->threads = 4;
    for (int i = 0; i < nparams; i++) {
        const char *eq = strchr(params[i], '=');
        pm[i].name = strndup(params[i], (size_t)(eq - params[i]));
        pm[i].value = strdup(eq + 1);
        pm[i].line = 10 + i;
    }
    cfg->params = pm;
    cfg->nparams = nparams;
}

static void free_params(struct config *cfg)
{
    for (int i = 0; i < cfg->nparams; i++) {
        free(cfg->params[i].name);
        free(cfg->params[i].value);
    }
}

/* Creates a processor from the kind, value and params; NULL (with err) on failure. */
static struct proc *make_proc(enum proc_kind kind, const char *value, const char *const *params,
                              int nparams, double timeout, struct errbuf *err)
{
    struct config cfg;
    struct config_param pm[8];
    make_cfg(&cfg, pm, kind, value, params, nparams);
    cfg.timeout = timeout;
    struct proc *p = NULL;
    int rc = proc_create(&cfg, &p, err);
    free_params(&cfg);
    CHECK(rc == 0 || p == NULL);
    return rc ? NULL : p;
}

/* A request over a 1-D (or given) read region, the ROI being the whole region. */
struct req {
    struct proc_request rq;
    uint64_t start[4], stop[4], in_start[4], shape[4];
};

static void make_req(struct req *r, int ndim, const uint64_t *shape, struct dtype in,
                     struct dtype out, const void *inbuf, void *outbuf)
{
    memset(r, 0, sizeof *r);
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        r->shape[d] = shape[d];
        r->stop[d] = shape[d];
        n *= (size_t)shape[d];
    }
    r->rq.ndim = ndim;
    r->rq.start = r->start;
    r->rq.stop = r->stop;
    r->rq.in_start = r->in_start;
    r->rq.in_shape = r->shape;
    r->rq.in_dtype = in;
    r->rq.out_dtype = out;
    r->rq.in = inbuf;
    r->rq.in_nbytes = n * in.size;
    r->rq.out = outbuf;
    r->rq.out_nbytes = n * out.size;
}

/* Runs builtin `name` with params over n elements of in, into out. */
static int run_builtin(const char *name, const char *param, struct dtype in_dt, const void *in,
                       struct dtype out_dt, void *out, size_t n)
{
    struct errbuf err = {{0}};
    const char *params[1] = {param};
    struct proc *p = make_proc(PROC_BUILTIN, name, params, param ? 1 : 0, 0, &err);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    struct req r;
    uint64_t shape[1] = {n};
    make_req(&r, 1, shape, in_dt, out_dt, in, out);
    int rc = proc_run(p, &r.rq, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    proc_destroy(p);
    return rc;
}

/* ---- builtins ---- */

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

struct run_arg {
    struct proc *p;
    struct proc_request *rq;
    int rc;
    double elapsed;
    struct errbuf err;
};

static void *run_thread(void *arg)
{
    struct run_arg *a = arg;
    double t0 = now_monotonic();
    a->rc = proc_run(a->p, a->rq, &a->err);
    a->elapsed = now_monotonic() - t0;
    return NULL;
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

/* ---- command ---- */

/* Runs a command over n elements (in_dt -> out_dt); returns the rc, message in err. */
static int run_command(const char *command, const char *const *params, int nparams, double timeout,
                       struct dtype in_dt, const void *in, struct dtype out_dt, void *out, size_t n,
                       struct errbuf *err)
{
    struct proc *p = make_proc(PROC_COMMAND, command, params, nparams, timeout, err);
    if (!p)
        return -1000;
    struct req r;
    uint64_t shape[1] = {n};
    make_req(&r, 1, shape, in_dt, out_dt, in, out);
    r.rq.roi = 7;
    int rc = proc_run(p, &r.rq, err);
    proc_destroy(p);
    return rc;
}

static char *read_tmp_file(const char *name)
{
    char path[256], *data = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return file_read_all(path, &data, &len) == 0 ? data : NULL;
}

static void test_command_env(void)
{
    const char *params[3] = {"my-sigma.2=1.5", "Lower=a b", "x=y=z"};
    struct proc *p;
    struct errbuf err = {{0}};
    p = make_proc(PROC_COMMAND, "cat >/dev/null; env | grep ^ROIFS_ | sort > env.txt", params, 3, 0,
                  &err);
    uint16_t in[20] = {0};
    uint8_t out[1];
    struct req r;
    uint64_t shape[2] = {4, 5};
    make_req(&r, 2, shape, U2, U1, in, out);
    r.rq.out_nbytes = 0;
    r.rq.roi = 5;
    uint64_t start[2] = {1, 2}, stop[2] = {3, 4}, in_start[2] = {0, 1};
    r.rq.start = start;
    r.rq.stop = stop;
    r.rq.in_start = in_start;
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    proc_destroy(p);
    char *env = read_tmp_file("env.txt");
    CHECK(env != NULL);
    if (!env)
        return;
    CHECK_STR_CONTAINS(env, "ROIFS_ROI=5\n");
    CHECK_STR_CONTAINS(env, "ROIFS_START=1,2\n");
    CHECK_STR_CONTAINS(env, "ROIFS_STOP=3,4\n");
    CHECK_STR_CONTAINS(env, "ROIFS_IN_START=0,1\n");
    CHECK_STR_CONTAINS(env, "ROIFS_IN_SHAPE=4,5\n");
    CHECK_STR_CONTAINS(env, "ROIFS_IN_DTYPE=<u2\n");
    CHECK_STR_CONTAINS(env, "ROIFS_OUT_DTYPE=|u1\n");
    CHECK_STR_CONTAINS(env, "ROIFS_PARAM_MY_SIGMA_2=1.5\n");
    CHECK_STR_CONTAINS(env, "ROIFS_PARAM_LOWER=a b\n");
    CHECK_STR_CONTAINS(env, "ROIFS_PARAM_X=y=z\n");
    free(env);
    /* the daemon's own environment is passed on, ROIFS_* of ours override it */
    setenv("ROIFS_TEST_INHERITED", "yes", 1);
    setenv("ROIFS_ROI", "stale", 1);
    CHECK_EQ_INT(run_command("test \"$ROIFS_TEST_INHERITED$ROIFS_ROI\" = yes7", NULL, 0, 0, U1, in,
                             U1, out, 0, &err),
                 0);
    unsetenv("ROIFS_ROI");
}

static void test_command_echo(void)
{
    struct errbuf err = {{0}};
    size_t n = 3 << 20; /* more than any pipe buffer, both ways */
    uint8_t *in = malloc(n), *out = malloc(n);
    for (size_t i = 0; i < n; i++)
        in[i] = (uint8_t)(i * 2654435761u >> 13);
    CHECK_EQ_INT(run_command("cat", NULL, 0, 0, U1, in, U1, out, n, &err), 0);
    CHECK(!memcmp(in, out, n));
    /* output much longer than the input */
    float *big = malloc(n * 4);
    memset(big, 0xff, n * 4);
    CHECK_EQ_INT(run_command("cat >/dev/null; head -c 12582912 /dev/zero", NULL, 0, 0, U1, in, F4,
                             big, n, &err),
                 0);
    CHECK(big[0] == 0.0f && big[n - 1] == 0.0f);
    free(big);
    free(in);
    free(out);
}

static void test_command_python(void)
{
    struct errbuf err = {{0}};
    uint16_t in[1000];
    float out[1000];
    for (int i = 0; i < 1000; i++)
        in[i] = (uint16_t)(i * 61);
    int rc =
        run_command("/usr/bin/python3 -c 'import os, sys, numpy as np\n"
                    "a = np.frombuffer(sys.stdin.buffer.read(), os.environ[\"ROIFS_IN_DTYPE\"])\n"
                    "sys.stdout.buffer.write((a + 2).astype(os.environ[\"ROIFS_OUT_DTYPE\"])"
                    ".tobytes())'",
                    NULL, 0, 0, U2, in, F4, out, 1000, &err);
    if (rc == -EIO && strstr(err.msg, "No module named")) {
        printf("# skip: /usr/bin/python3 has no numpy\n");
        return;
    }
    CHECK_EQ_INT(rc, 0);
    int bad = 0;
    for (int i = 0; i < 1000; i++)
        bad += out[i] != (float)in[i] + 2.0f;
    CHECK_EQ_INT(bad, 0);
}

static void test_command_failures(void)
{
    struct errbuf err = {{0}};
    uint8_t in[10] = {0}, out[10];
    CHECK_EQ_INT(run_command("echo first >&2; echo 'ValueError: bad' >&2; echo >&2; exit 2", NULL,
                             0, 0, U1, in, U1, out, 10, &err),
                 -EIO);
    CHECK(!strcmp(err.msg, "exit status 2: ValueError: bad"));
    CHECK_EQ_INT(run_command("exit 1", NULL, 0, 0, U1, in, U1, out, 10, &err), -EIO);
    CHECK(!strcmp(err.msg, "exit status 1"));
    CHECK_EQ_INT(
        run_command("echo dying >&2; kill -TERM $$", NULL, 0, 0, U1, in, U1, out, 10, &err), -EIO);
    CHECK(!strcmp(err.msg, "killed by signal 15: dying"));
    CHECK_EQ_INT(run_command("printf abc", NULL, 0, 0, U1, in, U1, out, 10, &err), -EIO);
    CHECK(!strcmp(err.msg, "wrote 3 bytes, expected 10"));
    uint16_t in2[500] = {0};
    uint8_t out2[500];
    CHECK_EQ_INT(run_command("cat", NULL, 0, 0, U2, in2, U1, out2, 500, &err), -EIO);
    CHECK(!strcmp(err.msg, "wrote more than the 500 bytes expected on stdout; killed"));
    /* issue 14.3: a command that never stops writing fails at once, without a timeout */
    double t_endless = now_monotonic();
    CHECK_EQ_INT(
        run_command("cat >/dev/null; exec cat /dev/zero", NULL, 0, 0, U1, in, U1, out, 10, &err),
        -EIO);
    CHECK(!strcmp(err.msg, "wrote more than the 10 bytes expected on stdout; killed"));
    CHECK(now_monotonic() - t_endless < 5);
    CHECK_EQ_INT(run_command("no-such-command-xyz", NULL, 0, 0, U1, in, U1, out, 10, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "exit status 127: ");
    CHECK_STR_CONTAINS(err.msg, "not found");
    /* lots of stderr: nothing blocks, the message has the last line */
    CHECK_EQ_INT(run_command("head -c 300000 /dev/zero | tr '\\0' x >&2; echo >&2; "
                             "echo 'the end' >&2; exit 4",
                             NULL, 0, 0, U1, in, U1, out, 10, &err),
                 -EIO);
    CHECK(!strcmp(err.msg, "exit status 4: the end"));
    /* a command that never reads a large input fails on its output, without hanging */
    size_t n = 10 << 20;
    uint8_t *big = calloc(n, 1), *bigout = malloc(n);
    double t0 = now_monotonic();
    CHECK_EQ_INT(run_command("exit 0", NULL, 0, 0, U1, big, U1, bigout, n, &err), -EIO);
    CHECK(!strcmp(err.msg, "wrote 0 bytes, expected 10485760"));
    CHECK(now_monotonic() - t0 < 5);
    free(big);
    free(bigout);
}

static void test_command_spawn_error(void)
{
    struct config cfg;
    struct config_param pm[1];
    struct errbuf err = {{0}};
    make_cfg(&cfg, pm, PROC_COMMAND, "true", NULL, 0);
    cfg.dir = "/nonexistent/roifs-test-dir";
    struct proc *p = NULL;
    CHECK_EQ_INT(proc_create(&cfg, &p, &err), 0);
    uint8_t in[1] = {0}, out[1];
    struct req r;
    uint64_t shape[1] = {1};
    make_req(&r, 1, shape, U1, U1, in, out);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "cannot run /bin/sh -c 'true' in /nonexistent/roifs-test-dir");
    proc_destroy(p);
    make_cfg(&cfg, pm, PROC_COMMAND, "  ", NULL, 0);
    CHECK_EQ_INT(proc_create(&cfg, &p, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "empty command");
}

/* State and process group of pid from /proc; false when it is gone. */
static bool proc_stat(const char *pid, char *state, int *pgrp)
{
    char path[300], buf[512];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *paren = strrchr(buf, ')');
    int ppid;
    return paren && sscanf(paren + 1, " %c %d %d", state, &ppid, pgrp) == 3;
}

/* True while some process of group pgid is alive (zombies waiting for init do not count). */
static bool group_alive(pid_t pgid)
{
    if (kill(-pgid, 0) < 0 && errno == ESRCH)
        return false;
    DIR *d = opendir("/proc");
    struct dirent *e;
    bool alive = false;
    char state;
    int pgrp;
    while (d && (e = readdir(d)) && !alive)
        alive = proc_stat(e->d_name, &state, &pgrp) && pgrp == pgid && state != 'Z';
    if (d)
        closedir(d);
    return alive;
}

static bool pid_alive(pid_t pid)
{
    char name[32], state;
    int pgrp;
    snprintf(name, sizeof name, "%d", (int)pid);
    return proc_stat(name, &state, &pgrp) && state != 'Z';
}

/* File `name` holds the shell's process group then the pids of its children: true once all
 * of them are gone (waiting up to 2 s). */
static bool all_gone(const char *name)
{
    char *s = read_tmp_file(name), *save = NULL;
    pid_t pids[8];
    int n = 0;
    for (char *t = s ? strtok_r(s, " \n", &save) : NULL; t && n < 8;
         t = strtok_r(NULL, " \n", &save))
        pids[n++] = (pid_t)atoi(t);
    free(s);
    if (n < 2 || pids[0] <= 1)
        return false;
    for (int round = 0; round < 40; round++) {
        bool alive = group_alive(pids[0]);
        for (int i = 1; i < n; i++)
            alive = alive || pid_alive(pids[i]);
        if (!alive)
            return true;
        usleep(50000);
    }
    return false;
}

static void test_command_timeout(void)
{
    struct errbuf err = {{0}};
    uint8_t in[4] = {0}, out[4];
    double t0 = now_monotonic();
    /* the shell leads its own process group (pgrp == $$); its children die with it */
    CHECK_EQ_INT(run_command("test $(cut -d' ' -f5 /proc/$$/stat) = $$ && echo $$ > pg1.txt; "
                             "sleep 100 & echo $! >> pg1.txt; sleep 100 & echo $! >> pg1.txt; "
                             "sleep 100",
                             NULL, 0, 0.5, U1, in, U1, out, 4, &err),
                 -EIO);
    double took = now_monotonic() - t0;
    CHECK(!strcmp(err.msg, "timed out after 0.5 s"));
    CHECK(took >= 0.45 && took < 2.0);
    CHECK(all_gone("pg1.txt"));
    /* leftovers holding stdout open neither block a finished command nor outlive it */
    t0 = now_monotonic();
    CHECK_EQ_INT(run_command("test $(cut -d' ' -f5 /proc/$$/stat) = $$ && echo $$ > pg2.txt; "
                             "cat >/dev/null; sleep 100 & echo $! >> pg2.txt; printf abcd",
                             NULL, 0, 0, U1, in, U1, out, 4, &err),
                 0);
    CHECK(now_monotonic() - t0 < 2.0);
    CHECK(!memcmp(out, "abcd", 4));
    CHECK(all_gone("pg2.txt"));
}

static void test_command_concurrent(void)
{
    struct errbuf err = {{0}};
    struct proc *p = make_proc(PROC_COMMAND, "cat; sleep 0.5", NULL, 0, 0, &err);
    struct run_arg ra[4];
    struct req r[4];
    uint8_t in[4][100], out[4][100];
    pthread_t th[4];
    uint64_t shape[1] = {100};
    double t0 = now_monotonic();
    for (int i = 0; i < 4; i++) {
        memset(in[i], 'a' + i, 100);
        make_req(&r[i], 1, shape, U1, U1, in[i], out[i]);
        ra[i] = (struct run_arg){.p = p, .rq = &r[i].rq};
        pthread_create(&th[i], NULL, run_thread, &ra[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(ra[i].rc, 0);
        CHECK(!memcmp(in[i], out[i], 100));
    }
    double took = now_monotonic() - t0;
    CHECK(took < 1.5);
    CHECK_EQ_INT(p->calls, 4);
    proc_destroy(p);
}

static void test_command_shutdown(void)
{
    struct errbuf err = {{0}};
    struct proc *p = make_proc(PROC_COMMAND, "sleep 100", NULL, 0, 0, &err);
    uint8_t in[4] = {0}, out[4];
    struct req r[2];
    struct run_arg ra[2];
    pthread_t th[2];
    uint64_t shape[1] = {4};
    for (int i = 0; i < 2; i++) {
        make_req(&r[i], 1, shape, U1, U1, in, out);
        ra[i] = (struct run_arg){.p = p, .rq = &r[i].rq};
        pthread_create(&th[i], NULL, run_thread, &ra[i]);
    }
    usleep(300000);
    double t0 = now_monotonic();
    proc_shutdown(p);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(ra[i].rc, -ECANCELED);
        CHECK(ra[i].elapsed < 2.0);
    }
    CHECK(now_monotonic() - t0 < 0.5);
    CHECK_EQ_INT(proc_run(p, &r[0].rq, &err), -ECANCELED);
    CHECK(!strcmp(err.msg, "shut down"));
    proc_destroy(p);
}

/* ---- worker ---- */

/* A worker speaking the protocol by hand (no numpy), |u1 in and out, replying in + 1. Each
 * process appends "PID PPID" to pids.txt. What it does depends on the ROI index. */
static const char raw_worker[] =
    "import json, os, sys, time\n"
    "inp, out = sys.stdin.buffer, sys.stdout.buffer\n"
    "with open('pids.txt', 'a') as f:\n"
    "    f.write(f'{os.getpid()} {os.getppid()}\\n')\n"
    "def send(*parts):\n"
    "    for p in parts:\n"
    "        out.write(p)\n"
    "    out.flush()\n"
    "while True:\n"
    "    line = inp.readline()\n"
    "    if not line:\n"
    "        if len(sys.argv) > 1 and sys.argv[1] == 'linger':\n"
    "            time.sleep(100)\n"
    "        break\n"
    "    rq = json.loads(line)\n"
    "    roi, n = rq['roi'], rq['nbytes']\n"
    "    if roi == 8:\n"
    "        sys.stderr.write('bye\\n')\n"
    "        sys.exit(4)\n"
    "    data = inp.read(n)\n"
    "    res = bytes((b + 1) & 255 for b in data)\n"
    "    ok = b'{\"ok\": true, \"nbytes\": %d}\\n' % n\n"
    "    if roi == 1:\n"
    "        send(b'hello world\\n')\n"
    "    elif roi == 2:\n"
    "        send(b'{\"ok\": true, \"nbytes\": %d}\\n' % (n + 1), res + b'x')\n"
    "    elif roi == 3:\n"
    "        send(b'{\"ok\": false, \"error\": \"bad things\"}\\n')\n"
    "    elif roi == 4:\n"
    "        time.sleep(100)\n"
    "    elif roi == 5:\n"
    "        send(ok, res[:n // 2])\n"
    "        sys.stderr.write('dying now\\n')\n"
    "        sys.exit(3)\n"
    "    elif roi == 6:\n"
    "        with open('busy.txt', 'w') as f:\n"
    "            f.write(str(os.getpid()))\n"
    "        time.sleep(100)\n"
    "    elif roi == 7:\n"
    "        with open('req.txt', 'wb') as f:\n"
    "            f.write(line)\n"
    "        send(ok, res)\n"
    "    elif roi == 9:\n"
    "        sys.stderr.write('x' * 300000 + '\\nlast words\\n')\n"
    "        send(ok, res)\n"
    "    else:\n"
    "        send(ok, res)\n";

static bool have_python;

static void write_tmp_file(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* Number of lines of tmpdir/name (0 when missing). */
static int tmp_file_lines(const char *name)
{
    char *s = read_tmp_file(name);
    int n = 0;
    for (char *q = s; q && *q; q++)
        n += *q == '\n';
    free(s);
    return n;
}

static void remove_tmp_file(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

/* Runs ROI `roi` of 10 |u1 elements through p; out must then be in + 1 on success. */
static int run_roi(struct proc *p, size_t roi, struct errbuf *err)
{
    uint8_t in[10], out[10];
    for (int i = 0; i < 10; i++)
        in[i] = (uint8_t)(i * 30);
    struct req r;
    uint64_t shape[1] = {10};
    make_req(&r, 1, shape, U1, U1, in, out);
    r.rq.roi = roi;
    int rc = proc_run(p, &r.rq, err);
    if (rc == 0)
        for (int i = 0; i < 10; i++)
            CHECK_EQ_INT(out[i], (uint8_t)(in[i] + 1));
    return rc;
}

static struct proc *make_raw_worker(const char *arg, double timeout)
{
    char cmd[128];
    struct errbuf err = {{0}};
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 raw_worker.py %s", arg);
    remove_tmp_file("pids.txt");
    struct proc *p = make_proc(PROC_WORKER, cmd, NULL, 0, timeout, &err);
    CHECK(p != NULL);
    return p;
}

/* pids.txt: "PID PPID" per worker started; collects the shells (PPID) and pythons (PID). */
static int worker_pids(pid_t *shells, pid_t *pythons, int max)
{
    char *s = read_tmp_file("pids.txt"), *save = NULL;
    int n = 0;
    for (char *t = s ? strtok_r(s, "\n", &save) : NULL; t && n < max;
         t = strtok_r(NULL, "\n", &save), n++) {
        int a = 0, b = 0;
        sscanf(t, "%d %d", &a, &b);
        pythons[n] = a;
        shells[n] = b;
    }
    free(s);
    return n;
}

/* True once every worker of pids.txt is gone: shells reaped (ESRCH), pythons dead. */
static bool workers_gone(void)
{
    pid_t shells[16], pythons[16];
    int n = worker_pids(shells, pythons, 16);
    bool gone = true;
    for (int i = 0; i < n; i++) {
        gone = gone && kill(shells[i], 0) < 0 && errno == ESRCH;
        for (int round = 0; round < 40 && pid_alive(pythons[i]); round++)
            usleep(50000);
        gone = gone && !pid_alive(pythons[i]);
    }
    return gone && n > 0;
}

static void test_worker_protocol(void)
{
    if (!have_python)
        return;
    struct errbuf err = {{0}};
    const char *params[2] = {"sigma=2", "name=a \"b\"\\"};
    remove_tmp_file("pids.txt");
    struct proc *p = make_proc(PROC_WORKER, "/usr/bin/python3 raw_worker.py", params, 2, 0, &err);
    CHECK(p != NULL);
    if (!p)
        return;
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(run_roi(p, 0, &err), 0);
    /* the request line */
    uint8_t in[6] = {1, 2, 3, 4, 5, 6}, out[6];
    struct req r;
    uint64_t shape[2] = {2, 3}, start[2] = {1, 2}, stop[2] = {2, 4}, in_start[2] = {0, 1};
    make_req(&r, 2, shape, U1, U1, in, out);
    r.rq.roi = 7;
    r.rq.start = start;
    r.rq.stop = stop;
    r.rq.in_start = in_start;
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(out[0] == 2 && out[5] == 7);
    char *req = read_tmp_file("req.txt");
    CHECK(req != NULL);
    if (req)
        CHECK(!strcmp(req,
                      "{\"roi\": 7, \"start\": [1, 2], \"stop\": [2, 4], \"in_start\": [0, 1], "
                      "\"in_shape\": [2, 3], \"dtype\": \"|u1\", \"out_dtype\": \"|u1\", "
                      "\"nbytes\": 6, \"params\": {\"sigma\":\"2\",\"name\":\"a "
                      "\\\"b\\\"\\\\\"}}\n"));
    free(req);
    /* lots of stderr blocks nothing */
    CHECK_EQ_INT(run_roi(p, 9, &err), 0);
    /* ok: false fails the ROI and keeps the worker */
    CHECK_EQ_INT(run_roi(p, 3, &err), -EIO);
    CHECK(!strcmp(err.msg, "bad things"));
    CHECK_EQ_INT(run_roi(p, 0, &err), 0);
    CHECK_EQ_INT(tmp_file_lines("pids.txt"), 1); /* one worker did all that */
    CHECK_EQ_INT(p->calls, 9);
    proc_destroy(p);
    CHECK(workers_gone());
}

/* Runs `roi`, expecting it to fail with a message containing want, then checks that the
 * worker was replaced (a new process serves the next ROI). */
static void check_broken(struct proc *p, size_t roi, const char *want)
{
    struct errbuf err = {{0}};
    int before = tmp_file_lines("pids.txt");
    CHECK_EQ_INT(run_roi(p, roi, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, want);
    CHECK_EQ_INT(run_roi(p, 0, &err), 0);
    CHECK_EQ_INT(tmp_file_lines("pids.txt"), before + 1);
}

static void test_worker_broken(void)
{
    if (!have_python)
        return;
    struct errbuf err = {{0}};
    struct proc *p = make_raw_worker("", 0);
    CHECK_EQ_INT(run_roi(p, 0, &err), 0);
    check_broken(p, 1,
                 "broke the protocol: expected a JSON reply line with \"ok\", got 'hello "
                 "world'");
    check_broken(p, 2, "broke the protocol: reply has nbytes 11, expected 10");
    check_broken(p, 5,
                 "exited with status 3 in the middle of its reply (5 of 10 bytes): dying now");
    check_broken(p, 8, "exited with status 4 before replying: bye");
    /* the worker's process group dies with it */
    pid_t shells[16], pythons[16];
    int n = worker_pids(shells, pythons, 16);
    for (int i = 0; i < n - 1; i++) {
        CHECK(kill(shells[i], 0) < 0 && errno == ESRCH);
        CHECK(!pid_alive(pythons[i]));
    }
    proc_destroy(p);
    CHECK(workers_gone());
}

static void *kill_busy_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 200; i++) {
        char *s = read_tmp_file("busy.txt");
        int pid = s ? atoi(s) : 0;
        free(s);
        if (pid > 1) {
            kill(pid, SIGKILL);
            return NULL;
        }
        usleep(25000);
    }
    return NULL;
}

static void test_worker_killed_and_timeout(void)
{
    if (!have_python)
        return;
    struct errbuf err = {{0}};
    struct proc *p = make_raw_worker("", 1.0);
    CHECK_EQ_INT(run_roi(p, 0, &err), 0);
    /* killed in the middle of a ROI: that ROI fails, the next gets a new worker */
    remove_tmp_file("busy.txt");
    pthread_t th;
    pthread_create(&th, NULL, kill_busy_worker, NULL);
    check_broken(p, 6, "exited with status 137 (signal 9) before replying");
    pthread_join(th, NULL);
    /* past the timeout: killed and replaced */
    double t0 = now_monotonic();
    int before = tmp_file_lines("pids.txt");
    CHECK_EQ_INT(run_roi(p, 4, &err), -EIO);
    double took = now_monotonic() - t0;
    CHECK_STR_CONTAINS(err.msg, "timed out after 1 s");
    CHECK(took >= 0.95 && took < 3.0);
    CHECK_EQ_INT(run_roi(p, 0, &err), 0);
    CHECK_EQ_INT(tmp_file_lines("pids.txt"), before + 1);
    proc_destroy(p);
    CHECK(workers_gone());
}

static void test_worker_concurrent_and_shutdown(void)
{
    if (!have_python)
        return;
    struct errbuf err = {{0}};
    struct proc *p = make_raw_worker("", 0);
    /* four at once: four workers */
    struct run_arg ra[4];
    struct req r[4];
    uint8_t in[4][100], out[4][100];
    pthread_t th[4];
    uint64_t shape[1] = {100};
    for (int i = 0; i < 4; i++) {
        memset(in[i], 'a' + i, 100);
        make_req(&r[i], 1, shape, U1, U1, in[i], out[i]);
        r[i].rq.roi = 6; /* each sleeps until the shutdown */
        ra[i] = (struct run_arg){.p = p, .rq = &r[i].rq};
        pthread_create(&th[i], NULL, run_thread, &ra[i]);
    }
    for (int i = 0; i < 100 && tmp_file_lines("pids.txt") < 4; i++)
        usleep(50000);
    usleep(300000);
    CHECK_EQ_INT(tmp_file_lines("pids.txt"), 4);
    double t0 = now_monotonic();
    proc_shutdown(p);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(ra[i].rc, -ECANCELED);
    }
    CHECK(now_monotonic() - t0 < 1.0);
    CHECK_EQ_INT(run_roi(p, 0, &err), -ECANCELED);
    proc_destroy(p);
    CHECK(workers_gone());

    /* idle workers get EOF at shutdown; one that lingers is killed after the grace period */
    p = make_raw_worker("linger", 0);
    for (int i = 0; i < 2; i++) {
        make_req(&r[i], 1, shape, U1, U1, in[i], out[i]);
        ra[i] = (struct run_arg){.p = p, .rq = &r[i].rq};
        pthread_create(&th[i], NULL, run_thread, &ra[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(ra[i].rc, 0);
    }
    t0 = now_monotonic();
    proc_shutdown(p);
    double took = now_monotonic() - t0;
    CHECK(took >= 1.9 && took < 3.0);
    CHECK(workers_gone());
    proc_destroy(p);
}

static void test_worker_python(void)
{
    if (!have_python)
        return;
    write_tmp_file("np_worker.py", "import numpy as np\n"
                                   "from roifs_worker import run\n"
                                   "print('importing')\n"
                                   "def process(block, roi):\n"
                                   "    print('roi', roi.index)\n"
                                   "    if roi.index == 1:\n"
                                   "        raise ValueError('no roi 1 here')\n"
                                   "    if roi.index == 2:\n"
                                   "        return block[:1]\n"
                                   "    if roi.index == 3:\n"
                                   "        return block * 0.5\n"
                                   "    return block + int(roi.params['value'])\n"
                                   "run(process)\n");
    struct errbuf err = {{0}};
    const char *params[1] = {"value=3"};
    struct proc *p = make_proc(PROC_WORKER, "/usr/bin/python3 np_worker.py", params, 1, 0, &err);
    size_t n = 3 << 20; /* more than any pipe buffer, both ways */
    uint16_t *in = malloc(n * 2);
    float *out = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        in[i] = (uint16_t)(i * 7);
    struct req r;
    uint64_t shape[2] = {3, n / 3};
    make_req(&r, 2, shape, U2, F4, in, out);
    int rc = proc_run(p, &r.rq, &err);
    if (rc == -EIO && strstr(err.msg, "No module named")) {
        printf("# skip: /usr/bin/python3 has no numpy\n");
        proc_destroy(p);
        free(in);
        free(out);
        return;
    }
    CHECK_EQ_INT(rc, 0);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += out[i] != (float)(uint16_t)(in[i] + 3); /* numpy: uint16 + 3 wraps */
    CHECK_EQ_INT(bad, 0);
    uint64_t small[1] = {4};
    make_req(&r, 1, small, U2, U2, in, out);
    r.rq.roi = 1;
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EIO);
    CHECK(!strcmp(err.msg, "ValueError: no roi 1 here (np_worker.py:7)"));
    r.rq.roi = 2;
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EIO);
    CHECK(!strcmp(err.msg, "ValueError: process() returned shape (1,), expected (4,) (the read "
                           "region)"));
    r.rq.roi = 3;
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "TypeError: process() returned float64, which does not cast to "
                                "uint16");
    r.rq.roi = 4;
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(((uint16_t *)out)[1] == in[1] + 3);
    proc_destroy(p);
    free(in);
    free(out);
}

static void test_worker_spawn_error(void)
{
    struct config cfg;
    struct config_param pm[1];
    struct errbuf err = {{0}};
    make_cfg(&cfg, pm, PROC_WORKER, "cat", NULL, 0);
    cfg.dir = "/nonexistent/roifs-test-dir";
    struct proc *p = NULL;
    CHECK_EQ_INT(proc_create(&cfg, &p, &err), 0);
    CHECK_EQ_INT(run_roi(p, 0, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg,
                       "cannot start worker /bin/sh -c 'cat' in /nonexistent/roifs-test-dir");
    proc_destroy(p);
    /* a worker that is not one: cat echoes the request line back */
    p = make_proc(PROC_WORKER, "cat", NULL, 0, 0, &err);
    CHECK_EQ_INT(run_roi(p, 0, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "broke the protocol: expected a JSON reply line with \"ok\", got "
                                "'{\"roi\": 0, \"start\": [0]");
    proc_destroy(p);
}

/* ---- plugin ---- */

/* lib: a file of the example plugins' build directory, or a library name dlopen() finds. */
static struct proc *make_plugin(const char *lib, const char *const *params, int nparams,
                                struct errbuf *err)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", PLUGIN_DIR, lib);
    return make_proc(PROC_PLUGIN, strncmp(lib, "lib", 3) || access(path, F_OK) ? lib : path, params,
                     nparams, 0, err);
}

static void test_plugin_add(void)
{
    struct errbuf err = {{0}};
    const char *params[1] = {"value=5"};
    struct proc *p = make_plugin("libadd_plugin.so", params, 1, &err);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "%s\n", err.msg);
        return;
    }
    uint16_t a[4] = {0, 1, 65530, 65535}, b[4];
    struct req r;
    uint64_t shape[2] = {2, 2};
    make_req(&r, 2, shape, U2, U2, a, b);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(b[0] == 5 && b[1] == 6 && b[2] == 65535 && b[3] == 65535); /* clipped */
    int64_t c[2] = {(INT64_C(1) << 62) + 1, -7}, d[2];
    uint64_t two[1] = {2};
    make_req(&r, 1, two, I8, I8, c, d);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(d[0] == (INT64_C(1) << 62) + 6 && d[1] == -2);
    float f[2] = {0.25f, -1.0f};
    double g[2];
    make_req(&r, 1, two, F4, F8, f, g);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK(g[0] == 5.25 && g[1] == 4.0);
    /* the same as the builtin add, casting included */
    float h[5] = {0.5f, 1.5f, -9.0f, 300.0f, 2.4f};
    uint8_t k[5], want[5];
    uint64_t five[1] = {5};
    make_req(&r, 1, five, F4, U1, h, k);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), 0);
    CHECK_EQ_INT(run_builtin("add", "value=5", F4, h, U1, want, 5), 0);
    CHECK(!memcmp(k, want, 5));
    /* a dtype it does not handle: that ROI fails with its message */
    uint16_t half[2] = {0, 0};
    make_req(&r, 1, two, (struct dtype){DT_FLOAT, 2, false}, U2, half, b);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EIO);
    CHECK(!strcmp(err.msg, "plugin add: dtype <f2 -> <u2 is not supported"));
    CHECK_EQ_INT(p->calls, 5);
    proc_shutdown(p);
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -ECANCELED);
    proc_destroy(p);
}

static void check_plugin_error(const char *lib, const char *param, const char *want)
{
    struct errbuf err = {{0}};
    const char *params[1] = {param};
    struct proc *p = make_plugin(lib, params, param ? 1 : 0, &err);
    CHECK(p == NULL);
    if (p)
        proc_destroy(p);
    else
        CHECK_STR_CONTAINS(err.msg, want);
}

static void test_plugin_errors(void)
{
    char want[1024];
    snprintf(want, sizeof want,
             "%s: [process] plugin: %s/libbad_abi_plugin.so has plugin ABI 2, this roifs "
             "supports 1",
             cfg_path, PLUGIN_DIR);
    check_plugin_error("libbad_abi_plugin.so", NULL, want);
    snprintf(want, sizeof want,
             "%s: [process] plugin: %s/libadd_plugin.so: param.value: 'abc' "
             "is not a number",
             cfg_path, PLUGIN_DIR);
    check_plugin_error("libadd_plugin.so", "value=abc", want);
    check_plugin_error("libadd_plugin.so", "sigma=1",
                       "libadd_plugin.so: param.sigma: unknown parameter (add takes only value)");
    snprintf(want, sizeof want,
             "%s: [process] plugin: /nonexistent/libnone.so: cannot open "
             "shared object file",
             cfg_path);
    check_plugin_error("/nonexistent/libnone.so", NULL, want);
    check_plugin_error("libjansson.so.4", NULL,
                       "[process] plugin: libjansson.so.4 does not export roifs_plugin() (see "
                       "roifs/plugin.h)");
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/roifs-test-proc-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(cfg_path, sizeof cfg_path, "%s/task.ini", tmpdir);
    RUN(test_copy);
    RUN(test_add_multiply);
    RUN(test_threshold);
    RUN(test_builtin_errors);
    RUN(test_gaussian);
    RUN(test_delay);
    RUN(test_command_env);
    RUN(test_command_echo);
    RUN(test_command_python);
    RUN(test_command_failures);
    RUN(test_command_spawn_error);
    RUN(test_command_timeout);
    RUN(test_command_concurrent);
    RUN(test_command_shutdown);
    write_tmp_file("raw_worker.py", raw_worker);
    have_python = access("/usr/bin/python3", X_OK) == 0;
    if (!have_python)
        printf("# skip: worker tests need /usr/bin/python3\n");
    RUN(test_worker_protocol);
    RUN(test_worker_broken);
    RUN(test_worker_killed_and_timeout);
    RUN(test_worker_concurrent_and_shutdown);
    RUN(test_worker_python);
    RUN(test_worker_spawn_error);
    RUN(test_plugin_add);
    RUN(test_plugin_errors);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done();
}
