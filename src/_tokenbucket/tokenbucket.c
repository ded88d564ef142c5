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

// The whole nanoseconds of a span in [0, 2^63): floor() by truncation, without a call into libm.
static double whole_ns(double span)
{
    return (double)(tb_ns)span;
}

// Moves F later by span >= 0 nanoseconds.
static void advance(tb_rate *r, double span)
{
    double whole = whole_ns(span);
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
    double whole = whole_ns(span);
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

/* ---- the window: a log of grants, oldest first ---- */

#define MIN_LOG 16u

// The i-th oldest grant in the log.
static tb_grant *log_at(const tb_window *w, uint32_t i)
{
    return &w->log[(w->log_first + i) % w->log_capacity];
}

// Tokens of the logged grants still inside the window that ends at t (they are newer than t - period).
static double window_used(const tb_window *w, tb_ns t)
{
    double used = 0;
    for (uint32_t i = 0; i < w->log_count; i++) {
        const tb_grant *g = log_at(w, i);
        if (g->at > t - w->period)
            used += g->amount;
    }
    return used;
}

// Whether amount more fits in the window ending at t.
static bool window_fits(const tb_window *w, double amount, tb_ns t)
{
    return w->period == 0 || window_used(w, t) + amount <= w->limit;
}

// First instant >= t at which amount more fits in the window: when enough old grants have left it.
static tb_ns window_fit_at(const tb_window *w, double amount, tb_ns t)
{
    if (window_fits(w, amount, t))
        return t;
    for (uint32_t i = 0; i < w->log_count; i++) {  /* grant i leaves the window at its at + period */
        tb_ns leaves = log_at(w, i)->at + w->period;
        if (leaves > t && window_fits(w, amount, leaves))
            return leaves;
    }
    return TB_NEVER;  /* only for amount > limit, which is never queued */
}

// Drops the grants that no window ending at now or later can see.
static void window_forget(tb_window *w, tb_ns now)
{
    while (w->log_count > 0 && log_at(w, 0)->at <= now - w->period) {
        w->log_first = (w->log_first + 1) % w->log_capacity;
        w->log_count--;
    }
}

// Logs a grant of amount at t. Should the log fail to grow, the grant is merged into the newest,
// which then counts for longer than its own: stricter, never looser.
static void window_record(tb_window *w, double amount, tb_ns t)
{
    if (w->period == 0)
        return;
    window_forget(w, t);
    if (w->log_count > 0 && log_at(w, w->log_count - 1)->at > t)
        t = log_at(w, w->log_count - 1)->at;  /* keep the log in time order */
    if (w->log_count == w->log_capacity) {
        uint32_t grown = w->log_capacity * 2;
        tb_grant *log = grown > w->log_capacity ? malloc((size_t)grown * sizeof *log) : NULL;
        if (log == NULL) {
            tb_grant *newest = log_at(w, w->log_count - 1);
            newest->amount += amount;
            newest->at = t;
            return;
        }
        for (uint32_t i = 0; i < w->log_count; i++)
            log[i] = *log_at(w, i);
        free(w->log);
        w->log = log;
        w->log_first = 0;
        w->log_capacity = grown;
    }
    *log_at(w, w->log_count++) = (tb_grant){.at = t, .amount = amount};
}

// Takes back a logged grant of amount: the oldest of that size, so the log errs on the strict side.
static void window_unrecord(tb_window *w, double amount)
{
    for (uint32_t i = 0; i < w->log_count; i++) {
        if (log_at(w, i)->amount != amount)
            continue;
        for (uint32_t j = i; j + 1 < w->log_count; j++)
            *log_at(w, j) = *log_at(w, j + 1);
        w->log_count--;
        return;
    }
}

/* ---- every limit at once: the rates, the window and a pause ---- */

// Whether amount can be granted at t by every limit.
static bool all_fit(const tb_bucket *b, double amount, tb_ns t)
{
    if (t < b->paused_until)
        return false;
    for (uint32_t i = 0; i < b->nrates; i++)
        if (!fits(&b->rates[i], amount * b->rates[i].ns_per_token, t))
            return false;
    return window_fits(&b->window, amount, t);
}

// First instant >= t at which every limit grants amount: each fits from some instant on, so the latest.
static tb_ns all_fit_at(const tb_bucket *b, double amount, tb_ns t)
{
    if (t < b->paused_until)
        t = b->paused_until;
    for (uint32_t i = 0; i < b->nrates; i++) {
        tb_ns ready = fit_at(&b->rates[i], amount * b->rates[i].ns_per_token, t);
        if (ready > t)
            t = ready;
    }
    tb_ns open = window_fit_at(&b->window, amount, t);
    return open > t ? open : t;
}

// Grants amount: the rates as of rates_at (never after now), the window at now.
static void take_all(tb_bucket *b, double amount, tb_ns rates_at, tb_ns now)
{
    for (uint32_t i = 0; i < b->nrates; i++)
        consume(&b->rates[i], amount * b->rates[i].ns_per_token, rates_at);
    window_record(&b->window, amount, now);
}

// The largest amount any single grant may take.
static double most_grantable(const tb_bucket *b)
{
    double most = b->window.period ? b->window.limit : INFINITY;
    for (uint32_t i = 0; i < b->nrates; i++)
        if (b->rates[i].burst < most)
            most = b->rates[i].burst;
    return most;
}

/* ---- the bucket ---- */

// Whether a rate's parameters are usable.
static bool rate_ok(double ns_per_token, double burst, double initial)
{
    return positive(ns_per_token) && positive(burst) && initial >= 0 && initial <= burst &&
           burst * ns_per_token <= (double)TB_MAX_SPAN;
}

// An empty bucket with no limit yet.
static tb_status init_empty(tb_bucket *b, bool fair, tb_order order)
{
    if (order != TB_FIFO && order != TB_SMALLEST_FIRST)
        return TB_EINVAL;
    *b = (tb_bucket){
        .paused_until = INT64_MIN,
        .order = order,
        .fair = fair,
        .head = TB_NIL,
        .tail = TB_NIL,
        .free = TB_NIL,
    };
    return TB_OK;
}

tb_status tb_init(tb_bucket *b, double ns_per_token, double burst, double initial,
                  bool fair, tb_order order)
{
    if (!rate_ok(ns_per_token, burst, initial) || init_empty(b, fair, order) != TB_OK)
        return TB_EINVAL;
    return tb_add_rate(b, ns_per_token, burst, initial);
}

tb_status tb_init_window(tb_bucket *b, tb_ns period, double limit, bool fair, tb_order order)
{
    if (period <= 0 || period > TB_MAX_SPAN || !positive(limit) || init_empty(b, fair, order) != TB_OK)
        return TB_EINVAL;
    b->window.log = malloc(MIN_LOG * sizeof *b->window.log);
    if (b->window.log == NULL)
        return TB_ENOMEM;
    b->window.log_capacity = MIN_LOG;
    b->window.period = period;
    b->window.limit = limit;
    b->max_amount = limit;
    debug_check(b);
    return TB_OK;
}

tb_status tb_add_rate(tb_bucket *b, double ns_per_token, double burst, double initial)
{
    if (b->nrates == TB_MAX_RATES || b->anchored || !rate_ok(ns_per_token, burst, initial))
        return TB_EINVAL;
    b->rates[b->nrates++] = (tb_rate){
        .ns_per_token = ns_per_token, .burst = burst, .burst_ns = burst * ns_per_token, .initial = initial};
    b->max_amount = most_grantable(b);
    b->plain = b->nrates == 1 && b->window.period == 0 && b->paused_until == INT64_MIN;
    debug_check(b);
    return TB_OK;
}

void tb_release(tb_bucket *b)
{
    free(b->slots);
    free(b->window.log);
    b->slots = NULL;
    b->window.log = NULL;
    b->window.log_capacity = b->window.log_count = 0;
    b->capacity = 0;
    b->head = b->tail = b->free = TB_NIL;
    b->waiting = b->with_deadline = 0;
    b->queued_tokens = b->queued_error = 0;
}

// Sets every F from the first reading of the clock: each rate holds its initial tokens at now.
static void anchor(tb_bucket *b, tb_ns now)
{
    if (b->anchored)
        return;
    b->anchored = true;
    for (uint32_t i = 0; i < b->nrates; i++) {
        tb_rate *r = &b->rates[i];
        r->full_at = now;
        r->full_at_frac = 0.0;
        advance(r, (r->burst - r->initial) * r->ns_per_token);
    }
}

// Tokens one rate holds at now.
static double rate_tokens(const tb_rate *r, tb_ns now)
{
    double owed = debt(r, now);
    if (owed <= 0)
        return r->burst;
    double tokens = r->burst - owed / r->ns_per_token;
    return tokens > 0 ? tokens : 0;
}

double tb_tokens(tb_bucket *b, tb_ns now)
{
    anchor(b, now);
    if (now < b->paused_until)
        return 0;
    double tokens = b->window.period ? b->window.limit - window_used(&b->window, now) : INFINITY;
    for (uint32_t i = 0; i < b->nrates; i++) {
        double held = rate_tokens(&b->rates[i], now);
        if (held < tokens)
            tokens = held;
    }
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
    return !must_queue(b) && all_fit(b, amount, now);
}

bool tb_take(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    if (must_queue(b))
        return false;
    if (b->plain) {  /* the uncontended path of a plain limiter, kept short */
        tb_rate *r = &b->rates[0];
        double need = amount * r->ns_per_token;
        if (!fits(r, need, now))
            return false;
        consume(r, need, now);
        debug_check(b);
        return true;
    }
    if (!all_fit(b, amount, now))
        return false;
    take_all(b, amount, now, now);
    debug_check(b);
    return true;
}

// Grant instant of a waiter for amount queued right behind the waiters before slot stop (TB_NIL:
// all of them), found by granting them in order on a copy of the limits.
static tb_ns simulated_grant(const tb_bucket *b, uint32_t stop, double amount, tb_ns now)
{
    tb_bucket copy = *b;  /* reads the queue; owns a copy of the window's log */
    copy.window.log = NULL;
    copy.window.log_first = copy.window.log_capacity = copy.window.log_count = 0;
    if (b->window.period) {
        copy.window.log_capacity = b->window.log_count + (uint32_t)b->waiting + 1;
        copy.window.log = malloc((size_t)copy.window.log_capacity * sizeof *copy.window.log);
        if (copy.window.log == NULL)
            return TB_NEVER;  /* cannot tell: promise nothing */
        for (uint32_t i = 0; i < b->window.log_count; i++)
            copy.window.log[i] = *log_at(&b->window, i);
        copy.window.log_count = b->window.log_count;
    }
    tb_ns t = now;
    for (uint32_t s = b->head;; s = b->slots[s].next) {
        double next = s == stop ? amount : b->slots[s].amount;
        t = all_fit_at(&copy, next, t);
        if (s == stop || t == TB_NEVER)
            break;
        take_all(&copy, next, t, t);
    }
    free(copy.window.log);
    return t;
}

// Grant instant of a waiter for amount queued right behind the waiters before slot stop, who ask
// for ahead tokens in all, if nothing changes: FIFO grants come back to back.
static tb_ns projected_behind(const tb_bucket *b, uint32_t stop, double ahead, double amount, tb_ns now)
{
    if (b->nrates != 1 || b->window.period || b->paused_until > now)
        return simulated_grant(b, stop, amount, now);
    /* One rate: the waiter is granted once it and all before it fit in a bucket full at F. */
    const tb_rate *rate = &b->rates[0];
    double need = (ahead + amount) * rate->ns_per_token;
    if (need <= rate->burst_ns)
        return fit_at(rate, need, now);
    tb_rate full = *rate;
    if (full_before(&full, now)) {
        full.full_at = now;
        full.full_at_frac = 0.0;
    }
    double beyond = need - rate->burst_ns;
    if (!(beyond < HORIZON && beyond < HORIZON - (double)full.full_at))
        return TB_NEVER;  /* a long queue at a slow rate: int64 nanoseconds would overflow */
    advance(&full, beyond);  /* max(F, now) + need - burst_ns */
    tb_ns t = full.full_at + (full.full_at_frac > 0);
    return t > now ? t : now;
}

tb_ns tb_projected_grant(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    debug_check(b);
    return projected_behind(b, TB_NIL, b->queued_tokens + b->queued_error, amount, now);
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
    if (!positive(amount) || amount > b->max_amount)
        return TB_EINVAL;  /* it could never be granted: tb_head_ready_at would never return */
    anchor(b, now);
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

// The late-wake credit in nanoseconds: late_credit of a token of the fastest rate (none for a window).
static tb_ns late_credit_ns(const tb_bucket *b)
{
    double fastest = INFINITY;
    for (uint32_t i = 0; i < b->nrates; i++)
        if (b->rates[i].ns_per_token < fastest)
            fastest = b->rates[i].ns_per_token;
    return b->nrates ? (tb_ns)(b->late_credit * fastest) : 0;
}

void *tb_ready_head(tb_bucket *b, tb_ns now)
{
    anchor(b, now);
    if (b->head == TB_NIL)
        return NULL;
    const tb_waiter *w = &b->slots[b->head];
    return all_fit(b, w->amount, now) ? w->handle : NULL;
}

void *tb_pop_head(tb_bucket *b, tb_ns now, bool grant)
{
    anchor(b, now);
    if (grant) {
        double amount = b->slots[b->head].amount;
        tb_ns ready = all_fit_at(b, amount, now - late_credit_ns(b));
        take_all(b, amount, ready < now ? ready : now, now);
    }
    void *handle = unlink_waiter(b, b->head);
    debug_check(b);
    return handle;
}

void tb_set_late_credit(tb_bucket *b, double tokens)
{
    b->late_credit = tokens > 0 && tokens < 1 ? tokens : 0;
}

tb_ns tb_head_ready_at(tb_bucket *b, tb_ns now)
{
    anchor(b, now);
    if (b->head == TB_NIL)
        return TB_NEVER;
    return all_fit_at(b, b->slots[b->head].amount, now);
}

tb_status tb_set_rate(tb_bucket *b, uint32_t index, double ns_per_token, double burst, tb_ns now)
{
    if (index >= b->nrates || !rate_ok(ns_per_token, burst, 0))
        return TB_EINVAL;
    anchor(b, now);
    tb_rate *r = &b->rates[index];
    double tokens = rate_tokens(r, now);
    *r = (tb_rate){.ns_per_token = ns_per_token, .burst = burst, .burst_ns = burst * ns_per_token,
                   .full_at = now};
    advance(r, (burst - (tokens < burst ? tokens : burst)) * ns_per_token);
    b->max_amount = most_grantable(b);
    debug_check(b);
    return TB_OK;
}

tb_status tb_set_window(tb_bucket *b, tb_ns period, double limit)
{
    if (b->window.period == 0 || period <= 0 || period > TB_MAX_SPAN || !positive(limit))
        return TB_EINVAL;
    b->window.period = period;
    b->window.limit = limit;
    b->max_amount = most_grantable(b);
    debug_check(b);
    return TB_OK;
}

void tb_pause_until(tb_bucket *b, tb_ns until)
{
    if (until > b->paused_until) {
        b->paused_until = until;
        b->plain = false;
    }
}

void *tb_withdraw_stranded(tb_bucket *b, tb_ns now, bool *never)
{
    anchor(b, now);
    *never = true;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next) {
        const tb_waiter *w = &b->slots[s];
        if (w->amount > b->max_amount)
            return unlink_waiter(b, s);
    }
    *never = false;
    if (b->with_deadline == 0)
        return NULL;
    double ahead = 0;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next) {
        const tb_waiter *w = &b->slots[s];
        if (w->deadline != TB_NEVER && projected_behind(b, s, ahead, w->amount, now) > w->deadline)
            return unlink_waiter(b, s);
        ahead += w->amount;
    }
    return NULL;
}

