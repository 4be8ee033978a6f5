/* test_slurm.c: unit tests of executor = slurm without a cluster: the [slurm] extra word
 * splitter, the failure reason read from srun's stderr, configuration errors, and the command
 * and worker processors driving a fake srun (a shell script first in PATH) that records its
 * arguments and the signals it gets. tests/e2e/test_slurm.py runs them on a real Slurm. */
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc/slurm.h"
#include "proc_harness.h"

/* ---- words ---- */

/* Splits s and joins the words with '|'; "ERR: reason" on failure. */
static const char *split(const char *s)
{
    static char out[512];
    char **words;
    size_t n;
    struct errbuf err = {{0}};
    if (slurm_split_words(s, &words, &n, &err) < 0) {
        snprintf(out, sizeof out, "ERR: %.400s", err.msg);
        return out;
    }
    out[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i ? "|" : "", words[i]);
    CHECK(words[n] == NULL);
    slurm_argv_free(words);
    return out;
}

static void test_split_words(void)
{
    CHECK(!strcmp(split(""), ""));
    CHECK(!strcmp(split("   \t "), ""));
    CHECK(!strcmp(split("--exclusive"), "--exclusive"));
    CHECK(!strcmp(split("  -A  proj\t--qos=low "), "-A|proj|--qos=low"));
    CHECK(!strcmp(split("--comment='two words' x"), "--comment=two words|x"));
    CHECK(!strcmp(split("--comment=\"a \\\"b\\\" \\\\ \\$c\""), "--comment=a \"b\" \\ $c"));
    CHECK(!strcmp(split("\"a\\b\""), "a\\b")); /* \ before another character stays */
    CHECK(!strcmp(split("'it'\\''s'"), "it's"));
    CHECK(!strcmp(split("a\\ b c"), "a b|c"));
    CHECK(!strcmp(split("'' \"\" x"), "||x")); /* empty words count */
    CHECK(!strcmp(split("'$HOME;|'"), "$HOME;|"));
    CHECK_STR_CONTAINS(split("--comment='open"), "ERR: unterminated ' quote");
    CHECK_STR_CONTAINS(split("\"open"), "ERR: unterminated \" quote");
    CHECK_STR_CONTAINS(split("x\\"), "ERR: \\ at the end");
    CHECK_STR_CONTAINS(split("--export=$HOME"), "ERR: '$' would need a shell");
    CHECK_STR_CONTAINS(split("a; b"), "ERR: ';' would need a shell");
    CHECK_STR_CONTAINS(split("a | b"), "ERR: '|' would need a shell");
}

/* ---- failure reasons ---- */

static void reason(const char *tail, const char *task_want, const char *slurm_want)
{
    char task[128], slurm[128];
    slurm_reason(tail, task, sizeof task, slurm, sizeof slurm);
    if (strcmp(task, task_want) || strcmp(slurm, slurm_want))
        fprintf(stderr, "reason of [%s]: task [%s] slurm [%s]\n", tail, task, slurm);
    CHECK(!strcmp(task, task_want));
    CHECK(!strcmp(slurm, slurm_want));
}

static void test_reason(void)
{
    reason("", "", "");
    reason("Traceback\nValueError: bad\nsrun: error: n1: task 0: Exited with exit code 2\n",
           "ValueError: bad", "");
    reason("srun: error: invalid partition specified: x\n"
           "srun: error: Unable to allocate resources: Invalid partition name specified\n",
           "", "srun: error: Unable to allocate resources: Invalid partition name specified");
    reason("working\nslurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 "
           "DUE TO TIME LIMIT ***\nsrun: error: n1: task 0: Terminated\n  \n",
           "working",
           "slurmstepd-n1: error: *** STEP 5.0 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO "
           "TIME LIMIT ***");
    reason("srun: error: n1: task 0: Killed\n", "", "srun: error: n1: task 0: Killed");
    reason("srun: job 4 queued and waiting for resources\nout of memory\n", "out of memory", "");
    CHECK(slurm_is_own_line("srun: error: x"));
    CHECK(slurm_is_own_line("slurmstepd-n1: error: x"));
    CHECK(!slurm_is_own_line("sruns are fun"));
}

/* ---- configuration ---- */

/* The harness's configuration, run through Slurm with 2 CPUs per task. */
static void slurm_cfg(struct config *cfg, enum proc_kind kind, const char *value)
{
    make_cfg(cfg, NULL, kind, value, NULL, 0);
    cfg->threads = 2;
    cfg->executor = EXECUTOR_SLURM;
    cfg->slurm_cpus_per_task = 2;
}

