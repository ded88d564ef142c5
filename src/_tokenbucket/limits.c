/* Token arithmetic of aiotb's core: the rates (each rate.c's), the pause and the limit, with the window of
 * window.c; see limits.h. */
#include "limits.h"
#include "window.h"

#include <assert.h>
#include <math.h>

#define HORIZON TB_MAX_SPAN  /* ns: projections this far read TB_NEVER, so F stays below 2^63 ticks */
#define REPLAY_UP_TO 64 /* amounts ahead a one-rate projection replays exactly, rather than bound */

#ifndef NDEBUG
#define debug_check(l) assert(tb_limits_check(l) == 0)
#else
#define debug_check(l) ((void)0)
#endif

/* ---- every limit at once ---- */

// Whether amount can be granted at t by every limit.
static bool all_fit(const tb_limits *l, double amount, tb_ns t)
{
    if (t >= l->grants_until || t < l->paused_until || (t < l->limited_until && amount > l->limited_left))
        return false;
    for (uint32_t i = 0; i < l->nrates; i++)
        if (!tb_rate_fits(&l->rates[i], l->state[i], tb_ticks(amount * l->rates[i].ns_per_token), t))
            return false;
    return tb_window_fits(&l->window, amount, t);
}

// First instant >= t at which every limit grants amount: each fits from some instant on, so the latest.
static tb_ns all_fit_at(const tb_limits *l, double amount, tb_ns t)
{
    if (amount > l->max_amount)
        return TB_NEVER;
    if (t < l->paused_until)
        t = l->paused_until;
    if (t < l->limited_until && amount > l->limited_left)
        t = l->limited_until;
    for (uint32_t i = 0; i < l->nrates; i++) {
        tb_ns ready = tb_rate_fit_at(&l->rates[i], l->state[i], tb_ticks(amount * l->rates[i].ns_per_token), t);
        if (ready > t)
            t = ready;
    }
    tb_ns open = tb_window_fit_at(&l->window, amount, t);
    if (open > t)
        t = open;
    return t < l->grants_until ? t : TB_NEVER;
}

// Grants amount: the rates as of rates_at (never after now), the window and a running limit at now.
static void take_all(tb_limits *l, double amount, tb_ns rates_at, tb_ns now)
{
    for (uint32_t i = 0; i < l->nrates; i++)
        l->state[i] = tb_gcra_take(l->state[i], tb_ticks(amount * l->rates[i].ns_per_token), rates_at);
    tb_window_record(&l->window, amount, now);
    if (now < l->limited_until)
        l->limited_left = amount < l->limited_left ? l->limited_left - amount : 0;
}

// The largest amount any single grant may take.
static double most_grantable(const tb_limits *l)
{
    double most = l->window.period ? l->window.limit : INFINITY;
    for (uint32_t i = 0; i < l->nrates; i++)
        if (l->rates[i].burst < most)
            most = l->rates[i].burst;
    return most;
}

// The largest amount a request may ask for: the bursts' most, or the largest set apart from them.
static double most_requested(const tb_limits *l)
{
    return l->largest > l->max_amount ? l->largest : l->max_amount;
}

// Sets max_amount and max_request from the limits as they are now.
static void set_most(tb_limits *l)
{
    l->max_amount = most_grantable(l);
    l->max_request = most_requested(l);
}

/* ---- set-up ---- */

tb_status tb_limits_init(tb_limits *l, double ns_per_token, double burst, double initial)
{
    if (!tb_rate_ok(ns_per_token, burst, initial))
        return TB_EINVAL;
    *l = (tb_limits){.paused_until = INT64_MIN, .limited_until = INT64_MIN, .grants_until = TB_NEVER};
    return tb_limits_add_rate(l, ns_per_token, burst, initial);
}

