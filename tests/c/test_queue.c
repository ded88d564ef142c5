/* Unit tests of the bucket's queue (src/_tokenbucket/queue.c over limits.c): parameters, refill,
 * exact schedules, wake order, withdrawal, refunds, deadlines and projection, memory. Run without any
 * framework:
 *
 *     cc -std=c11 -O2 -Isrc/_tokenbucket -Itests/c tests/c/test_queue.c \
 *        src/_tokenbucket/queue.c src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm && ./a.out
 *
 * Prints one line per failed check and ends with "N passed, M failed"; exits non-zero if any test
 * failed. Every operation that can change a bucket goes through checked_bucket.h, which runs tb_check
 * afterwards. */
#include "checked_bucket.h"

#include <string.h>


/* ---- parameters ---- */

static void test_init_rejects_out_of_range(void)
{
    tb_bucket b;
    const double bad_positive[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, -1.0, -1e-300};
    for (size_t i = 0; i < sizeof bad_positive / sizeof *bad_positive; i++) {
        CHECK(INIT(&b, bad_positive[i], 10, 10, true, TB_FIFO) == TB_EINVAL);
        CHECK(INIT(&b, 1e6, bad_positive[i], 0, true, TB_FIFO) == TB_EINVAL);
    }
    CHECK(INIT(&b, 1e6, 10, -1, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, 1e6, 10, -1e-300, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, 1e6, 10, 10.5, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, 1e6, 10, NAN, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, 1e6, 10, INFINITY, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, 1e6, 10, 10, true, (tb_order)7) == TB_EINVAL);
    CHECK(INIT(&b, 1e6, 10, 10, true, (tb_order)-1) == TB_EINVAL);

    /* 2^28 ns per token times 2^30 tokens is exactly TB_MAX_SPAN: the longest refill allowed. */
    double ns_per_token = (double)((tb_ns)1 << 28), burst = (double)((tb_ns)1 << 30);
    CHECK(INIT(&b, ns_per_token, burst, burst, true, TB_FIFO) == TB_OK);
    tb_release(&b);
    CHECK(INIT(&b, ns_per_token, burst + 1, burst, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, ns_per_token * 2, burst, burst, true, TB_FIFO) == TB_EINVAL);
    CHECK(INIT(&b, 1e300, 1e300, 0, true, TB_FIFO) == TB_EINVAL);

    /* The edges of the valid ranges are accepted. */
    CHECK(INIT(&b, 1e6, 10, 0, false, TB_SMALLEST_FIRST) == TB_OK);
    tb_release(&b);
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    tb_release(&b);
}

/* ---- refill ---- */

static void test_starts_full_and_refills_up_to_burst(void)
{
    tb_bucket b;
    /* 1000 tokens/s: one token per millisecond, so every instant below is exact. */
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TOKENS(&b, 0) == 10);
    for (int i = 0; i < 10; i++)
        CHECK(TAKE(&b, 1, 0));
    CHECK(!CAN_TAKE(&b, 1, 0));
    CHECK(!TAKE(&b, 1, 0));
    CHECK(TOKENS(&b, 0) == 0);
    CHECK(TOKENS(&b, MS / 2) == 0.5);
    CHECK(TOKENS(&b, MS) == 1);
    CHECK(TOKENS(&b, 7 * MS) == 7);
    CHECK(TOKENS(&b, 10 * MS) == 10);
    CHECK(TOKENS(&b, 10 * SECOND) == 10);
    tb_release(&b);

    /* Initial tokens are counted from the first reading of the clock, whatever it reads. */
    const tb_ns first = 123456789;
    CHECK(INIT(&b, 1e6, 10, 3, true, TB_FIFO) == TB_OK);
    CHECK(TOKENS(&b, first) == 3);
    CHECK(!CAN_TAKE(&b, 3.5, first));
    CHECK(CAN_TAKE(&b, 3, first));
    CHECK(TOKENS(&b, first + 2 * MS) == 5);
    for (tb_ns t = first; t < first + 20 * MS; t += 12347) {
        double expected = fmin(10.0, 3.0 + (double)(t - first) / 1e6);
        CHECK(close_to(TOKENS(&b, t), expected, 1e-12));
    }
    CHECK(TOKENS(&b, first + 7 * MS) == 10);
    CHECK(TOKENS(&b, first + 1000 * SECOND) == 10);
    /* A bucket left idle does not bank more than burst. */
    CHECK(TAKE(&b, 10, first + 1000 * SECOND));
    CHECK(!TAKE(&b, 0.001, first + 1000 * SECOND));
    tb_release(&b);

    CHECK(INIT(&b, 1e6, 10, 0, true, TB_FIFO) == TB_OK);
    CHECK(TOKENS(&b, 5) == 0);
    CHECK(!TAKE(&b, 1, 5));
    CHECK(TOKENS(&b, 5 + MS) == 1);
    tb_release(&b);
}

