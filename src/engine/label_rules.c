/* label_rules.c: the rules of [labels] that every part of the engine asks about
 * (label_rules.h), from the values task_open resolved (t->labels): no configuration. */
#include "label_rules.h"

#include "../labels/ids.h"

bool engine_labels_mapping(const struct task *t)
{
    return t->labels.on && (t->labels.unique || t->labels.sequential);
}

bool engine_labels_sequential(const struct task *t)
{
    return engine_labels_mapping(t) && t->labels.sequential;
}

bool engine_labels_unique(const struct task *t)
{
    return engine_labels_mapping(t) && t->labels.unique;
}

uint64_t engine_labels_block(const struct task *t)
{
    return t->labels.block;
}

double engine_labels_iou(const struct task *t)
{
    return t->labels.iou;
}

bool engine_labels_stitching(const struct task *t)
{
    return engine_labels_mapping(t) && t->labels.stitch;
}

int engine_labels_check(const struct task *t, const void *out, size_t n, struct errbuf *err)
{
    /* a derived array (a pyramid level) has no [labels]: its rules are zeroed */
    return labels_check_values(&t->labels, &t->out.dtype, out, n, err);
}

bool engine_labels_locked(const struct task *t)
{
    return engine_labels_sequential(t) || engine_labels_stitching(t);
}

uint32_t engine_rois_last(const uint32_t *rois, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++)
        m = rois[i] > m ? rois[i] : m;
    return m;
}
