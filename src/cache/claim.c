/* claim.c: claims on work between hosts (see claim.h): exclusive creation, a holder named by
 * host and process, a lease renewed by a thread of the holder, takeover of expired claims. */
#include "claim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../map.h"
#include "../util.h"

#define CLAIM_MAGIC  "roifs-claim 1\n"
#define CLAIM_TEXT   1024
#define CLAIM_MARGIN 2 /* seconds past the lease by the file system's time: expired */

static _Atomic unsigned lease_s = CLAIM_LEASE_DEFAULT;

void claim_set_lease(unsigned seconds)
{
    lease_s = seconds < CLAIM_LEASE_MIN ? CLAIM_LEASE_MIN : seconds;
}

unsigned claim_lease(void)
{
    return lease_s;
}

/* ---- who we are ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* everything below */
static char host_id[512], holder[700];
static pid_t holder_pid; /* the process holder[] names (it changes at a fork) */
static unsigned long long holder_start;

/* The start time (field 22 of /proc/PID/stat) of pid, 0 when it does not run (or is a zombie). */
static unsigned long long start_of(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t got = 0;
    pread_full(fd, buf, sizeof buf - 1, 0, &got);
    close(fd);
    buf[got] = '\0';
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    char state = 0;
    unsigned long long start = 0;
    /* after ")": state is field 3; start time is field 22 */
    if (sscanf(p + 1,
               " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
               "%*s %llu",
               &state, &start) != 2 ||
        state == 'Z' || state == 'X')
        return 0;
    return start;
}

bool claim_pid_alive(long pid, unsigned long long start)
{
    return pid > 0 && start_of(pid) == start;
}

/* Fills host_id and holder for this process (mu held). */
static void know_myself(void)
{
    pid_t me = getpid();
    if (holder_pid == me)
        return;
    if (!host_id[0]) {
        char name[256] = "", boot[64] = "unknown";
        gethostname(name, sizeof name - 1);
        int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
        size_t got = 0;
        if (fd >= 0) {
            pread_full(fd, boot, sizeof boot - 1, 0, &got);
            close(fd);
            boot[got] = '\0';
            boot[strcspn(boot, "\n")] = '\0';
        }
        struct stat st;
        unsigned long long ns =
            stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
        for (char *p = name; *p; p++)
            if (*p == ' ' || *p == '\n')
                *p = '_';
        snprintf(host_id, sizeof host_id, "host %s\nboot %s\npidns %llu\n", name[0] ? name : "?",
                 boot, ns);
    }
    holder_pid = me;
    holder_start = start_of(me);
    snprintf(holder, sizeof holder, "%spid %ld\nstart %llu\n", host_id, (long)me, holder_start);
}

const char *claim_holder_text(void)
{
    pthread_mutex_lock(&mu);
    know_myself();
    pthread_mutex_unlock(&mu);
    return holder;
}

const char *claim_host(void)
{
    claim_holder_text();
    return host_id;
}

unsigned long long claim_my_start(void)
{
    claim_holder_text();
    return holder_start;
}

int claim_judge_holder(const char *text)
{
    const char *host = claim_host();
    const char *at = strstr(text, "host ");
    if (!at || strncmp(at, host, strlen(host)) != 0)
        return -1;
    long pid = 0;
    unsigned long long start = 0;
    if (sscanf(at + strlen(host), "pid %ld\nstart %llu\n", &pid, &start) != 2)
        return -1;
    return claim_pid_alive(pid, start) ? 1 : 0;
}

/* ---- the file system's time ---- */

/* The modification time the file system gave the last file this process wrote (a claim made
 * or renewed) and our monotonic time then: an estimate of the file system's clock now, which
 * another host's claims are compared with (its renewals take their times from the same
 * clock on NFS, sshfs and BeeGFS, from the writer's on some others: CLAIM_MARGIN and the
 * renewals every lease / 4 leave 3/4 of the lease plus CLAIM_MARGIN seconds for a skew). */
static _Atomic int64_t fs_seen_ns;
static _Atomic int64_t fs_seen_mono_ns;

static void saw_fs_time(const struct stat *st)
{
    struct timespec m;
    clock_gettime(CLOCK_MONOTONIC, &m);
    fs_seen_ns = ts_to_ns(st->st_mtim);
    fs_seen_mono_ns = ts_to_ns(m);
}