/* ---- exact schedules ---- */

static void test_two_per_second_burst_40(void)
{
    tb_bucket b;
    const tb_ns half_second = SECOND / 2;  /* one token's refill at 2 tokens/s */
    CHECK(INIT(&b, 1e9 / 2, 40, 40, true, TB_FIFO) == TB_OK);
    for (int i = 0; i < 40; i++)
        CHECK(TAKE(&b, 1, 0));
    CHECK(!TAKE(&b, 1, 0));

    enum { N = 20 };
    int handles[N];
    tb_id id;
    for (int i = 0; i < N; i++)
        CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &handles[i], &id) == TB_OK);
    CHECK(READY_AT(&b, 0) == half_second);
    tb_ns now = 0;
    for (int i = 0; i < N; i++) {
        tb_ns due = (i + 1) * half_second;
        CHECK(READY_HEAD(&b, due - 1) == NULL);
        now = READY_AT(&b, now);
        CHECK(now == due);
        CHECK(READY_HEAD(&b, now) == &handles[i]);
        CHECK(POP(&b, now, true) == &handles[i]);
    }
    CHECK(READY_AT(&b, now) == TB_NEVER);
    tb_release(&b);
}

static void test_ten_per_second_waiter_for_three(void)
{
    tb_bucket b;
    int handle;
    tb_id id;
    CHECK(INIT(&b, 1e9 / 10, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 10, 0));
    CHECK(ENQUEUE(&b, 3, 0, TB_NEVER, &handle, &id) == TB_OK);
    /* Three tokens at ten per second take 0.3 s. */
    CHECK(READY_AT(&b, 0) == 3 * SECOND / 10);
    CHECK(READY_HEAD(&b, 3 * SECOND / 10 - 1) == NULL);
    CHECK(READY_HEAD(&b, 3 * SECOND / 10) == &handle);
    CHECK(POP(&b, 3 * SECOND / 10, true) == &handle);
    CHECK(TOKENS(&b, 3 * SECOND / 10) == 0);
    tb_release(&b);
}

static void test_hundred_per_second_burst_1(void)
{
    tb_bucket b;
    enum { N = 500 };
    static int handles[N];
    tb_id id;
    CHECK(INIT(&b, 1e9 / 100, 1, 1, true, TB_FIFO) == TB_OK);
    for (int i = 0; i < N; i++)
        CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &handles[i], &id) == TB_OK);
    tb_ns now = 0, previous = 0;
    for (int i = 0; i < N; i++) {
        now = READY_AT(&b, now);
        /* The first finds the bucket full; each later one waits for one token: 10 ms. */
        CHECK(now == (i == 0 ? 0 : previous + 10 * MS));
        CHECK(POP(&b, now, true) == &handles[i]);
        previous = now;
    }
    CHECK(now == (N - 1) * 10 * MS);
    CHECK(b.waiting == 0);
    tb_release(&b);
}

/* ---- wake order and fairness ---- */

static void test_fifo_fair_waiter_is_not_overtaken(void)
{
    tb_bucket b;
    int big, small[2];
    tb_id id;
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 7, 0));
    CHECK(!TAKE(&b, 5, 0));
    CHECK(ENQUEUE(&b, 5, 0, TB_NEVER, &big, &id) == TB_OK);
    /* Three tokens are free, but a waiter came first. */
    CHECK(TOKENS(&b, 0) == 3);
    CHECK(!CAN_TAKE(&b, 1, 0));
    CHECK(!TAKE(&b, 1, 0));
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &small[0], &id) == TB_OK);
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &small[1], &id) == TB_OK);
    CHECK(READY_HEAD(&b, 0) == NULL);
    CHECK(TOKENS(&b, 0) == 3);
    /* 5 needs two more tokens (2 ms); each 1 then needs one more (1 ms). */
    tb_ns now = READY_AT(&b, 0);
    CHECK(now == 2 * MS);
    CHECK(POP(&b, now, true) == &big);
    now = READY_AT(&b, now);
    CHECK(now == 3 * MS);
    CHECK(POP(&b, now, true) == &small[0]);
    now = READY_AT(&b, now);
    CHECK(now == 4 * MS);
    CHECK(POP(&b, now, true) == &small[1]);
    /* With the queue empty, newcomers take free tokens again. */
    CHECK(TAKE(&b, 1, 5 * MS));
    tb_release(&b);
}

