/* libFuzzer harness for the pure C core: random operation streams, every invariant checked.
 *
 *     clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *           -Isrc/_tokenbucket tests/fuzz/fuzz_tokenbucket.c src/_tokenbucket/queue.c \
 *           src/_tokenbucket/limits.c src/_tokenbucket/window.c -lm -o fuzz_tokenbucket
 *     ./fuzz_tokenbucket -runs=10000000 tests/fuzz/corpus
 *
 * Built with -DFUZZ_REPLAY (any C compiler, no libFuzzer) it is a plain program that replays
 * the files named on its command line: the committed corpus as a regression test.
 *
 * The input's first 8 bytes choose the bucket (refill time, burst, initial tokens, fairness,
 * order, late credit, start time); every following byte is an operation, with its arguments
 * in the bytes after it. The driver behaves like the asyncio glue: it grants heads through
 * tb_grant_due (skipping or stopping at some after a stall, as a dispatcher does for waiters
 * whose callers gave up), refunds only what was granted, and queues deadlines only in FIFO
 * order. Times, amounts and bursts stay in the ranges the binding lets through.
 *
 * After every operation it checks, and aborts on a violation:
 *   - tb_check(b) == 0 (queue.c and limits.c also assert it in builds without NDEBUG);
 *   - queue order and count against a model of the queue (FIFO, or smallest first): tb_grant_due
 *     asks about the model's head, and only while it is due;
 *   - statistics: every count of tb_stats equals the model's, bit for bit;
 *   - conservation: an operation that grants nothing (withdraw, a skip, a pass that grants
 *     nobody, a refused enqueue or take, every query) leaves the bucket's rate bit for bit unchanged;
 *   - safety: the grants (net of refunds, given back at the instant of the refund) fit a
 *     bucket of burst + slack tokens that starts with initial + slack tokens and refills at
 *     1/ns_per_token per nanosecond. slack = late_credit tokens + 1 ns of refill: a head popped
 *     late is granted as of up to late_credit of a token's time earlier (docs/design.md), and a bucket that
 *     became full less than a nanosecond before a grant keeps its fractional full instant
 *     (limits.c, full_before), so the grant counts from that instant. On top of that,
 *     TOLERANCE() tokens for double rounding;
 *   - no token lost: when the core refuses a newcomer or a head, or names a ready instant
 *     t > now, the exact bucket (no slack) at that instant (at t - 1) does not hold the
 *     amount either (same tolerance);
 *   - promises: tb_can_take agrees with tb_take; the instant tb_grant_due names is the first at
 *     which the head fits (tb_limits_fits); tb_as_good_as_new only for an empty, full bucket; an
 *     enqueue with a deadline is refused exactly when tb_projected_grant is later; a waiter
 *     served by a prompt driver (FIFO, fair or with a deadline, no stall while it waited) is
 *     granted no later than its projection and its deadline, give or take one nanosecond
 *     plus 2^-40 of the span (the queue's summed amount is a running double sum).
 *
 * The core's rate is a tick-exact GCRA: each grant needs amount * ns_per_token rounded up to a
 * tick (1/16 ns), a full rate holds burst * ns_per_token rounded up to a tick, and the first
 * reading holds initial tokens rounded down to a tick. The exact reference counts the same
 * ticks (a rate never faster than asked, only slower) in a bucket of burst tokens; the high one
 * the amounts asked, with one more tick of refill in its slack for the rounded-up burst. */
#include "queue.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_WAITERS = 1024, MAX_GRANTS = 4096 };
#define TIME_LIMIT (TB_MAX_SPAN - 1)  /* the core takes clock readings |t| < 2^58 ns */

/* ---- input ---- */

typedef struct {
    const uint8_t *data;
    size_t size, at;
} input;

static uint8_t next_u8(input *in) { return in->at < in->size ? in->data[in->at++] : 0; }
static uint32_t next_u16(input *in) { return (uint32_t)next_u8(in) << 8 | next_u8(in); }
static uint64_t next_u32(input *in) { return (uint64_t)next_u16(in) << 16 | next_u16(in); }

/* ---- the models ---- */

typedef struct {
    tb_id id;
    double amount;
    tb_ns deadline;   /* core time, TB_NEVER if none */
    tb_ns enqueued_at; /* core time */
    tb_ns projected;  /* tb_projected_grant when it was queued */
    tb_ns span;       /* projected - now when it was queued */
    bool promised;    /* a prompt driver must meet projected (FIFO, and fair or with a deadline) */
    uint64_t number;  /* enqueue count: its handle, and its arrival order */
} waiter;

