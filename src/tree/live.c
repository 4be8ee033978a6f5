/* live.c: entries that follow directories of the file system as they are now (see live.h).
 * A name has an inode made from a hash of (parent, name, kind), so that a listing and a later
 * lookup agree without an entry kept for every name listed; only names the kernel holds
 * (looked up and not forgotten yet) have an entry, in two map.h tables: by inode, and by
 * (parent, hash of the name) for the entry a name has now (a list of the names that share that
 * hash, as rare as a collision of 64-bit hashes). */
#include "live.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../map.h"
#include "../util.h"

#define LIVE_RANGE (1ULL << 62) /* inodes [ino0, ino0 + LIVE_RANGE) */

struct entry {
    uint64_t ino, parent, nlookup;
    char *name, *path;
    bool dir;
    bool current; /* in by_name: the name's entry now (not one of the other kind before) */
    int depth;
    struct entry *next_name; /* the next name of the same hash in by_name */
};

struct listed {
    char *name;
    bool dir;
};

/* A directory's names as one listing from offset 0 found them: what the following calls of
 * the same listing go on from (a reader's listing comes in pieces of a page or so; listing
 * and sorting the directory again for each would cost the square of its size). It belongs to
 * the listing (its caller: the FUSE side keeps one per open directory), never shared: a
 * listing's offsets then always index the names it started with, whatever other listings of
 * the directory find meanwhile, so a name there throughout is never skipped. */
struct live_listing {
    uint64_t parent;
    size_t n;
    struct listed *v;
};

struct live {
    pthread_mutex_t lock;
    uint64_t ino0;
    struct map by_name; /* (parent, name_hash) -> struct entry *: a list by next_name */
    struct map by_ino;  /* inode -> struct entry *: every entry */
};

static uint64_t mix(uint64_t parent, const char *name, bool dir)
{
    uint64_t h = 1469598103934665603ULL ^ (parent * 0x9E3779B97F4A7C15ULL) ^ (dir ? 0x5bd1e995 : 0);
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    h ^= h >> 31;
    h *= 0x94D049BB133111EBULL;
    return h ^ (h >> 29);
}

static uint64_t name_hash(uint64_t parent, const char *name)
{
    return mix(parent, name, false);
}

struct live *live_new(uint64_t ino0)
{
    struct live *l = xcalloc(1, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
    l->ino0 = ino0;
    map_init(&l->by_name, sizeof(struct entry *), 0);
    map_init(&l->by_ino, sizeof(struct entry *), 0);
    return l;
}

void live_listing_free(struct live_listing *ls)
{
    if (!ls)
        return;
    for (size_t k = 0; k < ls->n; k++)
        free(ls->v[k].name);
    free(ls->v);
    free(ls);
}

void live_free(struct live *l)
{
    if (!l)
        return;
    size_t it = 0;
    void *v;
    while (map_next(&l->by_ino, &it, NULL, &v)) {
        struct entry *e = *(struct entry **)v;
        free(e->name);
        free(e->path);
        free(e);
    }
    map_destroy(&l->by_name);
    map_destroy(&l->by_ino);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

bool live_in_range(const struct live *l, uint64_t ino)
{
    return ino >= l->ino0 && ino - l->ino0 < LIVE_RANGE;
}

size_t live_count(struct live *l)
{
    pthread_mutex_lock(&l->lock);
    size_t n = map_count(&l->by_ino);
    pthread_mutex_unlock(&l->lock);
    return n;
}

/* ---- the tables (lock held) ---- */

static struct entry *find_ino(const struct live *l, uint64_t ino)
{
    return map_get_ptr(&l->by_ino, ino, 0);
}

static struct entry *find_name(const struct live *l, uint64_t parent, const char *name)
{
    for (struct entry *e = map_get_ptr(&l->by_name, name_hash(parent, name), parent); e;
         e = e->next_name)
        if (e->parent == parent && strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* The inode of (parent, name) as a file or a directory: the entry's when the name has one of
 * that kind, else its hash, moved past inodes other names hold (a collision, in 2^62). */
static uint64_t ino_for(const struct live *l, uint64_t parent, const char *name, bool dir)
{
    const struct entry *cur = find_name(l, parent, name);
    if (cur && cur->dir == dir)
        return cur->ino;
    uint64_t ino = l->ino0 + (mix(parent, name, dir) & (LIVE_RANGE - 1));
    while (find_ino(l, ino))
        ino = l->ino0 + ((ino - l->ino0 + 1) & (LIVE_RANGE - 1));
    return ino;
}

static void unlink_name(struct live *l, struct entry *e)
{
    uint64_t h = name_hash(e->parent, e->name);
    struct entry **head = map_get(&l->by_name, h, e->parent), **p = head;
    while (p && *p && *p != e)
        p = &(*p)->next_name;
    if (p && *p)
        *p = e->next_name;
    if (head && !*head)
        map_del(&l->by_name, h, e->parent, NULL);
    e->current = false;
}

static void drop(struct live *l, struct entry *e)
{
    if (e->current)
        unlink_name(l, e);
    map_del(&l->by_ino, e->ino, 0, NULL);
    free(e->name);
    free(e->path);
    free(e);
}

static void node_of(const struct entry *e, struct live_node *out)
{
    *out = (struct live_node){
        .ino = e->ino, .parent = e->parent, .dir = e->dir, .path = e->path, .depth = e->depth};
}

/* One more lookup of name in parent as a file or a directory (dir): the name's entry, made
 * when it has none of that kind (an entry of the other kind stays for its inode's holders). */
static void looked_up(struct live *l, uint64_t parent, const char *dir_path, int depth,
                      const char *name, bool dir, struct live_node *out)
{
    pthread_mutex_lock(&l->lock);
    struct entry *cur = find_name(l, parent, name);
    if (cur && cur->dir == dir) {
        cur->nlookup++;
        node_of(cur, out);
        pthread_mutex_unlock(&l->lock);
        return;
    }
    if (cur)
        unlink_name(l, cur);
    struct entry *e = xmalloc(sizeof *e);
    *e = (struct entry){.ino = ino_for(l, parent, name, dir),
                        .parent = parent,
                        .nlookup = 1,
                        .name = xstrdup(name),
                        .path = path_join(dir_path, name),
                        .dir = dir,
                        .current = true,
                        .depth = depth + 1};
    struct entry **head = map_put(&l->by_name, name_hash(parent, name), parent, NULL);
    e->next_name = *head;
    *head = e;
    *(struct entry **)map_put(&l->by_ino, e->ino, 0, NULL) = e;
    node_of(e, out);
    pthread_mutex_unlock(&l->lock);
}

void live_forget(struct live *l, uint64_t ino, uint64_t n)
{
    pthread_mutex_lock(&l->lock);
    struct entry *e = find_ino(l, ino);
    if (e) {
        e->nlookup = n < e->nlookup ? e->nlookup - n : 0;
        if (!e->nlookup)
            drop(l, e);
    }
    pthread_mutex_unlock(&l->lock);
}

/* Whether path (at depth, its own) is shown, and as what: 1 a directory, 0 a file; -ENOENT
 * when it is neither (a FIFO, a socket, a device, a dangling link, too deep) or missing, or
 * the error of its stat (-EACCES: the caller may not search a directory on its way). */
static int shown_kind(const char *path, int depth)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return errno == EACCES || errno == EPERM ? -errno : -ENOENT;
    if (S_ISREG(st.st_mode))
        return 0;
    return S_ISDIR(st.st_mode) && depth <= LIVE_MAX_DEPTH ? 1 : -ENOENT;
}

int live_lookup(struct live *l, uint64_t parent, const char *dir, int depth, const char *name,
                struct live_node *out)
{
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strchr(name, '/'))
        return -ENOENT;
    char *p = path_join(dir, name);
    int kind = shown_kind(p, depth + 1);
    free(p);
    if (kind < 0)
        return kind;
    looked_up(l, parent, dir, depth, name, kind == 1, out);
    return 0;
}

int live_get(struct live *l, uint64_t ino, struct live_node *out)
{
    pthread_mutex_lock(&l->lock);
    const struct entry *e = find_ino(l, ino);
    if (e)
        node_of(e, out);
    pthread_mutex_unlock(&l->lock);
    return e ? 0 : -ENOENT;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct listed *)a)->name, ((const struct listed *)b)->name);
}

