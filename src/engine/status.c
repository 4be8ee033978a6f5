/* status.c: the engine's part of the live status document of docs/mounted-tree.md, Status file
 * (MNT/.roifs/status), as JSON, from one engine_progress() snapshot and the recent errors. The set
 * of arrays adds "levels" and the FUSE side "fuse" (arrays/arrayset.c, fs/open.c). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "jobs.h"
#include "outcome.h"

/* True when the i-th recent error is its ROI's latest (lock held). */
static bool latest_of_its_roi(struct engine *e, size_t i)
{
    size_t roi = e->s.errors[(e->s.err_head + i) % ENGINE_MAX_ERRORS].roi;
    for (size_t j = i + 1; j < e->s.nerrors; j++)
        if (e->s.errors[(e->s.err_head + j) % ENGINE_MAX_ERRORS].roi == roi)
            return false;
    return true;
}

/* The recent errors, oldest first (a copy taken under the lock); a ROI's latest one, while
 * the ROI is failed, with "retry_at": when an open that needs it tries it again (seconds
 * since the epoch, to the millisecond; its failure plus [process] retry_after). */
static json_t *recent_errors(struct engine *e)
{
    json_t *errors = json_array();
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->s.nerrors; i++) {
        const struct engine_error *er = &e->s.errors[(e->s.err_head + i) % ENGINE_MAX_ERRORS];
        json_t *o = json_pack("{s:I, s:s}", "roi", (json_int_t)er->roi, "message", er->message);
        if (e->s.rois[er->roi].state == RS_FAILED && latest_of_its_roi(e, i)) {
            int64_t ms = engine_retry_at_ns(e, (uint32_t)er->roi) / 1000000;
            json_object_set_new(o, "retry_at", json_real((double)ms / 1000));
        }
        json_array_append_new(errors, o);
    }
    pthread_mutex_unlock(&e->lock);
    return errors;
}

/* t (seconds since the epoch) in UTC to the second, or null for 0. */
static json_t *iso_time(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    char buf[32];
    if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm))
        return json_null();
    return json_string(buf);
}

json_t *engine_status(struct engine *e)
{
    struct engine_progress p;
    engine_progress(e, &p);
    /* Whole milliseconds: a rate needs no more, and the JSON stays short. */
    double uptime = (double)(long long)(p.uptime * 1000) / 1000;
    json_t *doc = json_pack(
        "{s:{s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:I, s:o, s:{s:I, s:I, s:I, s:I}, s:f}",
        "rois", "total", (json_int_t)p.rois_total, "pending", (json_int_t)p.rois_pending, "running",
        (json_int_t)p.rois_running, "done", (json_int_t)p.rois_done, "failed",
        (json_int_t)p.rois_failed, "chunks", "total", (json_int_t)p.chunks_total, "present",
        (json_int_t)p.chunks_present, "cached", (json_int_t)p.chunks_cached, "calls",
        (json_int_t)p.calls, "errors", recent_errors(e), "queue", "demand",
        (json_int_t)p.queue_demand, "readahead", (json_int_t)p.queue_readahead, "chunk_jobs",
        (json_int_t)p.chunk_jobs, "elsewhere", (json_int_t)p.chunks_elsewhere, "uptime", uptime);
    if (p.cache_limited)
        json_object_set_new(
            doc, "cache",
            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "bytes", (json_int_t)p.cache_bytes,
                      "chunk_bytes", (json_int_t)p.cache_chunk_bytes, "result_bytes",
                      (json_int_t)p.cache_result_bytes, "max_size", (json_int_t)p.cache_max_size,
                      "evicted", (json_int_t)p.cache_evicted, "results_evicted",
                      (json_int_t)p.results_evicted));
    /* What this mount found and did: here, not in the attributes, which depend only on the
     * job (docs/mounted-tree.md, "Provenance"). */
    json_object_set_new(
        doc, "results",
        json_pack("{s:I, s:I, s:I, s:o, s:o, s:I, s:I}", "stored", (json_int_t)p.results_stored,
                  "reused", (json_int_t)p.results_reused, "cached_at_start",
                  (json_int_t)p.results_at_start, "made_from", iso_time(p.made_min), "made_until",
                  iso_time(p.made_max), "computed", (json_int_t)p.rois_computed, "damaged",
                  (json_int_t)p.results_damaged));
    json_object_set_new(doc, "started", iso_time(p.started_at));
    char *input_error = engine_input_error(e);
    if (input_error)
        json_object_set_new(doc, "input_error", json_string(input_error));
    free(input_error);
    return doc;
}
