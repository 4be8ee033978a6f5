/* codec.c: the Zarr v2 compressors (blosc, zlib, gzip, zstd): encode, exact-size decode that
 * never trusts its input, predictable encoded sizes, and their .zarray JSON form. */
#include "zarr.h"

#include <blosc.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static const char *codec_name(enum zarr_codec_id id)
{
    switch (id) {
    case ZC_NONE:
        return "none";
    case ZC_BLOSC:
        return "blosc";
    case ZC_ZLIB:
        return "zlib";
    case ZC_GZIP:
        return "gzip";
    case ZC_ZSTD:
        return "zstd";
    }
    return "?";
}

static int wrong_size(struct errbuf *err, const char *codec, size_t got, size_t want)
{
    return err_set(err, -EIO, "%s: decoded %zu bytes, expected %zu", codec, got, want);
}

/* Blosc's shuffle code for c->shuffle, resolving -1 (auto) as numcodecs does. */
static int blosc_shuffle(const struct zarr_codec *c, unsigned typesize)
{
    if (c->shuffle == -1)
        return typesize == 1 ? BLOSC_BITSHUFFLE : BLOSC_SHUFFLE;
    return c->shuffle;
}

/* ---- decode ---- */

static int blosc_decode(const void *src, size_t src_len, void *dst, size_t dst_len,
                        struct errbuf *err)
{
    if (src_len < BLOSC_MIN_HEADER_LENGTH)
        return err_set(err, -EIO, "blosc: truncated header (%zu bytes)", src_len);
    size_t nbytes, cbytes, blocksize;
    blosc_cbuffer_sizes(src, &nbytes, &cbytes, &blocksize);
    if (cbytes < BLOSC_MIN_HEADER_LENGTH)
        return err_set(err, -EIO, "blosc: not a blosc frame (bad header)");
    if (cbytes > src_len)
        return err_set(err, -EIO, "blosc: frame of %zu bytes truncated to %zu", cbytes, src_len);
    if (nbytes != dst_len)
        return wrong_size(err, "blosc", nbytes, dst_len);
    /* Trailing bytes after the frame are tolerated: validate the frame itself. */
    size_t nb;
    if (blosc_cbuffer_validate(src, cbytes, &nb) < 0 || nb != dst_len)
        return err_set(err, -EIO, "blosc: corrupt frame header");
    if (dst_len == 0)
        return 0;
    int r = blosc_decompress_ctx(src, dst, dst_len, 1);
    if (r <= 0 || (size_t)r != dst_len)
        return err_set(err, -EIO, "blosc: corrupt data (decompression failed: %d)", r);
    return 0;
}

