/* namespace.c: inode numbers and names of the presented tree (see namespace.h). Entries of
 * the table have inodes 1, 2, ... in the order added; each attached chunk tree has a range
 * of its own from 2^32 on: its directories and files by depth, then C-order index; what
 * mirrored directories hold is numbered by live.c from 2^62 on. */
#include "namespace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "live.h"

#define NS_INO_CHUNKS (1ULL << 32) /* first inode of the chunk trees */

struct ns_entry {
    enum ns_kind kind; /* NS_DIR, NS_META, NS_STATUS, NS_TABLE or NS_GEN */
    char *name;
    int parent;
    const char *text; /* NS_META: the content */
    size_t len;
    char *mirror, *hide; /* a mirrored directory: its path, the name it never shows */
    int depth;           /* a mirrored directory: mirrored directories above it */
    uint64_t index;      /* NS_TABLE, NS_GEN */
    int first_child, last_child, next_sibling; /* a directory's entries, in order (-1: none) */
    int nchildren;
    int chunks; /* a directory: the chunk tree listed after its entries, or -1 */
    bool lazy;  /* a directory whose entries are added when first needed (ns_set_lazy) */
};

/* The chunk files of one array, below one directory. */
struct ns_chunks {
    const struct task *t;
    int array, dir;
    int ndim;
    bool nested;                       /* separator "/": a directory per index but the last */
    bool v3;                           /* format 3: flat keys start with "c" and the separator */
    uint64_t base[ROIFS_MAX_DIM + 1];  /* offset of each depth's nodes in the range */
    uint64_t count[ROIFS_MAX_DIM + 1]; /* number of nodes (paths) of each depth */
    uint64_t ino0, nodes;              /* the range [ino0, ino0 + nodes) */
};

struct ns {
    struct ns_entry *e;
    int n, cap;
    struct ns_chunks *c;
    int nc, capc;
    uint64_t next_ino; /* first inode of the next chunk tree */
    struct live *live; /* what mirrored directories hold (NULL: none mirrored) */
    /* entries and chunk trees may be added while the tree is looked at (ns_set_lazy): readers
     * hold it shared, additions exclusively */
    pthread_rwlock_t lock;
    ns_fill_fn fill;
    void *fill_ctx;
};

static void rdlock(const struct ns *ns)
{
    pthread_rwlock_rdlock((pthread_rwlock_t *)&ns->lock);
}

static void wrlock(struct ns *ns)
{
    pthread_rwlock_wrlock(&ns->lock);
}

static void unlock(const struct ns *ns)
{
    pthread_rwlock_unlock((pthread_rwlock_t *)&ns->lock);
}

/* ---- building ---- */

static int add_entry(struct ns *ns, int parent, enum ns_kind kind, const char *name)
{
    if (ns->n == ns->cap) {
        ns->cap = ns->cap ? 2 * ns->cap : 16;
        ns->e = xrealloc(ns->e, (size_t)ns->cap * sizeof *ns->e);
    }
    int i = ns->n++;
    ns->e[i] = (struct ns_entry){.kind = kind,
                                 .name = xstrdup(name),
                                 .parent = parent,
                                 .first_child = -1,
                                 .last_child = -1,
                                 .next_sibling = -1,
                                 .chunks = -1};
    if (parent >= 0 && i != parent) {
        struct ns_entry *p = &ns->e[parent];
        if (p->last_child >= 0)
            ns->e[p->last_child].next_sibling = i;
        else
            p->first_child = i;
        p->last_child = i;
        p->nchildren++;
    }
    return i;
}

struct ns *ns_new(void)
{
    struct ns *ns = xcalloc(1, sizeof *ns);
    pthread_rwlock_init(&ns->lock, NULL);
    ns->next_ino = NS_INO_CHUNKS;
    add_entry(ns, NS_ROOT, NS_DIR, "");
    return ns;
}

void ns_free(struct ns *ns)
{
    if (!ns)
        return;
    for (int i = 0; i < ns->n; i++) {
        free(ns->e[i].name);
        free(ns->e[i].mirror);
        free(ns->e[i].hide);
    }
    free(ns->e);
    free(ns->c);
    live_free(ns->live);
    pthread_rwlock_destroy(&ns->lock);
    free(ns);
}

