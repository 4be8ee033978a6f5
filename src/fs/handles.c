/* handles.c: the FUSE side's open files (listed, so that those the kernel never released are
 * freed at unmount) and the node behind an inode, the current version's or a later one's. */
#include "fs_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct handle *handle_new(enum ns_kind kind)
{
    struct handle *h = xcalloc(1, sizeof *h);
    h->kind = kind;
    h->fd = -1;
    return h;
}

void handle_add(struct fs *fs, struct handle *h)
{
    struct handle *head = h->kind == NS_STATUS ? &fs->status : &fs->handles;
    pthread_mutex_lock(&fs->handles_lock);
    h->next = head->next;
    h->prev = head;
    h->next->prev = h;
    head->next = h;
    pthread_mutex_unlock(&fs->handles_lock);
}

void handle_free(struct fs *fs, struct handle *h)
{
    pthread_mutex_lock(&fs->handles_lock);
    h->prev->next = h->next;
    h->next->prev = h->prev;
    pthread_mutex_unlock(&fs->handles_lock);
    /* no vt: the session is gone; an input file's ino 0: not in the version table */
    if ((h->kind == NS_CHUNK || (h->kind == NS_INPUT && h->ino)) && h->fd >= 0 && fs->vt)
        vt_release(fs->vt, h->ino);
    if (h->fd >= 0)
        close(h->fd);
    ns_listing_free(h->listing);
    free(h->buf);
    free(h);
}

int fs_node(struct fs *fs, uint64_t ino, struct ns_node *n)
{
    uint64_t base = ino, size;
    if ((ino & VT_INO_BIT) && vt_attr(fs->vt, ino, &base, &size, NULL) < 1)
        return -ENOENT;
    return ns_get(fs->ns, base, n);
}
