/* roi.c: the ROI list (docs/configuration.md, ROI list file: text, or a regular grid) and the index
 * from output chunks to the ROIs touching them: (chunk, ROI) contacts sorted by a radix sort and
 * compacted into CSR. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "roi.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nd.h"

/* ---- the ROI list ---- */

struct roi_parser {
    const char *name;
    int ndim;
    const uint64_t *shape;
    struct roi_set *out;
    size_t cap;
    int line;
    unsigned flags; /* ROI_PARSE_* */
    struct errbuf *err;
};

static int parse_fail(struct roi_parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "NAME:LINE: message". */
static int parse_fail(struct roi_parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vat(p->err, -EINVAL, p->name, p->line, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Trims blanks from both ends of [*s, *e). */
static void trim(const char **s, const char **e)
{
    while (*s < *e && is_blank(**s))
        (*s)++;
    while (*e > *s && is_blank((*e)[-1]))
        (*e)--;
}

/* Parses the number [s, e) (already trimmed) of range k into *v. */
static int parse_index(struct roi_parser *p, int k, const char *s, const char *e, uint64_t *v)
{
    uint64_t x = 0;
    const char *c = s;
    for (; c < e && *c >= '0' && *c <= '9'; c++) {
        unsigned digit = (unsigned)(*c - '0');
        if (x > (UINT64_MAX - digit) / 10)
            return parse_fail(p, "range %d: '%.*s' is too large", k + 1, (int)(e - s), s);
        x = x * 10 + digit;
    }
    if (c == e) {
        *v = x;
        return 0;
    }
    if (*s == '-' && e - s > 1 && s[1] >= '0' && s[1] <= '9') {
        bool digits = true;
        for (c = s + 1; c < e; c++)
            digits = digits && *c >= '0' && *c <= '9';
        if (digits)
            return parse_fail(p, "range %d: '%.*s' is negative (indices start at 0)", k + 1,
                              (int)(e - s), s);
    }
    return parse_fail(p, "range %d: '%.*s' is not an integer", k + 1, (int)(e - s), s);
}

/* Parses range k, the text [s, e) between commas, into box[0..1]. An empty start means 0 and
 * an empty stop the extent of the dimension: besides the ':' of docs/configuration.md this accepts
 * the compatible 'start:' and ':stop'. Dimensions beyond the array's are checked for syntax only.
 */
static int parse_range(struct roi_parser *p, int k, const char *s, const char *e, uint64_t box[2],
                       bool open[2])
{
    trim(&s, &e);
    if (s == e)
        return parse_fail(p, "range %d is empty (expected start:stop)", k + 1);
    const char *colon = memchr(s, ':', (size_t)(e - s));
    if (!colon)
        return parse_fail(p, "range %d: expected start:stop, got '%.*s'", k + 1, (int)(e - s), s);
    const char *a0 = s, *a1 = colon, *b0 = colon + 1, *b1 = e;
    trim(&a0, &a1);
    trim(&b0, &b1);
    open[0] = a0 == a1;
    open[1] = b0 == b1;
    box[0] = box[1] = 0;
    if (!open[0] && parse_index(p, k, a0, a1, &box[0]) < 0)
        return -EINVAL;
    if (!open[1] && parse_index(p, k, b0, b1, &box[1]) < 0)
        return -EINVAL;
    return 0;
}

/* Checks range k against dimension k of the array, filling in open ends. */
static int check_range(struct roi_parser *p, int k, const char *s, const char *e, uint64_t box[2],
                       const bool open[2])
{
    uint64_t extent = p->shape[k];
    trim(&s, &e);
    if (open[0])
        box[0] = 0;
    if (open[1])
        box[1] = extent;
    if (!open[0] && !open[1] && box[0] >= box[1])
        return parse_fail(p, "range %d (%.*s): start %llu is not less than stop %llu", k + 1,
                          (int)(e - s), s, (unsigned long long)box[0], (unsigned long long)box[1]);
    if (box[1] > extent || (box[0] >= extent && extent > 0))
        return parse_fail(p, "range %d (%.*s) exceeds the extent %llu of dimension %d", k + 1,
                          (int)(e - s), s, (unsigned long long)extent, k + 1);
    if (box[0] >= box[1])
        return parse_fail(p, "range %d (%.*s) is empty", k + 1, (int)(e - s), s);
    return 0;
}

static void roi_set_push(struct roi_parser *p, const uint64_t *start, const uint64_t *stop,
                         uint64_t label)
{
    struct roi_set *rs = p->out;
    size_t nd = (size_t)p->ndim;
    if (rs->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        rs->start = xrealloc(rs->start, p->cap * nd * sizeof(uint64_t));
        rs->stop = xrealloc(rs->stop, p->cap * nd * sizeof(uint64_t));
        if (rs->label)
            rs->label = xrealloc(rs->label, p->cap * sizeof(uint64_t));
    }
    if (label && !rs->label) /* the first masked ROI: the ones before it have none */
        rs->label = xcalloc(p->cap, sizeof(uint64_t));
    memcpy(rs->start + rs->n * nd, start, nd * sizeof(uint64_t));
    memcpy(rs->stop + rs->n * nd, stop, nd * sizeof(uint64_t));
    if (rs->label)
        rs->label[rs->n] = label;
    rs->n++;
}

/* Parses the label of `RANGES @ LABEL`, the text [s, e) after the '@'. */
static int parse_label(struct roi_parser *p, const char *s, const char *e, uint64_t *label)
{
    trim(&s, &e);
    if (!(p->flags & ROI_PARSE_LABELS))
        return parse_fail(p, "a label (@ %.*s) needs [rois] mask (the label image)", (int)(e - s),
                          s);
    uint64_t x = 0;
    const char *c = s;
    for (; c < e && *c >= '0' && *c <= '9'; c++) {
        unsigned digit = (unsigned)(*c - '0');
        if (x > (UINT64_MAX - digit) / 10)
            return parse_fail(p, "label '%.*s' is too large", (int)(e - s), s);
        x = x * 10 + digit;
    }
    if (s == e)
        return parse_fail(p, "'@' without a label (expected @ LABEL, a positive integer)");
    if (c != e || *s == '-')
        return parse_fail(p, "label '%.*s' is not a positive integer", (int)(e - s), s);
    if (x == 0)
        return parse_fail(p, "label 0 is the background (labels are positive integers)");
    *label = x;
    return 0;
}

/* Parses one line [s, e) (comment already removed, not blank) into a ROI. */
static int parse_line(struct roi_parser *p, const char *s, const char *e)
{
    uint64_t start[ROIFS_MAX_DIM], stop[ROIFS_MAX_DIM], box[2];
    const char *rs[ROIFS_MAX_DIM], *re[ROIFS_MAX_DIM];
    bool open[ROIFS_MAX_DIM][2], ignored[2];
    uint64_t label = 0;
    const char *at = memchr(s, '@', (size_t)(e - s));
    if (at) {
        if (parse_label(p, at + 1, e, &label) < 0)
            return -EINVAL;
        e = at;
        trim(&s, &e);
    }
    int k = 0;
    for (const char *r = s;; k++) {
        const char *comma = memchr(r, ',', (size_t)(e - r));
        const char *end = comma ? comma : e;
        bool kept = k < p->ndim;
        if (parse_range(p, k, r, end, box, kept ? open[k] : ignored) < 0)
            return -EINVAL;
        if (kept) {
            start[k] = box[0];
            stop[k] = box[1];
            rs[k] = r;
            re[k] = end;
        }
        if (!comma)
            break;
        r = comma + 1;
    }
    if (k + 1 != p->ndim)
        return parse_fail(p, "%d range%s, the array has %d dimension%s", k + 1, k ? "s" : "",
                          p->ndim, p->ndim == 1 ? "" : "s");
    for (k = 0; k < p->ndim; k++) {
        box[0] = start[k];
        box[1] = stop[k];
        if (check_range(p, k, rs[k], re[k], box, open[k]) < 0)
            return -EINVAL;
        start[k] = box[0];
        stop[k] = box[1];
    }
    roi_set_push(p, start, stop, label);
    return 0;
}

static bool is_digit(char c)
{
    return (unsigned)(c - '0') < 10;
}

/* The common case in one pass: a valid line of plain ranges ending in a newline, a comment or
 * the end of the text. Returns the start of the next line, or NULL when the line needs the
 * careful parser (blank or comment-only, unusual blanks, long numbers, or any error). */
static const char *parse_line_fast(struct roi_parser *p, const char *s, const char *end)
{
    uint64_t start[ROIFS_MAX_DIM], stop[ROIFS_MAX_DIM], v[2];
    for (int k = 0; k < p->ndim; k++) {
        for (int h = 0; h < 2; h++) {
            char sep = h ? ':' : ',';
            if (h || k) {
                if (s == end || *s != sep)
                    return NULL;
                s++;
            }
            while (s < end && (*s == ' ' || *s == '\t'))
                s++;
            const char *d0 = s;
            uint64_t x = 0;
            while (s < end && is_digit(*s) && s - d0 < 19) /* 19 digits cannot overflow */
                x = x * 10 + (uint64_t)(*s++ - '0');
            if (s < end && is_digit(*s))
                return NULL;
            v[h] = s > d0 ? x : h ? p->shape[k] : 0;
            while (s < end && (*s == ' ' || *s == '\t'))
                s++;
        }
        if (v[0] >= v[1] || v[1] > p->shape[k])
            return NULL;
        start[k] = v[0];
        stop[k] = v[1];
    }
    while (s < end && *s == '\r')
        s++;
    if (s < end && *s == '#')
        s = memchr(s, '\n', (size_t)(end - s));
    if (!s || s == end) {
        s = end;
    } else if (*s == '\n') {
        s++;
    } else {
        return NULL;
    }
    roi_set_push(p, start, stop, 0);
    return s;
}

/* The ROI list is read in blocks, never whole: it may hold millions of ROIs, and memory per
 * line is bounded, so that a huge file without newlines fails fast. */
#define ROI_READ_BLOCK ((size_t)1 << 20)
#define ROI_LINE_MAX   ((size_t)1 << 16)

static int line_error(struct roi_parser *p, const char *s, size_t len)
{
    if (memchr(s, '\0', len))
        return parse_fail(p, "NUL byte (not a text file?)");
    return parse_fail(p, "line longer than %zu bytes", ROI_LINE_MAX);
}

/* Parses the complete line [s, e) (its newline, if any, included). */
static int parse_one_line(struct roi_parser *p, const char *s, const char *e)
{
    p->line++;
    if ((size_t)(e - s) > ROI_LINE_MAX || memchr(s, '\0', (size_t)(e - s)))
        return line_error(p, s, (size_t)(e - s));
    if (parse_line_fast(p, s, e))
        return 0;
    const char *nl = memchr(s, '\n', (size_t)(e - s));
    const char *end = nl ? nl : e;
    const char *hash = memchr(s, '#', (size_t)(end - s));
    const char *c = s, *ce = hash ? hash : end;
    trim(&c, &ce);
    return c < ce ? parse_line(p, c, ce) : 0;
}

/* Parses every line of [s, end) that ends in a newline, and at the end of the input
 * (`final`) the last one without. Returns where the unparsed rest starts, or NULL on error. */
static const char *parse_lines(struct roi_parser *p, const char *s, const char *end, bool final)
{
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl && !final)
            break;
        const char *e = nl ? nl + 1 : end;
        if (parse_one_line(p, s, e) < 0)
            return NULL;
        s = e;
    }
    return s;
}

static int start_set(const char *name, int ndim, struct roi_set *out, struct errbuf *err)
{
    memset(out, 0, sizeof *out);
    if (ndim < 1 || ndim > ROIFS_MAX_DIM)
        return err_set(err, -EINVAL, "%s: cannot hold ROIs of an array with %d dimensions", name,
                       ndim);
    out->ndim = ndim;
    return 0;
}

static int finish_set(struct roi_parser *p, int r)
{
    struct roi_set *out = p->out;
    if (r == 0 && out->n == 0)
        r = err_set(p->err, -EINVAL, "%s: no ROIs (only blank lines and comments)", p->name);
    if (r < 0) {
        roi_set_free(out);
        return r;
    }
    if (out->n < p->cap) {
        out->start = xrealloc(out->start, out->n * (size_t)out->ndim * sizeof(uint64_t));
        out->stop = xrealloc(out->stop, out->n * (size_t)out->ndim * sizeof(uint64_t));
        if (out->label)
            out->label = xrealloc(out->label, out->n * sizeof(uint64_t));
    }
    return 0;
}

static bool skip_bom(const char **s, const char *end)
{
    if (end - *s >= 3 && memcmp(*s, "\xef\xbb\xbf", 3) == 0) {
        *s += 3;
        return true;
    }
    return false;
}

int roi_parse_text(const char *name, const char *text, int ndim, const uint64_t *shape,
                   struct roi_set *out, struct errbuf *err)
{
    return roi_parse_text_flags(name, text, ndim, shape, 0, out, err);
}

int roi_parse_text_flags(const char *name, const char *text, int ndim, const uint64_t *shape,
                         unsigned flags, struct roi_set *out, struct errbuf *err)
{
    int r = start_set(name, ndim, out, err);
    if (r < 0)
        return r;
    struct roi_parser p = {
        .name = name, .ndim = ndim, .shape = shape, .out = out, .flags = flags, .err = err};
    const char *s = text, *end = text + strlen(text);
    skip_bom(&s, end);
    return finish_set(&p, parse_lines(&p, s, end, true) ? 0 : -EINVAL);
}

/* Opens path for reading: a regular file (or a symlink to one); a FIFO must not block. */
static int open_list(const char *path, struct errbuf *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, -errno, "%s: cannot read: %s", path, strerror(errno));
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && !S_ISREG(st.st_mode))
        r = S_ISDIR(st.st_mode) ? -EISDIR : FILE_ERR_NOT_REGULAR;
    if (r < 0) { /* -EIO, not -EINVAL: the message has no line (see roi_parse_file) */
        close(fd);
        return err_set(err, -EIO, "%s: cannot read: %s", path, file_strerror(r));
    }
    return fd;
}

