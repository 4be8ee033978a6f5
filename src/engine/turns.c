/* turns.c: ROIs running at once shared round-robin by several engines (turns.h). */
#include "turns.h"

#include <pthread.h>
#include <stdlib.h>

#include "../util.h"

struct turns {
    pthread_mutex_t m;
    pthread_cond_t cv;
    int free;        /* turns nobody holds nor was granted */
    size_t n;        /* clients */
    size_t *waiting; /* each client's threads waiting for a turn not granted yet */
    size_t *granted; /* turns granted to each client, not yet taken by one of its threads */
    size_t next;     /* where the round goes on: the client after the last one served */
};

struct turns *turns_new(int n, size_t nclients)
{
    struct turns *t = xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->m, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->free = n > 0 ? n : 1;
    t->n = nclients ? nclients : 1;
    t->waiting = xcalloc(t->n, sizeof *t->waiting);
    t->granted = xcalloc(t->n, sizeof *t->granted);
    return t;
}

void turns_free(struct turns *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->m);
    pthread_cond_destroy(&t->cv);
    free(t->waiting);
    free(t->granted);
    free(t);
}

/* The free turns to the waiting clients, one each in round order (lock held). */
static void grant(struct turns *t)
{
    bool any = false;
    while (t->free > 0) {
        size_t k = 0;
        while (k < t->n && t->waiting[(t->next + k) % t->n] == 0)
            k++;
        if (k == t->n)
            break;
        size_t c = (t->next + k) % t->n;
        t->waiting[c]--;
        t->granted[c]++;
        t->free--;
        t->next = (c + 1) % t->n;
        any = true;
    }
    if (any)
        pthread_cond_broadcast(&t->cv);
}

void turns_take(struct turns *t, size_t c)
{
    pthread_mutex_lock(&t->m);
    t->waiting[c]++;
    grant(t);
    while (t->granted[c] == 0)
        pthread_cond_wait(&t->cv, &t->m);
    t->granted[c]--;
    pthread_mutex_unlock(&t->m);
}

void turns_give(struct turns *t)
{
    pthread_mutex_lock(&t->m);
    t->free++;
    grant(t);
    pthread_mutex_unlock(&t->m);
}
