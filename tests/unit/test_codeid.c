/* test_codeid.c: unit tests of the check of a processor's files around its runs
 * (src/codeid.c): a change between runs fails the next run unless the contents are the
 * identity's; a change during a run fails that run, and for a processor whose processes
 * outlive runs (worker, python, plugin) every later run too; an edit undone while another run
 * was in flight is not let through. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "codeid.h"

static char dir[256];

static void pause_tick(void) /* past the file system's timestamp granularity */
{
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void write_script(const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/s.sh", dir);
    pause_tick();
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    chmod(path, 0755);
}

/* A processor running dir/s.sh (command: a process per run; worker: lasting processes),
 * started: the start's own look at its files. */
static struct code_files *files_of(enum proc_kind kind)
{
    struct config cfg = {.proc_kind = kind, .proc_value = "./s.sh > out.txt", .dir = dir};
    write_script("echo v1\n");
    struct code_files *cf = code_files_new(&cfg);
    struct errbuf err;
    CHECK_EQ_INT(code_files_end(cf, 0, &err), 0);
    CHECK_STR_CONTAINS(code_files_lines(cf), "/s.sh 8 ");
    CHECK(!strstr(code_files_lines(cf), "out.txt"));
    return cf;
}

static int one_run(struct code_files *cf, struct errbuf *err)
{
    uint64_t gen;
    int rc = code_files_begin(cf, &gen, err);
    return rc ? rc : code_files_end(cf, gen, err);
}

static void test_between_runs(void)
{
    for (int k = 0; k < 2; k++) {
        struct code_files *cf = files_of(k ? PROC_WORKER : PROC_COMMAND);
        struct errbuf err;
        CHECK_EQ_INT(one_run(cf, &err), 0);
        write_script("echo v1\n"); /* written again, the same: let through */
        CHECK_EQ_INT(one_run(cf, &err), 0);
        write_script("echo v2 (longer)\n");
        CHECK_EQ_INT(one_run(cf, &err), -EIO);
        CHECK_STR_CONTAINS(err.msg, "/s.sh changed while mounted; remount to use it");
        write_script("echo v1\n"); /* no run went on with v2 on disk: v1 again is fine */
        CHECK_EQ_INT(one_run(cf, &err), 0);
        code_files_free(cf);
    }
}

static void test_during_a_run(void)
{
    for (int k = 0; k < 2; k++) {
        struct code_files *cf = files_of(k ? PROC_WORKER : PROC_COMMAND);
        struct errbuf err;
        uint64_t gen;
        CHECK_EQ_INT(code_files_begin(cf, &gen, &err), 0);
        write_script("echo v2 (longer)\n"); /* read by a process the run starts */
        write_script("echo v1\n");          /* and undone before the run ends */
        CHECK_EQ_INT(code_files_end(cf, gen, &err), -EIO);
        CHECK_STR_CONTAINS(err.msg, "/s.sh changed while this ROI ran; its result is not kept");
        /* A command's next run starts its own process; a worker may be the one that read v2 */
        CHECK_EQ_INT(one_run(cf, &err), k ? -EIO : 0);
        if (k)
            CHECK_STR_CONTAINS(err.msg, "remount to use it");
        code_files_free(cf);
    }
}

/* Run A in flight while the file is edited and restored; run B begins after. */
static void test_undone_while_another_runs(void)
{
    for (int k = 0; k < 2; k++) {
        struct code_files *cf = files_of(k ? PROC_WORKER : PROC_COMMAND);
        struct errbuf err;
        uint64_t a, b;
        CHECK_EQ_INT(code_files_begin(cf, &a, &err), 0);
        write_script("echo v2 (longer)\n");
        write_script("echo v1\n");
        /* B finds v1: a command's B runs; a worker A started may be on v2: B fails */
        CHECK_EQ_INT(code_files_begin(cf, &b, &err), k ? -EIO : 0);
        if (!k)
            CHECK_EQ_INT(code_files_end(cf, b, &err), 0);
        CHECK_EQ_INT(code_files_end(cf, a, &err), -EIO); /* A overlapped the change */
        code_files_free(cf);
    }
}

/* The processor's start counts as a run: a change before it ended (a plugin loaded, a fork
 * server that imported the file) fails every run of a lasting processor. */
static void test_change_while_starting(void)
{
    struct config cfg = {.proc_kind = PROC_WORKER, .proc_value = "./s.sh", .dir = dir};
    write_script("echo v1\n");
    struct code_files *cf = code_files_new(&cfg);
    write_script("echo v2 (longer)\n");
    write_script("echo v1\n");
    struct errbuf err;
    CHECK_EQ_INT(code_files_end(cf, 0, &err), -EIO);
    CHECK_EQ_INT(one_run(cf, &err), -EIO);
    code_files_free(cf);
}

static void test_gone(void)
{
    struct code_files *cf = files_of(PROC_COMMAND);
    char path[512];
    snprintf(path, sizeof path, "%s/s.sh", dir);
    unlink(path);
    struct errbuf err;
    CHECK_EQ_INT(one_run(cf, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "/s.sh changed while mounted");
    code_files_free(cf);
}

/* A plugin: runs look at the file it loaded; rewriting that file in place fails the runs that
 * end after (the library's pages are the file's), a new build renamed over it changes
 * nothing that runs. */
static void replace_script(const char *text)
{
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/s.sh", dir);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    pause_tick();
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(tmp);
        exit(1);
    }
}

static void test_plugin(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/s.sh", dir);
    struct config cfg = {.proc_kind = PROC_PLUGIN, .proc_value = path, .dir = dir};
    write_script("echo v1\n");
    struct code_files *cf = code_files_new(&cfg);
    struct errbuf err;
    uint64_t gen;
    CHECK_EQ_INT(code_files_end(cf, 0, &err), 0); /* loaded */
    CHECK_EQ_INT(one_run(cf, &err), 0);
    write_script("echo v2 (longer)\n"); /* in place */
    CHECK_EQ_INT(one_run(cf, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "/s.sh changed while this ROI ran");
    CHECK_EQ_INT(one_run(cf, &err), -EIO);
    write_script("echo v1\n"); /* back: the run that finds it fails, the next goes on */
    CHECK_EQ_INT(one_run(cf, &err), -EIO);
    CHECK_EQ_INT(one_run(cf, &err), 0);
    CHECK_EQ_INT(code_files_begin(cf, &gen, &err), 0);
    write_script("echo v2 (longer)\n");
    write_script("echo v1\n");
    CHECK_EQ_INT(code_files_end(cf, gen, &err), -EIO);
    CHECK_EQ_INT(one_run(cf, &err), 0);
    replace_script("echo v2 (longer)\n"); /* the loaded file is still v1 */
    CHECK_EQ_INT(one_run(cf, &err), 0);
    code_files_free(cf);
    /* replaced while it was being loaded: dlopen may have loaded the new one */
    write_script("echo v1\n");
    cf = code_files_new(&cfg);
    replace_script("echo v2 (longer)\n");
    CHECK_EQ_INT(code_files_end(cf, 0, &err), -EIO);
    CHECK_EQ_INT(one_run(cf, &err), -EIO);
    CHECK_STR_CONTAINS(err.msg, "remount to use it");
    code_files_free(cf);
}

/* Runs on 4 threads while the file is written again (the same contents) and touched: each
 * run succeeds or fails with EIO naming the file; once writes stop, every run succeeds. */
struct race {
    struct code_files *cf;
    atomic_bool stop;
    atomic_int ok, eio, other;
};

static void *racer(void *arg)
{
    struct race *r = arg;
    while (!atomic_load(&r->stop)) {
        struct errbuf err;
        int rc = one_run(r->cf, &err);
        if (rc == 0)
            r->ok++;
        else if (rc == -EIO && strstr(err.msg, "/s.sh changed while"))
            r->eio++;
        else
            r->other++;
    }
    return NULL;
}

static void test_threads(void)
{
    struct race r = {.cf = files_of(PROC_COMMAND)};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, racer, &r);
    for (int i = 0; i < 5; i++)
        write_script("echo v1\n");
    pause_tick();
    atomic_store(&r.stop, true);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(r.ok > 0);
    CHECK_EQ_INT(r.other, 0);
    struct errbuf err;
    CHECK_EQ_INT(one_run(r.cf, &err), 0);
    code_files_free(r.cf);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "codeid"))
        return 1;
    RUN(test_between_runs);
    RUN(test_during_a_run);
    RUN(test_undone_while_another_runs);
    RUN(test_change_while_starting);
    RUN(test_gone);
    RUN(test_plugin);
    RUN(test_threads);
    check_rmtree(dir);
    return check_done();
}