/* Reads fd block by block, parsing complete lines; the incomplete last one moves to the front. */
static int parse_stream(struct roi_parser *p, int fd)
{
    char *buf = xmalloc(ROI_READ_BLOCK + ROI_LINE_MAX);
    size_t have = 0;
    bool first = true;
    int r = 0;
    for (;;) {
        ssize_t got = read(fd, buf + have, ROI_READ_BLOCK + ROI_LINE_MAX - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            r = err_set(p->err, -errno, "%s: cannot read: %s", p->name, strerror(errno));
            break;
        }
        const char *s = buf, *end = buf + have + (size_t)got;
        if (first && (end - s >= 3 || got == 0)) {
            skip_bom(&s, end); /* a UTF-8 byte order mark, as editors on Windows write */
            first = false;
        }
        if (first) { /* fewer than 3 bytes so far: wait for more before parsing */
            have = (size_t)(end - buf);
            continue;
        }
        const char *rest = parse_lines(p, s, end, got == 0);
        if (!rest) {
            r = -EINVAL;
            break;
        }
        if (got == 0)
            break;
        have = (size_t)(end - rest);
        if (have > ROI_LINE_MAX) {
            p->line++;
            r = line_error(p, rest, have);
            break;
        }
        memmove(buf, rest, have);
    }
    free(buf);
    return r;
}

