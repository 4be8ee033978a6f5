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
    struct ptable_hold hold;
    /* requests not answered yet: those of the round running, and those (pending) of the next */
    struct waiter *pending;
    bool running;         /* the rounds' thread runs */
    bool joinable;        /* thread was started and not joined */
    pthread_cond_t ended; /* running went false (under m) */
    /* held while an image is held and its table asked (issued, not waited for): ptable_allow */
    pthread_mutex_t issue;
    bool allowed;
    pthread_t thread;
};

/* A request waiting for the next round. */
struct waiter {
    otable_cb cb;
    void *ctx;
    struct waiter *next;
};

/* One image's part of a round: what the concatenation takes of its table, copied while the
 * image was held (the image may be closed since). */
struct part {
    bool have;
    struct table_row *rows; /* the masking tables' */
    size_t n;
    uint64_t *ids; /* [measure]: the feature tables' */
    double *vals;
    char **cols;
    size_t ncols;
};

static void part_free(struct part *pt)
{
    free(pt->rows);
    free(pt->ids);
    free(pt->vals);
    for (size_t j = 0; pt->cols && j < pt->ncols; j++)
        free(pt->cols[j]);
    free(pt->cols);
}

/* The images' feature tables concatenated, each image with its own columns (measure.h). */
static int encode_features(const struct ptable *p, const struct part *got,
                           struct table_files *files, struct errbuf *err)
{
    struct table_fpart *parts = xcalloc(p->n ? p->n : 1, sizeof *parts);
    for (size_t k = 0; k < p->n; k++) {
        const struct ptable_image *im = &p->images[k];
        parts[k] = (struct table_fpart){.prefix = im->path_in_plate, .text = im->text};
        if (!got[k].have)
            continue;
        parts[k].n = got[k].n;
        parts[k].labels = got[k].ids;
        parts[k].values = got[k].vals;
        parts[k].cols = (const char *const *)got[k].cols;
        parts[k].ncols = got[k].ncols;
    }
    struct table_concat c = {.text_names = text_names, .ntext = 5};
    int r = table_encode_concat_features(&p->spec, &c, parts, p->n, files, err);
    free(parts);
    return r;
}

/* The images' masking tables concatenated. */
static int encode_rows(const struct ptable *p, const struct part *got, struct table_files *files,
                       struct errbuf *err)
{
    struct table_part *parts = xcalloc(p->n ? p->n : 1, sizeof *parts);
    for (size_t k = 0; k < p->n; k++) {
        const struct ptable_image *im = &p->images[k];
        parts[k] = (struct table_part){.prefix = im->path_in_plate, .text = im->text};
        if (got[k].have)
            parts[k].rows = got[k].rows, parts[k].n = got[k].n;
    }
    struct table_concat c = {.text_names = text_names, .ntext = 5};
    int r = table_encode_concat(&p->spec, &c, parts, p->n, files, err);
    free(parts);
    return r;
}

/* An image's table asked and waited for by the round's thread. */
struct answer {
    pthread_mutex_t m;
    pthread_cond_t cv;
    bool done;
    int err;
};

static void table_answered(void *ctx, int err)
{
    struct answer *a = ctx;
    pthread_mutex_lock(&a->m);
    a->err = err;
    a->done = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->m);
}

/* Image k's part: the image held (p->hold), its table asked and waited for, what the
 * concatenation needs copied, the image let go. 0 (an image that cannot be opened or started
 * has no rows) or -EIO (its table failed, or images may not be held: ptable_allow). */
static int take_image(struct ptable *p, size_t k, struct part *pt)
{
    pthread_mutex_lock(&p->issue);
    if (!p->allowed) {
        pthread_mutex_unlock(&p->issue);
        return -EIO;
    }
    if (p->hold.get && p->hold.get(p->hold.ctx, k) < 0) {
        pthread_mutex_unlock(&p->issue);
        return 0;
    }
    struct otable *t = p->images[k].table; /* set when the image was opened (the hold) */
    struct answer a = {.done = t == NULL};
    pthread_mutex_init(&a.m, NULL);
    pthread_cond_init(&a.cv, NULL);
    if (t) /* its engines are asked before the lock goes: none is stopped meanwhile */
        otable_request(t, table_answered, &a);
    pthread_mutex_unlock(&p->issue);
    pthread_mutex_lock(&a.m);
    while (!a.done)
        pthread_cond_wait(&a.cv, &a.m);
    pthread_mutex_unlock(&a.m);
    pthread_cond_destroy(&a.cv);
    pthread_mutex_destroy(&a.m);
    if (t && a.err == 0) {
        pt->have = true;
        if (p->features)
            pt->n = otable_features(t, &pt->ids, &pt->vals, &pt->cols, &pt->ncols);
        else
            pt->rows = otable_rows(t, &pt->n);
    }
    if (p->hold.put)
        p->hold.put(p->hold.ctx, k);
    return a.err < 0 ? -EIO : 0;
}