/* The names of directory dir as they are now, sorted. */
static int read_dir(uint64_t parent, const char *dir, int depth, live_skip skip, void *skip_ctx,
                    struct live_listing **out)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    size_t n = 0, cap = 16;
    struct listed *v = xmalloc(cap * sizeof *v);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || (skip && skip(skip_ctx, name)))
            continue;
        int kind = -1;
        if (de->d_type == DT_REG) {
            kind = 0;
        } else if (de->d_type == DT_DIR) {
            kind = depth + 1 <= LIVE_MAX_DEPTH ? 1 : -1;
        } else if (de->d_type == DT_LNK || de->d_type == DT_UNKNOWN) {
            char *p = path_join(dir, name);
            kind = shown_kind(p, depth + 1);
            free(p);
        }
        if (kind < 0)
            continue;
        if (n == cap)
            v = xrealloc(v, (cap *= 2) * sizeof *v);
        v[n++] = (struct listed){.name = xstrdup(name), .dir = kind == 1};
    }
    closedir(d);
    qsort(v, n, sizeof *v, by_name);
    struct live_listing *ls = xmalloc(sizeof *ls);
    *ls = (struct live_listing){.parent = parent, .n = n, .v = v};
    *out = ls;
    return 0;
}

int live_list(struct live *l, struct live_listing **keep, uint64_t parent, const char *dir,
              int depth, uint64_t first, uint64_t base, live_skip skip, void *skip_ctx,
              live_emit emit, void *ctx)
{
    struct live_listing *ls = keep && first && *keep && (*keep)->parent == parent ? *keep : NULL;
    if (!ls) {
        int r = read_dir(parent, dir, depth, skip, skip_ctx, &ls);
        if (r < 0)
            return r;
        if (keep) {
            live_listing_free(*keep);
            *keep = ls;
        }
    }
    for (size_t k = first; k < ls->n; k++) {
        pthread_mutex_lock(&l->lock);
        uint64_t ino = ino_for(l, parent, ls->v[k].name, ls->v[k].dir);
        pthread_mutex_unlock(&l->lock);
        if (emit(ctx, ls->v[k].name, ino, ls->v[k].dir, base + k + 1))
            break;
    }
    if (!keep)
        live_listing_free(ls);
    return 0;
}