int roi_parse_file(const char *path, int ndim, const uint64_t *shape, struct roi_set *out,
                   struct errbuf *err)
{
    return roi_parse_file_flags(path, ndim, shape, 0, out, err);
}

int roi_parse_file_flags(const char *path, int ndim, const uint64_t *shape, unsigned flags,
                         struct roi_set *out, struct errbuf *err)
{
    int r = start_set(path, ndim, out, err);
    if (r < 0)
        return r;
    int fd = open_list(path, err);
    if (fd < 0)
        return fd;
    struct roi_parser p = {
        .name = path, .ndim = ndim, .shape = shape, .out = out, .flags = flags, .err = err};
    r = parse_stream(&p, fd);
    close(fd);
    return finish_set(&p, r);
}

void roi_set_free(struct roi_set *rs)
{
    free(rs->start);
    free(rs->stop);
    free(rs->label);
    rs->start = rs->stop = rs->label = NULL;
    rs->n = 0;
}

/* ---- grids and boxes ---- */

int roi_grid(const uint64_t *tile, int ndim, const uint64_t *shape, struct roi_set *out,
             struct errbuf *err)
{
    memset(out, 0, sizeof *out);
    if (ndim < 1 || ndim > ROIFS_MAX_DIM)
        return err_set(err, -EINVAL, "cannot tile an array with %d dimensions", ndim);
    uint64_t ntiles[ROIFS_MAX_DIM], total = 1;
    for (int d = 0; d < ndim; d++) {
        if (tile[d] < 1)
            return err_set(err, -EINVAL, "grid entry %d is 0 (every entry must be at least 1)",
                           d + 1);
        ntiles[d] = shape[d] / tile[d] + (shape[d] % tile[d] != 0);
        if (__builtin_mul_overflow(total, ntiles[d], &total) || total > UINT32_MAX)
            return err_set(err, -E2BIG, "the grid makes more than %u ROIs", UINT32_MAX);
    }
    if (total == 0)
        return err_set(err, -EINVAL, "no ROIs: the array is empty");
    size_t bytes = (size_t)total * (size_t)ndim * sizeof(uint64_t);
    out->start = malloc(bytes);
    out->stop = malloc(bytes);
    if (!out->start || !out->stop) {
        roi_set_free(out);
        return err_set(err, -ENOMEM, "no memory for %llu grid ROIs", (unsigned long long)total);
    }
    out->ndim = ndim;
    out->n = (size_t)total;
    uint64_t idx[ROIFS_MAX_DIM] = {0};
    for (size_t i = 0; i < out->n; i++) {
        nd_chunk_box(idx, tile, shape, ndim, out->start + i * (size_t)ndim,
                     out->stop + i * (size_t)ndim);
        nd_next_index(idx, NULL, ntiles, ndim);
    }
    return 0;
}