/* One round: the images one after another, then the table encoded and kept. 0 or -EIO. */
static int make(struct ptable *p)
{
    struct part *got = xcalloc(p->n ? p->n : 1, sizeof *got);
    int r = 0;
    for (size_t k = 0; k < p->n && r == 0; k++)
        r = take_image(p, k, &got[k]);
    struct table_files files = {0};
    struct errbuf err = {{0}};
    if (r == 0 && (p->features ? encode_features(p, got, &files, &err)
                               : encode_rows(p, got, &files, &err)) < 0) {
        log_error("the plate's %stable: %s", p->features ? "feature " : "", err.msg);
        r = -EIO;
    }
    if (r == 0) {
        pthread_mutex_lock(&p->m);
        struct table_files old = p->files;
        p->files = files;
        p->have_files = true;
        pthread_mutex_unlock(&p->m);
        table_files_free(&old);
    }
    for (size_t k = 0; k < p->n; k++)
        part_free(&got[k]);
    free(got);
    return r;
}

/* The rounds' thread: while requests wait, a round for those that asked before it began. */
static void *rounds_main(void *arg)
{
    struct ptable *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->m);
        struct waiter *w = p->pending;
        p->pending = NULL;
        if (!w) {
            p->running = false;
            pthread_cond_broadcast(&p->ended);
            pthread_mutex_unlock(&p->m);
            return NULL;
        }
        pthread_mutex_unlock(&p->m);
        int r = make(p);
        while (w) {
            struct waiter *next = w->next;
            w->cb(w->ctx, r);
            free(w);
            w = next;
        }
    }
}

void ptable_allow(struct ptable *p, bool allow)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->issue);
    p->allowed = allow;
    pthread_mutex_unlock(&p->issue);
}

void ptable_wait(struct ptable *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->m);
    while (p->running)
        pthread_cond_wait(&p->ended, &p->m);
    if (p->joinable) /* it has ended or is ending, without m */
        pthread_join(p->thread, NULL);
    p->joinable = false;
    pthread_mutex_unlock(&p->m);
}

void ptable_request(struct ptable *p, otable_cb cb, void *ctx)
{
    struct waiter *w = xmalloc(sizeof *w);
    *w = (struct waiter){cb, ctx, NULL};
    pthread_mutex_lock(&p->m);
    struct waiter **at = &p->pending; /* answered in the order asked */
    while (*at)
        at = &(*at)->next;
    *at = w;
    if (p->running) { /* the next round takes it */
        pthread_mutex_unlock(&p->m);
        return;
    }
    if (p->joinable) /* the last rounds' thread, which has ended or is ending */
        pthread_join(p->thread, NULL);
    p->joinable = pthread_create(&p->thread, NULL, rounds_main, p) == 0;
    p->running = p->joinable;
    w = p->running ? NULL : p->pending;
    if (w)
        p->pending = NULL;
    pthread_mutex_unlock(&p->m);
    if (w)
        log_error("the plate's table: no thread to make it");
    while (w) {
        struct waiter *next = w->next;
        w->cb(w->ctx, -EIO);
        free(w);
        w = next;
    }
}

/* How many columns the images' feature tables have together (each name once), with the
 * Python function's at most. */
static size_t union_columns(const struct ptable_image *images, size_t n)
{
    size_t nu = 0, cap = 0, py = 0;
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
        size_t pyk = images[k].table ? otable_python_max_columns(images[k].table) : 0;
        py = pyk > py ? pyk : py; /* the function's columns, the same in every image */
    }
    free(u);
    return nu + py;
}

int ptable_new(const struct ptable_image *images, size_t n, int format, enum table_backend backend,
               const struct ptable_hold *hold, struct ptable **out, struct errbuf *err)
{
    struct ptable *p = xcalloc(1, sizeof *p);
    if (hold)
        p->hold = *hold;
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
    pthread_cond_init(&p->ended, NULL);
    pthread_mutex_init(&p->issue, NULL);
    p->allowed = true;
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
    ptable_wait(p); /* its rounds end: the engines are gone, their waiters failed */
    pthread_cond_destroy(&p->ended);
    pthread_mutex_destroy(&p->issue);
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
