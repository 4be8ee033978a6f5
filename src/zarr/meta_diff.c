/* meta_diff.c: whether two metadata of an array describe the same layout (what decides how
 * its chunks are read), and if not, what differs: a metadata file rewritten under a mount
 * ([input] watch) and an input directory replaced by another (input_dir.c) both ask. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zarr.h"

static void dims_text(const uint64_t *v, int n, char *buf, size_t len)
{
    size_t pos = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < n && pos < len; d++)
        pos += (size_t)snprintf(buf + pos, len - pos, "%s%llu", d ? ", " : "",
                                (unsigned long long)v[d]);
    if (pos < len)
        snprintf(buf + pos, len - pos, "]");
}

int zarr_meta_difference(const struct zarr_meta *a, const struct zarr_meta *b, struct errbuf *err)
{
    char x[256], y[256];
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(uint64_t) * a->ndim)) {
        dims_text(a->shape, a->ndim, x, sizeof x);
        dims_text(b->shape, b->ndim, y, sizeof y);
        return err_set(err, -EINVAL, "its shape changed from %s to %s", x, y);
    }
    if (memcmp(a->chunks, b->chunks, sizeof(uint64_t) * a->ndim)) {
        dims_text(a->chunks, a->ndim, x, sizeof x);
        dims_text(b->chunks, b->ndim, y, sizeof y);
        return err_set(err, -EINVAL, "its chunks changed from %s to %s", x, y);
    }
    char da[8], db[8];
    if (a->dtype.kind != b->dtype.kind || a->dtype.size != b->dtype.size ||
        a->dtype.big_endian != b->dtype.big_endian)
        return err_set(err, -EINVAL, "its dtype changed from %s to %s",
                       dtype_typestr(&a->dtype, da), dtype_typestr(&b->dtype, db));
    char *ea = a->format == 3 ? zarr_meta_emit_v3(a, NULL, NULL) : zarr_meta_emit_v2(a);
    char *eb = b->format == 3 ? zarr_meta_emit_v3(b, NULL, NULL) : zarr_meta_emit_v2(b);
    bool same = a->format == b->format && strcmp(ea, eb) == 0 &&
                a->fortran_order == b->fortran_order && a->fill_null == b->fill_null;
    free(ea);
    free(eb);
    return same ? 0
                : err_set(err, -EINVAL,
                          "its encoding changed (codecs, fill value, order or chunk keys)");
}
