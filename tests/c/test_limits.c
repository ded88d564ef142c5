/* Unit tests of the limits alone (src/_tokenbucket/limits.c), run without any framework:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_limits.c src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm
 *     ./a.out
 *
 * Prints one line per failed check and ends with "N passed, M failed"; exits non-zero if any
 * test failed. The bucket-level tests (tests/c/test_queue.c, test_grant.c) cover the same arithmetic through
 * the queue; these hold the narrow interface the queue uses to its own contracts. */
#include "limits.h"

#include "harness.h"

#define REPLAY_AHEAD 64  /* amounts ahead from which a one-rate projection may be a bound (limits.c) */

// Fails the current test if an invariant of l is broken.
static void holds(const char *file, int line, const tb_limits *l)
{
    int broken = tb_limits_check(l);
    if (broken) {
        char what[64];
        snprintf(what, sizeof what, "tb_limits_check() returned %d", broken);
        fail_at(file, line, what);
    }
}

#define HOLDS(l) holds(__FILE__, __LINE__, (l))

/* Amounts ahead of a projection, from an array. */
typedef struct {
    const double *amounts;
    size_t count, at;
} amount_array;

static bool next_in_array(void *cursor, double *amount)
{
    amount_array *a = cursor;
    if (a->at == a->count)
        return false;
    *amount = a->amounts[a->at++];
    return true;
}

// The projection of amount behind the count amounts ahead, checked for invariants.
static tb_ns project(const char *file, int line, tb_limits *l, const double *ahead, size_t count,
                     double amount, tb_ns now)
{
    amount_array cursor = {ahead, count, 0};
    tb_ahead queued = {.count = count, .next = next_in_array, .cursor = &cursor};
    for (size_t i = 0; i < count; i++)
        queued.total += ahead[i];
    tb_ns at = tb_limits_projection(l, &queued, amount, now);
    holds(file, line, l);
    return at;
}

#define PROJECT(...) project(__FILE__, __LINE__, __VA_ARGS__)

static void test_fits_and_fit_at_agree(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 3) == TB_OK);
    CHECK(!l.anchored && l.plain);
    CHECK(tb_limits_fit_at(&l, 5, 100) == 100 + 2 * MS);  /* anchors at 100 with 3 tokens */
    CHECK(l.anchored);
    for (tb_ns t = 100; t < 100 + 3 * MS; t += 99991) {
        tb_ns at = tb_limits_fit_at(&l, 5, t);
        CHECK(tb_limits_fits(&l, 5, t) == (at == t));
        CHECK(at >= t && tb_limits_fits(&l, 5, at) && (at == t || !tb_limits_fits(&l, 5, at - 1)));
    }
    /* Nothing fits above the largest grant. */
    CHECK(l.max_amount == 10 && tb_limits_fit_at(&l, 10, 100) == 100 + 7 * MS);
    tb_limits_release(&l);
}

static void test_take_now_and_take(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 4, 4) == TB_OK);
    CHECK(tb_limits_take_now(&l, 3, 0));
    CHECK(!tb_limits_take_now(&l, 2, 0));
    HOLDS(&l);
    CHECK(tb_limits_tokens(&l, 0) == 1);
    /* A take as of an earlier instant counts the refill since then as spent. */
    tb_limits_take(&l, 1, 0, MS);
    HOLDS(&l);
    CHECK(tb_limits_tokens(&l, MS) == 1);
    tb_limits_release(&l);

    /* Two rates and a pause: the short path is off, every limit still counts. */
    CHECK(tb_limits_init(&l, 1e6, 4, 4) == TB_OK);
    CHECK(tb_limits_add_rate(&l, 1e3, 2, 2) == TB_OK);
    CHECK(!l.plain && l.max_amount == 2);
    CHECK(!tb_limits_take_now(&l, 3, 0));
    CHECK(tb_limits_take_now(&l, 2, 0));
    CHECK(tb_limits_tokens(&l, 0) == 0);
    CHECK(tb_limits_tokens(&l, 2000) == 2);
    CHECK(tb_limits_add_rate(&l, 1e3, 2, 2) == TB_EINVAL);  /* not after the first reading */
    tb_limits_pause_until(&l, 5 * MS);
    CHECK(tb_limits_tokens(&l, 5 * MS - 1) == 0 && !tb_limits_fits(&l, 1, 5 * MS - 1));
    CHECK(tb_limits_fit_at(&l, 1, 0) == 5 * MS);
    CHECK(tb_limits_take_now(&l, 1, 5 * MS));
    HOLDS(&l);
    tb_limits_release(&l);
}

static void test_credited_at(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 1, 0) == TB_OK);
    tb_limits_anchor(&l, 0);
    /* No credit: a grant at now is taken as of now. */
    CHECK(tb_limits_credited_at(&l, 1, 3 * MS) == 3 * MS);
    tb_limits_set_late_credit(&l, 0.25);
    CHECK(tb_limits_credited_at(&l, 1, MS + 100) == MS);            /* ready at 1 ms */
    CHECK(tb_limits_credited_at(&l, 1, 3 * MS) == 3 * MS - MS / 4);  /* at most a quarter token */
    CHECK(tb_limits_credited_at(&l, 1, MS) == MS);
    tb_limits_release(&l);

    /* A window alone has no token time: no credit. */
    CHECK(tb_limits_init_window(&l, SECOND, 3) == TB_OK);
    tb_limits_set_late_credit(&l, 0.5);
    CHECK(tb_limits_credited_at(&l, 1, 7) == 7);
    tb_limits_release(&l);
}

