/* The pure core of aiotb: a token bucket (GCRA form) with a queue of waiters.
 *
 * Knows nothing of Python or of any clock: every operation takes the caller's
 * current time `now`, in nanoseconds on whatever monotonic clock the caller
 * uses. Token amounts are doubles; the instant the bucket is full again is
 * kept as integer nanoseconds plus a fraction, so refill never drifts. */
#ifndef AIOTB_TOKENBUCKET_H
#define AIOTB_TOKENBUCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int64_t tb_ns;                   /* an instant or a span, in nanoseconds */
#define TB_NEVER INT64_MAX               /* "no deadline" / "no one waits" */
#define TB_MAX_SPAN ((tb_ns)1 << 61)     /* longest refill of a full bucket: ~73 years */

typedef enum {
    TB_FIFO,            /* waiters are granted in arrival order */
    TB_SMALLEST_FIRST,  /* smallest amount first, arrival order among equals */
} tb_order;

typedef enum {
    TB_OK = 0,
    TB_EINVAL,          /* a parameter is out of range */
    TB_ENOMEM,          /* the waiter queue could not grow */
    TB_ETOOLATE,        /* the grant could not come by the deadline */
} tb_status;

/* One rate: refill of one token every ns_per_token, at most burst tokens. */
typedef struct {
    double ns_per_token;  /* time to refill one token */
    double burst;         /* capacity, in tokens */
    double burst_ns;      /* burst * ns_per_token: the most debt the bucket may carry */
    double initial;       /* tokens at the first reading of the clock */
    tb_ns full_at;        /* whole nanoseconds of the instant the bucket is full again */
    double full_at_frac;  /* its fraction of a nanosecond, in [0, 1) */
} tb_rate;

typedef struct {
    tb_ns at;             /* when it was granted */
    double amount;
} tb_grant;

/* A strict sliding window: at most limit tokens granted in any [t, t + period). */
typedef struct {
    tb_ns period;         /* 0: no window */
    double limit;
    tb_grant *log;        /* ring of the grants that may still be inside a window, oldest first */
    uint32_t log_capacity, log_first, log_count;
} tb_window;

#define TB_MAX_RATES 4

typedef uint64_t tb_id;   /* a queued waiter: (enqueue sequence << 32) | slot */

typedef struct {
    double amount;        /* tokens asked for */
    tb_ns deadline;       /* latest acceptable grant, TB_NEVER if none */
    void *handle;         /* the caller's object for this waiter; never dereferenced */
    uint32_t sequence;    /* low bits of the enqueue count; 0 marks a free slot */
    uint32_t prev, next;  /* queue links (next also chains free slots) */
} tb_waiter;

typedef struct {
    tb_rate rates[TB_MAX_RATES]; /* every one must allow a grant: several rates are checked atomically */
    uint32_t nrates;
    tb_window window;
    double max_amount;    /* the most any single grant may take: the smallest burst or window limit */
    tb_ns paused_until;   /* no grant before this instant */
    tb_order order;
    bool fair;            /* newcomers queue behind waiters even when tokens are free */
    bool anchored;        /* the rates' full_at were set from a first reading of the clock */
    bool plain;           /* one rate, no window, never paused: tb_take's short path applies */
    tb_waiter *slots;     /* slab of waiters, linked into the queue and a free list */
    uint32_t capacity;    /* slots allocated */
    uint32_t head, tail;  /* ends of the queue, TB_NIL when empty */
    uint32_t free;        /* first free slot, TB_NIL if none */
    uint32_t enqueued;    /* enqueue count, wrapping; never 0 in a live slot */
    size_t waiting;       /* waiters in the queue */
    size_t with_deadline; /* of which have a deadline */
    double queued_tokens; /* sum of their amounts: a running sum... */
    double queued_error;  /* ...and its compensation (Neumaier), so past amounts leave no rounding behind */
    double late_credit;   /* how late a head may be popped and still be granted as of its ready
                           * instant, in time of one token of the fastest rate */
} tb_bucket;

#define TB_NIL UINT32_MAX