// A token bucket in long double on the driver's continuous time: the reference the core is held to.
typedef struct {
    long double level, capacity;
    tb_ns at;  /* driver time of level */
} reference;

typedef struct {
    tb_bucket b;
    double ns_per_token, burst;
    tb_order order;
    bool fair;
    tb_ns now;        /* the core's clock */
    tb_ns shift;      /* sum of rebase shifts: driver time = now - shift, continuous */
    double max_credit; /* the largest late credit set so far, in tokens */
    long double slack; /* tokens, see the header */
    reference high;   /* burst + slack: grants must fit */
    reference exact;  /* burst: what the core refuses, this must not hold either */
    waiter waiters[MAX_WAITERS];
    size_t waiting;
    uint64_t enqueued;
    double grants[MAX_GRANTS]; /* amounts granted and not refunded, for refunds */
    size_t granted;
    long double granted_total;
    tb_stats stats;   /* what the core must have counted */
    bool prompt;      /* the current pass serves every head the moment it is due */
    bool stopped;     /* the current pass was told TB_STOP */
    size_t pass_grants; /* grants of the current pass */
    long ops;
} state;

#define FAIL(s, ...) fail(__LINE__, s, __VA_ARGS__)

// Reports a violation with the bucket's parameters and aborts: libFuzzer saves the input.
__attribute__((noreturn, format(printf, 3, 4))) static void fail(int line, const state *s, const char *format, ...);

static void fail(int line, const state *s, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "fuzz_tokenbucket.c:%d: ", line);
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, "\n  ns_per_token=%.17g burst=%.17g fair=%d order=%d now=%lld ops=%ld waiting=%zu\n",
            s->ns_per_token, s->burst, s->fair, (int)s->order, (long long)s->now, s->ops, s->waiting);
    abort();
}

// Rounding allowance, in tokens: 2^-40 of the tokens in play, and 2^-40 ns of refill per operation.
static long double tolerance(const state *s)
{
    return ldexpl((long double)s->burst + s->granted_total, -40) +
           ldexpl((long double)s->ops / (long double)s->ns_per_token, -40);
}

// How far a projection over span_ns may miss, in ns: 1 ns (the instants are whole nanoseconds
// after fractional ones), plus 2^-40 of the span: the queue's summed amount is a running double sum.
static tb_ns resolution(double span_ns) { return 1 + (tb_ns)ldexp(fabs(span_ns), -40); }

static tb_ns driver_time(const state *s, tb_ns core_time) { return core_time - s->shift; }

// Tokens the core's rate counts for a span of ns_ns: the span rounded up to a tick, as limits.c does.
static long double in_ticks(const state *s, double span_ns)
{
    return (long double)ceil(span_ns * TB_TICKS_PER_NS) / TB_TICKS_PER_NS / (long double)s->ns_per_token;
}

// Tokens the core's rate gives back for a span of span_ns: the span rounded down to a tick, as a refund does.
static long double in_whole_ticks(const state *s, double span_ns)
{
    return (long double)floor(span_ns * TB_TICKS_PER_NS) / TB_TICKS_PER_NS / (long double)s->ns_per_token;
}

// The reference's level at driver time t >= r->at, without moving it.
static long double level_at(const state *s, const reference *r, tb_ns t)
{
    long double level = r->level + (long double)(t - r->at) / (long double)s->ns_per_token;
    return level < r->capacity ? level : r->capacity;
}

static void refill_to(const state *s, reference *r, tb_ns t)
{
    r->level = level_at(s, r, t);
    r->at = t;
}

