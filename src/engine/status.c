/* status.c: the live status document of SPEC §6, served as MNT/.roifs/status. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "store.h"

char *engine_status_json(struct engine *e, const struct engine_mount_info *mi)
{
    const struct task *t = e->t;
    /* Whole milliseconds: a rate needs no more, and the JSON stays short. */
    double uptime = (double)(long long)(engine_uptime(e) * 1000) / 1000;
    pthread_mutex_lock(&e->lock);
    size_t total = t->rois.n;
    size_t pending = total - e->n_running - e->n_done - e->n_failed;
    uint64_t present =
        t->cfg.outside == OUTSIDE_INPUT ? t->nchunks : (uint64_t)roi_index_nchunks(t->index);
    json_t *errors = json_array();
    for (size_t i = 0; i < e->nerrors; i++) {
        const struct engine_error *er = &e->errors[(e->err_head + i) % ENGINE_MAX_ERRORS];
        json_array_append_new(
            errors, json_pack("{s:I, s:s}", "roi", (json_int_t)er->roi, "message", er->message));
    }
    json_t *doc = json_pack(
        "{s:{s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:I, s:o, s:{s:I, s:I, s:I, s:I}, s:f}",
        "rois", "total", (json_int_t)total, "pending", (json_int_t)pending, "running",
        (json_int_t)e->n_running, "done", (json_int_t)e->n_done, "failed", (json_int_t)e->n_failed,
        "chunks", "total", (json_int_t)t->nchunks, "present", (json_int_t)present, "cached",
        (json_int_t)e->n_cached, "calls", (json_int_t)t->proc->calls, "errors", errors, "queue",
        "demand", (json_int_t)e->demand.len, "readahead", (json_int_t)e->ahead.len, "chunk_jobs",
        (json_int_t)e->njobs, "elsewhere", (json_int_t)e->nremote, "uptime", uptime);
    if (e->evict) {
        uint64_t usage, max, evicted;
        evict_stats(e->evict, &usage, &max, &evicted);
        uint64_t chunk_bytes = evict_chunk_bytes(e->evict);
        json_object_set_new(doc, "cache",
                            json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "bytes", (json_int_t)usage,
                                      "chunk_bytes", (json_int_t)chunk_bytes, "result_bytes",
                                      (json_int_t)(usage - chunk_bytes), "max_size",
                                      (json_int_t)max, "evicted", (json_int_t)evicted,
                                      "results_evicted", (json_int_t)e->results_evicted));
    }
    size_t reused = e->n_reused, computed = e->n_computed, at_start = e->n_at_start;
    pthread_mutex_unlock(&e->lock);
    struct store_stats ss;
    store_get_stats(cache_store(e->c), &ss);
    json_object_set_new(doc, "results",
                        json_pack("{s:I, s:I, s:I, s:I, s:I}", "stored", (json_int_t)ss.results,
                                  "reused", (json_int_t)reused, "cached_at_start",
                                  (json_int_t)at_start, "computed", (json_int_t)computed, "damaged",
                                  (json_int_t)ss.damaged));
    if (t->nlevels > 1)
        json_object_set_new(doc, "levels", pyramid_status(e));
    char *input_error = engine_input_error(e);
    if (input_error)
        json_object_set_new(doc, "input_error", json_string(input_error));
    free(input_error);
    if (mi) {
        json_t *f = json_pack("{s:b, s:I}", "passthrough", mi->passthrough, "chunk_reads",
                              (json_int_t)mi->chunk_reads);
        if (!mi->passthrough && mi->passthrough_off)
            json_object_set_new(f, "passthrough_off", json_string(mi->passthrough_off));
        json_object_set_new(doc, "fuse", f);
        if (mi->watching) {
            json_t *w =
                json_pack("{s:I, s:I, s:I, s:I}", "dirs", (json_int_t)mi->watch_dirs, "unwatched",
                          (json_int_t)mi->watch_unwatched, "changes", (json_int_t)mi->watch_events,
                          "overflows", (json_int_t)mi->watch_overflows);
            if (mi->watch_warning)
                json_object_set_new(w, "warning", json_string(mi->watch_warning));
            json_object_set_new(doc, "watch", w);
        }
    }
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    json_decref(doc);
    size_t n = strlen(text);
    text = realloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}
