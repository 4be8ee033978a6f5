/* test_cache.c: the cache directory (src/cache/cache.c, chunkfile.c): trust checks, the
 * format marker and the conversion of the older layout, one configuration at a time (users/),
 * chunk locks, chunk files and their records (current, stale, damaged, a symbolic link in
 * place), descriptors of written chunks that outlive their name, and removals that leave a
 * newer file alone; records found whichever way their writer kept them (xattr or sidecar). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cache/cache.h"
#include "cache/claim.h"
#include "key.h"
#include "scratch.h"

static char dir[256];

static char *path_of(const char *name)
{
    return xasprintf("%s/%s", dir, name);
}

/* cache_open of dir/name; the error's message goes to msg (may be NULL). */
static int open_cache(const char *name, const char *config, struct cache **c, struct errbuf *msg)
{
    char *p = path_of(name);
    struct errbuf err = {{0}};
    int r = cache_open(p, config, 1, c, msg ? msg : &err);
    free(p);
    return r;
}

static struct key128 key_n(uint64_t n)
{
    struct keyhash h;
    key_init(&h, "test_cache");
    key_add_u64(&h, n);
    return key_final(&h);
}

static bool exists(const char *name)
{
    char *p = path_of(name);
    struct stat st;
    bool yes = lstat(p, &st) == 0;
    free(p);
    return yes;
}

static void test_trust(void)
{
    struct errbuf msg = {{0}};
    struct cache *c = NULL;
    char *p = path_of("open");
    mkdir_p(p, 0700);
    chmod(p, 0777);
    CHECK_EQ_INT(open_cache("open", NULL, &c, &msg), -EINVAL);
    CHECK_STR_CONTAINS(msg.msg, "writable by others");
    chmod(p, 0700);
    CHECK_EQ_INT(open_cache("open", NULL, &c, &msg), 0);
    cache_close(c);
    /* a subdirectory replaced by a symbolic link is refused, not followed */
    char *results = path_of("open/results"), *elsewhere = path_of("elsewhere");
    CHECK_EQ_INT(rename(results, elsewhere), 0);
    CHECK_EQ_INT(symlink(elsewhere, results), 0);
    CHECK_EQ_INT(open_cache("open", NULL, &c, &msg), -EINVAL);
    CHECK_STR_CONTAINS(msg.msg, "symbolic link");
    CHECK_EQ_INT(cache_check_trusted(p, NULL), 0);
    free(results);
    free(elsewhere);
    free(p);
}

