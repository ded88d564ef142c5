/* The HTTP adapters' fast path to following a server's headers: Bucket._obey reads a response's rate-limit
 * fields with the core's reader (quota.h) and limits the bucket as Limiter.follow does, in one call; where
 * that reader leaves them to aiotb._signals it changes nothing and says so (NotImplemented). */
#ifndef AIOTB_BINDING_FOLLOW_H
#define AIOTB_BINDING_FOLLOW_H

#include "waiters.h"
#include "../quota.h"

#define MOST_FIELDS 64  /* a response with more header fields is left to aiotb._signals */

// Points f at one entry of a response's headers: 1 for a (name, value) field, 0 for an entry the full reader
// skips as well (not exactly a tuple of two, a name neither bytes nor str), -1 for one it must read itself (a
// name of a subclass of bytes or str, whose strip and lower may be its own, or of text outside ASCII). A value
// that is not exactly bytes or ASCII text is none (NULL): the core leaves a field it reads with one to that
// reader. Calls no Python code, so the entry's objects stay as they are while f points into them.
static int field_of(PyObject *entry, tb_field *f)
{
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2)
        return 0;
    PyObject *name = PyTuple_GET_ITEM(entry, 0), *value = PyTuple_GET_ITEM(entry, 1);
    if (PyBytes_CheckExact(name)) {
        f->name = PyBytes_AS_STRING(name);
        f->name_len = (size_t)PyBytes_GET_SIZE(name);
        f->name_is_text = false;
    } else if (PyUnicode_CheckExact(name) && PyUnicode_IS_ASCII(name)) {
        f->name = (const char *)PyUnicode_DATA(name);
        f->name_len = (size_t)PyUnicode_GET_LENGTH(name);
        f->name_is_text = true;
    } else {
        return PyBytes_Check(name) || PyUnicode_Check(name) ? -1 : 0;
    }
    f->value = NULL;
    f->value_len = 0;
    if (PyBytes_CheckExact(value)) {
        f->value = PyBytes_AS_STRING(value);
        f->value_len = (size_t)PyBytes_GET_SIZE(value);
    } else if (PyUnicode_CheckExact(value) && PyUnicode_IS_ASCII(value)) {
        f->value = (const char *)PyUnicode_DATA(value);
        f->value_len = (size_t)PyUnicode_GET_LENGTH(value);
    }
    return 1;
}

// _obey(kind, slack, headers, in_flight) -> None, or NotImplemented: at most what headers (a list or tuple of
// (name, value) pairs) say is left of quota kind (an index of aiotb._signals.QUOTAS), less in_flight, granted
// before its reset, as Limiter.follow limits (limit_until, with slack in seconds, then _settle if that changed
// the limits); NotImplemented, changing nothing, for headers of another type or more than MOST_FIELDS, and for
// those the core's reader leaves to aiotb._signals. Numbers checked by the caller.
static PyObject *bucket_obey(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "_obey() takes 4 arguments (%zd given)", nargs);
    long kind = PyLong_AsLong(args[0]);
    double slack = PyFloat_AsDouble(args[1]), in_flight = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *headers = args[2];
    if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
        Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    if (n > MOST_FIELDS || kind < 0 || kind >= TB_QUOTA_KINDS)
        Py_RETURN_NOTIMPLEMENTED;
    PyObject **entries = PySequence_Fast_ITEMS(headers);
    tb_field fields[MOST_FIELDS];
    size_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int read = field_of(entries[i], &fields[count]);
        if (read < 0)
            Py_RETURN_NOTIMPLEMENTED;
        count += (size_t)read;
    }
    double remaining, reset;
    switch (tb_quota_read(fields, count, (int)kind, &remaining, &reset)) {
    case TB_QUOTA_NONE:
        Py_RETURN_NONE;
    case TB_QUOTA_UNSURE:
        Py_RETURN_NOTIMPLEMENTED;
    case TB_QUOTA_TOLD:
        break;
    }
    double tokens = remaining - in_flight;  /* what is left of it for the requests not in flight */
    tb_ns now, span, slack_ns;
    if (configured_now(self, &now) < 0 || seconds_to_ns(reset, &span) < 0 || seconds_to_ns(slack, &slack_ns) < 0)
        return NULL;
    if (tb_limit_until(&self->core, tokens > 0 ? tokens : 0.0, now + span, slack_ns, now)) {
        PyObject *settled = PyObject_CallMethodNoArgs(op, self->state->str_settle);
        if (settled == NULL)
            return NULL;
        Py_DECREF(settled);
    }
    Py_RETURN_NONE;
}

#endif
