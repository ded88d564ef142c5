/* Unit tests of the bucket's decisions (src/_tokenbucket/queue.c over limits.c): tb_grant_due,
 * statistics, "as good as new", rebase, drift, fractional amounts and extreme parameters. Run without
 * any framework:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_grant.c \
 *        src/_tokenbucket/queue.c src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm
 *     ./a.out [drift_grants]
 *
 * drift_grants (default 10^7) sets the length of the longest drift runs, so that slow
 * instrumented runs (valgrind) can shorten them. Prints one line per failed check and
 * ends with "N passed, M failed"; exits non-zero if any test failed. */
#include "checked_bucket.h"

static long drift_grants = 10000000;

/* ---- tb_grant_due ---- */

/* A scripted tb_decide: answers verdicts[i] about the i-th waiter it is asked about (TB_GRANT once
 * the script runs out), remembering whom it was asked about, in order. */
typedef struct {
    const tb_verdict *verdicts;
    int nverdicts;
    int asked;
    void *handles[16];
} script;

static tb_verdict decide_scripted(void *ctx, void *handle, double amount)
{
    (void)amount;
    script *s = ctx;
    if (s->asked < 16)
        s->handles[s->asked] = handle;
    int i = s->asked++;
    return i < s->nverdicts ? s->verdicts[i] : TB_GRANT;
}

static tb_ns grant_due_at(const char *f, int l, tb_bucket *b, tb_ns now, script *s)
{
    tb_ns next = tb_grant_due(b, now, decide_scripted, s);
    holds(f, l, b);
    return next;
}

#define GRANT_DUE(...) grant_due_at(__FILE__, __LINE__, __VA_ARGS__)

static void test_grant_due_grants_every_due_waiter_in_order(void)
{
    tb_bucket b;
    int handles[4];
    tb_id id;
    script s = {0};
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    /* Nobody waits: no question, no next instant. */
    CHECK(GRANT_DUE(&b, 0, &s) == TB_NEVER && s.asked == 0);
    CHECK(TAKE(&b, 10, 0));
    const double amounts[] = {1, 1, 1, 3};
    for (int i = 0; i < 4; i++)
        CHECK(ENQUEUE(&b, amounts[i], 0, TB_NEVER, &handles[i], &id) == TB_OK);
    /* Before the head is due nobody is asked, and the answer is the head's instant. */
    CHECK(GRANT_DUE(&b, MS / 2, &s) == MS && s.asked == 0);
    /* At 3 ms three tokens have refilled: the three heads of 1 go, in order; the 3 is due at 6 ms. */
    CHECK(GRANT_DUE(&b, 3 * MS, &s) == 6 * MS);
    CHECK(s.asked == 3 && s.handles[0] == &handles[0] && s.handles[1] == &handles[1] &&
          s.handles[2] == &handles[2]);
    CHECK(b.waiting == 1 && TOKENS(&b, 3 * MS) == 0);
    s = (script){0};
    CHECK(GRANT_DUE(&b, 6 * MS, &s) == TB_NEVER);
    CHECK(s.asked == 1 && s.handles[0] == &handles[3] && b.waiting == 0);
    tb_release(&b);

    /* Smallest first: the pass follows the queue's order, not arrival. */
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_SMALLEST_FIRST) == TB_OK);
    CHECK(TAKE(&b, 10, 0));
    const double sizes[] = {3, 1, 2};
    for (int i = 0; i < 3; i++)
        CHECK(ENQUEUE(&b, sizes[i], 0, TB_NEVER, &handles[i], &id) == TB_OK);
    s = (script){0};
    CHECK(GRANT_DUE(&b, 6 * MS, &s) == TB_NEVER);
    CHECK(s.asked == 3 && s.handles[0] == &handles[1] && s.handles[1] == &handles[2] &&
          s.handles[2] == &handles[0]);
    tb_release(&b);
}

