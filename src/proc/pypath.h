/* pypath.h: where roifs's Python package (python/roifs, python/roifs_worker.py) is, and the
 * environment of the interpreters that import it (worker and python processors). */
#ifndef ROIFS_PYPATH_H
#define ROIFS_PYPATH_H

#include <stdbool.h>

/* $ROIFS_PYTHONPATH, else the source tree's python/ for a binary run from its build
 * directory, else the installed copy. malloc'd. */
char *pypath_dir(void);
/* environ without PYTHONPATH, ROIFS_PYTHONPATH and ROIFS_WORKER, plus ROIFS_PYTHONPATH and
 * PYTHONPATH with pypath_dir() first (and ROIFS_WORKER=1 for a worker). *env is malloc'd and
 * so are own[0..2] (NULL when unused); the caller frees them. */
void pypath_env(char ***env, char *own[3], bool worker);

#endif
