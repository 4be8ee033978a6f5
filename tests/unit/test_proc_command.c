/* test_proc_command.c: unit tests of the command processor: environment, pipes both ways, failures,
 * spawn errors, timeouts, concurrency and shutdown (process groups end with it). */
#include "proc_harness.h"

#include <sys/stat.h>

#include "proc/spawn.h"

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

/* Writes an executable script tmpdir/name. */
static void write_script(const char *name, const char *text)
{
    write_tmp_file(name, text);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    CHECK(chmod(path, 0755) == 0);
}

/* The name of the process that started the probe (parent.TAG): "sh" through the shell. */
static bool started_by_shell(const char *tag)
{
    char name[64];
    snprintf(name, sizeof name, "parent.%s", tag);
    char *s = read_tmp_file(name);
    bool sh = s && !strcmp(s, "sh\n");
    CHECK(s != NULL && s[0] != 0);
    free(s);
    return sh;
}

/* A command of plain words runs without /bin/sh (its program's parent is roifs, argv as the
 * shell would pass it, found on PATH, relative to the configuration's directory); one with
 * shell syntax, a builtin, or a script without #! still goes through the shell. */
static void test_command_direct(void)
{
    struct errbuf err = {{0}};
    uint8_t in[6] = {1, 2, 3, 4, 5, 6}, out[6];
    write_script("probe.sh", "#!/bin/sh\ncat /proc/$PPID/comm > parent.$1\n"
                             "echo \"$0 $#\" > argv.$1\ncat\n");
    CHECK_EQ_INT(run_command("./probe.sh a", NULL, 0, 0, U1, in, U1, out, 6, &err), 0);
    CHECK(!memcmp(in, out, 6));
    CHECK(!started_by_shell("a"));
    char *argv = read_tmp_file("argv.a");
    CHECK(argv && !strcmp(argv, "./probe.sh 1\n"));
    free(argv);
    CHECK_EQ_INT(run_command("./probe.sh 'b'", NULL, 0, 0, U1, in, U1, out, 6, &err), 0);
    CHECK(started_by_shell("b"));
    CHECK_EQ_INT(run_command("./probe.sh c >&1", NULL, 0, 0, U1, in, U1, out, 6, &err), 0);
    CHECK(started_by_shell("c"));
    /* PATH lookup, as the shell's */
    char bin[160], path[4096];
    snprintf(bin, sizeof bin, "%s/bin", tmpdir);
    CHECK(mkdir(bin, 0755) == 0);
    write_script("bin/probe-in-path", "#!/bin/sh\ncat /proc/$PPID/comm > parent.$1\n"
                                      "echo oops >&2\nexit $2\n");
    const char *old = getenv("PATH");
    char *saved = old ? strdup(old) : NULL;
    snprintf(path, sizeof path, "%s:%s", bin, old ? old : "/usr/bin:/bin");
    setenv("PATH", path, 1);
    CHECK_EQ_INT(run_command("probe-in-path d 3", NULL, 0, 0, U1, in, U1, out, 6, &err), -EIO);
    CHECK(!started_by_shell("d"));
    CHECK(!strcmp(err.msg, "exit status 3: oops")); /* exit status and stderr as before */
    CHECK_EQ_INT(run_command("probe-in-path e 0 # x", NULL, 0, 0, U1, in, U1, out, 0, &err), 0);
    CHECK(started_by_shell("e"));
    if (saved)
        setenv("PATH", saved, 1);
    free(saved);
    /* a script without #!: the shell runs it */
    write_script("nobang.sh", "cat /proc/$PPID/comm > parent.f\ncat\n");
    CHECK_EQ_INT(run_command("./nobang.sh", NULL, 0, 0, U1, in, U1, out, 6, &err), 0);
    CHECK(!memcmp(in, out, 6));
    (void)started_by_shell("f"); /* run by the shell, which may or may not fork for it */
    /* not found: the shell's message and status */
    CHECK_EQ_INT(run_command("./missing-xyz", NULL, 0, 0, U1, in, U1, out, 6, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "exit status 127: ");
}

static void test_split_words(void)
{
    char **w = spawn_split_words("  prog -x  1.5,2:3 a/b@c%d^e+f\t");
    CHECK(w && !strcmp(w[0], "prog") && !strcmp(w[1], "-x") && !strcmp(w[2], "1.5,2:3") &&
          !strcmp(w[3], "a/b@c%d^e+f") && !w[4]);
    spawn_words_free(w);
    static const char *const shell[] = {"a|b",    "a;b",  "a&",    "a>b", "a<b", "$X",  "`x`",
                                        "a\\b",   "'a'",  "\"a\"", "a*",  "a?",  "[a]", "~/x",
                                        "X=1 a",  "a #c", "a\nb",  "(a)", "{a}", "!a",  "echo x",
                                        "exit 3", "-c x", "",      "  "};
    for (size_t i = 0; i < sizeof shell / sizeof shell[0]; i++) {
        w = spawn_split_words(shell[i]);
        if (w)
            fprintf(stderr, "split, not through the shell: %s\n", shell[i]);
        CHECK(w == NULL);
        spawn_words_free(w);
    }
}

int main(void)
{
    if (proc_test_begin("proc-command"))
        return 1;
    RUN(test_command_env);
    RUN(test_command_echo);
    RUN(test_command_python);
    RUN(test_command_failures);
    RUN(test_command_spawn_error);
    RUN(test_command_timeout);
    RUN(test_command_concurrent);
    RUN(test_command_shutdown);
    RUN(test_command_direct);
    RUN(test_split_words);
    return proc_test_end();
}
