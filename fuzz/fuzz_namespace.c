/* fuzz_namespace.c: libFuzzer harness for the chunk-name parser of the mounted tree
 * (ns_lookup, ns_get, ns_readdir in src/tree/namespace.c). Input layout: one byte of ndim - 1
 * (modulo 4), one byte of flags (bit 0: separator "/", bit 1: outside = input, bits 2-4:
 * number of ROIs), one byte per dimension of chunk grid extent - 1 (modulo 16), 2 * ndim bytes
 * per ROI (start and length in chunks), then a path below the mount point. A name must resolve
 * only in canonical form: the accepted path must be exactly the chunk key of what it names. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tree/namespace.h"
#include "nd.h"

#define FUZZ_NAME "fuzz_namespace"
#include "fuzz.h"

#define CHUNK 3 /* elements per chunk along every dimension */

struct listing {
    const struct ns *ns;
    uint64_t dir;
    int n;
};

/* Every name readdir lists must look up to the inode it was listed with. */
static int check_entry(void *ctx, const char *name, uint64_t ino, bool is_dir, uint64_t next)
{
    struct listing *l = ctx;
    (void)next;
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0) {
        struct ns_node n;
        int r = ns_lookup(l->ns, l->dir, name, &n);
        FUZZ_ASSERT(r == 0 && n.ino == ino, "listed '%s' does not look up (%d)", name, r);
        FUZZ_ASSERT((n.kind == NS_DIR) == is_dir, "'%s' listed with the wrong type", name);
    }
    return ++l->n >= 64; /* enough: stop like a full buffer would */
}

/* The chunk key ("1.0.2" or "1/0/2") of chunk id in the task's grid. */
static void canonical_key(const struct task *t, uint64_t id, char *buf, size_t len)
{
    uint64_t idx[ROIFS_MAX_DIM];
    nd_unlinear(id, t->grid, t->out.ndim, idx);
    zarr_meta_chunk_key(&t->out, idx, buf, len);
}

static void walk(const struct ns *ns, const struct task *t, const char *path)
{
    uint64_t dir = NS_INO_ROOT;
    char copy[2048];
    snprintf(copy, sizeof copy, "%s", path);
    char *save = NULL, joined[4096] = "";
    size_t jlen = 0;
    struct ns_node n = {.kind = NS_DIR, .ino = NS_INO_ROOT};
    bool chunk_path = true; /* only chunk names (no .zarray, .roifs) so far */
    /* components as the kernel passes them: no empty ones */
    for (char *name = strtok_r(copy, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
        jlen +=
            (size_t)snprintf(joined + jlen, sizeof joined - jlen, "%s%s", jlen ? "/" : "", name);
        int r = ns_lookup(ns, dir, name, &n);
        if (r < 0) {
            FUZZ_ASSERT(r == -ENOENT || r == -ENOTDIR, "lookup returned %d", r);
            return;
        }
        if (n.kind == NS_META || n.kind == NS_STATUS || strcmp(name, ".roifs") == 0)
            chunk_path = false;
        struct ns_node again;
        FUZZ_ASSERT(ns_get(ns, n.ino, &again) == 0 && again.ino == n.ino && again.kind == n.kind &&
                        again.depth == n.depth && again.path_index == n.path_index,
                    "ns_get(%llu) disagrees with the lookup of '%s'", (unsigned long long)n.ino,
                    name);
        dir = n.ino;
    }
    if (n.kind == NS_CHUNK) {
        FUZZ_ASSERT(chunk_path && n.depth == t->out.ndim, "chunk at depth %d", n.depth);
        FUZZ_ASSERT(task_chunk_present(t, n.chunk), "absent chunk %llu resolved",
                    (unsigned long long)n.chunk);
        char key[32 * ROIFS_MAX_DIM];
        canonical_key(t, n.chunk, key, sizeof key);
        FUZZ_ASSERT(strcmp(joined, key) == 0, "'%s' resolved to chunk '%s'", joined, key);
    }
    if (n.kind == NS_DIR) {
        struct listing l = {ns, dir, 0};
        FUZZ_ASSERT(ns_readdir(ns, dir, 0, NULL, check_entry, &l) == 0, "readdir");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int ndim = 1 + data[0] % 4, nrois = (data[1] >> 2) % 8;
    size_t need = 2 + (size_t)ndim + (size_t)nrois * 2 * (size_t)ndim;
    if (size < need)
        return 0;
    static char zarray[] = "{}", zattrs[] = "{}";
    struct task t;
    memset(&t, 0, sizeof t);
    t.out.ndim = ndim;
    t.out.separator = data[1] & 1 ? '/' : '.';
    t.out.dtype.kind = DT_UINT;
    t.out.dtype.size = 1;
    t.outside = data[1] & 2 ? OUTSIDE_INPUT : OUTSIDE_FILL;
    t.zarray_json = zarray;
    t.zattrs_json = zattrs;
    uint64_t shape[ROIFS_MAX_DIM];
    t.nchunks = 1;
    for (int d = 0; d < ndim; d++) {
        t.grid[d] = 1 + data[2 + d] % 16;
        t.out.chunks[d] = CHUNK;
        t.out.shape[d] = shape[d] = t.grid[d] * CHUNK - 1; /* a partial edge chunk */
        t.nchunks *= t.grid[d];
    }
    /* ROIs in whole chunks, clipped to the grid; at least one so that the index is not empty */
    uint64_t start[8 * ROIFS_MAX_DIM], stop[8 * ROIFS_MAX_DIM];
    struct roi_set rs = {
        .ndim = ndim, .n = nrois ? (size_t)nrois : 1, .start = start, .stop = stop};
    const uint8_t *p = data + 2 + ndim;
    for (size_t i = 0; i < rs.n; i++)
        for (int d = 0; d < ndim; d++) {
            uint64_t a = nrois ? p[0] % t.grid[d] : 0, len = nrois ? 1 + p[1] % 4 : 1;
            uint64_t b = a + len > t.grid[d] ? t.grid[d] : a + len;
            start[i * (size_t)ndim + d] = a * CHUNK;
            stop[i * (size_t)ndim + d] = b * CHUNK < shape[d] ? b * CHUNK : shape[d];
            if (nrois)
                p += 2;
        }
    struct errbuf err;
    FUZZ_ASSERT(roi_index_build(&rs, shape, t.out.chunks, &t.index, &err) == 0, "%s", err.msg);

    /* the tree of a mount of one array, as the array set builds it */
    struct ns *ns = ns_new();
    ns_add_file(ns, NS_ROOT, ".zarray", zarray);
    ns_add_file(ns, NS_ROOT, ".zattrs", zattrs);
    ns_add_status(ns, ns_add_dir(ns, NS_ROOT, ".roifs"), "status");
    FUZZ_ASSERT(ns_add_chunks(ns, NS_ROOT, &t, 0, &err) == 0, "%s", err.msg);
    size_t len = size - need;
    char *path = malloc(len + 1);
    memcpy(path, data + need, len);
    path[len] = '\0';
    walk(ns, &t, path);
    struct listing l = {ns, NS_INO_ROOT, 0};
    FUZZ_ASSERT(ns_readdir(ns, NS_INO_ROOT, 0, NULL, check_entry, &l) == 0, "readdir of the root");
    free(path);
    ns_free(ns);
    roi_index_free(t.index);
    return 0;
}
