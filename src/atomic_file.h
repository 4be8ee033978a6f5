/* atomic_file.h: the one way roifs writes a file that readers must see whole or not at all: a
 * temporary file beside it that the caller fills (data, extended attributes), then a rename
 * over the name. Used by file_write_atomic (util.h), the cache's chunk files and their sidecar
 * records, export's files and `roifs apply`'s input files and marker. */
#ifndef ROIFS_ATOMIC_FILE_H
#define ROIFS_ATOMIC_FILE_H

#include <stdbool.h>
#include <sys/types.h>

#define ATOMIC_PATH_MAX 4096

/* atomic_commit's flags */
#define ATOMIC_FSYNC     1u /* the file's data made durable before the rename */
#define ATOMIC_FSYNC_DIR 2u /* the directory made durable after it */
#define ATOMIC_OVER_DIR  4u /* an empty directory left at the name is removed for the rename */

struct atomic_file {
    int dirfd;                  /* borrowed */
    int fd;                     /* the temporary file, open for writing; -1 once closed */
    bool made;                  /* the temporary file is there, ours to remove */
    char name[ATOMIC_PATH_MAX]; /* the final name, relative to dirfd */
    char tmp[ATOMIC_PATH_MAX];  /* the temporary file's */
};

/* Opens the temporary file for dirfd/name with mode: tmp (relative to dirfd: a writer alone,
 * as under a lock; an existing file of that name is truncated) or, when tmp is NULL, a new
 * file beside name (in its directory) named prefix, the process id and a counter. No link is
 * followed. Returns 0 or -errno (nothing left behind). */
int atomic_begin(struct atomic_file *a, int dirfd, const char *name, const char *tmp,
                 const char *prefix, mode_t mode);
/* Closes the temporary file (after an fsync with ATOMIC_FSYNC); again: nothing. 0 or -errno. */
int atomic_close(struct atomic_file *a, unsigned flags);
/* Closes the file as atomic_close does, renames it over the name, then with ATOMIC_FSYNC_DIR
 * makes the name's directory durable. 0 or -errno; on failure the temporary file stays for
 * the caller's atomic_abort (or, renamed or not, for a journal to account for). */
int atomic_commit(struct atomic_file *a, unsigned flags);
/* Closes the temporary file and removes it (unless renamed, or never made: atomic_begin
 * failed). */
void atomic_abort(struct atomic_file *a);

/* fsync of the directory of dirfd/name ("." when name has no '/'). 0 or -errno. */
int fsync_dir_of(int dirfd, const char *name);

#endif