/* add_entry with the tree locked, and the entry's index (kind NS_TABLE, NS_GEN). */
static int add_locked(struct ns *ns, int parent, enum ns_kind kind, const char *name,
                      uint64_t index)
{
    wrlock(ns);
    int i = add_entry(ns, parent, kind, name);
    ns->e[i].index = index;
    unlock(ns);
    return i;
}

int ns_add_dir(struct ns *ns, int parent, const char *name)
{
    return add_locked(ns, parent, NS_DIR, name, 0);
}

int ns_add_file(struct ns *ns, int parent, const char *name, const char *text)
{
    wrlock(ns);
    int i = add_entry(ns, parent, NS_META, name);
    ns->e[i].text = text;
    ns->e[i].len = strlen(text);
    unlock(ns);
    return i;
}

int ns_add_input(struct ns *ns, int parent, const char *name, const char *url, uint64_t size)
{
    wrlock(ns);
    int i = add_entry(ns, parent, NS_INPUT, name);
    ns->e[i].text = url;
    ns->e[i].len = strlen(url);
    ns->e[i].index = size;
    unlock(ns);
    return i;
}

void ns_mirror(struct ns *ns, int dir, const char *path, const char *hide)
{
    wrlock(ns);
    struct ns_entry *en = &ns->e[dir];
    free(en->mirror);
    free(en->hide);
    en->mirror = xstrdup(path);
    en->hide = hide ? xstrdup(hide) : NULL;
    en->depth = dir != NS_ROOT && ns->e[en->parent].mirror ? ns->e[en->parent].depth + 1 : 0;
    if (!ns->live)
        ns->live = live_new(NS_INO_LIVE);
    unlock(ns);
}

bool ns_is_mirror(const struct ns *ns, int dir)
{
    rdlock(ns);
    bool is = ns->e[dir].mirror != NULL;
    unlock(ns);
    return is;
}

int ns_add_generated(struct ns *ns, int parent, const char *name, uint64_t index)
{
    return add_locked(ns, parent, NS_GEN, name, index);
}

int ns_add_table(struct ns *ns, int parent, const char *name, uint64_t index)
{
    return add_locked(ns, parent, NS_TABLE, name, index);
}

int ns_child(const struct ns *ns, int dir, const char *name)
{
    rdlock(ns);
    int found = -1;
    for (int i = ns->e[dir].first_child; i >= 0 && found < 0; i = ns->e[i].next_sibling)
        if (strcmp(ns->e[i].name, name) == 0)
            found = i;
    unlock(ns);
    return found;
}

void ns_set_filler(struct ns *ns, ns_fill_fn fill, void *ctx)
{
    ns->fill = fill;
    ns->fill_ctx = ctx;
}

void ns_set_lazy(struct ns *ns, int dir, uint64_t index)
{
    wrlock(ns);
    ns->e[dir].lazy = true;
    ns->e[dir].index = index;
    unlock(ns);
}

void ns_filled(struct ns *ns, int dir)
{
    wrlock(ns);
    ns->e[dir].lazy = false;
    unlock(ns);
}

/* Directory inode ino's entries, added by its owner first when they are added when first
 * needed (the tree not locked meanwhile). */
static void fill_first(const struct ns *ns, uint64_t ino, const char *name)
{
    if (!ns->fill)
        return;
    rdlock(ns);
    bool lazy = ino >= 1 && ino <= (uint64_t)ns->n && ns->e[ino - 1].lazy;
    uint64_t index = lazy ? ns->e[ino - 1].index : 0;
    unlock(ns);
    if (lazy)
        ns->fill(ns->fill_ctx, index, name);
}

int ns_add_array(struct ns *ns, int dir, const struct task *t, int array, struct errbuf *err)
{
    if (t->out.format == 3) {
        ns_add_file(ns, dir, "zarr.json", t->zarr_json);
    } else {
        ns_add_file(ns, dir, ".zarray", t->zarray_json);
        ns_add_file(ns, dir, ".zattrs", t->zattrs_json);
    }
    return ns_add_chunks(ns, dir, t, array, err);
}

int ns_add_status(struct ns *ns, int parent, const char *name)
{
    return add_entry(ns, parent, NS_STATUS, name);
}

