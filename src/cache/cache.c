/* cache.c: the backing directory (see cache.h): trusted only when it is the user's own, its
 * format marker, the conversion of an older layout, the registry of processes using it (one
 * configuration at a time), byte-range locks, whether it keeps extended attributes, and its
 * recreation when removed under a mount.
 * Chunk files are in chunkfile.c, ROI results in store.c. */
#include "cache_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../zarr/zarr.h"
#include "claim.h"
#include "store.h"

#define FORMAT_TEXT CACHE_FORMAT_TEXT

/* Lock bytes of locks/all: appends (store.c) and the users/ check below; chunks; results. */
#define LOCK_USERS       1
#define LOCK_CHUNK_BASE  16ULL
#define LOCK_RESULT_BASE (1ULL << 62)

const char *cache_path(const struct cache *c)
{
    return c->path;
}

struct store *cache_store(struct cache *c)
{
    return c->store;
}

/* ---- trust ---- */

/* 0 when the directory fd (named path) belongs to us and only we may write to it. */
static int check_trusted(int fd, const char *path, struct errbuf *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return err_set(err, -errno, "%s: %s", path, strerror(errno));
    uid_t me = geteuid();
    if (st.st_uid != me)
        return err_set(err, -EINVAL, "%s: owned by uid %u, not by you (uid %u); refusing to use it",
                       path, (unsigned)st.st_uid, (unsigned)me);
    if (st.st_mode & 022)
        return err_set(err, -EINVAL, "%s: is writable by %s (mode %04o); refusing to use it", path,
                       st.st_mode & 02 ? "others" : "its group", (unsigned)(st.st_mode & 07777));
    return 0;
}

int cache_check_trusted(const char *path, struct errbuf *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, -errno, "%s: %s", path, strerror(errno));
    int r = check_trusted(fd, path, err);
    close(fd);
    return r;
}

/* Creates (0700) and opens subdirectory name of dirfd, which must be a trusted directory and
 * not a symbolic link. A descriptor, or -errno (-EINVAL: untrusted) with err set. */
static int open_subdir(int dirfd, const char *dirpath, const char *name, struct errbuf *err)
{
    char *path = xasprintf("%s/%s", dirpath, name);
    int fd = -1, r = 0;
    if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST) {
        r = err_set(err, -errno, "%s: cannot create: %s", path, strerror(errno));
    } else if ((fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        r = errno == ELOOP || errno == ENOTDIR
                ? err_set(err, -EINVAL,
                          "%s: is a symbolic link or not a directory; refusing to use it", path)
                : err_set(err, -errno, "%s: %s", path, strerror(errno));
    } else if ((r = check_trusted(fd, path, err)) < 0) {
        close(fd);
        fd = -1;
    }
    free(path);
    return r < 0 ? r : fd;
}

/* Removes everything in directory fd, subdirectories to depth levels. */
static void empty_dir(int fd, int depth)
{
    DIR *d = opendir_at(fd, ".");
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (unlinkat(fd, de->d_name, 0) == 0 || errno != EISDIR || depth == 0)
            continue;
        int sub = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            empty_dir(sub, depth - 1);
            close(sub);
        }
        unlinkat(fd, de->d_name, AT_REMOVEDIR);
    }
    closedir(d);
}

/* Reads the small regular file name of dirfd (not following links) into buf (NUL ended):
 * its length, or -errno. */
static ssize_t read_small(int dirfd, const char *name, char *buf, size_t cap)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    size_t got = 0;
    int r = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
    if (r == 0)
        r = pread_full(fd, buf, cap - 1, 0, &got);
    close(fd);
    buf[got] = '\0';
    return r < 0 ? r : (ssize_t)got;
}

/* ---- the format ---- */

/* Empty but for what a cache of this layout being made holds before its marker shows: its
 * marker's temporary files (file_write_atomic's ".tmp.*", "format.tmp.*" before: a process that
 * made the directory and was killed before the marker's rename, or one writing it now) and, made by
 * another host at this moment, its subdirectories, a marker this host does not see yet (a
 * network file system's cached lookup) and a marker renamed over while it was read (kept as
 * .nfsXXXX by NFS, .fuse_hiddenXXXX by FUSE). Such a directory is still new, not a foreign one.
 * *format_listed says whether the marker is listed. */
