/* Grants from a shared segment: reservations, their cancels, the pause, and what a reader may ask; see shm.h. */
#include "shm_limit.h"

// The instant before which nothing is granted (one step).
static tb_ns paused_until(const tb_shm *seg)
{
    TB_SHM_STEP();
    return atomic_load(&seg->paused_until);
}

// Reads the first nrates rates at now into views, spending *tries: TB_SHM_OK or EFOREIGN.
static tb_shm_status view_all(tb_shm *seg, uint32_t nrates, tb_ns now, tb_shm_view *views, int *tries)
{
    for (uint32_t i = 0; i < nrates; i++)
        if (tb_shm_view_rate(seg, i, now, &views[i], tries) != TB_SHM_OK)
            return TB_SHM_EFOREIGN;
    return TB_SHM_OK;
}

// Whether every rate viewed can grant amount at all: at most each burst.
static bool within_bursts(const tb_shm_view *views, uint32_t nrates, double amount)
{
    for (uint32_t i = 0; i < nrates; i++)
        if (amount > views[i].rate.burst)
            return false;
    return true;
}

// The ticks of tokens a rate gives for amount: at least one, so that a grant always moves F and cancel's
// "still what it left" means no one built on it.
static int64_t need_of(const tb_rate *rate, double amount)
{
    int64_t need = tb_ticks(amount * rate->ns_per_token);
    return need > 0 ? need : 1;
}

// First instant >= t at which every rate viewed grants amount: each fits from some instant on, so the latest.
static tb_ns fit_all(const tb_shm_view *views, uint32_t nrates, double amount, tb_ns t)
{
    for (uint32_t i = 0; i < nrates; i++) {
        tb_ns ready = tb_rate_fit_at(&views[i].rate, views[i].f, need_of(&views[i].rate, amount), t);
        if (ready > t)
            t = ready;
    }
    return t;
}

// Puts back the state word each of the first n rates had before a grant, where it still holds the word the
// grant left; returns how many it put back.
static uint32_t give_back(tb_shm *seg, uint32_t n, const uint64_t *before, const uint64_t *after)
{
    uint32_t given = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t expected = after[i];
        given += shm_cas(&seg->rates[i].state, &expected, before[i]);
    }
    return given;
}

// Writes into *after the state word of the rate viewed once amount is taken at instant at: false if its F
// would then be more than the horizon ahead of now.
static bool taken_word(const tb_shm_view *view, double amount, tb_ns at, tb_ns now, uint64_t *after)
{
    tb_gcra f = tb_gcra_take(view->f, need_of(&view->rate, amount), at);
    *after = state_word(f, view->generation);
    return f - tb_at_tick(now) <= DEBT_LIMIT;
}

// Reads rate i again into *view after its word changed under a grant of amount at instant at: true if the
// grant still fits it at that instant, with the word to leave in *after (spending *tries).
static bool still_fits(tb_shm *seg, uint32_t i, double amount, tb_ns at, tb_ns now, tb_shm_view *view,
                       uint64_t *after, int *tries)
{
    return tb_shm_view_rate(seg, i, now, view, tries) == TB_SHM_OK && amount <= view->rate.burst &&
           tb_rate_fit_at(&view->rate, view->f, need_of(&view->rate, amount), at) <= at &&
           taken_word(view, amount, at, now, after);
}

// Takes amount from the limit of word (the limit word as read last) for a grant at at, where a limit runs then:
// true with the word before and after in *before and *after (the same where none runs at at), or false, taking
// nothing, if the limit no longer lets it through at at or is fought over (spending *tries).
static bool limit_take(tb_shm *seg, uint64_t word, double amount, tb_ns at, uint64_t *before, uint64_t *after,
                       int *tries)
{
    for (;;) {
        *before = *after = word;
        if (at >= limit_until_of(word))
            return true;
        double left = limit_left_of(word);
        if (amount > left)
            return false;
        *after = limit_word(limit_until_of(word), left - amount);
        if (shm_cas(&seg->limit, &word, *after))
            return true;
        if (!shm_retry(tries))
            return false;
    }
}

