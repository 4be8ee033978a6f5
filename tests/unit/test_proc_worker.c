/* test_proc_worker.c: unit tests of the worker processor: the protocol by hand, broken and killed
 * workers and their replacement, timeouts, concurrency, shutdown and a numpy worker. */
#include "proc_harness.h"

static bool have_python;

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

int main(void)
{
    if (proc_test_begin("proc-worker"))
        return 1;
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
    return proc_test_end();
}