static bool dir_is_new(int fd, bool *format_listed, char *foreign, size_t foreign_len)
{
    static const char *const ours[] = {".", "..", "chunks", "results", "locks", "users", "inputs"};
    *format_listed = false;
    DIR *d = opendir_at(fd, ".");
    if (!d)
        return false;
    bool empty = true;
    struct dirent *de;
    while (empty && (de = readdir(d))) {
        /* a marker's temporary file; a file renamed over while open, kept by NFS or FUSE */
        bool mine = !strncmp(de->d_name, "format.tmp.", 11) || !strncmp(de->d_name, ".tmp.", 5) ||
                    !strncmp(de->d_name, ".nfs", 4) || !strncmp(de->d_name, ".fuse_hidden", 12);
        for (size_t i = 0; !mine && i < sizeof ours / sizeof ours[0]; i++)
            mine = !strcmp(de->d_name, ours[i]);
        if (!strcmp(de->d_name, "format"))
            mine = *format_listed = true;
        if (!mine)
            snprintf(foreign, foreign_len, "%s", de->d_name);
        empty = mine;
    }
    closedir(d);
    return empty;
}

/* The layout of an older roifs that the directory holds (2: keys of another hash; 1: one file
 * per result and a manifest), or 0. */
static int older_layout(int dirfd)
{
    char text[256];
    if (read_small(dirfd, "format", text, sizeof text) >= 0 &&
        (!strcmp(text, "roifs-cache 2\n") || !strcmp(text, "roifs-cache 3\n")))
        return text[12] - '0';
    if (read_small(dirfd, "manifest", text, sizeof text) >= 0 &&
        (!strncmp(text, "roifs-cache 1\n", 14) || !strncmp(text, "roifs-level 1\n", 14)))
        return 1;
    return 0;
}

/* Makes the directory a cache of this layout: kept as it is, made from nothing, or converted by
 * emptying from an older layout (whose keys mean nothing now: never a wrong hit); anything else
 * is refused. */
static int check_format(struct cache *c, struct errbuf *err)
{
    char text[256], foreign[256] = "";
    bool listed = false, fresh = false;
    for (int i = 0; i < 30; i++) {
        ssize_t got = read_small(c->dirfd, "format", text, sizeof text);
        if (got >= 0 && !strcmp(text, FORMAT_TEXT))
            return 0;
        fresh = got < 0 && dir_is_new(c->dirfd, &listed, foreign,
                                      sizeof foreign); /* a marker of another kind: not new */
        if (!fresh || !listed)
            break;
        struct timespec pause = {0, 100 * 1000 * 1000};
        nanosleep(&pause, NULL); /* listed, not seen yet: another host's, just made */
    }
    if (!fresh) {
        int old = older_layout(c->dirfd);
        if (!old)
            return err_set(err, -EINVAL,
                           "%s: not a roifs cache directory (not empty: it holds '%s'; no roifs "
                           "format marker); refusing to use it",
                           c->path, *foreign ? foreign : "format");
        log_warn("cache %s: made by an older roifs (cache layout %d); emptying it", c->path, old);
        empty_dir(c->dirfd, 3);
    }
    int r = file_write_atomic(c->dirfd, "format", FORMAT_TEXT, strlen(FORMAT_TEXT), true);
    /* another host making the cache at this moment wrote the same marker */
    if (r < 0 && read_small(c->dirfd, "format", text, sizeof text) >= 0 &&
        !strcmp(text, FORMAT_TEXT))
        r = 0;
    if (r < 0)
        return err_set(err, r, "%s/format: cannot write: %s", c->path, strerror(-r));
    return 0;
}

/* ---- locks ---- */

/* Claims (claim.h) in DIR/locks: exclusive files naming their holder, with a lease, which
 * hold between hosts whatever the file system's byte-range locks do; a wait takes the
 * byte-range lock of a byte of locks/all first, so that processes of one host wait in the
 * kernel rather than by looking again. Each handle
 * is a claim of its own, so two holders conflict even inside one process. */
