/* The bucket of aiotb's core: limits (limits.h) with a queue of waiters in front of them.
 *
 * Waiters are granted in queue order (FIFO, or smallest amount first), each as soon as every limit
 * allows it; a newcomer takes free tokens at once unless it must queue behind them. A waiter is the
 * caller's opaque handle, never dereferenced nor owned. Like the limits, the bucket reads no clock:
 * every operation takes the caller's now. It reaches the limits only through limits.h's fit_at,
 * credited_at, take, take_now, refund, settle, hold, end_hold, tokens, projection and full (and passes
 * changes on), so the same queue can sit on limits kept elsewhere. Statistics are counted here, once. */
#ifndef AIOTB_QUEUE_H
#define AIOTB_QUEUE_H

#include "limits.h"

typedef enum {
    TB_FIFO,            /* waiters are granted in arrival order */
    TB_SMALLEST_FIRST,  /* smallest amount first, arrival order among equals */
} tb_order;

typedef uint64_t tb_id;   /* a queued waiter: (enqueue sequence << 32) | slot */

typedef struct {
    double amount;        /* tokens asked for */
    tb_ns deadline;       /* latest acceptable grant, TB_NEVER if none */
    tb_ns enqueued_at;    /* when it was queued, for the wait statistics */
    void *handle;         /* the caller's object for this waiter; never dereferenced */
    const void *owner;    /* who times and wakes it (say, one event loop's dispatcher); never dereferenced */
    uint32_t sequence;    /* low bits of the enqueue count; 0 marks a free slot */
    uint32_t prev, next;  /* queue links (next also chains free slots) */
} tb_waiter;

typedef struct {
    uint64_t granted;          /* grants kept: a refunded grant is taken back out */
    double granted_tokens;     /* their tokens */
    uint64_t waits;            /* grants that had to queue first (counted at grant) */
    double wait_ns_total;      /* their waits, ns from enqueue to the grant instant */
    tb_ns wait_ns_max;         /* the longest of them */
    uint64_t cancelled;        /* waiters withdrawn or skipped before their grant, grants refunded,
                                * waiters stranded */
    uint64_t timeouts;         /* enqueues refused with TB_ETOOLATE */
} tb_stats;

typedef struct {
    tb_limits limits;     /* what every grant must satisfy */
    tb_order order;
    bool fair;            /* newcomers queue behind waiters even when tokens are free */
    tb_waiter *slots;     /* slab of waiters, linked into the queue and a free list */
    uint32_t capacity;    /* slots allocated */
    uint32_t head, tail;  /* ends of the queue, TB_NIL when empty */
    uint32_t free;        /* first free slot, TB_NIL if none */
    uint32_t enqueued;    /* enqueue count, wrapping; never 0 in a live slot */
    size_t waiting;       /* waiters in the queue */
    size_t with_deadline; /* of which have a deadline */
    double queued_tokens; /* sum of their amounts: a running sum... */
    double queued_error;  /* ...and its compensation (Neumaier), so past amounts leave no rounding behind */
    tb_stats stats;
} tb_bucket;

#define TB_NIL UINT32_MAX

/* What tb_grant_due does with a waiter that can be granted now. */
typedef enum {
    TB_SKIP = 0,        /* removes it without taking tokens: its caller gave up */
    TB_GRANT = 1,       /* grants it */
    TB_STOP = -1,       /* ends the pass, leaving it queued */
} tb_verdict;

/* Asked about each waiter at the head that can be granted now (its handle and amount); must not call
 * into the bucket. */
typedef tb_verdict (*tb_decide)(void *ctx, void *handle, double amount);

/* Sets up an empty bucket with one rate; TB_OK, or TB_EINVAL if a parameter is out of range. */
tb_status tb_init(tb_bucket *b, double ns_per_token, double burst, double initial,
                  bool fair, tb_order order);
/* Sets up an empty bucket limited only by a strict sliding window; TB_OK, TB_EINVAL or TB_ENOMEM. */
tb_status tb_init_window(tb_bucket *b, tb_ns period, double limit, bool fair, tb_order order);
/* Adds a rate that every grant must also satisfy (before any use); TB_OK or TB_EINVAL. */
tb_status tb_add_rate(tb_bucket *b, double ns_per_token, double burst, double initial);
/* Frees the bucket's memory; handles still queued are forgotten, not released. */
void tb_release(tb_bucket *b);

/* Tokens available at now (never negative, at most burst). */
double tb_tokens(tb_bucket *b, tb_ns now);
/* The most tokens a rate would still owe at t >= now (tb_limits_owed). */
double tb_owed(tb_bucket *b, tb_ns now, tb_ns t);
/* Whether a newcomer asking for amount at now would be granted without waiting. */
bool tb_can_take(tb_bucket *b, double amount, tb_ns now);
/* Grants amount at now if a newcomer may have it without waiting, counting the grant; returns whether it did. */
bool tb_take(tb_bucket *b, double amount, tb_ns now);

/* Queues a waiter of owner. TB_OK with *id set; TB_ETOOLATE if its grant cannot come by deadline
 * (nothing queued, a timeout counted); TB_EINVAL for an amount outside (0, max_request] or a deadline
 * in smallest-first order; TB_ENOMEM. */
tb_status tb_enqueue(tb_bucket *b, double amount, tb_ns now, tb_ns deadline,
                     void *handle, const void *owner, tb_id *id);
