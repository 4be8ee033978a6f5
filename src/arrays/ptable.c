/* ptable.c: a plate's table, the concatenation of its images' tables (ptable.h). */
#include "ptable.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const char *const text_names[5] = {"row", "column", "path_in_well", "path_in_plate",
                                          "acquisition_id"};

struct ptable {
    const struct ptable_image *images;
    size_t n;
    struct table_spec spec;
    struct table_files names; /* a table of one row per image: the names */
    uint64_t nmax;            /* rows at most */
    size_t row_bound;         /* bytes of one row at most, in any file */
    size_t text;              /* the longest extra columns' text of an image */
    pthread_mutex_t m;
    struct table_files files; /* the latest table made */
    bool have_files;
    bool features; /* [measure]: the images' feature tables (table_encode_concat_features) */
};

/* One request: the images' tables asked, one answer each. */
struct round {
    struct ptable *p;
    otable_cb cb;
    void *ctx;
    pthread_mutex_t m;
    size_t outstanding; /* plus one while asking */
    bool failed;
};

/* The images' feature tables concatenated, each image with its own columns (measure.h). */
static int encode_features(const struct ptable *p, struct table_files *files, struct errbuf *err)
{
    struct table_fpart *parts = xcalloc(p->n ? p->n : 1, sizeof *parts);
    for (size_t k = 0; k < p->n; k++) {
        const struct ptable_image *im = &p->images[k];
        parts[k] = (struct table_fpart){.prefix = im->path_in_plate, .text = im->text};
        if (!im->table)
            continue;
        uint64_t *ids;
        double *vals;
        parts[k].n = otable_features(im->table, &ids, &vals);
        parts[k].labels = ids;
        parts[k].values = vals;
        parts[k].cols = otable_feature_columns(im->table, &parts[k].ncols);
    }
    struct table_concat c = {.text_names = text_names, .ntext = 5};
    int r = table_encode_concat_features(&p->spec, &c, parts, p->n, files, err);
    for (size_t k = 0; k < p->n; k++) {
        free((void *)parts[k].labels);
        free((void *)parts[k].values);
    }
    free(parts);
    return r;
}

static void encode(struct round *rd)
{
    struct ptable *p = rd->p;
    if (p->features) {
        struct table_files files = {0};
        struct errbuf err = {{0}};
        int r = encode_features(p, &files, &err);
        if (r < 0) {
            log_error("the plate's feature table: %s", err.msg);
        } else {
            pthread_mutex_lock(&p->m);
            struct table_files old = p->files;
            p->files = files;
            p->have_files = true;
            pthread_mutex_unlock(&p->m);
            table_files_free(&old);
        }
        rd->cb(rd->ctx, r < 0 ? -EIO : 0);
        return;
    }
    struct table_part *parts = xcalloc(p->n ? p->n : 1, sizeof *parts);
    struct table_row **rows = xcalloc(p->n ? p->n : 1, sizeof *rows);
    for (size_t k = 0; k < p->n; k++) {
        const struct ptable_image *im = &p->images[k];
        parts[k] = (struct table_part){.prefix = im->path_in_plate, .text = im->text};
        if (im->table)
            parts[k].rows = rows[k] = otable_rows(im->table, &parts[k].n);
    }
    struct table_files files = {0};
    struct errbuf err = {{0}};
    struct table_concat c = {.text_names = text_names, .ntext = 5};
    int r = table_encode_concat(&p->spec, &c, parts, p->n, &files, &err);
    for (size_t k = 0; k < p->n; k++)
        free(rows[k]);
    free(rows);
    free(parts);
    if (r < 0) {
        log_error("the plate's table: %s", err.msg);
    } else {
        pthread_mutex_lock(&p->m);
        struct table_files old = p->files;
        p->files = files;
        p->have_files = true;
        pthread_mutex_unlock(&p->m);
        table_files_free(&old);
    }
    rd->cb(rd->ctx, r < 0 ? -EIO : 0);
}

/* One answer fewer to wait for; the last one makes the table. */
static void release(struct round *rd, bool failed)
{
    pthread_mutex_lock(&rd->m);
    rd->failed = rd->failed || failed;
    bool last = --rd->outstanding == 0;
    pthread_mutex_unlock(&rd->m);
    if (!last)
        return;
    if (rd->failed)
        rd->cb(rd->ctx, -EIO);
    else
        encode(rd);
    pthread_mutex_destroy(&rd->m);
    free(rd);
}

static void image_answered(void *ctx, int err)
{
    release(ctx, err != 0);
}

void ptable_request(struct ptable *p, otable_cb cb, void *ctx)
{
    struct round *rd = xcalloc(1, sizeof *rd);
    *rd = (struct round){.p = p, .cb = cb, .ctx = ctx, .outstanding = 1};
    pthread_mutex_init(&rd->m, NULL);
    for (size_t k = 0; k < p->n; k++) {
        if (!p->images[k].table)
            continue;
        pthread_mutex_lock(&rd->m);
        rd->outstanding++;
        pthread_mutex_unlock(&rd->m);
        otable_request(p->images[k].table, image_answered, rd);
    }
    release(rd, false);
}