static int take_lock(struct cache *c, char kind, uint64_t byte, bool wait)
{
    char name[40];
    snprintf(name, sizeof name, "%c%" PRIx64, kind, byte);
    return claim_take(c->locks_fd, name, byte, wait);
}

void cache_set_lease(unsigned seconds)
{
    claim_set_lease(seconds);
}

void cache_unlock(struct cache *c, int lock)
{
    (void)c;
    claim_release(lock);
}

int cache_lock_chunk(struct cache *c, uint64_t id, bool wait)
{
    return take_lock(c, 'c', LOCK_CHUNK_BASE + id % (LOCK_RESULT_BASE - LOCK_CHUNK_BASE), wait);
}

int cache_lock_result(struct cache *c, struct key128 key)
{
    return take_lock(c, 'r', LOCK_RESULT_BASE + (key.lo >> 2), true);
}

/* ---- users: one configuration at a time ---- */

/* A registration is the claim users/NAME (renewed while its process runs) and NAME.info,
 * "CONFIG\nPID HOST\nversion V\n", written whole. Whether its process is live: on this host,
 * by its pid and start time; on another, by the file system's own times: its claim was
 * renewed (modified) within the lease and 5 s before fs_now, the file system's time now
 * (claim_fs_time; 0: unknown, live). 1 live, 0 gone, -errno. */
static int registration_live(int users_fd, const char *name, int64_t fs_now)
{
    char text[1024];
    int fd = openat(users_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    size_t got = 0;
    int r = fstat(fd, &st) < 0 ? -errno : pread_full(fd, text, sizeof text - 1, 0, &got);
    close(fd);
    if (r < 0)
        return r;
    text[got] = '\0';
    int j = claim_judge_holder(text);
    if (j >= 0)
        return j;
    int64_t age = fs_now ? fs_now - ts_to_ns(st.st_mtim) : 0;
    return age <= ((int64_t)claim_lease() + 5) * 1000000000LL;
}

/* Reads NAME.info of a registration into text (NUL ended; "" when there is none). */
static void read_info(int users_fd, const char *name, char *text, size_t cap)
{
    char *info = xasprintf("%s.info", name);
    if (read_small(users_fd, info, text, cap) < 0)
        text[0] = '\0';
    free(info);
}

/* "CONFIG (pid N on HOST)" of a registration's info text. */
static void describe(const char *text, char *who, size_t len)
{
    const char *nl = strchr(text, '\n');
    int n = nl ? (int)(nl - text) : (int)strlen(text);
    long pid = 0;
    char host[256] = "?";
    if (nl)
        sscanf(nl + 1, "%ld %255s", &pid, host);
    snprintf(who, len, "%.*s (pid %ld on %s)", n, n ? text : "another configuration", pid, host);
}

static bool is_registration(const char *name)
{
    size_t n = strlen(name);
    return name[0] != '.' && !(n > 5 && !strcmp(name + n - 5, ".info")) &&
           !(n > 5 && !strcmp(name + n - 5, ".take"));
}

/* Refuses when a live process serves another configuration from this directory; removes the
 * registrations of processes that are gone. users_fd: DIR/users; mine: our name's prefix. */
static int check_users(struct cache *c, int users_fd, const char *mine, int64_t fs_now,
                       struct errbuf *err)
{
    DIR *d = opendir_at(users_fd, ".");
    if (!d)
        return err_set(err, -errno, "%s/users: %s", c->path, strerror(errno));
    int r = 0;
    struct dirent *de;
    while (r == 0 && (de = readdir(d))) {
        if (!is_registration(de->d_name))
            continue;
        int live = registration_live(users_fd, de->d_name, fs_now);
        if (live <= 0) {
            if (live == 0 || live == -ENOENT) { /* its process is gone */
                char *info = xasprintf("%s.info", de->d_name);
                unlinkat(users_fd, info, 0);
                free(info);
            }
            unlinkat(users_fd, de->d_name, 0);
        } else if (strncmp(de->d_name, mine, strlen(mine)) != 0) {
            char text[4200], who[4400];
            read_info(users_fd, de->d_name, text, sizeof text);
            describe(text, who, sizeof who);
            r = err_set(err, -EINVAL,
                        "%s: in use by %s; a cache directory serves one configuration at a time",
                        c->path, who);
        }
    }
    closedir(d);
    return r;
}

/* Writes NAME.info: "CONFIG\nPID HOST\nversion V\n" (whole, renamed into place). V names the
 * version of the configuration (its manifest and processor identity) that this process
 * serves: garbage collection keeps what another version may need. */
static int write_registration(struct cache *c, int users_fd)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    char *text = xasprintf("%s\n%ld %s\nversion %016llx\n", c->config_path, (long)getpid(), host,
                           (unsigned long long)c->version);
    char *info = xasprintf("%s.info", c->user_name);
    int r = file_write_atomic(users_fd, info, text, strlen(text), false);
    free(info);
    free(text);
    return r;
}

