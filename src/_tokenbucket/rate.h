/* One rate of aiotb's core: GCRA's "full again at" instant F, and the arithmetic of a grant on it.
 *
 * A rate's whole state is one 64-bit word, F in ticks of 1/16 ns on the caller's clock, so that a
 * store can keep it in shared memory and update it with one compare-and-swap. Each grant moves F
 * by its need, amount * ns_per_token rounded up to a tick: a grant is never early, and a rate is
 * never faster than asked, only slower, by at most (1/16 ns) / ns_per_token of itself for grants
 * of one token, less for larger ones (2.5e-4 at 250 ns per token, 4 million tokens a second;
 * 6.25 % at 1 ns per token). F is an integer, so refill never drifts. The range: clock readings
 * |t| < 2^58 ns and refill spans up to TB_MAX_SPAN = 2^58 ns (~9.1 years each) keep F below
 * 2^58 + 2^58 ns = 2^59 ns, and 16 is the most ticks per nanosecond for which that stays within
 * int64: 2^59 * 16 = 2^63. */
#ifndef AIOTB_RATE_H
#define AIOTB_RATE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

typedef int64_t tb_ns;                   /* an instant or a span, in nanoseconds */
#define TB_NEVER INT64_MAX               /* "no deadline" / "no one waits" */
#define TB_MAX_SPAN ((tb_ns)1 << 58)     /* longest refill of a full bucket, bound of |clock readings|: ~9.1 years */
#define TB_TICKS_PER_NS 16               /* the resolution of F */

/* One rate's parameters: refill of one token every ns_per_token, at most burst tokens. */
typedef struct {
    double ns_per_token;  /* time to refill one token */
    double burst;         /* capacity, in tokens */
    double burst_ns;      /* burst * ns_per_token: the most debt the rate may carry */
    double initial;       /* tokens at the first reading of the clock */
    int64_t burst_ticks;  /* burst_ns in ticks, rounded up like every need: a full rate grants its burst */
    int64_t token_ticks;  /* ns_per_token in ticks, rounded up: the need of one token */
} tb_rate;

typedef int64_t tb_gcra;  /* one rate's state: the instant F it is full again, in ticks */

/* ---- one rate's arithmetic, shared with the store in shared memory (shm.h) ---- */

/* Whether x is a finite number > 0. */
static inline bool tb_positive(double x) { return x > 0 && isfinite(x); }

/* A span of ns >= 0 in ticks, rounded up: what a grant of that span needs (INT64_MAX from 2^63 ticks). */
static inline int64_t tb_ticks(double ns)
{
    double exact = ns * TB_TICKS_PER_NS;
    if (!(exact < 0x1p63))
        return INT64_MAX;
    int64_t whole = (int64_t)exact;
    return whole + ((double)whole < exact);
}

/* A span of ns >= 0 in whole ticks, rounded down: what a refund gives back, never more than was paid (a grant
 * paid its need rounded up, and a rate that filled up since kept none of the excess). */
static inline int64_t tb_ticks_down(double ns)
{
    double exact = ns * TB_TICKS_PER_NS;
    return exact < 0x1p63 ? (int64_t)exact : INT64_MAX;
}

/* The instant now in ticks. */
static inline int64_t tb_at_tick(tb_ns now) { return now * TB_TICKS_PER_NS; }

/* The first whole nanosecond at or after tick t. */
static inline tb_ns tb_ns_from(int64_t t) { return t / TB_TICKS_PER_NS + (t % TB_TICKS_PER_NS > 0); }

/* The latest F a rate full at now may keep: a fuller one is just as full, and F stays in range. */
static inline tb_gcra tb_full_since(tb_ns now) { return tb_at_tick(now) - TB_TICKS_PER_NS; }

/* F - now in ticks: how long until the rate is full again (negative: full since then). */
static inline int64_t tb_gcra_debt(tb_gcra f, tb_ns now) { return f - tb_at_tick(now); }

/* Whether need ticks of tokens fit in the rate at now. */
static inline bool tb_rate_fits(const tb_rate *r, tb_gcra f, int64_t need, tb_ns now)
{
    int64_t owed = tb_gcra_debt(f, now);
    return (owed > 0 ? owed : 0) <= r->burst_ticks - need;
}

/* Whether the rate has been full for at least a whole nanosecond at now (F <= now - 1 ns). Refill younger than
 * that is kept: a waiter granted at the first whole nanosecond after its ready instant between two must not lose
 * the ticks in between, or every such grant would slow the rate down (and the projection, which assumes no loss,
 * would promise too early). */
static inline bool tb_full_before(tb_gcra f, tb_ns now) { return f <= tb_full_since(now); }

/* F after need ticks of tokens are taken at now: max(F, now) + need, except that a rate full for less
 * than a nanosecond keeps its F (refill younger than that is not lost to a grant at the next nanosecond). */
static inline tb_gcra tb_gcra_take(tb_gcra f, int64_t need, tb_ns now)
{
    return (tb_full_before(f, now) ? tb_at_tick(now) : f) + need;
}

/* Whether a rate's parameters are usable: refill and burst finite and > 0, initial in [0, burst], a
 * full refill within TB_MAX_SPAN. */
bool tb_rate_ok(double ns_per_token, double burst, double initial);
/* The rate of those parameters (which tb_rate_ok accepts), with its spans in ticks. */
tb_rate tb_rate_make(double ns_per_token, double burst, double initial);
/* First instant >= now at which need (<= burst_ticks) ticks of tokens fit: F - t <= burst - need. */
tb_ns tb_rate_fit_at(const tb_rate *r, tb_gcra f, int64_t need, tb_ns now);
/* Tokens the rate holds at now, below 0 when F is more than a burst ahead (tokens reserved ahead). */
double tb_rate_balance(const tb_rate *r, tb_gcra f, tb_ns now);
/* Tokens one rate holds at now: its balance, but never below 0. */
double tb_rate_tokens(const tb_rate *r, tb_gcra f, tb_ns now);
/* F for a rate that holds tokens (at most its burst; below 0, a debt: full again at most TB_MAX_SPAN after now). */
tb_gcra tb_rate_holding(const tb_rate *r, double tokens, tb_ns now);

#endif
