/* arrayset_plate_status.c: the status of a plate's array set (docs/plates.md, the status
 * file): every image's engine status summed, per well and for the plate, with the images'
 * counts (total, ready, done, failed, open, unread), the failed images and the [measure]
 * counts. An open image is held while its status is read; a closed one counts as its engine
 * last was. */
#include <jansson.h>

#include "../plate/plate.h"
#include "arrayset_plate.h"

static void add_int(json_t *obj, const char *key, json_int_t v)
{
    json_t *was = json_object_get(obj, key);
    json_object_set_new(obj, key, json_integer(json_integer_value(was) + v));
}

/* Adds the numbers of an engine's section ("rois", "chunks") into sum's. */
static void add_counts(json_t *sum, json_t *doc, const char *section)
{
    json_t *from = json_object_get(doc, section), *to = json_object_get(sum, section);
    if (!to)
        json_object_set_new(sum, section, to = json_object());
    const char *key;
    json_t *v;
    json_object_foreach(from, key, v)
    {
        if (json_is_integer(v))
            add_int(to, key, json_integer_value(v));
    }
}

/* [measure]: the images' counts summed (docs/plates.md), as one image's status has them. */
static void add_measure_counts(struct arrayset *s, json_t *doc)
{
    struct otable_measure_counts sum = {0}, mc;
    bool any = false;
    for (size_t k = 0; k < s->nimages; k++) {
        pthread_mutex_lock(&s->lazy); /* an image opened meanwhile (fill_locked) */
        struct otable *table = s->images[k].table;
        pthread_mutex_unlock(&s->lazy);
        if (table && otable_measure_counts(table, &mc)) {
            any = true;
            sum.objects += mc.objects, sum.pieces += mc.pieces;
            sum.pieces_recorded += mc.pieces_recorded, sum.failed += mc.failed;
        }
    }
    if (any)
        json_object_set_new(doc, "measure",
                            json_pack("{s:I, s:I, s:I, s:I}", "objects", (json_int_t)sum.objects,
                                      "pieces", (json_int_t)sum.pieces, "pieces_from_record",
                                      (json_int_t)sum.pieces_recorded, "failed",
                                      (json_int_t)sum.failed));
}

json_t *arrayset_plate_status(struct arrayset *s)
{
    json_t *doc = json_object(), *errors = json_array(), *failed = json_array(),
           *wells = json_object();
    json_object_set_new(doc, "rois", json_object());
    json_object_set_new(doc, "chunks", json_object());
    json_object_set_new(doc, "calls", json_integer(0));
    size_t ready = 0, done = 0, nfailed = 0, unread = 0;
    for (size_t w = 0; w < s->plate->nwells; w++)
        json_object_set_new(wells, s->plate->wells[w], json_pack("{s:{}}", "rois"));
    for (size_t k = 0; k < s->nimages; k++) {
        struct set_image *im = &s->images[k];
        json_t *well = json_object_get(wells, im->pim->well);
        struct engine *eng = NULL; /* held while its status is read: not closed meanwhile */
        pthread_mutex_lock(&s->lazy);
        bool opened = im->opened;
        if (opened && !im->error && im->n && (eng = s->arrays[im->first].engine)) {
            im->uses++; /* a status read waits on no other work */
            im->ending++;
        }
        /* closed since it was read: as its engine was then (close_image replaces it) */
        json_t *closed = eng ? NULL : json_incref(im->closed_status);
        pthread_mutex_unlock(&s->lazy);
        if (!opened) { /* nothing looked into it yet: its ROIs are not known */
            unread++;
            add_int(well, "unread", 1);
            continue;
        }
        if (im->error) {
            nfailed++;
            json_array_append_new(failed, json_pack("{s:s, s:s}", "path", im->pim->path_in_plate,
                                                    "message", im->error));
            continue;
        }
        ready++;
        if (!eng && !closed) { /* not read yet: its ROIs, none known computed until it is */
            json_int_t n = (json_int_t)im->task->rois.n;
            json_t *e =
                json_pack("{s:{s:I, s:I, s:I, s:I, s:I}}", "rois", "total", n, "pending", n,
                          "running", (json_int_t)0, "done", (json_int_t)0, "failed", (json_int_t)0);
            add_counts(doc, e, "rois");
            add_counts(well, e, "rois");
            json_decref(e);
            continue;
        }
        json_t *e = eng ? engine_status(eng) : closed;
        add_counts(doc, e, "rois");
        add_counts(doc, e, "chunks");
        add_counts(well, e, "rois");
        add_int(doc, "calls", json_integer_value(json_object_get(e, "calls")));
        json_t *rois = json_object_get(e, "rois");
        if (json_integer_value(json_object_get(rois, "done")) ==
            json_integer_value(json_object_get(rois, "total")))
            done++;
        size_t i;
        json_t *er;
        json_array_foreach(json_object_get(e, "errors"), i, er)
        {
            json_t *c = json_deep_copy(er);
            json_object_set_new(c, "image", json_string(im->pim->path_in_plate));
            json_array_append_new(errors, c);
        }
        json_decref(e);
        if (eng)
            arrayset_plate_engine_put_ending(s, im->first);
    }
    json_object_set_new(doc, "errors", errors);
    /* at one moment: counted image by image, one closed and another started meanwhile would
     * both count */
    pthread_mutex_lock(&s->lazy);
    size_t open = s->nopen;
    pthread_mutex_unlock(&s->lazy);
    json_object_set_new(doc, "images",
                        json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "total", (json_int_t)s->nimages,
                                  "ready", (json_int_t)ready, "done", (json_int_t)done, "failed",
                                  (json_int_t)nfailed, "open", (json_int_t)open, "unread",
                                  (json_int_t)unread));
    json_object_set_new(doc, "failed_images", failed);
    json_object_set_new(doc, "wells", wells);
    add_measure_counts(s, doc);
    return doc;
}
