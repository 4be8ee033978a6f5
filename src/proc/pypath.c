/* pypath.c: where roifs's Python package is, and its interpreters' environment (pypath.h). */
#include "pypath.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../util.h"

extern char **environ;

char *pypath_dir(void)
{
    const char *set = getenv("ROIFS_PYTHONPATH");
    if (set && *set)
        return xstrdup(set);
#if defined(ROIFS_BUILD_ROOT) && defined(ROIFS_SOURCE_PYTHON)
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    size_t root = strlen(ROIFS_BUILD_ROOT);
    if (n > 0) {
        exe[n] = '\0';
        if (!strncmp(exe, ROIFS_BUILD_ROOT, root) && exe[root] == '/')
            return xstrdup(ROIFS_SOURCE_PYTHON);
    }
#endif
#ifdef ROIFS_INSTALLED_PYTHON
    return xstrdup(ROIFS_INSTALLED_PYTHON);
#else
    return xstrdup("/usr/local/share/roifs/python");
#endif
}

void pypath_env(char ***env, char *own[3], bool worker)
{
    char *dir = pypath_dir();
    const char *old = getenv("PYTHONPATH");
    own[0] = xasprintf("ROIFS_PYTHONPATH=%s", dir);
    own[1] =
        old && *old ? xasprintf("PYTHONPATH=%s:%s", dir, old) : xasprintf("PYTHONPATH=%s", dir);
    own[2] = worker ? xstrdup("ROIFS_WORKER=1") : NULL;
    free(dir);
    size_t n = 0, k = 0;
    while (environ && environ[n])
        n++;
    *env = xmalloc((n + 4) * sizeof **env);
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PYTHONPATH=", 11) &&
            strncmp(environ[i], "ROIFS_PYTHONPATH=", 17) &&
            strncmp(environ[i], "ROIFS_WORKER=", 13))
            (*env)[k++] = environ[i];
    for (int i = 0; i < 3; i++)
        if (own[i])
            (*env)[k++] = own[i];
    (*env)[k] = NULL;
}