static void test_unfair_newcomer_takes_unless_a_deadline_waits(void)
{
    tb_bucket b;
    int big, timed;
    tb_id big_id, timed_id;
    CHECK(INIT(&b, 1e6, 10, 10, false, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 7, 0));
    CHECK(ENQUEUE(&b, 5, 0, TB_NEVER, &big, &big_id) == TB_OK);
    CHECK(READY_AT(&b, 0) == 2 * MS);
    CHECK(CAN_TAKE(&b, 1, 0));
    CHECK(TAKE(&b, 1, 0));
    /* The newcomer's token delays the head by one token's refill. */
    CHECK(READY_AT(&b, 0) == 3 * MS);
    CHECK(TOKENS(&b, 0) == 2);

    /* A queued deadline was promised on the assumption that nobody cuts in. */
    CHECK(ENQUEUE(&b, 1, 0, SECOND, &timed, &timed_id) == TB_OK);
    CHECK(!CAN_TAKE(&b, 1, 0));
    CHECK(!TAKE(&b, 1, 0));
    CHECK(TOKENS(&b, 0) == 2);
    CHECK(WITHDRAW(&b, timed_id) == &timed);
    CHECK(TAKE(&b, 1, 0));
    CHECK(READY_AT(&b, 0) == 4 * MS);
    CHECK(WITHDRAW(&b, big_id) == &big);
    tb_release(&b);
}

static void test_smallest_first_order(void)
{
    tb_bucket b;
    const double amounts[] = {5, 2, 7, 2, 1, 5};
    enum { N = sizeof amounts / sizeof *amounts };
    int handles[N];
    tb_id id;
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_SMALLEST_FIRST) == TB_OK);
    CHECK(TAKE(&b, 10, 0));
    for (int i = 0; i < N; i++)
        CHECK(ENQUEUE(&b, amounts[i], 0, TB_NEVER, &handles[i], &id) == TB_OK);

    /* Only FIFO grants can be projected, so a deadline cannot be promised here. */
    size_t waiting = b.waiting;
    CHECK(ENQUEUE(&b, 1, 0, 10 * SECOND, &handles[0], &id) == TB_EINVAL);
    CHECK(b.waiting == waiting);

    /* Smallest first, arrival order among equals; with the bucket empty at 0 and refilling
     * one token per ms, each grant comes when the running total of granted amounts has
     * refilled. */
    const int order[N] = {4, 1, 3, 0, 5, 2};
    tb_ns now = 0;
    double granted = 0;
    for (int i = 0; i < N; i++) {
        granted += amounts[order[i]];
        now = READY_AT(&b, now);
        CHECK(now == (tb_ns)(granted * 1e6));
        CHECK(POP(&b, now, true) == &handles[order[i]]);
    }
    tb_release(&b);
}