static void test_grant_due_verdicts(void)
{
    tb_bucket b;
    int handles[3];
    tb_id ids[3];
    CHECK(INIT(&b, 1e6, 4, 4, true, TB_FIFO) == TB_OK);
    for (int i = 0; i < 3; i++)
        CHECK(ENQUEUE(&b, 2, 0, TB_NEVER, &handles[i], &ids[i]) == TB_OK);

    /* TB_STOP: the head stays queued, untouched, and the pass says it is due now. */
    const tb_verdict stop[] = {TB_STOP};
    script s = {stop, 1, 0, {0}};
    CHECK(GRANT_DUE(&b, 0, &s) == 0);
    CHECK(s.asked == 1 && s.handles[0] == &handles[0]);
    CHECK(b.waiting == 3 && TOKENS(&b, 0) == 4 && b.stats.granted == 0 && b.stats.cancelled == 0);

    /* TB_SKIP: the head leaves without tokens (counted cancelled); the next is asked at once. */
    const tb_verdict skip_then_grant_then_stop[] = {TB_SKIP, TB_GRANT, TB_STOP};
    s = (script){skip_then_grant_then_stop, 3, 0, {0}};
    CHECK(GRANT_DUE(&b, 0, &s) == 0);
    CHECK(s.asked == 3 && s.handles[0] == &handles[0] && s.handles[1] == &handles[1] &&
          s.handles[2] == &handles[2]);
    CHECK(b.waiting == 1 && TOKENS(&b, 0) == 2);
    CHECK(b.stats.cancelled == 1 && b.stats.granted == 1 && b.stats.waits == 1);
    /* A waiter gone through a verdict has no id any more. */
    CHECK(WITHDRAW(&b, ids[0]) == NULL && WITHDRAW(&b, ids[1]) == NULL);
    CHECK(WITHDRAW(&b, ids[2]) == &handles[2]);
    CHECK(b.stats.cancelled == 2);
    tb_release(&b);
}

static void test_grant_due_late_credit(void)
{
    tb_bucket b;
    int first, second;
    tb_id id;
    script s = {0};
    /* Without credit, a head granted 0.4 ms late is taken as of its grant: the next is due 1 ms later. */
    CHECK(INIT(&b, 1e6, 1, 0, true, TB_FIFO) == TB_OK);
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &first, &id) == TB_OK);
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &second, &id) == TB_OK);
    CHECK(READY_AT(&b, 0) == MS);
    CHECK(GRANT_DUE(&b, MS + 4 * MS / 10, &s) == 2 * MS + 4 * MS / 10);
    tb_release(&b);

    /* With half a token of credit, the same head is taken as of its ready instant, 1 ms. */
    CHECK(INIT(&b, 1e6, 1, 0, true, TB_FIFO) == TB_OK);
    tb_set_late_credit(&b, 0.5);
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &first, &id) == TB_OK);
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &second, &id) == TB_OK);
    s = (script){0};
    CHECK(GRANT_DUE(&b, MS + 4 * MS / 10, &s) == 2 * MS);
    CHECK(s.asked == 1 && s.handles[0] == &first);
    /* A longer stall is credited only half a token: granted at 3 ms, taken as of 2.5 ms. */
    CHECK(ENQUEUE(&b, 1, MS + 4 * MS / 10, TB_NEVER, &first, &id) == TB_OK);
    s = (script){0};
    CHECK(GRANT_DUE(&b, 3 * MS, &s) == 3 * MS + MS / 2);
    CHECK(s.asked == 1 && s.handles[0] == &second);
    tb_release(&b);

    /* Credit outside (0, 1) tokens is none. */
    CHECK(INIT(&b, 1e6, 1, 0, true, TB_FIFO) == TB_OK);
    tb_set_late_credit(&b, 1.5);
    CHECK(b.limits.late_credit == 0);
    tb_release(&b);
}

/* ---- statistics, as good as new ---- */

