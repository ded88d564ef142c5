/* One rate of aiotb's core: the arithmetic of rate.h that is not inline there. */
#include "rate.h"

bool tb_rate_ok(double ns_per_token, double burst, double initial)
{
    return tb_positive(ns_per_token) && tb_positive(burst) && initial >= 0 && initial <= burst &&
           burst * ns_per_token <= (double)TB_MAX_SPAN;
}

tb_rate tb_rate_make(double ns_per_token, double burst, double initial)
{
    return (tb_rate){.ns_per_token = ns_per_token, .burst = burst, .burst_ns = burst * ns_per_token,
                     .initial = initial, .burst_ticks = tb_ticks(burst * ns_per_token),
                     .token_ticks = tb_ticks(ns_per_token)};
}

tb_ns tb_rate_fit_at(const tb_rate *r, tb_gcra f, int64_t need, tb_ns now)
{
    return tb_rate_fits(r, f, need, now) ? now : tb_ns_from(f - (r->burst_ticks - need));
}

double tb_rate_balance(const tb_rate *r, tb_gcra f, tb_ns now)
{
    int64_t owed = tb_gcra_debt(f, now);
    return owed <= 0 ? r->burst : r->burst - (double)owed / TB_TICKS_PER_NS / r->ns_per_token;
}

double tb_rate_tokens(const tb_rate *r, tb_gcra f, tb_ns now)
{
    double tokens = tb_rate_balance(r, f, now);
    return tokens > 0 ? tokens : 0;
}

tb_gcra tb_rate_holding(const tb_rate *r, double tokens, tb_ns now)
{
    double owed_ns = (r->burst - (tokens < r->burst ? tokens : r->burst)) * r->ns_per_token;
    return tb_at_tick(now) + tb_ticks(owed_ns < (double)TB_MAX_SPAN ? owed_ns : (double)TB_MAX_SPAN);
}