static void test_enqueue_rejects_amounts_that_can_never_be_granted(void)
{
    tb_bucket b;
    int handle;
    tb_id id = 0;
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    const double bad[] = {0.0, -1.0, NAN, INFINITY, 10.5};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(ENQUEUE(&b, bad[i], 0, TB_NEVER, &handle, &id) == TB_EINVAL);
        CHECK(b.waiting == 0);
    }
    CHECK(ENQUEUE(&b, 10, 0, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(READY_AT(&b, 0) == 0);
    CHECK(POP(&b, 0, true) == &handle);
    tb_release(&b);
}

static void test_ready_head_and_pop_without_grant(void)
{
    tb_bucket b;
    int first, second;
    tb_id id;
    CHECK(INIT(&b, 1e6, 4, 4, true, TB_FIFO) == TB_OK);
    CHECK(READY_HEAD(&b, 0) == NULL);
    CHECK(READY_AT(&b, 0) == TB_NEVER);
    CHECK(ENQUEUE(&b, 3, 0, TB_NEVER, &first, &id) == TB_OK);
    CHECK(ENQUEUE(&b, 3, 0, TB_NEVER, &second, &id) == TB_OK);
    CHECK(READY_HEAD(&b, 0) == &first);
    /* Popping without a grant (a cancelled waiter) leaves the tokens for the next one. */
    CHECK(POP(&b, 0, false) == &first);
    CHECK(TOKENS(&b, 0) == 4);
    CHECK(READY_HEAD(&b, 0) == &second);
    CHECK(POP(&b, 0, true) == &second);
    CHECK(TOKENS(&b, 0) == 1);
    tb_release(&b);
}

/* ---- withdraw ---- */

static void test_withdraw_head_middle_tail_and_stale_ids(void)
{
    tb_bucket b;
    enum { N = 5 };
    int handles[N];
    tb_id ids[N];
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 10, 0));
    for (int i = 0; i < N; i++)
        CHECK(ENQUEUE(&b, i + 1, 0, TB_NEVER, &handles[i], &ids[i]) == TB_OK);
    CHECK(b.queued_tokens == 15);

    CHECK(WITHDRAW(&b, ids[2]) == &handles[2]);  /* middle */
    CHECK(WITHDRAW(&b, ids[4]) == &handles[4]);  /* tail */
    CHECK(b.waiting == 3 && b.queued_tokens == 7);
    /* The head (1 token) is due at 1 ms; withdrawing it re-times the new head (2 tokens). */
    CHECK(READY_AT(&b, 0) == 1 * MS);
    CHECK(WITHDRAW(&b, ids[0]) == &handles[0]);  /* head */
    CHECK(READY_AT(&b, 0) == 2 * MS);

    /* Withdrawn twice, never issued, or out of any slot range: not queued. */
    CHECK(WITHDRAW(&b, ids[0]) == NULL);
    CHECK(WITHDRAW(&b, ids[2]) == NULL);
    CHECK(WITHDRAW(&b, 0) == NULL);
    CHECK(WITHDRAW(&b, (tb_id)12345 << 32 | 1) == NULL);
    CHECK(WITHDRAW(&b, (tb_id)1 << 32 | 0xFFFFFFF0u) == NULL);
    CHECK(WITHDRAW(&b, (tb_id)(uint32_t)ids[1]) == NULL);  /* right slot, sequence 0 */
    CHECK(b.waiting == 2);

    /* New waiters reuse the freed slots; the old ids for those slots stay dead. */
    int reused[3];
    tb_id reused_ids[3];
    bool slot_reused = false;
    for (int i = 0; i < 3; i++) {
        CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &reused[i], &reused_ids[i]) == TB_OK);
        for (int k = 0; k < N; k += 2)
            slot_reused |= (uint32_t)reused_ids[i] == (uint32_t)ids[k];
    }
    CHECK(slot_reused);
    for (int k = 0; k < N; k += 2)
        CHECK(WITHDRAW(&b, ids[k]) == NULL);
    CHECK(b.waiting == 5);

    /* What is left comes out in arrival order. */
    void *expected[] = {&handles[1], &handles[3], &reused[0], &reused[1], &reused[2]};
    tb_ns now = 0;
    for (int i = 0; i < 5; i++) {
        now = READY_AT(&b, now);
        CHECK(POP(&b, now, true) == expected[i]);
    }
    /* 2 + 4 + 1 + 1 + 1 tokens were granted into an empty bucket: the last at 9 ms. */
    CHECK(now == 9 * MS);
    CHECK(WITHDRAW(&b, ids[1]) == NULL);
    tb_release(&b);
}

/* ---- refund ---- */

static void test_refund_restores_tokens_exactly(void)
{
    tb_bucket b;
    int handle[2];
    tb_id id;
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 3, 0));
    CHECK(TOKENS(&b, 0) == 7);
    REFUND(&b, 3, 0);
    CHECK(TOKENS(&b, 0) == 10);

    CHECK(TAKE(&b, 10, 0));
    CHECK(TOKENS(&b, 2500000) == 2.5);
    CHECK(TAKE(&b, 2, 2500000));
    CHECK(TOKENS(&b, 2500000) == 0.5);
    REFUND(&b, 2, 2500000);
    CHECK(TOKENS(&b, 2500000) == 2.5);

    /* A grant to a waiter refunded the same way; the next head becomes ready sooner. */
    tb_ns now = 2500000;
    CHECK(ENQUEUE(&b, 2, now, TB_NEVER, &handle[0], &id) == TB_OK);
    CHECK(ENQUEUE(&b, 3, now, TB_NEVER, &handle[1], &id) == TB_OK);
    double before = TOKENS(&b, now);
    CHECK(POP(&b, now, true) == &handle[0]);
    CHECK(TOKENS(&b, now) == before - 2);
    CHECK(READY_AT(&b, now) == now + 2500000);  /* 0.5 left, 2.5 more to refill */
    REFUND(&b, 2, now);
    CHECK(TOKENS(&b, now) == before);
    CHECK(READY_AT(&b, now) == now + 500000);
    tb_release(&b);

    /* Refunding into a full bucket leaves it full. */
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    REFUND(&b, 4, 0);
    CHECK(TOKENS(&b, 0) == 10);
    CHECK(TAKE(&b, 10, 0));
    CHECK(!TAKE(&b, 1, 0));
    tb_release(&b);

    /* A refund smaller than the fraction of a nanosecond can hold must not break the
     * fraction's range (a refill instant on a whole nanosecond, borrowing ~1e-17 ns). */
    CHECK(INIT(&b, 1e-6, 10, 10, true, TB_FIFO) == TB_OK);
    REFUND(&b, 1e-11, 0);
    CHECK(TOKENS(&b, 0) == 10);
    tb_release(&b);
}

