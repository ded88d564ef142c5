/* Token arithmetic and wake order of aiotb's bucket; see tokenbucket.h. */
#include "tokenbucket.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

#define MIN_SLOTS 16u
#define HORIZON 0x1p62  /* ns: projections this far read TB_NEVER, past any deadline now + TB_MAX_SPAN */

/* ---- debug builds: every mutating operation ends with tb_check ---- */

#ifndef NDEBUG
#define CHECK_EVERY_OP_UP_TO 1024u  /* slots: below this every operation is checked */

// Asserts tb_check(b) == 0: after every operation while the slab has at most CHECK_EVERY_OP_UP_TO
// slots, else once every capacity / 64 operations (tb_check walks all capacity slots), so the
// checks cost O(1) amortized per operation even with 10^6 waiters. The countdown is per thread.
static void debug_check(const tb_bucket *b)
{
    static _Thread_local uint32_t countdown;
    if (b->capacity > CHECK_EVERY_OP_UP_TO) {
        if (countdown > 0 && --countdown > 0)
            return;
        countdown = b->capacity / 64;
    }
    assert(tb_check(b) == 0);
}
#else
#define debug_check(b) ((void)0)
#endif

/* ---- the rate: GCRA's "full again at" instant, F = full_at + full_at_frac ---- */

// Whether x is a finite number > 0.
static bool positive(double x) { return x > 0 && isfinite(x); }

// Moves F later by span >= 0 nanoseconds.
static void advance(tb_rate *r, double span)
{
    double whole = floor(span);
    double frac = r->full_at_frac + (span - whole);
    if (frac >= 1.0) {
        frac -= 1.0;
        whole += 1.0;
    }
    r->full_at += (tb_ns)whole;
    r->full_at_frac = frac;
}

// Moves F earlier by span >= 0 nanoseconds.
static void retreat(tb_rate *r, double span)
{
    double whole = floor(span);
    double frac = r->full_at_frac - (span - whole);
    if (frac < 0.0) {
        frac += 1.0;
        whole += 1.0;
    }
    if (frac >= 1.0) {  /* a borrow below the fraction's precision rounds to no borrow */
        frac -= 1.0;
        whole -= 1.0;
    }
    r->full_at -= (tb_ns)whole;
    r->full_at_frac = frac;
}

// F - now: how long until the bucket is full again (negative: full since then).
static double debt(const tb_rate *r, tb_ns now)
{
    return (double)(r->full_at - now) + r->full_at_frac;
}

// Whether need nanoseconds of tokens fit in the bucket at now.
static bool fits(const tb_rate *r, double need, tb_ns now)
{
    double owed = debt(r, now);
    return (owed > 0 ? owed : 0) + need <= r->burst_ns;
}

// Whether the bucket has been full for at least a whole nanosecond at now (F <= now - 1).
// Refill younger than that is kept: a waiter granted at the first whole nanosecond after
// its fractional ready instant must not lose the fraction, or every such grant would
// slow the rate down (and tb_projected_grant, which assumes no loss, would promise too early).
static bool full_before(const tb_rate *r, tb_ns now)
{
    return r->full_at + (r->full_at_frac > 0) < now;
}

// Takes need nanoseconds of tokens at now: F = max(F, now) + need, except that a bucket
// full for less than a nanosecond keeps its F (see full_before).
static void consume(tb_rate *r, double need, tb_ns now)
{
    if (full_before(r, now)) {
        r->full_at = now;
        r->full_at_frac = 0.0;
    }
    advance(r, need);
}

// First instant >= now at which need (<= burst_ns) nanoseconds of tokens fit.
static tb_ns fit_at(const tb_rate *r, double need, tb_ns now)
{
    if (fits(r, need, now))
        return now;
    /* F - t <= burst_ns - need  <=>  t >= full_at + (frac + need - burst_ns) */
    tb_ns t = r->full_at + (tb_ns)ceil(r->full_at_frac + need - r->burst_ns);
    if (t <= now)
        t = now + 1;
    while (!fits(r, need, t))        /* settle rounding of the closed form */
        t++;
    while (t - 1 > now && fits(r, need, t - 1))
        t--;
    return t;
}