static void check_invariants(const state *s)
{
    int broken = tb_check(&s->b);
    if (broken)
        FAIL(s, "tb_check() returned %d", broken);
    if (s->b.waiting != s->waiting)
        FAIL(s, "core has %zu waiters, the model %zu", s->b.waiting, s->waiting);
    const tb_stats *core = &s->b.stats, *model = &s->stats;
    if (core->granted != model->granted || core->granted_tokens != model->granted_tokens ||
        core->waits != model->waits || core->wait_ns_total != model->wait_ns_total ||
        core->wait_ns_max != model->wait_ns_max || core->cancelled != model->cancelled ||
        core->timeouts != model->timeouts)
        FAIL(s, "statistics: core %llu %.17g %llu %.17g %lld %llu %llu, model %llu %.17g %llu %.17g %lld %llu %llu",
             (unsigned long long)core->granted, core->granted_tokens, (unsigned long long)core->waits,
             core->wait_ns_total, (long long)core->wait_ns_max, (unsigned long long)core->cancelled,
             (unsigned long long)core->timeouts, (unsigned long long)model->granted, model->granted_tokens,
             (unsigned long long)model->waits, model->wait_ns_total, (long long)model->wait_ns_max,
             (unsigned long long)model->cancelled, (unsigned long long)model->timeouts);
}

// Records a grant of amount at the core's now: it must fit the high reference.
static void record_grant(state *s, double amount)
{
    tb_ns t = driver_time(s, s->now);
    refill_to(s, &s->high, t);
    refill_to(s, &s->exact, t);
    s->high.level -= amount;
    s->exact.level -= in_ticks(s, amount * s->ns_per_token);
    s->granted_total += amount;
    s->stats.granted++;
    s->stats.granted_tokens += amount;
    if (s->high.level < -tolerance(s))
        FAIL(s, "over-grant: %.17g tokens granted beyond burst + rate*t (+ slack %.3Lg)",
             (double)-s->high.level, s->slack);
    if (s->granted < MAX_GRANTS)
        s->grants[s->granted++] = amount;
}

// The core refused amount at driver time t: the exact reference must not hold it either.
static void check_refusal(const state *s, double amount, tb_ns t, const char *what)
{
    long double level = level_at(s, &s->exact, t);
    if (level >= (long double)amount + tolerance(s))
        FAIL(s, "lost tokens: %s refused %.17g tokens while an exact bucket holds %.17Lg", what, amount, level);
}

// Who times waiter number n: one of OWNERS owners, as loops and threads share one queue.
enum { OWNERS = 3 };
static const void *owner_of(uint64_t number)
{
    return (const void *)(uintptr_t)(number % OWNERS + 1);
}

// The model's next head: the oldest waiter (FIFO) or the smallest amount, oldest among equals.
static size_t model_head(const state *s)
{
    size_t head = 0;
    for (size_t i = 1; i < s->waiting; i++) {
        const waiter *w = &s->waiters[i], *h = &s->waiters[head];
        bool smaller = s->order == TB_SMALLEST_FIRST && w->amount != h->amount;
        if (smaller ? w->amount < h->amount : w->number < h->number)
            head = i;
    }
    return head;
}

static void remove_waiter(state *s, size_t i) { s->waiters[i] = s->waiters[--s->waiting]; }

/* The first rate, parameters and state: what an operation that grants nothing must leave alone. */
typedef struct {
    tb_rate rate;
    tb_gcra state;
} rate_snapshot;

static rate_snapshot snapshot(const state *s) { return (rate_snapshot){s->b.limits.rates[0], s->b.limits.state[0]}; }

static bool same_rate(const rate_snapshot *a, const rate_snapshot *b)
{
    return memcmp(&a->rate, &b->rate, sizeof a->rate) == 0 && memcmp(&a->state, &b->state, sizeof a->state) == 0;
}

// An amount in (0, burst] from two bytes: a few round values, else a fraction of burst (>= burst / 2^16).
static double pick_amount(const state *s, input *in)
{
    uint32_t k = next_u16(in);
    double amount;
    switch (k % 8) {
    case 0: amount = 1; break;
    case 1: amount = s->burst; break;
    case 2: amount = 0.5 * (1 + k % 5); break;
    case 3: amount = s->burst * ((double)(k / 8 % 1000 + 1) / 1000.0); break;  /* not dyadic */
    default: amount = s->burst * ((double)(k / 8 + 1) / 8192.0); break;
    }
    return amount <= s->burst ? amount : s->burst;
}

