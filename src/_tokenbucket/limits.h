/* The limits of aiotb's core: pure token arithmetic, with no queue and no clock.
 *
 * A grant must satisfy every limit at once: up to TB_MAX_RATES rates (GCRA: each keeps the instant
 * F at which it is full again), an optional strict sliding window, a pause and an end of grants.
 * Every operation takes the caller's time, in nanoseconds on whatever monotonic clock the caller
 * uses; the first reading anchors the rates (each holds its initial tokens then). Token amounts are
 * doubles. One rate's arithmetic is rate.h's. */
#ifndef AIOTB_LIMITS_H
#define AIOTB_LIMITS_H

#include "rate.h"

#include <stddef.h>

#define TB_MAX_RATES 4

typedef enum {
    TB_OK = 0,
    TB_EINVAL,          /* a parameter is out of range */
    TB_ENOMEM,          /* memory could not grow */
    TB_ETOOLATE,        /* the grant could not come by the deadline */
} tb_status;

typedef struct {
    tb_ns at;             /* when it was granted */
    double amount;
} tb_grant;

/* A strict sliding window: at most limit tokens granted in any [t, t + period). A grant may be held
 * while in use: it is inside every window until its hold ends, then logged as of that instant, so it
 * counts from its grant until period after its hold ends, wherever between the two it is used. */
typedef struct {
    tb_ns period;         /* 0: no window */
    double limit;
    tb_grant *log;        /* ring of the grants that may still be inside a window, oldest first */
    uint32_t log_capacity, log_first, log_count;
    double held;          /* tokens of the grants held, inside every window until their holds end */
    uint64_t holds;       /* how many grants are held: held is 0 exactly when none is */
} tb_window;

typedef struct {
    tb_rate rates[TB_MAX_RATES];  /* every one must allow a grant: several rates are checked atomically */
    uint32_t nrates;
    tb_gcra state[TB_MAX_RATES];  /* F of each rate, set at the first reading of the clock */
    tb_window window;
    tb_ns paused_until;   /* no grant before this instant */
    tb_ns limited_until;  /* before this instant, grants take at most limited_left tokens in all */
    double limited_left;  /* what they may still take (>= 0) */
    tb_ns grants_until;   /* no grant at or after this instant (TB_NEVER: none ends them) */
    double max_amount;    /* the most any single grant may take: the smallest burst or window limit */
    double largest;       /* the most a request may ask for apart from the bursts (0: the bursts alone) */
    double max_request;   /* the most a request may ask for: max(largest, max_amount); one above max_amount
                           * waits until a rate's burst grows to it */
    bool anchored;        /* the first reading of the clock has set every F */
    bool plain;           /* one rate, no window, never paused, limited or ended: tb_limits_take_now's short
                           * path */
    double late_credit;   /* how late a waiter's grant may be taken as of its ready instant, in time of
                           * one token of the fastest rate */
} tb_limits;

// Writes the next amount into *amount; false once there is none left.
typedef bool (*tb_next_amount)(void *cursor, double *amount);

/* The amounts queued ahead of a projected grant, in the order they will be granted. */
typedef struct {
    double total;         /* their sum */
    size_t count;         /* how many there are */
    tb_next_amount next;  /* yields them one by one from cursor */
    void *cursor;
} tb_ahead;

/* ---- limits ---- */

/* Sets up limits of one rate; TB_OK, or TB_EINVAL if a parameter is out of range. */
tb_status tb_limits_init(tb_limits *l, double ns_per_token, double burst, double initial);
/* Sets up limits of a strict sliding window only; TB_OK, TB_EINVAL or TB_ENOMEM. */
tb_status tb_limits_init_window(tb_limits *l, tb_ns period, double limit);
/* Adds a rate that every grant must also satisfy (before the first reading); TB_OK or TB_EINVAL. */
tb_status tb_limits_add_rate(tb_limits *l, double ns_per_token, double burst, double initial);
/* Frees the window's log. */
void tb_limits_release(tb_limits *l);

/* Takes now as the first reading of the clock, when there was none: each rate holds its initial tokens. */
void tb_limits_anchor(tb_limits *l, tb_ns now);
/* Tokens available at now (never negative, at most the smallest burst or window limit; 0 at or after the end
 * of grants). */
double tb_limits_tokens(tb_limits *l, tb_ns now);
/* The most tokens a rate would still owe at t >= now (a settled debt not yet refilled; 0 when none would). */
double tb_limits_owed(tb_limits *l, tb_ns now, tb_ns t);
/* Whether every limit grants amount at now (never at or after the end of grants). */
bool tb_limits_fits(tb_limits *l, double amount, tb_ns now);
/* The first instant >= t at which every limit grants amount, should every hold end at t
 * (the earliest they can be); TB_NEVER for amount > max_amount or when that instant is at or after the
 * end of grants (nothing times such a grant: it waits for a change). */
tb_ns tb_limits_fit_at(tb_limits *l, double amount, tb_ns t);
/* The instant a grant of amount that fits at now is taken as of: the first instant it fitted, but
 * not before late_credit (of a token of the fastest rate) before now. */
