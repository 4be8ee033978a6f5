/* arrayset_state.h: the array set's state, shared by arrayset.c (one image) and
 * arrayset_plate.c (an HCS plate: the images of the plate, each an overlay of its own), and
 * what both do with it (arrayset_state.c). Below both: it names neither arrayset.h nor
 * arrayset_plate.h, so that calls run arrayset.c -> arrayset_plate.c -> here. Private to
 * src/arrays/. */
#ifndef ROIFS_ARRAYSET_STATE_H
#define ROIFS_ARRAYSET_STATE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

#include "../engine/engine.h"
#include "../tree/namespace.h"
#include "array.h"
#include "otable.h"
#include "overlay.h"
#include "ptable.h"

/* A plate's NS_GEN and NS_TABLE node indices: the image in the high bits, the file in the
 * low ones. */
#define ARRAYSET_FILE_BITS 32
#define ARRAYSET_FILE_MASK ((1ULL << ARRAYSET_FILE_BITS) - 1)

struct overlay_remote;
struct plate;
struct plate_image;

/* One image of a plate. */
struct set_image {
    const struct plate_image *pim; /* the plate's (t->plate) */
    struct task *task;             /* its own (task_open_image), NULL when failed */
    struct overlay *overlay;
    struct otable *table;
    struct pyramid *pyramid; /* ome = true: its computed image's levels */
    size_t first, n;         /* its arrays in the set */
    size_t uses;             /* holders of its engines (arrayset_engine_get) */
    size_t ending;           /* of them, those letting go without waiting on other work */
    uint64_t last_use;       /* when it was last got, in s->clock ticks */
    char *error;             /* why it failed, or NULL */
    /* closed after it was read (make_room): its level k's status then, which the plate's
     * status counts until it is open again */
    json_t *closed_status;
    bool opened;   /* its task was opened (or it failed): open_image ran */
    bool lazy_dir; /* its directory's files are added when first looked into */
    int dir;       /* its directory entry in the tree */
};

struct arrayset {
    struct array *arrays;
    size_t n, cap;
    struct pyramid *pyramid; /* [output] ome = true, else NULL */
    struct overlay *overlay; /* [output] ome = labels, else NULL */
    struct otable *table;    /* ome = labels with table_name, else NULL */
    struct ns *tree;
    bool overwrite; /* arrayset_opts.overlay_overwrite */
    /* an HCS plate (docs/plates.md): the plate task's plate and its selected images */
    const struct plate *plate;
    const struct task *plate_task;
    struct set_image *images;
    size_t nimages;
    struct ptable *ptable;        /* table_name: the plate's table (MNT/tables/NAME) */
    struct ptable_image *pimages; /* its images */
    pthread_mutex_t lazy;         /* a plate: images started when first needed */
    pthread_cond_t let_go;        /* a plate: an image's last use let go (under lazy) */
    bool started;                 /* arrayset_start was called */
    size_t nopen;                 /* images whose engines exist */
    uint64_t clock;               /* ticks of arrayset_engine_get */
    struct plate_file *new_files; /* ome = true: the new plate's group files */
    size_t nnew_files;
    struct engine_opts eo;         /* a plate: each image's engine options */
    bool lazy_images;              /* a plate mount: images opened when first looked into */
    struct turns *turns;           /* a plate: its threads, shared by the images' engines */
    struct held_open *held;        /* a plate: opens not answered yet (under lazy), to withdraw */
    struct overlay_remote *remote; /* a remote plate's mount: its files (overlay_remote.h) */
};

/* Appends array a to the set. */
void arrayset_push(struct arrayset *s, struct array a);
/* ome = labels: the image's array `first` (its task, pushed) is the label image's level k,
 * the arrays after it its other levels (pushed here), *ov their overlay and *tab its table
 * (table_name). 0 or -errno with err set. */
int arrayset_open_overlay(struct arrayset *s, size_t first, const struct engine_opts *eo,
                          struct overlay **ov, struct otable **tab, struct errbuf *err);
/* One level's counters in the status document's "levels" (a new reference). */
json_t *arrayset_level_status(const struct array *a);

#endif