static void test_format(void)
{
    struct errbuf msg = {{0}};
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("fresh", NULL, &c, &msg), 0);
    cache_close(c);
    char *text = NULL, *fp = path_of("fresh/format");
    CHECK(file_read_all(fp, &text, NULL) == 0 && strcmp(text, CACHE_FORMAT_TEXT) == 0);
    free(text);
    free(fp);
    /* a directory of something else is left alone */
    char *p = path_of("foreign");
    mkdir_p(p, 0700);
    scratch_write_file(dir, "foreign/notes.txt", "mine", 4);
    CHECK_EQ_INT(open_cache("foreign", NULL, &c, &msg), -EINVAL);
    CHECK_STR_CONTAINS(msg.msg, "not a roifs cache directory");
    CHECK(exists("foreign/notes.txt"));
    free(p);
    /* a marker's temporary file alone (a creator killed before its rename, or one writing it
     * now) is still a new cache, not a foreign directory */
    p = path_of("killed");
    mkdir_p(p, 0700);
    scratch_write_file(dir, "killed/format.tmp.4242.1", "roifs-cache 3\n", 14);
    c = NULL;
    CHECK_EQ_INT(open_cache("killed", NULL, &c, &msg), 0);
    cache_close(c);
    CHECK(exists("killed/format"));
    free(p);
    /* the same with the temporary names of today's writer (".tmp.HOSTTAG.PID.N": another host
     * writing the marker at this moment) */
    p = path_of("killed2");
    mkdir_p(p, 0700);
    scratch_write_file(dir, "killed2/.tmp.34506fc2.4.1", "roifs-cache 4\n", 14);
    c = NULL;
    CHECK_EQ_INT(open_cache("killed2", NULL, &c, &msg), 0);
    cache_close(c);
    CHECK(exists("killed2/format"));
    free(p);
    /* the older layout is emptied and converted */
    p = path_of("old");
    mkdir_p(p, 0700);
    scratch_write_file(dir, "old/manifest", "roifs-cache 1\ninput x\n", 22);
    scratch_write_file(dir, "old/chunks/0", "stale", 5);
    CHECK_EQ_INT(open_cache("old", NULL, &c, &msg), 0);
    cache_close(c);
    CHECK(!exists("old/manifest") && !exists("old/chunks/0") && exists("old/format"));
    free(p);
    /* so is layout 3, whose packs were appended to by every process under byte-range locks
     * alone and whose registrations were named by pid alone (several hosts) */
    p = path_of("three");
    mkdir_p(p, 0700);
    scratch_write_file(dir, "three/format", "roifs-cache 3\n", 14);
    scratch_write_file(dir, "three/chunks/0", "stale", 5);
    scratch_write_file(dir, "three/results/pack-000001", "old records", 11);
    scratch_write_file(dir, "three/users/0123456789abcdef-42.1", "/cfg/x.ini\n42\n", 14);
    CHECK_EQ_INT(open_cache("three", "/cfg/y.ini", &c, &msg), 0);
    cache_close(c);
    CHECK(!exists("three/chunks/0") && !exists("three/results/pack-000001") &&
          !exists("three/users/0123456789abcdef-42.1"));
    free(p);
    /* so is layout 2, whose keys were of another hash: made again, never a wrong hit */
    p = path_of("two");
    mkdir_p(p, 0700);
    scratch_write_file(dir, "two/format", "roifs-cache 2\n", 14);
    scratch_write_file(dir, "two/chunks/0", "stale", 5);
    scratch_write_file(dir, "two/results/pack-000001", "old records", 11);
    CHECK_EQ_INT(open_cache("two", NULL, &c, &msg), 0);
    cache_close(c);
    CHECK(!exists("two/chunks/0") && !exists("two/results/pack-000001"));
    text = NULL;
    fp = path_of("two/format");
    CHECK(file_read_all(fp, &text, NULL) == 0 && strcmp(text, CACHE_FORMAT_TEXT) == 0);
    free(text);
    free(fp);
    free(p);
}

/* One configuration at a time: a second one is refused while the first is served, a cache
 * opened without a configuration (a pyramid level's) registers nothing. */
static void test_users(void)
{
    struct errbuf msg = {{0}};
    struct cache *a = NULL, *b = NULL, *n = NULL;
    CHECK_EQ_INT(open_cache("users", "/cfg/a.ini", &a, &msg), 0);
    CHECK_EQ_INT(open_cache("users", "/cfg/b.ini", &b, &msg), -EINVAL);
    CHECK_STR_CONTAINS(msg.msg, "in use by /cfg/a.ini");
    CHECK_EQ_INT(open_cache("users", "/cfg/a.ini", &b, &msg), 0); /* the same: shared */
    cache_close(b);
    CHECK_EQ_INT(open_cache("users", NULL, &n, &msg), 0);
    cache_close(a);
    CHECK_EQ_INT(open_cache("users", "/cfg/b.ini", &b, &msg), 0); /* a is gone */
    cache_close(b);
    cache_close(n);
    CHECK_EQ_INT(open_cache("nested", NULL, &n, &msg), 0);
    CHECK(!exists("nested/users"));
    cache_close(n);
}

static void test_locks(void)
{
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("locks", NULL, &c, NULL), 0);
    int l1 = cache_lock_chunk(c, 3, false);
    CHECK(l1 >= 0);
    CHECK_EQ_INT(cache_lock_chunk(c, 3, false), -EWOULDBLOCK); /* even in one process */
    int l2 = cache_lock_chunk(c, 4, false);
    CHECK(l2 >= 0);
    cache_unlock(c, l1);
    int l3 = cache_lock_chunk(c, 3, false);
    CHECK(l3 >= 0);
    cache_unlock(c, l2);
    cache_unlock(c, l3);
    cache_close(c);
}

/* Writes a claim or registration file dir/name held by holder text who (a claim's form). */
static void write_claim(const char *name, const char *who)
{
    char *text = xasprintf("roifs-claim 1\n%snonce 0000000000000001\nrenewed %020d\n", who, 0);
    scratch_write_file(dir, name, text, strlen(text));
    free(text);
}