int ns_add_chunks(struct ns *ns, int dir, const struct task *t, int array, struct errbuf *err)
{
    struct ns_chunks ch = {.t = t, .array = array, .ndim = t->out.ndim};
    ch.v3 = t->out.format == 3;
    /* v3 keys c/0 are nested even in one dimension: the "c" directory holds them */
    ch.nested = t->out.separator == '/' && ch.ndim > (ch.v3 ? 0 : 1);
    ch.dir = ch.v3 && ch.nested ? ns_add_dir(ns, dir, "c") : dir;
    wrlock(ns);
    uint64_t n = 1;
    bool over = false;
    ch.count[0] = 1;
    ch.nodes = ch.ndim == 0; /* a 0-d array has one chunk, at depth 0 */
    for (int d = 1; d <= ch.ndim; d++) {
        over = over || __builtin_mul_overflow(n, t->grid[d - 1], &n);
        ch.count[d] = n;
        if (ch.nested || d == ch.ndim) {
            ch.base[d] = ch.nodes;
            over = over || __builtin_add_overflow(ch.nodes, n, &ch.nodes);
        }
    }
    ch.ino0 = ns->next_ino;
    if (over || ch.nodes > NS_INO_LIVE - ch.ino0) {
        unlock(ns);
        return err_set(err, -EINVAL, "too many chunks to number in one tree");
    }
    ns->next_ino += ch.nodes;
    if (ns->nc == ns->capc) {
        ns->capc = ns->capc ? 2 * ns->capc : 4;
        ns->c = xrealloc(ns->c, (size_t)ns->capc * sizeof *ns->c);
    }
    ns->e[ch.dir].chunks = ns->nc;
    ns->c[ns->nc++] = ch;
    unlock(ns);
    return 0;
}

uint64_t ns_chunk_ino(const struct ns *ns, int array, uint64_t id)
{
    uint64_t ino = 0;
    rdlock(ns);
    for (int i = 0; i < ns->nc && !ino; i++) {
        const struct ns_chunks *ch = &ns->c[i];
        if (ch->array == array)
            ino = ch->ino0 + ch->base[ch->ndim] + id;
    }
    unlock(ns);
    return ino;
}

/* ---- nodes ---- */

static void entry_node(const struct ns *ns, int i, struct ns_node *out)
{
    const struct ns_entry *en = &ns->e[i];
    memset(out, 0, sizeof *out);
    out->kind = en->kind;
    out->ino = (uint64_t)i + 1;
    out->text = en->mirror ? en->mirror : en->text;
    out->len = out->text ? strlen(out->text) : 0;
    out->chunk = en->index;
    out->array = -1;
    out->mirrored = en->mirror != NULL;
}

/* A name found in a mirrored directory: a file read through or a directory mirrored too. */
static void live_to_node(const struct live_node *ln, struct ns_node *out)
{
    memset(out, 0, sizeof *out);
    out->kind = ln->dir ? NS_DIR : NS_INPUT;
    out->ino = ln->ino;
    out->text = ln->path;
    out->len = strlen(ln->path);
    out->array = -1;
    out->depth = ln->depth;
    out->live = true;
    out->mirrored = ln->dir;
}

static bool is_entry(const struct ns *ns, uint64_t ino)
{
    return ino >= 1 && ino <= (uint64_t)ns->n;
}

static void chunk_node(const struct ns_chunks *ch, int depth, uint64_t p, struct ns_node *out)
{
    memset(out, 0, sizeof *out);
    out->kind = depth == ch->ndim ? NS_CHUNK : NS_DIR;
    out->ino = ch->ino0 + ch->base[depth] + p;
    out->array = ch->array;
    out->depth = depth;
    out->path_index = p;
    out->chunk = depth == ch->ndim ? p : 0;
}

/* The chunk tree whose range holds ino, or NULL (ranges are in increasing order). */
static const struct ns_chunks *tree_of(const struct ns *ns, uint64_t ino)
{
    int lo = 0, hi = ns->nc;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ino < ns->c[mid].ino0)
            hi = mid;
        else if (ino - ns->c[mid].ino0 >= ns->c[mid].nodes)
            lo = mid + 1;
        else
            return &ns->c[mid];
    }
    return NULL;
}