static void test_refund(void)
{
    tb_limits l;
    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 2, 0) && tb_limits_take_now(&l, 3, MS));
    CHECK(tb_limits_tokens(&l, MS) == 0);
    tb_limits_refund(&l, 2, MS);  /* the oldest grant of that size leaves the log */
    HOLDS(&l);
    CHECK(l.window.log_count == 1 && tb_limits_tokens(&l, MS) == 2);
    tb_limits_refund(&l, 4, MS);  /* no such grant: nothing changes */
    CHECK(l.window.log_count == 1);
    CHECK(tb_limits_fit_at(&l, 5, MS) == SECOND + MS);
    tb_limits_release(&l);
}

static void test_reckon_late(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 20, 20) == TB_OK);  /* 1,000/s, burst 20, full at 0 */
    CHECK(tb_limits_take_now(&l, 1, 0) && tb_limits_take_now(&l, 19, 0));
    /* The 19 are used only at 16 ms, beside the 16 tokens refilled meanwhile: taken now they would have left
     * 1 of a full rate's 20. The 15 it could not have held beside them are spent. */
    CHECK(tb_limits_tokens(&l, 16 * MS) == 16);
    tb_limits_reckon_late(&l, 19, 16 * MS);
    HOLDS(&l);
    CHECK(tb_limits_tokens(&l, 16 * MS) == 1);
    CHECK(tb_limits_fit_at(&l, 2, 16 * MS) == 17 * MS);
    tb_limits_release(&l);

    /* A rate far from full keeps its tokens: a grant taken now would have left it as much. */
    CHECK(tb_limits_init(&l, 1e6, 20, 20) == TB_OK);
    CHECK(tb_limits_take_now(&l, 20, 0));
    tb_limits_reckon_late(&l, 4, 5 * MS);
    CHECK(tb_limits_tokens(&l, 5 * MS) == 5);
    /* More than a burst used late (grants other threads made for a loop that stalled): the rate owes the 30
     * beyond its burst, so that the next second's uses beside the 50 stay within burst + rate. */
    tb_limits_reckon_late(&l, 50, 5 * MS);
    HOLDS(&l);
    CHECK(tb_limits_tokens(&l, 5 * MS) == 0 && tb_limits_fit_at(&l, 1, 5 * MS) == 36 * MS);
    CHECK(tb_limits_fit_at(&l, 20, 5 * MS) == 55 * MS);
    tb_limits_release(&l);

    /* Each rate of several on its own; a window is left as it is. */
    CHECK(tb_limits_init(&l, 1e6, 20, 20) == TB_OK);
    CHECK(tb_limits_add_rate(&l, 1e5, 5, 5) == TB_OK);  /* 10,000/s, burst 5 */
    tb_limits_reckon_late(&l, 3, 0);                    /* 17 and 2 left */
    CHECK(tb_limits_tokens(&l, 0) == 2);
    CHECK(tb_limits_fit_at(&l, 5, 0) == 3 * MS / 10);  /* the second rate: 0.3 ms to hold 5 again */
    HOLDS(&l);
    tb_limits_release(&l);
    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 2, 0));
    tb_limits_reckon_late(&l, 2, MS);
    CHECK(tb_limits_tokens(&l, MS) == 3);
    tb_limits_release(&l);
}

static void test_holds(void)
{
    tb_limits l;
    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 2, 0) && tb_limits_take_now(&l, 1, MS));
    tb_limits_hold(&l, 1);  /* the newest grant, the 1 of 1 ms, is held */
    HOLDS(&l);
    CHECK(l.window.log_count == 1 && l.window.held == 1 && l.window.holds == 1);
    CHECK(tb_limits_tokens(&l, 5 * SECOND) == 4 && !tb_limits_full(&l, 5 * SECOND));
    /* Held, it leaves the window at t + period at the earliest, should its hold end at t. */
    CHECK(tb_limits_fit_at(&l, 5, 2 * SECOND) == 3 * SECOND);
    CHECK(tb_limits_fit_at(&l, 4, 2 * SECOND) == 2 * SECOND && tb_limits_fit_at(&l, 6, 0) == TB_NEVER);
    tb_limits_end_hold(&l, 1, 2 * SECOND);  /* logged as of its end */
    HOLDS(&l);
    CHECK(l.window.held == 0 && l.window.holds == 0 && tb_limits_tokens(&l, 2 * SECOND) == 4);
    CHECK(tb_limits_fit_at(&l, 5, 2 * SECOND) == 3 * SECOND && tb_limits_full(&l, 3 * SECOND));
    tb_limits_end_hold(&l, 1, 3 * SECOND);  /* none held: nothing */
    CHECK(l.window.log_count == 1 && tb_limits_full(&l, 3 * SECOND));

    /* A hold larger than the newest grant takes the grants before it too, newest first. */
    CHECK(tb_limits_take_now(&l, 2, 4 * SECOND) && tb_limits_take_now(&l, 1, 4 * SECOND + 1));
    tb_limits_hold(&l, 2);
    HOLDS(&l);
    CHECK(l.window.log_count == 1 && l.window.log[l.window.log_first].amount == 1 && l.window.held == 2);
    CHECK(tb_limits_tokens(&l, 4 * SECOND + 1) == 2);
    /* Holds of grants already out of the log (a task resumed a period late) still count: stricter. */
    tb_limits_hold(&l, 3);
    CHECK(l.window.log_count == 0 && l.window.held == 5 && l.window.holds == 2);
    CHECK(tb_limits_tokens(&l, 9 * SECOND) == 0);
    tb_limits_end_hold(&l, 2, 9 * SECOND);
    tb_limits_end_hold(&l, 3, 10 * SECOND);
    HOLDS(&l);
    CHECK(tb_limits_tokens(&l, 10 * SECOND) == 2 && tb_limits_tokens(&l, 11 * SECOND) == 5);  /* the 2 left at 10 s */
    /* A bucket holds nothing. */
    tb_limits_release(&l);
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    tb_limits_hold(&l, 1);
    CHECK(l.window.holds == 0 && tb_limits_full(&l, 0));
    tb_limits_release(&l);
}

