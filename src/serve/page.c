/* page.c: the status page `roifs serve` answers at `/` (docs/serve.md): plain HTML that the
 * browser reloads every few seconds (a meta refresh, no script), with the ROI and chunk counts,
 * the rate, the recent errors, and the chunk grid of the computed array as an SVG picture, one
 * square per chunk coloured by its state. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../plate/plate_grid.h"
#include "../task.h"
#include "../util.h"
#include "html.h"

/* The picture shows at most this many chunks (the first ones, in C order). */
#define PAGE_MAX_CELLS 16384
#define CELL           12

/* The state colours (docs/serve.md): no ROI, not computed, computing, done, failed. */
static const char *const colours[] = {"#ffffff", "#c8c8c8", "#f2b705", "#2e9e44", "#d62828"};

static json_int_t num(json_t *doc, const char *section, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(doc, section), key));
}

static void put_grid(struct html_buf *o, struct engine *e)
{
    const struct task *t = engine_task(e);
    int nd = t->out.ndim;
    uint64_t cols = nd > 0 ? t->grid[nd - 1] : 1;
    uint64_t n = t->nchunks < PAGE_MAX_CELLS ? t->nchunks : PAGE_MAX_CELLS;
    if (cols == 0)
        cols = 1;
    if (cols > 128)
        cols = 128;
    uint64_t rows = (n + cols - 1) / cols;
    size_t count[5] = {0};
    struct html_buf cells = {0};
    for (uint64_t id = 0; id < n; id++) {
        int s = task_chunk_present(t, id) ? 1 + (int)engine_chunk_state(e, id) : 0;
        count[s]++;
        html_put(&cells, "<rect class=\"s%d\" x=\"%llu\" y=\"%llu\" width=\"%d\" height=\"%d\"/>",
                 s, (unsigned long long)(id % cols * CELL), (unsigned long long)(id / cols * CELL),
                 CELL - 1, CELL - 1);
    }
    html_put(o,
             "<h2>Chunks</h2><p id=\"legend\">"
             "<span class=\"k s1\"></span> not computed: <b id=\"n-idle\">%zu</b> "
             "<span class=\"k s2\"></span> computing: <b id=\"n-busy\">%zu</b> "
             "<span class=\"k s3\"></span> done: <b id=\"n-done\">%zu</b> "
             "<span class=\"k s4\"></span> failed: <b id=\"n-failed\">%zu</b> "
             "<span class=\"k s0\"></span> no ROI: %zu</p>\n",
             count[1], count[2], count[3], count[4], count[0]);
    if (n < t->nchunks)
        html_put(o, "<p>The first %llu of %llu chunks.</p>\n", (unsigned long long)n,
                 (unsigned long long)t->nchunks);
    html_put(o, "<svg id=\"grid\" width=\"%llu\" height=\"%llu\">%s</svg>\n",
             (unsigned long long)(cols * CELL), (unsigned long long)(rows * CELL),
             cells.buf ? cells.buf : "");
    free(cells.buf);
}

/* ---- a plate's map (docs/serve.md, The status page) ---- */

#define WELL  28 /* a well's square, px */
#define LABEL 32 /* the row names' column and the column names' row, px */

/* A well's state, as the chunk grid's classes: 1 not started, 2 computing, 3 done (every ROI
 * of every image: an image not opened yet has ROIs nobody knows), 4 failed (an image that
 * could not open, or a failed ROI). */
static int well_state(json_t *well, json_t *failed, const char *path)
{
    size_t plen = strlen(path), i;
    json_t *f;
    json_array_foreach(failed, i, f)
    {
        const char *fp = json_string_value(json_object_get(f, "path"));
        if (fp && strncmp(fp, path, plen) == 0 && fp[plen] == '/')
            return 4;
    }
    json_t *rois = json_object_get(well, "rois");
    json_int_t total = num(well, "rois", "total"), done = num(well, "rois", "done");
    if (json_integer_value(json_object_get(rois, "failed")) > 0)
        return 4;
    if (json_integer_value(json_object_get(well, "unread")) == 0 && done >= total)
        return 3;
    if (done > 0 || num(well, "rois", "running") > 0)
        return 2;
    return 1;
}

