/* The waiter queue of aiotb's core, in front of its limits; see queue.h. */
#include "queue.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

#define MIN_SLOTS 16u

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

/* ---- set-up ---- */

// Sets up the empty queue of a bucket whose limits are set up already.
static void init_queue(tb_bucket *b, bool fair, tb_order order)
{
    *b = (tb_bucket){
        .limits = b->limits,
        .order = order,
        .fair = fair,
        .head = TB_NIL,
        .tail = TB_NIL,
        .free = TB_NIL,
    };
    debug_check(b);
}

// Whether order is one of tb_order's.
static bool order_ok(tb_order order)
{
    return order == TB_FIFO || order == TB_SMALLEST_FIRST;
}

tb_status tb_init(tb_bucket *b, double ns_per_token, double burst, double initial,
                  bool fair, tb_order order)
{
    if (!order_ok(order))
        return TB_EINVAL;
    tb_status status = tb_limits_init(&b->limits, ns_per_token, burst, initial);
    if (status == TB_OK)
        init_queue(b, fair, order);
    return status;
}

tb_status tb_init_window(tb_bucket *b, tb_ns period, double limit, bool fair, tb_order order)
{
    if (!order_ok(order))
        return TB_EINVAL;
    tb_status status = tb_limits_init_window(&b->limits, period, limit);
    if (status == TB_OK)
        init_queue(b, fair, order);
    return status;
}

tb_status tb_add_rate(tb_bucket *b, double ns_per_token, double burst, double initial)
{
    tb_status status = tb_limits_add_rate(&b->limits, ns_per_token, burst, initial);
    debug_check(b);
    return status;
}

void tb_release(tb_bucket *b)
{
    free(b->slots);
    tb_limits_release(&b->limits);
    b->slots = NULL;
    b->capacity = 0;
    b->head = b->tail = b->free = TB_NIL;
    b->waiting = b->with_deadline = 0;
    b->queued_tokens = b->queued_error = 0;
}

/* ---- newcomers ---- */

double tb_tokens(tb_bucket *b, tb_ns now)
{
    return tb_limits_tokens(&b->limits, now);
}

double tb_owed(tb_bucket *b, tb_ns now, tb_ns t)
{
    return tb_limits_owed(&b->limits, now, t);
}

// Whether a newcomer must queue behind the waiters regardless of free tokens.
static bool must_queue(const tb_bucket *b)
{
    return b->waiting > 0 && (b->fair || b->with_deadline > 0);
}

bool tb_can_take(tb_bucket *b, double amount, tb_ns now)
{
    return !must_queue(b) && tb_limits_fits(&b->limits, amount, now);
}

bool tb_take(tb_bucket *b, double amount, tb_ns now)
{
    if (must_queue(b) || !tb_limits_take_now(&b->limits, amount, now))
        return false;
    b->stats.granted++;
    b->stats.granted_tokens += amount;
    debug_check(b);
    return true;
}

/* ---- the queue ---- */

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

// Unlinks a waiter that leaves without its grant, counting it cancelled; returns its handle.
static void *cancel_waiter(tb_bucket *b, uint32_t slot)
{
    b->stats.cancelled++;
    void *handle = unlink_waiter(b, slot);
    debug_check(b);
    return handle;
}

/* A walk over the queue's amounts from slot up to (not including) stop, for the limits' projection. */
typedef struct {
    const tb_bucket *b;
    uint32_t slot, stop;
} queue_cursor;

// tb_next_amount over a queue_cursor.
static bool next_queued(void *cursor, double *amount)
{
    queue_cursor *c = cursor;
    if (c->slot == c->stop)
        return false;
    *amount = c->b->slots[c->slot].amount;
    c->slot = c->b->slots[c->slot].next;
    return true;
}

// Grant instant of a waiter for amount queued right behind the count waiters before slot stop
// (TB_NIL: all of them), who ask for ahead tokens in all, if nothing changes.
static tb_ns projected_behind(tb_bucket *b, uint32_t stop, size_t count, double ahead, double amount,
                              tb_ns now)
{
    queue_cursor cursor = {b, b->head, stop};
    tb_ahead queued = {.total = ahead, .count = count, .next = next_queued, .cursor = &cursor};
    return tb_limits_projection(&b->limits, &queued, amount, now);
}

tb_ns tb_projected_grant(tb_bucket *b, double amount, tb_ns now)
{
    tb_ns at = projected_behind(b, TB_NIL, b->waiting, b->queued_tokens + b->queued_error, amount, now);
    debug_check(b);
    return at;
}