/* Claims hold between hosts (claim.h): another host's claim is live while it changes (a
 * lease), never judged by a local pid; one of this host whose process is gone is taken over at
 * once; a registration of another host with our very pid neither collides with ours nor is
 * removed as gone, unless its lease ran out by the file system's times. */
static void test_claims_between_hosts(void)
{
    struct errbuf msg = {{0}};
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("claims", NULL, &c, NULL), 0);
    /* another host's holder, with our pid and start time */
    char *other = xasprintf("host elsewhere\nboot 0\npidns 1\npid %ld\nstart %llu\n",
                            (long)getpid(), claim_my_start());
    write_claim("claims/locks/c15", other); /* chunk 5: byte 16 + 5 */
    CHECK_EQ_INT(cache_lock_chunk(c, 5, false), -EWOULDBLOCK);
    CHECK_EQ_INT(cache_lock_chunk(c, 5, false), -EWOULDBLOCK); /* unchanged, but within the lease */
    /* this host's holder whose process ended: taken over at once */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    waitpid(child, NULL, 0);
    char *dead = xasprintf("%spid %ld\nstart 1\n", claim_host(), (long)child);
    write_claim("claims/locks/c16", dead); /* chunk 6 */
    int l = cache_lock_chunk(c, 6, false);
    CHECK(l >= 0);
    cache_unlock(c, l);
    CHECK(!exists("claims/locks/c16"));
    /* and of a live process of this host: held */
    char *live = xasprintf("%s", claim_holder_text());
    write_claim("claims/locks/c17", live);
    CHECK_EQ_INT(cache_lock_chunk(c, 7, false), -EWOULDBLOCK);
    /* clean --unused removes the claims of processes gone: of this host by pid, of another
     * by the file system's time (not renewed for longer than the lease), never a live one */
    write_claim("claims/locks/c99", dead);
    write_claim("claims/locks/c98", other);
    char *old_claim = path_of("claims/locks/c98");
    struct timespec hour_ago[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    CHECK(utimensat(AT_FDCWD, old_claim, hour_ago, 0) == 0);
    free(old_claim);
    CHECK(cache_chunk_remove_leftovers(c) >= 2);
    CHECK(!exists("claims/locks/c99") && !exists("claims/locks/c98"));
    CHECK(exists("claims/locks/c15") && exists("claims/locks/c17")); /* fresh, and live */
    cache_close(c);
    /* registrations: another host's, with our pid, another configuration: refused while its
     * claim is fresh, removed once it is older than the lease (plus 5 s) */
    char *p = path_of("hosts");
    mkdir_p(p, 0700);
    char *users = path_of("hosts/users");
    mkdir_p(users, 0700);
    scratch_write_file(dir, "hosts/format", CACHE_FORMAT_TEXT, strlen(CACHE_FORMAT_TEXT));
    char *reg = xasprintf("hosts/users/0123456789abcdef-fedcba9876543210-%ld.1", (long)getpid());
    write_claim(reg, other);
    char *info = xasprintf("%s.info", reg);
    scratch_write_file(dir, info, "/cfg/other.ini\n42 elsewhere\nversion 1\n", 38);
    CHECK_EQ_INT(open_cache("hosts", "/cfg/mine.ini", &c, &msg), -EINVAL);
    CHECK_STR_CONTAINS(msg.msg, "in use by /cfg/other.ini (pid 42 on elsewhere)");
    char *rp = path_of(reg);
    struct timespec old[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    CHECK(utimensat(AT_FDCWD, rp, old, 0) == 0);
    c = NULL;
    CHECK_EQ_INT(open_cache("hosts", "/cfg/mine.ini", &c, &msg), 0);
    CHECK(!exists(reg) && !exists(info));
    cache_close(c);
    free(rp);
    free(info);
    free(reg);
    free(users);
    free(p);
    free(live);
    free(dead);
    free(other);
}

static enum cache_chunk_state open_state(struct cache *c, uint64_t id, struct key128 k)
{
    int fd = -1;
    enum cache_chunk_state s = cache_chunk_open_current(c, id, k, &fd, NULL);
    if (fd >= 0)
        close(fd);
    return s;
}

/* Flips one byte of dir/name in place (the inode stays). */
static void flip_byte(const char *name)
{
    char *p = path_of(name);
    int fd = open(p, O_RDWR);
    char b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, 0) == 1);
    b ^= 0x55;
    CHECK(pwrite(fd, &b, 1, 0) == 1);
    close(fd);
    free(p);
}