tb_shm_status tb_shm_reserve(tb_shm *seg, double amount, tb_ns now, tb_ns deadline, tb_shm_reservation *r)
{
    uint32_t nrates = shm_nrates(seg);
    if (nrates == 0)
        return TB_SHM_EFOREIGN;
    if (!shm_clock_ok(now) || !tb_positive(amount))
        return TB_SHM_EINVAL;
    tb_shm_view views[TB_MAX_RATES];
    uint64_t before[TB_MAX_RATES], after[TB_MAX_RATES];
    int tries = TB_SHM_TRIES;
    while (shm_retry(&tries)) {
        if (view_all(seg, nrates, now, views, &tries) != TB_SHM_OK)
            return TB_SHM_EFOREIGN;
        if (!within_bursts(views, nrates, amount))
            return TB_SHM_EINVAL;
        tb_ns pause = paused_until(seg);
        if (pause > deadline || pause > now + TB_SHM_HORIZON)
            return TB_SHM_ETOOLATE;
        uint64_t limit = limit_load(seg), limit_before = limit, limit_after = limit;
        tb_ns from = pause > now ? pause : now;
        bool limited = from < limit_until_of(limit);  /* else no limit runs at any instant it could be granted at */
        tb_ns at = fit_all(views, nrates, amount, limited_from(limit, amount, from));
        bool reachable = at <= deadline && at <= now + TB_SHM_HORIZON;
        for (uint32_t i = 0; i < nrates && reachable; i++)
            reachable = taken_word(&views[i], amount, at, now, &after[i]);
        if (!reachable)
            return TB_SHM_ETOOLATE;
        if (limited && !limit_take(seg, limit, amount, at, &limit_before, &limit_after, &tries))
            continue;  /* the limit changed under it: nothing taken, start again */
        uint32_t taken = 0;
        while (taken < nrates) {
            before[taken] = views[taken].word;
            uint64_t expected = before[taken];
            if (shm_cas(&seg->rates[taken].state, &expected, after[taken]))
                taken++;
            else if (taken == 0 || !still_fits(seg, taken, amount, at, now, &views[taken], &after[taken], &tries))
                break;  /* the rates already taken were taken as of at: give them back, start again */
        }
        if (taken == nrates) {
            r->at = at;
            r->nrates = nrates;
            for (uint32_t i = 0; i < nrates; i++) {
                r->before[i] = before[i];
                r->after[i] = after[i];
            }
            return TB_SHM_OK;
        }
        give_back(seg, taken, before, after);
        if (limit_after != limit_before)
            shm_cas(&seg->limit, &limit_after, limit_before);  /* where no one took from it since */
    }
    return TB_SHM_EFOREIGN;  /* fought over past TB_SHM_TRIES */
}

tb_shm_status tb_shm_take_now(tb_shm *seg, double amount, tb_ns now)
{
    tb_shm_reservation r;
    return tb_shm_reserve(seg, amount, now, now, &r);
}

uint32_t tb_shm_cancel(tb_shm *seg, const tb_shm_reservation *r, tb_ns now)
{
    if (now >= r->at || r->nrates > shm_nrates(seg))
        return 0;
    return give_back(seg, r->nrates, r->before, r->after);
}

// Writes into *f the F of the rate viewed once a grant of taken that cost used is settled at now: the difference
// given back (never fuller than full) or taken at now. A grant took need_of(taken); a cost of 0 takes nothing.
// False, writing nothing, if the debt would then reach past the horizon.
static bool settled_f(const tb_shm_view *view, double taken, double used, tb_ns now, tb_gcra *f)
{
    int64_t change = (used > 0 ? need_of(&view->rate, used) : 0) - need_of(&view->rate, taken);  /* saturated */
    if (change <= 0) {  /* need_of(taken) is at most the burst's ticks: no overflow */
        *f = view->f + change < tb_full_since(now) ? tb_full_since(now) : view->f + change;
        return true;
    }
    int64_t owed = view->f - tb_at_tick(now);  /* F is read within the horizon of now */
    if (change > DEBT_LIMIT - (owed > 0 ? owed : 0))
        return false;
    *f = tb_gcra_take(view->f, change, now);
    return true;
}

tb_shm_status tb_shm_settle(tb_shm *seg, double taken, double used, tb_ns now)
{
    uint32_t nrates = shm_nrates(seg);
    if (nrates == 0)
        return TB_SHM_EFOREIGN;
    if (!shm_clock_ok(now) || !(taken > 0) || !isfinite(taken) || !(used >= 0) || !isfinite(used))
        return TB_SHM_EINVAL;
    tb_shm_view views[TB_MAX_RATES];
    tb_gcra f;
    int tries = TB_SHM_TRIES;
    if (view_all(seg, nrates, now, views, &tries) != TB_SHM_OK)
        return TB_SHM_EFOREIGN;
    if (!within_bursts(views, nrates, taken))
        return TB_SHM_EINVAL;
    for (uint32_t i = 0; i < nrates; i++)  /* a debt past the horizon: refused before any rate changes */
        if (!settled_f(&views[i], taken, used, now, &f))
            return TB_SHM_EINVAL;
    for (uint32_t i = 0; i < nrates;) {
        uint64_t expected = views[i].word;
        if (settled_f(&views[i], taken, used, now, &f) &&
            shm_cas(&seg->rates[i].state, &expected, state_word(f, views[i].generation)))
            i++;
        else if (!shm_retry(&tries) || tb_shm_view_rate(seg, i, now, &views[i], &tries) != TB_SHM_OK ||
                 !(taken <= views[i].rate.burst))
            return TB_SHM_EFOREIGN;  /* fought over, or changed under it past what it can settle */
    }
    uint64_t limit = used > taken ? limit_load(seg) : 0;
    while (now < limit_until_of(limit)) {  /* a running limit loses the debt too (never below 0) */
        uint64_t less = limit_word(limit_until_of(limit), fmax(0, limit_left_of(limit) - (used - taken)));
        if (less == limit || shm_cas(&seg->limit, &limit, less))
            break;
        if (!shm_retry(&tries))
            return TB_SHM_EFOREIGN;
    }
    return TB_SHM_OK;
}

