/* Threads hammering one shared segment (src/_tokenbucket/shm*.c) with reservations, takes, cancels and
 * set_rates, each at the reading of a shared simulated clock that every operation moves on; afterwards the
 * merged log of grants must keep each rate's bound. Built also with -fsanitize=thread by tests/test_c_core.py:
 *
 *     cc -std=c11 -O2 -pthread -Isrc/_tokenbucket -Itests/c tests/c/test_shm_threads.c src/_tokenbucket/shm*.c \
 *        src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm && ./a.out */
#define _POSIX_C_SOURCE 200809L  /* pthread barriers under -std=c11 */

#include <pthread.h>
#include <string.h>

#include "shm.h"

#include "harness.h"
#include "shm_bound.h"

#define THREADS 4
#define OPS 50000     /* per thread */
#define PENDING 8     /* reservations a thread may hold to cancel */

/* A grant as a thread logged it. */
typedef struct {
    tb_ns at;
    double amount;
    bool cancelled;  /* before its instant: it never happened */
} entry;

/* One thread's work and what it saw. */
typedef struct {
    uint64_t rng;
    bool set_rates;                    /* also changes rate 0, between the two parameter sets below */
    entry log[OPS];
    size_t count;
    tb_shm_reservation pending[PENDING];
    size_t pending_entry[PENDING];
    size_t npending;
    unsigned long overtaken, restored, odd;  /* set_rates overtaken; cancels given back; unexpected statuses */
} worker;

static tb_shm *seg;
static _Atomic tb_ns simulated_now;
static pthread_barrier_t start;        /* every thread starts at once */
static const tb_shm_params RATES[2] = {{1000.0 / 3, 5, 5}, {700, 8, 0}};
static tb_shm_params other;            /* the second parameter set of rate 0 in set_rate runs */
static const tb_shm_params BURSTIER = {1000.0 / 3, 6, 0};  /* rate 0 with a larger burst */