/* ---- deadlines and the tail projection ---- */

static void test_deadline_against_projection(void)
{
    tb_bucket b;
    int first, timed;
    tb_id id;
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 10, 0));
    CHECK(ENQUEUE(&b, 4, 0, TB_NEVER, &first, &id) == TB_OK);
    /* 4 + 3 tokens into an empty bucket at 1 token/ms: the 3 is granted at 7 ms. */
    const tb_ns projected = PROJECTED(&b, 3, 0);
    CHECK(projected == 7 * MS);

    tb_rate rate = b.limits.rates[0];
    tb_gcra state = b.limits.state[0];
    double tokens = TOKENS(&b, 0), queued = b.queued_tokens;
    size_t waiting = b.waiting;
    CHECK(ENQUEUE(&b, 3, 0, projected - 1, &timed, &id) == TB_ETOOLATE);
    CHECK(TOKENS(&b, 0) == tokens);
    CHECK(b.waiting == waiting && b.queued_tokens == queued && b.with_deadline == 0);
    CHECK(memcmp(&b.limits.rates[0], &rate, sizeof rate) == 0);
    CHECK(memcmp(&b.limits.state[0], &state, sizeof state) == 0);

    CHECK(ENQUEUE(&b, 3, 0, projected, &timed, &id) == TB_OK);
    CHECK(b.with_deadline == 1);
    tb_ns now = READY_AT(&b, 0);
    CHECK(now == 4 * MS);
    CHECK(POP(&b, now, true) == &first);
    now = READY_AT(&b, now);
    CHECK(now == projected);
    CHECK(POP(&b, now, true) == &timed);
    CHECK(b.with_deadline == 0);

    /* With nobody queued and the bucket full, the projection is now itself. */
    CHECK(PROJECTED(&b, 1, 100 * MS) == 100 * MS);
    /* Beyond a burst: the queue of 10 + 10 + 5 refills 15 tokens past a full bucket. */
    CHECK(ENQUEUE(&b, 10, 100 * MS, TB_NEVER, &first, &id) == TB_OK);
    CHECK(ENQUEUE(&b, 10, 100 * MS, TB_NEVER, &first, &id) == TB_OK);
    CHECK(PROJECTED(&b, 5, 100 * MS) == 115 * MS);
    tb_release(&b);
}

typedef struct {
    double ns_per_token;
    double burst_max;   /* bursts drawn from 1..burst_max */
    bool dyadic_amounts; /* also draw amounts such as 0.5 and 2.25 */
} schedule_params;