/* Sets up an empty bucket with one rate; TB_OK, or TB_EINVAL if a parameter is out of range. */
tb_status tb_init(tb_bucket *b, double ns_per_token, double burst, double initial,
                  bool fair, tb_order order);
/* Sets up an empty bucket limited only by a strict sliding window; TB_OK or TB_EINVAL. */
tb_status tb_init_window(tb_bucket *b, tb_ns period, double limit, bool fair, tb_order order);
/* Adds a rate that every grant must also satisfy (before any use); TB_OK or TB_EINVAL. */
tb_status tb_add_rate(tb_bucket *b, double ns_per_token, double burst, double initial);
/* Frees the queue's memory; handles still queued are forgotten, not released. */
void tb_release(tb_bucket *b);

/* Tokens available at now (never negative, at most burst). */
double tb_tokens(tb_bucket *b, tb_ns now);
/* Whether a newcomer asking for amount at now would be granted without waiting. */
bool tb_can_take(tb_bucket *b, double amount, tb_ns now);
/* Grants amount at now if a newcomer may have it without waiting; returns whether it did. */
bool tb_take(tb_bucket *b, double amount, tb_ns now);

/* Queues a waiter. TB_OK with *id set; TB_ETOOLATE if its grant cannot come by
 * deadline (nothing queued); TB_EINVAL for an amount outside (0, burst] or a deadline
 * in smallest-first order; TB_ENOMEM. */
tb_status tb_enqueue(tb_bucket *b, double amount, tb_ns now, tb_ns deadline,
                     void *handle, tb_id *id);
/* Removes a queued waiter without granting it; returns its handle, or NULL if id is not queued. */
void *tb_withdraw(tb_bucket *b, tb_id id);
/* The head waiter's handle if it can be granted at now, else NULL. */
void *tb_ready_head(tb_bucket *b, tb_ns now);
/* Removes the head waiter (there must be one); returns its handle. If grant, takes its tokens
 * as of the instant it became ready, or late_credit before now if that is later. */
void *tb_pop_head(tb_bucket *b, tb_ns now, bool grant);
/* The first instant >= now at which the head waiter can be granted, TB_NEVER if none waits. */
tb_ns tb_head_ready_at(tb_bucket *b, tb_ns now);
/* The instant a waiter for amount queued now would be granted, if nothing ahead changes;
 * TB_NEVER if that is at 2^62 ns or later, or 2^62 ns or more after a full bucket: past
 * every deadline now + TB_MAX_SPAN on a clock within +-TB_MAX_SPAN. */
tb_ns tb_projected_grant(tb_bucket *b, double amount, tb_ns now);

/* Sets how much of a late wake-up a head's grant is credited for, in time of one token of the
 * fastest rate (0 after tb_init): below 1, timer lateness does not slow the rate, a longer
 * stall is not made up, and no interval of length t sees a whole token over burst + rate*t. */
void tb_set_late_credit(tb_bucket *b, double tokens);
/* Changes rate index to a new refill and capacity as of now, keeping the tokens it holds (at
 * most the new burst); TB_OK, or TB_EINVAL. Queued waiters keep their place. */
tb_status tb_set_rate(tb_bucket *b, uint32_t index, double ns_per_token, double burst, tb_ns now);
/* Changes the window's period and limit, keeping its log of grants; TB_OK or TB_EINVAL. */
tb_status tb_set_window(tb_bucket *b, tb_ns period, double limit);
/* No grant before until (a later call can only move it later). */
void tb_pause_until(tb_bucket *b, tb_ns until);
/* Removes one queued waiter that can no longer be granted as promised and returns its handle,
 * setting *never if its amount is above the capacity (else its projected grant misses its
 * deadline); NULL if there is none. */
void *tb_withdraw_stranded(tb_bucket *b, tb_ns now, bool *never);
/* Gives back amount tokens granted earlier and never used. */
void tb_refund(tb_bucket *b, double amount, tb_ns now);
/* Moves the bucket onto another clock, on which the old clock's `then` reads `now`. */
void tb_rebase(tb_bucket *b, tb_ns then, tb_ns now);

/* 0 if every invariant of the bucket holds, else the number of the broken one. */
int tb_check(const tb_bucket *b);

#endif
