/* versions.c: the inode of each served version of a chunk (see versions.h). One mutex guards
 * the table; the FUSE side calls it from its request and compute threads. */
#include "versions.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "../idlru.h"
#include "../util.h"

/* A record exists for every inode that has served a version in this mount: the kernel may
 * hold that version's pages and size for it as long as the mount lives. */
struct rec {
    struct idlru_node by_ino; /* id: the inode */
    uint64_t base;
    uint64_t dev, file, size; /* the cache file served (its identity with ctime) */
    int64_t ctime, mtime;
    unsigned refs;   /* open files of the inode */
    int32_t backing; /* while refs > 0: its passthrough backing id, or 0 */
    bool current;    /* a lookup of the chunk answers with this inode */
    bool outdated;   /* vt_invalidate: its size is not the chunk's (when no file is open) */
};

/* A chunk whose current inode is a later version's (rare: one per concurrent version). */
struct moved {
    struct idlru_node node; /* id: the namespace inode */
    uint64_t ino;
};

struct vt {
    pthread_mutex_t lock;
    struct idlru by_ino; /* every record */
    struct idlru moved;  /* by namespace inode */
    uint64_t next;       /* the next later-version inode: VT_INO_BIT | next */
    vt_backing_open bo;
    vt_backing_close bc;
    void *ctx;
    struct vt_stats stats;
};

struct vt *vt_new(vt_backing_open bo, vt_backing_close bc, void *ctx)
{
    struct vt *vt = xcalloc(1, sizeof *vt);
    pthread_mutex_init(&vt->lock, NULL);
    idlru_init(&vt->by_ino);
    idlru_init(&vt->moved);
    vt->next = 1;
    vt->bo = bo;
    vt->bc = bc;
    vt->ctx = ctx;
    return vt;
}

static void free_rec(struct idlru_node *n, void *ctx)
{
    (void)ctx;
    free(IDLRU_ENTRY(n, struct rec, by_ino));
}

static void free_moved(struct idlru_node *n, void *ctx)
{
    (void)ctx;
    free(IDLRU_ENTRY(n, struct moved, node));
}

void vt_free(struct vt *vt)
{
    if (!vt)
        return;
    idlru_each(&vt->by_ino, free_rec, NULL);
    idlru_each(&vt->moved, free_moved, NULL);
    idlru_destroy(&vt->by_ino);
    idlru_destroy(&vt->moved);
    pthread_mutex_destroy(&vt->lock);
    free(vt);
}

static struct rec *find_ino(struct vt *vt, uint64_t ino)
{
    struct idlru_node *n = idlru_find(&vt->by_ino, ino);
    return n ? IDLRU_ENTRY(n, struct rec, by_ino) : NULL;
}

/* The record stands for version f of its chunk file from now on. */
static void rec_set_file(struct rec *r, const struct vt_file *f)
{
    r->dev = f->dev;
    r->file = f->ino;
    r->size = f->size;
    r->ctime = f->ctime_ns;
    r->mtime = f->mtime_ns;
}

/* The inode of r shows version f from now on: the kernel drops its pages and attributes. */
static void rec_replace(struct rec *r, const struct vt_file *f, struct vt_grant *g)
{
    rec_set_file(r, f);
    g->keep_cache = false;
    g->inval_attrs = true;
}

static struct rec *add_rec(struct vt *vt, uint64_t ino, uint64_t base, const struct vt_file *f)
{
    struct rec *r = xcalloc(1, sizeof *r);
    r->by_ino.id = ino;
    r->base = base;
    rec_set_file(r, f);
    r->current = true;
    idlru_add(&vt->by_ino, &r->by_ino);
    vt->stats.records++;
    return r;
}