// Drives random FIFO traffic with a prompt driver (each head granted at the instant tb_grant_due names)
// and returns the largest |projected - actual| grant instant seen. Waiters enqueued with
// a deadline at projected + slack must be refused iff slack < 0; *late counts granted
// waiters that missed their deadline.
static tb_ns drive_random_fifo(const schedule_params *p, bool fair, int rounds, long *late)
{
    enum { MAX_QUEUE = 64 };
    struct {
        tb_ns projected, deadline;
    } queued[MAX_QUEUE];
    tb_ns worst = 0;
    tb_bucket b;
    for (int round = 0; round < rounds; round++) {
        double burst = 1 + (double)rng_below((uint64_t)p->burst_max);
        double initial = (double)rng_below((uint64_t)burst + 1);
        CHECK(INIT(&b, p->ns_per_token, burst, initial, fair, TB_FIFO) == TB_OK);
        tb_ns now = (tb_ns)rng_below(1000000);
        int head = 0, tail = 0;
        for (int step = 0; step < 200; step++) {
            uint64_t roll = rng_below(10);
            if (tail == head && roll < 2) {
                /* Idle, then a newcomer who finds the queue empty. */
                now += (tb_ns)rng_below((uint64_t)(p->ns_per_token * burst) + 3);
                TAKE(&b, 1 + (double)rng_below((uint64_t)burst), now);
            } else if (tail - head < MAX_QUEUE && roll < 6) {
                double amount = 1 + (double)rng_below((uint64_t)burst);
                if (p->dyadic_amounts && rng_below(2)) {
                    const double fractions[] = {0.5, 0.25, 2.25, 1.5, 0.125};
                    amount = fractions[rng_below(5)];
                    if (amount > burst)
                        amount = burst;
                }
                tb_ns projected = PROJECTED(&b, amount, now);
                CHECK(projected >= now);
                tb_ns deadline = TB_NEVER;
                if (rng_below(2)) {
                    deadline = projected + (tb_ns)rng_below(7) - 3;
                }
                tb_id id;
                tb_status status = ENQUEUE(&b, amount, now, deadline, NULL, &id);
                if (deadline != TB_NEVER && deadline < projected) {
                    CHECK(status == TB_ETOOLATE);
                    continue;
                }
                CHECK(status == TB_OK);
                queued[tail % MAX_QUEUE].projected = projected;
                queued[tail % MAX_QUEUE].deadline = deadline;
                tail++;
            } else if (tail > head) {
                tb_ns at = READY_AT(&b, now);
                CHECK(at >= now && at != TB_NEVER);
                now = at;
                POP(&b, now, true);
                tb_ns miss = now - queued[head % MAX_QUEUE].projected;
                if (llabs(miss) > worst)
                    worst = llabs(miss);
                *late += now > queued[head % MAX_QUEUE].deadline;
                head++;
            }
        }
        tb_release(&b);
    }
    return worst;
}

static void test_projection_is_exact_when_arithmetic_is(void)
{
    /* Integer or binary-fraction refill times and amounts: every sum the core forms is exact,
     * so the projection must name the very nanosecond of the grant, and every deadline
     * admitted must be met. 2.5 and 0.25 ns per token put the bucket's refill instant
     * between whole nanoseconds, where grants can only come at the next one. */
    const schedule_params params[] = {
        {1e6, 10, true}, {5e8, 40, true}, {1e7, 1, false}, {1, 10, true},
        {3, 5, true},    {2.5, 1, false}, {2.5, 4, true}, {0.25, 3, true},
    };
    rng_seed(1);
    for (size_t i = 0; i < sizeof params / sizeof *params; i++) {
        for (int fair = 0; fair < 2; fair++) {
            long late = 0;
            CHECK(drive_random_fifo(&params[i], fair, 300, &late) == 0);
            CHECK(late == 0);
        }
    }
}

static void test_projection_within_a_nanosecond_at_inexact_rates(void)
{
    /* When ns_per_token is not a binary fraction, the projection multiplies the queue's
     * summed amount once while the grants add each amount's refill one by one; the two
     * roundings (~1e-7 ns) can put them on either side of a whole nanosecond. What must
     * hold regardless: the projection is off by at most that one nanosecond. */
    const schedule_params params[] = {
        {1e9 / 3, 10, false}, {1e9 / 7, 4, false}, {0.37, 7, false},
        {1e6 / 3, 10, true},  {12345.678, 3, true},
    };
    rng_seed(2);
    for (size_t i = 0; i < sizeof params / sizeof *params; i++) {
        long late = 0;
        CHECK(drive_random_fifo(&params[i], true, 300, &late) <= 1);
    }
}

/* ---- memory ---- */