/* Removes a queued waiter without granting it, counting it cancelled; returns its handle, or NULL
 * if id is not queued. */
void *tb_withdraw(tb_bucket *b, tb_id id);
/* Removes the head waiter without granting it, counting it cancelled; returns its handle, or NULL
 * if none waits. */
void *tb_withdraw_head(tb_bucket *b);
/* Removes owner's first queued waiter without granting it, counting it cancelled; returns its
 * handle, or NULL if owner has none queued. */
void *tb_withdraw_first_of(tb_bucket *b, const void *owner);
/* Removes, in queue order, every waiter that can be granted at now, asking decide about each (a
 * granted one takes its tokens as of its ready instant, or late_credit before now if later, and is
 * counted); returns the first instant >= now at which the new head can be granted, TB_NEVER if
 * none waits (now after TB_STOP). Once decide returned TB_GRANT or TB_SKIP, the waiter is gone
 * and its handle is the caller's again. */
tb_ns tb_grant_due(tb_bucket *b, tb_ns now, tb_decide decide, void *ctx);
/* The instant a waiter for amount queued now would be granted, if nothing ahead changes, never
 * earlier (see tb_limits_projection); TB_NEVER if that is at TB_MAX_SPAN (2^58 ns) or later. */
tb_ns tb_projected_grant(tb_bucket *b, double amount, tb_ns now);
/* The instant owner's first queued waiter can be granted, if nothing ahead of it changes, never
 * earlier (see tb_limits_projection): the head's is exact; the head's instant instead should the
 * projection be out of its range (the owner then wakes early and asks again); TB_NEVER if owner has
 * none queued. */
tb_ns tb_first_due_of(tb_bucket *b, const void *owner, tb_ns now);
/* Removes one queued waiter that can no longer be granted as promised, counting it cancelled,
 * and returns its handle, setting *never if its amount is above the largest request (else its projected
 * grant misses its deadline); NULL if there is none. */
void *tb_withdraw_stranded(tb_bucket *b, tb_ns now, bool *never);
/* Gives back amount tokens of a grant never used, taking the grant out of the statistics. */
void tb_refund(tb_bucket *b, double amount, tb_ns now);
/* Settles a grant of taken tokens whose real cost is used, as tb_limits_settle (held: the grant is held
 * in the window), counting used instead of taken in the statistics; TB_OK, or TB_EINVAL changing nothing.
 * Queued waiters keep their place: their grants come later after a debt, earlier after a refund. */
tb_status tb_settle(tb_bucket *b, double taken, double used, bool held, tb_ns now);
/* Grants of amount, taken earlier, are used only now (see tb_limits_reckon_late). */
void tb_reckon_late(tb_bucket *b, double amount, tb_ns now);
/* Holds a grant of amount just taken while it is in use (see tb_limits_hold). */
void tb_hold(tb_bucket *b, double amount);
/* Ends the hold of a grant of amount at now (see tb_limits_end_hold). */
void tb_end_hold(tb_bucket *b, double amount, tb_ns now);

/* Sets how much of a late wake-up a head's grant is credited for, in time of one token of the
 * fastest rate (0 after tb_init): below 1, timer lateness does not slow the rate, a longer
 * stall is not made up, and no interval of length t sees a whole token over burst + rate*t. */
void tb_set_late_credit(tb_bucket *b, double tokens);
/* Changes rate index to a new refill and capacity as of now, keeping the tokens it holds (at
 * most the new burst; a debt, owed at the new refill); TB_OK, or TB_EINVAL. Queued waiters keep their place. */
tb_status tb_set_rate(tb_bucket *b, uint32_t index, double ns_per_token, double burst, tb_ns now);
/* Changes the window's period and limit, keeping its log of grants; TB_OK or TB_EINVAL. */
tb_status tb_set_window(tb_bucket *b, tb_ns period, double limit);
/* No grant before until (a later call can only move it later). */
void tb_pause_until(tb_bucket *b, tb_ns until);
/* Grants before until take at most tokens in all, as tb_limits_limit_until (which says how a limit still
 * running is replaced, tightened or kept, and what it returns). Queued waiters keep their place. */
bool tb_limit_until(tb_bucket *b, double tokens, tb_ns until, tb_ns slack, tb_ns now);
/* No grant at or after until (tb_limits_grant_until). Queued waiters keep their place; the caller times
 * them again, as after a pause. */
void tb_grant_until(tb_bucket *b, tb_ns until);
/* Requests may ask for up to max(amount, the smallest burst) (tb_limits_set_largest); TB_OK or TB_EINVAL. */
tb_status tb_set_largest(tb_bucket *b, double amount);
/* Credits tokens to every rate without a grant (tb_limits_credit), counting nothing in the statistics;
 * TB_OK, or TB_EINVAL changing nothing. Queued waiters keep their place. */
tb_status tb_credit(tb_bucket *b, double tokens, tb_ns now);
/* Moves the bucket onto another clock, on which the old clock's then reads now. */
void tb_rebase(tb_bucket *b, tb_ns then, tb_ns now);
/* Whether the bucket is as good as new at now: no waiter, and its limits full. */
bool tb_as_good_as_new(tb_bucket *b, tb_ns now);

/* 0 if every invariant of the bucket holds, else the number of the broken one. */
int tb_check(const tb_bucket *b);

#endif
