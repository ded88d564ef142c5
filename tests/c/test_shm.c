/* Unit tests of the shared-memory store (src/_tokenbucket/shm.c, shm_grant.c) in one process: set-up, joins,
 * foreign and corrupt segments, and exact values of every operation on hand-computed cases:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_shm.c src/_tokenbucket/shm*.c \
 *        src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm && ./a.out
 *
 * Threads hammering one segment are in test_shm_threads.c, the model check of the protocol in test_shm_model.c. */
#include <string.h>

#include "shm.h"
#include "shm_limit.h"

#include "harness.h"
#include "shm_bound.h"

static const tb_shm_params MS_10 = {1e6, 10, 10};  /* a token a millisecond, 10 at most, full at first */

// A new segment of nrates rates, published (free it).
static tb_shm *created(uint32_t nrates, const tb_shm_params *params)
{
    tb_shm *seg = calloc(1, sizeof *seg);
    CHECK(seg != NULL && tb_shm_create(seg, sizeof *seg, nrates, params) == TB_SHM_OK);
    CHECK(tb_shm_check(seg) == 0);
    return seg;
}

// The first instant amount fits at now.
static tb_ns fit(tb_shm *seg, double amount, tb_ns now)
{
    tb_ns at = -1;
    CHECK(tb_shm_fit_at(seg, amount, now, &at) == TB_SHM_OK);
    return at;
}

// The tokens at now.
static double tokens(tb_shm *seg, tb_ns now)
{
    double held = -1;
    CHECK(tb_shm_tokens(seg, now, &held) == TB_SHM_OK);
    return held;
}

// The grant instant of a reservation of amount at now that must succeed.
static tb_ns reserved(tb_shm *seg, double amount, tb_ns now, tb_shm_reservation *r)
{
    CHECK(tb_shm_reserve(seg, amount, now, TB_NEVER, r) == TB_SHM_OK);
    return r->at;
}