static void test_chunk_files(void)
{
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("chunks", NULL, &c, NULL), 0);
    struct key128 k = key_n(1), other = key_n(2);
    CHECK_EQ_INT(open_state(c, 7, k), CHUNK_ABSENT);
    int lock = cache_lock_chunk(c, 7, false);
    CHECK_EQ_INT(cache_chunk_write(c, 7, "0123456789", 10, k, NULL), 0);
    CHECK_EQ_INT(cache_chunk_write(c, 7, "abcdefghij", 10, k, NULL), 1); /* replaced */
    cache_unlock(c, lock);
    CHECK_EQ_INT(open_state(c, 7, k), CHUNK_CURRENT);
    CHECK_EQ_INT(open_state(c, 7, other), CHUNK_STALE);
    uint64_t size = 0, ino = 0;
    int64_t mtime;
    CHECK_EQ_INT(cache_chunk_stat(c, 7, &size, &mtime, &ino), 0);
    CHECK_EQ_INT(size, 10);
    CHECK(ino != 0);
    /* a byte flipped by a write: the file is no longer as roifs stamped it (its modification
     * time changed), so the next open checks it again, in this process too */
    flip_byte("chunks/chunks/7");
    CHECK_EQ_INT(open_state(c, 7, k), CHUNK_DAMAGED);
    cache_close(c);
    CHECK_EQ_INT(open_cache("chunks", NULL, &c, NULL), 0);
    CHECK_EQ_INT(open_state(c, 7, k), CHUNK_DAMAGED);
    /* a symbolic link in a chunk's place is removed, never followed */
    char *target = path_of("target"), *link = path_of("chunks/chunks/8");
    scratch_write_file(dir, "target", "x", 1);
    CHECK_EQ_INT(symlink(target, link), 0);
    CHECK_EQ_INT(open_state(c, 8, k), CHUNK_DAMAGED);
    CHECK(!exists("chunks/chunks/8") && exists("target"));
    free(target);
    free(link);
    cache_close(c);
}

/* Copies dir/name to a new file renamed over it: the same bytes, another inode, no xattrs. */
static void copy_over(const char *name)
{
    char *p = path_of(name), *tmp = xasprintf("%s.copy", p);
    char buf[256];
    int in = open(p, O_RDONLY), out = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
    ssize_t n = in >= 0 ? read(in, buf, sizeof buf) : -1;
    CHECK(n >= 0 && out >= 0 && write(out, buf, (size_t)n) == n);
    close(in);
    close(out);
    CHECK_EQ_INT(rename(tmp, p), 0);
    free(tmp);
    free(p);
}

/* Several hosts, one cache (docs/operations.md): a host whose view has no user xattrs
 * (sshfs) keeps chunk records in sidecar files, another in xattrs; each reads both, a
 * sidecar written through another view (another inode number) is verified, not refused, and
 * once a host without xattrs marked the cache (chunks/.sidecars) every process writes
 * sidecars, at open or at its next write. */
static void test_records_either_way(void)
{
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("either", NULL, &c, NULL), 0);
    cache_set_sidecars(c, true); /* as the host without xattrs writes it */
    CHECK_EQ_INT(cache_chunk_write(c, 1, "sidecar", 7, key_n(1), NULL), 0);
    CHECK(exists("either/chunks/1.meta"));
    cache_set_sidecars(c, false); /* the host with xattrs reads it */
    CHECK_EQ_INT(open_state(c, 1, key_n(1)), CHUNK_CURRENT);
    CHECK_EQ_INT(cache_chunk_write(c, 2, "xattr", 5, key_n(2), NULL), 0);
    cache_set_sidecars(c, true);
    CHECK_EQ_INT(open_state(c, 2, key_n(2)), CHUNK_CURRENT);
    /* the data file as another view numbers it: not the sidecar's inode, the same bytes */
    copy_over("either/chunks/1");
    CHECK_EQ_INT(open_state(c, 1, key_n(1)), CHUNK_CURRENT);
    CHECK_EQ_INT(open_state(c, 1, key_n(9)), CHUNK_STALE);
    cache_close(c);

    /* the mark made after the open: the next write follows it */
    CHECK_EQ_INT(open_cache("marked", NULL, &c, NULL), 0);
    scratch_write_file(dir, "marked/chunks/.sidecars", "", 0);
    CHECK_EQ_INT(cache_chunk_write(c, 3, "three", 5, key_n(3), NULL), 0);
    CHECK(exists("marked/chunks/3.meta"));
    cache_close(c);
    /* and at the open */
    CHECK_EQ_INT(open_cache("marked", NULL, &c, NULL), 0);
    CHECK(cache_sidecars(c));
    cache_close(c);
}