// A span in ns from one byte: from 0 to far beyond a full refill, mostly near the bucket's scale.
static tb_ns pick_span(const state *s, input *in)
{
    uint8_t k = next_u8(in);
    double scale = s->ns_per_token * (k & 0x80 ? s->burst : 1.0);
    double span;
    switch (k & 0x7) {
    case 0: span = k >> 3 & 0xF; break;                               /* 0..15 ns */
    case 1: span = scale * (double)(k >> 3 & 0xF) / 16; break;
    case 2: span = scale * (double)(k >> 3 & 0xF); break;
    case 3: span = scale * 1000; break;
    default: span = scale * (double)(k >> 3 & 0xF) / 4 + (k >> 3 & 0x3); break;
    }
    if (!(span < (double)(TIME_LIMIT / 4)))
        span = (double)(TIME_LIMIT / 4);
    return (tb_ns)span;
}

// Moves the core's clock to t (>= now), if it stays in the binding's range; returns whether it did.
static bool move_to(state *s, tb_ns t)
{
    if (t > TIME_LIMIT || t < s->now)
        return false;
    s->now = t;
    return true;
}

// The verdict of a pass about a due waiter: a prompt pass grants every one; after a stall, a few
// waiters' callers have given up (TB_SKIP) or the dispatcher stops early (TB_STOP).
static tb_verdict verdict_for(const state *s, const waiter *w)
{
    if (s->prompt)
        return TB_GRANT;
    return w->number % 5 == 0 ? TB_SKIP : w->number % 11 == 0 ? TB_STOP : TB_GRANT;
}

// tb_grant_due's question, checked against the model: the head asked about is the model's head.
static tb_verdict decide(void *ctx, void *handle, double amount)
{
    state *s = ctx;
    size_t h = model_head(s);
    waiter w = s->waiters[h];
    if (s->stopped)
        FAIL(s, "asked again after TB_STOP");
    if (handle != (void *)(uintptr_t)w.number || amount != w.amount)
        FAIL(s, "asked about waiter %llu for %.17g, expected %llu for %.17g", (unsigned long long)(uintptr_t)handle,
             amount, (unsigned long long)w.number, w.amount);
    tb_verdict verdict = verdict_for(s, &w);
    if (verdict == TB_STOP) {
        s->stopped = true;
        return verdict;
    }
    remove_waiter(s, h);
    if (verdict == TB_SKIP) {
        s->stats.cancelled++;
        return verdict;
    }
    s->pass_grants++;
    record_grant(s, w.amount);
    tb_ns wait = s->now - w.enqueued_at;
    s->stats.waits++;
    s->stats.wait_ns_total += (double)wait;
    if (wait > s->stats.wait_ns_max)
        s->stats.wait_ns_max = wait;
    if (s->prompt && w.promised) {
        tb_ns margin = resolution((double)w.span + s->b.limits.rates[0].burst_ns);
        if (s->now > w.projected + margin)
            FAIL(s, "granted at %lld, after its projection %lld", (long long)s->now, (long long)w.projected);
        if (w.deadline != TB_NEVER && s->now > w.deadline + margin)
            FAIL(s, "granted at %lld, after its deadline %lld", (long long)s->now, (long long)w.deadline);
    }
    return verdict;
}

// The glue's dispatch at now: one tb_grant_due pass; returns the instant it names, cross-checked
// with the model, the limits and the exact reference.
static tb_ns dispatch(state *s, bool prompt)
{
    rate_snapshot before = snapshot(s);
    s->prompt = prompt;
    s->stopped = false;
    s->pass_grants = 0;
    tb_ns next = tb_grant_due(&s->b, s->now, decide, s);
    rate_snapshot after = snapshot(s);
    if (s->pass_grants == 0 && !same_rate(&before, &after))
        FAIL(s, "a pass that granted nobody changed the bucket");
    if (s->waiting == 0) {
        if (next != TB_NEVER)
            FAIL(s, "an empty queue has a head due at %lld", (long long)next);
        return next;
    }
    if (next == TB_NEVER || next < s->now)
        FAIL(s, "head due at %lld, before now", (long long)next);
    if ((next == s->now) != s->stopped)
        FAIL(s, "a pass ended at %lld with its head %s", (long long)next, s->stopped ? "stopped" : "due");
    if (next > s->now) {
        const waiter *w = &s->waiters[model_head(s)];
        check_refusal(s, w->amount, driver_time(s, s->now), "tb_grant_due");
        check_refusal(s, w->amount, driver_time(s, next - 1), "tb_grant_due's next instant");
        if (tb_limits_fits(&s->b.limits, w->amount, s->now) || !tb_limits_fits(&s->b.limits, w->amount, next))
            FAIL(s, "tb_grant_due's next instant %lld is not the first the head fits", (long long)next);
    }
    return next;
}