tb_ns tb_limits_credited_at(tb_limits *l, double amount, tb_ns now);
/* Grants amount, which must fit: the rates as of rates_at (<= now), the window at now. */
void tb_limits_take(tb_limits *l, double amount, tb_ns rates_at, tb_ns now);
/* Grants amount at now if every limit allows it; returns whether it did. */
bool tb_limits_take_now(tb_limits *l, double amount, tb_ns now);
/* Gives back amount tokens granted earlier and never used. */
void tb_limits_refund(tb_limits *l, double amount, tb_ns now);
/* Settles a grant of taken tokens (0 < taken <= max_request) whose real cost, known only now, is used (>= 0):
 * each rate's F moves by the need of used less the need of taken (both rounded up to a tick, as the grant's
 * was; for a taken whose need passes TB_MAX_SPAN, the need of the difference, or at most a span and a half of
 * refund, which fills any rate), so that it is where a grant of used at the grant's instant would have left it.
 * Less used: given back as a refund is, never fuller than full at now. That is exact unless a later grant found the
 * rate full, or would have had the grant taken used: F keeps no history, so the difference comes back all the same
 * (as a cancelled waiter's refund does), up to the difference more than exact. Grants counted at what they cost
 * then stay within burst + rate * t of the first reading of the clock; an interval that starts after the grant may
 * see up to the difference more. More used: the difference is taken now, fitting or not, as debt that delays every
 * later grant. The window: a held grant's hold changes by used - taken; otherwise, less used shrinks the oldest
 * logged grant of taken (or nothing, if none is logged), more used logs the difference at now. A running
 * limit_until loses the difference (never below 0) and gains nothing back. Returns TB_OK, or TB_EINVAL, changing
 * nothing, for amounts out of range or a debt that would take a rate more than TB_MAX_SPAN past now. */
tb_status tb_limits_settle(tb_limits *l, double taken, double used, bool held, tb_ns now);
/* Grants of amount, taken earlier, are used only now: each rate keeps no more than it would hold had
 * they been taken now (amount's need short of full: in debt for more than its burst), spending the
 * refill they waited through that it could not have held beside them (the bound at the moment of use);
 * the window is left as it is. */
void tb_limits_reckon_late(tb_limits *l, double amount, tb_ns now);
/* Holds a grant of amount just taken while it is in use: the window's newest logged grants, up to
 * amount, count until its release instead (a window only; stricter, never looser, should another
 * grant be newer than it). */
void tb_limits_hold(tb_limits *l, double amount);
/* Ends the hold of a grant of amount at now: it leaves the window at now + period (nothing if no
 * grant is held). */
void tb_limits_end_hold(tb_limits *l, double amount, tb_ns now);
/* The instant amount is granted behind the amounts ahead, granted in order as soon as each fits,
 * if nothing else changes: exact, but with one rate and 64 or more amounts ahead a bound, never
 * early and at most a tick per amount ahead late; TB_NEVER if that is at 2^58 ns or later, at or after
 * the end of grants, above max_amount, or if memory for the replay is short. */
tb_ns tb_limits_projection(tb_limits *l, const tb_ahead *ahead, double amount, tb_ns now);
/* Whether the limits are as good as new at now: every rate full, no grant inside the window
 * ending at now, no pause or limit running after now (true before the first reading), and no end of
 * grants set: an end, ahead or passed, is state a new limiter lacks (false while one is set, even
 * before the first reading, as for a running pause). */
bool tb_limits_full(const tb_limits *l, tb_ns now);

/* Sets the late credit in time of one token of the fastest rate: values outside (0, 1) mean 0. */
void tb_limits_set_late_credit(tb_limits *l, double tokens);
/* Changes rate index to a new refill and capacity as of now, keeping the tokens it holds (at
 * most the new burst; a debt, owed at the new refill); TB_OK, or TB_EINVAL. */
tb_status tb_limits_set_rate(tb_limits *l, uint32_t index, double ns_per_token, double burst, tb_ns now);
/* Changes the window's period and limit, keeping its log of grants; TB_OK, or TB_EINVAL (also
 * for limits without a window). */
tb_status tb_limits_set_window(tb_limits *l, tb_ns period, double limit);
/* No grant before until (a later call can only move it later). */
void tb_limits_pause_until(tb_limits *l, tb_ns until);
/* Grants before until take at most tokens (>= 0) in all, on top of every other limit: what a server says
 * is left of its quota until its reset. A limit still running at now is replaced by one that ends more
 * than slack after it (the server's next window), tightened by one that ends within slack of it (the same
 * window: the fewer tokens, the later end), and kept by one that ends more than slack before it (news of
 * an earlier window, come late). One that ends at or before now changes nothing. Returns whether it set a
 * limit or gave fewer tokens (a later end alone: false; a waiter timed for the earlier end is timed again
 * when it comes). */
bool tb_limits_limit_until(tb_limits *l, double tokens, tb_ns until, tb_ns slack, tb_ns now);
/* No grant at or after until (TB_NEVER: no end, the default), earlier or later than before; once any end
 * is set, the limits are never plain again. */
void tb_limits_grant_until(tb_limits *l, tb_ns until);
/* Requests may ask for up to max(amount, the smallest burst or window limit): one above the bursts waits
 * until a rate's burst grows to it; amount 0 leaves the bursts alone. TB_OK, or TB_EINVAL (changing nothing)
 * unless amount is 0 or finite and > 0. */
tb_status tb_limits_set_largest(tb_limits *l, double amount);
/* Credits tokens to every rate without a grant: above 0 given back as a refund is (never fuller than full at
 * now); below 0 taken at now as a debt, fitting or not (as settle's "more used"). The window, a running
 * limit and the end of grants are untouched. TB_OK, or TB_EINVAL changing nothing for a NaN or infinite
 * amount, for limits with a window (which have no tokens to credit), or for a debt that would leave a rate
 * full again more than TB_MAX_SPAN after now. */
tb_status tb_limits_credit(tb_limits *l, double tokens, tb_ns now);
/* Moves the limits onto another clock, on which the old clock's then reads now. */
void tb_limits_rebase(tb_limits *l, tb_ns then, tb_ns now);

/* 0 if every invariant of the limits holds, else the number of the broken one (1 or 10). */
int tb_limits_check(const tb_limits *l);

#endif
