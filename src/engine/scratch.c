/* scratch.c: buffers each compute thread keeps from one ROI or chunk to the next (the ROI's
 * input block, its result when there is a halo, a chunk's assembly buffer, a stored result
 * read back), so that a run of ROIs of one size allocates nothing. A buffer beyond
 * SCRATCH_KEEP is freed when it is given back: one huge ROI does not pin its memory. */
#include "scratch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "../util.h"

/* At most this much is kept per buffer and thread (4 buffers: 64 MiB per thread at most),
 * beside what glibc's heap keeps anyway (main.c: trim threshold 256 MiB). */
#define SCRATCH_KEEP ((size_t)16 << 20)

struct scratch {
    void *buf[SCRATCH_NSLOTS];
    size_t cap[SCRATCH_NSLOTS];
    bool busy[SCRATCH_NSLOTS];
};

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static bool scratch_ok; /* the key exists: without it, every buffer is malloc()ed and freed */

static void scratch_free(void *p)
{
    struct scratch *s = p;
    for (int i = 0; i < SCRATCH_NSLOTS; i++)
        free(s->buf[i]);
    free(s);
}

static void scratch_init(void)
{
    scratch_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

void *engine_scratch_get(enum scratch_slot slot, size_t n)
{
    pthread_once(&scratch_once, scratch_init);
    struct scratch *s = scratch_ok ? pthread_getspecific(scratch_key) : NULL;
    if (!s && scratch_ok) {
        s = xcalloc(1, sizeof *s);
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            s = NULL;
        }
    }
    if (!s || s->busy[slot]) /* a second user in one thread: a fresh buffer of its own */
        return xmalloc(n ? n : 1);
    if (s->cap[slot] < n || !s->buf[slot]) {
        free(s->buf[slot]); /* not realloc: the old contents are not wanted */
        s->buf[slot] = xmalloc(n ? n : 1);
        s->cap[slot] = n ? n : 1;
    }
    s->busy[slot] = true;
    return s->buf[slot];
}

void engine_scratch_put(enum scratch_slot slot, void *p)
{
    if (!p)
        return;
    struct scratch *s = scratch_ok ? pthread_getspecific(scratch_key) : NULL;
    if (!s || p != s->buf[slot] || !s->busy[slot]) {
        free(p);
        return;
    }
    s->busy[slot] = false;
    if (s->cap[slot] > SCRATCH_KEEP) {
        free(s->buf[slot]);
        s->buf[slot] = NULL;
        s->cap[slot] = 0;
    }
}
