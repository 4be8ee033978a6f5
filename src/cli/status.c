/* status.c: `roifs status MOUNTPOINT`: a human summary of MOUNTPOINT/.roifs/status. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>

#include "../plate/plate_grid.h"
#include "cli.h"

#define FUSE_SUPER_MAGIC 0x65735546

static long long json_count(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

/* Reads MNT/.roifs/status if mnt is a live roifs mount: 0 and *doc, or an exit status. */
static int read_status_doc(const char *mnt, json_t **doc)
{
    struct statfs sf;
    if (statfs(mnt, &sf) < 0) {
        if (errno == ENOTCONN)
            fprintf(stderr,
                    "roifs: %s: the roifs process serving it is gone (%s); "
                    "`roifs unmount %s` clears it\n",
                    mnt, strerror(errno), mnt);
        else
            fprintf(stderr, "roifs: %s: %s\n", mnt, strerror(errno));
        return EXIT_RUNTIME;
    }
    char *path = path_join(mnt, ".roifs/status"), *text = NULL;
    int r = sf.f_type == FUSE_SUPER_MAGIC ? file_read_all(path, &text, NULL) : -ENOENT;
    json_error_t je;
    *doc = r == 0 ? json_loads(text, 0, &je) : NULL;
    free(text);
    free(path);
    if (r < 0 && r != -ENOENT) {
        fprintf(stderr, "roifs: %s/.roifs/status: %s\n", mnt, strerror(-r));
        return EXIT_RUNTIME;
    }
    if (!*doc || !json_is_object(json_object_get(*doc, "rois"))) {
        fprintf(stderr, "roifs: %s: not a roifs mount\n", mnt);
        json_decref(*doc);
        return EXIT_RUNTIME;
    }
    return 0;
}

/* A failed ROI's "retry_at" (seconds since the epoch) when it is still to come: no read
 * tries the ROI again before then ([process] retry_after). */
static void print_retry(json_t *retry_at)
{
    if (!json_is_number(retry_at))
        return;
    double at = json_number_value(retry_at), now = (double)clock_ns(CLOCK_REALTIME) / 1e9;
    if (at <= now)
        return;
    time_t t = (time_t)at;
    struct tm tm;
    char when[32], left[24];
    if (!localtime_r(&t, &tm) || !strftime(when, sizeof when, "%H:%M:%S", &tm))
        return;
    cli_format_duration(at - now, left, sizeof left);
    printf("    not tried again before %s (in %s): [process] retry_after\n", when, left);
}

/* The recent failures, one line per ROI (its latest message), at most 20; a ROI not to be
 * tried again yet says until when. */
static void print_failures(json_t *errors)
{
    size_t n = json_array_size(errors), shown = 0, i;
    long long *seen = xcalloc(n ? n : 1, sizeof *seen);
    for (i = n; i-- > 0;) {
        json_t *er = json_array_get(errors, i);
        long long roi = json_count(er, "roi");
        bool dup = false;
        for (size_t j = 0; j < shown && !dup; j++)
            dup = seen[j] == roi;
        if (dup)
            continue;
        if (shown == 0)
            printf("recent failures (latest first):\n");
        seen[shown++] = roi;
        if (shown <= 20) {
            const char *msg = json_string_value(json_object_get(er, "message"));
            printf("  roi %lld: %s\n", roi, msg ? msg : "?");
            print_retry(json_object_get(er, "retry_at"));
        }
    }
    if (shown > 20)
        printf("  ... and %zu more ROIs\n", shown - 20);
    free(seen);
}

/* The cell of a well: "ok" every ROI done, "NN%" some, "." none yet, "X" an image failed; a well
 * with an image nothing looked into yet (its ROIs unknown) is at most 99%. */
static void well_cell(json_t *wells, json_t *failed, const char *row, const char *col, char *out,
                      size_t size)
{
    char *path = xasprintf("%s/%s", row, col);
    json_t *w = json_object_get(wells, path);
    size_t plen = strlen(path), i;
    json_t *f;
    bool bad = false;
    json_array_foreach(failed, i, f)
    {
        const char *fp = json_string_value(json_object_get(f, "path"));
        bad = bad || (fp && strncmp(fp, path, plen) == 0 && (!fp[plen] || fp[plen] == '/'));
    }
    free(path);
    json_t *rois = json_object_get(w, "rois");
    long long total = json_count(rois, "total"), done = json_count(rois, "done");
    bool unread = json_count(w, "unread") > 0;
    if (!w)
        out[0] = '\0';
    else if (bad)
        snprintf(out, size, "X");
    else if (total > 0 && done >= total && !unread)
        snprintf(out, size, "ok");
    else if (done > 0)
        snprintf(out, size, "%d%%", done >= total ? 99 : (int)(100 * done / total));
    else
        snprintf(out, size, ".");
}