/* Takes our registration claim, named by the configuration, the host and the process. */
static int make_registration(struct cache *c, int users_fd, const char *mine)
{
    static _Atomic unsigned counter;
    free(c->user_name);
    c->user_name = xasprintf("%s%016" PRIx64 "-%ld.%u", mine,
                             hash64(HASH64_INIT, claim_host(), strlen(claim_host())),
                             (long)getpid(), ++counter);
    c->user_claim = claim_take(users_fd, c->user_name, UINT64_MAX, false);
    return c->user_claim < 0 ? c->user_claim : write_registration(c, users_fd);
}

/* Registers this process in DIR/users (a claim renewed until it exits), after checking, under
 * the users claim, that no other configuration is served from here. */
static int register_user(struct cache *c, const char *config_path, struct errbuf *err)
{
    int users_fd = open_subdir(c->dirfd, c->path, "users", err);
    if (users_fd < 0)
        return users_fd;
    char mine[24];
    snprintf(mine, sizeof mine, "%016" PRIx64 "-",
             hash64(HASH64_INIT, config_path, strlen(config_path)));
    int lock = take_lock(c, 'u', LOCK_USERS, true);
    int r = lock < 0 ? err_set(err, lock, "%s/locks: %s", c->path, strerror(-lock)) : 0;
    int64_t fs_now = claim_fs_time(); /* the users claim was just made: the time it was given */
    if (r == 0)
        r = check_users(c, users_fd, mine, fs_now, err);
    if (r == 0) {
        c->config_path = xstrdup(config_path);
        int e = make_registration(c, users_fd, mine);
        if (e < 0)
            r = err_set(err, e, "%s/users/%s: cannot register: %s", c->path, c->user_name,
                        strerror(-e));
    }
    cache_unlock(c, lock);
    c->users_fd = users_fd;
    return r;
}

void cache_adopt(struct cache *c)
{
    if (c->user_claim < 0 || c->user_pid == getpid())
        return;
    /* forked: the registration names the process that serves the cache */
    char *old = xstrdup(c->user_name);
    const char *dash = strchr(old, '-');
    char mine[24];
    snprintf(mine, sizeof mine, "%.*s", dash ? (int)(dash - old + 1) : 0, old);
    int prev = c->user_claim;
    if (make_registration(c, c->users_fd, mine) == 0) {
        c->user_pid = getpid();
        claim_release(prev);
        char *info = xasprintf("%s.info", old);
        unlinkat(c->users_fd, info, 0);
        free(info);
    } else {
        log_warn("cache %s: cannot register the serving process", c->path);
        c->user_claim = prev;
    }
    free(old);
}

int cache_other_version(struct cache *c, char *who, size_t len)
{
    if (c->users_fd < 0)
        return 0;
    DIR *d = opendir_at(c->users_fd, ".");
    if (!d)
        return -errno;
    char mine[32];
    snprintf(mine, sizeof mine, "version %016llx\n", (unsigned long long)c->version);
    /* the file system's time now, from our own claims' (0: none yet, every one judged live) */
    int64_t fs_now = claim_fs_time();
    int found = 0;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        if (!is_registration(de->d_name) || (c->user_name && strcmp(de->d_name, c->user_name) == 0))
            continue;
        if (registration_live(c->users_fd, de->d_name, fs_now) != 1)
            continue;
        char text[4200];
        read_info(c->users_fd, de->d_name, text, sizeof text);
        if (text[0] && !strstr(text, mine)) {
            describe(text, who, len);
            found = 1;
        }
    }
    closedir(d);
    return found;
}