static int get_node(const struct ns *ns, uint64_t ino, struct ns_node *out)
{
    if (is_entry(ns, ino)) {
        entry_node(ns, (int)(ino - 1), out);
        return 0;
    }
    struct live_node ln;
    if (ns->live && live_in_range(ns->live, ino)) {
        if (live_get(ns->live, ino, &ln) < 0)
            return -ENOENT;
        live_to_node(&ln, out);
        return 0;
    }
    const struct ns_chunks *ch = tree_of(ns, ino);
    if (!ch)
        return -ENOENT;
    uint64_t rel = ino - ch->ino0;
    for (int d = ch->ndim == 0 ? 0 : 1; d <= ch->ndim; d++) {
        if (!ch->nested && d != ch->ndim)
            continue;
        if (rel >= ch->base[d] && rel - ch->base[d] < ch->count[d]) {
            chunk_node(ch, d, rel - ch->base[d], out);
            return 0;
        }
    }
    return -ENOENT;
}

int ns_get(const struct ns *ns, uint64_t ino, struct ns_node *out)
{
    rdlock(ns);
    int r = get_node(ns, ino, out);
    unlock(ns);
    return r;
}

/* The chunk tree below node dir (a directory): its own when dir is a chunk directory, the
 * one attached to the entry otherwise (NULL: none). */
static const struct ns_chunks *chunks_below(const struct ns *ns, const struct ns_node *dir)
{
    if (dir->array >= 0)
        return tree_of(ns, dir->ino);
    if (!is_entry(ns, dir->ino))
        return NULL;
    int chunks = ns->e[dir->ino - 1].chunks;
    return chunks >= 0 ? &ns->c[chunks] : NULL;
}

/* ---- chunk names ---- */

/* True when some present chunk lies under the depth-d path index p. */
static bool prefix_present(const struct ns_chunks *ch, int depth, uint64_t p)
{
    const struct task *t = ch->t;
    if (p >= ch->count[depth])
        return false;
    if (t->outside == OUTSIDE_INPUT)
        return true;
    uint64_t span = 1;
    for (int d = depth; d < ch->ndim; d++)
        span *= t->grid[d];
    size_t k = roi_index_lower_bound(t->index, p * span);
    return k < roi_index_nchunks(t->index) && roi_index_chunk_id(t->index, k) < (p + 1) * span;
}

/* Parses a canonical decimal index below limit from s[0..len). */
static bool parse_index(const char *s, size_t len, uint64_t limit, uint64_t *out)
{
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v >= limit)
        return false;
    *out = v;
    return true;
}

/* Name "i.j.k" of a flat layout: the linear chunk id, or false. */
static bool parse_flat_key(const struct ns_chunks *ch, const char *name, uint64_t *id)
{
    const struct task *t = ch->t;
    uint64_t lin = 0;
    const char *p = name;
    if (ch->v3) { /* "c.1.2", or "c" alone for a 0-d array */
        if (p[0] != 'c' || (ch->ndim && p[1] != t->out.separator))
            return false;
        p += ch->ndim ? 2 : 1;
    }
    for (int d = 0; d < ch->ndim; d++) {
        const char *end = d + 1 < ch->ndim ? strchr(p, t->out.separator) : p + strlen(p);
        uint64_t v;
        if (!end || !parse_index(p, (size_t)(end - p), t->grid[d], &v))
            return false;
        lin = lin * t->grid[d] + v;
        p = end + (d + 1 < ch->ndim ? 1 : 0);
    }
    if (*p)
        return false;
    *id = lin;
    return true;
}

/* Resolves a chunk name in the chunk directory at depth d (0: the directory the tree is
 * attached to) with path index p. */
static int lookup_chunk(const struct ns_chunks *ch, int d, uint64_t p, const char *name,
                        struct ns_node *out)
{
    uint64_t v;
    if (!ch->nested) {
        if (!parse_flat_key(ch, name, &v) || !task_chunk_present(ch->t, v))
            return -ENOENT;
        chunk_node(ch, ch->ndim, v, out);
        return 0;
    }
    if (!parse_index(name, strlen(name), ch->t->grid[d], &v))
        return -ENOENT;
    uint64_t q = p * ch->t->grid[d] + v;
    if (!prefix_present(ch, d + 1, q))
        return -ENOENT;
    chunk_node(ch, d + 1, q, out);
    return 0;
}