int64_t claim_fs_time(void)
{
    int64_t at = fs_seen_ns, mono = fs_seen_mono_ns;
    if (!at)
        return 0;
    struct timespec m;
    clock_gettime(CLOCK_MONOTONIC, &m);
    return at + (ts_to_ns(m) - mono);
}

/* ---- claims held, and their renewal ---- */

/* A claim is known by its contents, never by its inode: through sshfs a hard link (a claim
 * made from a spare) is another inode number, and a file made at the same name later may get
 * the same one. Each claim carries a nonce of its own ("nonce %016x" after the holder text),
 * drawn from the holder's host, pid, start time, clocks and a counter: a claim taken over and
 * made again by another holder (or by us) has another. */
#define NONCE_LINE "nonce "

/* Whether text (a claim file's contents) is the claim with nonce: its magic, and its nonce
 * line says nonce. */
static bool text_has_nonce(const char *text, uint64_t nonce)
{
    if (strncmp(text, CLAIM_MAGIC, strlen(CLAIM_MAGIC)) != 0)
        return false;
    const char *at = strstr(text, "\n" NONCE_LINE);
    char want[40];
    snprintf(want, sizeof want, "\n" NONCE_LINE "%016" PRIx64 "\n", nonce);
    return at && strncmp(at, want, strlen(want)) == 0;
}

static int read_claim(int dirfd, const char *name, char *text, size_t cap, uint64_t *fp,
                      int64_t *mtime_ns);

/* Whether the file named name in dirfd is the claim with nonce (read now). */
static bool is_ours(int dirfd, const char *name, uint64_t nonce)
{
    char text[CLAIM_TEXT];
    uint64_t fp;
    return read_claim(dirfd, name, text, sizeof text, &fp, NULL) == 0 &&
           text_has_nonce(text, nonce);
}

struct slot {
    bool used;
    int ofd;        /* the local byte-range lock, or -1 */
    int dirfd;      /* borrowed */
    uint64_t nonce; /* the claim's nonce: which file is ours */
    long spare;     /* the spare it is a link of (to give back at the release), or -1 */
    bool warned;
    off_t ctr_off;
    uint64_t ctr;
    char name[80];
};

static struct slot *slots;
static size_t nslots;
static pid_t renewer_pid;
static bool renewer_up; /* the renewal thread of renewer_pid runs renewer_main */
static pthread_cond_t renew_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t up_cv = PTHREAD_COND_INITIALIZER;

/* Writes the next renewal count into claim s and makes it durable, through a descriptor
 * opened for the time of the write (one that stays open for writing would keep the file
 * system from being remounted read-only). The contents are read through the same
 * descriptor first: the file open is the one written, and it is ours only if it carries our
 * nonce (a claim taken over is another holder's file, with another nonce, even when its
 * inode number is the same, as through sshfs). 0, or -1 with errno (ESTALE: not ours). */
