/* devio.c: the FUSE device's reads and writes: request counts, polling, the terminal ioctl
 * (see devio.h). */
#include "devio.h"

#include <errno.h>
#include <linux/fuse.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../util.h"

#define NOPS 64 /* opcodes counted one by one; larger ones (CUSE) as "other" */

/* Pauses of the polling when the CPUs are busy. */
#define BACKOFF_MIN_NS 20000000LL
#define BACKOFF_MAX_NS 1000000000LL

struct devio {
    struct pt *pt;
    int64_t poll_ns;
    _Atomic uint64_t count[NOPS + 1];
    _Atomic int64_t last_ns; /* CLOCK_MONOTONIC arrival of the latest request */
    _Atomic int64_t gap_ns;  /* between it and the one before */
    atomic_bool polling;     /* a thread is polling: the others block */
    int64_t backoff_ns;      /* the current pause; the polling thread's alone */
    _Atomic int64_t paused_until;
    _Atomic uint64_t polls, hits, pauses;
    _Atomic int64_t poll_spent_ns;
};

static const char *const op_names[NOPS] = {
    [FUSE_LOOKUP] = "LOOKUP",
    [FUSE_FORGET] = "FORGET",
    [FUSE_GETATTR] = "GETATTR",
    [FUSE_SETATTR] = "SETATTR",
    [FUSE_READLINK] = "READLINK",
    [FUSE_SYMLINK] = "SYMLINK",
    [FUSE_MKNOD] = "MKNOD",
    [FUSE_MKDIR] = "MKDIR",
    [FUSE_UNLINK] = "UNLINK",
    [FUSE_RMDIR] = "RMDIR",
    [FUSE_RENAME] = "RENAME",
    [FUSE_LINK] = "LINK",
    [FUSE_OPEN] = "OPEN",
    [FUSE_READ] = "READ",
    [FUSE_WRITE] = "WRITE",
    [FUSE_STATFS] = "STATFS",
    [FUSE_RELEASE] = "RELEASE",
    [FUSE_FSYNC] = "FSYNC",
    [FUSE_SETXATTR] = "SETXATTR",
    [FUSE_GETXATTR] = "GETXATTR",
    [FUSE_LISTXATTR] = "LISTXATTR",
    [FUSE_REMOVEXATTR] = "REMOVEXATTR",
    [FUSE_FLUSH] = "FLUSH",
    [FUSE_INIT] = "INIT",
    [FUSE_OPENDIR] = "OPENDIR",
    [FUSE_READDIR] = "READDIR",
    [FUSE_RELEASEDIR] = "RELEASEDIR",
    [FUSE_FSYNCDIR] = "FSYNCDIR",
    [FUSE_GETLK] = "GETLK",
    [FUSE_SETLK] = "SETLK",
    [FUSE_SETLKW] = "SETLKW",
    [FUSE_ACCESS] = "ACCESS",
    [FUSE_CREATE] = "CREATE",
    [FUSE_INTERRUPT] = "INTERRUPT",
    [FUSE_BMAP] = "BMAP",
    [FUSE_DESTROY] = "DESTROY",
    [FUSE_IOCTL] = "IOCTL",
    [FUSE_POLL] = "POLL",
    [FUSE_NOTIFY_REPLY] = "NOTIFY_REPLY",
    [FUSE_BATCH_FORGET] = "BATCH_FORGET",
    [FUSE_FALLOCATE] = "FALLOCATE",
    [FUSE_READDIRPLUS] = "READDIRPLUS",
    [FUSE_RENAME2] = "RENAME2",
    [FUSE_LSEEK] = "LSEEK",
    [FUSE_COPY_FILE_RANGE] = "COPY_FILE_RANGE",
    [FUSE_SETUPMAPPING] = "SETUPMAPPING",
    [FUSE_REMOVEMAPPING] = "REMOVEMAPPING",
    [FUSE_SYNCFS] = "SYNCFS",
    [FUSE_TMPFILE] = "TMPFILE",
    [52] = "STATX",
};

struct devio *devio_new(struct pt *pt, unsigned poll_us)
{
    struct devio *d = xcalloc(1, sizeof *d);
    d->pt = pt;
    d->poll_ns = (int64_t)poll_us * 1000;
    atomic_store(&d->gap_ns, INT64_MAX);
    return d;
}

void devio_free(struct devio *d)
{
    free(d);
}

int devio_attach(struct devio *d, struct fuse_session *se,
                 ssize_t (*rd)(int, void *, size_t, void *),
                 ssize_t (*wv)(int, struct iovec *, int, void *))
{
    (void)d;
    const struct fuse_custom_io io = {.read = rd, .writev = wv};
    int r = fuse_session_custom_io(se, &io, fuse_session_fd(se));
    return r > 0 ? -r : r;
}

/* Involuntary context switches of the calling thread so far. */
static long preempted(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
}