static size_t min_sz(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Starts a zlib (gzip: a gzip) decoder on zs. */
static int inflate_start(z_stream *zs, bool gzip, const char *name, struct errbuf *err)
{
    memset(zs, 0, sizeof *zs);
    if (inflateInit2(zs, gzip ? 15 + 16 : 15) != Z_OK)
        return err_set(err, -ENOMEM, "%s: cannot initialise the decoder", name);
    return 0;
}

/* One inflate call from *in (*in_left bytes; both advanced past what it used) into out (room
 * for avail bytes): zlib's result, with the bytes used and made. */
static int inflate_step(z_stream *zs, const unsigned char **in, size_t *in_left, unsigned char *out,
                        size_t avail, size_t *used, size_t *made)
{
    zs->next_in = (unsigned char *)*in;
    zs->avail_in = (uInt)min_sz(*in_left, UINT_MAX);
    zs->next_out = out;
    zs->avail_out = (uInt)min_sz(avail, UINT_MAX);
    uInt ai = zs->avail_in, ao = zs->avail_out;
    int zr = inflate(zs, Z_NO_FLUSH);
    *used = ai - zs->avail_in;
    *made = ao - zs->avail_out;
    *in += *used;
    *in_left -= *used;
    return zr;
}

/* The error that inflate's result zr (not Z_STREAM_END) means, or 0 to go on; stuck: the call
 * used and made nothing although there was room for output (the input ended early). */
static int inflate_fault(const z_stream *zs, int zr, bool stuck, const char *name,
                         struct errbuf *err)
{
    if (zr == Z_BUF_ERROR && stuck)
        return err_set(err, -EIO, "%s: truncated stream", name);
    if (zr != Z_OK && zr != Z_BUF_ERROR)
        return err_set(err, -EIO, "%s: corrupt stream (%s)", name, zs->msg ? zs->msg : "error");
    return 0;
}

/* Inflates src into exactly dst_len bytes. Gzip input may hold several members. */
static int inflate_exact(const void *src, size_t src_len, void *dst, size_t dst_len, bool gzip,
                         struct errbuf *err)
{
    const char *name = gzip ? "gzip" : "zlib";
    z_stream zs;
    int r = inflate_start(&zs, gzip, name, err);
    if (r < 0)
        return r;
    const unsigned char *in = src;
    unsigned char *out = dst, spill[16];
    size_t in_left = src_len, out_left = dst_len, used, made;
    for (;;) {
        int zr = inflate_step(&zs, &in, &in_left, out_left ? out : spill,
                              out_left ? out_left : sizeof spill, &used, &made);
        if (!out_left && made) {
            r = err_set(err, -EIO, "%s: decoded more than %zu bytes, expected %zu", name, dst_len,
                        dst_len);
            break;
        }
        out += made;
        out_left -= made;
        if (zr == Z_STREAM_END) {
            if (gzip && in_left > 0 && inflateReset(&zs) == Z_OK)
                continue; /* another gzip member follows */
            if (out_left)
                r = wrong_size(err, name, dst_len - out_left, dst_len);
            break;
        }
        if ((r = inflate_fault(&zs, zr, !used && !made, name, err)) < 0)
            break;
    }
    inflateEnd(&zs);
    return r;
}

/* Streaming decode for frames without a content size (or of unknown total size). */
static int zstd_decode_stream(const void *src, size_t src_len, void *dst, size_t dst_len,
                              struct errbuf *err)
{
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    if (!dc)
        return err_set(err, -ENOMEM, "zstd: cannot create a decoder");
    unsigned char spill[16];
    ZSTD_inBuffer in = {src, src_len, 0};
    ZSTD_outBuffer out = {dst, dst_len, 0}, sp = {spill, sizeof spill, 0};
    int r = 0;
    for (;;) {
        ZSTD_outBuffer *o = out.pos < out.size ? &out : &sp;
        size_t ip = in.pos, op = o->pos;
        size_t z = ZSTD_decompressStream(dc, o, &in);
        if (ZSTD_isError(z)) {
            r = err_set(err, -EIO, "zstd: corrupt stream (%s)", ZSTD_getErrorName(z));
            break;
        }
        if (sp.pos) {
            r = err_set(err, -EIO, "zstd: decoded more than %zu bytes, expected %zu", dst_len,
                        dst_len);
            break;
        }
        if (z == 0 && in.pos == in.size)
            break; /* the last frame is complete and flushed */
        if (in.pos == ip && o->pos == op) {
            r = err_set(err, -EIO, "zstd: truncated stream");
            break;
        }
    }
    ZSTD_freeDCtx(dc);
    if (r == 0 && out.pos != dst_len)
        r = wrong_size(err, "zstd", out.pos, dst_len);
    return r;
}

/* Total content size of the concatenated frames in src, as ZSTD_findDecompressedSize (not in
 * zstd's stable API) would report it. */
static unsigned long long zstd_total_size(const void *src, size_t src_len)
{
    const char *p = src;
    unsigned long long total = 0;
    while (src_len > 0) {
        unsigned long long fs = ZSTD_getFrameContentSize(p, src_len);
        if (fs == ZSTD_CONTENTSIZE_ERROR || fs == ZSTD_CONTENTSIZE_UNKNOWN)
            return fs;
        size_t csize = ZSTD_findFrameCompressedSize(p, src_len);
        if (ZSTD_isError(csize) || csize > src_len || total + fs < total)
            return ZSTD_CONTENTSIZE_ERROR;
        total += fs;
        p += csize;
        src_len -= csize;
    }
    return total;
}

static int zstd_decode(const void *src, size_t src_len, void *dst, size_t dst_len,
                       struct errbuf *err)
{
    unsigned long long total = zstd_total_size(src, src_len);
    if (total == ZSTD_CONTENTSIZE_ERROR)
        return err_set(err, -EIO, "zstd: corrupt or truncated stream");
    if (total == ZSTD_CONTENTSIZE_UNKNOWN)
        return zstd_decode_stream(src, src_len, dst, dst_len, err);
    if (total != dst_len)
        return wrong_size(err, "zstd", (size_t)total, dst_len);
    size_t z = ZSTD_decompress(dst, dst_len, src, src_len);
    if (ZSTD_isError(z))
        return err_set(err, -EIO, "zstd: corrupt stream (%s)", ZSTD_getErrorName(z));
    if (z != dst_len)
        return wrong_size(err, "zstd", z, dst_len);
    return 0;
}

int zarr_codec_decode(const struct zarr_codec *c, const void *src, size_t src_len, void *dst,
                      size_t dst_len, unsigned typesize, struct errbuf *err)
{
    (void)typesize; /* every supported format records what it needs in its own header */
    switch (c->id) {
    case ZC_NONE:
        if (src_len != dst_len)
            return wrong_size(err, "uncompressed chunk", src_len, dst_len);
        memcpy(dst, src, dst_len);
        return 0;
    case ZC_BLOSC:
        return blosc_decode(src, src_len, dst, dst_len, err);
    case ZC_ZLIB:
        return inflate_exact(src, src_len, dst, dst_len, false, err);
    case ZC_GZIP:
        return inflate_exact(src, src_len, dst, dst_len, true, err);
    case ZC_ZSTD:
        return zstd_decode(src, src_len, dst, dst_len, err);
    }
    return err_set(err, -EINVAL, "unknown codec %d", (int)c->id);
}

/* Inflates src into a buffer grown as needed, up to max_len bytes. */
static int inflate_alloc(const void *src, size_t src_len, bool gzip, size_t max_len, void **out,
                         size_t *out_len, struct errbuf *err)
{
    const char *name = gzip ? "gzip" : "zlib";
    z_stream zs;
    int r = inflate_start(&zs, gzip, name, err);
    if (r < 0)
        return r;
    size_t cap = src_len * 4 + 64, len = 0;
    unsigned char *buf = xmalloc(cap);
    const unsigned char *in = src;
    size_t in_left = src_len, used, made;
    for (;;) {
        if (len == cap) {
            if (cap >= max_len) {
                r = err_set(err, -EIO, "%s: decodes to more than %zu bytes", name, max_len);
                break;
            }
            cap = cap * 2 > max_len ? max_len : cap * 2;
            buf = xrealloc(buf, cap);
        }
        int zr = inflate_step(&zs, &in, &in_left, buf + len, cap - len, &used, &made);
        len += made;
        if (zr == Z_STREAM_END) {
            if (gzip && in_left > 0 && inflateReset(&zs) == Z_OK)
                continue;
            break;
        }
        if ((r = inflate_fault(&zs, zr, !used && !made && len < cap, name, err)) < 0)
            break;
    }
    inflateEnd(&zs);
    if (r < 0) {
        free(buf);
        return r;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

int zarr_codec_decode_alloc(const struct zarr_codec *c, const void *src, size_t src_len,
                            size_t max_len, void **out, size_t *out_len, struct errbuf *err)
{
    size_t n = 0;
    switch (c->id) {
    case ZC_NONE:
        n = src_len;
        break;
    case ZC_BLOSC: {
        if (src_len < BLOSC_MIN_HEADER_LENGTH)
            return err_set(err, -EIO, "blosc: truncated header (%zu bytes)", src_len);
        size_t cbytes, blocksize;
        blosc_cbuffer_sizes(src, &n, &cbytes, &blocksize);
        break;
    }
    case ZC_ZSTD: {
        unsigned long long total = zstd_total_size(src, src_len);
        if (total == ZSTD_CONTENTSIZE_ERROR || total == ZSTD_CONTENTSIZE_UNKNOWN)
            return err_set(err, -EIO, "zstd: corrupt stream or unknown content size");
        n = (size_t)total;
        break;
    }
    case ZC_ZLIB:
    case ZC_GZIP:
        return inflate_alloc(src, src_len, c->id == ZC_GZIP, max_len, out, out_len, err);
    }
    if (n > max_len)
        return err_set(err, -EIO, "%s: decodes to %zu bytes, more than %zu", codec_name(c->id), n,
                       max_len);
    void *buf = xmalloc(n ? n : 1);
    int r = zarr_codec_decode(c, src, src_len, buf, n, 1, err);
    if (r < 0) {
        free(buf);
        return r;
    }
    *out = buf;
    *out_len = n;
    return 0;
}

/* ---- encode ---- */

static int blosc_encode(const struct zarr_codec *c, const void *src, size_t len, unsigned typesize,
                        void **out, size_t *out_len, struct errbuf *err)
{
    if (len > BLOSC_MAX_BUFFERSIZE)
        return err_set(err, -EIO, "blosc: cannot compress %zu bytes (limit %d)", len,
                       BLOSC_MAX_BUFFERSIZE);
    size_t cap = len + BLOSC_MAX_OVERHEAD;
    void *buf = xmalloc(cap);
    size_t ts = typesize >= 1 && typesize <= 255 ? typesize : 1;
    int r = blosc_compress_ctx(c->level, blosc_shuffle(c, typesize), ts, len, src, buf, cap,
                               c->cname[0] ? c->cname : "lz4", (size_t)c->blocksize, 1);
    if (r <= 0) {
        free(buf);
        return err_set(err, -EIO, "blosc: compression with \"%s\" failed (%d)", c->cname, r);
    }
    *out = buf;
    *out_len = (size_t)r;
    return 0;
}

static int deflate_all(const struct zarr_codec *c, const void *src, size_t len, bool gzip,
                       void **out, size_t *out_len, struct errbuf *err)
{
    const char *name = gzip ? "gzip" : "zlib";
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, c->level, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return err_set(err, -EIO, "%s: bad compression level %d", name, c->level);
    /* deflateBound covers one call; add slack for the extra blocks of split calls */
    size_t cap = deflateBound(&zs, (uLong)min_sz(len, ULONG_MAX)) + 64 + len / 1000;
    unsigned char *buf = xmalloc(cap);
    const unsigned char *in = src;
    size_t in_left = len, done = 0;
    int zr = Z_OK;
    do {
        if (cap - done < 1024 || zr == Z_BUF_ERROR) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        zs.next_in = (unsigned char *)in;
        zs.avail_in = (uInt)min_sz(in_left, UINT_MAX);
        zs.next_out = buf + done;
        zs.avail_out = (uInt)min_sz(cap - done, UINT_MAX);
        uInt ai = zs.avail_in, ao = zs.avail_out;
        zr = deflate(&zs, in_left == ai ? Z_FINISH : Z_NO_FLUSH);
        in += ai - zs.avail_in;
        in_left -= ai - zs.avail_in;
        done += ao - zs.avail_out;
    } while (zr == Z_OK || zr == Z_BUF_ERROR);
    deflateEnd(&zs);
    if (zr != Z_STREAM_END) {
        free(buf);
        return err_set(err, -EIO, "%s: compression failed (%d)", name, zr);
    }
    *out = buf;
    *out_len = done;
    return 0;
}

static int zstd_encode(const struct zarr_codec *c, const void *src, size_t len, void **out,
                       size_t *out_len, struct errbuf *err)
{
    size_t cap = ZSTD_compressBound(len);
    void *buf = xmalloc(cap);
    size_t z = ZSTD_compress(buf, cap, src, len, c->level);
    if (ZSTD_isError(z)) {
        free(buf);
        return err_set(err, -EIO, "zstd: compression failed (%s)", ZSTD_getErrorName(z));
    }
    *out = buf;
    *out_len = z;
    return 0;
}

int zarr_codec_encode(const struct zarr_codec *c, const void *src, size_t len, unsigned typesize,
                      void **out, size_t *out_len, struct errbuf *err)
{
    switch (c->id) {
    case ZC_NONE:
        *out = xmalloc(len);
        memcpy(*out, src, len);
        *out_len = len;
        return 0;
    case ZC_BLOSC:
        return blosc_encode(c, src, len, typesize, out, out_len, err);
    case ZC_ZLIB:
        return deflate_all(c, src, len, false, out, out_len, err);
    case ZC_GZIP:
        return deflate_all(c, src, len, true, out, out_len, err);
    case ZC_ZSTD:
        return zstd_encode(c, src, len, out, out_len, err);
    }
    return err_set(err, -EINVAL, "unknown codec %d", (int)c->id);
}

int64_t zarr_codec_fixed_size(const struct zarr_codec *c, size_t raw_len)
{
    if (c->id == ZC_NONE)
        return (int64_t)raw_len;
    /* clevel 0 makes blosc store the bytes verbatim after its 16-byte header */
    if (c->id == ZC_BLOSC && c->level == 0 && raw_len <= BLOSC_MAX_BUFFERSIZE)
        return (int64_t)raw_len + BLOSC_MAX_OVERHEAD;
    return -1;
}

/* a + b, or UINT64_MAX when that overflows */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

uint64_t zarr_codec_size_bound(const struct zarr_codec *c, uint64_t raw_len)
{
    switch (c->id) {
    case ZC_NONE:
        return raw_len;
    case ZC_BLOSC: /* what blosc_encode allocates, and blosc guarantees to fit in */
        return add_sat(raw_len, BLOSC_MAX_OVERHEAD);
    case ZC_ZSTD:
        return raw_len > SIZE_MAX / 2 ? UINT64_MAX : ZSTD_compressBound((size_t)raw_len);
    case ZC_ZLIB:
    case ZC_GZIP: {
        /* deflateBound of a stream set up as deflate_all does, plus the slack deflate_all
         * allows itself for input split over several calls */
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (raw_len > ULONG_MAX / 2 ||
            deflateInit2(&zs, c->level, Z_DEFLATED, c->id == ZC_GZIP ? 15 + 16 : 15, 8,
                         Z_DEFAULT_STRATEGY) != Z_OK)
            return UINT64_MAX;
        uint64_t b = deflateBound(&zs, (uLong)raw_len);
        deflateEnd(&zs);
        return add_sat(b, 64 + raw_len / 1000);
    }
    }
    return UINT64_MAX;
}

void *zarr_codec_to_json(const struct zarr_codec *c, unsigned typesize)
{
    json_t *o;
    switch (c->id) {
    case ZC_NONE:
        return NULL;
    case ZC_BLOSC:
        o = json_object();
        json_object_set_new(o, "id", json_string("blosc"));
        json_object_set_new(o, "cname", json_string(c->cname[0] ? c->cname : "lz4"));
        json_object_set_new(o, "clevel", json_integer(c->level));
        json_object_set_new(o, "shuffle", json_integer(blosc_shuffle(c, typesize)));
        json_object_set_new(o, "blocksize", json_integer(c->blocksize));
        return o;
    case ZC_ZLIB:
    case ZC_GZIP:
    case ZC_ZSTD:
        /* numcodecs 0.11 rejects a "checksum" member for zstd, so none is written */
        o = json_object();
        json_object_set_new(o, "id", json_string(codec_name(c->id)));
        json_object_set_new(o, "level", json_integer(c->level));
        return o;
    }
    return NULL;
}