/* ---- the bucket ---- */

tb_status tb_init(tb_bucket *b, double ns_per_token, double burst, double initial,
                  bool fair, tb_order order)
{
    if (!positive(ns_per_token) || !positive(burst) || !(initial >= 0) || initial > burst)
        return TB_EINVAL;
    double burst_ns = burst * ns_per_token;
    if (!(burst_ns <= (double)TB_MAX_SPAN))
        return TB_EINVAL;
    if (order != TB_FIFO && order != TB_SMALLEST_FIRST)
        return TB_EINVAL;
    *b = (tb_bucket){
        .rate = {.ns_per_token = ns_per_token, .burst = burst, .burst_ns = burst_ns},
        .order = order,
        .fair = fair,
        .initial = initial,
        .head = TB_NIL,
        .tail = TB_NIL,
        .free = TB_NIL,
    };
    debug_check(b);
    return TB_OK;
}

void tb_release(tb_bucket *b)
{
    free(b->slots);
    b->slots = NULL;
    b->capacity = 0;
    b->head = b->tail = b->free = TB_NIL;
    b->waiting = b->with_deadline = 0;
    b->queued_tokens = b->queued_error = 0;
}

// Sets F from the first reading of the clock: the bucket holds `initial` tokens at now.
static void anchor(tb_bucket *b, tb_ns now)
{
    if (b->anchored)
        return;
    b->anchored = true;
    b->rate.full_at = now;
    b->rate.full_at_frac = 0.0;
    advance(&b->rate, (b->rate.burst - b->initial) * b->rate.ns_per_token);
}

double tb_tokens(tb_bucket *b, tb_ns now)
{
    anchor(b, now);
    debug_check(b);
    double owed = debt(&b->rate, now);
    if (owed <= 0)
        return b->rate.burst;
    double tokens = b->rate.burst - owed / b->rate.ns_per_token;
    return tokens > 0 ? tokens : 0;
}

// Whether a newcomer must queue behind the waiters regardless of free tokens.
static bool must_queue(const tb_bucket *b)
{
    return b->waiting > 0 && (b->fair || b->with_deadline > 0);
}

bool tb_can_take(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    debug_check(b);
    return !must_queue(b) && fits(&b->rate, amount * b->rate.ns_per_token, now);
}

bool tb_take(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    double need = amount * b->rate.ns_per_token;
    bool granted = !must_queue(b) && fits(&b->rate, need, now);
    if (granted)
        consume(&b->rate, need, now);
    debug_check(b);
    return granted;
}

tb_ns tb_projected_grant(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    debug_check(b);
    /* FIFO grants are back to back: the last queued is granted once the
     * whole queue, itself included, fits in a bucket that is full at F. */
    double need = (b->queued_tokens + b->queued_error + amount) * b->rate.ns_per_token;
    if (need <= b->rate.burst_ns)
        return fit_at(&b->rate, need, now);
    tb_rate full = b->rate;
    if (full_before(&full, now)) {
        full.full_at = now;
        full.full_at_frac = 0.0;
    }
    double beyond = need - b->rate.burst_ns;
    if (!(beyond < HORIZON && beyond < HORIZON - (double)full.full_at))
        return TB_NEVER;  /* a long queue at a slow rate: int64 nanoseconds would overflow */
    advance(&full, beyond);  /* max(F, now) + need - burst_ns */
    tb_ns t = full.full_at + (full.full_at_frac > 0);
    return t > now ? t : now;
}