tb_status tb_limits_init_window(tb_limits *l, tb_ns period, double limit)
{
    if (period <= 0 || period > TB_MAX_SPAN || !tb_positive(limit))
        return TB_EINVAL;
    *l = (tb_limits){.paused_until = INT64_MIN, .limited_until = INT64_MIN, .grants_until = TB_NEVER};
    if (tb_window_init(&l->window, period, limit) != TB_OK)
        return TB_ENOMEM;
    set_most(l);
    debug_check(l);
    return TB_OK;
}

tb_status tb_limits_add_rate(tb_limits *l, double ns_per_token, double burst, double initial)
{
    if (l->nrates == TB_MAX_RATES || l->anchored || !tb_rate_ok(ns_per_token, burst, initial))
        return TB_EINVAL;
    l->rates[l->nrates++] = tb_rate_make(ns_per_token, burst, initial);
    set_most(l);
    l->plain = l->nrates == 1 && l->window.period == 0 && l->paused_until == INT64_MIN &&
               l->limited_until == INT64_MIN && l->grants_until == TB_NEVER;
    debug_check(l);
    return TB_OK;
}

void tb_limits_release(tb_limits *l)
{
    tb_window_release(&l->window);
}

/* ---- grants ---- */

void tb_limits_anchor(tb_limits *l, tb_ns now)
{
    if (l->anchored)
        return;
    l->anchored = true;
    for (uint32_t i = 0; i < l->nrates; i++)
        l->state[i] = tb_rate_holding(&l->rates[i], l->rates[i].initial, now);
}

double tb_limits_tokens(tb_limits *l, tb_ns now)
{
    tb_limits_anchor(l, now);
    if (now < l->paused_until || now >= l->grants_until)
        return 0;
    double tokens = l->window.period ? l->window.limit - tb_window_used(&l->window, now) : INFINITY;
    for (uint32_t i = 0; i < l->nrates; i++) {
        double held = tb_rate_tokens(&l->rates[i], l->state[i], now);
        if (held < tokens)
            tokens = held;
    }
    if (now < l->limited_until && l->limited_left < tokens)
        tokens = l->limited_left;
    return tokens > 0 ? tokens : 0;
}

double tb_limits_owed(tb_limits *l, tb_ns now, tb_ns t)
{
    tb_limits_anchor(l, now);
    double owed = 0;
    for (uint32_t i = 0; i < l->nrates; i++) {
        double balance = tb_rate_balance(&l->rates[i], l->state[i], t);
        if (-balance > owed)
            owed = -balance;
    }
    return owed;
}

bool tb_limits_fits(tb_limits *l, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    return all_fit(l, amount, now);
}

tb_ns tb_limits_fit_at(tb_limits *l, double amount, tb_ns t)
{
    tb_limits_anchor(l, t);
    return all_fit_at(l, amount, t);
}

// The late credit in nanoseconds: late_credit of a token of the fastest rate (none for a window).
static tb_ns late_credit_ns(const tb_limits *l)
{
    double fastest = INFINITY;
    for (uint32_t i = 0; i < l->nrates; i++)
        if (l->rates[i].ns_per_token < fastest)
            fastest = l->rates[i].ns_per_token;
    return l->nrates ? (tb_ns)(l->late_credit * fastest) : 0;
}

tb_ns tb_limits_credited_at(tb_limits *l, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    tb_ns ready = all_fit_at(l, amount, now - late_credit_ns(l));
    return ready < now ? ready : now;
}

void tb_limits_take(tb_limits *l, double amount, tb_ns rates_at, tb_ns now)
{
    tb_limits_anchor(l, now);
    take_all(l, amount, rates_at, now);
    debug_check(l);
}

bool tb_limits_take_now(tb_limits *l, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    if (l->plain) {  /* the uncontended path of a plain limiter, kept short */
        const tb_rate *r = &l->rates[0];
        int64_t need = amount == 1.0 ? r->token_ticks : tb_ticks(amount * r->ns_per_token);
        if (!tb_rate_fits(r, l->state[0], need, now))
            return false;
        l->state[0] = tb_gcra_take(l->state[0], need, now);
        debug_check(l);
        return true;
    }
    if (!all_fit(l, amount, now))
        return false;
    take_all(l, amount, now, now);
    debug_check(l);
    return true;
}