static void test_projection(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    CHECK(tb_limits_take_now(&l, 10, 0));
    const double ahead[] = {4, 10, 10};
    /* Nothing ahead: the instant the amount fits. */
    CHECK(PROJECT(&l, ahead, 0, 3, 0) == 3 * MS);
    /* One rate, closed form: 4 + 3 tokens into an empty bucket. */
    CHECK(PROJECT(&l, ahead, 1, 3, 0) == 7 * MS);
    /* Beyond a burst: 4 + 10 + 10 + 5 tokens refill 19 past a full bucket (full at 10 ms). */
    CHECK(PROJECT(&l, ahead, 3, 5, 0) == 29 * MS);

    /* A pause ahead makes it a simulation: the same instants once the pause is over. */
    tb_limits paused = l;
    tb_limits_pause_until(&paused, MS);
    CHECK(PROJECT(&paused, ahead, 1, 3, 0) == 7 * MS);
    CHECK(PROJECT(&paused, ahead, 3, 5, 0) == 29 * MS);
    tb_limits_pause_until(&paused, 20 * MS);
    CHECK(PROJECT(&paused, ahead, 1, 3, 0) == 20 * MS);  /* full by then: the 4 and the 3 at once */
    CHECK(PROJECT(&paused, ahead, 3, 5, 0) == 39 * MS);  /* 29 tokens, 10 of them there at 20 ms */
    /* A projection changes nothing. */
    CHECK(paused.state[0] == l.state[0] && tb_limits_tokens(&l, 0) == 0);
    tb_limits_release(&l);

    /* A window: grants in order as each fits, on a copy of the log. */
    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 5, 0));
    const double window_ahead[] = {3, 2, 4};
    CHECK(PROJECT(&l, window_ahead, 2, 1, 0) == 2 * SECOND);  /* 3 and 2 at 1 s, the 1 at 2 s */
    CHECK(PROJECT(&l, window_ahead, 3, 1, 0) == 2 * SECOND);  /* the 4 at 2 s, the 1 with it */
    CHECK(l.window.log_count == 1);
    tb_limits_release(&l);
}

static void test_projection_past_the_horizon(void)
{
    tb_limits l;
    const double hour = 3600.0 * 1e9;
    CHECK(tb_limits_init(&l, hour, 80000, 0) == TB_OK);  /* a refill of 2.88e17 ns, just below 2^58 */
    tb_limits_anchor(&l, 0);
    const double ahead[] = {80000, 80000, 80000};
    CHECK(PROJECT(&l, ahead, 3, 80000, 0) == TB_NEVER);  /* 4 refills is past 2^58 ns */
    CHECK(PROJECT(&l, ahead, 0, 80000, 0) == 80000 * (tb_ns)hour);
    tb_limits_release(&l);
}

static void test_limit_until(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);  /* 1,000/s, burst 10, full */
    /* 3 left until 100 ms: the rates would grant 10 now, the limit 3 in all before 100 ms. */
    CHECK(tb_limits_limit_until(&l, 3, 100 * MS, 10 * MS, 0));
    HOLDS(&l);
    CHECK(!l.plain && tb_limits_tokens(&l, 0) == 3 && !tb_limits_full(&l, 0));
    CHECK(!tb_limits_fits(&l, 4, 0) && tb_limits_fit_at(&l, 4, 0) == 100 * MS);
    CHECK(tb_limits_take_now(&l, 2, 0) && l.limited_left == 1);
    CHECK(!tb_limits_take_now(&l, 2, MS) && tb_limits_take_now(&l, 1, MS) && l.limited_left == 0);
    CHECK(tb_limits_fit_at(&l, 1, 2 * MS) == 100 * MS && tb_limits_tokens(&l, 50 * MS) == 0);
    /* Queued amounts wait for its end, then take what the rates hold: full by then, the two 5s at 100 ms and
     * the 1 a token later. */
    const double ahead[] = {5, 5};
    CHECK(PROJECT(&l, ahead, 2, 1, 2 * MS) == 101 * MS);
    CHECK(PROJECT(&l, ahead, 1, 1, 2 * MS) == 100 * MS);
    CHECK(tb_limits_tokens(&l, 100 * MS) == 10 && tb_limits_full(&l, 100 * MS));
    /* News of the same window (its end within the slack) only tightens: fewer tokens, the later end. */
    tb_limits_release(&l);
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    tb_limits_limit_until(&l, 5, 100 * MS, 10 * MS, 0);
    CHECK(!tb_limits_limit_until(&l, 8, 105 * MS, 10 * MS, MS));  /* sent before the other, come after: more left */
    CHECK(l.limited_left == 5 && l.limited_until == 105 * MS);
    CHECK(!tb_limits_limit_until(&l, 5, 100 * MS, 10 * MS, MS));  /* the same news again: nothing changes */
    CHECK(tb_limits_limit_until(&l, 2, 95 * MS, 10 * MS, MS));
    CHECK(l.limited_left == 2 && l.limited_until == 105 * MS);
    /* An earlier window's, come late: kept as it is. A later window's: replaces it. */
    CHECK(!tb_limits_limit_until(&l, 0, 50 * MS, 10 * MS, 2 * MS));
    CHECK(l.limited_left == 2 && l.limited_until == 105 * MS);
    tb_limits_limit_until(&l, 9, 300 * MS, 10 * MS, 2 * MS);
    CHECK(l.limited_left == 9 && l.limited_until == 300 * MS);
    /* One already over changes nothing; once a limit is over, the next replaces it whatever its end. */
    CHECK(!tb_limits_limit_until(&l, 0, 2 * MS, 10 * MS, 2 * MS));
    CHECK(l.limited_left == 9 && l.limited_until == 300 * MS);
    tb_limits_limit_until(&l, 4, 310 * MS, 10 * MS, 300 * MS);
    CHECK(l.limited_left == 4 && l.limited_until == 310 * MS);
    /* 0 left: a pause until its end. A rebase moves its end with the clock. */
    tb_limits_limit_until(&l, 0, 310 * MS, 10 * MS, 305 * MS);
    CHECK(!tb_limits_fits(&l, 1, 305 * MS) && tb_limits_fit_at(&l, 1, 305 * MS) == 310 * MS);
    tb_limits_rebase(&l, 305 * MS, 5 * MS);
    CHECK(l.limited_until == 10 * MS && tb_limits_fit_at(&l, 1, 5 * MS) == 10 * MS);
    HOLDS(&l);
    tb_limits_release(&l);
}

