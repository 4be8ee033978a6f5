/* namespace.c: inode numbers and names of the mounted tree (see namespace.h). A chunk path
 * is accepted only in canonical form: decimal indices without sign or leading zeros, inside
 * the chunk grid, with exactly the array's number of dimensions. */
#include "namespace.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void arr_init(struct ns *ns, const struct task *t)
{
    memset(ns, 0, sizeof *ns);
    ns->t = t;
    ns->ndim = t->out.ndim;
    ns->v3 = t->out.format == 3;
    /* v3 keys c/0 are nested even in one dimension: the "c" directory holds them */
    ns->nested = t->out.separator == '/' && ns->ndim > (ns->v3 ? 0 : 1);
    uint64_t n = 1, base = 0;
    for (int d = 1; d <= ns->ndim; d++) {
        n *= t->grid[d - 1];
        ns->count[d] = n;
        if (ns->nested || d == ns->ndim) {
            ns->base[d] = base;
            base += n;
        }
    }
}

/* True when some present chunk lies under the depth-d prefix p. */
static bool prefix_present(const struct ns *ns, int depth, uint64_t p)
{
    const struct task *t = ns->t;
    if (p >= ns->count[depth])
        return false;
    if (t->cfg.outside == OUTSIDE_INPUT)
        return true;
    uint64_t span = 1;
    for (int d = depth; d < ns->ndim; d++)
        span *= t->grid[d];
    size_t k = roi_index_lower_bound(t->index, p * span);
    return k < roi_index_nchunks(t->index) && roi_index_chunk_id(t->index, k) < (p + 1) * span;
}

static void make_chunk_node(const struct ns *ns, int depth, uint64_t p, struct ns_node *out)
{
    memset(out, 0, sizeof *out);
    out->kind = depth == ns->ndim ? NS_CHUNK : NS_DIR;
    out->ino = NS_INO_CHUNKS + ns->base[depth] + p;
    out->depth = depth;
    out->prefix = p;
}

static void make_fixed(const struct ns *ns, uint64_t ino, struct ns_node *out)
{
    memset(out, 0, sizeof *out);
    out->ino = ino;
    switch (ino) {
    case NS_INO_ZARRAY:
        out->kind = NS_META;
        out->text = ns->v3 ? ns->t->zarr_json : ns->t->zarray_json;
        break;
    case NS_INO_ZATTRS:
        out->kind = NS_META;
        out->text = ns->t->zattrs_json;
        break;
    case NS_INO_STATUS:
        out->kind = NS_STATUS;
        break;
    default:
        out->kind = NS_DIR;
        break;
    }
    if (out->text)
        out->len = strlen(out->text);
}