/* ---- opening ---- */

bool cache_follow_sidecar_mark(struct cache *c)
{
    struct stat st;
    if (fstatat(c->chunks_fd, CACHE_SIDECAR_MARK, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISREG(st.st_mode))
        return false;
    if (!c->sidecar)
        log_info("cache %s: a process without user extended attributes shares it (%s/chunks/%s); "
                 "chunk records are kept in sidecar files (chunks/<id>.meta)",
                 c->path, c->path, CACHE_SIDECAR_MARK);
    c->sidecar = true;
    return true;
}

/* Where chunk records go (chunkfile.c): in extended attributes, or in sidecar files where the
 * file system keeps no user xattrs (found by trying) or another host's view of the cache has
 * none (chunks/CACHE_SIDECAR_MARK, which such a host makes here). */
static void probe_xattrs(struct cache *c)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".probe.%016" PRIx64 ".%ld",
             hash64(HASH64_INIT, claim_host(), strlen(claim_host())), (long)getpid());
    int fd = openat(c->chunks_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return; /* cannot write here: writes will say why */
    char one = 1;
    c->sidecar = fsetxattr(fd, CACHE_CHUNK_XATTR ".probe", &one, 1, 0) < 0 &&
                 (errno == ENOTSUP || errno == EOPNOTSUPP);
    close(fd);
    unlinkat(c->chunks_fd, tmp, 0);
    if (c->sidecar) {
        /* the other hosts' processes, whose view may have xattrs, write sidecars too: every
         * record is then one this view can read */
        int m = openat(c->chunks_fd, CACHE_SIDECAR_MARK,
                       O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (m >= 0)
            close(m);
        log_info("cache %s: no user extended attributes here; chunk records are kept in "
                 "sidecar files (chunks/<id>.meta)",
                 c->path);
    } else if (!cache_follow_sidecar_mark(c)) {
        log_debug("cache %s: chunk records in extended attributes", c->path);
    }
}

/* Opens chunks/, results/ and locks/ of the directory dirfd into fds. */
static int open_subdirs(const char *path, int dirfd, int fds[3], struct errbuf *err)
{
    static const char *const names[] = {"chunks", "results", "locks"};
    for (int i = 0; i < 3; i++)
        if ((fds[i] = open_subdir(dirfd, path, names[i], err)) < 0)
            return fds[i];
    return 0;
}

void cache_keep_input_hashes(struct cache *c, struct zarr_input *in)
{
    struct errbuf err = {{0}};
    int fd = open_subdir(c->dirfd, c->path, "inputs", &err);
    if (fd < 0 || zarr_input_keep_hashes(in, fd) < 0)
        log_warn("cache %s: %s; the input's files will be read again after a remount", c->path,
                 fd < 0 ? err.msg : "cannot keep the input's content hashes");
    if (fd >= 0)
        close(fd);
}

int cache_open(const char *dir, const char *config_path, uint64_t version, struct cache **out,
               struct errbuf *err)
{
    struct cache *c = xcalloc(1, sizeof *c);
    c->path = xstrdup(dir);
    c->version = version;
    c->user_claim = c->users_fd = -1;
    c->user_pid = getpid();
    pthread_mutex_init(&c->repair_lock, NULL);
    pthread_mutex_init(&c->verified_lock, NULL);
    map_init(&c->ver, sizeof(struct verified), 128);
    pthread_cond_init(&c->verified_cv, NULL);
    c->dirfd = c->chunks_fd = c->results_fd = c->locks_fd = -1;
    int r = mkdir_p(c->path, 0700), fds[3] = {-1, -1, -1};
    if (r < 0) {
        err_set(err, r, "%s: cannot create the cache directory: %s", c->path, strerror(-r));
        goto fail;
    }
    c->dirfd = open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dirfd < 0) {
        r = err_set(err, -errno, "%s: %s", c->path, strerror(errno));
        goto fail;
    }
    if ((r = check_trusted(c->dirfd, c->path, err)) < 0 || (r = check_format(c, err)) < 0)
        goto fail;
    r = open_subdirs(c->path, c->dirfd, fds, err);
    c->chunks_fd = fds[0];
    c->results_fd = fds[1];
    c->locks_fd = fds[2];
    if (r < 0)
        goto fail;
    if (config_path && (r = register_user(c, config_path, err)) < 0)
        goto fail;
    if (!config_path) /* nested (a pyramid level's): the parent's users, to look at */
        c->users_fd = openat(c->dirfd, "../users", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct store *s;
    char *rpath = xasprintf("%s/results", c->path);
    r = store_open(c->results_fd, c->locks_fd, rpath, &s, err);
    free(rpath);
    if (r < 0)
        goto fail;
    c->store = s;
    probe_xattrs(c);
    *out = c;
    return 0;
fail:
    cache_close(c);
    return r;
}

void cache_close(struct cache *c)
{
    if (!c)
        return;
    /* Our registration goes (a forked parent's was replaced by the child's, cache_adopt); one
     * left by a process killed is removed by the next process to look. */
    if (c->user_claim >= 0 && c->user_pid == getpid()) {
        char *info = xasprintf("%s.info", c->user_name);
        unlinkat(c->users_fd, info, 0);
        free(info);
        claim_release(c->user_claim);
    }
    if (c->users_fd >= 0)
        close(c->users_fd);
    store_close(c->store);
    if (c->locks_fd >= 0)
        claim_drop_spares(c->locks_fd);
    for (int i = 0; i < c->nold_stores; i++)
        store_close(c->old_stores[i]);
    int fds[] = {c->dirfd, c->chunks_fd, c->results_fd, c->locks_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    for (int i = 0; i < c->nold; i++)
        close(c->old_fds[i]);
    free(c->verifying); /* the chunk files chunkfile.c verified */
    map_destroy(&c->ver);
    pthread_mutex_destroy(&c->repair_lock);
    pthread_mutex_destroy(&c->verified_lock);
    pthread_cond_destroy(&c->verified_cv);
    free(c->user_name);
    free(c->config_path);
    free(c->path);
    free(c);
}

/* The cache directory was removed under a running mount: recreate it and point new writes
 * there. Descriptors and the store of the old one stay open until cache_close, since other
 * threads may be using them. */
int cache_repair(struct cache *c)
{
    pthread_mutex_lock(&c->repair_lock);
    struct stat st;
    if (fstatat(c->chunks_fd, ".", &st, 0) == 0 && st.st_nlink > 0) {
        pthread_mutex_unlock(&c->repair_lock); /* another thread repaired it already */
        return 0;
    }
    log_warn("%s: the cache directory disappeared; recreating it", c->path);
    struct errbuf err = {{0}};
    int fds[4] = {-1, -1, -1, -1}, r = mkdir_p(c->path, 0700);
    struct store *s = NULL;
    if (r == 0 && (fds[0] = open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        r = -errno;
    if (r == 0)
        r = file_write_atomic(fds[0], "format", FORMAT_TEXT, strlen(FORMAT_TEXT), true);
    if (r == 0)
        r = open_subdirs(c->path, fds[0], fds + 1, &err);
    char *rpath = xasprintf("%s/results", c->path);
    if (r == 0)
        r = store_open(fds[2], fds[3], rpath, &s, &err);
    free(rpath);
    if (r == 0 && c->nold + 4 <= CACHE_MAX_OLD && c->nold_stores < CACHE_MAX_OLD) {
        int old[4] = {c->dirfd, c->chunks_fd, c->results_fd, c->locks_fd};
        c->old_stores[c->nold_stores++] = c->store;
        c->store = s;
        c->dirfd = fds[0];
        c->chunks_fd = fds[1];
        c->results_fd = fds[2];
        c->locks_fd = fds[3];
        for (int i = 0; i < 4; i++)
            c->old_fds[c->nold++] = old[i];
    } else {
        store_close(s);
        for (int i = 0; i < 4; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        if (r == 0)
            r = -EMFILE;
        log_error("%s: cannot recreate the cache directory: %s", c->path, strerror(-r));
    }
    pthread_mutex_unlock(&c->repair_lock);
    return r;
}

bool cache_sidecars(const struct cache *c)
{
    return c->sidecar;
}

void cache_set_sidecars(struct cache *c, bool on)
{
    c->sidecar = on;
}