static void test_settle(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);  /* 1,000/s, burst 10, full */
    CHECK(tb_limits_take_now(&l, 10, 0));
    tb_gcra taken_at = l.state[0];
    /* Less used: F back where a grant of 3 would have left it. */
    CHECK(tb_limits_settle(&l, 10, 3, false, 0) == TB_OK);
    CHECK(l.state[0] == taken_at - 7 * 1000000 * TB_TICKS_PER_NS && tb_limits_tokens(&l, 0) == 7);
    HOLDS(&l);
    /* More used: the difference taken now though it does not fit, debt that delays the next grant. */
    CHECK(tb_limits_settle(&l, 3, 15, false, 0) == TB_OK);
    CHECK(tb_limits_tokens(&l, 0) == 0 && tb_rate_balance(&l.rates[0], l.state[0], 0) == -5);
    CHECK(!tb_limits_fits(&l, 1, 5 * MS) && tb_limits_fit_at(&l, 1, 0) == 6 * MS);
    HOLDS(&l);
    /* What a rate still owes, now and later: 5, 3 at 2 ms, none at 5 ms and after. */
    CHECK(tb_limits_owed(&l, 0, 0) == 5 && tb_limits_owed(&l, 0, 2 * MS) == 3 && tb_limits_owed(&l, 0, 5 * MS) == 0);
    CHECK(tb_limits_owed(&l, 0, SECOND) == 0);
    /* A change of rate keeps the debt, owed at the new refill: 5 tokens at 2 ms each, then back. */
    CHECK(tb_limits_set_rate(&l, 0, 2e6, 10, 0) == TB_OK);
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == -5 && tb_limits_fit_at(&l, 1, 0) == 12 * MS);
    CHECK(tb_limits_set_rate(&l, 0, 1e6, 10, 0) == TB_OK);
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == -5 && tb_limits_fit_at(&l, 1, 0) == 6 * MS);
    HOLDS(&l);
    /* A refund never fills the rate past full: long after, nothing more comes back. */
    CHECK(tb_limits_settle(&l, 10, 0, false, SECOND) == TB_OK);
    CHECK(l.state[0] == tb_full_since(SECOND) && tb_limits_tokens(&l, SECOND) == 10);
    /* Out of range, nothing changed: taken above any grant, NaN, negative or infinite used, a held grant
     * where none is held, a debt that would take F more than TB_MAX_SPAN past now. */
    tb_gcra before = l.state[0];
    CHECK(tb_limits_settle(&l, 11, 1, false, SECOND) == TB_EINVAL);
    CHECK(tb_limits_settle(&l, 0, 1, false, SECOND) == TB_EINVAL);
    CHECK(tb_limits_settle(&l, 1, NAN, false, SECOND) == TB_EINVAL);
    CHECK(tb_limits_settle(&l, 1, -1, false, SECOND) == TB_EINVAL);
    CHECK(tb_limits_settle(&l, 1, INFINITY, false, SECOND) == TB_EINVAL);
    CHECK(tb_limits_settle(&l, 1, 1, true, SECOND) == TB_EINVAL);
    CHECK(tb_limits_settle(&l, 1, 1e300, false, SECOND) == TB_EINVAL);
    double most = (double)TB_MAX_SPAN / 1e6;  /* tokens of a rate empty for TB_MAX_SPAN */
    CHECK(tb_limits_settle(&l, 1, most + 10, false, SECOND) == TB_EINVAL);
    CHECK(l.state[0] == before);
    CHECK(tb_limits_settle(&l, 1, most / 2, false, SECOND) == TB_OK);
    CHECK(tb_limits_settle(&l, 1, most / 2 + 20, false, SECOND) == TB_EINVAL);  /* added up: past the range */
    CHECK(tb_limits_fit_at(&l, 1, SECOND) > SECOND + TB_MAX_SPAN / 2 - 20 * MS);
    HOLDS(&l);
    tb_limits_release(&l);

    /* Several rates: each takes or gives back the difference in its own time. */
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    CHECK(tb_limits_add_rate(&l, 1e8, 30, 30) == TB_OK);  /* 10/s, burst 30 */
    CHECK(tb_limits_take_now(&l, 10, 0) && tb_limits_settle(&l, 10, 14, false, 0) == TB_OK);
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == -4 && tb_rate_balance(&l.rates[1], l.state[1], 0) == 16);
    CHECK(tb_limits_settle(&l, 10, 4, false, 0) == TB_OK);  /* another grant's, say: 6 back on each */
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == 2 && tb_rate_balance(&l.rates[1], l.state[1], 0) == 22);
    HOLDS(&l);
    /* A running limit loses a debt (never below 0), and gains nothing back. */
    tb_limits_limit_until(&l, 3, SECOND, 0, 0);
    CHECK(tb_limits_settle(&l, 1, 3, false, 0) == TB_OK && l.limited_left == 1);
    CHECK(tb_limits_settle(&l, 1, 5, false, 0) == TB_OK && l.limited_left == 0);
    CHECK(tb_limits_settle(&l, 5, 0, false, 0) == TB_OK && l.limited_left == 0);
    HOLDS(&l);
    tb_limits_release(&l);

    /* A grant above every burst, up to the largest request (a lease's share of a key's grant): a burst of 2
     * whose need is half TB_MAX_SPAN, so that the need of 1,024 bursts is far past the span. */
    double npt = (double)TB_MAX_SPAN / 4;
    CHECK(tb_limits_init(&l, npt, 2, 2) == TB_OK && tb_limits_set_largest(&l, 2048) == TB_OK);
    CHECK(tb_limits_settle(&l, 2049, 0, false, 0) == TB_EINVAL && tb_rate_balance(&l.rates[0], l.state[0], 0) == 2);
    CHECK(tb_limits_settle(&l, 2048, 2048.5, false, 0) == TB_OK);  /* the difference, half a token, as debt */
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == 1.5);
    CHECK(tb_limits_settle(&l, 2048, 2047.75, false, 0) == TB_OK);  /* a quarter back */
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == 1.75);
    CHECK(tb_limits_settle(&l, 2048, 2052.5, false, 0) == TB_EINVAL);  /* 4.5 tokens of debt: past the span */
    CHECK(tb_rate_balance(&l.rates[0], l.state[0], 0) == 1.75);
    CHECK(tb_limits_settle(&l, 2048, 0, false, 0) == TB_OK && l.state[0] == tb_full_since(0));  /* all back: full */
    HOLDS(&l);
    tb_limits_release(&l);

    /* A window: a refund shrinks the oldest logged grant of that size, a debt is logged now; a held grant's
     * hold changes instead, and ends with what it cost (nothing logged for 0). */
    CHECK(tb_limits_init_window(&l, SECOND, 10) == TB_OK);
    CHECK(tb_limits_take_now(&l, 5, 0) && tb_limits_take_now(&l, 5, 100 * MS));
    CHECK(tb_limits_settle(&l, 5, 2, false, 200 * MS) == TB_OK);
    CHECK(l.window.log_count == 2 && l.window.log[0].amount == 2 && tb_limits_tokens(&l, 200 * MS) == 3);
    CHECK(tb_limits_settle(&l, 5, 0, false, 200 * MS) == TB_OK && l.window.log_count == 1);
    CHECK(tb_limits_settle(&l, 2, 6, false, 300 * MS) == TB_OK && tb_limits_tokens(&l, 300 * MS) == 4);
    CHECK(tb_limits_fit_at(&l, 5, 300 * MS) == SECOND && tb_limits_fit_at(&l, 9, 300 * MS) == 1300 * MS);
    CHECK(tb_limits_settle(&l, 1, 100, false, 300 * MS) == TB_OK && tb_limits_tokens(&l, 300 * MS) == 0);
    CHECK(tb_limits_fit_at(&l, 1, 300 * MS) == 1300 * MS);
    HOLDS(&l);
    tb_limits_release(&l);
    CHECK(tb_limits_init_window(&l, SECOND, 10) == TB_OK);
    CHECK(tb_limits_take_now(&l, 4, 0));
    tb_limits_hold(&l, 4);
    CHECK(tb_limits_settle(&l, 4, 7, true, 0) == TB_OK && l.window.held == 7 && tb_limits_tokens(&l, 0) == 3);
    tb_limits_end_hold(&l, 7, 500 * MS);
    CHECK(l.window.holds == 0 && l.window.log_count == 1 && tb_limits_fit_at(&l, 4, 500 * MS) == 1500 * MS);
    CHECK(tb_limits_take_now(&l, 3, 600 * MS));
    tb_limits_hold(&l, 3);
    CHECK(tb_limits_settle(&l, 3, 0, true, 600 * MS) == TB_OK && l.window.held == 0);
    tb_limits_end_hold(&l, 0, 700 * MS);
    CHECK(l.window.log_count == 1 && tb_limits_tokens(&l, 700 * MS) == 3);
    HOLDS(&l);
    tb_limits_release(&l);
}