void ns_forget(const struct ns *ns, uint64_t ino, uint64_t n)
{
    if (ns->live && live_in_range(ns->live, ino))
        live_forget(ns->live, ino, n);
}

void ns_listing_free(struct live_listing *keep)
{
    live_listing_free(keep);
}

size_t ns_live_count(const struct ns *ns)
{
    return ns->live ? live_count(ns->live) : 0;
}

bool ns_follows(const struct ns *ns, uint64_t ino)
{
    struct ns_node n;
    return ns_get(ns, ino, &n) == 0 && n.mirrored;
}

/* name in the mirrored directory dir (path, depth). */
static int lookup_live(const struct ns *ns, uint64_t dir, const char *path, int depth,
                       const char *name, struct ns_node *out)
{
    struct live_node ln;
    int r = live_lookup(ns->live, dir, path, depth, name, &ln);
    if (r == 0)
        live_to_node(&ln, out);
    return r;
}

static int lookup_locked(const struct ns *ns, uint64_t parent, const char *name,
                         struct ns_node *out)
{
    struct ns_node dir;
    if (get_node(ns, parent, &dir) < 0)
        return -ENOENT;
    if (dir.kind != NS_DIR)
        return -ENOTDIR;
    if (dir.live)
        return lookup_live(ns, parent, dir.text, dir.depth, name, out);
    if (dir.array < 0) { /* the entries first: they never look like chunk keys */
        const struct ns_entry *en = &ns->e[parent - 1];
        for (int i = en->first_child; i >= 0; i = ns->e[i].next_sibling)
            if (strcmp(ns->e[i].name, name) == 0) {
                entry_node(ns, i, out);
                return 0;
            }
        if (en->mirror)
            return en->hide && strcmp(name, en->hide) == 0
                       ? -ENOENT
                       : lookup_live(ns, parent, en->mirror, en->depth, name, out);
    }
    const struct ns_chunks *ch = chunks_below(ns, &dir);
    if (!ch)
        return -ENOENT;
    return lookup_chunk(ch, dir.depth, dir.path_index, name, out);
}

int ns_lookup(const struct ns *ns, uint64_t parent, const char *name, struct ns_node *out)
{
    fill_first(ns, parent, name);
    rdlock(ns);
    int r = lookup_locked(ns, parent, name, out);
    unlock(ns);
    return r;
}

/* ---- listing ---- */

/* Formats the name of the child at depth d with path index p (flat: the whole key). */
static void child_name(const struct ns_chunks *ch, int d, uint64_t p, char *buf, size_t len)
{
    const struct task *t = ch->t;
    if (ch->nested) {
        snprintf(buf, len, "%llu", (unsigned long long)(p % t->grid[d - 1]));
        return;
    }
    uint64_t idx[ROIFS_MAX_DIM];
    for (int i = ch->ndim - 1; i >= 0; i--) {
        idx[i] = p % t->grid[i];
        p /= t->grid[i];
    }
    zarr_meta_chunk_key(&t->out, idx, buf, len);
}

/* Lists the chunk children of a directory at depth d with path index p, the k-th at offset
 * off0 + k. */
static int list_chunks(const struct ns_chunks *ch, int d, uint64_t p, uint64_t off, uint64_t off0,
                       ns_emit emit, void *ctx)
{
    const struct task *t = ch->t;
    char name[32 * ROIFS_MAX_DIM];
    struct ns_node n;
    uint64_t first = off > off0 ? off - off0 : 0;
    if (!ch->nested && t->outside != OUTSIDE_INPUT) { /* only the chunks ROIs touch */
        size_t nk = roi_index_nchunks(t->index);
        for (uint64_t k = first; k < nk; k++) {
            uint64_t id = roi_index_chunk_id(t->index, k);
            child_name(ch, ch->ndim, id, name, sizeof name);
            chunk_node(ch, ch->ndim, id, &n);
            if (emit(ctx, name, n.ino, false, off0 + k + 1))
                return 0;
        }
        return 0;
    }
    uint64_t nchild = ch->nested ? t->grid[d] : t->nchunks;
    int cd = ch->nested ? d + 1 : ch->ndim;
    for (uint64_t j = first; j < nchild; j++) {
        uint64_t cp = ch->nested ? p * t->grid[d] + j : j;
        if (!prefix_present(ch, cd, cp))
            continue;
        child_name(ch, cd, cp, name, sizeof name);
        chunk_node(ch, cd, cp, &n);
        if (emit(ctx, name, n.ino, cd < ch->ndim, off0 + j + 1))
            return 0;
    }
    return 0;
}

