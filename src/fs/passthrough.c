/* passthrough.c: FUSE passthrough negotiated under libfuse 3.14 (see passthrough.h). */
#include "passthrough.h"

#include <errno.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "../util.h"

/* Kernel ABI from protocol 7.40 (Linux 6.9), newer than Debian 12's <linux/fuse.h> (7.38). */
#define PT_FLAG2_PASSTHROUGH (1u << (37 - 32)) /* FUSE_PASSTHROUGH, in init flags2 */
#define PT_FOPEN_PASSTHROUGH (1u << 7)         /* FOPEN_PASSTHROUGH */
#define PT_INIT_EXT          (1u << 30)        /* FUSE_INIT_EXT */
#define PT_OP_INIT           26u               /* FUSE_INIT */
struct pt_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PT_IOC_BACKING_OPEN  _IOW(229, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
#define FUSE_SUPER_MAGIC     0x65735546 /* statfs f_type of a FUSE file system */

/* The parts of the INIT messages read or changed here, laid out as in 7.40. */
struct pt_init_in {
    uint32_t major, minor, max_readahead, flags, flags2;
};
struct pt_init_out {
    uint32_t major, minor, max_readahead, flags;
    uint16_t max_background, congestion_threshold;
    uint32_t max_write, time_gran;
    uint16_t max_pages, map_alignment;
    uint32_t flags2, max_stack_depth;
    uint32_t unused[6];
};
_Static_assert(sizeof(struct pt_init_out) == 64, "fuse_init_out is 64 bytes");
struct pt_open_out {
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};
_Static_assert(sizeof(struct pt_open_out) == sizeof(struct fuse_open_out), "fuse_open_out");

/* Backing files may themselves be on a stacked file system (overlayfs, as in containers):
 * the kernel's limit. A roifs mount then cannot be a layer of an overlayfs itself. */
#define PT_STACK_DEPTH 2

enum { PT_OFF, PT_OFFERED, PT_ON };

struct pt {
    bool want;
    int fd; /* /dev/fuse */
    _Atomic int state;
    _Atomic uint64_t init_unique; /* of the INIT request, once seen */
    pthread_mutex_t lock;         /* turning passthrough off */
    char reason[160];
};

/* The open reply this thread is about to send, for pt_on_writev. */
static _Thread_local struct {
    bool armed;
    uint64_t fh;
    int32_t id;
} pending;

struct pt *pt_new(bool want)
{
    struct pt *pt = xcalloc(1, sizeof *pt);
    pt->want = want;
    pt->fd = -1;
    pthread_mutex_init(&pt->lock, NULL);
    snprintf(pt->reason, sizeof pt->reason, "%s",
             want ? "the kernel did not offer it" : "turned off ([mount] passthrough = false)");
    return pt;
}

void pt_free(struct pt *pt)
{
    if (!pt)
        return;
    pthread_mutex_destroy(&pt->lock);
    free(pt);
}

void pt_set_device(struct pt *pt, int fd)
{
    pt->fd = fd;
}

void pt_saw_request(struct pt *pt, const void *buf, size_t n)
{
    if (!pt->want || n < sizeof(struct fuse_in_header) + sizeof(struct pt_init_in))
        return;
    const struct fuse_in_header *h = buf;
    if (h->opcode != PT_OP_INIT)
        return;
    const struct pt_init_in *in = (const void *)(h + 1);
    if ((in->flags & PT_INIT_EXT) && (in->flags2 & PT_FLAG2_PASSTHROUGH)) {
        atomic_store(&pt->init_unique, h->unique);
        atomic_store(&pt->state, PT_OFFERED);
    }
}

static size_t iov_total(const struct iovec *iov, int count)
{
    size_t n = 0;
    for (int i = 0; i < count; i++)
        n += iov[i].iov_len;
    return n;
}

/* Gathers the payload after the header into out (exactly outlen bytes). */
static void iov_gather(const struct iovec *iov, int count, void *out, size_t outlen)
{
    char *o = out;
    for (int i = 1; i < count && outlen; i++) {
        size_t k = iov[i].iov_len < outlen ? iov[i].iov_len : outlen;
        memcpy(o, iov[i].iov_base, k);
        o += k;
        outlen -= k;
    }
}

ssize_t pt_on_writev(struct pt *pt, int fd, struct iovec *iov, int count)
{
    if (count < 1 || iov[0].iov_len != sizeof(struct fuse_out_header))
        return writev(fd, iov, count);
    const struct fuse_out_header *h = iov[0].iov_base;
    size_t payload = iov_total(iov, count) - sizeof *h;
    if (pending.armed && h->error == 0 && payload == sizeof(struct pt_open_out)) {
        struct pt_open_out o;
        iov_gather(iov, count, &o, sizeof o);
        if (o.fh == pending.fh) {
            o.open_flags |= PT_FOPEN_PASSTHROUGH;
            o.backing_id = pending.id;
            struct iovec v[2] = {iov[0], {&o, sizeof o}};
            return writev(fd, v, 2);
        }
    }
    if (h->error == 0 && h->unique != 0 && payload == sizeof(struct pt_init_out) &&
        atomic_load(&pt->state) == PT_OFFERED && h->unique == atomic_load(&pt->init_unique)) {
        struct pt_init_out o;
        iov_gather(iov, count, &o, sizeof o);
        if (o.flags & FUSE_WRITEBACK_CACHE) {
            snprintf(pt->reason, sizeof pt->reason, "writeback cache is on");
            atomic_store(&pt->state, PT_OFF);
            return writev(fd, iov, count);
        }
        o.flags |= PT_INIT_EXT;
        o.flags2 |= PT_FLAG2_PASSTHROUGH;
        o.max_stack_depth = PT_STACK_DEPTH;
        struct iovec v[2] = {iov[0], {&o, sizeof o}};
        ssize_t r = writev(fd, v, 2);
        if (r >= 0) {
            atomic_store(&pt->state, PT_ON);
            pt->reason[0] = 0;
        }
        return r;
    }
    return writev(fd, iov, count);
}

bool pt_active(const struct pt *pt)
{
    return atomic_load(&pt->state) == PT_ON;
}

const char *pt_reason(const struct pt *pt)
{
    return pt_active(pt) ? "" : pt->reason;
}

int32_t pt_backing_open(struct pt *pt, int fd)
{
    if (!pt_active(pt))
        return 0;
    struct pt_backing_map map = {.fd = fd};
    int id = ioctl(pt->fd, PT_IOC_BACKING_OPEN, &map);
    if (id > 0)
        return id;
    int e = id < 0 ? errno : EINVAL;
    struct statfs sfs;
    /* A file of another FUSE mount that passes through itself (the input of ome = labels
     * when it is another roifs mount): too deep a stack for the kernel. That file is read
     * through; the cache files still pass. */
    if (e == ELOOP && fstatfs(fd, &sfs) == 0 && sfs.f_type == FUSE_SUPER_MAGIC)
        return 0;
    /* Deterministic for a cache directory (its file system's stack depth, missing privilege):
     * use the ordinary path for every chunk from now on. */
    pthread_mutex_lock(&pt->lock);
    if (pt_active(pt)) {
        snprintf(pt->reason, sizeof pt->reason,
                 "the kernel refused to pass through to the cache files: %s", strerror(e));
        atomic_store(&pt->state, PT_OFF);
        log_warn("FUSE passthrough off: %s", pt->reason);
    }
    pthread_mutex_unlock(&pt->lock);
    return 0;
}

void pt_backing_close(struct pt *pt, int32_t id)
{
    uint32_t u = (uint32_t)id;
    if (ioctl(pt->fd, PT_IOC_BACKING_CLOSE, &u) < 0)
        log_warn("cannot close FUSE backing file %u: %s", u, strerror(errno));
}

int pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int32_t backing_id)
{
    pending.armed = true;
    pending.fh = fi->fh;
    pending.id = backing_id;
    int r = fuse_reply_open(req, fi);
    pending.armed = false;
    return r;
}