static void test_statistics_are_counted_once(void)
{
    tb_bucket b;
    int handles[4];
    tb_id ids[4];
    script s = {0};
    CHECK(INIT(&b, 1e6, 10, 10, false, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 4, 0) && TAKE(&b, 6, 0));
    CHECK(!TAKE(&b, 1, 0));  /* refused: not counted */
    CHECK(!CAN_TAKE(&b, 1, 0));
    CHECK(b.stats.granted == 2 && b.stats.granted_tokens == 10 && b.stats.waits == 0);

    /* A wait is counted at its grant: from its enqueue to the instant it was granted. */
    CHECK(ENQUEUE(&b, 2, MS, TB_NEVER, &handles[0], &ids[0]) == TB_OK);
    CHECK(ENQUEUE(&b, 1, MS, TB_NEVER, &handles[1], &ids[1]) == TB_OK);
    CHECK(b.stats.waits == 0);
    CHECK(GRANT_DUE(&b, 2 * MS, &s) == 3 * MS);  /* the 1 comes a token later */
    CHECK(b.stats.granted == 3 && b.stats.granted_tokens == 12);
    CHECK(b.stats.waits == 1 && b.stats.wait_ns_total == MS && b.stats.wait_ns_max == MS);
    CHECK(GRANT_DUE(&b, 5 * MS, &s) == TB_NEVER);
    CHECK(b.stats.granted == 4 && b.stats.granted_tokens == 13);
    CHECK(b.stats.waits == 2 && b.stats.wait_ns_total == 5 * MS && b.stats.wait_ns_max == 4 * MS);

    /* A refund takes the grant back out and counts it cancelled. */
    REFUND(&b, 1, 5 * MS);
    CHECK(b.stats.granted == 3 && b.stats.granted_tokens == 12 && b.stats.cancelled == 1);
    CHECK(b.stats.waits == 2);

    /* Withdrawn: cancelled. Refused past its deadline: a timeout, nothing queued. */
    CHECK(TAKE(&b, TOKENS(&b, 5 * MS), 5 * MS));
    CHECK(ENQUEUE(&b, 5, 5 * MS, TB_NEVER, &handles[2], &ids[2]) == TB_OK);
    CHECK(WITHDRAW(&b, ids[2]) == &handles[2]);
    CHECK(b.stats.cancelled == 2);
    CHECK(ENQUEUE(&b, 5, 5 * MS, 5 * MS + 1, &handles[3], &ids[3]) == TB_ETOOLATE);
    CHECK(b.stats.timeouts == 1 && b.stats.cancelled == 2 && b.waiting == 0);
    CHECK(WITHDRAW(&b, ids[2]) == NULL && b.stats.cancelled == 2);  /* not twice */

    /* Stranded: cancelled. A rate cut below a waiter's amount strands it for good. */
    CHECK(ENQUEUE(&b, 8, 5 * MS, TB_NEVER, &handles[3], &ids[3]) == TB_OK);
    CHECK(tb_set_rate(&b, 0, 1e6, 4, 5 * MS) == TB_OK);
    bool never = false;
    CHECK(tb_withdraw_stranded(&b, 5 * MS, &never) == &handles[3] && never);
    HOLDS(&b);
    CHECK(b.stats.cancelled == 3);
    CHECK(tb_withdraw_stranded(&b, 5 * MS, &never) == NULL && b.stats.cancelled == 3);

    /* Withdrawing the head (a bucket being cleared) counts the same; an empty queue has none. */
    CHECK(ENQUEUE(&b, 1, 5 * MS, TB_NEVER, &handles[0], &ids[0]) == TB_OK);
    CHECK(tb_withdraw_head(&b) == &handles[0]);
    HOLDS(&b);
    CHECK(tb_withdraw_head(&b) == NULL);
    CHECK(b.stats.cancelled == 4 && b.waiting == 0);
    tb_release(&b);
}

