/* label.h: connected components of `in > value` over an N-dimensional block, numbered exactly
 * like scipy.ndimage.label with its default structure (faces connect). No FUSE, no engine. */
#ifndef ROIFS_LABEL_H
#define ROIFS_LABEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../dtype.h"
#include "../util.h"

/* The threshold `value` as written: an integer literal is kept exactly (no rounding of 64-bit
 * integers through double); anything else as the double it parses to. */
struct label_value {
    double real;   /* what float inputs compare with, after a cast to their type */
    bool integral; /* a decimal integer within ±(2^64 - 1): `negative` and `mag` exact */
    bool negative; /* integral: value = -mag */
    uint64_t mag;
};

/* Parses a number ("0", "-3", "18446744073709551615", "0.5", "1e3", "nan", "-inf").
 * 0 or -EINVAL. */
int label_value_parse(const char *text, struct label_value *out);

/* An N-dimensional block in C order, native byte order. */
struct label_block {
    int ndim; /* 1 .. ROIFS_MAX_DIM */
    const uint64_t *shape;
    struct dtype dtype;
};

struct label_run;
/* Working memory of label_run: runs of foreground per line and the union-find forest. Zero it
 * before the first use; reuse it across calls (by one thread at a time) to allocate nothing in
 * the steady state; release it with label_scratch_free. */
struct label_scratch {
    struct label_run *runs;
    size_t runs_cap;
    size_t *line_first; /* line i's runs are runs[line_first[i] .. line_first[i + 1]) */
    size_t lines_cap;
    uint32_t *parent; /* union-find over provisional labels; 0 is background */
    size_t parent_cap;
    uint8_t *mask; /* one line of `in > value` */
    size_t mask_cap;
};
void label_scratch_free(struct label_scratch *s);

/* Labels `in` (elements of blk.dtype) into `out` (the same shape, elements of out_dtype): 0 for
 * background, objects 1, 2, ... in C order of their first element. *count (may be NULL) gets
 * the number of objects. scratch may be NULL (then memory is allocated and freed inside).
 * 0; -EOVERFLOW when the count does not fit out_dtype exactly (nothing is written then);
 * -EFBIG when the block is too large to label; -ENOMEM. The message names the cause. */
int label_run(const struct label_block *blk, const void *in, const struct label_value *value,
              const struct dtype *out_dtype, void *out, struct label_scratch *scratch,
              size_t *count, struct errbuf *err);

/* The largest id out_dtype holds exactly (bool 1, uint8 255, float32 2^24, ...). */
uint64_t label_max_id(const struct dtype *out_dtype);

#endif
