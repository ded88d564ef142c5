/* The hot parameters: amount and timeout, checked on every call. The cold ones (rates, window,
 * fairness) are checked once, in Python (aiotb/_params.py), and reach _configure normalised. */
#ifndef AIOTB_BINDING_PARAMS_H
#define AIOTB_BINDING_PARAMS_H

#include "state.h"

// Converts a real number (not bool) to double; 0, or -1 with TypeError naming the parameter.
static int real_number(tb_state *st, const char *name, PyObject *value, double *out)
{
    if (PyBool_Check(value))
        goto wrong_type;
    if (!PyFloat_Check(value) && !PyLong_Check(value)) {
        int real = PyObject_IsInstance(value, st->real_type);
        if (real < 0)
            return -1;
        if (!real)
            goto wrong_type;
    }
    *out = PyFloat_AsDouble(value);
    if (*out == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        PyObject *zero = PyLong_FromLong(0);
        if (zero == NULL)
            return -1;
        int positive = PyObject_RichCompareBool(value, zero, Py_GT);
        Py_DECREF(zero);
        if (positive < 0)
            return -1;
        *out = positive ? INFINITY : -INFINITY;
    }
    return 0;
wrong_type:
    PyErr_Format(PyExc_TypeError, "%s must be a real number, got %R", name, value);
    return -1;
}

// Raises the limiter's own error for an amount above the largest grant: self._over_capacity(value),
// which AsyncLimiter words as aiolimiter does. Always -1.
COLD static int over_capacity(BucketObject *self, PyObject *value)
{
    PyObject *args[] = {(PyObject *)self, value};
    PyObject *error = PyObject_VectorcallMethod(self->state->str_over_capacity, args,
                                                2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (error == NULL)
        return -1;
    if (PyExceptionInstance_Check(error))
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
    else
        PyErr_Format(PyExc_TypeError, "_over_capacity() must return an exception, got %R", error);
    Py_DECREF(error);
    return -1;
}

// Raises RuntimeError: the bucket was never configured. Always -1.
COLD static int not_configured(BucketObject *self)
{
    PyErr_Format(PyExc_RuntimeError, "%s.__init__() was not called: the limiter has no rate yet",
                 Py_TYPE(self)->tp_name);
    return -1;
}

// A valid amount for this bucket: > 0 and <= its largest request (tb_limits' max_request). 0, or -1 with an
// exception.
static int parse_amount(BucketObject *self, PyObject *value, double *out)
{
    if (PyFloat_CheckExact(value))
        *out = PyFloat_AS_DOUBLE(value);
    else if (real_number(self->state, "amount", value, out) < 0)
        return -1;
    if (*out > self->core.limits.max_request)
        return self->configured ? over_capacity(self, value) : not_configured(self);
    if (!(*out > 0)) {
        PyErr_Format(PyExc_ValueError, "amount must be finite and > 0, got %R", value);
        return -1;
    }
    if (*out < ldexp(self->core.limits.max_amount, -50)) {
        PyErr_Format(PyExc_ValueError, "amount must be at least burst / 2**50 to be counted exactly, got %R", value);
        return -1;
    }
    return 0;
}

// The amount of a call that names none: 1, unless that is above the largest request. 0, or -1 with the
// limiter's own error.
COLD static int default_amount(BucketObject *self, double *out)
{
    *out = 1.0;
    if (*out <= self->core.limits.max_request)
        return 0;
    PyObject *one = PyLong_FromLong(1);
    if (one == NULL)
        return -1;
    (void)over_capacity(self, one);
    Py_DECREF(one);
    return -1;
}

// A timeout in seconds, or -1.0 for none. 0, or -1 with an exception.
static int parse_timeout(BucketObject *self, PyObject *value, double *out)
{
    *out = -1.0;
    if (value == Py_None)
        return 0;
    double x;
    if (real_number(self->state, "timeout", value, &x) < 0)
        return -1;
    if (!(x >= 0)) {
        PyErr_Format(PyExc_ValueError, "timeout must be None or >= 0, got %R", value);
        return -1;
    }
    if (x < (double)TB_MAX_SPAN / 1e9)
        *out = x;
    return 0;
}

// Unpacks (amount=1, timeout=None) from a vectorcall; 0, or -1 with TypeError.
static int amount_and_timeout(const char *method, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames, bool takes_timeout, PyObject **amount, PyObject **timeout)
{
    Py_ssize_t most = takes_timeout ? 2 : 1;
    if (nargs > most) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", method, most, nargs);
        return -1;
    }
    if (nargs > 0)
        *amount = args[0];
    if (nargs > 1)
        *timeout = args[1];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        PyObject **slot = NULL;
        if (PyUnicode_CompareWithASCIIString(key, "amount") == 0 && nargs < 1)
            slot = amount;
        else if (takes_timeout && PyUnicode_CompareWithASCIIString(key, "timeout") == 0 && nargs < 2)
            slot = timeout;
        if (slot == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated keyword argument %R", method, key);
            return -1;
        }
        *slot = args[nargs + i];
    }
    return 0;
}

#endif
