/* The hooks of a limiter that grants from a time-limited lease of a remote quota: an end of grants, a
 * largest amount apart from the bursts, and tokens credited without a grant. The caller re-times the
 * queued waiters after each (Limiter._settle), as after a pause. */
#ifndef AIOTB_BINDING_LEASE_H
#define AIOTB_BINDING_LEASE_H

#include "clock.h"
#include "params.h"
#include "waiters.h"

// _grant_until(when): no grant at or after the loop time when, in seconds (math.inf: no end; before any
// reading of the clock: ended). None, or NULL with TypeError or ValueError (NaN, too far ahead).
static PyObject *bucket_grant_until(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double when;
    tb_ns now, until = -TB_MAX_SPAN;
    if (real_number(self->state, "when", arg, &when) < 0 || configured_now(self, &now) < 0)
        return NULL;
    if (isnan(when) || (when >= (double)TB_MAX_SPAN / 1e9 && when != INFINITY))
        return PyErr_Format(PyExc_ValueError, "when must be a loop time within the engine's range or math.inf, "
                            "got %R", arg);
    if (when == INFINITY)
        until = TB_NEVER;
    else if (when > -(double)TB_MAX_SPAN / 1e9 && seconds_to_ns(when, &until) < 0)
        return NULL;
    tb_grant_until(&self->core, until);
    Py_RETURN_NONE;
}

// _set_largest(amount): requests may ask for up to max(amount, the smallest burst); 0: the bursts alone.
// None, or NULL with TypeError or ValueError (not 0 nor finite and > 0).
static PyObject *bucket_set_largest(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    if (real_number(self->state, "amount", arg, &amount) < 0)
        return NULL;
    if (!self->configured)
        return not_configured(self), NULL;
    if (tb_set_largest(&self->core, amount) != TB_OK)
        return PyErr_Format(PyExc_ValueError, "amount must be 0 or finite and > 0, got %R", arg);
    Py_RETURN_NONE;
}

// _credit(tokens): tokens given to every rate (> 0, never fuller than full) or taken as a debt (< 0), without
// a grant. None, or NULL with TypeError or ValueError, changing nothing (not finite, a window, a debt
// beyond the engine's range).
static PyObject *bucket_credit(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double tokens;
    tb_ns now;
    if (real_number(self->state, "tokens", arg, &tokens) < 0 || configured_now(self, &now) < 0)
        return NULL;
    if (!isfinite(tokens))
        return PyErr_Format(PyExc_ValueError, "tokens must be finite, got %R", arg);
    if (self->core.limits.window.period)
        return PyErr_Format(PyExc_ValueError, "tokens cannot be credited to a window, got %R", arg);
    if (tb_credit(&self->core, tokens, now) != TB_OK)
        return PyErr_Format(PyExc_ValueError, "tokens is beyond the engine's range: %R would leave a rate empty "
                            "for more than %lld s", arg, (long long)(TB_MAX_SPAN / 1000000000));
    Py_RETURN_NONE;
}

#endif