void tb_refund(tb_bucket *b, double amount, tb_ns now)
{
    anchor(b, now);
    for (uint32_t i = 0; i < b->nrates; i++)
        retreat(&b->rates[i], amount * b->rates[i].ns_per_token);
    window_unrecord(&b->window, amount);
    debug_check(b);
}

void tb_rebase(tb_bucket *b, tb_ns then, tb_ns now)
{
    if (!b->anchored)
        return;
    tb_ns shift = now - then;
    for (uint32_t i = 0; i < b->nrates; i++)
        b->rates[i].full_at += shift;
    for (uint32_t i = 0; i < b->window.log_count; i++)
        log_at(&b->window, i)->at += shift;
    if (b->paused_until != INT64_MIN)
        b->paused_until += shift;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next)
        if (b->slots[s].deadline != TB_NEVER)
            b->slots[s].deadline += shift;
    debug_check(b);
}

int tb_check(const tb_bucket *b)
{
    if (b->nrates > TB_MAX_RATES || (b->nrates == 0 && b->window.period == 0))
        return 1;
    for (uint32_t i = 0; i < b->nrates; i++) {
        const tb_rate *r = &b->rates[i];
        if (!positive(r->ns_per_token) || !positive(r->burst) || r->burst_ns != r->burst * r->ns_per_token)
            return 1;
        if (!(r->full_at_frac >= 0.0 && r->full_at_frac < 1.0))
            return 2;
    }
    if (b->max_amount != most_grantable(b))
        return 1;
    const tb_window *w = &b->window;
    if (w->period && (w->log_count > w->log_capacity || w->log_first >= w->log_capacity))
        return 10;
    for (uint32_t i = 1; i < w->log_count; i++)
        if (log_at(w, i)->at < log_at(w, i - 1)->at || !positive(log_at(w, i)->amount))
            return 10;
    size_t count = 0, deadlines = 0;
    double tokens = 0;
    uint32_t prev = TB_NIL;
    for (uint32_t s = b->head; s != TB_NIL; prev = s, s = b->slots[s].next) {
        const tb_waiter *wt = &b->slots[s];
        if (s >= b->capacity || wt->sequence == 0 || wt->prev != prev || ++count > b->waiting)
            return 3;
        if (!positive(wt->amount))
            return 4;
        if (b->order == TB_SMALLEST_FIRST && prev != TB_NIL && b->slots[prev].amount > wt->amount)
            return 5;
        deadlines += wt->deadline != TB_NEVER;
        tokens += wt->amount;
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
