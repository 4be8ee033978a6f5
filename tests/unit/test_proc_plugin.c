/* test_proc_plugin.c: unit tests of plugins: the example add plugin against the builtin add, and
 * the refusals of bad plugins (missing, no entry point, ABI mismatch, init errors). */
#include "proc_harness.h"

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
    if (proc_test_begin("proc-plugin"))
        return 1;
    RUN(test_plugin_add);
    RUN(test_plugin_errors);
    return proc_test_end();
}