void tb_limits_refund(tb_limits *l, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    for (uint32_t i = 0; i < l->nrates; i++) {
        l->state[i] -= tb_ticks_down(amount * l->rates[i].ns_per_token);
        if (l->state[i] < tb_full_since(now))
            l->state[i] = tb_full_since(now);
    }
    tb_window_unrecord(&l->window, amount);
    debug_check(l);
}

// Whether debt more ticks may be taken from the rate at F f at now: the rate then full at most TB_MAX_SPAN after now.
static bool debt_in_range(tb_gcra f, int64_t debt_ticks, tb_ns now)
{
    int64_t owed = tb_gcra_debt(f, now);
    return debt_ticks <= tb_at_tick(TB_MAX_SPAN) - (owed > 0 ? owed : 0);
}

// Moves each rate's F by change ticks at now: more is taken as debt, fitting or not; less is given back,
// never fuller than full at now.
static void change_rates(tb_limits *l, const int64_t *change, tb_ns now)
{
    for (uint32_t i = 0; i < l->nrates; i++) {
        if (change[i] > 0) {
            l->state[i] = tb_gcra_take(l->state[i], change[i], now);
        } else {
            l->state[i] += change[i];
            if (l->state[i] < tb_full_since(now))
                l->state[i] = tb_full_since(now);
        }
    }
}

// The ticks a rate's F moves by when a grant of taken cost used: the need of used less the need of taken, each
// rounded up as a grant's was; for taken past TB_MAX_SPAN of need (above every burst), the difference's need
// (a debt) or its whole ticks (a refund, of which more than a span and a half fills any rate).
static int64_t settle_change(const tb_rate *r, double taken, double used)
{
    double was = taken * r->ns_per_token, is = used * r->ns_per_token;
    if (was <= (double)TB_MAX_SPAN)
        return tb_ticks(is) - tb_ticks(was);  /* at most INT64_MAX - 0, at least 0 - 2^62: no overflow */
    return is >= was ? tb_ticks(is - was) : -tb_ticks_down(fmin(was - is, 1.5 * (double)TB_MAX_SPAN));
}

tb_status tb_limits_settle(tb_limits *l, double taken, double used, bool held, tb_ns now)
{
    if (!(taken > 0 && taken <= l->max_request) || !(used >= 0 && isfinite(used)) || (held && l->window.holds == 0))
        return TB_EINVAL;
    tb_limits_anchor(l, now);
    int64_t change[TB_MAX_RATES];
    for (uint32_t i = 0; i < l->nrates; i++) {
        change[i] = settle_change(&l->rates[i], taken, used);
        if (change[i] > 0 && !debt_in_range(l->state[i], change[i], now))
            return TB_EINVAL;
    }
    change_rates(l, change, now);
    tb_window_settle(&l->window, taken, used, held, now);
    if (used > taken && now < l->limited_until)
        l->limited_left = used - taken < l->limited_left ? l->limited_left - (used - taken) : 0;
    debug_check(l);
    return TB_OK;
}

void tb_limits_reckon_late(tb_limits *l, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    for (uint32_t i = 0; i < l->nrates; i++) {
        tb_gcra taken_now = tb_rate_holding(&l->rates[i], l->rates[i].burst - amount, now);
        if (l->state[i] < taken_now)
            l->state[i] = taken_now;
    }
    debug_check(l);
}

void tb_limits_hold(tb_limits *l, double amount)
{
    tb_window_hold(&l->window, amount);
    debug_check(l);
}

void tb_limits_end_hold(tb_limits *l, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    tb_window_end_hold(&l->window, amount, now);
    debug_check(l);
}

/* ---- projection ---- */