// A question without an answer: the pass stops at the first due waiter.
static tb_verdict stop_at_once(void *ctx, void *handle, double amount)
{
    (void)ctx, (void)handle, (void)amount;
    return TB_STOP;
}

// A prompt loop: time runs to now + span, each head granted at the instant it becomes due.
static void advance(state *s, tb_ns span)
{
    tb_ns target = s->now + span;
    tb_ns at = dispatch(s, true);
    while (s->waiting > 0 && at <= target && move_to(s, at))
        at = dispatch(s, true);
    move_to(s, target);
    dispatch(s, true);
}

static void op_enqueue(state *s, input *in)
{
    double amount = pick_amount(s, in);
    uint8_t how = next_u8(in);
    if (s->waiting == MAX_WAITERS)
        return;
    if (how & 0x40) {  /* a newcomer, as the glue: takes at once if it may, else queues */
        bool took = tb_take(&s->b, amount, s->now);
        if (took) {
            record_grant(s, amount);
            return;
        }
    }
    rate_snapshot before = snapshot(s);
    bool anchored = s->b.limits.anchored;
    tb_ns projected = tb_projected_grant(&s->b, amount, s->now);
    if (projected < s->now)
        FAIL(s, "projection %lld before now", (long long)projected);
    tb_ns deadline = TB_NEVER;
    if (how % 4 == 1 && projected != TB_NEVER) {
        deadline = projected + (tb_ns)(how / 4 % 7) - 3;  /* right around the projection */
    } else if (how % 4 == 1 || how % 4 == 2) {
        deadline = s->now + pick_span(s, in);
    }
    if (deadline != TB_NEVER && (deadline < s->now || deadline > s->now + TIME_LIMIT))
        deadline = TB_NEVER;  /* the binding's deadlines are now + a timeout in [0, 2^58) ns */
    tb_id id;
    void *handle = (void *)(uintptr_t)(s->enqueued + 1);
    tb_status status = tb_enqueue(&s->b, amount, s->now, deadline, handle, owner_of(s->enqueued + 1), &id);
    rate_snapshot after = snapshot(s);
    if (anchored && !same_rate(&before, &after))
        FAIL(s, "enqueue changed the bucket's rate");
    if (deadline != TB_NEVER && s->order != TB_FIFO) {
        if (status != TB_EINVAL)
            FAIL(s, "a deadline in smallest-first order gave %d", (int)status);
        return;
    }
    if (deadline != TB_NEVER && projected > deadline) {
        if (status != TB_ETOOLATE)
            FAIL(s, "enqueue past its projection gave %d", (int)status);
        s->stats.timeouts++;
        return;
    }
    if (status != TB_OK)
        FAIL(s, "enqueue of %.17g failed with %d", amount, (int)status);
    s->enqueued++;
    s->waiters[s->waiting++] = (waiter){
        .id = id,
        .amount = amount,
        .deadline = deadline,
        .enqueued_at = s->now,
        .projected = projected,
        .span = projected == TB_NEVER ? 0 : projected - s->now,
        .promised = s->order == TB_FIFO && (s->fair || deadline != TB_NEVER) && projected != TB_NEVER,
        .number = s->enqueued,
    };
    dispatch(s, true);  /* the glue dispatches after queueing: the newcomer may be the ready head */
}