// splitmix64 on the thread's own state.
static uint64_t next_random(worker *w)
{
    uint64_t z = (w->rng += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

// One operation at the clock's reading, which it moves on by up to 200 ns.
static void operate(worker *w)
{
    tb_ns now = atomic_fetch_add(&simulated_now, (tb_ns)(next_random(w) % 200));
    double amount = (double)(1 + next_random(w) % 8) / 2;
    uint64_t choice = next_random(w) % 100;
    if (choice < 45) {
        tb_shm_status taken = tb_shm_take_now(seg, amount, now);
        if (taken == TB_SHM_OK)
            w->log[w->count++] = (entry){now, amount, false};
        w->odd += taken != TB_SHM_OK && taken != TB_SHM_ETOOLATE;
    } else if (choice < 85) {
        tb_shm_reservation r;
        tb_ns deadline = next_random(w) % 4 ? now + (tb_ns)(next_random(w) % 5000) : TB_NEVER;
        tb_shm_status status = tb_shm_reserve(seg, amount, now, deadline, &r);
        w->odd += status != TB_SHM_OK && status != TB_SHM_ETOOLATE;
        if (status != TB_SHM_OK)
            return;
        w->log[w->count] = (entry){r.at, amount, false};
        if (w->npending < PENDING) {
            w->pending[w->npending] = r;
            w->pending_entry[w->npending++] = w->count;
        }
        w->count++;
    } else if (choice < 97 || !w->set_rates) {
        if (w->npending == 0)
            return;
        size_t k = next_random(w) % w->npending;
        w->restored += tb_shm_cancel(seg, &w->pending[k], now) > 0;
        if (now < w->pending[k].at)
            w->log[w->pending_entry[k]].cancelled = true;
        w->pending[k] = w->pending[--w->npending];
        w->pending_entry[k] = w->pending_entry[w->npending];
    } else {
        const tb_shm_params *p = next_random(w) % 2 ? &RATES[0] : &other;
        tb_shm_status status = tb_shm_set_rate(seg, 0, p->ns_per_token, p->burst, now);
        w->overtaken += status == TB_SHM_EAGAIN;
        w->odd += status != TB_SHM_OK && status != TB_SHM_EAGAIN;
        tb_shm_params live;
        w->odd += tb_shm_rate_params(seg, 0, &live) != TB_SHM_OK ||
                  !((live.ns_per_token == RATES[0].ns_per_token && live.burst == RATES[0].burst) ||
                    (live.ns_per_token == other.ns_per_token && live.burst == other.burst));
    }
}

static void *work(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(&start);
    for (int i = 0; i < OPS; i++)
        operate(w);
    return NULL;
}

// Runs the threads on a new segment of rates (set_rates: also changing rate 0 to and from other); returns
// the workers, whose logs the caller checks and frees.
static worker *hammer(uint32_t nrates, bool set_rates, uint64_t seed)
{
    seg = calloc(1, sizeof *seg);
    CHECK(seg != NULL && tb_shm_create(seg, sizeof *seg, nrates, RATES) == TB_SHM_OK);
    atomic_store(&simulated_now, 0);
    worker *workers = calloc(THREADS, sizeof *workers);
    pthread_t threads[THREADS];
    CHECK(workers != NULL && pthread_barrier_init(&start, NULL, THREADS) == 0);
    for (int t = 0; t < THREADS; t++) {
        workers[t].rng = seed * 1000 + (uint64_t)t;
        workers[t].set_rates = set_rates;
        CHECK(pthread_create(&threads[t], NULL, work, &workers[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++)
        CHECK(pthread_join(threads[t], NULL) == 0);
    pthread_barrier_destroy(&start);
    CHECK(tb_shm_check(seg) == 0);
    return workers;
}

// Checks rate i's bound over the merged logs of the workers; returns the grants counted.
static size_t bound_kept(const worker *workers, const tb_shm_params *rate)
{
    logged_grant *grants = malloc(THREADS * OPS * sizeof *grants);
    size_t n = 0;
    CHECK(grants != NULL);
    for (int t = 0; t < THREADS; t++)
        for (size_t k = 0; k < workers[t].count; k++)
            if (!workers[t].log[k].cancelled) {
                int64_t need = tb_ticks(workers[t].log[k].amount * rate->ns_per_token);
                grants[n++] = (logged_grant){workers[t].log[k].at, need > 0 ? need : 1};
            }
    int64_t excess = bound_excess(grants, n, tb_ticks(rate->burst * rate->ns_per_token));
    free(grants);
    CHECK(excess <= 0);
    return n;
}

// Sums a counter over the workers.
static unsigned long total(const worker *workers, size_t offset)
{
    unsigned long sum = 0;
    for (int t = 0; t < THREADS; t++)
        sum += *(const unsigned long *)((const char *)&workers[t] + offset);
    return sum;
}

static void test_reservations_keep_the_bound(void)
{
    for (uint32_t nrates = 1; nrates <= 2; nrates++) {
        worker *workers = hammer(nrates, false, nrates);
        size_t grants = bound_kept(workers, &RATES[0]);
        if (nrates == 2)
            bound_kept(workers, &RATES[1]);
        CHECK(total(workers, offsetof(worker, odd)) == 0);
        printf("%u rate(s): %zu grants kept the bound, %lu cancels gave tokens back\n", nrates, grants,
               total(workers, offsetof(worker, restored)));
        free(workers);
        free(seg);
    }
}

static void test_set_rates_race_reservations(void)
{
    /* Bursts of 5 and 6 at one refill: the change protocol runs, and the larger burst's bound holds. */
    other = BURSTIER;
    worker *workers = hammer(2, true, 3);
    size_t grants = bound_kept(workers, &BURSTIER);
    bound_kept(workers, &RATES[1]);
    CHECK(total(workers, offsetof(worker, odd)) == 0);
    printf("with set_rates: %zu grants kept the bound, %lu set_rates overtaken\n", grants,
           total(workers, offsetof(worker, overtaken)));
    free(workers);
    free(seg);
    /* Other parameters: every reading is one set or the other, never a mix. */
    other = (tb_shm_params){2000, 9, 0};
    workers = hammer(1, true, 4);
    CHECK(total(workers, offsetof(worker, odd)) == 0);
    free(workers);
    free(seg);
}

int main(void)
{
    RUN(test_reservations_keep_the_bound);
    RUN(test_set_rates_race_reservations);
    return tests_summary();
}