/* How many columns the images' feature tables have together (each name once). */
static size_t union_columns(const struct ptable_image *images, size_t n)
{
    size_t nu = 0, cap = 0;
    const char **u = NULL;
    for (size_t k = 0; k < n; k++) {
        size_t nc = 0;
        const char *const *cols =
            images[k].table ? otable_feature_columns(images[k].table, &nc) : NULL;
        for (size_t j = 0; cols && j < nc; j++) {
            size_t i = 0;
            while (i < nu && strcmp(u[i], cols[j]) != 0)
                i++;
            if (i < nu)
                continue;
            if (nu == cap)
                u = xrealloc(u, (cap = cap ? 2 * cap : 16) * sizeof *u);
            u[nu++] = cols[j];
        }
    }
    free(u);
    return nu;
}

int ptable_new(const struct ptable_image *images, size_t n, int format, enum table_backend backend,
               struct ptable **out, struct errbuf *err)
{
    struct ptable *p = xcalloc(1, sizeof *p);
    p->images = images;
    p->n = n;
    p->spec = (struct table_spec){.zarr_format = format, .backend = backend};
    struct table_part *parts = xcalloc(n ? n : 1, sizeof *parts);
    struct table_row one = {.label = 1, .length = {1, 1, 1}};
    size_t text = 0, ncols = 0;
    for (size_t k = 0; k < n; k++) {
        if (images[k].table && otable_feature_columns(images[k].table, &(size_t){0}))
            p->features = true;
        parts[k] = (struct table_part){
            .rows = &one, .n = 1, .prefix = images[k].path_in_plate, .text = images[k].text};
        size_t len = strlen(images[k].path_in_plate);
        for (int c = 0; c < 5; c++)
            len += strlen(images[k].text[c]);
        text = len > text ? len : text;
        if (images[k].table)
            p->nmax += otable_max_rows(images[k].table);
    }
    /* a row's bytes in any file: label and box in binary or as text, the index and the
     * extra columns with their lengths or separators */
    if (p->features)
        ncols = union_columns(images, n);
    p->text = text;
    p->row_bound = 512 + 2 * text + 32 * ncols;
    struct table_concat c = {.text_names = text_names, .ntext = 5};
    int r;
    if (p->features) { /* the files of a table of one row (any values) */
        p->spec.type = "feature_table";
        uint64_t label = 1;
        double zero = 0;
        const char *col = "x";
        struct table_fpart f = {.labels = &label,
                                .values = &zero,
                                .n = 1,
                                .cols = &col,
                                .ncols = 1,
                                .prefix = "p",
                                .text = text_names};
        r = table_encode_concat_features(&p->spec, &c, &f, 1, &p->names, err);
    } else {
        r = table_encode_concat(&p->spec, &c, parts, n, &p->names, err);
    }
    free(parts);
    if (r < 0) {
        free(p);
        return r;
    }
    pthread_mutex_init(&p->m, NULL);
    *out = p;
    return 0;
}

void ptable_add_image(struct ptable *p, struct otable *table)
{
    /* its feature columns too: images may name their channels differently */
    size_t ncols = p->features ? union_columns(p->images, p->n) : 0;
    pthread_mutex_lock(&p->m);
    p->nmax += otable_max_rows(table);
    p->row_bound = 512 + 2 * p->text + 32 * ncols;
    pthread_mutex_unlock(&p->m);
}

void ptable_free(struct ptable *p)
{
    if (!p)
        return;
    table_files_free(&p->names);
    table_files_free(&p->files);
    pthread_mutex_destroy(&p->m);
    free(p);
}

size_t ptable_nfiles(const struct ptable *p)
{
    return p->names.n;
}

const char *ptable_path(const struct ptable *p, size_t i)
{
    return p->names.v[i].path;
}

uint64_t ptable_size(struct ptable *p, size_t i, bool *exact)
{
    pthread_mutex_lock(&p->m);
    const struct table_file *f =
        p->have_files ? table_files_find(&p->files, p->names.v[i].path) : NULL;
    uint64_t len = f ? f->len : 0, nmax = p->nmax, row_bound = p->row_bound;
    pthread_mutex_unlock(&p->m);
    *exact = f != NULL;
    if (f)
        return len;
    return p->names.v[i].len + row_bound * (nmax + 1);
}

char *ptable_copy(struct ptable *p, size_t i, size_t *len)
{
    pthread_mutex_lock(&p->m);
    const struct table_file *f =
        p->have_files ? table_files_find(&p->files, p->names.v[i].path) : NULL;
    char *data = NULL;
    if (f) {
        data = xmalloc(f->len + 1);
        memcpy(data, f->data, f->len);
        *len = f->len;
    }
    pthread_mutex_unlock(&p->m);
    return data;
}