static void op_withdraw(state *s, input *in)
{
    uint8_t k = next_u8(in);
    rate_snapshot before = snapshot(s);
    if (s->waiting == 0 || k == 0xFF) {
        /* a stale or made-up id: nothing happens */
        tb_id stale = (tb_id)(s->enqueued + 1 + k) << 32 | k;
        if (tb_withdraw(&s->b, stale) != NULL)
            FAIL(s, "withdrew an id that was never queued");
    } else if (k % 4 == 3) {
        /* an owner's first waiter, in queue order: its loop closed, its waiters are dropped */
        const void *owner = owner_of(k / 4);
        size_t first = s->waiting;
        for (size_t i = 0; i < s->waiting; i++) {
            const waiter *w = &s->waiters[i], *f = &s->waiters[first];
            bool before = first == s->waiting ||
                          (s->order == TB_SMALLEST_FIRST && w->amount != f->amount ? w->amount < f->amount
                                                                                   : w->number < f->number);
            if (owner_of(w->number) == owner && before)
                first = i;
        }
        void *handle = tb_withdraw_first_of(&s->b, owner);
        if (first == s->waiting ? handle != NULL : handle != (void *)(uintptr_t)s->waiters[first].number)
            FAIL(s, "withdrew the wrong first waiter of an owner");
        if (first < s->waiting) {
            remove_waiter(s, first);
            s->stats.cancelled++;
        }
    } else {
        size_t i = k % s->waiting;
        void *handle = tb_withdraw(&s->b, s->waiters[i].id);
        if (handle != (void *)(uintptr_t)s->waiters[i].number)
            FAIL(s, "withdraw returned the wrong handle");
        tb_id id = s->waiters[i].id;
        remove_waiter(s, i);
        s->stats.cancelled++;
        if (tb_withdraw(&s->b, id) != NULL)
            FAIL(s, "withdrew the same waiter twice");
    }
    rate_snapshot after = snapshot(s);
    if (!same_rate(&before, &after))
        FAIL(s, "withdraw consumed tokens");
    /* The glue re-dispatches after a withdrawal: the next head may go now. */
    dispatch(s, true);
}

static void op_take(state *s, input *in)
{
    double amount = pick_amount(s, in);
    bool anchored = s->b.limits.anchored;
    rate_snapshot before = snapshot(s);
    bool can = tb_can_take(&s->b, amount, s->now);
    rate_snapshot after = snapshot(s);
    if (anchored && !same_rate(&before, &after))
        FAIL(s, "tb_can_take changed the bucket");
    before = after;
    bool took = tb_take(&s->b, amount, s->now);
    if (can != took)
        FAIL(s, "tb_can_take said %d, tb_take did %d", can, took);
    if (took) {
        record_grant(s, amount);
    } else {
        after = snapshot(s);
        if (!same_rate(&before, &after))
            FAIL(s, "a refused take consumed tokens");
        bool must_queue = s->waiting > 0 && (s->fair || s->b.with_deadline > 0);
        if (!must_queue)
            check_refusal(s, amount, driver_time(s, s->now), "tb_take");
    }
}

static void op_refund(state *s, input *in)
{
    uint8_t k = next_u8(in);
    if (s->granted == 0)
        return;
    size_t i = k % s->granted;
    double amount = s->grants[i];
    s->grants[i] = s->grants[--s->granted];
    tb_ns t = driver_time(s, s->now);
    refill_to(s, &s->high, t);
    refill_to(s, &s->exact, t);
    s->high.level = fminl(s->high.level + amount, s->high.capacity);
    s->exact.level = fminl(s->exact.level + in_whole_ticks(s, amount * s->ns_per_token), s->exact.capacity);
    s->granted_total -= amount;
    s->stats.granted--;
    s->stats.granted_tokens -= amount;
    s->stats.cancelled++;
    tb_refund(&s->b, amount, s->now);
    /* The glue re-dispatches after a refund. */
    dispatch(s, true);
}

// The loop stalls for span, then dispatches: late heads are granted with late credit, some skipped.
static void op_stall(state *s, input *in)
{
    tb_ns span = pick_span(s, in);
    for (size_t i = 0; i < s->waiting; i++)
        s->waiters[i].promised = false;  /* a stalled loop owes them nothing */
    move_to(s, s->now + span);
    dispatch(s, false);
}

// Drops the head without granting it, due or not (its loop closed: the bucket is cleared).
static void op_drop_head(state *s)
{
    rate_snapshot before = snapshot(s);
    void *handle = tb_withdraw_head(&s->b);
    if (s->waiting == 0) {
        if (handle != NULL)
            FAIL(s, "withdrew a head from an empty queue");
        return;
    }
    size_t h = model_head(s);
    if (handle != (void *)(uintptr_t)s->waiters[h].number)
        FAIL(s, "dropped the wrong head");
    rate_snapshot after = snapshot(s);
    if (!same_rate(&before, &after))
        FAIL(s, "dropping a head consumed tokens");
    remove_waiter(s, h);
    s->stats.cancelled++;
    dispatch(s, true);
}

