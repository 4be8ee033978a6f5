/* arrayset_plate.h: the array set of an HCS plate (arrayset_plate.c), as arrayset.c asks it:
 * opening, the tree, the images' engines, the tables, the generated files and the status.
 * Private to src/arrays/. */
#ifndef ROIFS_ARRAYSET_PLATE_H
#define ROIFS_ARRAYSET_PLATE_H

#include "arrayset_state.h"

int arrayset_open_plate(struct arrayset *s, const struct task *t, const struct engine_opts *eo,
                        bool lazy, struct errbuf *err);
uint64_t arrayset_plate_ptable_size(struct arrayset *s, uint64_t index, bool *exact);
int arrayset_plate_tree(struct arrayset *s, bool status, struct errbuf *err);
int arrayset_start_plate(struct arrayset *s, struct errbuf *err);
struct engine *arrayset_plate_engine(struct arrayset *s, size_t i, bool start);
struct engine *arrayset_plate_engine_get(struct arrayset *s, size_t i, bool start);
void arrayset_plate_engine_put(struct arrayset *s, size_t i);
/* A hold on array i's image about to be let go without waiting on any other work (an answered
 * open or table request calling back, a status read): an image started meanwhile waits for it
 * rather than exceed images_open. Let go with arrayset_plate_engine_put_ending. */
void arrayset_plate_engine_ending(struct arrayset *s, size_t i);
void arrayset_plate_engine_put_ending(struct arrayset *s, size_t i);
void arrayset_plate_table_request(struct arrayset *s, uint64_t index,
                                  void (*cb)(void *ctx, int err), void *ctx);
void arrayset_stop_plate(struct arrayset *s);
void arrayset_close_plate(struct arrayset *s);
struct otable *arrayset_plate_table(const struct arrayset *s, uint64_t index);
bool arrayset_plate_is_ptable(const struct arrayset *s, uint64_t index);
char *arrayset_plate_generated(const struct arrayset *s, uint64_t index);
json_t *arrayset_plate_status(struct arrayset *s);

#endif
