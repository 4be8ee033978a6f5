/* internal.h: what the files of src/apply/ share and no one else calls. */
#ifndef ROIFS_APPLY_INTERNAL_H
#define ROIFS_APPLY_INTERNAL_H

#include "apply.h"

/* Sets err to "CONFIG[:LINE]: [section] key: ..." (line: the key's, when the file sets it;
 * key NULL: none) and returns -EINVAL. */
int apply_refuse(const struct apply *a, struct errbuf *err, const char *section, const char *key,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Removes the input's marker once the journal says the application finished. */
int apply_unmark(struct apply *a, struct errbuf *err);

#endif