static void test_full(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 2.5, 4, 4) == TB_OK);
    CHECK(tb_limits_full(&l, 0));
    CHECK(tb_limits_take_now(&l, 1, 0));
    CHECK(!tb_limits_full(&l, 2) && tb_limits_full(&l, 3));  /* full again at 2.5 ns */
    tb_limits_release(&l);
}

static void test_changes(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    CHECK(tb_limits_take_now(&l, 6, 0));
    /* A new rate keeps the tokens held, at most its burst. */
    CHECK(tb_limits_set_rate(&l, 0, 2e6, 20, 0) == TB_OK);
    CHECK(tb_limits_tokens(&l, 0) == 4 && tb_limits_tokens(&l, 2 * MS) == 5 && l.max_amount == 20);
    CHECK(tb_limits_set_rate(&l, 0, 1e6, 2, 0) == TB_OK);
    CHECK(tb_limits_tokens(&l, 0) == 2 && l.max_amount == 2);
    CHECK(tb_limits_set_rate(&l, 1, 1e6, 2, 0) == TB_EINVAL);
    CHECK(tb_limits_set_rate(&l, 0, NAN, 2, 0) == TB_EINVAL);
    CHECK(tb_limits_set_window(&l, SECOND, 1) == TB_EINVAL);  /* no window to change */
    HOLDS(&l);

    /* A rebase moves F and the pause with the clock. */
    tb_limits_pause_until(&l, 3 * MS);
    tb_limits_rebase(&l, 3 * MS, 0);
    CHECK(l.paused_until == 0 && tb_limits_tokens(&l, 0) == 2);
    tb_limits_release(&l);

    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 4, 0));
    CHECK(tb_limits_set_window(&l, 2 * SECOND, 8) == TB_OK);
    CHECK(tb_limits_tokens(&l, SECOND) == 4 && l.max_amount == 8);
    CHECK(tb_limits_set_window(&l, 0, 8) == TB_EINVAL && tb_limits_set_window(&l, SECOND, 0) == TB_EINVAL);
    tb_limits_rebase(&l, SECOND, 0);
    CHECK(l.window.log[l.window.log_first].at == -SECOND && tb_limits_tokens(&l, 0) == 4);
    HOLDS(&l);
    tb_limits_release(&l);
}