static void test_memory_follows_the_live_waiters(void)
{
    enum { N = 100000 };
    /* tb_check walks every slot, so after each of these operations it would make the
     * test quadratic; here it runs every CHECK_EVERY operations and at the end. */
    enum { CHECK_EVERY = 997 };
    tb_bucket b;
    tb_id *ids = malloc(N * sizeof *ids);
    uint32_t *order = malloc(N * sizeof *order);
    CHECK(ids && order);
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    for (uint32_t i = 0; i < N; i++) {
        /* The handle is only an opaque token for the core: the waiter's number. */
        CHECK(tb_enqueue(&b, 1, 0, TB_NEVER, (void *)(uintptr_t)(i + 1), NULL, &ids[i]) == TB_OK);
        if (i % CHECK_EVERY == 0)
            HOLDS(&b);
        order[i] = i;
    }
    HOLDS(&b);
    CHECK(b.waiting == N && b.capacity >= N);
    rng_seed(3);
    for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rng_below(i + 1), swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    for (uint32_t i = 0; i < N; i++) {
        CHECK(tb_withdraw(&b, ids[order[i]]) == (void *)(uintptr_t)(order[i] + 1));
        if (i % CHECK_EVERY == 0)
            HOLDS(&b);
    }
    HOLDS(&b);
    CHECK(b.waiting == 0 && b.queued_tokens == 0);
    CHECK(b.capacity == 0 && b.slots == NULL);
    /* The emptied queue still works. */
    CHECK(ENQUEUE(&b, 1, 0, TB_NEVER, &b, &ids[0]) == TB_OK);
    CHECK(POP(&b, 0, true) == &b);

    /* Churn: the slab grows (doubling) only when every slot is live, so it never exceeds
     * twice the peak of live waiters, or the first slab queue.c allocates. */
    enum { FIRST_SLAB = 16, OPS = 200000, MAX_LIVE = 3000 };
    uint32_t live = 0, peak = 0;
    rng_seed(4);
    for (uint32_t op = 0; op < OPS; op++) {
        bool grow = live == 0 || (live < MAX_LIVE && rng_below(100) < 52);
        if (grow) {
            CHECK(tb_enqueue(&b, 1, 0, TB_NEVER, (void *)(uintptr_t)(op + 1), NULL, &ids[live]) ==
                  TB_OK);
            live++;
        } else {
            uint32_t victim = (uint32_t)rng_below(live);
            CHECK(tb_withdraw(&b, ids[victim]) != NULL);
            ids[victim] = ids[--live];
        }
        if (live > peak)
            peak = live;
        CHECK(b.waiting == live);
        CHECK(b.capacity <= (2 * peak > FIRST_SLAB ? 2 * peak : FIRST_SLAB));
        if (op % 61 == 0)
            HOLDS(&b);
    }
    CHECK(peak > 100);
    while (live > 0)
        CHECK(WITHDRAW(&b, ids[--live]) != NULL);
    CHECK(b.capacity == 0);
    tb_release(&b);
    free(ids);
    free(order);
}

/* ---- a lease's hooks: an end of grants, a largest amount, credits ---- */