// Grant instant of amount behind the amounts ahead, found by granting them in order on a copy of the limits.
static tb_ns simulated_grant(const tb_limits *l, const tb_ahead *ahead, double amount, tb_ns now)
{
    tb_limits copy = *l;  /* owns a copy of the window's log, with room for the grants ahead and this one */
    if (ahead->count >= UINT32_MAX || !tb_window_copy(&l->window, &copy.window, (uint32_t)ahead->count + 1))
        return TB_NEVER;  /* cannot tell: promise nothing */
    tb_ns t = now;
    double next;
    while (t < HORIZON && ahead->next(ahead->cursor, &next)) {
        t = all_fit_at(&copy, next, t);
        if (t < HORIZON)
            take_all(&copy, next, t, t);
    }
    if (t < HORIZON)
        t = all_fit_at(&copy, amount, t);
    if (t >= HORIZON)
        t = TB_NEVER;
    tb_window_release(&copy.window);
    return t;
}

// The projection's instant, as tb_limits_projection's but for the end of grants.
static tb_ns projected(tb_limits *l, const tb_ahead *ahead, double amount, tb_ns now)
{
    if (l->nrates != 1 || l->window.period || l->paused_until > now || l->limited_until > now ||
        l->max_request > l->max_amount || ahead->count < REPLAY_UP_TO)
        return simulated_grant(l, ahead, amount, now);  /* an amount above the burst never fits: not summed */
    /* One rate, a long queue: amount is granted once it and all before it fit in a bucket full
     * at F. Each grant ahead rounds its need up by less than a tick: count ticks more, never early. */
    const tb_rate *rate = &l->rates[0];
    double need = (ahead->total + amount) * rate->ns_per_token + (double)ahead->count / TB_TICKS_PER_NS;
    if (!(need < (double)HORIZON))
        return TB_NEVER;
    int64_t need_ticks = tb_ticks(need);
    if (need_ticks <= rate->burst_ticks) {
        tb_ns t = tb_rate_fit_at(rate, l->state[0], need_ticks, now);
        return t < HORIZON ? t : TB_NEVER;
    }
    tb_gcra full = tb_full_before(l->state[0], now) ? tb_at_tick(now) : l->state[0];
    if (!((double)full / TB_TICKS_PER_NS + need < (double)HORIZON))
        return TB_NEVER;  /* a long queue at a slow rate */
    tb_ns t = tb_ns_from(full + (need_ticks - rate->burst_ticks));  /* max(F, now) + need - burst */
    return t > now ? t : now;
}

tb_ns tb_limits_projection(tb_limits *l, const tb_ahead *ahead, double amount, tb_ns now)
{
    tb_limits_anchor(l, now);
    tb_ns t = projected(l, ahead, amount, now);  /* the grants ahead come first: in time if it is */
    return t < l->grants_until ? t : TB_NEVER;
}

bool tb_limits_full(const tb_limits *l, tb_ns now)
{
    if (l->grants_until != TB_NEVER)
        return false;
    if (!l->anchored)
        return true;
    if (l->paused_until > now || l->limited_until > now || l->window.holds > 0 ||
        (l->window.period && tb_window_used(&l->window, now) > 0))
        return false;
    for (uint32_t i = 0; i < l->nrates; i++)
        if (tb_gcra_debt(l->state[i], now) > 0)
            return false;
    return true;
}

/* ---- changes ---- */

void tb_limits_set_late_credit(tb_limits *l, double tokens)
{
    l->late_credit = tokens > 0 && tokens < 1 ? tokens : 0;
}

tb_status tb_limits_set_rate(tb_limits *l, uint32_t index, double ns_per_token, double burst, tb_ns now)
{
    if (index >= l->nrates || !tb_rate_ok(ns_per_token, burst, 0))
        return TB_EINVAL;
    tb_limits_anchor(l, now);
    tb_rate *r = &l->rates[index];
    double tokens = tb_rate_balance(r, l->state[index], now);  /* a settled debt is kept, in the new rate's time */
    *r = tb_rate_make(ns_per_token, burst, 0);
    l->state[index] = tb_rate_holding(r, tokens, now);
    set_most(l);
    debug_check(l);
    return TB_OK;
}

