/* The strict sliding window of aiotb's core (tb_window, limits.h): a log of grants, oldest first, and the
 * grants held while in use. limits.c checks it beside the rates; nothing else calls it. */
#ifndef AIOTB_WINDOW_H
#define AIOTB_WINDOW_H

#include "limits.h"

/* Sets up a window of at most limit tokens in any period, with an empty log; TB_OK or TB_ENOMEM (the
 * parameters are the caller's to check). */
tb_status tb_window_init(tb_window *w, tb_ns period, double limit);
/* Frees the log; the window is then empty, with no room. */
void tb_window_release(tb_window *w);
/* Makes copy a copy of w (every field but the log's place) whose log has room for extra more grants;
 * false, with copy's log NULL and empty, if memory is short. */
bool tb_window_copy(const tb_window *w, tb_window *copy, uint32_t extra);
/* Tokens of the grants inside the window that ends at t: the held ones, and those logged after t - period. */
double tb_window_used(const tb_window *w, tb_ns t);
/* Whether amount more fits in the window ending at t (always, for no window). */
bool tb_window_fits(const tb_window *w, double amount, tb_ns t);
/* First instant >= t at which amount more fits: when enough old grants have left the window, the held
 * ones leaving at t + period should their holds end at t; TB_NEVER for amount > limit. */
tb_ns tb_window_fit_at(const tb_window *w, double amount, tb_ns t);
/* Logs a grant of amount at t (or at the newest grant's instant, if later). Should the log fail to grow,
 * the grant is merged into the newest, which then counts for longer than its own: stricter, never looser. */
void tb_window_record(tb_window *w, double amount, tb_ns t);
/* Takes back a logged grant of amount: the oldest of that size, so the log errs on the strict side. */
void tb_window_unrecord(tb_window *w, double amount);
/* Holds a grant of amount just logged: its newest logged grants, up to amount, move to the held ones. */
void tb_window_hold(tb_window *w, double amount);
/* Ends a hold of amount at now, logging it then; nothing if no grant is held. */
void tb_window_end_hold(tb_window *w, double amount, tb_ns now);
/* Changes the record of a grant of taken that cost used (tb_limits_settle): a held one's hold moves by
 * used - taken; otherwise more is logged at now, less shrinks the oldest logged grant of taken. */
void tb_window_settle(tb_window *w, double taken, double used, bool held, tb_ns now);
/* Moves every logged grant by shift ns (a change of clock). */
void tb_window_shift(tb_window *w, tb_ns shift);
/* Whether every invariant of the window holds: its log in range and in time order, amounts > 0, held
 * tokens >= 0 and 0 exactly when none is held. */
bool tb_window_ok(const tb_window *w);

#endif