static void test_grant_until_holds_back_waiters(void)
{
    tb_bucket b;
    int handle, late;
    tb_id id;
    CHECK(INIT(&b, 1e6, 5, 0, true, TB_FIFO) == TB_OK);  /* 1,000/s, burst 5, empty */
    CHECK(TOKENS(&b, 0) == 0);
    tb_grant_until(&b, 3 * MS);
    CHECK(TAKE(&b, 2, 2 * MS) && !TAKE(&b, 1, 3 * MS) && TOKENS(&b, 3 * MS) == 0);
    /* Ready at 5 ms, past the end: queued, never timed; with a deadline, refused at once. */
    CHECK(ENQUEUE(&b, 5, 3 * MS, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(READY_AT(&b, 3 * MS) == TB_NEVER && PROJECTED(&b, 1, 3 * MS) == TB_NEVER);
    CHECK(ENQUEUE(&b, 1, 3 * MS, SECOND, &late, &id) == TB_ETOOLATE && b.stats.timeouts == 1);
    CHECK(READY_HEAD(&b, 10 * MS) == NULL && b.waiting == 1);
    /* A renewal moves the end later: the waiter keeps its place and is granted when it fits. */
    tb_grant_until(&b, 20 * MS);
    CHECK(READY_AT(&b, 3 * MS) == 7 * MS && PROJECTED(&b, 1, 3 * MS) == 8 * MS);
    CHECK(POP(&b, 7 * MS, true) == &handle && b.stats.waits == 1);
    /* A lapse: a deadline waiter queued before it is stranded, its projection gone. */
    CHECK(ENQUEUE(&b, 5, 7 * MS, 15 * MS, &late, &id) == TB_OK);
    bool never = true;
    CHECK(tb_withdraw_stranded(&b, 7 * MS, &never) == NULL);
    tb_grant_until(&b, 8 * MS);
    CHECK(tb_withdraw_stranded(&b, 7 * MS, &never) == &late && !never);
    CHECK(!tb_as_good_as_new(&b, SECOND));
    tb_grant_until(&b, TB_NEVER);
    CHECK(tb_as_good_as_new(&b, SECOND));
    HOLDS(&b);
    tb_release(&b);
}

static void test_largest_waits_for_a_burst(void)
{
    tb_bucket b;
    int handle;
    tb_id id;
    CHECK(INIT(&b, 1e6, 2, 2, true, TB_FIFO) == TB_OK);
    CHECK(ENQUEUE(&b, 3, 0, TB_NEVER, &handle, &id) == TB_EINVAL);
    CHECK(tb_set_largest(&b, 5) == TB_OK);
    HOLDS(&b);
    CHECK(!CAN_TAKE(&b, 3, 0) && !TAKE(&b, 3, 0) && TOKENS(&b, 0) == 2);
    CHECK(ENQUEUE(&b, 6, 0, TB_NEVER, &handle, &id) == TB_EINVAL);
    CHECK(ENQUEUE(&b, 3, 0, SECOND, &handle, &id) == TB_ETOOLATE);
    /* Queued above the burst: not timed, not stranded, until a rate's burst grows to it. */
    CHECK(ENQUEUE(&b, 3, 0, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(READY_AT(&b, 0) == TB_NEVER && READY_HEAD(&b, SECOND) == NULL);
    bool never = false;
    CHECK(tb_withdraw_stranded(&b, 0, &never) == NULL && b.waiting == 1);
    CHECK(tb_set_rate(&b, 0, 1e6, 4, SECOND) == TB_OK);  /* holds its 2 tokens */
    CHECK(READY_AT(&b, SECOND) == SECOND + MS);
    CHECK(POP(&b, SECOND + MS, true) == &handle && b.stats.granted == 1);
    /* Largest back to the bursts: a waiter above them is stranded for good. */
    CHECK(ENQUEUE(&b, 5, SECOND, TB_NEVER, &handle, &id) == TB_OK);
    CHECK(tb_set_largest(&b, -1) == TB_EINVAL && b.limits.max_request == 5);
    CHECK(tb_set_largest(&b, 0) == TB_OK && b.limits.max_request == 4);
    CHECK(tb_withdraw_stranded(&b, SECOND, &never) == &handle && never);
    HOLDS(&b);
    tb_release(&b);
}

static void test_credit_moves_tokens_not_statistics(void)
{
    tb_bucket b;
    int handle;
    tb_id id;
    CHECK(INIT(&b, 1e6, 10, 10, true, TB_FIFO) == TB_OK);
    CHECK(TAKE(&b, 8, 0));
    CHECK(ENQUEUE(&b, 6, 0, TB_NEVER, &handle, &id) == TB_OK && READY_AT(&b, 0) == 4 * MS);
    tb_stats was = b.stats;
    CHECK(tb_credit(&b, 3, 0) == TB_OK && READY_AT(&b, 0) == MS && TOKENS(&b, 0) == 5);
    CHECK(tb_credit(&b, -4, 0) == TB_OK && READY_AT(&b, 0) == 5 * MS && TOKENS(&b, 0) == 1);
    CHECK(tb_credit(&b, 50, 0) == TB_OK && TOKENS(&b, 0) == 10);
    CHECK(tb_credit(&b, -1e300, 0) == TB_EINVAL && tb_credit(&b, NAN, 0) == TB_EINVAL && TOKENS(&b, 0) == 10);
    CHECK(memcmp(&was, &b.stats, sizeof was) == 0 && b.waiting == 1);
    HOLDS(&b);
    tb_release(&b);

    CHECK(tb_init_window(&b, SECOND, 5, true, TB_FIFO) == TB_OK);
    CHECK(tb_credit(&b, 1, 0) == TB_EINVAL && TOKENS(&b, 0) == 5);
    tb_release(&b);
}


int main(void)
{
    RUN(test_init_rejects_out_of_range);
    RUN(test_starts_full_and_refills_up_to_burst);
    RUN(test_two_per_second_burst_40);
    RUN(test_ten_per_second_waiter_for_three);
    RUN(test_hundred_per_second_burst_1);
    RUN(test_fifo_fair_waiter_is_not_overtaken);
    RUN(test_unfair_newcomer_takes_unless_a_deadline_waits);
    RUN(test_smallest_first_order);
    RUN(test_enqueue_rejects_amounts_that_can_never_be_granted);
    RUN(test_ready_head_and_pop_without_grant);
    RUN(test_withdraw_head_middle_tail_and_stale_ids);
    RUN(test_refund_restores_tokens_exactly);
    RUN(test_deadline_against_projection);
    RUN(test_projection_is_exact_when_arithmetic_is);
    RUN(test_projection_within_a_nanosecond_at_inexact_rates);
    RUN(test_memory_follows_the_live_waiters);
    RUN(test_grant_until_holds_back_waiters);
    RUN(test_largest_waits_for_a_burst);
    RUN(test_credit_moves_tokens_not_statistics);
    return tests_summary();
}
