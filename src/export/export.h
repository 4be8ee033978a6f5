/* export.h: the tree of a set of arrays written as plain files into a directory (`roifs
 * export`), and with --into (into.c) an overlay's label image and table into an OME-Zarr
 * image. The command (cli/export.c) drives the chunks through the engines; this module says
 * what to write and writes it. */
#ifndef ROIFS_EXPORT_H
#define ROIFS_EXPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../arrays/arrayset.h"
#include "../cache/cache.h"
#include "../task.h"
#include "../tree/namespace.h"
#include "../util.h"

/* The name of DEST's marker: which configuration and input its files are made of. */
#define EXPORT_MARKER ".roifs-export"

struct export_meta;

/* One export into a directory: what the tree lists (chunk files and metadata) and what was
 * written. Every file appears by rename of a complete temporary copy beside it. */
struct export
{
    const char *dest;
    int destfd;
    uint64_t *ids; /* the chunks to write, in the order the tree lists them */
    int *arrays;   /* the array of the set each belongs to */
    char **rel;    /* their paths under dest */
    size_t n, cap;
    struct export_meta *meta; /* the metadata files, written last */
    size_t nmeta;
    atomic_size_t written, kept; /* chunk files written; kept from an earlier run */
    _Atomic bool warned_xattr;
    /* Says something to the user while the chunks run (a line; NULL: stderr). */
    void (*warn)(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
};

/* x made ready to write into dest (destfd -1 until export_open_dest). */
void export_init(struct export *x, const char *dest,
                 void (*warn)(const char *fmt, ...) __attribute__((format(printf, 1, 2))));
/* Frees the listing and closes dest. */
void export_close(struct export *x);

/* Opens DEST (creating it), which must be new, empty, or an earlier export of t's
 * configuration and input (its marker says so; it is written when DEST was empty), and takes
 * the marker's lock against a second export into it (*lock: its descriptor, the caller's to
 * close). 0; -EINVAL when DEST may not be used; another -errno. err set. */
int export_open_dest(struct export *x, const struct task *t, int *lock, struct errbuf *err);

/* Lists directory ino of the tree ns into x (its chunk files and metadata), creating its
 * subdirectories under dest and removing what an interrupted export left half-written. */
int export_list(struct export *x, const struct ns *ns, uint64_t ino, struct errbuf *err);
/* The whole tree of s, as a mount shows it without .roifs, its provenance attributes saying
 * what the caches held when the export started. */
int export_list_set(struct export *x, struct arrayset *s, struct errbuf *err);

/* For the runner: chunk x->ids[k] is in the cache (fd, borrowed; meta its record or NULL).
 * The resume rule: a chunk file already in dest is kept when its record names exactly what
 * meta says and its bytes verify; any other is written again, with its record attached. */
int export_chunk_ready(void *x, size_t k, int fd, const struct cache_chunk_meta *meta,
                       struct errbuf *err);
/* The metadata files, last (those already as they should be are left alone): until they are
 * there, dest is not mistaken for a complete array. */
int export_write_metadata(struct export *x, struct errbuf *err);
/* dest/rel made to hold exactly data (len bytes), by rename of a complete copy. */
int export_write_file(struct export *x, const char *rel, const void *data, size_t len,
                      struct errbuf *err);

#endif
