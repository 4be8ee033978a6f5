/* test_turns.c: turns shared by several engines (src/engine/turns.c): never more held than
 * there are, and granted round-robin between the clients that wait, so that a client whose
 * threads keep asking does not starve the others. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "engine/turns.h"

struct run {
    struct turns *t;
    pthread_mutex_t m;
    int held, most;
    size_t order[64]; /* clients in the order their turns were taken */
    int n;
};

struct thread_arg {
    struct run *run;
    size_t client;
    int rounds;
};

static void *client_main(void *arg)
{
    struct thread_arg *a = arg;
    struct run *run = a->run;
    for (int i = 0; i < a->rounds; i++) {
        turns_take(run->t, a->client);
        pthread_mutex_lock(&run->m);
        run->held++;
        run->most = run->held > run->most ? run->held : run->most;
        if (run->n < 64)
            run->order[run->n++] = a->client;
        pthread_mutex_unlock(&run->m);
        usleep(2000);
        pthread_mutex_lock(&run->m);
        run->held--;
        pthread_mutex_unlock(&run->m);
        turns_give(run->t);
    }
    return NULL;
}

/* One turn, three clients: client 0 holds it while 1 and 2 queue up, and 0's second thread
 * asks again: the turn goes 1, 2, then 0, never twice in a row to a client while another
 * waits. */
static void test_round_robin(void)
{
    struct run run = {.t = turns_new(1, 3)};
    pthread_mutex_init(&run.m, NULL);
    turns_take(run.t, 0); /* held by the test, as client 0, while the others queue */
    pthread_t th[4];
    struct thread_arg args[4] = {{&run, 1, 4}, {&run, 2, 4}, {&run, 0, 4}, {&run, 0, 4}};
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(pthread_create(&th[i], NULL, client_main, &args[i]), 0);
    usleep(50000); /* every thread waiting */
    turns_give(run.t);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(run.most, 1);
    CHECK_EQ_INT(run.n, 16);
    /* while all three wait, the round is 1, 2, 0 (after 0, the last served) */
    for (int i = 0; i + 1 < 12; i++)
        CHECK(run.order[i] != run.order[i + 1] || run.order[i] == 0);
    CHECK(run.order[0] == 1 && run.order[1] == 2 && run.order[2] == 0);
    int per[3] = {0};
    for (int i = 0; i < 12; i++)
        per[run.order[i]]++;
    CHECK(per[1] == 4 && per[2] == 4); /* each served within the first 12 turns */
    pthread_mutex_destroy(&run.m);
    turns_free(run.t);
}

/* Two turns, eight threads of four clients: never more than two held at once. */
static void test_bound(void)
{
    struct run run = {.t = turns_new(2, 4)};
    pthread_mutex_init(&run.m, NULL);
    pthread_t th[8];
    struct thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct thread_arg){&run, (size_t)i % 4, 5};
        CHECK_EQ_INT(pthread_create(&th[i], NULL, client_main, &args[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    CHECK_EQ_INT(run.most, 2);
    pthread_mutex_destroy(&run.m);
    turns_free(run.t);
}

int main(void)
{
    RUN(test_round_robin);
    RUN(test_bound);
    return check_done();
}