// The limiter moves to a loop with another clock, on which the current instant reads now + shift.
static void op_rebase(state *s, input *in)
{
    uint8_t k = next_u8(in);
    tb_ns shift = pick_span(s, in) * (k & 1 ? 1 : -1);
    tb_ns then = s->now, now = s->now + shift;
    if (now < -TIME_LIMIT || now > TIME_LIMIT)
        return;
    if (s->shift + shift < -TIME_LIMIT || s->shift + shift > TIME_LIMIT)
        return;  /* the driver's own time (now - shift) must stay within int64 too */
    for (size_t i = 0; i < s->waiting; i++)  /* deadlines must stay in range too */
        if (s->waiters[i].deadline != TB_NEVER &&
            (s->waiters[i].deadline + shift > 2 * TIME_LIMIT || s->waiters[i].deadline + shift < -2 * TIME_LIMIT))
            return;
    double tokens = s->b.limits.anchored ? tb_tokens(&s->b, then) : 0;
    tb_ns ready = tb_grant_due(&s->b, then, stop_at_once, NULL);
    tb_rebase(&s->b, then, now);
    s->now = now;
    s->shift += shift;
    for (size_t i = 0; i < s->waiting; i++) {
        s->waiters[i].enqueued_at += shift;
        if (s->waiters[i].deadline != TB_NEVER)
            s->waiters[i].deadline += shift;
        if (s->waiters[i].projected != TB_NEVER)
            s->waiters[i].projected += shift;
    }
    if (s->b.limits.anchored && tb_tokens(&s->b, now) != tokens)
        FAIL(s, "rebase changed the tokens");
    tb_ns after = tb_grant_due(&s->b, now, stop_at_once, NULL);
    if (ready != TB_NEVER && after != ready + shift)
        FAIL(s, "rebase moved the head's ready instant from %lld to %lld", (long long)(ready + shift), (long long)after);
}

static void op_query(state *s, input *in)
{
    double amount = pick_amount(s, in);
    bool anchored = s->b.limits.anchored;
    rate_snapshot before = snapshot(s);
    double tokens = tb_tokens(&s->b, s->now);
    tb_ns projected = tb_projected_grant(&s->b, amount, s->now);
    bool as_new = tb_as_good_as_new(&s->b, s->now);
    tb_ns head_due = tb_grant_due(&s->b, s->now, stop_at_once, NULL);
    tb_ns first_due[OWNERS + 1];
    for (uint64_t o = 1; o <= OWNERS; o++)
        first_due[o] = tb_first_due_of(&s->b, (const void *)(uintptr_t)o, s->now);
    rate_snapshot after = snapshot(s);
    if (anchored && !same_rate(&before, &after))
        FAIL(s, "a query changed the bucket");
    if (as_new && (s->waiting > 0 || tokens != s->burst))
        FAIL(s, "as good as new with %zu waiters and %.17g tokens", s->waiting, tokens);
    if (!(tokens >= 0 && tokens <= s->burst))
        FAIL(s, "%.17g tokens, outside [0, burst]", tokens);
    if (projected < s->now)
        FAIL(s, "projection before now");
    /* Each owner's first waiter: due when the head is if it is the head, never before it, and only
     * for owners with a waiter in the model's queue. */
    for (uint64_t o = 1; o <= OWNERS; o++) {
        bool has = false;
        for (size_t i = 0; i < s->waiting; i++)
            has |= owner_of(s->waiters[i].number) == (const void *)(uintptr_t)o;
        if (has != (first_due[o] != TB_NEVER))
            FAIL(s, "owner %llu: first due %lld, %s waiters in the model", (unsigned long long)o,
                 (long long)first_due[o], has ? "with" : "no");
        if (has && (first_due[o] < head_due || first_due[o] < s->now))
            FAIL(s, "owner %llu's first waiter is due at %lld, before the head (%lld)", (unsigned long long)o,
                 (long long)first_due[o], (long long)head_due);
    }
    if (s->waiting > 0 && first_due[(uintptr_t)owner_of(s->waiters[model_head(s)].number)] != head_due)
        FAIL(s, "the head's owner is due at %lld, the head at %lld",
             (long long)first_due[(uintptr_t)owner_of(s->waiters[model_head(s)].number)], (long long)head_due);
    long double high = level_at(s, &s->high, driver_time(s, s->now));
    if ((long double)tokens > high + tolerance(s))
        FAIL(s, "the core counts %.17g tokens, more than burst + rate*t allows (%.17Lg)", tokens, high);
    long double exact = level_at(s, &s->exact, driver_time(s, s->now));
    if ((long double)tokens < exact - tolerance(s))
        FAIL(s, "lost tokens: the core counts %.17g, an exact bucket %.17Lg", tokens, exact);
}

