/* The shared-memory store (src/_tokenbucket/shm*.c) in one process over many sequences of operations: every
 * short sequence of reservations, cancels and clock steps keeps the bound; random sequences give exactly what
 * the limits of limits.c give for the same calls:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_shm_sequences.c src/_tokenbucket/shm*.c \
 *        src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm && ./a.out */
#include <string.h>

#include "shm.h"

#include "harness.h"
#include "shm_bound.h"

#define DEPTH 6     /* operations in every sequence tried */
#define MAX_LIVE DEPTH

/* One path of the search: the segment after it, its clock, and its reservations. */
typedef struct {
    tb_shm seg;
    tb_ns now;
    uint32_t count;
    tb_shm_reservation r[MAX_LIVE];
    double amount[MAX_LIVE];
    bool cancelled[MAX_LIVE];  /* before its instant: it is no grant */
} path;

static uint64_t paths_tried;

// Fails the current test unless the grants of path p keep every rate's bound.
static void keeps_the_bound(const path *p)
{
    for (uint32_t i = 0; i < p->seg.nrates; i++) {
        tb_shm_params live;
        CHECK(tb_shm_rate_params(&p->seg, i, &live) == TB_SHM_OK);
        logged_grant grants[MAX_LIVE];
        size_t n = 0;
        for (uint32_t k = 0; k < p->count; k++)
            if (!p->cancelled[k])
                grants[n++] = (logged_grant){p->r[k].at, tb_ticks(p->amount[k] * live.ns_per_token)};
        CHECK(bound_excess(grants, n, tb_ticks(live.burst * live.ns_per_token)) <= 0);
    }
}

// Tries every continuation of p up to depth more operations.
static void explore(const path *p, int depth)
{
    paths_tried++;
    keeps_the_bound(p);
    if (depth == 0)
        return;
    path next;
    for (int amount = 1; amount <= 3; amount++) {
        for (int now_only = 0; now_only <= 1; now_only++) {  /* a reservation, or a take at now */
            memcpy(&next, p, sizeof next);
            tb_shm_status status = tb_shm_reserve(&next.seg, amount, next.now, now_only ? next.now : TB_NEVER,
                                                  &next.r[next.count]);
            CHECK(status == TB_SHM_OK || (now_only && status == TB_SHM_ETOOLATE));
            if (status == TB_SHM_OK) {
                next.amount[next.count++] = amount;
                explore(&next, depth - 1);
            }
        }
    }
    for (uint32_t k = 0; k < p->count; k++) {
        if (p->cancelled[k] || p->r[k].at <= p->now)
            continue;
        memcpy(&next, p, sizeof next);
        tb_shm_cancel(&next.seg, &next.r[k], next.now);
        next.cancelled[k] = true;
        explore(&next, depth - 1);
    }
    for (int step = 1; step <= 2; step++) {
        memcpy(&next, p, sizeof next);
        next.now += step * MS / 2;
        explore(&next, depth - 1);
    }
}

static void test_every_short_sequence_keeps_the_bound(void)
{
    /* Needs of 5333334 and 7 ticks a token: F on no whole nanosecond, needs rounded up. */
    const tb_shm_params one[] = {{1e6 / 3, 3, 0}}, full[] = {{1e6 / 3, 3, 3}};
    const tb_shm_params two[] = {{1e6 / 3, 3, 0}, {0.4e6, 4, 1}};
    struct {
        uint32_t nrates;
        const tb_shm_params *params;
    } cases[] = {{1, one}, {1, full}, {2, two}};
    static path start;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memset(&start, 0, sizeof start);
        CHECK(tb_shm_create(&start.seg, sizeof start.seg, cases[c].nrates, cases[c].params) == TB_SHM_OK);
        start.now = 5 * MS;
        explore(&start, DEPTH);
        CHECK(tb_shm_check(&start.seg) == 0);
    }
    printf("%llu sequences kept the bound\n", (unsigned long long)paths_tried);
}

// A random amount: mostly within the smallest burst, now and then over every burst.
static double random_amount(void) { return rng_below(8) == 0 ? 9 : (double)(1 + rng_below(12)) / 4; }

static void test_agrees_with_limits(void)
{
    rng_seed(11);
    for (int run = 0; run < 300; run++) {
        uint32_t nrates = 1 + (uint32_t)rng_below(3);
        tb_shm_params params[TB_MAX_RATES];
        tb_limits l;
        for (uint32_t i = 0; i < nrates; i++) {
            double burst = 1 + (double)rng_below(8);
            params[i] = (tb_shm_params){(double)(1 + rng_below(100000)) / 7, burst, burst * (double)rng_below(5) / 4};
            CHECK((i ? tb_limits_add_rate(&l, params[i].ns_per_token, burst, params[i].initial)
                     : tb_limits_init(&l, params[i].ns_per_token, burst, params[i].initial)) == TB_OK);
        }
        static tb_shm seg;
        memset(&seg, 0, sizeof seg);
        CHECK(tb_shm_create(&seg, sizeof seg, nrates, params) == TB_SHM_OK);
        tb_ns now = (tb_ns)rng_below(1000000) - 500000;
        for (int op = 0; op < 200; op++) {
            now += (tb_ns)rng_below(30000);
            double amount = random_amount(), held = -1;
            tb_ns at = -1;
            switch (rng_below(4)) {
            case 0: {
                tb_shm_status taken = tb_shm_take_now(&seg, amount, now);
                CHECK(taken == TB_SHM_OK || taken == TB_SHM_ETOOLATE || (taken == TB_SHM_EINVAL && amount > l.max_amount));
                CHECK((taken == TB_SHM_OK) == tb_limits_take_now(&l, amount, now));
                break;
            }
            case 1:
                CHECK(tb_shm_tokens(&seg, now, &held) == TB_SHM_OK && held == tb_limits_tokens(&l, now));
                break;
            case 2:
                CHECK(tb_shm_fit_at(&seg, amount, now, &at) == TB_SHM_OK && at == tb_limits_fit_at(&l, amount, now));
                break;
            default:
                if (rng_below(10) == 0) {
                    tb_ns until = now + (tb_ns)rng_below(100000);
                    tb_shm_pause_until(&seg, until);
                    tb_limits_pause_until(&l, until);
                }
            }
        }
        CHECK(tb_shm_check(&seg) == 0);
        tb_limits_release(&l);
    }
}

int main(void)
{
    RUN(test_every_short_sequence_keeps_the_bound);
    RUN(test_agrees_with_limits);
    return tests_summary();
}