/* A plate mount (docs/plates.md): its images and the plate as a map of rows and columns,
 * each selected well's progress in its cell, then the failed images. */
static void print_plate(json_t *doc)
{
    json_t *im = json_object_get(doc, "images"), *wells = json_object_get(doc, "wells"),
           *failed = json_object_get(doc, "failed_images");
    printf("images:  %lld (%lld ready, %lld open, %lld done, %lld failed, %lld unread) in %zu "
           "wells\n",
           json_count(im, "total"), json_count(im, "ready"), json_count(im, "open"),
           json_count(im, "done"), json_count(im, "failed"), json_count(im, "unread"),
           json_object_size(wells));
    struct plate_grid g;
    plate_grid_of(wells, &g);
    const char **rows = g.rows, **cols = g.cols;
    size_t nr = g.nrows, nc = g.ncols;
    printf("plate:   (ok: every ROI done, NN%%: some, .: none yet, X: an image failed)\n");
    printf("      ");
    for (size_t c = 0; c < nc; c++)
        printf(" %4s", cols[c]);
    printf("\n");
    for (size_t r = 0; r < nr; r++) {
        printf("  %4s", rows[r]);
        for (size_t c = 0; c < nc; c++) {
            char cell[16];
            well_cell(wells, failed, rows[r], cols[c], cell, sizeof cell);
            printf(" %4s", cell);
        }
        printf("\n");
    }
    size_t i;
    json_t *v;
    json_array_foreach(failed, i, v)
    {
        const char *p = json_string_value(json_object_get(v, "path"));
        const char *m = json_string_value(json_object_get(v, "message"));
        printf("failed:  %s: %s\n", p ? p : "?", m ? m : "?");
    }
    plate_grid_free(&g);
}

int cmd_status(int argc, char **argv)
{
    struct cli_args o;
    int r = cli_parse_args(argc, argv, "status", 0, &o);
    if (r)
        return r;
    if (o.noperands != 1)
        return cli_usage_error("status needs exactly one MOUNTPOINT");
    const char *mnt = o.operands[0];
    json_t *doc;
    r = read_status_doc(mnt, &doc);
    if (r)
        return r;
    json_t *rois = json_object_get(doc, "rois"), *chunks = json_object_get(doc, "chunks");
    long long total = json_count(rois, "total"), done = json_count(rois, "done"),
              failed = json_count(rois, "failed"), running = json_count(rois, "running"),
              pending = json_count(rois, "pending"), calls = json_count(doc, "calls");
    json_t *up = json_object_get(doc, "uptime");
    double uptime = json_is_number(up) ? json_number_value(up) : -1;
    char took[24];
    cli_format_duration(uptime, took, sizeof took);
    printf("mount:   %s%s%s%s\n", mnt, uptime >= 0 ? " (up " : "", uptime >= 0 ? took : "",
           uptime >= 0 ? ")" : "");
    printf("ROIs:    %lld of %lld done (%d%%), %lld running, %lld pending, %lld failed\n", done,
           total, total ? (int)(100 * done / total) : 100, running, pending, failed);
    if (uptime > 0) {
        double rate = (double)calls / uptime;
        printf("rate:    %.2f ROIs/s since the mount (%lld processor calls)", rate, calls);
        if (rate > 0 && pending + running > 0) {
            char left[24];
            cli_format_duration((double)(pending + running) / rate, left, sizeof left);
            printf(", about %s left for the rest", left);
        }
        printf("\n");
    }
    printf("chunks:  %lld of %lld computed (%lld in the grid)\n", json_count(chunks, "cached"),
           json_count(chunks, "present"), json_count(chunks, "total"));
    json_t *res = json_object_get(doc, "results");
    if (json_is_object(res))
        printf("results: %lld reused from the cache (not computed again), %lld computed by this "
               "mount, %lld stored\n",
               json_count(res, "reused"), json_count(res, "computed"), json_count(res, "stored"));
    if (json_is_object(json_object_get(doc, "wells")))
        print_plate(doc);
    print_failures(json_object_get(doc, "errors"));
    json_decref(doc);
    return 0;
}