tb_shm_status tb_shm_tokens(tb_shm *seg, tb_ns now, double *tokens)
{
    uint32_t nrates = shm_nrates(seg);
    if (nrates == 0)
        return TB_SHM_EFOREIGN;
    if (!shm_clock_ok(now))
        return TB_SHM_EINVAL;
    tb_shm_view views[TB_MAX_RATES];
    int tries = TB_SHM_TRIES;
    if (view_all(seg, nrates, now, views, &tries) != TB_SHM_OK)
        return TB_SHM_EFOREIGN;
    uint64_t limit = limit_load(seg);
    double fewest = now < limit_until_of(limit) ? limit_left_of(limit) : INFINITY;
    for (uint32_t i = 0; i < nrates; i++)
        fewest = fmin(fewest, tb_rate_tokens(&views[i].rate, views[i].f, now));
    *tokens = now < paused_until(seg) ? 0 : fewest;
    return TB_SHM_OK;
}

tb_shm_status tb_shm_fit_at(tb_shm *seg, double amount, tb_ns now, tb_ns *at)
{
    uint32_t nrates = shm_nrates(seg);
    if (nrates == 0)
        return TB_SHM_EFOREIGN;
    if (!shm_clock_ok(now) || !tb_positive(amount))
        return TB_SHM_EINVAL;
    tb_shm_view views[TB_MAX_RATES];
    int tries = TB_SHM_TRIES;
    if (view_all(seg, nrates, now, views, &tries) != TB_SHM_OK)
        return TB_SHM_EFOREIGN;
    tb_ns pause = paused_until(seg);
    if (!within_bursts(views, nrates, amount))
        *at = TB_NEVER;
    else if (pause > now + TB_SHM_HORIZON)  /* every rate is full by then */
        *at = pause;
    else
        *at = fit_all(views, nrates, amount, limited_from(limit_load(seg), amount, pause > now ? pause : now));
    return TB_SHM_OK;
}

tb_shm_status tb_shm_pause_until(tb_shm *seg, tb_ns until)
{
    tb_ns seen = paused_until(seg);
    for (int tries = TB_SHM_TRIES; until > seen; ) {
        if (!shm_retry(&tries))
            return TB_SHM_EFOREIGN;
        TB_SHM_STEP();
        if (atomic_compare_exchange_strong(&seg->paused_until, &seen, until))
            break;
    }
    return TB_SHM_OK;
}

tb_shm_status tb_shm_limit_until(tb_shm *seg, double tokens, tb_ns until, tb_ns slack, tb_ns now)
{
    if (shm_nrates(seg) == 0)
        return TB_SHM_EFOREIGN;
    if (!shm_clock_ok(now) || !(tokens >= 0) || !isfinite(tokens) || slack < 0 || slack > TB_SHM_HORIZON)
        return TB_SHM_EINVAL;
    if (until <= now)
        return TB_SHM_OK;
    if (until > now + TB_SHM_HORIZON || until > LIMIT_LATEST)  /* now + the horizon is in range: |now| < 2^58 */
        return TB_SHM_EINVAL;
    uint64_t word = limit_load(seg);
    for (int tries = TB_SHM_TRIES;;) {
        tb_ns running = limit_until_of(word);
        uint64_t next = limit_word(until, tokens);  /* a later window's limit: it replaces the one running */
        if (running > now && until < running - slack)
            return TB_SHM_OK;  /* news of an earlier window, come late: kept */
        if (running > now && until <= running + slack)  /* the same window: the fewer tokens, the later end */
            next = limit_word(until > running ? until : running, fmin(tokens, limit_left_of(word)));
        if (next == word || shm_cas(&seg->limit, &word, next))
            return TB_SHM_OK;
        if (!shm_retry(&tries))
            return TB_SHM_EFOREIGN;
    }
}
