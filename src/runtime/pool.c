/*
 * pool.c — persistent worker threads with a generation counter for start
 * and a sense-reversing spin-then-sleep barrier between kernels. Spinning
 * briefly keeps the per-kernel barrier cheap (kernels are microseconds to
 * milliseconds); falling back to a condition variable keeps idle ranks from
 * burning a core that another rank needs.
 */
#include "runtime/pool.h"

#include <sched.h>
#include <stdatomic.h>

#include "util/common.h"

struct pipit__pool {
    int nth;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* work dispatch */
    uint64_t generation;   /* bumped per run, under mu */
    int quit;
    pipit__pool_fn fn;
    void *arg;
    int done;              /* workers finished this generation, under mu */
    pthread_cond_t done_cv;
    /* barrier */
    atomic_int bar_count;
    atomic_int bar_sense;
};

typedef struct {
    pipit__pool *p;
    int ith;
} worker_arg;

static void *worker_main(void *a) {
    worker_arg *wa = a;
    pipit__pool *p = wa->p;
    int ith = wa->ith;
    pipit__free(wa);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->generation == seen && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
        if (p->quit) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        seen = p->generation;
        pipit__pool_fn fn = p->fn;
        void *arg = p->arg;
        pthread_mutex_unlock(&p->mu);
        fn(arg, ith, p->nth);
        pthread_mutex_lock(&p->mu);
        if (++p->done == p->nth - 1) pthread_cond_signal(&p->done_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

pipit__pool *pipit__pool_new(int nth) {
    if (nth < 1) nth = 1;
    pipit__pool *p = pipit__calloc(1, sizeof *p);
    if (!p) return NULL;
    p->nth = nth;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->bar_count, 0);
    atomic_init(&p->bar_sense, 0);
    if (nth == 1) return p;
    p->threads = pipit__calloc((size_t)nth, sizeof *p->threads);
    if (!p->threads) goto fail;
    for (int i = 1; i < nth; i++) {
        worker_arg *wa = pipit__malloc(sizeof *wa);
        if (!wa) goto fail_started;
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            pipit__free(wa);
            goto fail_started;
        }
        continue;
    fail_started:
        p->nth = i; /* only threads 1..i-1 exist */
        pipit__pool_free(p);
        return NULL;
    }
    return p;
fail:
    pipit__free(p);
    return NULL;
}

void pipit__pool_free(pipit__pool *p) {
    if (!p) return;
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        p->quit = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 1; i < p->nth; i++) pthread_join(p->threads[i], NULL);
        pipit__free(p->threads);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    pipit__free(p);
}

int pipit__pool_size(const pipit__pool *p) { return p ? p->nth : 1; }

void pipit__pool_run(pipit__pool *p, pipit__pool_fn fn, void *arg) {
    if (p->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->done = 0;
    p->generation++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->nth);
    pthread_mutex_lock(&p->mu);
    while (p->done < p->nth - 1) pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void pipit__pool_barrier(pipit__pool *p) {
    if (!p || p->nth == 1) return;
    int sense = atomic_load_explicit(&p->bar_sense, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->nth - 1) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_store_explicit(&p->bar_sense, !sense, memory_order_release);
        return;
    }
    for (long spins = 0; atomic_load_explicit(&p->bar_sense, memory_order_acquire) == sense; spins++)
        if (spins > 2000) sched_yield();
}