tb_status tb_limits_set_window(tb_limits *l, tb_ns period, double limit)
{
    if (l->window.period == 0 || period <= 0 || period > TB_MAX_SPAN || !tb_positive(limit))
        return TB_EINVAL;
    l->window.period = period;
    l->window.limit = limit;
    set_most(l);
    debug_check(l);
    return TB_OK;
}

void tb_limits_pause_until(tb_limits *l, tb_ns until)
{
    if (until > l->paused_until) {
        l->paused_until = until;
        l->plain = false;
    }
}

bool tb_limits_limit_until(tb_limits *l, double tokens, tb_ns until, tb_ns slack, tb_ns now)
{
    if (until <= now)
        return false;
    if (l->limited_until > now) {
        if (until < l->limited_until - slack)
            return false;
        if (until <= l->limited_until + slack) {
            bool fewer = tokens < l->limited_left;
            if (tokens < l->limited_left)
                l->limited_left = tokens;
            if (until > l->limited_until)
                l->limited_until = until;
            debug_check(l);
            return fewer;
        }
    }
    l->limited_left = tokens;
    l->limited_until = until;
    l->plain = false;
    debug_check(l);
    return true;
}

void tb_limits_grant_until(tb_limits *l, tb_ns until)
{
    l->grants_until = until;
    if (until != TB_NEVER)
        l->plain = false;
}

tb_status tb_limits_set_largest(tb_limits *l, double amount)
{
    if (amount != 0 && !tb_positive(amount))
        return TB_EINVAL;
    l->largest = amount;
    l->max_request = most_requested(l);
    debug_check(l);
    return TB_OK;
}

tb_status tb_limits_credit(tb_limits *l, double tokens, tb_ns now)
{
    if (!isfinite(tokens) || l->window.period)
        return TB_EINVAL;
    tb_limits_anchor(l, now);
    int64_t change[TB_MAX_RATES];
    for (uint32_t i = 0; i < l->nrates; i++) {
        /* a debt rounded up; a refund rounded down, and more than a span of it fills any rate */
        double ns = fabs(tokens) * l->rates[i].ns_per_token;
        change[i] = tokens < 0 ? tb_ticks(ns) : -tb_ticks_down(fmin(ns, 1.5 * (double)TB_MAX_SPAN));
        if (change[i] > 0 && !debt_in_range(l->state[i], change[i], now))
            return TB_EINVAL;
    }
    change_rates(l, change, now);
    debug_check(l);
    return TB_OK;
}

void tb_limits_rebase(tb_limits *l, tb_ns then, tb_ns now)
{
    if (!l->anchored)
        return;
    tb_ns shift = now - then;
    for (uint32_t i = 0; i < l->nrates; i++) {
        if (l->state[i] < tb_full_since(then))
            l->state[i] = tb_full_since(then);
        l->state[i] += tb_at_tick(shift);
    }
    tb_window_shift(&l->window, shift);
    if (l->paused_until != INT64_MIN)
        l->paused_until += shift;
    if (l->limited_until != INT64_MIN)
        l->limited_until += shift;
    if (l->grants_until != TB_NEVER)
        l->grants_until += shift;
    debug_check(l);
}

int tb_limits_check(const tb_limits *l)
{
    if (l->nrates > TB_MAX_RATES || (l->nrates == 0 && l->window.period == 0))
        return 1;
    for (uint32_t i = 0; i < l->nrates; i++) {
        const tb_rate *r = &l->rates[i];
        if (!tb_positive(r->ns_per_token) || !tb_positive(r->burst) || r->burst_ns != r->burst * r->ns_per_token ||
            r->burst_ticks != tb_ticks(r->burst_ns) || r->token_ticks != tb_ticks(r->ns_per_token))
            return 1;
    }
    if (l->max_amount != most_grantable(l) || !(l->largest >= 0) || l->max_request != most_requested(l) ||
        !(l->limited_left >= 0))
        return 1;
    return tb_window_ok(&l->window) ? 0 : 10;
}