static void put_plate(struct html_buf *o, json_t *doc)
{
    json_t *wells = json_object_get(doc, "wells"), *failed = json_object_get(doc, "failed_images");
    struct plate_grid g; /* in the order roifs status draws them */
    plate_grid_of(wells, &g);
    const char **rows = g.rows, **cols = g.cols;
    size_t nr = g.nrows, nc = g.ncols;
    size_t count[5] = {0};
    struct html_buf cells = {0};
    for (size_t c = 0; c < nc; c++) {
        html_put(&cells, "<text x=\"%zu\" y=\"%d\" text-anchor=\"middle\">",
                 LABEL + c * WELL + WELL / 2, LABEL - 8);
        html_put_escaped(&cells, cols[c]);
        html_put(&cells, "</text>");
    }
    for (size_t r = 0; r < nr; r++) {
        html_put(&cells, "<text x=\"%d\" y=\"%zu\" text-anchor=\"end\">", LABEL - 8,
                 LABEL + r * WELL + WELL / 2 + 5);
        html_put_escaped(&cells, rows[r]);
        html_put(&cells, "</text>");
        for (size_t c = 0; c < nc; c++) {
            char *path = xasprintf("%s/%s", rows[r], cols[c]);
            json_t *w = json_object_get(wells, path);
            int st = w ? well_state(w, failed, path) : 0;
            count[st]++;
            html_put(&cells,
                     "<rect class=\"s%d\" x=\"%zu\" y=\"%zu\" width=\"%d\" height=\"%d\">"
                     "<title>",
                     st, LABEL + c * WELL, LABEL + r * WELL, WELL - 2, WELL - 2);
            html_put_escaped(&cells, path);
            if (w)
                html_put(&cells, ": %lld of %lld ROIs done", (long long)num(w, "rois", "done"),
                         (long long)num(w, "rois", "total"));
            html_put(&cells, "</title></rect>");
            free(path);
        }
    }
    json_t *im = json_object_get(doc, "images");
    html_put(o,
             "<h2>Plate</h2><p id=\"images\">images: %lld (%lld open, %lld done, %lld failed, "
             "%lld not opened yet)</p>\n<p id=\"legend\">wells: "
             "<span class=\"k s1\"></span> not started: <b id=\"n-idle\">%zu</b> "
             "<span class=\"k s2\"></span> computing: <b id=\"n-busy\">%zu</b> "
             "<span class=\"k s3\"></span> done: <b id=\"n-done\">%zu</b> "
             "<span class=\"k s4\"></span> failed: <b id=\"n-failed\">%zu</b></p>\n",
             (long long)json_integer_value(json_object_get(im, "total")),
             (long long)json_integer_value(json_object_get(im, "open")),
             (long long)json_integer_value(json_object_get(im, "done")),
             (long long)json_integer_value(json_object_get(im, "failed")),
             (long long)json_integer_value(json_object_get(im, "unread")), count[1], count[2],
             count[3], count[4]);
    html_put(o, "<svg id=\"plate\" width=\"%zu\" height=\"%zu\">%s</svg>\n", LABEL + nc * WELL,
             LABEL + nr * WELL, cells.buf ? cells.buf : "");
    free(cells.buf);
    plate_grid_free(&g);
}

char *serve_page(struct arrayset *s, bool listings, size_t *len)
{
    struct html_buf o = {0};
    json_t *doc = arrayset_status(s);
    /* a plate's images start and close as they are read: its map instead of a chunk grid */
    struct engine *e = arrayset_is_plate(s) ? NULL : arrayset_array(s, 0)->engine;
    double uptime = json_number_value(json_object_get(doc, "uptime"));
    json_int_t done = num(doc, "rois", "done"), total = num(doc, "rois", "total");
    double rate = uptime > 0
                      ? (double)json_integer_value(json_object_get(doc, "calls")) / uptime * 60.0
                      : 0.0;
    html_put(&o,
             "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
             "<meta http-equiv=\"refresh\" content=\"2\"><title>roifs: %lld/%lld ROIs</title>\n"
             "<style>body{font-family:sans-serif;margin:1em}td{padding:0 1em 0 0}"
             ".k{display:inline-block;width:10px;height:10px;border:1px solid #888}",
             (long long)done, (long long)total);
    for (int i = 0; i < 5; i++)
        html_put(&o, ".s%d{fill:%s;background:%s}", i, colours[i], colours[i]);
    html_put(&o, "</style></head><body>\n<h1>roifs serve</h1>\n<h2>ROIs</h2><table id=\"rois\">");
    static const char *const keys[] = {"total", "pending", "running", "done", "failed"};
    for (int i = 0; i < 5; i++)
        html_put(&o, "<tr><td>%s</td><td id=\"rois-%s\">%lld</td></tr>", keys[i], keys[i],
                 (long long)num(doc, "rois", keys[i]));
    html_put(&o,
             "</table>\n<p>processor calls: <b id=\"calls\">%lld</b>, %.1f per minute over %.0f s; "
             "chunks cached: <b id=\"cached\">%lld</b> of %lld</p>\n",
             (long long)json_integer_value(json_object_get(doc, "calls")), rate, uptime,
             (long long)num(doc, "chunks", "cached"), (long long)num(doc, "chunks", "present"));
    if (e)
        put_grid(&o, e);
    else if (arrayset_is_plate(s))
        put_plate(&o, doc);
    json_t *errors = json_object_get(doc, "errors");
    html_put(&o, "<h2>Recent errors</h2><ul id=\"errors\">");
    size_t i;
    json_t *er;
    json_array_foreach(errors, i, er)
    {
        html_put(&o, "<li>ROI %lld: ", (long long)json_integer_value(json_object_get(er, "roi")));
        const char *msg = json_string_value(json_object_get(er, "message"));
        html_put_escaped(&o, msg ? msg : "");
        json_t *at = json_object_get(er, "retry_at"); /* [process] retry_after */
        time_t when = (time_t)json_number_value(at);
        struct tm tm;
        char hms[16];
        if (at && when > time(NULL) && localtime_r(&when, &tm) &&
            strftime(hms, sizeof hms, "%H:%M:%S", &tm))
            html_put(&o, " <i>(not tried again before %s)</i>", hms);
        html_put(&o, "</li>");
    }
    html_put(&o, "</ul>\n<p><a href=\".roifs/status\">status (JSON)</a>%s</p></body></html>\n",
             listings ? " <a href=\"?ls\">files</a>" : "");
    json_decref(doc);
    *len = o.len;
    return o.buf;
}