void roi_read_region(const struct roi_set *rs, size_t i, const uint64_t *halo,
                     const uint64_t *shape, uint64_t *rstart, uint64_t *rshape)
{
    const uint64_t *a = rs->start + i * (size_t)rs->ndim, *b = rs->stop + i * (size_t)rs->ndim;
    for (int d = 0; d < rs->ndim; d++) {
        uint64_t h = halo ? halo[d] : 0;
        uint64_t lo = a[d] > h ? a[d] - h : 0;
        uint64_t hi = shape[d] - b[d] > h ? b[d] + h : shape[d];
        rstart[d] = lo;
        rshape[d] = hi - lo;
    }
}

void roi_chunk_range(const struct roi_set *rs, size_t i, const uint64_t *chunks, uint64_t *c0,
                     uint64_t *c1)
{
    nd_chunk_range(rs->start + i * (size_t)rs->ndim, rs->stop + i * (size_t)rs->ndim, chunks,
                   rs->ndim, c0, c1);
}

/* ---- the chunk -> ROIs index ---- */

struct roi_index {
    size_t nchunks, ncontacts, nrois;
    uint64_t *chunk_ids;   /* nchunks, ascending */
    size_t *offsets;       /* nchunks + 1: chunk k's ROIs are rois[offsets[k], offsets[k+1]) */
    uint32_t *rois;        /* ncontacts */
    uint64_t *roi_nchunks; /* nrois */
};

