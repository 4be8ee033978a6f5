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
    pthread_mutex_t m;
    struct table_files files; /* the latest table made */
    bool have_files;
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

static void encode(struct round *rd)
{
    struct ptable *p = rd->p;
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

int ptable_new(const struct ptable_image *images, size_t n, int format, enum table_backend backend,
               struct ptable **out, struct errbuf *err)
{
    struct ptable *p = xcalloc(1, sizeof *p);
    p->images = images;
    p->n = n;
    p->spec = (struct table_spec){.zarr_format = format, .backend = backend};
    struct table_part *parts = xcalloc(n ? n : 1, sizeof *parts);
    struct table_row one = {.label = 1, .length = {1, 1, 1}};
    size_t text = 0;
    for (size_t k = 0; k < n; k++) {
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
    p->row_bound = 512 + 2 * text;
    struct table_concat c = {.text_names = text_names, .ntext = 5};
    int r = table_encode_concat(&p->spec, &c, parts, n, &p->names, err);
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
    pthread_mutex_lock(&p->m);
    p->nmax += otable_max_rows(table);
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
    uint64_t len = f ? f->len : 0, nmax = p->nmax;
    pthread_mutex_unlock(&p->m);
    *exact = f != NULL;
    if (f)
        return len;
    return p->names.v[i].len + (uint64_t)p->row_bound * (nmax + 1);
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