// Adds x to the queue's summed amount, compensated: a plain running sum would keep the rounding
// of every amount that ever passed through a busy queue, and drift from its waiters' true sum.
static void add_queued(tb_bucket *b, double x)
{
    double sum = b->queued_tokens + x;
    if (fabs(b->queued_tokens) >= fabs(x))
        b->queued_error += (b->queued_tokens - sum) + x;
    else
        b->queued_error += (x - sum) + b->queued_tokens;
    b->queued_tokens = sum;
}

// Takes a slot off the free list, growing the slab if needed; TB_NIL when out of memory.
static uint32_t claim_slot(tb_bucket *b)
{
    if (b->free == TB_NIL) {
        uint32_t grown = b->capacity ? b->capacity * 2 : MIN_SLOTS;
        if (grown <= b->capacity || grown >= TB_NIL)
            return TB_NIL;
        tb_waiter *slots = realloc(b->slots, (size_t)grown * sizeof *slots);
        if (!slots)
            return TB_NIL;
        for (uint32_t i = b->capacity; i < grown; i++)
            slots[i] = (tb_waiter){.next = i + 1 < grown ? i + 1 : TB_NIL};
        b->free = b->capacity;
        b->slots = slots;
        b->capacity = grown;
    }
    uint32_t slot = b->free;
    b->free = b->slots[slot].next;
    return slot;
}

// Links slot into the queue at its place for the bucket's order.
static void link_waiter(tb_bucket *b, uint32_t slot)
{
    tb_waiter *w = &b->slots[slot];
    uint32_t after = b->tail;
    if (b->order == TB_SMALLEST_FIRST)
        while (after != TB_NIL && b->slots[after].amount > w->amount)
            after = b->slots[after].prev;
    w->prev = after;
    w->next = after == TB_NIL ? b->head : b->slots[after].next;
    if (w->next == TB_NIL)
        b->tail = slot;
    else
        b->slots[w->next].prev = slot;
    if (after == TB_NIL)
        b->head = slot;
    else
        b->slots[after].next = slot;
}

tb_status tb_enqueue(tb_bucket *b, double amount, tb_ns now, tb_ns deadline,
                     void *handle, tb_id *id)
{
    if (!positive(amount) || amount > b->rate.burst)
        return TB_EINVAL;  /* it could never be granted: tb_head_ready_at would never return */
    anchor(b, now);
    debug_check(b);
    if (deadline != TB_NEVER) {
        if (b->order != TB_FIFO)
            return TB_EINVAL;
        if (tb_projected_grant(b, amount, now) > deadline)
            return TB_ETOOLATE;
    }
    uint32_t slot = claim_slot(b);
    if (slot == TB_NIL)
        return TB_ENOMEM;
    if (++b->enqueued == 0)
        b->enqueued = 1;
    b->slots[slot] = (tb_waiter){
        .amount = amount, .deadline = deadline, .handle = handle, .sequence = b->enqueued};
    link_waiter(b, slot);
    b->waiting++;
    b->with_deadline += deadline != TB_NEVER;
    add_queued(b, amount);
    *id = (tb_id)b->enqueued << 32 | slot;
    debug_check(b);
    return TB_OK;
}

// Unlinks a queued slot, frees it and returns its handle; frees the slab once the queue is empty.
static void *unlink_waiter(tb_bucket *b, uint32_t slot)
{
    tb_waiter *w = &b->slots[slot];
    void *handle = w->handle;
    if (w->prev == TB_NIL)
        b->head = w->next;
    else
        b->slots[w->prev].next = w->next;
    if (w->next == TB_NIL)
        b->tail = w->prev;
    else
        b->slots[w->next].prev = w->prev;
    b->waiting--;
    b->with_deadline -= w->deadline != TB_NEVER;
    if (b->waiting)
        add_queued(b, -w->amount);
    else
        b->queued_tokens = b->queued_error = 0.0;
    *w = (tb_waiter){.next = b->free};
    b->free = slot;
    if (b->waiting == 0 && b->capacity > MIN_SLOTS) {
        free(b->slots);  /* memory follows the live waiters back down */
        b->slots = NULL;
        b->capacity = 0;
        b->free = TB_NIL;
    }
    return handle;
}

