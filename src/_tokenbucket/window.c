/* The strict sliding window of aiotb's core; see window.h. */
#include "window.h"

#include <math.h>
#include <stdlib.h>

#define MIN_LOG 16u  /* grants a window's first log holds */

// The i-th oldest grant in the log.
static tb_grant *log_at(const tb_window *w, uint32_t i)
{
    return &w->log[(w->log_first + i) % w->log_capacity];
}

tb_status tb_window_init(tb_window *w, tb_ns period, double limit)
{
    *w = (tb_window){0};
    w->log = malloc(MIN_LOG * sizeof *w->log);
    if (w->log == NULL)
        return TB_ENOMEM;
    w->log_capacity = MIN_LOG;
    w->period = period;
    w->limit = limit;
    return TB_OK;
}

void tb_window_release(tb_window *w)
{
    free(w->log);
    w->log = NULL;
    w->log_capacity = w->log_first = w->log_count = 0;
}

bool tb_window_copy(const tb_window *w, tb_window *copy, uint32_t extra)
{
    *copy = *w;
    copy->log = NULL;
    copy->log_first = copy->log_capacity = copy->log_count = 0;
    if (w->period == 0)
        return true;
    if (extra > UINT32_MAX - w->log_count)
        return false;
    copy->log = malloc((size_t)(w->log_count + extra) * sizeof *copy->log);
    if (copy->log == NULL)
        return false;
    copy->log_capacity = w->log_count + extra;
    for (uint32_t i = 0; i < w->log_count; i++)
        copy->log[i] = *log_at(w, i);
    copy->log_count = w->log_count;
    return true;
}

double tb_window_used(const tb_window *w, tb_ns t)
{
    double used = w->held;
    for (uint32_t i = 0; i < w->log_count; i++) {
        const tb_grant *g = log_at(w, i);
        if (g->at > t - w->period)
            used += g->amount;
    }
    return used;
}

bool tb_window_fits(const tb_window *w, double amount, tb_ns t)
{
    return w->period == 0 || tb_window_used(w, t) + amount <= w->limit;
}

tb_ns tb_window_fit_at(const tb_window *w, double amount, tb_ns t)
{
    if (tb_window_fits(w, amount, t))
        return t;
    for (uint32_t i = 0; i < w->log_count; i++) {  /* grant i leaves the window at its at + period */
        tb_ns leaves = log_at(w, i)->at + w->period;
        if (leaves > t && tb_window_fits(w, amount, leaves))
            return leaves;
    }
    return amount <= w->limit ? t + w->period : TB_NEVER;  /* every logged grant is out by then */
}

// Drops the grants that no window ending at now or later can see.
static void forget(tb_window *w, tb_ns now)
{
    while (w->log_count > 0 && log_at(w, 0)->at <= now - w->period) {
        w->log_first = (w->log_first + 1) % w->log_capacity;
        w->log_count--;
    }
}

void tb_window_record(tb_window *w, double amount, tb_ns t)
{
    if (w->period == 0)
        return;
    forget(w, t);
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

// Removes the i-th oldest logged grant.
static void drop(tb_window *w, uint32_t i)
{
    for (uint32_t j = i; j + 1 < w->log_count; j++)
        *log_at(w, j) = *log_at(w, j + 1);
    w->log_count--;
}

void tb_window_unrecord(tb_window *w, double amount)
{
    for (uint32_t i = 0; i < w->log_count; i++) {
        if (log_at(w, i)->amount == amount) {
            drop(w, i);
            return;
        }
    }
}

void tb_window_hold(tb_window *w, double amount)
{
    if (w->period == 0)
        return;
    w->held += amount;
    w->holds++;
    while (amount > 0 && w->log_count > 0) {
        tb_grant *newest = log_at(w, w->log_count - 1);
        if (newest->amount > amount) {
            newest->amount -= amount;
            return;
        }
        amount -= newest->amount;
        w->log_count--;
    }
}

void tb_window_end_hold(tb_window *w, double amount, tb_ns now)
{
    if (w->holds == 0)
        return;
    w->holds--;
    w->held = w->holds == 0 || amount > w->held ? 0 : w->held - amount;
    if (amount > 0)  /* a hold settled at no cost logs nothing */
        tb_window_record(w, amount, now);
}

void tb_window_settle(tb_window *w, double taken, double used, bool held, tb_ns now)
{
    if (w->period == 0)
        return;
    if (held) {
        w->held = used - taken < -w->held ? 0 : w->held + (used - taken);
        return;
    }
    if (used > taken) {
        tb_window_record(w, used - taken, now);
        return;
    }
    for (uint32_t i = 0; i < w->log_count; i++) {
        if (log_at(w, i)->amount != taken)
            continue;
        if (used > 0)
            log_at(w, i)->amount = used;
        else
            drop(w, i);
        return;
    }
}

void tb_window_shift(tb_window *w, tb_ns shift)
{
    for (uint32_t i = 0; i < w->log_count; i++)
        log_at(w, i)->at += shift;
}

bool tb_window_ok(const tb_window *w)
{
    if (w->period && (w->log_count > w->log_capacity || w->log_first >= w->log_capacity))
        return false;
    if (!(w->held >= 0) || (w->holds == 0 && w->held != 0))
        return false;
    for (uint32_t i = 1; i < w->log_count; i++)
        if (log_at(w, i)->at < log_at(w, i - 1)->at || !(log_at(w, i)->amount > 0 && isfinite(log_at(w, i)->amount)))
            return false;
    return true;
}