// Each owner times its own first waiter: the head's instant exactly, a later one's as projected behind
// those ahead, in queue order (smallest-first included); withdrawing an owner's first re-times the rest.
static void test_each_owner_times_its_first_waiter(void)
{
    tb_bucket b;
    int handles[4], loop_a, loop_b, idle;
    tb_id ids[4];
    CHECK(INIT(&b, 1e6, 1, 0, true, TB_FIFO) == TB_OK);  /* a token a millisecond, empty at 0 */
    CHECK(ENQUEUE_OF(&loop_a, &b, 1, 0, TB_NEVER, &handles[0], &ids[0]) == TB_OK);
    CHECK(ENQUEUE_OF(&loop_b, &b, 1, 0, TB_NEVER, &handles[1], &ids[1]) == TB_OK);
    CHECK(ENQUEUE_OF(&loop_a, &b, 1, 0, TB_NEVER, &handles[2], &ids[2]) == TB_OK);
    CHECK(tb_first_due_of(&b, &loop_a, 0) == 1 * MS);
    CHECK(tb_first_due_of(&b, &loop_b, 0) == 2 * MS);
    CHECK(tb_first_due_of(&b, &idle, 0) == TB_NEVER);
    HOLDS(&b);
    CHECK(tb_withdraw_first_of(&b, &idle) == NULL && b.stats.cancelled == 0);
    CHECK(tb_withdraw_first_of(&b, &loop_a) == &handles[0] && b.stats.cancelled == 1);
    HOLDS(&b);
    CHECK(tb_first_due_of(&b, &loop_b, 0) == 1 * MS);  /* the head now */
    CHECK(tb_first_due_of(&b, &loop_a, 0) == 2 * MS);
    CHECK(tb_withdraw_first_of(&b, &loop_a) == &handles[2]);
    CHECK(tb_withdraw_first_of(&b, &loop_a) == NULL && b.waiting == 1);
    CHECK(tb_withdraw_first_of(&b, &loop_b) == &handles[1] && b.waiting == 0);
    tb_release(&b);

    CHECK(INIT(&b, 1e6, 4, 0, true, TB_SMALLEST_FIRST) == TB_OK);
    CHECK(ENQUEUE_OF(&loop_a, &b, 3, 0, TB_NEVER, &handles[0], &ids[0]) == TB_OK);
    CHECK(ENQUEUE_OF(&loop_b, &b, 1, 0, TB_NEVER, &handles[1], &ids[1]) == TB_OK);
    CHECK(tb_first_due_of(&b, &loop_b, 0) == 1 * MS);  /* the smaller one goes first */
    CHECK(tb_first_due_of(&b, &loop_a, 0) == 4 * MS);  /* behind it: 1 + 3 tokens */
    HOLDS(&b);
    tb_release(&b);
}

static void test_wait_statistics_follow_a_rebase(void)
{
    tb_bucket b;
    int handle;
    tb_id id;
    script s = {0};
    const tb_ns old_now = 1000000000000000;
    CHECK(INIT(&b, 1e6, 1, 0, true, TB_FIFO) == TB_OK);
    CHECK(ENQUEUE(&b, 1, old_now, TB_NEVER, &handle, &id) == TB_OK);
    REBASE(&b, old_now + MS / 2, 0);  /* half a millisecond in, the new clock reads 0 */
    CHECK(GRANT_DUE(&b, MS / 2, &s) == TB_NEVER);
    CHECK(s.asked == 1 && b.stats.wait_ns_total == MS && b.stats.wait_ns_max == MS);
    tb_release(&b);
}