static void test_check_finds_broken_invariants(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    tb_limits_anchor(&l, 0);
    HOLDS(&l);
    tb_limits broken = l;
    broken.rates[0].burst_ticks--;  /* a full rate could not grant its burst */
    CHECK(tb_limits_check(&broken) == 1);
    broken = l;
    broken.max_amount = 11;
    CHECK(tb_limits_check(&broken) == 1);
    broken = l;
    broken.max_request = 12;  /* requests above the bursts with no largest set */
    CHECK(tb_limits_check(&broken) == 1);
    broken = l;
    broken.largest = -1;
    CHECK(tb_limits_check(&broken) == 1);
    broken = l;
    broken.nrates = 0;
    CHECK(tb_limits_check(&broken) == 1);
    tb_limits_release(&l);

    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 1, 5) && tb_limits_take_now(&l, 1, 6));
    l.window.log[1].at = 4;  /* out of time order */
    CHECK(tb_limits_check(&l) == 10);
    l.window.log[1].at = 6;
    l.window.held = 1;  /* held tokens with no hold */
    CHECK(tb_limits_check(&l) == 10);
    tb_limits_release(&l);
}

static void test_needs_round_up_to_a_tick(void)
{
    tb_limits l;
    /* 0.37 ns per token is 5.92 ticks: a token needs 6, so the rate is slower, never faster. */
    CHECK(tb_limits_init(&l, 0.37, 1, 1) == TB_OK);
    CHECK(tb_limits_take_now(&l, 1, 0));
    CHECK(l.state[0] == 6 && l.rates[0].burst_ticks == 6);
    CHECK(tb_limits_fit_at(&l, 1, 0) == 1);  /* full again at 6/16 ns: the next whole one */
    CHECK(tb_limits_take_now(&l, 1, 1));
    CHECK(l.state[0] == 6 + 6);  /* full for less than a nanosecond: its F was kept... */
    CHECK(tb_limits_take_now(&l, 1, 3) && l.state[0] == 48 + 6);  /* ...else it restarts at now */
    /* A refund gives back the token's span in whole ticks, rounded down (5 of 5.92): never more than
     * was paid, even when the rate has filled up since and kept none of the rounding. */
    tb_limits_refund(&l, 1, 3);
    CHECK(l.state[0] == 48 + 1 && tb_limits_tokens(&l, 3) < 1);
    tb_limits_release(&l);

    /* The longest refill from the latest clock reading keeps F below 2^63 ticks. */
    const tb_ns last = TB_MAX_SPAN - 1;
    CHECK(tb_limits_init(&l, (double)((tb_ns)1 << 28), (double)((tb_ns)1 << 30), 0) == TB_OK);
    tb_limits_anchor(&l, last);
    HOLDS(&l);
    CHECK(l.state[0] == last * TB_TICKS_PER_NS + ((tb_ns)1 << 62));
    CHECK(tb_limits_tokens(&l, last) == 0);
    tb_limits_rebase(&l, last, -last);  /* onto a clock at the other end of the range */
    CHECK(tb_limits_tokens(&l, -last) == 0 && tb_limits_tokens(&l, -last + ((tb_ns)1 << 28)) == 1);
    tb_limits_release(&l);
}

