/* arrayset_state.c: what arrayset.c (one image) and arrayset_plate.c (a plate's images) both
 * do with the array set's state (see arrayset_state.h): push an array, open an image's label
 * overlay with its levels and table, and count a level for the status. */
#include "arrayset_state.h"

#include <stdlib.h>

#include "otable.h"
#include "overlay.h"

void arrayset_push(struct arrayset *s, struct array a)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->arrays = xrealloc(s->arrays, s->cap * sizeof *s->arrays);
    }
    s->arrays[s->n++] = a;
}

int arrayset_open_overlay(struct arrayset *s, size_t first, const struct engine_opts *eo,
                          struct overlay **ov, struct otable **tab, struct errbuf *err)
{
    int r = overlay_build(s->arrays[first].task, s->overwrite, ov, err);
    if (r < 0)
        return r;
    s->arrays[first].level = overlay_array_level(*ov, 0);
    for (size_t i = 1; i < overlay_narrays(*ov); i++)
        arrayset_push(s, (struct array){.task = overlay_array_task(*ov, i),
                                        .opts = *eo,
                                        .level = overlay_array_level(*ov, i)});
    if (s->arrays[first].task->cfg.table_name) {
        r = otable_new(*ov, tab, err);
        if (r == 0 && s->arrays[first].task->cfg.measure) { /* each chunk's partial as made */
            s->arrays[first].opts.chunk_made = otable_chunk_made;
            s->arrays[first].opts.chunk_made_ctx = *tab;
        }
    }
    return r;
}

json_t *arrayset_level_status(const struct array *a)
{
    struct engine_progress p;
    engine_progress(a->engine, &p);
    return json_pack("{s:i, s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I}, s:I}", "level", a->level, "rois",
                     "total", (json_int_t)p.rois_total, "done", (json_int_t)p.rois_done, "failed",
                     (json_int_t)p.rois_failed, "chunks", "total", (json_int_t)p.chunks_total,
                     "present", (json_int_t)p.chunks_present, "cached", (json_int_t)p.chunks_cached,
                     "calls", (json_int_t)p.calls);
}