int vt_open(struct vt *vt, uint64_t ino, uint64_t base, int fd, const struct vt_file *f,
            struct vt_grant *g)
{
    g->backing = 0;
    g->keep_cache = true;
    g->inval_attrs = false;
    pthread_mutex_lock(&vt->lock);
    struct rec *r = find_ino(vt, ino);
    int rc = 0;
    if (!r && (ino & VT_INO_BIT)) {
        rc = -ESTALE; /* not an inode of this mount */
    } else if (r && !r->current) {
        rc = -ESTALE; /* superseded: the lookup the kernel makes again finds the current one */
    } else if (!r) {
        /* The first open of the chunk in this mount: the inode has no pages yet. */
        r = add_rec(vt, ino, base, f);
        g->inval_attrs = f->fresh;
    } else if (r->outdated && r->refs == 0) {
        /* dropped from the kernel's caches when it was declared out of date */
        r->outdated = false;
        rec_replace(r, f, g);
    } else if (r->dev != f->dev || r->file != f->ino || r->ctime != f->ctime_ns ||
               r->size != f->size) {
        if (r->refs == 0) {
            /* Nothing open on the old version: the new one takes its inode. */
            rec_replace(r, f, g);
            vt->stats.replaced_in_place++;
        } else {
            /* Files are open on the old version: they keep it and its inode; the chunk's name
             * moves to a new inode, which the retried open will find. */
            r->current = false;
            vt->stats.superseded++;
            uint64_t later = VT_INO_BIT | vt->next++;
            add_rec(vt, later, base, f);
            struct idlru_node *n = idlru_find(&vt->moved, base);
            struct moved *m = n ? IDLRU_ENTRY(n, struct moved, node) : xcalloc(1, sizeof *m);
            if (!n) {
                m->node.id = base;
                idlru_add(&vt->moved, &m->node);
            }
            m->ino = later;
            rc = -ESTALE;
        }
    }
    if (rc == 0) {
        if (r->refs++ == 0 && vt->bo)
            r->backing = vt->bo(vt->ctx, fd);
        g->backing = r->backing;
    }
    pthread_mutex_unlock(&vt->lock);
    return rc;
}

void vt_release(struct vt *vt, uint64_t ino)
{
    pthread_mutex_lock(&vt->lock);
    struct rec *r = find_ino(vt, ino);
    if (r && r->refs > 0 && --r->refs == 0 && r->backing) {
        if (vt->bc)
            vt->bc(vt->ctx, r->backing);
        r->backing = 0;
    }
    pthread_mutex_unlock(&vt->lock);
}

int vt_attr(struct vt *vt, uint64_t ino, uint64_t *base, uint64_t *size, int64_t *mtime_ns)
{
    pthread_mutex_lock(&vt->lock);
    struct rec *r = find_ino(vt, ino);
    int rc = r ? (r->outdated && r->refs == 0 ? 2 : 1) : (ino & VT_INO_BIT) ? -ENOENT : 0;
    if (r) {
        *base = r->base;
        *size = r->size;
        if (mtime_ns)
            *mtime_ns = r->mtime;
    }
    pthread_mutex_unlock(&vt->lock);
    return rc;
}

uint64_t vt_current(struct vt *vt, uint64_t base)
{
    pthread_mutex_lock(&vt->lock);
    struct idlru_node *n = idlru_find(&vt->moved, base);
    uint64_t ino = n ? IDLRU_ENTRY(n, struct moved, node)->ino : base;
    pthread_mutex_unlock(&vt->lock);
    return ino;
}

int vt_invalidate(struct vt *vt, uint64_t base, uint64_t inos[2])
{
    pthread_mutex_lock(&vt->lock);
    struct idlru_node *n = idlru_find(&vt->moved, base);
    uint64_t cur = n ? IDLRU_ENTRY(n, struct moved, node)->ino : base;
    struct rec *r = find_ino(vt, cur);
    if (r)
        r->outdated = true;
    pthread_mutex_unlock(&vt->lock);
    int k = 0;
    inos[k++] = base;
    if (cur != base)
        inos[k++] = cur;
    return k;
}

void vt_stats(struct vt *vt, struct vt_stats *s)
{
    pthread_mutex_lock(&vt->lock);
    *s = vt->stats;
    pthread_mutex_unlock(&vt->lock);
}
