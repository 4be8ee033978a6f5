/* roifs/plugin.h: the C plugin interface of roifs (`[process] plugin = libf.so`,
 * docs/processors.md, A C plugin). A plugin is a shared library that exports one function,
 * roifs_plugin(), describing it.
 *
 *   #include <roifs/plugin.h>
 *   static int my_process(void *state, const struct roifs_roi *roi, const void *in, void *out,
 *                         char *err, size_t errlen) { ... return 0; }
 *   static const struct roifs_plugin plugin = {
 *       .abi = ROIFS_PLUGIN_ABI, .name = "my", .process = my_process};
 *   const struct roifs_plugin *roifs_plugin(void) { return &plugin; }
 *
 * Build: cc -shared -fPIC -o libmy.so my.c
 *
 * roifs loads the library once, checks `abi`, calls init() once with the `param.*` pairs
 * (before it forks into the background: do not start threads in init), then process() for
 * each ROI from several threads at once, and fini() at the end. */
#ifndef ROIFS_PLUGIN_H
#define ROIFS_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever struct roifs_plugin, struct roifs_roi or struct roifs_param change in an
 * incompatible way; roifs refuses a plugin built for another version. `abi` stays the first
 * member of struct roifs_plugin in every version. */
#define ROIFS_PLUGIN_ABI 1

/* One `param.NAME = VALUE` of the configuration, as written (VALUE is not parsed). */
struct roifs_param {
    const char *name;
    const char *value;
};

/* One ROI handed to process(): the ROI box and its read region (the box grown by `halo` and
 * clipped to the array). `in` holds the read region, `out` receives a result of the same
 * shape; both C order, native (little-endian) byte order. */
struct roifs_roi {
    size_t index; /* ROI index: its 0-based line in the ROI list */
    int ndim;
    const uint64_t *start; /* ROI box, ndim values each, stop exclusive */
    const uint64_t *stop;
    const uint64_t *in_start; /* read region */
    const uint64_t *in_shape;
    const char *in_dtype; /* numpy typestr: "|u1", "<u2", "<i4", "<f4", "<f8", "|b1", ... */
    const char *out_dtype;
    size_t in_itemsize; /* bytes per element */
    size_t out_itemsize;
    size_t nelems;     /* elements of the read region: product of in_shape */
    size_t in_nbytes;  /* nelems * in_itemsize */
    size_t out_nbytes; /* nelems * out_itemsize */
    /* A masked ROI's label (docs/masks.md), 0 for any other ROI. Added at the end in ABI 1: roifs
     * allocates this struct, so plugins built before it never read past out_nbytes. */
    uint64_t label;
};

struct roifs_plugin {
    int abi;          /* ROIFS_PLUGIN_ABI */
    const char *name; /* for messages */
    /* Optional. Called once with every param.*; may set *state, handed to process and fini.
     * Returns 0, or non-zero with a message in err (errlen bytes, NUL-terminated): the mount
     * is then refused. */
    int (*init)(const struct roifs_param *params, size_t nparams, void **state, char *err,
                size_t errlen);
    /* Required; called from several threads at once. Reads roi->in_nbytes bytes from in and
     * writes roi->out_nbytes bytes to out. Returns 0, or non-zero with a message in err: that
     * ROI fails (its chunks give EIO and the message shows in the status file). */
    int (*process)(void *state, const struct roifs_roi *roi, const void *in, void *out, char *err,
                   size_t errlen);
    /* Optional: releases what init made. */
    void (*fini)(void *state);
};

/* The one symbol roifs looks up (ROIFS_PLUGIN_SYMBOL). Must return a pointer that stays valid
 * until the library is unloaded. */
#define ROIFS_PLUGIN_SYMBOL "roifs_plugin"
const struct roifs_plugin *roifs_plugin(void);

#ifdef __cplusplus
}
#endif

#endif