struct roi_contact {
    uint64_t chunk;
    uint32_t roi;
};

/* Chunk grid shape and C-order strides; the grid must have at most 2^63 chunks so that every
 * linear id fits. */
static int chunk_grid(int ndim, const uint64_t *shape, const uint64_t *chunks, uint64_t *stride,
                      struct errbuf *err)
{
    uint64_t grid[ROIFS_MAX_DIM], total = 1;
    for (int d = 0; d < ndim; d++) {
        if (chunks[d] < 1)
            return err_set(err, -EINVAL, "chunk entry %d is 0", d + 1);
        grid[d] = shape[d] / chunks[d] + (shape[d] % chunks[d] != 0);
        if (__builtin_mul_overflow(total, grid[d], &total) || total > (UINT64_C(1) << 63))
            return err_set(err, -E2BIG, "the chunk grid has more than 2^63 chunks");
    }
    uint64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= grid[d];
    }
    return 0;
}

/* Number of chunks each ROI touches, and their sum; checks every ROI lies inside the array. */
static int count_contacts(const struct roi_set *rs, const uint64_t *shape, const uint64_t *chunks,
                          uint64_t *counts, size_t *total, struct errbuf *err)
{
    uint64_t sum = 0, c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM];
    for (size_t i = 0; i < rs->n; i++) {
        const uint64_t *b = rs->stop + i * (size_t)rs->ndim;
        uint64_t n = 1;
        for (int d = 0; d < rs->ndim; d++)
            if (b[d] > shape[d])
                return err_set(err, -EINVAL, "ROI %zu exceeds the extent of dimension %d", i,
                               d + 1);
        roi_chunk_range(rs, i, chunks, c0, c1);
        for (int d = 0; d < rs->ndim; d++)
            if (__builtin_mul_overflow(n, c1[d] > c0[d] ? c1[d] - c0[d] : 0, &n))
                return err_set(err, -ENOMEM, "ROI %zu touches more than 2^64 chunks", i);
        counts[i] = n;
        /* the index is built in two arrays of contacts: they must fit in memory */
        if (__builtin_add_overflow(sum, n, &sum) ||
            sum > mem_physical_bytes() / (2 * sizeof(struct roi_contact)))
            return err_set(
                err, -E2BIG,
                "the ROIs touch more than %llu chunks in all (counting each ROI's "
                "chunks), more than the index of ROIs by chunk can hold in this "
                "machine's memory",
                (unsigned long long)(mem_physical_bytes() / (2 * sizeof(struct roi_contact))));
    }
    *total = (size_t)sum;
    return 0;
}