tb_status tb_enqueue(tb_bucket *b, double amount, tb_ns now, tb_ns deadline,
                     void *handle, const void *owner, tb_id *id)
{
    if (!tb_positive(amount) || amount > b->limits.max_request)
        return TB_EINVAL;  /* it could never be granted: it would block the queue for good */
    tb_limits_anchor(&b->limits, now);
    if (deadline != TB_NEVER) {
        if (b->order != TB_FIFO)
            return TB_EINVAL;
        if (tb_projected_grant(b, amount, now) > deadline) {
            b->stats.timeouts++;
            return TB_ETOOLATE;
        }
    }
    uint32_t slot = claim_slot(b);
    if (slot == TB_NIL)
        return TB_ENOMEM;
    if (++b->enqueued == 0)
        b->enqueued = 1;
    b->slots[slot] = (tb_waiter){.amount = amount, .deadline = deadline, .enqueued_at = now,
                                 .handle = handle, .owner = owner, .sequence = b->enqueued};
    link_waiter(b, slot);
    b->waiting++;
    b->with_deadline += deadline != TB_NEVER;
    add_queued(b, amount);
    *id = (tb_id)b->enqueued << 32 | slot;
    debug_check(b);
    return TB_OK;
}

void *tb_withdraw(tb_bucket *b, tb_id id)
{
    uint32_t slot = (uint32_t)id;
    uint32_t sequence = (uint32_t)(id >> 32);
    if (slot >= b->capacity || sequence == 0 || b->slots[slot].sequence != sequence)
        return NULL;
    return cancel_waiter(b, slot);
}

void *tb_withdraw_head(tb_bucket *b)
{
    return b->head == TB_NIL ? NULL : cancel_waiter(b, b->head);
}

// The first queued slot of owner, TB_NIL if it has none; *count and *ahead are the waiters before it and their amounts.
static uint32_t first_of(const tb_bucket *b, const void *owner, size_t *count, double *ahead)
{
    *count = 0;
    *ahead = 0;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next, ++*count) {
        if (b->slots[s].owner == owner)
            return s;
        *ahead += b->slots[s].amount;
    }
    return TB_NIL;
}

void *tb_withdraw_first_of(tb_bucket *b, const void *owner)
{
    size_t count;
    double ahead;
    uint32_t slot = first_of(b, owner, &count, &ahead);
    return slot == TB_NIL ? NULL : cancel_waiter(b, slot);
}

tb_ns tb_first_due_of(tb_bucket *b, const void *owner, tb_ns now)
{
    size_t count;
    double ahead;
    uint32_t slot = first_of(b, owner, &count, &ahead);
    if (slot == TB_NIL)
        return TB_NEVER;
    tb_limits_anchor(&b->limits, now);
    tb_ns head = tb_limits_fit_at(&b->limits, b->slots[b->head].amount, now);
    if (slot == b->head)
        return head;
    tb_ns at = projected_behind(b, slot, count, ahead, b->slots[slot].amount, now);
    return at != TB_NEVER ? at : head;  /* beyond the projection's range: woken with the head, it looks again */
}

// Grants the head waiter at now, as of the instant it became ready (within the late credit), and counts it.
static void grant_head(tb_bucket *b, tb_ns now)
{
    const tb_waiter *w = &b->slots[b->head];
    tb_limits_take(&b->limits, w->amount, tb_limits_credited_at(&b->limits, w->amount, now), now);
    tb_ns wait = now - w->enqueued_at;
    b->stats.granted++;
    b->stats.granted_tokens += w->amount;
    b->stats.waits++;
    b->stats.wait_ns_total += (double)wait;
    if (wait > b->stats.wait_ns_max)
        b->stats.wait_ns_max = wait;
    unlink_waiter(b, b->head);
    debug_check(b);
}

tb_ns tb_grant_due(tb_bucket *b, tb_ns now, tb_decide decide, void *ctx)
{
    tb_limits_anchor(&b->limits, now);
    while (b->head != TB_NIL) {
        tb_ns ready = tb_limits_fit_at(&b->limits, b->slots[b->head].amount, now);
        if (ready > now)
            return ready;
        switch (decide(ctx, b->slots[b->head].handle, b->slots[b->head].amount)) {
        case TB_GRANT:
            grant_head(b, now);
            break;
        case TB_SKIP:
            cancel_waiter(b, b->head);
            break;
        case TB_STOP:
            return now;
        }
    }
    return TB_NEVER;
}