static int renew(struct slot *s)
{
    int w = openat(s->dirfd, s->name, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (w < 0)
        return -1;
    struct stat a;
    char num[24], text[CLAIM_TEXT];
    snprintf(num, sizeof num, "%020" PRIu64, s->ctr + 1);
    size_t got = 0;
    int r = pread_full(w, text, sizeof text - 1, 0, &got);
    text[got] = '\0';
    if (r < 0)
        errno = -r, r = -1;
    else if (!text_has_nonce(text, s->nonce) || got < (size_t)s->ctr_off + 20)
        r = -1, errno = ESTALE; /* taken over: another holder's file has the name */
    else if (pwrite(w, num, 20, s->ctr_off) != 20 || fdatasync(w) < 0)
        r = -1;
    else if (fstat(w, &a) == 0)
        saw_fs_time(&a);
    int e = errno;
    close(w);
    errno = e;
    if (r == 0)
        s->ctr++;
    return r;
}

/* A renewal to do, copied from its slot so that it is done without the lock. */
struct renewal {
    size_t slot;
    struct slot s;
    int err;
};

static void *renewer_main(void *arg)
{
    (void)arg;
    struct renewal *todo = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&mu);
    renewer_up = true;
    pthread_cond_broadcast(&up_cv);
    for (;;) {
        unsigned l = lease_s;
        struct timespec ts = deadline_in(CLOCK_REALTIME, ts_from_ns((int64_t)l * 250000000LL));
        pthread_cond_timedwait(&renew_cv, &mu, &ts);
        size_t n = 0;
        for (size_t i = 0; i < nslots; i++)
            if (slots[i].used) {
                if (n == cap) {
                    cap = cap ? 2 * cap : 64;
                    todo = xrealloc(todo, cap * sizeof *todo);
                }
                todo[n++] = (struct renewal){.slot = i, .s = slots[i]};
            }
        /* The writes and syncs without the lock: takers and releasers never wait for a sync.
         * A claim released meanwhile is not written to (its file is gone, or another
         * holder's: renew checks the nonce), and its slot is left as it is. */
        pthread_mutex_unlock(&mu);
        for (size_t k = 0; k < n; k++)
            todo[k].err = renew(&todo[k].s) < 0 ? errno : 0;
        pthread_mutex_lock(&mu);
        for (size_t k = 0; k < n; k++) {
            struct slot *sl = &slots[todo[k].slot];
            if (!sl->used || sl->nonce != todo[k].s.nonce || strcmp(sl->name, todo[k].s.name) != 0)
                continue; /* released (and the slot maybe reused) meanwhile */
            if (!todo[k].err) {
                sl->ctr = todo[k].s.ctr;
            } else if (!sl->warned) {
                sl->warned = true;
                log_warn("claim %s: cannot renew it: %s", sl->name, strerror(todo[k].err));
            }
        }
    }
    return NULL;
}

/* A fork (`roifs mount` forks its daemon after opening the cache) copies only the forking
 * thread: a lock that the renewal thread held then would stay locked in the child for ever.
 * Before the fork the lock is taken, so the renewal thread is parked or renewing without it
 * (file calls only); the child gets the lock back and fresh condition variables (the
 * parent's waiter is not there), and starts its own renewal thread at its first claim. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&mu);
}

static void fork_child(void)
{
    renewer_up = false;
    pthread_cond_init(&renew_cv, NULL);
    pthread_cond_init(&up_cv, NULL);
    pthread_mutex_unlock(&mu);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void register_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Starts the renewal thread of this process (mu held): once, and again in a forked child.
 * Returns once the thread runs renewer_main: a thread still starting (the C library, a
 * sanitizer's runtime: they allocate) when the process forks could leave their locks taken
 * in the child (the forked daemon of a sanitized build hung in its first malloc). */
