/* warm.c: `roifs warm [-j N] CONFIG`: computes every ROI and chunk into the cache without a
 * mount; interruptible and resumable (finished work stays in the cache). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The chunks a reader of the whole array would open: those ROIs touch, or every chunk of the
 * grid when the input shows outside the ROIs; with [output] ome, those of every level, level
 * by level (*levels: the level of each). */
static uint64_t *present_chunks(const struct task *t0, size_t *n, int **levels)
{
    int nl = t0->nlevels > 1 ? t0->nlevels : 1;
    size_t total = 0;
    for (int l = 0; l < nl; l++) {
        const struct task *t = nl > 1 ? t0->levels[l] : t0;
        total += t->cfg.outside == OUTSIDE_INPUT ? (size_t)t->nchunks : roi_index_nchunks(t->index);
    }
    uint64_t *ids = xmalloc((total ? total : 1) * sizeof *ids);
    *levels = xmalloc((total ? total : 1) * sizeof **levels);
    *n = 0;
    for (int l = 0; l < nl; l++) {
        const struct task *t = nl > 1 ? t0->levels[l] : t0;
        bool all = t->cfg.outside == OUTSIDE_INPUT;
        size_t m = all ? (size_t)t->nchunks : roi_index_nchunks(t->index);
        for (size_t k = 0; k < m; k++) {
            (*levels)[*n] = l;
            ids[(*n)++] = all ? k : roi_index_chunk_id(t->index, k);
        }
    }
    return ids;
}

int cmd_warm(int argc, char **argv)
{
    int threads = 0, i = 1, r;
    if (argc > 2 && strcmp(argv[1], "-j") == 0) {
        if ((r = cli_parse_threads("warm", argv[2], &threads)))
            return r;
        i = 3;
    }
    if (argc - i != 1)
        return cli_usage_error("warm needs exactly one CONFIG%s", "");
    struct task *t;
    if ((r = cli_load_task(argv[i], &t)))
        return r;
    cli_set_threads(t, threads);
    log_open_stderr(false);
    struct cache *c = NULL;
    if ((r = cli_open_cache(t, &c))) {
        task_close(t);
        return r;
    }
    struct run_spec spec = {.verb = "warm"};
    int *levels;
    uint64_t *ids = present_chunks(t, &spec.n, &levels);
    spec.ids = ids;
    spec.levels = levels;
    r = run_chunks(t, c, &spec);
    free(ids);
    free(levels);
    cache_close(c);
    task_close(t);
    return r;
}