/* Polls the device for up to the window while requests come in a burst (the latest two at most
 * a window apart, the latest less than a window ago) and no other thread polls: then the read
 * that follows finds the request without a wake-up. Otherwise returns at once. A poll during
 * which the thread was preempted means that the CPUs are busy: polling then takes CPU time from
 * the readers themselves, so it pauses (BACKOFF_MIN_NS, doubling while it happens again). */
static void poll_briefly(struct devio *d, int fd)
{
    if (d->poll_ns <= 0)
        return;
    int64_t t0 = clock_ns(CLOCK_MONOTONIC);
    if (atomic_load_explicit(&d->gap_ns, memory_order_relaxed) > d->poll_ns ||
        t0 - atomic_load_explicit(&d->last_ns, memory_order_relaxed) > d->poll_ns ||
        t0 < atomic_load_explicit(&d->paused_until, memory_order_relaxed))
        return;
    if (atomic_exchange(&d->polling, true))
        return;
    long sw0 = preempted();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int64_t t = t0;
    bool hit = false;
    while (t - t0 < d->poll_ns) {
        if (poll(&p, 1, 0) != 0) {
            hit = true; /* a request, an error or the unmount: the read sees which */
            break;
        }
        t = clock_ns(CLOCK_MONOTONIC);
    }
    t = clock_ns(CLOCK_MONOTONIC);
    if (preempted() != sw0) {
        d->backoff_ns = d->backoff_ns ? d->backoff_ns * 2 : BACKOFF_MIN_NS;
        if (d->backoff_ns > BACKOFF_MAX_NS)
            d->backoff_ns = BACKOFF_MAX_NS;
        atomic_store_explicit(&d->paused_until, t + d->backoff_ns, memory_order_relaxed);
        atomic_fetch_add_explicit(&d->pauses, 1, memory_order_relaxed);
    } else {
        d->backoff_ns = 0;
    }
    atomic_store(&d->polling, false); /* after backoff_ns: the flag's owner alone touches it */
    atomic_fetch_add_explicit(&d->polls, 1, memory_order_relaxed);
    if (hit)
        atomic_fetch_add_explicit(&d->hits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&d->poll_spent_ns, t - t0, memory_order_relaxed);
}

static void saw_request(struct devio *d, uint32_t opcode)
{
    atomic_fetch_add_explicit(&d->count[opcode < NOPS ? opcode : NOPS], 1, memory_order_relaxed);
    int64_t t = clock_ns(CLOCK_MONOTONIC);
    int64_t prev = atomic_exchange_explicit(&d->last_ns, t, memory_order_relaxed);
    atomic_store_explicit(&d->gap_ns, t - prev, memory_order_relaxed);
}

/* Python's open() asks every file it opens whether it is a terminal (TCGETS). A chunk or
 * metadata file never is: answered here, without libfuse's dispatch. True when answered. */
static bool answer_tcgets(int fd, const void *buf, size_t n)
{
    const struct fuse_in_header *h = buf;
    if (h->opcode != FUSE_IOCTL || n < sizeof *h + sizeof(struct fuse_ioctl_in))
        return false;
    const struct fuse_ioctl_in *in = (const void *)(h + 1);
    if (in->cmd != TCGETS)
        return false;
    struct fuse_out_header out = {.len = sizeof out, .error = -ENOTTY, .unique = h->unique};
    ssize_t w = write(fd, &out, sizeof out);
    /* ENOENT: the reader was interrupted and no longer waits; anything else is the unmount,
     * which the next read reports */
    (void)w;
    return true;
}

ssize_t devio_on_read(struct devio *d, int fd, void *buf, size_t len)
{
    for (;;) {
        poll_briefly(d, fd);
        ssize_t n = read(fd, buf, len);
        if (n < (ssize_t)sizeof(struct fuse_in_header))
            return n;
        const struct fuse_in_header *h = buf;
        saw_request(d, h->opcode);
        if (answer_tcgets(fd, buf, (size_t)n))
            continue;
        pt_saw_request(d->pt, buf, (size_t)n);
        return n;
    }
}

ssize_t devio_on_writev(struct devio *d, int fd, struct iovec *iov, int count)
{
    return pt_on_writev(d->pt, fd, iov, count);
}

json_t *devio_requests(struct devio *d)
{
    json_t *o = json_object();
    char other[16];
    for (int i = 0; i <= NOPS; i++) {
        uint64_t c = atomic_load_explicit(&d->count[i], memory_order_relaxed);
        if (!c)
            continue;
        const char *name = i < NOPS ? op_names[i] : "other";
        if (!name) {
            snprintf(other, sizeof other, "OP%d", i);
            name = other;
        }
        json_object_set_new(o, name, json_integer((json_int_t)c));
    }
    return o;
}

json_t *devio_poll_status(struct devio *d)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:f}", "us", (json_int_t)(d->poll_ns / 1000), "polls",
                     (json_int_t)atomic_load(&d->polls), "hits", (json_int_t)atomic_load(&d->hits),
                     "pauses", (json_int_t)atomic_load(&d->pauses), "cpu_s",
                     (double)atomic_load(&d->poll_spent_ns) / 1e9);
}
