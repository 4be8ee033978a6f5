/* otable_measure.h: the table of ome = labels as otable.c and otable_measure.c share it
 * (otable.h): its state, the names of its records, and [measure]'s side (otable_measure.c: the
 * partials' records, the label chunks asked for by several threads, the names clean keeps).
 * Below otable.c: it names nothing of otable.h, and what otable_measure.c must tell otable.c
 * (a chunk's answer, one chunk fewer to wait for) comes as otable.c's callbacks, so that calls
 * run otable.c -> otable_measure.c only. Included by these two files only. */
#ifndef ROIFS_OTABLE_MEASURE_H
#define ROIFS_OTABLE_MEASURE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../engine/engine.h"
#include "../key.h"
#include "../map.h"
#include "../measure/measure.h"
#include "../measure/mpython.h"
#include "../table_write.h"
#include "overlay.h"

enum state { IDLE, RUNNING, DONE };

struct waiter {
    void (*cb)(void *ctx, int err); /* an otable_cb */
    void *ctx;
    struct waiter *next;
};

/* The bounding boxes seen so far: a map.h table from label to box (z, y, x). */
struct box {
    uint64_t lo[3], hi[3];
};

struct otable {
    const struct overlay *ov;
    struct overlay_geometry g;
    struct table_spec spec;
    char *region;
    struct table_files names; /* the files of a table of one row: the names and sizes */
    uint64_t nmax;            /* rows at most */
    pthread_mutex_t m;
    enum state state;
    struct waiter *waiters;
    size_t outstanding; /* chunks asked for and not answered yet, plus one while asking */
    bool failed;
    struct map boxes;         /* label -> struct box */
    struct key128 record_key; /* RUNNING: the key of the label chunks being scanned */
    /* The last table made (have_files), from the label chunks of files_key; DONE: they are the
     * chunks as they were at the last request, so its sizes are exact. */
    struct table_files files;
    bool have_files;
    struct key128 files_key;
    uint64_t scans, records;
    struct table_row *rows; /* the rows of files (have_files): a plate's table reads them */
    size_t nrows;
    /* [measure]: the table is the feature table of the merged partials (measure.h) */
    struct measure *ms;
    struct mstats stats;
    /* label chunks measured, and partials read from their records; objects of the last table
     * made; requests that failed */
    uint64_t pieces, pieces_recorded, objects, failures;
    /* label chunks whose partial was made as the engine made them (otable_chunk_made) */
    uint64_t pieces_made;
    /* [measure] python: the function, the values of the table being made, its calls */
    struct mpython *py;
    struct mpy_values pyvals;
    uint64_t pycalls;
    /* [output] table_name with [measure]: the masking table too, its rows from the merged
     * partials' boxes; its files (as names and files above) come after the feature table's */
    bool mask;
    struct table_spec mspec;
    struct table_files mnames, mfiles;
    /* [measure]: the rows of files (have_files), for a plate's feature table */
    uint64_t *fids;
    double *fvals;
    size_t fn;
    char **fcols; /* fvals' columns: the builtin ones, then python's (fncols of them) */
    size_t fncols;
};

/* A label chunk asked for: [measure] also names its partial's record. */
struct ask {
    struct otable *t;
    uint64_t id;
    struct key128 piece;
};

/* The record of the table made from the label chunks of t->record_key (malloc'd path). */
char *otable_record_path(const struct otable *t);
/* What the masking table's rows depend on: every chunk's key as it is now, the geometry. */
struct key128 otable_key_now(const struct overlay_geometry *g);

/* ---- otable_measure.c ---- */

void otable_stats_record_write(const struct otable *t);
int otable_stats_record_read(struct otable *t);
void otable_compact_chunk(const struct task *k, const uint64_t *ext, unsigned char *buf);
void otable_piece_write(const struct otable *t, struct key128 key, const struct mstats *piece);
struct key128 otable_piece_key_now(const struct otable *t, uint64_t id, const uint64_t *c0,
                                   const uint64_t *ext);
/* [measure]'s request without a record of the whole table: answered(ask) for each label chunk
 * asked for (a malloc'd struct ask, taken), release(t) once all are asked. */
void otable_start_measure(struct otable *t, engine_chunk_cb answered,
                          void (*release)(struct otable *t));
/* The partial recorded under key merged into t->stats (counted as read from its record):
 * false when there is none (or it is damaged). */
bool otable_piece_read(struct otable *t, struct key128 key);
int otable_measure_names_now(const struct overlay_geometry *g, struct map *keep);
/* Whether keep (otable_measure_names_now) holds the record named by 32 hexadecimal digits. */
bool otable_kept(const struct map *keep, const char *hex);
/* otable.h's, for the label image's engine (engine_opts.chunk_made); declared here too so that
 * otable.c, which includes both, has the compiler hold the two declarations alike. */
void otable_chunk_made(void *ctx, uint64_t id, struct key128 key, const void *data, size_t len);
/* [measure] python: the values of every object of t->stats into t->pyvals, from their record
 * (named by the whole table's and the function's) or by calling the function (then recorded
 * when record). False (logged) when a call failed. */
bool otable_python_values(struct otable *t, bool record);

#endif