static void test_as_good_as_new(void)
{
    tb_bucket b;
    int handle;
    tb_id id;
    /* Before the first reading even a bucket with no initial tokens is new. */
    CHECK(INIT(&b, 1e6, 10, 0, true, TB_FIFO) == TB_OK);
    CHECK(tb_as_good_as_new(&b, 0));
    CHECK(TOKENS(&b, 0) == 0);
    CHECK(!tb_as_good_as_new(&b, 10 * MS - 1));
    CHECK(tb_as_good_as_new(&b, 10 * MS));
    /* A waiter, or a grant not yet refilled, is remembered. */
    CHECK(ENQUEUE(&b, 1, 10 * MS, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(!tb_as_good_as_new(&b, 20 * MS));
    CHECK(POP(&b, 10 * MS, true) == &handle);
    CHECK(!tb_as_good_as_new(&b, 11 * MS - 1));
    CHECK(tb_as_good_as_new(&b, 11 * MS));
    /* So is a pause after now. */
    tb_pause_until(&b, 20 * MS);
    CHECK(!tb_as_good_as_new(&b, 20 * MS - 1));
    CHECK(tb_as_good_as_new(&b, 20 * MS));
    tb_release(&b);

    /* A window is new once its last grant has left every window ending at now. */
    CHECK(tb_init_window(&b, SECOND, 5, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 2, 0));
    CHECK(!tb_as_good_as_new(&b, SECOND - 1));
    CHECK(tb_as_good_as_new(&b, SECOND));
    tb_release(&b);

    /* Several rates: every one must be full. */
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(tb_add_rate(&b, 1e3, 10, 10) == TB_OK);
    CHECK(TAKE(&b, 1, 0));
    CHECK(!tb_as_good_as_new(&b, 1000));  /* the fast rate is full again at 1 us, the slow at 1 ms */
    CHECK(!tb_as_good_as_new(&b, MS - 1));
    CHECK(tb_as_good_as_new(&b, MS));
    tb_release(&b);
}

/* ---- rebase ---- */

static void test_rebase_keeps_tokens_and_offsets(void)
{
    const tb_ns old_now = 1000000000000000;  /* 1e15 ns on the old clock reads 0 on the new */
    const double rates[] = {1e6, 1e9 / 3};
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++) {
        tb_bucket b;
        int handle;
        tb_id id;
        CHECK(INIT(&b, rates[i], 10, 10, true, TB_FIFO) == TB_OK);
        CHECK(TAKE(&b, 7, old_now));
        CHECK(ENQUEUE(&b, 5, old_now, old_now + 100 * SECOND, &handle, &id) == TB_OK);
        double tokens_now = TOKENS(&b, old_now);
        double tokens_later = TOKENS(&b, old_now + 1234567);
        tb_ns ready_in = READY_AT(&b, old_now) - old_now;
        tb_ns projected_in = PROJECTED(&b, 2, old_now) - old_now;

        REBASE(&b, old_now, 0);
        CHECK(TOKENS(&b, 0) == tokens_now);
        CHECK(TOKENS(&b, 1234567) == tokens_later);
        CHECK(READY_AT(&b, 0) == ready_in);
        CHECK(PROJECTED(&b, 2, 0) == projected_in);
        CHECK(b.slots[b.head].deadline == 100 * SECOND);
        CHECK(READY_HEAD(&b, ready_in - 1) == NULL);
        CHECK(POP(&b, ready_in, true) == &handle);
        tb_release(&b);
    }

    /* Before the first reading there is nothing to move: the initial tokens are counted
     * from the first reading of the new clock. */
    tb_bucket b;
    CHECK(INIT(&b, 1e6, 10, 4, true, TB_FIFO) == TB_OK);
    REBASE(&b, old_now, 0);
    CHECK(TOKENS(&b, 5) == 4);
    CHECK(TOKENS(&b, 5 + MS) == 5);
    tb_release(&b);
}

/* ---- drift ---- */

// Grants single tokens back to back through a FIFO waiter at the instant the core names
// (tb_grant_due), from a full bucket anchored at t0, and checks after every grant at t
// that  burst + (t - t0)/ns_per_token - 1  <=  granted  <=  burst + (t - t0)/ns_per_token.
static void drift(double ns_per_token, double burst, long grants)
{
    tb_bucket b;
    const tb_ns t0 = 987654321;
    /* Each grant needs ns_per_token rounded up to a tick, and a full bucket holds burst *
     * ns_per_token rounded up to a tick: the lower bound counts at that rate, never faster
     * than asked, the upper at the rate asked. Both get 1e-9 tokens of slack for the checker's
     * long double quotients, not for drift: a real drift grows with the number of grants and
     * crosses any fixed slack. */
    const long double slack = 1e-9L;
    const long double rate = 1.0L / (long double)ns_per_token;
    const long double need = ceil(ns_per_token * TB_TICKS_PER_NS), full = ceil(burst * ns_per_token * TB_TICKS_PER_NS);
    CHECK(INIT(&b, ns_per_token, burst, burst, true, TB_FIFO) == TB_OK);
    tb_ns now = t0;
    long granted = 0;
    for (long i = 0; i < grants; i++) {
        tb_id id;
        CHECK(ENQUEUE(&b, 1, now, TB_NEVER, &b, &id) == TB_OK);
        tb_ns at = READY_AT(&b, now);
        CHECK(at >= now);
        if (at > now) {
            /* Nothing is granted before at: the count must already keep up at at - 1. */
            long double owed = (full + (long double)(at - 1 - t0) * TB_TICKS_PER_NS) / need;
            CHECK((long double)granted >= owed - 1 - slack);
        }
        now = at;
        CHECK(POP(&b, now, true) == &b);
        granted++;
        long double allowed = (long double)burst + (long double)(now - t0) * rate;
        CHECK((long double)granted <= allowed + slack);
    }
    tb_release(&b);
}

static void test_no_drift(void)
{
    /* 0.37 and 12345.678 ns per token with burst 1: every grant lands after a fractional
     * refill instant, the case where losing the fraction would slow the rate down. */
    drift(0.37, 1, drift_grants);
    drift(12345.678, 1, drift_grants);
    const double rates[] = {1e9 / 3, 1e9 / 7, 0.37, 1, 1e6 / 3, 12345.678};
    const double bursts[] = {1, 10};
    long shorter = drift_grants / 10 > 1000 ? drift_grants / 10 : 1000;
    for (size_t r = 0; r < sizeof rates / sizeof *rates; r++)
        for (size_t k = 0; k < sizeof bursts / sizeof *bursts; k++)
            drift(rates[r], bursts[k], shorter);
}

/* ---- fractional amounts, extreme parameters ---- */

static void test_fractional_amounts(void)
{
    tb_bucket b;
    int handle;
    tb_id id;
    CHECK(INIT(&b, 1e6, 3, 3, true, TB_FIFO) == TB_OK);
    for (int i = 0; i < 6; i++)
        CHECK(TAKE(&b, 0.5, 0));
    CHECK(!TAKE(&b, 0.5, 0));
    CHECK(TOKENS(&b, 0) == 0);
    CHECK(ENQUEUE(&b, 2.25, 0, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(READY_AT(&b, 0) == 2250000);  /* 2.25 tokens at one per ms */
    CHECK(POP(&b, 2250000, true) == &handle);
    CHECK(TOKENS(&b, 2250000) == 0);
    CHECK(TOKENS(&b, 2750000) == 0.5);
    CHECK(TAKE(&b, 0.5, 2750000));
    CHECK(!TAKE(&b, 0.25, 2750000));
    tb_release(&b);
}

static void test_extreme_parameters(void)
{
    tb_bucket b;
    int handle;
    tb_id id;

    /* 2^-20 ns per token, burst 2^40: a million tokens per nanosecond, all in binary. */
    const double tiny = 1.0 / (1 << 20), big = (double)((tb_ns)1 << 40);
    CHECK(INIT(&b, tiny, big, big, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, big, 0));
    CHECK(TOKENS(&b, 0) == 0);
    CHECK(TOKENS(&b, 1) == 1 << 20);
    CHECK(!TAKE(&b, big / 2, 1));
    CHECK(ENQUEUE(&b, big / 2, 1, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(READY_AT(&b, 1) == 1 << 19);  /* 2^39 tokens refill in 2^19 ns */
    CHECK(POP(&b, 1 << 19, true) == &handle);
    CHECK(TOKENS(&b, 1 << 20) == big / 2);
    tb_release(&b);

    /* 1e-6 ns per token, burst 1e12: neither is a binary fraction, so instants are exact
     * only to the nanosecond the roundings may cross. */
    CHECK(INIT(&b, 1e-6, 1e12, 1e12, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 1e12, 0));
    CHECK(close_to(TOKENS(&b, 1), 1e6, 1e-9));
    CHECK(close_to(TOKENS(&b, 400000), 4e11, 1e-9));
    CHECK(TOKENS(&b, 1000001) == 1e12);
    CHECK(ENQUEUE(&b, 5e11, 0, TB_NEVER, &handle, &id) == TB_OK);
    tb_ns at = READY_AT(&b, 0);
    CHECK(llabs(at - 500000) <= 1);
    CHECK(POP(&b, at, true) == &handle);
    CHECK(TOKENS(&b, at) < 1e6);
    tb_release(&b);

    /* One token an hour, a burst of 79,000 tokens: a refill span near TB_MAX_SPAN, read on a
     * clock already 1e15 ns in (the last reading below stays under 2^58 ns). The bucket's debt
     * is then ~2^58 ns, kept in whole ticks: ready instants are exact. */
    const double hour = 3600.0 * 1e9;
    const tb_ns start = 1000000000000000, resolution = 0;
    CHECK(INIT(&b, hour, 79000, 79000, true, TB_FIFO) == TB_OK);
    CHECK(b.limits.rates[0].burst_ns <= (double)TB_MAX_SPAN);
    CHECK(TAKE(&b, 79000, start));
    CHECK(!TAKE(&b, 1, start));
    CHECK(ENQUEUE(&b, 2, start, TB_NEVER, &handle, &id) == TB_OK);
    at = READY_AT(&b, start);
    CHECK(llabs(at - (start + 2 * (tb_ns)hour)) <= resolution);
    CHECK(llabs(PROJECTED(&b, 1, start) - (start + 3 * (tb_ns)hour)) <= resolution);
    CHECK(TOKENS(&b, start + (tb_ns)hour) == 1);
    CHECK(READY_HEAD(&b, start + (tb_ns)hour) == NULL);
    CHECK(POP(&b, at, true) == &handle);
    CHECK(close_to(TOKENS(&b, at), 0, 1e-9));
    /* Full again once all 79,002 granted tokens have refilled. */
    CHECK(close_to(TOKENS(&b, start + 79000 * (tb_ns)hour), 78998, 1e-12));
    CHECK(TOKENS(&b, start + 79002 * (tb_ns)hour + resolution) == 79000);
    tb_release(&b);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        char *end;
        drift_grants = strtol(argv[1], &end, 10);
        if (*end || drift_grants < 1) {
            fprintf(stderr, "usage: %s [drift_grants]\n", argv[0]);
            return 2;
        }
    }
    RUN(test_rebase_keeps_tokens_and_offsets);
    RUN(test_no_drift);
    RUN(test_fractional_amounts);
    RUN(test_extreme_parameters);
    RUN(test_grant_due_grants_every_due_waiter_in_order);
    RUN(test_grant_due_verdicts);
    RUN(test_grant_due_late_credit);
    RUN(test_statistics_are_counted_once);
    RUN(test_each_owner_times_its_first_waiter);
    RUN(test_wait_statistics_follow_a_rebase);
    RUN(test_as_good_as_new);
    return tests_summary();
}