static void test_long_queue_projection_is_a_bound(void)
{
    /* 64 or more amounts ahead of one rate: a closed form, never early, at most a tick per
     * amount late. A second, loose rate makes the other limits replay the grants exactly. */
    enum { AHEAD = 100 };
    double ahead[AHEAD];
    for (int i = 0; i < AHEAD; i++)
        ahead[i] = 1 + i % 3 * 0.3;
    tb_limits one, two;
    CHECK(tb_limits_init(&one, 0.3, 10, 0) == TB_OK);
    CHECK(tb_limits_init(&two, 0.3, 10, 0) == TB_OK);
    CHECK(tb_limits_add_rate(&two, 1e-3, 1e9, 1e9) == TB_OK);
    tb_ns bound = PROJECT(&one, ahead, AHEAD, 2, 1000);
    tb_ns exact = PROJECT(&two, ahead, AHEAD, 2, 1000);
    CHECK(exact > 1000 && bound >= exact && bound <= exact + AHEAD / TB_TICKS_PER_NS + 1);
    /* Below 64 ahead, one rate replays too: the same instant as two. */
    CHECK(PROJECT(&one, ahead, 63, 2, 1000) == PROJECT(&two, ahead, 63, 2, 1000));
    tb_limits_release(&one);
    tb_limits_release(&two);
}

static void test_grant_until(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);  /* 1,000/s, burst 10, full */
    CHECK(tb_limits_full(&l, 0));
    tb_limits_anchor(&l, 0);
    tb_limits_grant_until(&l, 5 * MS);
    HOLDS(&l);
    CHECK(!l.plain && !tb_limits_full(&l, 0));  /* an end ahead: not as good as new, as a running pause */
    /* Grants before the end, none at or after it. */
    CHECK(tb_limits_fits(&l, 1, 5 * MS - 1) && !tb_limits_fits(&l, 1, 5 * MS) && !tb_limits_fits(&l, 1, 6 * MS));
    CHECK(!tb_limits_take_now(&l, 1, 5 * MS));
    CHECK(tb_limits_tokens(&l, 5 * MS) == 0 && tb_limits_tokens(&l, SECOND) == 0);
    CHECK(tb_limits_tokens(&l, 4 * MS) == 10);
    CHECK(tb_limits_take_now(&l, 10, 0));
    /* The first instant every limit fits: kept before the end, TB_NEVER from the end on. */
    CHECK(tb_limits_fit_at(&l, 4, 0) == 4 * MS && tb_limits_fit_at(&l, 5, 0) == TB_NEVER);
    CHECK(tb_limits_fit_at(&l, 1, 5 * MS) == TB_NEVER);
    const double ahead[] = {2};
    CHECK(PROJECT(&l, ahead, 1, 2, 0) == 4 * MS && PROJECT(&l, ahead, 1, 3, 0) == TB_NEVER);
    double queue[REPLAY_AHEAD];  /* a long queue: a bound, not a replay, but past the end all the same */
    for (size_t i = 0; i < REPLAY_AHEAD; i++)
        queue[i] = 0.0625;
    CHECK(PROJECT(&l, queue, REPLAY_AHEAD, 0.5, 0) < 5 * MS && PROJECT(&l, queue, REPLAY_AHEAD, 1, 0) == TB_NEVER);
    /* A renewal moves the end later, a lapse to the past; no end again: grants as before, never plain. */
    tb_limits_grant_until(&l, 20 * MS);
    CHECK(tb_limits_fit_at(&l, 5, 0) == 5 * MS && PROJECT(&l, ahead, 1, 3, 0) == 5 * MS);
    tb_limits_grant_until(&l, -SECOND);
    CHECK(!tb_limits_fits(&l, 1, 10 * MS) && tb_limits_fit_at(&l, 1, 10 * MS) == TB_NEVER);
    CHECK(!tb_limits_full(&l, 10 * MS));  /* an end passed: nothing granted, unlike a new limiter */
    tb_limits_grant_until(&l, TB_NEVER);
    CHECK(!l.plain && tb_limits_full(&l, 10 * MS) && tb_limits_fit_at(&l, 5, 0) == 5 * MS);
    /* A rebase moves the end with the clock, and leaves no end as it is. */
    tb_limits_grant_until(&l, 30 * MS);
    tb_limits_rebase(&l, 10 * MS, 100 * MS);
    CHECK(l.grants_until == 120 * MS && tb_limits_fits(&l, 1, 119 * MS) && !tb_limits_fits(&l, 1, 120 * MS));
    tb_limits_grant_until(&l, TB_NEVER);
    tb_limits_rebase(&l, 100 * MS, 0);
    CHECK(l.grants_until == TB_NEVER);
    HOLDS(&l);
    tb_limits_release(&l);
}

