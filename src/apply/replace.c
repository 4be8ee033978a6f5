/* replace.c: the run of `roifs apply` (apply.h): each input file replaced by rename as soon as
 * its chunk is assembled and every ROI reading it has its result, journaled; the scratch (the
 * results no chunk still needs) dropped as it goes. The plan (plan.c) says when a chunk may
 * replace its input file, the journal (journal.c) what was replaced. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../engine/engine.h"
#include "../atomic_file.h"
#include "../cache/cache.h"
#include "../nd.h"
#include "internal.h"

#define TMP_PREFIX ".roifs-apply."

/* ---- testing only: ROIFS_TEST_APPLY_KILL=POINT:N kills the process (SIGKILL), so that tests
 * can stop it at every step of an application and of a replacement. ---- */

void apply_fault_point(const char *point)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static long hits;
    const char *spec = getenv("ROIFS_TEST_APPLY_KILL");
    if (!spec)
        return;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len != strlen(point) || strncmp(spec, point, len) != 0)
        return;
    long n = colon ? atol(colon + 1) : 1;
    pthread_mutex_lock(&lock);
    bool kill_now = ++hits == n;
    pthread_mutex_unlock(&lock);
    if (kill_now)
        raise(SIGKILL);
}

/* ---- scratch: the result store and the assembled chunks waiting for their readers ---- */

static uint64_t dir_bytes(const char *path)
{
    DIR *d = opendir(path);
    uint64_t sum = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            sum += (uint64_t)st.st_blocks * 512 > (uint64_t)st.st_size
                       ? (uint64_t)st.st_size
                       : (uint64_t)st.st_blocks * 512;
    }
    closedir(d);
    return sum;
}

static uint64_t scratch_now(struct apply *a)
{
    uint64_t s = dir_bytes(a->results_dir) + a->chunk_bytes;
    if (s > a->peak)
        a->peak = s;
    return s;
}

static bool live_result(void *ctx, struct key128 k)
{
    return plan_result_live(&((struct apply *)ctx)->plan, k);
}

/* Drops the stored results no chunk still to assemble needs, once enough have piled up
 * (lock held). */
static void maybe_compact(struct apply *a)
{
    uint64_t store = dir_bytes(a->results_dir);
    if (store < a->store_after_compaction + a->slack)
        return;
    scratch_now(a);
    char who[512];
    if (cache_other_version(a->c, who, sizeof who) == 1) {
        /* its current results would look unused to this configuration */
        if (!a->other_version_warned)
            a->note("roifs: apply: %s serves another version of this configuration from "
                    "the cache; used results are kept while it runs",
                    who);
        a->other_version_warned = true;
        a->store_after_compaction = store;
        return;
    }
    struct store_compaction out;
    struct errbuf err = {{0}};
    if (store_compact(cache_store(a->c), live_result, a, &out, &err) < 0) {
        a->note("roifs: apply: cannot drop used results (%s); scratch grows", err.msg);
        a->slack *= 2; /* not at every chunk */
    }
    apply_fault_point("compact");
    a->store_after_compaction = dir_bytes(a->results_dir);
}

/* ---- replacing one input file ---- */

/* Copies fd (its size bytes) to out, with the crc32c and length of what was copied. */
static int copy_crc(int out, int fd, uint64_t *len, uint32_t *crc)
{
    char buf[1 << 16];
    uint32_t c = 0;
    uint64_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, (off_t)off);
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        if (out >= 0) {
            int r = write_full(out, buf, (size_t)n);
            if (r < 0)
                return r;
        }
        c = zarr_crc32c(c, buf, (size_t)n);
        off += (uint64_t)n;
    }
    *len = off;
    *crc = c;
    return 0;
}

/* The directory part of key ("" for none) and the temporary file's name beside it. */
static void key_paths(const char *key, char *dir, size_t dlen, char *tmp, size_t tlen)
{
    const char *slash = strrchr(key, '/');
    int n = slash ? (int)(slash - key) : 0;
    snprintf(dir, dlen, "%.*s", n, key);
    snprintf(tmp, tlen, "%.*s%s" TMP_PREFIX "%s", n, key, slash ? "/" : "",
             slash ? slash + 1 : key);
}

/* Replaces input file id with the assembled chunk in fd: a temporary file beside it, made
 * durable, journaled as intended, renamed over it, the directory made durable, journaled as
 * replaced (lock held). */