/* The descriptor cache_chunk_write gives reads the bytes written, whatever happens to the
 * name: an eviction or a newer version cannot take a reader's chunk away. */
static void test_written_fd_outlives_its_name(void)
{
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("fd", NULL, &c, NULL), 0);
    int fd = -1;
    CHECK_EQ_INT(cache_chunk_write(c, 1, "first", 5, key_n(1), &fd), 0);
    CHECK(fd >= 0);
    CHECK_EQ_INT(cache_chunk_write(c, 1, "newer", 5, key_n(2), NULL), 1);
    char *p = path_of("fd/chunks/1");
    unlink(p);
    free(p);
    char buf[8] = {0};
    CHECK_EQ_INT(pread(fd, buf, sizeof buf, 0), 5);
    CHECK(memcmp(buf, "first", 5) == 0);
    CHECK(fcntl(fd, F_GETFL) >= 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY);
    close(fd);
    cache_close(c);
}

/* A removal by name could delete a newer file renamed there since the remover looked:
 * cache_chunk_remove_if removes only the inode it was given, and nothing while the chunk's
 * lock (held by whoever writes it) is taken. */
static void test_remove_only_the_file_seen(void)
{
    struct cache *c = NULL;
    CHECK_EQ_INT(open_cache("remove", NULL, &c, NULL), 0);
    uint64_t size, old_ino, new_ino;
    int64_t mtime;
    CHECK_EQ_INT(cache_chunk_write(c, 2, "old", 3, key_n(1), NULL), 0);
    CHECK_EQ_INT(cache_chunk_stat(c, 2, &size, &mtime, &old_ino), 0);
    CHECK_EQ_INT(cache_chunk_write(c, 2, "new!", 4, key_n(2), NULL), 1);
    CHECK_EQ_INT(cache_chunk_stat(c, 2, &size, &mtime, &new_ino), 0);
    CHECK(old_ino != new_ino);
    CHECK_EQ_INT(cache_chunk_remove_if(c, 2, old_ino), -ESTALE);
    CHECK_EQ_INT(open_state(c, 2, key_n(2)), CHUNK_CURRENT);
    int lock = cache_lock_chunk(c, 2, false);
    CHECK_EQ_INT(cache_chunk_remove_if(c, 2, new_ino), -EBUSY);
    CHECK(exists("remove/chunks/2"));
    cache_unlock(c, lock);
    CHECK_EQ_INT(cache_chunk_remove_if(c, 2, new_ino), 0);
    CHECK(!exists("remove/chunks/2"));
    CHECK_EQ_INT(cache_chunk_remove_if(c, 2, new_ino), -ENOENT);
    /* a symbolic link put where a chunk is being written stays for the writer's rename */
    char *link = path_of("remove/chunks/3");
    CHECK_EQ_INT(symlink("/nonexistent", link), 0);
    lock = cache_lock_chunk(c, 3, false);
    CHECK_EQ_INT(open_state(c, 3, key_n(3)), CHUNK_DAMAGED);
    CHECK(exists("remove/chunks/3"));
    CHECK_EQ_INT(cache_chunk_write(c, 3, "made", 4, key_n(3), NULL), 1);
    cache_unlock(c, lock);
    CHECK_EQ_INT(open_state(c, 3, key_n(3)), CHUNK_CURRENT);
    free(link);
    cache_close(c);
}

int main(void)
{
    if (check_mkdtemp(dir, sizeof dir, "cache"))
        return 1;
    log_open_stderr(false);
    RUN(test_trust);
    RUN(test_format);
    RUN(test_users);
    RUN(test_claims_between_hosts);
    RUN(test_locks);
    RUN(test_chunk_files);
    RUN(test_written_fd_outlives_its_name);
    RUN(test_remove_only_the_file_seen);
    RUN(test_records_either_way);
    check_rmtree(dir);
    return check_done();
}