static void start_renewer(void)
{
    pthread_once(&atfork_once, register_atfork);
    if (renewer_pid == getpid())
        return;
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    /* every signal blocked in it: a SIGTERM or SIGINT delivered to this thread would not wake
     * the thread that waits for it (the FUSE loop's read, interrupted by it) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    renewer_up = false;
    if (pthread_create(&t, &a, renewer_main, NULL) == 0) {
        renewer_pid = getpid();
        while (!renewer_up)
            pthread_cond_wait(&up_cv, &mu);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
}

/* ---- files ---- */

/* Spare claim files of this process ("s.HOST.PID.N" in a claims directory): a claim on a hot
 * path (a chunk's, a shared ROI's) is its spare's contents written, then a hard link of the
 * spare at the claim's name, exclusive as a create is (EEXIST when another holds it), and its
 * release the link's removal. No inode is made or freed per claim: file systems make
 * creating files after many removals slow (ext4's inode allocator skips recently deleted
 * inodes: a fifth of the daemon's time with a claim file made and removed per chunk). A spare
 * of a process that died is removed by roifs clean --unused (claim_remove_dead). */
struct spare {
    int dirfd;
    bool busy;
    char name[64];
};
static struct spare *spares; /* mu */
static size_t nspares;
static pid_t spares_pid; /* the process whose spares these are (a forked child makes its own) */

/* A free spare of directory dirfd, marked busy (mu held): its index. */
static size_t get_spare(int dirfd)
{
    if (spares_pid != getpid()) {
        nspares = 0;
        spares_pid = getpid();
    }
    for (size_t i = 0; i < nspares; i++)
        if (!spares[i].busy && spares[i].dirfd == dirfd) {
            spares[i].busy = true;
            return i;
        }
    spares = xrealloc(spares, (nspares + 1) * sizeof *spares);
    struct spare *sp = &spares[nspares];
    sp->dirfd = dirfd;
    sp->busy = true;
    snprintf(sp->name, sizeof sp->name, "s.%016" PRIx64 ".%ld.%zu",
             hash64(HASH64_INIT, host_id, strlen(host_id)), (long)getpid(), nspares);
    return nspares++;
}

static void put_spare(size_t i)
{
    pthread_mutex_lock(&mu);
    if (spares_pid == getpid() && i < nspares)
        spares[i].busy = false;
    pthread_mutex_unlock(&mu);
}

void claim_drop_spares(int dirfd)
{
    pthread_mutex_lock(&mu);
    if (spares_pid == getpid())
        for (size_t i = 0; i < nspares; i++)
            if (spares[i].dirfd == dirfd && !spares[i].busy) {
                unlinkat(dirfd, spares[i].name, 0);
                spares[i].dirfd = -1; /* gone: never given out again */
            }
    pthread_mutex_unlock(&mu);
}

/* Creates claim file name exclusively with our holder text: 0 and its nonce in *nonce_out,
 * -EEXIST, or -errno. *ctr_off: where the renewal counter is. With spare not NULL, through a
 * spare of this process, whose index it gets (to give back at the release): a hard link,
 * which is fast where links are the same inode, and only as fast elsewhere (sshfs: another
 * inode number), never relied on to say which file is ours (the nonce does). */
static int create_claim(int dirfd, const char *name, off_t *ctr_off, uint64_t *nonce_out,
                        long *spare)
{
    static _Atomic uint64_t seq;
    char sname[64] = "";
    size_t si = 0;
    if (spare) {
        claim_holder_text(); /* host_id known */
        pthread_mutex_lock(&mu);
        si = get_spare(dirfd);
        memcpy(sname, spares[si].name, sizeof sname);
        pthread_mutex_unlock(&mu);
    }
    int fd = openat(dirfd, spare ? sname : name,
                    spare ? O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC
                          : O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
    if (fd < 0) {
        int e = -errno;
        if (spare)
            put_spare(si);
        return e;
    }
    struct timespec now, wall;
    clock_gettime(CLOCK_MONOTONIC, &now);
    clock_gettime(CLOCK_REALTIME, &wall);
    uint64_t mix[4] = {(uint64_t)ts_to_ns(now), (uint64_t)ts_to_ns(wall), ++seq,
                       (uint64_t)getpid()};
    const char *who = claim_holder_text(); /* host, boot, pid namespace, pid, start time */
    uint64_t nonce = hash64(hash64(HASH64_INIT, who, strlen(who)), mix, sizeof mix);
    char text[CLAIM_TEXT];
    int n = snprintf(text, sizeof text, "%s%snonce %016" PRIx64 "\nrenewed %020d\n", CLAIM_MAGIC,
                     claim_holder_text(), nonce, 0);
    struct stat st;
    /* a spare's contents always have this length: those of this process are alike but for
     * the nonce and counter, of fixed widths */
    if (n < 0 || n >= (int)sizeof text || pwrite(fd, text, (size_t)n, 0) != n ||
        fstat(fd, &st) < 0) {
        int e = n < 0 || n >= (int)sizeof text ? -ENAMETOOLONG : errno ? -errno : -EIO;
        close(fd);
        if (spare)
            put_spare(si);
        else
            unlinkat(dirfd, name, 0);
        return e;
    }
    saw_fs_time(&st);
    /* no descriptor kept open for writing: it would keep a remount read-only from happening */
    close(fd);
    if (spare && linkat(dirfd, sname, dirfd, name, 0) < 0) {
        int e = -errno;
        put_spare(si);
        return e;
    }
    if (spare)
        *spare = (long)si;
    *ctr_off = n - 21;
    *nonce_out = nonce;
    return 0;
}

/* Reads claim file name: 0 with its text and fingerprint (of its contents alone: an inode
 * number may change under the same file through sshfs, and the contents carry a nonce and a
 * renewal count), -errno. */
static int read_claim(int dirfd, const char *name, char *text, size_t cap, uint64_t *fp,
                      int64_t *mtime_ns)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    size_t got = 0;
    int r = fstat(fd, &st) < 0 ? -errno : pread_full(fd, text, cap - 1, 0, &got);
    close(fd);
    text[got] = '\0';
    *fp = hash64(HASH64_INIT, text, got);
    if (mtime_ns)
        *mtime_ns = r == 0 ? ts_to_ns(st.st_mtim) : 0;
    return r;
}

/* What this process saw of another host's claim, by name: since when it has not changed. */
struct seen {
    uint64_t fp;
    double since;
};
static struct map seen_map; /* (hash of directory and name) -> struct seen; mu */

enum verdict { V_LIVE, V_STALE, V_GONE };

/* The key of claim name in directory dirfd: the directory's path (its inode number may not
 * stay the same through sshfs; the inode only when the path is unknown) and the name. */
static uint64_t name_key(int dirfd, const char *name)
{
    char link[64], dir[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, dir, sizeof dir);
    uint64_t h;
    if (n > 0) {
        h = hash64(HASH64_INIT, dir, (size_t)n);
    } else {
        struct stat st;
        uint64_t ino = fstat(dirfd, &st) == 0 ? (uint64_t)st.st_ino : 0;
        h = hash64(HASH64_INIT, &ino, sizeof ino);
    }
    return hash64(hash64(h, "/", 1), name, strlen(name));
}

/* Judges the claim file name (see claim.h); *fp its fingerprint. */
static enum verdict judge(int dirfd, const char *name, uint64_t *fp)
{
    char text[CLAIM_TEXT];
    int64_t mtime = 0;
    int r = read_claim(dirfd, name, text, sizeof text, fp, &mtime);
    if (r == -ENOENT)
        return V_GONE;
    int mine = r == 0 ? claim_judge_holder(text) : -1;
    if (mine >= 0)
        return mine ? V_LIVE : V_STALE;
    int64_t fs_now = claim_fs_time();
    if (fs_now && mtime && fs_now - mtime > ((int64_t)lease_s + CLAIM_MARGIN) * 1000000000LL)
        return V_STALE; /* not renewed for longer than the lease by the file system's time */
    uint64_t k = name_key(dirfd, name);
    double now = now_monotonic();
    pthread_mutex_lock(&mu);
    if (seen_map.vsize == 0)
        map_init(&seen_map, sizeof(struct seen), 64);
    bool added;
    struct seen *s = map_put(&seen_map, k, 0, &added);
    enum verdict v = V_LIVE;
    if (added || s->fp != *fp) {
        s->fp = *fp;
        s->since = now;
    } else if (now - s->since >= (double)lease_s) {
        v = V_STALE;
        map_del(&seen_map, k, 0, NULL);
    }
    pthread_mutex_unlock(&mu);
    return v;
}

/* Removes file name if it still has fingerprint fp. */
static bool remove_if_same(int dirfd, const char *name, uint64_t fp)
{
    char text[CLAIM_TEXT];
    uint64_t now_fp = 0;
    if (read_claim(dirfd, name, text, sizeof text, &now_fp, NULL) < 0 || now_fp != fp)
        return false;
    return unlinkat(dirfd, name, 0) == 0;
}

/* Removes the expired claim name (fingerprint fp) under its takeover token. */
static void take_over(int dirfd, const char *name, uint64_t fp)
{
    char tok[96];
    snprintf(tok, sizeof tok, "%s.take", name);
    off_t off;
    uint64_t tnonce;
    int t = create_claim(dirfd, tok, &off, &tnonce, NULL);
    if (t == -EEXIST) {
        uint64_t tfp;
        if (judge(dirfd, tok, &tfp) == V_STALE)
            remove_if_same(dirfd, tok, tfp); /* a taker that died */
        return;
    }
    if (t < 0)
        return;
    if (remove_if_same(dirfd, name, fp))
        log_warn("claim %s: its holder is gone (its process ended, or its lease of %u s ran out "
                 "unrenewed); taking it over",
                 name, lease_s);
    if (is_ours(dirfd, tok, tnonce))
        unlinkat(dirfd, tok, 0);
}

size_t claim_remove_dead(int dirfd)
{
    DIR *d = opendir_at(dirfd, ".");
    if (!d)
        return 0;
    size_t n = 0;
    int64_t fs_now = claim_fs_time();
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "all"))
            continue;
        char text[CLAIM_TEXT];
        uint64_t fp;
        int64_t mtime = 0;
        if (read_claim(dirfd, de->d_name, text, sizeof text, &fp, &mtime) < 0 ||
            strncmp(text, CLAIM_MAGIC, strlen(CLAIM_MAGIC)) != 0)
            continue;
        int mine = claim_judge_holder(text);
        bool dead =
            mine == 0 || (mine < 0 && fs_now && mtime &&
                          fs_now - mtime > ((int64_t)lease_s + CLAIM_MARGIN) * 1000000000LL);
        if (dead && remove_if_same(dirfd, de->d_name, fp))
            n++;
    }
    closedir(d);
    return n;
}

