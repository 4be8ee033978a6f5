/* builtin_int.h: the integer fast path of the elementwise builtins (add, multiply, threshold,
 * and copy as add 0), bit-identical to their conversion through double. */
#ifndef ROIFS_BUILTIN_INT_H
#define ROIFS_BUILTIN_INT_H

#include "proc.h"

enum builtin_int_op { BI_ADD, BI_MULTIPLY, BI_THRESHOLD };

/* Computes rq's n elements when the fast path is exact for them (inputs of at most 32 bits,
 * integer or bool outputs, a value that keeps every result exact: see builtin_int.c) and
 * returns true; false, with nothing written, for the double path to do. */
bool builtin_int_run(enum builtin_int_op op, double value, const struct proc_request *rq, size_t n);

#endif