static void test_launch_errors(void)
{
    struct config cfg;
    struct errbuf err = {{0}};
    struct proc *p = NULL;
    slurm_cfg(&cfg, PROC_COMMAND, "true");
    cfg.slurm_extra = "--comment='unclosed";
    CHECK_EQ_INT(proc_create(&cfg, &p, &err), -EINVAL);
    CHECK(p == NULL);
    CHECK_STR_CONTAINS(err.msg, "[slurm] extra: unterminated ' quote");
    CHECK_STR_CONTAINS(err.msg, cfg_path);
    slurm_cfg(&cfg, PROC_WORKER, "true");
    cfg.slurm_extra = "--export=$HOME";
    CHECK_EQ_INT(proc_create(&cfg, &p, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "[slurm] extra: '$' would need a shell");

    const char *path = getenv("PATH");
    char *saved = strdup(path ? path : "");
    setenv("PATH", "/nonexistent", 1);
    slurm_cfg(&cfg, PROC_COMMAND, "true");
    CHECK_EQ_INT(proc_create(&cfg, &p, &err), -EINVAL);
    CHECK_STR_CONTAINS(err.msg, "[process] executor: slurm needs srun, which is not in PATH");
    setenv("PATH", saved, 1);
    free(saved);

    /* executor = local (or unset): no srun needed */
    struct slurm_launch *sl = (struct slurm_launch *)1;
    cfg.executor = EXECUTOR_LOCAL;
    CHECK_EQ_INT(slurm_launch_create(&cfg, &sl, &err), 0);
    CHECK(sl == NULL);
    cfg.executor = (enum executor_kind)0; /* unset: what a zeroed configuration holds */
    CHECK_EQ_INT(slurm_launch_create(&cfg, &sl, &err), 0);
    CHECK(sl == NULL);
}

/* ---- a fake srun ---- */

/* Records its arguments (one per line) in srun-args.<pid>, and TERM in srun-signals when it
 * gets one; runs what follows its options (from /bin/sh on) with stdin and stdout as given. */
static const char FAKE_SRUN[] =
    "#!/bin/sh\n"
    "printf '%s\\n' \"$@\" > srun-args.$$\n"
    "trap 'echo TERM >> srun-signals; exit 143' TERM\n"
    "while [ \"$1\" != /bin/sh ]; do shift; done\n"
    "exec 3<&0\n" /* an asynchronous command's stdin would be /dev/null */
    "\"$@\" <&3 3<&- &\n"
    "wait $!\n";

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    char *buf = calloc(1, 8192);
    size_t n = fread(buf, 1, 8191, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The arguments of the last fake srun started, one per line. */
static char *srun_args(void)
{
    char cmd[256], path[160] = "";
    snprintf(cmd, sizeof cmd, "ls -t %s/srun-args.* 2>/dev/null | head -n 1", tmpdir);
    FILE *f = popen(cmd, "r");
    if (f && fgets(path, sizeof path, f))
        path[strcspn(path, "\n")] = '\0';
    if (f)
        pclose(f);
    return read_text(path);
}

static struct proc *slurm_proc(enum proc_kind kind, const char *value)
{
    struct config cfg;
    struct errbuf err = {{0}};
    struct proc *p = NULL;
    slurm_cfg(&cfg, kind, value);
    cfg.slurm_partition = "gpu";
    cfg.slurm_mem = "4G";
    cfg.slurm_time = "1:00";
    cfg.slurm_gres = "gpu:1";
    cfg.slurm_extra = "--comment='two words' -A proj";
    if (proc_create(&cfg, &p, &err) < 0)
        fprintf(stderr, "%s\n", err.msg);
    CHECK(p != NULL);
    return p;
}

static void test_command_through_srun(void)
{
    struct proc *p = slurm_proc(PROC_COMMAND, "tr abc xyz; echo \"$ROIFS_ROI\" > roi.txt");
    if (!p)
        return;
    struct req r;
    char out[6];
    struct errbuf err = {{0}};
    make_req(&r, 1, (const uint64_t[]){6}, U1, U1, "aabbcc", out);
    r.rq.roi = 7;
    if (proc_run(p, &r.rq, &err) != 0) {
        fprintf(stderr, "run: %s\n", err.msg);
        CHECK(0);
    }
    CHECK(!memcmp(out, "xxyyzz", 6));
    char *args = srun_args();
    CHECK(!strcmp(args, "--job-name=roifs-roi-7\n--ntasks=1\n--cpus-per-task=2\n"
                        "--partition=gpu\n--mem=4G\n--gres=gpu:1\n--time=1:00\n--quiet\n"
                        "--comment=two words\n-A\nproj\n/bin/sh\n-c\n"
                        "tr abc xyz; echo \"$ROIFS_ROI\" > roi.txt\n"));
    free(args);
    char path[160];
    snprintf(path, sizeof path, "%s/roi.txt", tmpdir); /* ran in the config's directory */
    char *roi = read_text(path);
    CHECK(!strcmp(roi, "7\n")); /* with the ROIFS_ environment */
    free(roi);

    /* a failing step: the task's last line and srun's reason */
    proc_destroy(p);
    p = slurm_proc(PROC_COMMAND, "cat >/dev/null; echo 'bad input' >&2; "
                                 "echo 'srun: error: n1: task 0: Exited with exit code 3' >&2;"
                                 "echo 'srun: error: n1: task 0: Out Of Memory' >&2; exit 3");
    CHECK_EQ_INT(proc_run(p, &r.rq, &err), -EIO);
    CHECK(!strcmp(err.msg, "exit status 3: bad input [srun: error: n1: task 0: Out Of Memory]"));
    proc_destroy(p);
}

struct shutdown_arg {
    struct proc *p;
    int rc;
    struct errbuf err;
};

static void *run_one(void *arg)
{
    struct shutdown_arg *a = arg;
    struct req r;
    char out[4];
    make_req(&r, 1, (const uint64_t[]){4}, U1, U1, "abcd", out);
    a->rc = proc_run(a->p, &r.rq, &a->err);
    return NULL;
}

/* The shutdown asks srun to end (SIGTERM), which a SIGKILL would not let it do. */
static void test_shutdown_terminates_srun(enum proc_kind kind, const char *value)
{
    char sig[160];
    snprintf(sig, sizeof sig, "%s/srun-signals", tmpdir);
    unlink(sig);
    struct proc *p = slurm_proc(kind, value);
    if (!p)
        return;
    struct shutdown_arg a = {.p = p};
    pthread_t t;
    pthread_create(&t, NULL, run_one, &a);
    usleep(500 * 1000);
    double t0 = now_monotonic();
    proc_shutdown(p);
    pthread_join(t, NULL);
    CHECK(now_monotonic() - t0 < 3);
    CHECK_EQ_INT(a.rc, -ECANCELED);
    char *got = read_text(sig);
    CHECK_STR_CONTAINS(got, "TERM");
    free(got);
    char *args = srun_args();
    CHECK_STR_CONTAINS(args, kind == PROC_WORKER ? "--job-name=roifs-worker\n"
                                                 : "--job-name=roifs-roi-0\n");
    if (kind == PROC_WORKER) /* its replies must not wait in slurmstepd for a newline */
        CHECK_STR_CONTAINS(args, "--unbuffered\n/bin/sh\n-c\n");
    free(args);
    proc_destroy(p);
}

static void test_command_shutdown(void)
{
    test_shutdown_terminates_srun(PROC_COMMAND, "sleep 30");
}

static void test_worker_shutdown(void)
{
    test_shutdown_terminates_srun(PROC_WORKER, "sleep 30");
}

/* A worker's step serves ROIs through srun, and ends at EOF like a local worker. */
static void test_worker_through_srun(void)
{
    static const char worker[] = "while read -r line; do head -c 4 >/dev/null; "
                                 "printf '{\"ok\": true, \"nbytes\": 4}\\nWXYZ'; done";
    struct proc *p = slurm_proc(PROC_WORKER, worker);
    if (!p)
        return;
    for (int i = 0; i < 3; i++) {
        struct req r;
        char out[4];
        struct errbuf err = {{0}};
        make_req(&r, 1, (const uint64_t[]){4}, U1, U1, "abcd", out);
        r.rq.roi = (size_t)i;
        if (proc_run(p, &r.rq, &err) != 0) {
            fprintf(stderr, "run: %s\n", err.msg);
            CHECK(0);
        }
        CHECK(!memcmp(out, "WXYZ", 4));
    }
    char sig[160];
    snprintf(sig, sizeof sig, "%s/srun-signals", tmpdir);
    unlink(sig);
    proc_shutdown(p);
    proc_destroy(p);
    CHECK(access(sig, F_OK) != 0); /* it ended on EOF: no signal needed */
}

int main(void)
{
    if (check_mkdtemp(tmpdir, sizeof tmpdir, "slurm"))
        return 1;
    snprintf(cfg_path, sizeof cfg_path, "%s/task.ini", tmpdir);
    char srun[160], path[4096];
    snprintf(srun, sizeof srun, "%s/srun", tmpdir);
    FILE *f = fopen(srun, "w");
    fputs(FAKE_SRUN, f);
    fclose(f);
    chmod(srun, 0755);
    const char *old = getenv("PATH");
    snprintf(path, sizeof path, "%s:%s", tmpdir, old ? old : "/usr/bin:/bin");
    setenv("PATH", path, 1);

    RUN(test_split_words);
    RUN(test_reason);
    RUN(test_launch_errors);
    RUN(test_command_through_srun);
    RUN(test_command_shutdown);
    RUN(test_worker_through_srun);
    RUN(test_worker_shutdown);

    check_rmtree(tmpdir);
    return check_done();
}