static int ofd_lock(int dirfd, uint64_t byte, bool wait)
{
    int fd = openat(dirfd, "all", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)byte, .l_len = 1};
    while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl) < 0) {
        if (errno == EINTR)
            continue;
        int e = errno == EAGAIN || errno == EACCES ? -EWOULDBLOCK : -errno;
        close(fd);
        return e;
    }
    return fd;
}

static int add_slot(int ofd, int dirfd, uint64_t nonce, off_t ctr_off, const char *name, long spare)
{
    pthread_mutex_lock(&mu);
    start_renewer();
    size_t i = 0;
    while (i < nslots && slots[i].used)
        i++;
    if (i == nslots) {
        size_t cap = nslots ? 2 * nslots : 64;
        slots = xrealloc(slots, cap * sizeof *slots);
        memset(slots + nslots, 0, (cap - nslots) * sizeof *slots);
        nslots = cap;
    }
    slots[i] = (struct slot){.used = true,
                             .ofd = ofd,
                             .dirfd = dirfd,
                             .nonce = nonce,
                             .ctr_off = ctr_off,
                             .spare = spare};
    snprintf(slots[i].name, sizeof slots[i].name, "%s", name);
    pthread_mutex_unlock(&mu);
    return (int)i;
}

int claim_take(int dirfd, const char *name, uint64_t ofd_byte, bool wait)
{
    /* The byte-range lock only to wait: a try alone learns as much from the claim (a holder of
     * this host is judged by its pid), for a create and an unlink less. */
    int ofd = -1;
    if (wait && ofd_byte != UINT64_MAX && (ofd = ofd_lock(dirfd, ofd_byte, true)) < 0)
        return ofd;
    double pause = 0.002;
    for (;;) {
        off_t off;
        uint64_t nonce;
        long spare = -1;
        int fd = create_claim(dirfd, name, &off, &nonce, ofd_byte != UINT64_MAX ? &spare : NULL);
        if (fd >= 0)
            return add_slot(ofd, dirfd, nonce, off, name, spare);
        if (fd != -EEXIST) {
            if (ofd >= 0)
                close(ofd);
            return fd;
        }
        uint64_t fp;
        enum verdict v = judge(dirfd, name, &fp);
        if (v == V_STALE) {
            take_over(dirfd, name, fp);
            continue;
        }
        if (v == V_GONE)
            continue;
        if (!wait) {
            if (ofd >= 0)
                close(ofd);
            return -EWOULDBLOCK;
        }
        struct timespec ts = ts_from_ns((int64_t)(pause * 1e9));
        nanosleep(&ts, NULL);
        pause = pause * 2 > 0.2 ? 0.2 : pause * 2;
    }
}

void claim_release(int h)
{
    if (h < 0)
        return;
    pthread_mutex_lock(&mu);
    if ((size_t)h >= nslots || !slots[h].used) {
        pthread_mutex_unlock(&mu);
        return;
    }
    struct slot s = slots[h];
    slots[h].used = false;
    pthread_mutex_unlock(&mu);
    /* Only our own file: one taken over (we stalled past the lease) is the new holder's, with
     * its own nonce. Read, compared, then removed by name: a takeover between the read and the
     * removal would need another host to judge the claim expired right then, i.e. to have seen
     * it unrenewed for a whole lease; while it is held it is renewed every lease / 4, so only a
     * holder already stalled past its lease (the case warned of below) could remove the new
     * holder's claim, and then the ROI may run once more, never mixed (results are written
     * whole and renamed into place). */
    if (is_ours(s.dirfd, s.name, s.nonce))
        unlinkat(s.dirfd, s.name, 0);
    else
        log_warn("claim %s: taken over while held (this process stalled past its lease of %u s)",
                 s.name, lease_s);
    if (s.spare >= 0)
        put_spare((size_t)s.spare);
    if (s.ofd >= 0)
        close(s.ofd);
}
