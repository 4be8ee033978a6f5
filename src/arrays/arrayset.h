/* arrayset.h: the arrays a mount, warm or export presents, and the tree of names they make.
 * Each array is a (task, cache, engine) with its own copy of the engine options and its place
 * in the tree: the configured array, and with [output] ome = true the pyramid's levels under
 * MNT/0, MNT/1, ... (pyramid.h). FUSE-free: the FUSE side, warm, export and the status file
 * ask it for array i, never an engine for another engine's levels. */
#ifndef ROIFS_ARRAYSET_H
#define ROIFS_ARRAYSET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../cache/cache.h"
#include "../engine/engine.h"
#include "../task.h"
#include "../tree/namespace.h"
#include "array.h"

struct arrayset_opts {
    /* > 0: the compute threads of every array (the command line's -j N) instead of [process]
     * threads; readahead follows them when the configuration leaves it to its default */
    int threads;
    bool status_file; /* the tree has .roifs/status (a mount) */
    /* ome = labels: a label or table of the configured name in the input is replaced, not
     * refused (`export --into --overwrite`) */
    bool overlay_overwrite;
    /* [process] retry_after when the configuration leaves it unset: 0 for mounts, warm and
     * export (a zero-initialised struct), 10 for `roifs serve` */
    double retry_after_unset;
};

struct arrayset;

/* Builds the arrays of t (borrowed: it must outlive the set), opens every array's cache and
 * builds the tree. No thread is started: a mount forks after this. -EINVAL (exit status 2)
 * with err set for a configuration or a cache directory roifs may not use, other -errno. */
int arrayset_open(struct task *t, const struct arrayset_opts *o, struct arrayset **out,
                  struct errbuf *err);
/* Creates the engines, array by array (an array's engine exists before that of an array
 * reading it). 0, or -errno with err set and no engine left running. */
int arrayset_start(struct arrayset *s, struct errbuf *err);
/* Destroys the engines, readers of an array before the array (every finished result is in
 * the caches). */
void arrayset_stop(struct arrayset *s);
/* Closes the caches and frees the derived arrays (after arrayset_stop); not the task. */
void arrayset_close(struct arrayset *s);

/* Array i's engine: a plate's images start their engines when first needed (start: now,
 * with every array of the image; NULL when it cannot, the log saying why once), so that a
 * plate's threads are those of the images read (docs/plates.md); without start, NULL for an
 * image not started. One image: array i's engine. */
struct engine *arrayset_engine(struct arrayset *s, size_t i, bool start);
/* arrayset_engine(s, i, start) held until arrayset_engine_put: a plate's image is not closed
 * ([mount] images_open: the least recently used idle image is, when another starts) while
 * anyone holds one of its engines. NULL (nothing held) when it is not started (without
 * start) or cannot start. */
struct engine *arrayset_engine_get(struct arrayset *s, size_t i, bool start);
void arrayset_engine_put(struct arrayset *s, size_t i);
/* engine_open_chunk of chunk id of array i, for every caller (FUSE opens, warm and export,
 * `roifs serve`): a plate's image is started when it is not, and held until both cb and
 * engine_open_chunk have returned (the engine may answer first and go on with read-ahead on
 * that image's engine), so that cb may use array i's engine and cache. When the image cannot
 * start (logged), cb(ctx, -EIO, -1, 0) before this returns. */
void arrayset_open_chunk(struct arrayset *s, size_t i, uint64_t id, engine_chunk_cb cb, void *ctx);

/* Withdraws an open of arrayset_open_chunk whose answer is not wanted any more (its reader
 * went away): true when it was still waiting, and then cb is never called (engine.h:
 * engine_withdraw_chunk); false when the answer is on its way or given. */
bool arrayset_withdraw_chunk(struct arrayset *s, size_t i, uint64_t id, engine_chunk_cb cb,
                             void *ctx);

size_t arrayset_count(const struct arrayset *s);
const struct array *arrayset_array(const struct arrayset *s, size_t i);
/* The presented tree; its chunk nodes name arrays by their index in the set. */
const struct ns *arrayset_tree(const struct arrayset *s);
/* A plate's set (docs/plates.md): arrays belong to images started when first needed. */
bool arrayset_is_plate(const struct arrayset *s);
/* [output] ome = labels: the tree holds files of the input, read through. */
bool arrayset_is_overlay(const struct arrayset *s);
/* ome = labels with table_name: the masking table its NS_TABLE nodes are files of. */
struct otable *arrayset_table(const struct arrayset *s);
/* NS_TABLE node index (a file of the masking table, or of a plate's: the index names the
 * image or the plate too): its size (exact, or an upper bound before it is made), a request
 * for its table as otable_request, and after one, a copy of its content (otable_copy). */
uint64_t arrayset_table_size(const struct arrayset *s, uint64_t index, bool *exact);
void arrayset_table_request(struct arrayset *s, uint64_t index, void (*cb)(void *ctx, int err),
                            void *ctx);
char *arrayset_table_copy(const struct arrayset *s, uint64_t index, size_t *len);
/* The content of NS_GEN node index (NULL: a failed image's file, which fails with EIO) as it is now
 * (malloc'd; its length in *len). */
char *arrayset_generated(const struct arrayset *s, uint64_t index, size_t *len);
/* The status document (docs/mounted-tree.md, Status file) for a started set: array 0's
 * engine_status, and with a pyramid "levels", each level's counters. A new reference. */
json_t *arrayset_status(struct arrayset *s);

/* [input] watch, for a started set: the input's storage files sids[0..n) changed (with all:
 * any may have). Every array forgets what depends on them (engine_input_changed), array after
 * array, a pyramid level after the level it reduces; fn(ctx, array, id) for each chunk of the
 * tree made stale. */
void arrayset_input_changed(struct arrayset *s, const uint64_t *sids, size_t n, bool all,
                            void (*fn)(void *ctx, int array, uint64_t id), void *ctx);
/* The input's metadata changed: every chunk of every array fails with EIO from now on, the
 * reason in the status ("input_error") and, once, the log. */
void arrayset_input_broken(struct arrayset *s, const char *reason);

#endif
