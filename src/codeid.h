/* codeid.h: the files a processor runs (docs/design.md "What the processor identity covers"),
 * hashed once into the processor identity and looked at again around each run, so that a
 * result is only ever kept under the identity of the code that made it. */
#ifndef ROIFS_CODEID_H
#define ROIFS_CODEID_H

#include <stdint.h>

#include "config.h"
#include "util.h"

struct code_files;

/* Hashes the files cfg's processor runs (the plugin, a python processor's file and
 * interpreter, the words of a command or worker line that name code), remembering what each
 * was (device, inode, size, modification and change times). Never NULL. Until
 * code_files_end(cf, 0, ...) it counts as one run in flight: the processor's start, which may
 * load the code (a plugin, a python fork server). */
struct code_files *code_files_new(const struct config *cfg);
/* The identity's lines, "file PATH SIZE HASH\n" for each file. */
const char *code_files_lines(const struct code_files *cf);
void code_files_free(struct code_files *cf);

/* Before a run of the processor: 0 and *gen when its files are the code the identity names
 * (one whose status changed is hashed again), else -EIO "the processor's code FILE changed
 * while mounted; remount to use it". cf may be NULL (no files). */
int code_files_begin(struct code_files *cf, uint64_t *gen, struct errbuf *err);
/* After a run that code_files_begin allowed (gen its answer): 0 when no file changed since,
 * else -EIO: the run may have read other code, and its result must not be kept. With a
 * processor whose processes outlive a run (worker, python), such a change fails every later
 * run too, until remount; so does one while a plugin was loaded. A loaded plugin's runs look
 * at the file it loaded only (no system call at the begin, one at the end). */
int code_files_end(struct code_files *cf, uint64_t gen, struct errbuf *err);

#endif