static void test_largest(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 4, 4) == TB_OK);
    CHECK(l.largest == 0 && l.max_request == 4);
    CHECK(tb_limits_set_largest(&l, 10) == TB_OK);
    HOLDS(&l);
    CHECK(l.max_amount == 4 && l.max_request == 10);
    /* Above the burst: never fits, never timed, until a burst grows to it. */
    CHECK(!tb_limits_fits(&l, 6, 0) && !tb_limits_take_now(&l, 6, 0));
    CHECK(tb_limits_fit_at(&l, 6, 0) == TB_NEVER && PROJECT(&l, NULL, 0, 6, 0) == TB_NEVER);
    /* A long queue of one rate is replayed, not summed, while a request may exceed the burst. */
    double ahead[REPLAY_AHEAD];
    for (size_t i = 0; i < REPLAY_AHEAD; i++)
        ahead[i] = i == 3 ? 6 : 1;
    CHECK(PROJECT(&l, ahead, REPLAY_AHEAD, 1, 0) == TB_NEVER);
    ahead[3] = 1;
    CHECK(PROJECT(&l, ahead, REPLAY_AHEAD, 1, 0) == (REPLAY_AHEAD - 3) * MS);
    CHECK(tb_limits_set_rate(&l, 0, 1e6, 8, 0) == TB_OK);  /* keeps its 4 tokens */
    CHECK(tb_limits_fit_at(&l, 6, 0) == 2 * MS && l.max_request == 10);
    /* Bursts above the largest: they alone. 0 resets to them; out of range: EINVAL, nothing changed. */
    CHECK(tb_limits_set_rate(&l, 0, 1e6, 12, 0) == TB_OK && l.max_request == 12);
    CHECK(tb_limits_set_rate(&l, 0, 1e6, 4, 0) == TB_OK && l.max_request == 10);
    const double bad[] = {-1, -0.5, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(tb_limits_set_largest(&l, bad[i]) == TB_EINVAL && l.largest == 10 && l.max_request == 10);
    CHECK(tb_limits_set_largest(&l, 0) == TB_OK && l.max_request == 4);
    CHECK(tb_limits_set_largest(&l, 2) == TB_OK && l.max_request == 4);  /* within the burst: the burst */
    HOLDS(&l);
    tb_limits_release(&l);

    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_set_largest(&l, 7) == TB_OK && l.max_request == 7 && l.max_amount == 5);
    CHECK(!tb_limits_fits(&l, 6, 0) && tb_limits_fit_at(&l, 6, 0) == TB_NEVER);
    HOLDS(&l);
    tb_limits_release(&l);
}

static void test_credit(void)
{
    tb_limits l;
    CHECK(tb_limits_init(&l, 1e6, 10, 4) == TB_OK);
    CHECK(tb_limits_add_rate(&l, 2e6, 20, 20) == TB_OK);
    CHECK(tb_limits_credit(&l, 3, 0) == TB_OK && tb_limits_tokens(&l, 0) == 7);
    CHECK(tb_rate_tokens(&l.rates[1], l.state[1], 0) == 20);  /* never fuller than full */
    CHECK(tb_limits_credit(&l, 100, 0) == TB_OK && tb_limits_tokens(&l, 0) == 10 && tb_limits_full(&l, 0));
    CHECK(tb_limits_credit(&l, 1e300, 0) == TB_OK && tb_limits_tokens(&l, 0) == 10);
    /* A debt, fitting or not, taken from every rate. */
    CHECK(tb_limits_credit(&l, -15, 0) == TB_OK);
    CHECK(tb_limits_tokens(&l, 0) == 0 && tb_limits_owed(&l, 0, 0) == 5);
    CHECK(tb_rate_balance(&l.rates[1], l.state[1], 0) == 5);
    CHECK(tb_limits_fit_at(&l, 1, 0) == 6 * MS);
    CHECK(tb_limits_credit(&l, 0, 0) == TB_OK && tb_limits_fit_at(&l, 1, 0) == 6 * MS);
    /* Out of range: EINVAL, nothing changed. */
    tb_gcra was[] = {l.state[0], l.state[1]};
    const double bad[] = {NAN, INFINITY, -INFINITY, -(double)TB_MAX_SPAN / 2e6, -1e300};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK(tb_limits_credit(&l, bad[i], 0) == TB_EINVAL && l.state[0] == was[0] && l.state[1] == was[1]);
    CHECK(tb_limits_credit(&l, -(double)TB_MAX_SPAN / 2e6 + 100, 0) == TB_OK);  /* within the span: taken */
    HOLDS(&l);
    tb_limits_release(&l);

    /* A running limit is untouched. */
    CHECK(tb_limits_init(&l, 1e6, 10, 10) == TB_OK);
    CHECK(tb_limits_limit_until(&l, 5, 100 * MS, 0, 0));
    CHECK(tb_limits_credit(&l, -3, 0) == TB_OK && l.limited_left == 5 && tb_limits_tokens(&l, 0) == 5);
    CHECK(tb_limits_credit(&l, -4, 0) == TB_OK && l.limited_left == 5 && tb_limits_tokens(&l, 0) == 3);
    CHECK(tb_limits_credit(&l, 2, 0) == TB_OK && l.limited_left == 5 && tb_limits_tokens(&l, 0) == 5);
    tb_limits_release(&l);

    /* A window has no tokens to credit. */
    CHECK(tb_limits_init_window(&l, SECOND, 5) == TB_OK);
    CHECK(tb_limits_take_now(&l, 2, 0));
    CHECK(tb_limits_credit(&l, 1, 0) == TB_EINVAL && tb_limits_credit(&l, -1, 0) == TB_EINVAL);
    CHECK(tb_limits_tokens(&l, 0) == 3);
    HOLDS(&l);
    tb_limits_release(&l);
}

int main(void)
{
    RUN(test_fits_and_fit_at_agree);
    RUN(test_take_now_and_take);
    RUN(test_credited_at);
    RUN(test_refund);
    RUN(test_reckon_late);
    RUN(test_holds);
    RUN(test_projection);
    RUN(test_projection_past_the_horizon);
    RUN(test_limit_until);
    RUN(test_settle);
    RUN(test_full);
    RUN(test_changes);
    RUN(test_check_finds_broken_invariants);
    RUN(test_needs_round_up_to_a_tick);
    RUN(test_long_queue_projection_is_a_bound);
    RUN(test_grant_until);
    RUN(test_largest);
    RUN(test_credit);
    return tests_summary();
}