/* The inode of a directory's parent (the root's is itself). */
static uint64_t parent_ino(const struct ns *ns, const struct ns_node *dir)
{
    struct live_node ln;
    if (dir->live)
        return live_get(ns->live, dir->ino, &ln) == 0 ? ln.parent : NS_INO_ROOT;
    if (dir->array < 0)
        return (uint64_t)ns->e[dir->ino - 1].parent + 1;
    const struct ns_chunks *ch = tree_of(ns, dir->ino);
    if (dir->depth == 1)
        return (uint64_t)ch->dir + 1;
    uint64_t p = dir->path_index / ch->t->grid[dir->depth - 1];
    return ch->ino0 + ch->base[dir->depth - 1] + p;
}

/* A mirrored directory's own entries and hidden name, which its listing leaves out. */
struct shadow {
    const struct ns *ns;
    const struct ns_entry *dir;
};

static bool shadowed(void *ctx, const char *name)
{
    const struct shadow *sh = ctx;
    if (sh->dir->hide && strcmp(name, sh->dir->hide) == 0)
        return true;
    for (int i = sh->dir->first_child; i >= 0; i = sh->ns->e[i].next_sibling)
        if (strcmp(sh->ns->e[i].name, name) == 0)
            return true;
    return false;
}

/* What the mirrored directory ino (path, depth) holds, the k-th at offset base + k + 1; a
 * directory the file system does not have (any more) holds nothing. */
static int list_live(const struct ns *ns, struct live_listing **keep, uint64_t ino,
                     const char *path, int depth, uint64_t off, uint64_t base, live_skip skip,
                     void *skip_ctx, ns_emit emit, void *ctx)
{
    int r = live_list(ns->live, keep, ino, path, depth, off > base ? off - base : 0, base, skip,
                      skip_ctx, emit, ctx);
    return r == -ENOENT || r == -ENOTDIR ? 0 : r;
}

/* Offsets: 0 ".", 1 "..", 2 + i the directory's i-th entry, then its chunks or what the
 * directory it mirrors holds. */
static int readdir_locked(const struct ns *ns, uint64_t ino, uint64_t off,
                          struct live_listing **keep, ns_emit emit, void *ctx)
{
    struct ns_node dir;
    if (get_node(ns, ino, &dir) < 0)
        return -ENOENT;
    if (dir.kind != NS_DIR)
        return -ENOTDIR;
    if (off == 0 && emit(ctx, ".", ino, true, 1))
        return 0;
    if (off <= 1 && emit(ctx, "..", parent_ino(ns, &dir), true, 2))
        return 0;
    if (dir.live)
        return list_live(ns, keep, ino, dir.text, dir.depth, off, 2, NULL, NULL, emit, ctx);
    uint64_t nentries = 0;
    if (dir.array < 0) {
        const struct ns_entry *en = &ns->e[ino - 1];
        nentries = (uint64_t)en->nchildren;
        uint64_t k = 0;
        for (int i = en->first_child; i >= 0; i = ns->e[i].next_sibling, k++)
            if (off <= 2 + k &&
                emit(ctx, ns->e[i].name, (uint64_t)i + 1, ns->e[i].kind == NS_DIR, 3 + k))
                return 0;
        if (en->mirror) {
            struct shadow sh = {ns, en};
            return list_live(ns, keep, ino, en->mirror, en->depth, off, 2 + nentries, shadowed, &sh,
                             emit, ctx);
        }
    }
    const struct ns_chunks *ch = chunks_below(ns, &dir);
    return ch ? list_chunks(ch, dir.depth, dir.path_index, off, 2 + nentries, emit, ctx) : 0;
}

int ns_readdir(const struct ns *ns, uint64_t ino, uint64_t off, struct live_listing **keep,
               ns_emit emit, void *ctx)
{
    fill_first(ns, ino, NULL);
    rdlock(ns);
    int r = readdir_locked(ns, ino, off, keep, emit, ctx);
    unlock(ns);
    return r;
}