static int replace_file(struct apply *a, uint64_t id, int fd, struct errbuf *err)
{
    char key[ROIFS_MAX_DIM * 24 + 4], dir[sizeof key], tmp[sizeof key + 32];
    zarr_input_storage_key(a->t->reader, id, key, sizeof key);
    key_paths(key, dir, sizeof dir, tmp, sizeof tmp);
    if (*dir) {
        char *full = path_join(a->input_path, dir);
        int r = mkdir_p(full, 0777);
        free(full);
        if (r < 0)
            return err_set(err, r, "%s/%s: cannot create: %s", a->input_path, dir, strerror(-r));
    }
    struct stat old;
    mode_t mode = fstatat(a->infd, key, &old, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(old.st_mode)
                      ? old.st_mode & 07777
                      : 0666;
    struct atomic_file f;
    int r = atomic_begin(&f, a->infd, key, tmp, NULL, mode);
    if (r < 0)
        return err_set(err, r, "%s/%s: %s", a->input_path, tmp, strerror(-r));
    uint64_t len = 0;
    uint32_t crc = 0;
    r = copy_crc(f.fd, fd, &len, &crc);
    if (r == 0)
        r = atomic_close(&f, ATOMIC_FSYNC);
    if (r < 0) {
        atomic_abort(&f);
        return err_set(err, r, "%s/%s: cannot write: %s", a->input_path, tmp, strerror(-r));
    }
    apply_fault_point("tmp");
    if ((r = journal_intent(&a->j, id, len, crc, err)) < 0)
        return r;
    apply_fault_point("intent");
    if ((r = atomic_commit(&f, 0)) < 0) /* the journal accounts for the temporary file */
        return err_set(err, r, "%s/%s: cannot replace: %s", a->input_path, key, strerror(-r));
    apply_fault_point("rename");
    if ((r = fsync_dir_of(a->infd, key)) < 0)
        return err_set(err, r, "%s/%s: %s", a->input_path, *dir ? dir : ".", strerror(-r));
    if ((r = journal_replaced(&a->j, id, err)) < 0)
        return r;
    apply_fault_point("replaced");
    return 0;
}

/* Replaces every chunk in ready[0..n) (lock held); fd is chunk cur's file (borrowed). */
static int replace_ready(struct apply *a, const uint64_t *ready, size_t n, uint64_t cur, int fd,
                         struct errbuf *err)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t id = ready[i];
        int cfd = fd;
        if (id != cur) {
            int r = cache_chunk_open_plain(a->c, id, &cfd);
            if (r < 0)
                return err_set(err, r, "chunk %llu: its assembled copy is gone (%s)",
                               (unsigned long long)id, strerror(-r));
        }
        struct stat st;
        uint64_t size = fstat(cfd, &st) == 0 ? (uint64_t)st.st_size : 0;
        int r = replace_file(a, id, cfd, err);
        if (id != cur)
            close(cfd);
        if (r < 0)
            return r;
        plan_replaced(&a->plan, id);
        cache_chunk_remove(a->c, id);
        a->chunk_bytes -= size < a->chunk_bytes ? size : a->chunk_bytes;
    }
    maybe_compact(a); /* also before any replacement: a ROI's result is used once its chunks
                       * are assembled */
    return 0;
}

int apply_chunk_ready(void *ctx, size_t k, int fd, const struct cache_chunk_meta *meta,
                      struct errbuf *err)
{
    (void)meta;
    struct apply *a = ctx;
    uint64_t id = a->plan.order[k];
    struct stat st;
    pthread_mutex_lock(&a->lock);
    if (fstat(fd, &st) == 0)
        a->chunk_bytes += (uint64_t)st.st_size;
    size_t n = 0;
    plan_assembled(&a->plan, id, a->ready, &n);
    scratch_now(a);
    int r = a->failed ? 0 : replace_ready(a, a->ready, n, id, fd, err);
    if (r < 0)
        a->failed = true; /* stop replacing: the journal stays consistent */
    pthread_mutex_unlock(&a->lock);
    return r;
}

void apply_progress(struct apply *a, uint64_t *replaced, uint64_t *total, uint64_t *scratch)
{
    pthread_mutex_lock(&a->lock);
    *replaced = a->plan.nreplaced;
    *total = a->plan.nwritten;
    *scratch = scratch_now(a);
    pthread_mutex_unlock(&a->lock);
}

int apply_finish(struct apply *a, struct errbuf *err)
{
    struct errbuf e = {{0}};
    if (journal_finish(&a->j, &e) < 0)
        return err_set(err, -EIO, "%s/apply/%s", cache_path(a->c), e.msg);
    apply_fault_point("finished"); /* the marker stays: the next run removes it */
    return apply_unmark(a, err);
}

/* ---- the state ---- */

void apply_init(struct apply *a, const char *config, struct task *t, apply_note_fn *note)
{
    memset(a, 0, sizeof *a);
    a->config = config;
    a->t = t;
    a->note = note;
    a->infd = -1;
    a->lockfd = -1;
    a->j.fd = a->j.dirfd = -1;
    pthread_mutex_init(&a->lock, NULL);
}

void apply_free(struct apply *a)
{
    plan_free(&a->plan);
    free(a->ready);
    free(a->stored);
    free(a->results_dir);
    journal_close(&a->j);
    apply_marker_free(&a->marker);
    if (a->infd >= 0)
        close(a->infd);
    if (a->lockfd >= 0)
        close(a->lockfd); /* drops the lock */
    task_close(a->t);
    pthread_mutex_destroy(&a->lock);
}