static void op_late_credit(state *s, input *in)
{
    static const double credits[] = {0, 1e-6, 0.5, 0.99};  /* of one token's time */
    double credit = credits[next_u8(in) % 4];
    tb_set_late_credit(&s->b, credit);
    if (credit > s->max_credit) {
        long double more = (long double)credit - (long double)s->max_credit;
        s->max_credit = credit;
        s->slack += more;
        s->high.capacity += more;
        s->high.level += more;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const double ns_per_tokens[] = {
        1e6, 1e9 / 3, 1e9 / 7, 0.25, 2.5, 1, 3, 0.37, 12345.678, 5e8, 1e7, 1e9, 3.6e12, 1e-6,
        (double)((tb_ns)1 << 28),
    };
    static const double bursts[] = {1, 2, 3, 4, 5, 7.5, 10, 40, 100, 1000, 1e6, (double)((tb_ns)1 << 30)};
    input in = {data, size, 0};
    static state s;  /* large: kept off the stack */
    memset(&s, 0, sizeof s);
    uint8_t k = next_u8(&in);
    s.ns_per_token = ns_per_tokens[k % (sizeof ns_per_tokens / sizeof *ns_per_tokens)];
    s.burst = bursts[next_u8(&in) % (sizeof bursts / sizeof *bursts)];
    double initial = s.burst * (double)next_u8(&in) / 255.0;
    uint8_t flags = next_u8(&in);
    s.fair = flags & 1;
    s.order = flags & 2 ? TB_SMALLEST_FIRST : TB_FIFO;
    s.now = (tb_ns)(int32_t)next_u32(&in) * 1000;
    tb_status status = tb_init(&s.b, s.ns_per_token, s.burst, initial, s.fair, s.order);
    if (!(s.burst * s.ns_per_token <= (double)TB_MAX_SPAN)) {
        if (status != TB_EINVAL)
            FAIL(&s, "tb_init accepted a span beyond TB_MAX_SPAN");
        return 0;
    }
    if (status != TB_OK)
        FAIL(&s, "tb_init refused valid parameters");
    s.slack = (1.0L + 1.0L / TB_TICKS_PER_NS) / (long double)s.ns_per_token;
    s.high = (reference){.level = initial + s.slack, .capacity = s.burst + s.slack, .at = s.now};
    s.exact = (reference){.level = s.burst - in_ticks(&s, (s.burst - initial) * s.ns_per_token), .capacity = s.burst,
                          .at = s.now};
    /* The references start at the first reading, which also anchors the core. */
    if (fabsl(tb_tokens(&s.b, s.now) - fmaxl(s.exact.level, 0)) > ldexpl(s.burst, -40))
        FAIL(&s, "a new bucket does not hold its initial tokens");
    op_late_credit(&s, &in);
    check_invariants(&s);

    while (in.at < in.size) {
        s.ops++;
        uint8_t op = next_u8(&in);
        switch (op % 12) {
        case 0: case 1: case 2: op_enqueue(&s, &in); break;
        case 3: op_withdraw(&s, &in); break;
        case 4: op_take(&s, &in); break;
        case 5: case 6: advance(&s, pick_span(&s, &in)); break;
        case 7: op_refund(&s, &in); break;
        case 8: op_stall(&s, &in); break;
        case 9: op_drop_head(&s); break;
        case 10: op_query(&s, &in); break;
        case 11:
            if (op & 0x80)
                op_late_credit(&s, &in);
            else
                op_rebase(&s, &in);
            break;
        }
        check_invariants(&s);
    }
    /* Drain: a prompt loop serves everyone left, then the queue's memory is gone. */
    tb_ns at = dispatch(&s, true);
    while (s.waiting > 0 && move_to(&s, at)) {
        at = dispatch(&s, true);
        check_invariants(&s);
    }
    while (s.waiting > 0)
        op_drop_head(&s);
    check_invariants(&s);
    if (s.b.capacity > 16 || (s.b.capacity == 0) != (s.b.slots == NULL))
        FAIL(&s, "an empty queue kept %u slots", s.b.capacity);
    tb_release(&s.b);
    return 0;
}

#ifdef FUZZ_REPLAY
#include "replay.h"
#endif