void *tb_withdraw(tb_bucket *b, tb_id id)
{
    uint32_t slot = (uint32_t)id;
    uint32_t sequence = (uint32_t)(id >> 32);
    if (slot >= b->capacity || sequence == 0 || b->slots[slot].sequence != sequence)
        return NULL;
    void *handle = unlink_waiter(b, slot);
    debug_check(b);
    return handle;
}

void *tb_ready_head(tb_bucket *b, tb_ns now)
{
    anchor(b, now);
    debug_check(b);
    if (b->head == TB_NIL)
        return NULL;
    const tb_waiter *w = &b->slots[b->head];
    return fits(&b->rate, w->amount * b->rate.ns_per_token, now) ? w->handle : NULL;
}

void *tb_pop_head(tb_bucket *b, tb_ns now, bool grant)
{
    anchor(b, now);
    if (grant) {
        double need = b->slots[b->head].amount * b->rate.ns_per_token;
        tb_ns ready = fit_at(&b->rate, need, now - b->late_credit);
        consume(&b->rate, need, ready < now ? ready : now);
    }
    void *handle = unlink_waiter(b, b->head);
    debug_check(b);
    return handle;
}

void tb_set_late_credit(tb_bucket *b, tb_ns credit)
{
    b->late_credit = credit > 0 ? credit : 0;
    debug_check(b);
}

tb_ns tb_head_ready_at(tb_bucket *b, tb_ns now)
{
    anchor(b, now);
    debug_check(b);
    if (b->head == TB_NIL)
        return TB_NEVER;
    return fit_at(&b->rate, b->slots[b->head].amount * b->rate.ns_per_token, now);
}

void tb_refund(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    retreat(&b->rate, amount * b->rate.ns_per_token);
    debug_check(b);
}

void tb_rebase(tb_bucket *b, tb_ns then, tb_ns now)
{
    if (!b->anchored)
        return;
    tb_ns shift = now - then;
    b->rate.full_at += shift;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next)
        if (b->slots[s].deadline != TB_NEVER)
            b->slots[s].deadline += shift;
    debug_check(b);
}

int tb_check(const tb_bucket *b)
{
    const tb_rate *r = &b->rate;
    if (!positive(r->ns_per_token) || !positive(r->burst) || r->burst_ns != r->burst * r->ns_per_token)
        return 1;
    if (!(r->full_at_frac >= 0.0 && r->full_at_frac < 1.0))
        return 2;
    size_t count = 0, deadlines = 0;
    double tokens = 0;
    uint32_t prev = TB_NIL;
    for (uint32_t s = b->head; s != TB_NIL; prev = s, s = b->slots[s].next) {
        const tb_waiter *w = &b->slots[s];
        if (s >= b->capacity || w->sequence == 0 || w->prev != prev || ++count > b->waiting)
            return 3;
        if (!positive(w->amount) || w->amount > r->burst)
            return 4;
        if (b->order == TB_SMALLEST_FIRST && prev != TB_NIL && b->slots[prev].amount > w->amount)
            return 5;
        deadlines += w->deadline != TB_NEVER;
        tokens += w->amount;
    }
    if (count != b->waiting || prev != b->tail || deadlines != b->with_deadline)
        return 6;
    if (fabs(tokens - (b->queued_tokens + b->queued_error)) > 1e-9 * (tokens + 1))
        return 7;
    size_t free_slots = 0;
    for (uint32_t s = b->free; s != TB_NIL; s = b->slots[s].next)
        if (s >= b->capacity || b->slots[s].sequence != 0 || ++free_slots > b->capacity)
            return 8;
    if (free_slots + b->waiting != b->capacity)
        return 9;
    return 0;
}