/* Lists (chunk, roi) for every ROI, ROI by ROI; returns the largest chunk id. */
static uint64_t list_contacts(const struct roi_set *rs, const uint64_t *chunks,
                              const uint64_t *stride, struct roi_contact *out)
{
    int nd = rs->ndim, last = nd - 1;
    uint64_t c0[ROIFS_MAX_DIM], c1[ROIFS_MAX_DIM], idx[ROIFS_MAX_DIM], max_id = 0;
    size_t n = 0;
    for (size_t i = 0; i < rs->n; i++) {
        roi_chunk_range(rs, i, chunks, c0, c1);
        bool empty = false;
        for (int d = 0; d < nd; d++) {
            idx[d] = c0[d];
            empty = empty || c0[d] >= c1[d];
        }
        while (!empty) {
            uint64_t base = 0;
            for (int d = 0; d < last; d++)
                base += idx[d] * stride[d];
            for (uint64_t c = c0[last]; c < c1[last]; c++)
                out[n++] = (struct roi_contact){base + c, (uint32_t)i};
            if (base + c1[last] - 1 > max_id)
                max_id = base + c1[last] - 1;
            empty = !nd_next_index(idx, c0, c1, last);
        }
    }
    return max_id;
}

/* Stable LSD radix sort by chunk id, one byte per pass; ROIs were listed in ascending order,
 * so stability keeps each chunk's ROIs in list order. Returns the buffer holding the result. */
static struct roi_contact *sort_contacts(struct roi_contact *a, struct roi_contact *tmp, size_t n,
                                         uint64_t max_id)
{
    static const int nbytes = (int)sizeof(uint64_t);
    if (n == 0)
        return a;
    size_t(*count)[256] = xcalloc((size_t)nbytes, sizeof *count);
    for (size_t i = 0; i < n; i++)
        for (int b = 0; b < nbytes; b++)
            count[b][(a[i].chunk >> (8 * b)) & 0xff]++;
    for (int b = 0; b < nbytes && (max_id >> (8 * b)) != 0; b++) {
        if (count[b][(a[0].chunk >> (8 * b)) & 0xff] == n)
            continue; /* every id has the same byte here */
        size_t pos = 0;
        for (int v = 0; v < 256; v++) {
            size_t c = count[b][v];
            count[b][v] = pos;
            pos += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[count[b][(a[i].chunk >> (8 * b)) & 0xff]++] = a[i];
        struct roi_contact *t = a;
        a = tmp;
        tmp = t;
    }
    free(count);
    return a;
}

/* Turns the sorted contacts into unique chunk ids, offsets and ROI lists. */
static int compact(struct roi_index *ix, const struct roi_contact *c, size_t n)
{
    size_t nchunks = 0;
    for (size_t i = 0; i < n; i++)
        nchunks += i == 0 || c[i].chunk != c[i - 1].chunk;
    ix->chunk_ids = malloc(nchunks * sizeof *ix->chunk_ids + 1);
    ix->offsets = malloc((nchunks + 1) * sizeof *ix->offsets);
    ix->rois = malloc(n * sizeof *ix->rois + 1);
    if (!ix->chunk_ids || !ix->offsets || !ix->rois)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || c[i].chunk != c[i - 1].chunk) {
            ix->chunk_ids[k] = c[i].chunk;
            ix->offsets[k++] = i;
        }
        ix->rois[i] = c[i].roi;
    }
    ix->offsets[nchunks] = n;
    ix->nchunks = nchunks;
    ix->ncontacts = n;
    return 0;
}