static void test_create_and_join(void)
{
    tb_shm_params two[2] = {MS_10, {1e3, 2, 0}};
    tb_shm *seg = calloc(1, sizeof *seg);
    CHECK(tb_shm_validate(seg, sizeof *seg) == TB_SHM_ENOTREADY);  /* zeroed: its creator is not done */
    CHECK(tb_shm_join(seg, sizeof *seg, 2, two) == TB_SHM_ENOTREADY);
    CHECK(tb_shm_create(seg, sizeof *seg - 1, 2, two) == TB_SHM_EINVAL);
    CHECK(tb_shm_create(seg, sizeof *seg, 0, two) == TB_SHM_EINVAL);
    CHECK(tb_shm_create(seg, sizeof *seg, TB_MAX_RATES + 1, two) == TB_SHM_EINVAL);
    tb_shm_params bad[] = {{NAN, 1, 0}, {1, 0, 0}, {1, 2, 3}, {1, 2, -1}, {1, 2, NAN}, {1, INFINITY, 0},
                           {(double)TB_SHM_MAX_SPAN, 2, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(tb_shm_create(seg, sizeof *seg, 1, &bad[i]) == TB_SHM_EINVAL);
    CHECK(tb_shm_validate(seg, sizeof *seg) == TB_SHM_ENOTREADY);  /* a refused create writes nothing */
    CHECK(tb_shm_create(seg, sizeof *seg, 2, two) == TB_SHM_OK);
    CHECK(memcmp(seg, "aiotbshm", 8) == 0);
    CHECK(tb_shm_create(seg, sizeof *seg, 2, two) == TB_SHM_EFOREIGN);  /* published already */
    CHECK(tb_shm_validate(seg, sizeof *seg) == TB_SHM_OK && tb_shm_check(seg) == 0);
    CHECK(tb_shm_validate(seg, sizeof *seg - 1) == TB_SHM_EFOREIGN);
    CHECK(tb_shm_join(seg, sizeof *seg, 2, two) == TB_SHM_OK);
    CHECK(tb_shm_join(seg, sizeof *seg, 1, two) == TB_SHM_EMISMATCH);
    tb_shm_params other[2] = {MS_10, {1e3, 2, 0}};
    other[1].initial = 1;
    CHECK(tb_shm_join(seg, sizeof *seg, 2, other) == TB_SHM_EMISMATCH);
    other[1] = (tb_shm_params){1e3, 3, 0};
    CHECK(tb_shm_join(seg, sizeof *seg, 2, other) == TB_SHM_EMISMATCH);
    other[1] = (tb_shm_params){2e3, 2, 0};
    CHECK(tb_shm_join(seg, sizeof *seg, 2, other) == TB_SHM_EMISMATCH);
    /* What a joiner reads to name the difference. */
    CHECK(seg->nrates == 2 && seg->created[1].ns_per_token == 1e3 && seg->created[1].burst == 2);
    tb_shm_params live;
    CHECK(tb_shm_rate_params(seg, 1, &live) == TB_SHM_OK && live.ns_per_token == 1e3 && live.burst == 2);
    CHECK(tb_shm_rate_params(seg, 2, &live) == TB_SHM_EINVAL);
    free(seg);
}

static void bad_magic(tb_shm *s) { atomic_store(&s->magic, 0x6d687362746f6962u); }
static void bad_version(tb_shm *s) { s->version++; }
static void bad_size(tb_shm *s) { s->size--; }
static void no_rates(tb_shm *s) { s->nrates = 0; }
static void too_many_rates(tb_shm *s) { s->nrates = TB_MAX_RATES + 1; }
static void bad_unit(tb_shm *s) { s->ticks_per_ns = 8; }
static void nan_refill(tb_shm *s) { s->created[0].ns_per_token = NAN; }
static void negative_burst(tb_shm *s) { s->created[0].burst = -1; }
static void nan_initial(tb_shm *s) { s->created[0].initial = NAN; }
static void initial_over_burst(tb_shm *s) { s->created[0].initial = 11; }
static void span_too_long(tb_shm *s) { s->created[0].ns_per_token = (double)TB_SHM_MAX_SPAN; }
static void bad_generation(tb_shm *s) { atomic_store(&s->rates[0].state, 5u << 2 | 3); }  /* 5: generation 2 */
static void bad_phase(tb_shm *s) { atomic_store(&s->rates[0].change, 3); }
static void bad_target(tb_shm *s) { atomic_store(&s->rates[0].change, 3u << 2); }
static void junk_in_change(tb_shm *s) { atomic_store(&s->rates[0].change, 1u << 9); }
static void writing_wrong_generation(tb_shm *s) { atomic_store(&s->rates[0].change, (uint64_t)1 << 32 | 2u << 2 | 1); }
static void torn_record(tb_shm *s) { atomic_fetch_add(&s->rates[0].record[0][2], (uint64_t)1 << 32); }
static void nan_record(tb_shm *s) { atomic_fetch_or(&s->rates[0].record[0][0], 0x7ff80000u); }
static void zero_record(tb_shm *s)
{
    for (int k = 0; k < 4; k++)
        atomic_store(&s->rates[0].record[0][k], 0);
}

// Corrupts a copy of a good segment with edit, and checks that it is refused, with check's number broken,
// and, for a corrupt rate, that every operation says so (set_rate only, when the words of a change contradict
// the state: the others never read them; set_rate also for initial tokens that cannot be right).
static void refused(const tb_shm *good, void (*edit)(tb_shm *), int broken)
{
    tb_shm *seg = malloc(sizeof *seg);
    CHECK(seg != NULL);
    memcpy(seg, good, sizeof *seg);
    edit(seg);
    CHECK(tb_shm_check(seg) == broken);
    CHECK(tb_shm_validate(seg, sizeof *seg) == TB_SHM_EFOREIGN);
    CHECK(tb_shm_join(seg, sizeof *seg, 1, &MS_10) == TB_SHM_EFOREIGN);
    bool header_only = broken == 1 && edit != nan_initial;  /* set_rate reads no other field of the header */
    CHECK(tb_shm_set_rate(seg, 0, 1e6, 5, 0) == (header_only ? TB_SHM_OK : TB_SHM_EFOREIGN) || seg->nrates != 1);
    if (broken > 1 && edit != writing_wrong_generation) {
        tb_shm_reservation r;
        double held;
        tb_ns at;
        CHECK(tb_shm_reserve(seg, 1, 0, TB_NEVER, &r) == TB_SHM_EFOREIGN);
        CHECK(tb_shm_take_now(seg, 1, 0) == TB_SHM_EFOREIGN);
        CHECK(tb_shm_tokens(seg, 0, &held) == TB_SHM_EFOREIGN);
        CHECK(tb_shm_fit_at(seg, 1, 0, &at) == TB_SHM_EFOREIGN);
    }
    free(seg);
}

static void test_foreign_and_corrupt_segments(void)
{
    tb_shm *good = created(1, &MS_10);
    void (*header[])(tb_shm *) = {bad_magic, bad_version, bad_size, no_rates, too_many_rates, bad_unit,
                                  nan_refill, negative_burst, nan_initial, initial_over_burst, span_too_long};
    for (size_t i = 0; i < sizeof header / sizeof header[0]; i++)
        refused(good, header[i], 1);
    refused(good, bad_generation, 2);
    refused(good, writing_wrong_generation, 2);
    void (*change[])(tb_shm *) = {bad_phase, bad_target, junk_in_change};
    for (size_t i = 0; i < sizeof change / sizeof change[0]; i++)
        refused(good, change[i], 3);
    refused(good, torn_record, 4);
    refused(good, nan_record, 4);
    refused(good, zero_record, 4);
    /* Any F at all in the state word is read as some F: never a crash, never undefined behaviour. */
    rng_seed(7);
    for (int i = 0; i < 2000; i++) {
        atomic_store(&good->rates[0].state, rng_next() & ~(uint64_t)3);
        tb_ns now = (tb_ns)(rng_next() % ((uint64_t)1 << 59)) - ((tb_ns)1 << 58) + 1;
        tb_shm_status taken = tb_shm_take_now(good, 1 + rng_below(10), now);
        CHECK(taken == TB_SHM_OK || taken == TB_SHM_ETOOLATE);
        CHECK(tokens(good, now) <= 10 && fit(good, 1, now) >= now);
    }
    free(good);
}

static void test_anchoring(void)
{
    tb_shm_params p = {1e6, 10, 4};
    tb_shm *seg = created(1, &p);
    CHECK((atomic_load(&seg->rates[0].state) & 3) == 3);  /* not anchored before the first use */
    CHECK(tokens(seg, 5 * MS) == 4);                          /* the first use anchors it: 4 tokens at 5 ms */
    uint64_t anchored = atomic_load(&seg->rates[0].state);
    CHECK((anchored & 3) == 0 && anchored >> 2 == (uint64_t)(5 * MS + 6 * MS) * TB_TICKS_PER_NS);
    CHECK(tokens(seg, 8 * MS) == 7 && tokens(seg, 5 * MS) == 4);  /* later uses read it, never anchor again */
    CHECK(atomic_load(&seg->rates[0].state) == anchored);
    free(seg);
}

static void test_reserve_cancel_exact(void)
{
    tb_shm *seg = created(1, &MS_10);
    tb_shm_reservation a, b, c;
    CHECK(tb_shm_take_now(seg, 10, 0) == TB_SHM_OK && tokens(seg, 0) == 0);
    CHECK(tb_shm_take_now(seg, 1, 0) == TB_SHM_ETOOLATE && fit(seg, 1, 0) == MS);
    CHECK(reserved(seg, 3, 0, &a) == 3 * MS);                                /* F: 13 ms, less the burst */
    CHECK(tb_shm_reserve(seg, 2, 0, 4 * MS, &b) == TB_SHM_ETOOLATE);         /* 5 ms is past the deadline */
    CHECK(fit(seg, 2, 0) == 5 * MS && reserved(seg, 2, 0, &b) == 5 * MS);    /* nothing taken by the refusal */
    CHECK(tb_shm_cancel(seg, &a, MS) == 0);      /* b built on a: cancelling a out of order gives nothing back */
    CHECK(fit(seg, 1, MS) == 6 * MS);
    CHECK(tb_shm_cancel(seg, &b, MS) == 1 && fit(seg, 1, MS) == 4 * MS);    /* the latest: all of it */
    CHECK(tb_shm_cancel(seg, &a, MS) == 1 && fit(seg, 1, MS) == MS);        /* then a is the latest again */
    CHECK(reserved(seg, 4, 2 * MS, &c) == 4 * MS);
    CHECK(tb_shm_cancel(seg, &c, 4 * MS) == 0 && fit(seg, 1, 4 * MS) == 5 * MS);  /* at its instant: used */
    /* Amounts beyond a burst, not positive, or not finite; clocks out of range. */
    CHECK(tb_shm_reserve(seg, 11, 0, TB_NEVER, &c) == TB_SHM_EINVAL && fit(seg, 11, 0) == TB_NEVER);
    CHECK(tb_shm_reserve(seg, 0, 0, TB_NEVER, &c) == TB_SHM_EINVAL && tb_shm_take_now(seg, NAN, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_reserve(seg, 1, TB_MAX_SPAN, TB_NEVER, &c) == TB_SHM_EINVAL);
    CHECK(tb_shm_tokens(seg, -TB_MAX_SPAN, &(double){0}) == TB_SHM_EINVAL);
    CHECK(tb_shm_check(seg) == 0);
    free(seg);
}

static void test_horizon(void)
{
    tb_shm_params slow = {1e9 * 3600, 10, 0};  /* a token an hour */
    tb_shm *seg = created(1, &slow);
    tb_shm_reservation r;
    tb_ns hour = (tb_ns)1e9 * 3600, n = 0;
    while (tb_shm_reserve(seg, 10, 0, TB_NEVER, &r) == TB_SHM_OK)
        n++;
    /* Empty at first (F 10 h ahead), 10 hours a reservation: F - now may reach 2^56 ns (~20016 hours). */
    CHECK(n == TB_SHM_HORIZON / (10 * hour) - 1 && fit(seg, 10, 0) == (n + 1) * 10 * hour);
    CHECK(tb_shm_reserve(seg, 10, 0, TB_NEVER, &r) == TB_SHM_ETOOLATE);
    free(seg);
}

static void test_pause(void)
{
    tb_shm_params empty = {1e6, 1, 0};
    tb_shm *seg = created(1, &empty);
    tb_shm_pause_until(seg, 100 * MS);
    CHECK(tokens(seg, 0) == 0);  /* the first use anchors it at 0, paused or not */
    tb_shm_pause_until(seg, 50 * MS);  /* never earlier */
    tb_shm_reservation r;
    CHECK(tokens(seg, 200 * MS) == 1 && tokens(seg, 99 * MS) == 0 && fit(seg, 1, 0) == 100 * MS);
    CHECK(tb_shm_reserve(seg, 1, 0, 99 * MS, &r) == TB_SHM_ETOOLATE);
    /* Reserved during a pause, grants are spaced from its end as if taken then, not all at once. */
    CHECK(reserved(seg, 1, 0, &r) == 100 * MS && reserved(seg, 1, 0, &r) == 101 * MS);
    tb_shm_pause_until(seg, TB_NEVER);
    CHECK(fit(seg, 1, 0) == TB_NEVER && tb_shm_reserve(seg, 1, 0, TB_NEVER, &r) == TB_SHM_ETOOLATE);
    free(seg);
}

static void test_set_rate(void)
{
    tb_shm *seg = created(1, &MS_10);
    tb_shm_params live;
    CHECK(tb_shm_take_now(seg, 6, 0) == TB_SHM_OK);
    /* Keeps the tokens held, at most the new burst (as tb_limits_set_rate), less a tick of refill in debt. */
    CHECK(tb_shm_set_rate(seg, 0, 2e6, 20, 0) == TB_SHM_OK);
    CHECK(atomic_load(&seg->rates[0].state) >> 2 == (uint64_t)32 * MS * TB_TICKS_PER_NS + 1);
    CHECK(close_to(tokens(seg, 0), 4, 1e-7) && close_to(tokens(seg, 2 * MS), 5, 1e-7));
    CHECK(tb_shm_rate_params(seg, 0, &live) == TB_SHM_OK && live.ns_per_token == 2e6 && live.burst == 20);
    CHECK(tb_shm_set_rate(seg, 0, 1e6, 2, 0) == TB_SHM_OK && tokens(seg, 0) == 2 && fit(seg, 3, 0) == TB_NEVER);
    uint64_t full_f = (uint64_t)(-TB_TICKS_PER_NS - 1) & (((uint64_t)1 << 62) - 1);  /* F mod 2^62 */
    CHECK(atomic_load(&seg->rates[0].state) >> 2 == full_f);  /* full: a tick further back */
    CHECK(tb_shm_set_rate(seg, 1, 1e6, 2, 0) == TB_SHM_EINVAL && tb_shm_set_rate(seg, 0, NAN, 2, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_set_rate(seg, 0, (double)TB_SHM_MAX_SPAN, 2, 0) == TB_SHM_EINVAL);
    /* The live parameters again: nothing is published. */
    uint64_t word = atomic_load(&seg->rates[0].state);
    CHECK(tb_shm_set_rate(seg, 0, 1e6, 2, 0) == TB_SHM_OK && atomic_load(&seg->rates[0].state) == word);
    /* Four changes: the generation goes round the three record slots. */
    for (int i = 0; i < 4; i++)
        CHECK(tb_shm_set_rate(seg, 0, 1e6, 9 + i % 2, 0) == TB_SHM_OK && tb_shm_check(seg) == 0);
    CHECK(close_to(tokens(seg, 0), 2, 1e-6) && (atomic_load(&seg->rates[0].state) & 3) == 6 % 3);
    free(seg);

    /* change_rate: only from the live parameters (a read, modify and write); from others, nothing changes. */
    seg = created(1, &MS_10);
    tb_shm_params other = {1e6, 3, 0};
    word = atomic_load(&seg->rates[0].state);
    CHECK(tb_shm_change_rate(seg, 0, &other, 2e6, 20, 0) == TB_SHM_ESTALE && atomic_load(&seg->rates[0].state) == word);
    CHECK(tb_shm_change_rate(seg, 0, &MS_10, 2e6, 20, 0) == TB_SHM_OK);
    CHECK(tb_shm_rate_params(seg, 0, &live) == TB_SHM_OK && live.ns_per_token == 2e6 && live.burst == 20);
    CHECK(tb_shm_change_rate(seg, 0, &MS_10, 1e6, 5, 0) == TB_SHM_ESTALE);  /* changed since: from is stale */
    CHECK(tb_shm_rate_params(seg, 0, &live) == TB_SHM_OK && live.ns_per_token == 2e6 && tb_shm_check(seg) == 0);
    CHECK(tb_shm_change_rate(seg, 1, &MS_10, 1e6, 5, 0) == TB_SHM_EINVAL);
    free(seg);

    /* Tokens reserved ahead are kept as a debt: 20 owed, refilled at the new rate. */
    tb_shm_params empty = {1e6, 10, 0};
    tb_shm_reservation r;
    seg = created(1, &empty);
    CHECK(reserved(seg, 10, 0, &r) == 10 * MS && reserved(seg, 10, 0, &r) == 20 * MS);
    CHECK(tb_shm_set_rate(seg, 0, 2e6, 10, 0) == TB_SHM_OK);
    CHECK(fit(seg, 1, 0) == 42 * MS + 1 && tokens(seg, 40 * MS) == 0 && close_to(tokens(seg, 42 * MS + 1), 1, 1e-6));
    CHECK(tb_shm_cancel(seg, &r, 0) == 0);  /* a change since: nothing comes back */
    /* Before the first use, a change keeps the segment unanchored; the initial tokens then fit the new burst. */
    tb_shm_params full = {1e6, 10, 10};
    free(seg);
    seg = created(1, &full);
    CHECK(tb_shm_set_rate(seg, 0, 1e6, 3, 0) == TB_SHM_OK && atomic_load(&seg->rates[0].state) == (1u << 2 | 3));
    CHECK(tokens(seg, 7 * MS) == 3);
    free(seg);
}

static void test_several_rates(void)
{
    tb_shm_params two[2] = {MS_10, {10e6, 2, 2}};  /* and 2 at most, one each 10 ms */
    tb_shm *seg = created(2, two);
    tb_shm_reservation r;
    CHECK(tb_shm_take_now(seg, 2, 0) == TB_SHM_OK && tokens(seg, 0) == 0 && tokens(seg, 10 * MS) == 1);
    uint64_t first = atomic_load(&seg->rates[0].state);
    /* The second rate refuses by 5 ms: the first is not touched. */
    CHECK(tb_shm_reserve(seg, 1, 0, 5 * MS, &r) == TB_SHM_ETOOLATE && atomic_load(&seg->rates[0].state) == first);
    CHECK(tb_shm_reserve(seg, 3, 0, TB_NEVER, &r) == TB_SHM_EINVAL);  /* over the smallest burst */
    /* The grant is at the latest instant of the two, and both are taken as of it. */
    CHECK(reserved(seg, 1, 0, &r) == 10 * MS && r.nrates == 2);
    tb_shm_params live;
    CHECK(tb_shm_rate_params(seg, 0, &live) == TB_SHM_OK && live.burst == 10);
    CHECK(tokens(seg, 10 * MS) == 0);  /* the second rate is empty again; the first was taken at 10 ms, full */
    CHECK(atomic_load(&seg->rates[0].state) >> 2 == (uint64_t)(11 * MS) * TB_TICKS_PER_NS);
    free(seg);
}

// Go's rule, restore = need - (tokens reserved after), would let 4 tokens through at one instant here, with
// a burst of 3: A 3 at 3 ms, R 3 at 6 ms, L 1 at 7 ms (F 10 ms); cancelling R gives back 3 - 1 = 2 (F 8 ms),
// then A 3 - 2 = 1 (F 7 ms), and N 3 comes at 7 ms with L. Exact restores give nothing back here.
static void test_cancel_out_of_order_keeps_the_bound(void)
{
    tb_shm_params p = {1e6, 3, 0};
    tb_shm *seg = created(1, &p);
    tb_shm_reservation a, r, l, n;
    CHECK(reserved(seg, 3, 0, &a) == 3 * MS && reserved(seg, 3, 0, &r) == 6 * MS && reserved(seg, 1, 0, &l) == 7 * MS);
    CHECK(tb_shm_cancel(seg, &r, 0) == 0 && tb_shm_cancel(seg, &a, 0) == 0);
    CHECK(reserved(seg, 3, 0, &n) == 10 * MS);
    logged_grant live[] = {{l.at, tb_ticks(1e6)}, {n.at, tb_ticks(3e6)}};
    CHECK(bound_excess(live, 2, tb_ticks(3e6)) <= 0);
    free(seg);
}

// A grant settled with its real cost: the difference back (never fuller than full) or taken now as debt, on
// every rate; bad amounts and a debt past the horizon change nothing.
static void test_settle(void)
{
    tb_shm_params two[2] = {MS_10, {10e6, 4, 4}};  /* and 4 at most, one each 10 ms */
    tb_shm *seg = created(2, two);
    CHECK(tb_shm_take_now(seg, 3, 0) == TB_SHM_OK && tokens(seg, 0) == 1);
    CHECK(tb_shm_settle(seg, 3, 1, 0) == TB_SHM_OK && tokens(seg, 0) == 3);        /* 2 back to each */
    CHECK(tb_shm_settle(seg, 3, 0, 0) == TB_SHM_OK && tokens(seg, 0) == 4);        /* no fuller than full */
    CHECK(tb_shm_take_now(seg, 2, 0) == TB_SHM_OK && tb_shm_settle(seg, 2, 9, 0) == TB_SHM_OK);
    CHECK(tokens(seg, 0) == 0 && fit(seg, 1, 0) == 60 * MS);  /* 7 owed to the second rate: 5 past empty, 10 ms each */
    uint64_t words[2] = {atomic_load(&seg->rates[0].state), atomic_load(&seg->rates[1].state)};
    CHECK(tb_shm_settle(seg, 5, 1, 0) == TB_SHM_EINVAL);              /* over the smallest burst */
    CHECK(tb_shm_settle(seg, 0, 1, 0) == TB_SHM_EINVAL && tb_shm_settle(seg, 1, -1, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_settle(seg, 1, NAN, 0) == TB_SHM_EINVAL && tb_shm_settle(seg, 1, INFINITY, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_settle(seg, 1, 1e30, 0) == TB_SHM_EINVAL);           /* a debt past the horizon */
    CHECK(tb_shm_settle(seg, 1, 2, TB_MAX_SPAN) == TB_SHM_EINVAL);    /* a clock out of range */
    CHECK(atomic_load(&seg->rates[0].state) == words[0] && atomic_load(&seg->rates[1].state) == words[1]);
    CHECK(tb_shm_check(seg) == 0);
    free(seg);
}

#define UNIT ((tb_ns)1 << LIMIT_UNIT_SHIFT)  /* a limit's instants are whole units of 2^20 ns, rounded up */

// The limit word's tokens left.
static double limit_left(tb_shm *seg) { return limit_left_of(atomic_load(&seg->limit)); }

static void test_limit(void)
{
    tb_shm *seg = created(1, &MS_10);
    tb_shm_reservation r;
    CHECK(tokens(seg, 0) == 10 && atomic_load(&seg->limit) == 0 && limit_until_of(0) < -TB_MAX_SPAN + 1);
    CHECK(tb_shm_limit_until(seg, 3, 50 * UNIT, 0, 0) == TB_SHM_OK && tokens(seg, 0) == 3);
    tb_shm_pause_until(seg, 10 * UNIT);
    CHECK(reserved(seg, 1, 0, &r) == 10 * UNIT && limit_left(seg) == 2);
    CHECK(tb_shm_cancel(seg, &r, 0) == 1 && limit_left(seg) == 2);  /* the rate back, not the limit */
    CHECK(tokens(seg, 10 * UNIT) == 2 && tb_shm_take_now(seg, 2, 10 * UNIT) == TB_SHM_OK && limit_left(seg) == 0);
    CHECK(tb_shm_take_now(seg, 1, 10 * UNIT) == TB_SHM_ETOOLATE && limit_left(seg) == 0);  /* nothing taken */
    CHECK(fit(seg, 1, 10 * UNIT) == 50 * UNIT && tokens(seg, 10 * UNIT) == 0);
    CHECK(reserved(seg, 2, 10 * UNIT, &r) == 50 * UNIT && limit_left(seg) == 0);  /* at the limit's end */
    /* A limit ending more than slack before the running one is news of an earlier window: kept. One within slack
     * of it tightens it (the fewer tokens, the later end); one ending later replaces it. */
    CHECK(tb_shm_limit_until(seg, 9, 40 * UNIT, UNIT, 0) == TB_SHM_OK && limit_until_of(atomic_load(&seg->limit)) == 50 * UNIT);
    CHECK(tb_shm_limit_until(seg, 9, 51 * UNIT, UNIT, 0) == TB_SHM_OK && limit_left(seg) == 0);
    CHECK(limit_until_of(atomic_load(&seg->limit)) == 51 * UNIT);
    CHECK(tb_shm_limit_until(seg, 4, 60 * UNIT, UNIT, 0) == TB_SHM_OK && limit_left(seg) == 4);
    CHECK(tb_shm_limit_until(seg, 0, 59 * UNIT, UNIT, 0) == TB_SHM_OK && limit_left(seg) == 0 && fit(seg, 1, 0) == 60 * UNIT);
    CHECK(tb_shm_limit_until(seg, 5, 300 * UNIT + 1, 0, 0) == TB_SHM_OK && fit(seg, 6, 0) == 301 * UNIT);  /* rounded up */
    /* A debt settled takes from a running limit too, never below 0; a grant given back does not come back. */
    CHECK(tb_shm_settle(seg, 1, 3, 0) == TB_SHM_OK && limit_left(seg) == 3);
    CHECK(tb_shm_settle(seg, 1, 9, 0) == TB_SHM_OK && limit_left(seg) == 0);
    /* Bad input changes nothing; a limit that has ended, or ends now, is nothing to do. */
    uint64_t word = atomic_load(&seg->limit);
    CHECK(tb_shm_limit_until(seg, -1, 400 * UNIT, 0, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_limit_until(seg, NAN, 400 * UNIT, 0, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_limit_until(seg, INFINITY, 400 * UNIT, 0, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_limit_until(seg, 1, 400 * UNIT, -1, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_limit_until(seg, 1, TB_SHM_HORIZON + 1, 0, 0) == TB_SHM_EINVAL);
    CHECK(tb_shm_limit_until(seg, 1, TB_MAX_SPAN - 1, 0, TB_MAX_SPAN - 2) == TB_SHM_EINVAL);  /* past the latest */
    CHECK(tb_shm_limit_until(seg, 1, INT64_MAX, 0, 1 - TB_MAX_SPAN) == TB_SHM_EINVAL);  /* no overflow (UBSan) */
    CHECK(tb_shm_limit_until(seg, 1, 0, 0, 0) == TB_SHM_OK && atomic_load(&seg->limit) == word);
    CHECK(tokens(seg, 301 * UNIT) == 10 && tb_shm_check(seg) == 0);  /* ended */
    free(seg);
}

static void test_limit_word(void)
{
    /* Whole counts up to 2^20 are exact; larger and fractional ones are rounded down, never up. */
    CHECK(limit_left_of(limit_word(0, 1048576)) == 1048576 && limit_left_of(limit_word(0, 50)) == 50);
    CHECK(limit_left_of(limit_word(0, 2097153)) == 2097152 && limit_left_of(limit_word(0, 1.0 / 3)) == 85.0 / 256);
    CHECK(limit_left_of(limit_word(0, 1e20)) == ldexp((1 << 20) - 1, 23) && limit_left_of(limit_word(0, 0)) == 0);
    for (double x = 1e-4; x < 1e13; x *= 1.37) {
        double left = limit_left_of(limit_word(0, x));
        CHECK(left <= x && (left >= x * (1 - 1.0 / (1 << 19)) - 1.0 / 256 || x > 8.7e12));
    }
    /* Every word is a limit: an instant in range and a count >= 0, finite. */
    for (uint64_t w = 1, k = 0; k < 100000; k++, w = w * 6364136223846793005u + 1442695040888963407u) {
        double left = limit_left_of(w);
        CHECK(left >= 0 && isfinite(left) && limit_until_of(w) >= -TB_MAX_SPAN && limit_until_of(w) < TB_MAX_SPAN);
    }
    CHECK(limit_until_of(limit_word(LIMIT_LATEST, 1)) == LIMIT_LATEST && limit_until_of(limit_word(-5, 1)) == 0);
}

int main(void)
{
    RUN(test_create_and_join);
    RUN(test_foreign_and_corrupt_segments);
    RUN(test_anchoring);
    RUN(test_reserve_cancel_exact);
    RUN(test_horizon);
    RUN(test_pause);
    RUN(test_set_rate);
    RUN(test_several_rates);
    RUN(test_cancel_out_of_order_keeps_the_bound);
    RUN(test_settle);
    RUN(test_limit);
    RUN(test_limit_word);
    return tests_summary();
}
