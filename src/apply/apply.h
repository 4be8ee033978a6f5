/* apply.h: `roifs apply` (docs/operations.md) as steps the command calls: the refusals and the
 * lock (check.c), the journal at the start and the plan (start.c), and the replacement of each
 * input file as its chunk is assembled, with bounded scratch (replace.c). The command
 * (cli/apply.c) runs the chunks through the engine and prints; nothing here calls it.
 * Functions return 0 or -errno with a message in err: -EINVAL when the application is refused
 * (bad usage or configuration), another -errno when it failed at run time. */
#ifndef ROIFS_APPLY_H
#define ROIFS_APPLY_H

#include <pthread.h>
#include <stdbool.h>

#include "../cache/cache.h"
#include "../task.h"
#include "journal.h"
#include "marker.h"
#include "plan.h"

typedef void apply_note_fn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The state of one application. */
struct apply {
    const char *config;
    struct task *t;
    struct cache *c;        /* the array's cache (the caller's) */
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
    apply_note_fn *note;  /* says a line to the user (what is done, what is odd) */
};

/* a ready for the task t of configuration config (a's until apply_free). */
void apply_init(struct apply *a, const char *config, struct task *t, apply_note_fn *note);
/* Releases everything a holds, the input's lock last, and closes t. */
void apply_free(struct apply *a);

/* The refusals (-EINVAL): the output must be the input array byte for byte in its encoding,
 * one array, writable, no chunk lost outside the ROIs, no other apply running on it (the lock
 * taken here), no unfinished application of another job (the input's marker); this job's
 * unfinished application names the cache to use (t->cache_dir changed). Turns readahead and
 * eviction off: what waits for its readers is the scratch. */
int apply_check(struct apply *a, struct errbuf *err);
/* With c the array's cache: reads the journal and decides: resume (reconciling what a kill
 * left between a journal record and a rename), begin (again: a new application over a
 * finished one), or nothing to do (*done, said). Then marks the input, pins it to its
 * original identities, finds the stored results, builds the plan and checks that what is
 * left can be finished. */
int apply_begin(struct apply *a, struct cache *c, bool again, bool *done, struct errbuf *err);
/* For the runner: chunk a->plan.order[k] is assembled in the cache (fd): replaces the input
 * files that may be replaced now, and drops the results no chunk still needs. */
int apply_chunk_ready(void *a, size_t k, int fd, const struct cache_chunk_meta *meta,
                      struct errbuf *err);
/* The progress: input files replaced, of total, and the scratch now. */
void apply_progress(struct apply *a, uint64_t *replaced, uint64_t *total, uint64_t *scratch);
/* Once every file is replaced: the journal's end, then the input's marker removed. */
int apply_finish(struct apply *a, struct errbuf *err);

/* For clean: -EINVAL (err set) when an unfinished application needs t's cache; drops the
 * input's marker that a kill after a finished journal left. */
int apply_refuse_unfinished(const struct task *t, struct errbuf *err);

/* Testing only (ROIFS_TEST_APPLY_KILL=POINT:N): kills the process the N-th time it reaches
 * POINT (begun, marker, tmp, intent, rename, replaced, compact, finished). */
void apply_fault_point(const char *point);

#endif