static int arr_get(const struct ns *ns, uint64_t ino, struct ns_node *out)
{
    if ((ino == NS_INO_ZATTRS && ns->v3) || (ino == NS_INO_CDIR && !(ns->v3 && ns->nested)))
        return -ENOENT;
    if (ino >= NS_INO_ROOT && ino <= NS_INO_CDIR) {
        make_fixed(ns, ino, out);
        return 0;
    }
    if (ino < NS_INO_CHUNKS)
        return -ENOENT;
    uint64_t rel = ino - NS_INO_CHUNKS;
    for (int d = 1; d <= ns->ndim; d++) {
        if (!ns->nested && d != ns->ndim)
            continue;
        if (rel >= ns->base[d] && rel - ns->base[d] < ns->count[d]) {
            make_chunk_node(ns, d, rel - ns->base[d], out);
            return 0;
        }
    }
    return -ENOENT;
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
static bool parse_flat_key(const struct ns *ns, const char *name, uint64_t *id)
{
    const struct task *t = ns->t;
    uint64_t lin = 0;
    const char *p = name;
    if (ns->v3) { /* "c.1.2", or "c" alone for a 0-d array */
        if (p[0] != 'c' || (ns->ndim && p[1] != t->out.separator))
            return false;
        p += ns->ndim ? 2 : 1;
    }
    for (int d = 0; d < ns->ndim; d++) {
        const char *end = d + 1 < ns->ndim ? strchr(p, t->out.separator) : p + strlen(p);
        uint64_t v;
        if (!end || !parse_index(p, (size_t)(end - p), t->grid[d], &v))
            return false;
        lin = lin * t->grid[d] + v;
        p = end + (d + 1 < ns->ndim ? 1 : 0);
    }
    if (*p)
        return false;
    *id = lin;
    return true;
}

static int lookup_root(const struct ns *ns, const char *name, struct ns_node *out)
{
    if (strcmp(name, ns->v3 ? "zarr.json" : ".zarray") == 0)
        make_fixed(ns, NS_INO_ZARRAY, out);
    else if (!ns->v3 && strcmp(name, ".zattrs") == 0)
        make_fixed(ns, NS_INO_ZATTRS, out);
    else if (strcmp(name, ".roifs") == 0)
        make_fixed(ns, NS_INO_ROIFS, out);
    else if (ns->v3 && ns->nested) {
        if (strcmp(name, "c") != 0)
            return -ENOENT;
        make_fixed(ns, NS_INO_CDIR, out);
    } else if (ns->nested) {
        uint64_t v;
        if (!parse_index(name, strlen(name), ns->t->grid[0], &v) || !prefix_present(ns, 1, v))
            return -ENOENT;
        make_chunk_node(ns, 1, v, out);
    } else {
        uint64_t id;
        if (!parse_flat_key(ns, name, &id) || !task_chunk_present(ns->t, id))
            return -ENOENT;
        make_chunk_node(ns, ns->ndim, id, out);
    }
    return 0;
}

static int arr_lookup(const struct ns *ns, uint64_t parent, const char *name, struct ns_node *out)
{
    struct ns_node dir;
    if (arr_get(ns, parent, &dir) < 0)
        return -ENOENT;
    if (dir.kind != NS_DIR)
        return -ENOTDIR;
    if (parent == NS_INO_ROOT)
        return lookup_root(ns, name, out);
    if (parent == NS_INO_ROIFS) {
        if (strcmp(name, "status") != 0)
            return -ENOENT;
        make_fixed(ns, NS_INO_STATUS, out);
        return 0;
    }
    int d = dir.depth;
    uint64_t v;
    if (!parse_index(name, strlen(name), ns->t->grid[d], &v))
        return -ENOENT;
    uint64_t p = dir.prefix * ns->t->grid[d] + v;
    if (!prefix_present(ns, d + 1, p))
        return -ENOENT;
    make_chunk_node(ns, d + 1, p, out);
    return 0;
}

/* Formats the name of the child at depth d with prefix p (flat: the whole key). */
static void child_name(const struct ns *ns, int d, uint64_t p, char *buf, size_t len)
{
    if (ns->nested) {
        snprintf(buf, len, "%llu", (unsigned long long)(p % ns->t->grid[d - 1]));
        return;
    }
    uint64_t idx[ROIFS_MAX_DIM];
    for (int i = ns->ndim - 1; i >= 0; i--) {
        idx[i] = p % ns->t->grid[i];
        p /= ns->t->grid[i];
    }
    zarr_meta_chunk_key(&ns->t->out, idx, buf, len);
}

/* Lists the chunk children of a directory at depth d (root: 0) with prefix p. Offsets of
 * children start at 16. */
static int list_children(const struct ns *ns, int d, uint64_t p, uint64_t off, ns_emit emit,
                         void *ctx)
{
    const struct task *t = ns->t;
    char name[32 * ROIFS_MAX_DIM];
    struct ns_node n;
    uint64_t first = off > 16 ? off - 16 : 0;
    if (!ns->nested && t->cfg.outside != OUTSIDE_INPUT) {
        size_t nk = roi_index_nchunks(t->index);
        for (uint64_t k = first; k < nk; k++) {
            uint64_t id = roi_index_chunk_id(t->index, k);
            child_name(ns, ns->ndim, id, name, sizeof name);
            make_chunk_node(ns, ns->ndim, id, &n);
            if (emit(ctx, name, n.ino, false, 16 + k + 1))
                return 0;
        }
        return 0;
    }
    uint64_t nchild = ns->nested ? t->grid[d] : t->nchunks;
    int cd = ns->nested ? d + 1 : ns->ndim;
    for (uint64_t j = first; j < nchild; j++) {
        uint64_t cp = ns->nested ? p * t->grid[d] + j : j;
        if (!prefix_present(ns, cd, cp))
            continue;
        child_name(ns, cd, cp, name, sizeof name);
        make_chunk_node(ns, cd, cp, &n);
        if (emit(ctx, name, n.ino, cd < ns->ndim, 16 + j + 1))
            return 0;
    }
    return 0;
}

/* The .roifs directory: ".", ".." and the status file. */
static int list_roifs_dir(uint64_t off, ns_emit emit, void *ctx)
{
    static const char *const names[] = {".", "..", "status"};
    static const uint64_t inos[] = {NS_INO_ROIFS, NS_INO_ROOT, NS_INO_STATUS};
    for (uint64_t i = off; i < 3; i++)
        if (emit(ctx, names[i], inos[i], i < 2, i + 1))
            return 0;
    return 0;
}

static int arr_readdir(const struct ns *ns, uint64_t ino, uint64_t off, ns_emit emit, void *ctx)
{
    struct ns_node dir;
    if (arr_get(ns, ino, &dir) < 0)
        return -ENOENT;
    if (dir.kind != NS_DIR)
        return -ENOTDIR;
    static const char *const root_names[] = {".", "..", ".zarray", ".zattrs", ".roifs"};
    static const uint64_t root_inos[] = {NS_INO_ROOT, NS_INO_ROOT, NS_INO_ZARRAY, NS_INO_ZATTRS,
                                         NS_INO_ROIFS};
    static const char *const v3_names[] = {".", "..", "zarr.json", ".roifs", "c"};
    static const uint64_t v3_inos[] = {NS_INO_ROOT, NS_INO_ROOT, NS_INO_ZARRAY, NS_INO_ROIFS,
                                       NS_INO_CDIR};
    if (ino == NS_INO_ROIFS)
        return list_roifs_dir(off, emit, ctx);
    if (ino == NS_INO_ROOT && ns->v3) {
        /* "c" is listed when the chunks are nested under it, else the flat keys c.0.1 */
        uint64_t nfixed = ns->nested ? 5 : 4;
        for (uint64_t i = off; i < nfixed; i++)
            if (emit(ctx, v3_names[i], v3_inos[i], i != 2, i + 1))
                return 0;
        return ns->nested ? 0 : list_children(ns, 0, 0, off < 16 ? 16 : off, emit, ctx);
    }
    if (ino == NS_INO_ROOT) {
        for (uint64_t i = off; i < 5; i++)
            if (emit(ctx, root_names[i], root_inos[i], i != 2 && i != 3, i + 1))
                return 0;
        return list_children(ns, 0, 0, off < 16 ? 16 : off, emit, ctx);
    }
    if (off < 2) {
        if (off == 0 && emit(ctx, ".", ino, true, 1))
            return 0;
        uint64_t parent =
            ino == NS_INO_CDIR || !(ns->v3 && dir.depth == 1) ? NS_INO_ROOT : NS_INO_CDIR;
        if (emit(ctx, "..", parent, true, 2))
            return 0;
    }
    return list_children(ns, dir.depth, dir.prefix, off < 16 ? 16 : off, emit, ctx);
}

/* ---- [output] ome: the image group over the levels' array trees ---- */

#define LEVEL_MASK ((UINT64_C(1) << NS_LEVEL_SHIFT) - 1)

void ns_init(struct ns *ns, const struct task *t)
{
    arr_init(ns, t);
    ns->nlevels = t->nlevels > 1 ? t->nlevels : 0;
}

/* The array tree of the level inode ino belongs to: false for the group's own inodes. */
static bool level_of(const struct ns *ns, uint64_t ino, struct ns *sub, int *level, uint64_t *local)
{
    uint64_t l = ino >> NS_LEVEL_SHIFT;
    if (l == 0 || l > (uint64_t)ns->nlevels)
        return false;
    *level = (int)l - 1;
    *local = ino & LEVEL_MASK;
    arr_init(sub, ns->t->levels[*level]);
    return true;
}

static uint64_t level_ino(int level, uint64_t local)
{
    return ((uint64_t)(level + 1) << NS_LEVEL_SHIFT) | local;
}

uint64_t ns_chunk_ino(const struct ns *ns, int level, uint64_t id)
{
    if (ns->nlevels == 0)
        return NS_INO_CHUNKS + ns->base[ns->ndim] + id;
    struct ns sub;
    arr_init(&sub, ns->t->levels[level]);
    return level_ino(level, NS_INO_CHUNKS + sub.base[sub.ndim] + id);
}

static void group_fixed(const struct ns *ns, uint64_t ino, struct ns_node *out)
{
    memset(out, 0, sizeof *out);
    out->ino = ino;
    out->kind = NS_DIR;
    if (ino == NS_INO_ZARRAY || ino == NS_INO_ZATTRS) {
        out->kind = NS_META;
        out->text = ino == NS_INO_ZARRAY ? ns->t->group_meta_json : ns->t->group_zattrs_json;
        out->len = strlen(out->text);
    } else if (ino == NS_INO_STATUS) {
        out->kind = NS_STATUS;
    }
}

/* A node of level `level`'s tree: its inode moved into the level's range. */
static int level_node(int r, int level, struct ns_node *out)
{
    if (r == 0) {
        out->ino = level_ino(level, out->ino);
        out->level = level;
    }
    return r;
}

int ns_get(const struct ns *ns, uint64_t ino, struct ns_node *out)
{
    if (!ns->nlevels)
        return arr_get(ns, ino, out);
    struct ns sub;
    int level;
    uint64_t local;
    if (level_of(ns, ino, &sub, &level, &local)) {
        if (local == NS_INO_ROIFS || local == NS_INO_STATUS)
            return -ENOENT; /* .roifs is only at the top */
        return level_node(arr_get(&sub, local, out), level, out);
    }
    if (ino < NS_INO_ROOT || ino > NS_INO_STATUS || (ino == NS_INO_ZATTRS && ns->v3))
        return -ENOENT;
    group_fixed(ns, ino, out);
    return 0;
}

int ns_lookup(const struct ns *ns, uint64_t parent, const char *name, struct ns_node *out)
{
    if (!ns->nlevels)
        return arr_lookup(ns, parent, name, out);
    struct ns sub;
    int level;
    uint64_t local;
    if (level_of(ns, parent, &sub, &level, &local)) {
        if (local == NS_INO_ROOT && strcmp(name, ".roifs") == 0)
            return -ENOENT;
        return level_node(arr_lookup(&sub, local, name, out), level, out);
    }
    struct ns_node dir;
    if (ns_get(ns, parent, &dir) < 0)
        return -ENOENT;
    if (dir.kind != NS_DIR)
        return -ENOTDIR;
    if (parent == NS_INO_ROIFS) {
        if (strcmp(name, "status") != 0)
            return -ENOENT;
        group_fixed(ns, NS_INO_STATUS, out);
        return 0;
    }
    uint64_t v;
    if (strcmp(name, ns->v3 ? "zarr.json" : ".zgroup") == 0)
        group_fixed(ns, NS_INO_ZARRAY, out);
    else if (!ns->v3 && strcmp(name, ".zattrs") == 0)
        group_fixed(ns, NS_INO_ZATTRS, out);
    else if (strcmp(name, ".roifs") == 0)
        group_fixed(ns, NS_INO_ROIFS, out);
    else if (parse_index(name, strlen(name), (uint64_t)ns->nlevels, &v)) {
        arr_init(&sub, ns->t->levels[v]);
        return level_node(arr_get(&sub, NS_INO_ROOT, out), (int)v, out);
    } else
        return -ENOENT;
    return 0;
}

struct level_emit {
    ns_emit emit;
    void *ctx;
    int level;
    bool root;
};

static int level_emit_fn(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next_off)
{
    struct level_emit *le = ctx;
    if (le->root && strcmp(name, ".roifs") == 0)
        return 0;
    if (le->root && strcmp(name, "..") == 0)
        return le->emit(le->ctx, name, NS_INO_ROOT, is_dir, next_off);
    return le->emit(le->ctx, name, level_ino(le->level, ino), is_dir, next_off);
}

int ns_readdir(const struct ns *ns, uint64_t ino, uint64_t off, ns_emit emit, void *ctx)
{
    if (!ns->nlevels)
        return arr_readdir(ns, ino, off, emit, ctx);
    struct ns sub;
    int level;
    uint64_t local;
    if (level_of(ns, ino, &sub, &level, &local)) {
        struct level_emit le = {emit, ctx, level, local == NS_INO_ROOT};
        return arr_readdir(&sub, local, off, level_emit_fn, &le);
    }
    struct ns_node dir;
    if (ns_get(ns, ino, &dir) < 0)
        return -ENOENT;
    if (dir.kind != NS_DIR)
        return -ENOTDIR;
    if (ino == NS_INO_ROIFS)
        return list_roifs_dir(off, emit, ctx);
    /* ".", "..", the group metadata, .roifs, then the levels "0".. */
    const char *names[4] = {".", "..", ns->v3 ? "zarr.json" : ".zgroup", ".zattrs"};
    uint64_t inos[4] = {NS_INO_ROOT, NS_INO_ROOT, NS_INO_ZARRAY, NS_INO_ZATTRS};
    uint64_t nfixed = ns->v3 ? 3 : 4;
    for (uint64_t i = off; i < nfixed; i++)
        if (emit(ctx, names[i], inos[i], i < 2, i + 1))
            return 0;
    if (off <= nfixed && emit(ctx, ".roifs", NS_INO_ROIFS, true, nfixed + 1))
        return 0;
    uint64_t first = off > nfixed + 1 ? off - nfixed - 1 : 0;
    for (uint64_t l = first; l < (uint64_t)ns->nlevels; l++) {
        char name[24];
        snprintf(name, sizeof name, "%llu", (unsigned long long)l);
        if (emit(ctx, name, level_ino((int)l, NS_INO_ROOT), true, nfixed + 2 + l))
            return 0;
    }
    return 0;
}
