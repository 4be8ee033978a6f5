/* mpython.h: [measure] python = FILE.py:FUNCTION (docs/measurements.md): the function called
 * once per object, in interpreters of the `python` processor's fork server (proc.h,
 * PROC_REQ_MEASURE), with the label image's crop over the object's box grown by halo (read by
 * the caller's function), the intensities of the same box channels first and the object's
 * description; its dict of feature name to number becomes columns (the same names for every
 * object). The values are kept in a record of their own. FUSE-free and engine-free. */
#ifndef ROIFS_MPYTHON_H
#define ROIFS_MPYTHON_H

#include <stddef.h>
#include <stdint.h>

#include "measure.h"

#define MPY_MAX_COLS 64 /* columns a function may give */
#define MPY_MAX_NAME 64 /* bytes of a column's name */

/* The features of every object: ncols names, n objects (ids sorted) of ncols values each. */
struct mpy_values {
    size_t ncols, n;
    char **names;
    uint64_t *ids;
    double *vals;
};
void mpy_values_free(struct mpy_values *v);

struct mpython;

/* The function of m's task's [measure] python, its interpreters started ([process]
 * interpreter, timeout and threads apply). -EINVAL "FILE:LINE: [measure] ..." for a function
 * that cannot be loaded or a halo of other dimensions. */
int mpython_new(const struct measure *m, struct mpython **out, struct errbuf *err);
/* What `check` can say without starting the interpreters: the halo's dimensions. 0 or -EINVAL
 * "FILE:LINE: [measure] halo ...". */
int mpython_check(const struct task *t, struct errbuf *err);
void mpython_free(struct mpython *p);
/* The name of the values' record: what they depend on besides the objects' pixels, which the
 * whole table's record (its file name, table_record) stands for: the function, its file's
 * content (as at mpython_new; _now: as it is now, for `clean`), the params and the halo.
 * _now: 0 or -EINVAL (the configuration). */
struct key128 mpython_record_key(const struct mpython *p, const char *table_record);
int mpython_record_key_now(const struct task *t, const char *table_record, struct key128 *out);

/* Reads the label image's box [start, start + shape) into dst (its dtype, C order). */
typedef int (*mpython_labels_fn)(void *ctx, const uint64_t *start, const uint64_t *shape, void *dst,
                                 struct errbuf *err);
/* Calls the function for every object of s in order of id (*calls counts the calls), but for
 * the objects whose id, boxes and crops are those of an object of the last table made in
 * cache_dir (NULL: none), whose values are taken from its record (mpyobj-<function>.rows,
 * then replaced by this table's). 0, or -EIO with err naming the object (an exception, a
 * reply that is no dict of numbers, names other than the first object's, a builtin column's
 * name). */
int mpython_run(struct mpython *p, const struct mstats *s, mpython_labels_fn labels, void *ctx,
                const char *cache_dir, struct mpy_values *out, uint64_t *calls, struct errbuf *err);

/* The record of the values (checksummed, written atomically): write; read (-ENOENT: none,
 * -EIO: damaged). */
int mpython_record_write(const struct mpy_values *v, int dirfd, const char *name);
int mpython_record_read(struct mpy_values *v, const char *path);

#endif