void *tb_withdraw_stranded(tb_bucket *b, tb_ns now, bool *never)
{
    tb_limits_anchor(&b->limits, now);
    *never = true;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next)
        if (b->slots[s].amount > b->limits.max_request)
            return cancel_waiter(b, s);
    *never = false;
    if (b->with_deadline == 0)
        return NULL;
    double ahead = 0;
    size_t count = 0;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next, count++) {
        const tb_waiter *w = &b->slots[s];
        if (w->deadline != TB_NEVER && projected_behind(b, s, count, ahead, w->amount, now) > w->deadline)
            return cancel_waiter(b, s);
        ahead += w->amount;
    }
    return NULL;
}

void tb_refund(tb_bucket *b, double amount, tb_ns now)
{
    tb_limits_refund(&b->limits, amount, now);
    b->stats.granted--;
    b->stats.granted_tokens -= amount;
    b->stats.cancelled++;
    debug_check(b);
}

tb_status tb_settle(tb_bucket *b, double taken, double used, bool held, tb_ns now)
{
    tb_status status = tb_limits_settle(&b->limits, taken, used, held, now);
    if (status == TB_OK)
        b->stats.granted_tokens += used - taken;
    debug_check(b);
    return status;
}

void tb_reckon_late(tb_bucket *b, double amount, tb_ns now)
{
    tb_limits_reckon_late(&b->limits, amount, now);
    debug_check(b);
}

void tb_hold(tb_bucket *b, double amount)
{
    tb_limits_hold(&b->limits, amount);
}

void tb_end_hold(tb_bucket *b, double amount, tb_ns now)
{
    tb_limits_end_hold(&b->limits, amount, now);
}

/* ---- changes ---- */

void tb_set_late_credit(tb_bucket *b, double tokens)
{
    tb_limits_set_late_credit(&b->limits, tokens);
}

tb_status tb_set_rate(tb_bucket *b, uint32_t index, double ns_per_token, double burst, tb_ns now)
{
    tb_status status = tb_limits_set_rate(&b->limits, index, ns_per_token, burst, now);
    debug_check(b);
    return status;
}

tb_status tb_set_window(tb_bucket *b, tb_ns period, double limit)
{
    tb_status status = tb_limits_set_window(&b->limits, period, limit);
    debug_check(b);
    return status;
}

void tb_pause_until(tb_bucket *b, tb_ns until)
{
    tb_limits_pause_until(&b->limits, until);
}

bool tb_limit_until(tb_bucket *b, double tokens, tb_ns until, tb_ns slack, tb_ns now)
{
    return tb_limits_limit_until(&b->limits, tokens, until, slack, now);
}

void tb_grant_until(tb_bucket *b, tb_ns until)
{
    tb_limits_grant_until(&b->limits, until);
}

tb_status tb_set_largest(tb_bucket *b, double amount)
{
    tb_status status = tb_limits_set_largest(&b->limits, amount);
    debug_check(b);
    return status;
}

tb_status tb_credit(tb_bucket *b, double tokens, tb_ns now)
{
    tb_status status = tb_limits_credit(&b->limits, tokens, now);
    debug_check(b);
    return status;
}

void tb_rebase(tb_bucket *b, tb_ns then, tb_ns now)
{
    tb_limits_rebase(&b->limits, then, now);
    tb_ns shift = now - then;
    for (uint32_t s = b->head; s != TB_NIL; s = b->slots[s].next) {
        tb_waiter *w = &b->slots[s];
        w->enqueued_at += shift;
        if (w->deadline != TB_NEVER)
            w->deadline += shift;
    }
    debug_check(b);
}

bool tb_as_good_as_new(tb_bucket *b, tb_ns now)
{
    return b->waiting == 0 && tb_limits_full(&b->limits, now);
}

int tb_check(const tb_bucket *b)
{
    int broken = tb_limits_check(&b->limits);
    if (broken)
        return broken;
    size_t count = 0, deadlines = 0;
    double tokens = 0;
    uint32_t prev = TB_NIL;
    for (uint32_t s = b->head; s != TB_NIL; prev = s, s = b->slots[s].next) {
        const tb_waiter *wt = &b->slots[s];
        if (s >= b->capacity || wt->sequence == 0 || wt->prev != prev || ++count > b->waiting)
            return 3;
        if (!tb_positive(wt->amount))
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
