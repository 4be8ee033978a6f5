/* apply_internal.h: the state of one `roifs apply`, shared by apply.c (the run: replacing
 * input files, scratch) and apply_check.c (refusals, the journal at the start, the plan). */
#ifndef ROIFS_CLI_APPLY_INTERNAL_H
#define ROIFS_CLI_APPLY_INTERNAL_H

#include <pthread.h>

#include "../apply/journal.h"
#include "../apply/marker.h"
#include "../apply/plan.h"
#include "cli.h"

struct apply {
    const char *config;
    struct task *t;
    struct arrayset *set;   /* the one array: its cache, its engine while running */
    struct cache *c;        /* the array's cache */
    const char *input_path; /* the input array's directory */
    int infd;               /* its descriptor */
    int lockfd;             /* holds the lock that keeps a second apply of the input out */
    struct journal j;
    char job[33];               /* apply_job_id */
    struct apply_marker marker; /* the input's record of an unfinished application */
    struct apply_plan plan;
    bool *stored;    /* per ROI: its result was stored at the start */
    uint64_t *ready; /* room for every chunk: those plan_assembled made ready */
    char *results_dir;
    pthread_mutex_t lock; /* the plan, the journal, the counters below */
    bool failed;
    bool other_version_warned;
    uint64_t chunk_bytes; /* assembled chunk files waiting for their readers */
    uint64_t peak;        /* the most scratch seen: result store + those chunk files */
    uint64_t slack;       /* result store growth between compactions */
    uint64_t store_after_compaction;
    uint64_t array_bytes; /* decoded size of the array */
};

/* apply_start_journal's outcomes besides an exit status. */
#define APPLY_GO   (-1) /* go on: the plan and the run */
#define APPLY_DONE (-2) /* nothing to do (already applied): exit 0 */

/* The refusals of docs/operations.md (Writing the result in place), the lock on the input and its
 * record of an unfinished application (another job's refuses; this job's names the cache to use): 0
 * or EXIT_USAGE (message printed). */
int apply_check(struct apply *a);
/* Reads the journal and decides: resume, begin (again: a new application), or nothing to do
 * (printed). Reconciles what a kill left between a journal record and a rename. Before
 * APPLY_GO the input's marker names the application. APPLY_GO, APPLY_DONE or an exit status. */
int apply_start_journal(struct apply *a, bool again);
/* Pins the input to its original identities, finds the stored results, builds the plan and
 * checks that it can finish. 0 or an exit status. */
int apply_prepare(struct apply *a);
/* With the input an OME-Zarr image's level: says that the other levels are stale now. */
void apply_note_stale_levels(const struct task *t);
/* Removes the input's marker once the journal says the application finished: 0 or
 * EXIT_RUNTIME (printed). */
int apply_unmark(struct apply *a);
/* Testing only (ROIFS_TEST_APPLY_KILL): kills the process at a chosen step. */
void apply_fault_point(const char *point);

#endif