int roi_index_build(const struct roi_set *rs, const uint64_t *shape, const uint64_t *chunks,
                    struct roi_index **out, struct errbuf *err)
{
    *out = NULL;
    if (rs->n > UINT32_MAX)
        return err_set(err, -E2BIG, "%zu ROIs: the index holds at most %u", rs->n, UINT32_MAX);
    if (rs->ndim < 1 || rs->ndim > ROIFS_MAX_DIM)
        return err_set(err, -EINVAL, "ROIs with %d dimensions", rs->ndim);
    uint64_t stride[ROIFS_MAX_DIM];
    int r = chunk_grid(rs->ndim, shape, chunks, stride, err);
    if (r < 0)
        return r;
    struct roi_index *ix = xcalloc(1, sizeof *ix);
    ix->nrois = rs->n;
    ix->roi_nchunks = malloc(rs->n * sizeof(uint64_t) + 1);
    size_t total = 0;
    struct roi_contact *a = NULL, *tmp = NULL;
    if (!ix->roi_nchunks) {
        r = err_set(err, -ENOMEM, "no memory to index %zu ROIs", rs->n);
        goto out;
    }
    r = count_contacts(rs, shape, chunks, ix->roi_nchunks, &total, err);
    if (r < 0)
        goto out;
    a = malloc(total * sizeof *a + 1);
    tmp = malloc(total * sizeof *tmp + 1);
    if (!a || !tmp) {
        r = err_set(err, -ENOMEM, "no memory to index %zu ROI-chunk contacts", total);
        goto out;
    }
    uint64_t max_id = list_contacts(rs, chunks, stride, a);
    struct roi_contact *sorted = sort_contacts(a, tmp, total, max_id);
    r = compact(ix, sorted, total);
    if (r < 0)
        err_set(err, r, "no memory to index %zu ROI-chunk contacts", total);
out:
    free(a);
    free(tmp);
    if (r < 0) {
        roi_index_free(ix);
        return r;
    }
    *out = ix;
    return 0;
}

void roi_index_free(struct roi_index *ix)
{
    if (!ix)
        return;
    free(ix->chunk_ids);
    free(ix->offsets);
    free(ix->rois);
    free(ix->roi_nchunks);
    free(ix);
}

size_t roi_index_nchunks(const struct roi_index *ix)
{
    return ix->nchunks;
}

uint64_t roi_index_chunk_id(const struct roi_index *ix, size_t k)
{
    return ix->chunk_ids[k];
}

size_t roi_index_lower_bound(const struct roi_index *ix, uint64_t chunk_id)
{
    size_t lo = 0, hi = ix->nchunks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->chunk_ids[mid] < chunk_id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t roi_index_find(const struct roi_index *ix, uint64_t chunk_id)
{
    size_t k = roi_index_lower_bound(ix, chunk_id);
    return k < ix->nchunks && ix->chunk_ids[k] == chunk_id ? (int64_t)k : -1;
}

const uint32_t *roi_index_rois(const struct roi_index *ix, size_t k, size_t *count)
{
    *count = ix->offsets[k + 1] - ix->offsets[k];
    return ix->rois + ix->offsets[k];
}

uint64_t roi_index_roi_nchunks(const struct roi_index *ix, size_t i)
{
    return ix->roi_nchunks[i];
}

size_t roi_index_ncontacts(const struct roi_index *ix)
{
    return ix->ncontacts;
}
