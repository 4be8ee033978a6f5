/* warm.c: `roifs warm [-j N|--jobs=N] CONFIG`: computes every ROI and chunk into the cache without
 * a mount; interruptible and resumable (finished work stays in the cache). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The chunks a reader of the whole tree would open, array by array: those ROIs touch, or
 * every chunk of the grid when the input shows outside the ROIs (*arrays: the array of
 * each). */
static uint64_t *present_chunks(const struct arrayset *s, size_t *n, int **arrays)
{
    size_t total = 0;
    for (size_t a = 0; a < arrayset_count(s); a++) {
        const struct task *t = arrayset_array(s, a)->task;
        total += (size_t)task_chunks_present(t);
    }
    uint64_t *ids = xmalloc((total ? total : 1) * sizeof *ids);
    *arrays = xmalloc((total ? total : 1) * sizeof **arrays);
    *n = 0;
    for (size_t a = 0; a < arrayset_count(s); a++) {
        const struct task *t = arrayset_array(s, a)->task;
        bool all = t->outside == OUTSIDE_INPUT;
        size_t m = (size_t)task_chunks_present(t);
        for (size_t k = 0; k < m; k++) {
            (*arrays)[*n] = (int)a;
            ids[(*n)++] = all ? k : roi_index_chunk_id(t->index, k);
        }
    }
    return ids;
}

int cmd_warm(int argc, char **argv)
{
    struct cli_args o;
    int r;
    if ((r = cli_parse_args(argc, argv, "warm", CLI_JOBS | CLI_WELLS, &o)))
        return r;
    if (o.noperands != 1)
        return cli_usage_error("warm needs exactly one CONFIG");
    struct task *t;
    if ((r = cli_load_task(o.operands[0], &t)))
        return r;
    if ((r = cli_narrow_wells(t, o.wells))) {
        task_close(t);
        return r;
    }
    log_open_stderr(false);
    struct arrayset *s = NULL;
    if ((r = cli_open_arrays(t, o.threads, false, &s))) {
        task_close(t);
        return r;
    }
    struct run_spec spec = {.verb = "warm"};
    int *arrays;
    uint64_t *ids = present_chunks(s, &spec.n, &arrays);
    spec.ids = ids;
    spec.arrays = arrays;
    r = run_chunks(s, &spec);
    free(ids);
    free(arrays);
    arrayset_close(s);
    task_close(t);
    return r;
}
