/* The awaitables the binding returns: READY, done at once (an uncontended `async with`), and the
 * Acquisition that acquire() returns, which takes its tokens when first awaited and otherwise
 * hands over to the limiter's wait (Limiter._wait, in Python). */
#ifndef AIOTB_BINDING_AWAITABLES_H
#define AIOTB_BINDING_AWAITABLES_H

#include "clock.h"

// Hands a request that must wait to the limiter: returns self._wait(amount, timeout), an awaitable.
static PyObject *wait_for_grant(BucketObject *self, double amount, PyObject *timeout)
{
    PyObject *how_much = PyFloat_FromDouble(amount);
    if (how_much == NULL)
        return NULL;
    PyObject *args[] = {(PyObject *)self, how_much, timeout};
    PyObject *waiting = PyObject_VectorcallMethod(
        self->state->str_wait, args, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(how_much);
    return waiting;
}

// Hands `async with` on a window, which must wait, to the limiter: returns self._wait_to_hold(amount).
static PyObject *wait_to_hold(BucketObject *self, double amount)
{
    PyObject *how_much = PyFloat_FromDouble(amount);
    if (how_much == NULL)
        return NULL;
    PyObject *waiting = PyObject_CallMethodOneArg((PyObject *)self, self->state->str_wait_to_hold, how_much);
    Py_DECREF(how_much);
    return waiting;
}

/* ---- the done awaitable ---- */

// am_send: finishes at once with None.
static PySendResult ready_send(PyObject *self, PyObject *arg, PyObject **result)
{
    (void)self, (void)arg;
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

// tp_iternext: NULL with no exception set is StopIteration(None).
static PyObject *ready_next(PyObject *self)
{
    (void)self;
    return NULL;
}

// send(value): StopIteration, as a finished coroutine.
static PyObject *ready_send_method(PyObject *self, PyObject *value)
{
    (void)self, (void)value;
    PyErr_SetNone(PyExc_StopIteration);
    return NULL;
}

// throw(typ[, val[, tb]]): raises what it is given, as a coroutine that has not started.
static PyObject *ready_throw(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw expected 1 to 3 arguments");
        return NULL;
    }
    PyObject *typ = args[0];
    if (nargs >= 2 && args[1] != Py_None)
        PyErr_SetObject(typ, args[1]);
    else if (PyExceptionInstance_Check(typ))
        PyErr_SetObject((PyObject *)Py_TYPE(typ), typ);
    else if (PyExceptionClass_Check(typ))
        PyErr_SetNone(typ);
    else
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
    return NULL;
}

static PyObject *ready_close(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    (void)self;
    Py_RETURN_NONE;
}

static PyObject *ready_repr(PyObject *self)
{
    (void)self;
    return PyUnicode_FromString("<aiotb ready>");
}

static void ready_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyMethodDef ready_methods[] = {
    {"send", ready_send_method, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))ready_throw, METH_FASTCALL, NULL},
    {"close", ready_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot ready_slots[] = {
    {Py_am_await, PyObject_SelfIter},
    {Py_am_send, ready_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, ready_next},
    {Py_tp_methods, ready_methods},
    {Py_tp_repr, ready_repr},
    {Py_tp_dealloc, ready_dealloc},
    {0, NULL},
};

static PyType_Spec ready_spec = {
    .name = "aiotb._tokenbucket.Ready",
    .basicsize = sizeof(PyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = ready_slots,
};

/* ---- Acquisition: what acquire() returns; takes tokens only once awaited ---- */

typedef struct {
    PyObject_HEAD
    BucketObject *bucket;
    double amount;
    PyObject *timeout;  /* float seconds or None */
    PyObject *waiting;  /* the glue's wait coroutine, once the fast path failed */
    bool started;       /* awaited (or thrown into) at least once */
} AcquisitionObject;

// am_send: on the first send, grants at once or starts the glue's wait; then delegates to it.
static PySendResult acquisition_send(PyObject *op, PyObject *arg, PyObject **result)
{
    AcquisitionObject *self = (AcquisitionObject *)op;
    if (!self->started) {
        self->started = true;
        BucketObject *bucket = self->bucket;
        tb_ns now;
        if (bucket_now(bucket, &now) < 0) {
            *result = NULL;
            return PYGEN_ERROR;
        }
        int taken = bucket->resuming && bucket->core.fair ? 0 : newcomer_take(bucket, self->amount, now);
        if (taken != 0) {
            *result = taken > 0 ? Py_NewRef(Py_None) : NULL;
            return taken > 0 ? PYGEN_RETURN : PYGEN_ERROR;
        }
        self->waiting = wait_for_grant(bucket, self->amount, self->timeout);
        if (self->waiting == NULL) {
            *result = NULL;
            return PYGEN_ERROR;
        }
    }
    if (self->waiting == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse already awaited acquire()");
        *result = NULL;
        return PYGEN_ERROR;
    }
    return PyIter_Send(self->waiting, arg, result);
}

// tp_iternext: one step, as send(None).
static PyObject *acquisition_next(PyObject *op)
{
    PyObject *result;
    switch (acquisition_send(op, Py_None, &result)) {
    case PYGEN_NEXT:
        return result;
    case PYGEN_RETURN:
        if (result != Py_None) {
            PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, result);
            if (stop != NULL) {
                PyErr_SetObject(PyExc_StopIteration, stop);
                Py_DECREF(stop);
            }
        }
        Py_DECREF(result);
        return NULL;
    default:
        return NULL;
    }
}

// send(value): one step; StopIteration when done.
static PyObject *acquisition_send_method(PyObject *op, PyObject *value)
{
    PyObject *result;
    switch (acquisition_send(op, value, &result)) {
    case PYGEN_NEXT:
        return result;
    case PYGEN_RETURN:
        Py_DECREF(result);
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    default:
        return NULL;
    }
}

// throw(...): before the first step it raises what it is given, having taken nothing; later the wait handles it.
static PyObject *acquisition_throw(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    AcquisitionObject *self = (AcquisitionObject *)op;
    if (self->waiting == NULL) {
        self->started = true;
        return ready_throw(op, args, nargs);
    }
    PyObject *call[4] = {self->waiting};
    for (Py_ssize_t i = 0; i < nargs && i < 3; i++)
        call[i + 1] = args[i];
    return PyObject_VectorcallMethod(self->bucket->state->str_throw, call,
                                     (size_t)(nargs < 3 ? nargs : 3) + 1, NULL);
}

// close(): closes the wait, if one was started.
static PyObject *acquisition_close(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    AcquisitionObject *self = (AcquisitionObject *)op;
    self->started = true;
    if (self->waiting == NULL)
        Py_RETURN_NONE;
    return PyObject_CallMethodNoArgs(self->waiting, self->bucket->state->str_close);
}

// tp_finalize: warns, as a coroutine does, when the acquisition is dropped without ever being awaited
// (its tokens were never taken, and the caller most likely forgot `await`).
static void acquisition_finalize(PyObject *op)
{
    AcquisitionObject *self = (AcquisitionObject *)op;
    if (self->started || self->bucket == NULL)
        return;
    PyObject *raised = PyErr_GetRaisedException();
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "coroutine '%s.acquire' was never awaited",
                         Py_TYPE(self->bucket)->tp_name) < 0)
        PyErr_WriteUnraisable(op);
    PyErr_SetRaisedException(raised);
}

static int acquisition_traverse(PyObject *op, visitproc visit, void *arg)
{
    AcquisitionObject *self = (AcquisitionObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->bucket);
    Py_VISIT(self->timeout);
    Py_VISIT(self->waiting);
    return 0;
}

static int acquisition_clear(PyObject *op)
{
    AcquisitionObject *self = (AcquisitionObject *)op;
    Py_CLEAR(self->bucket);
    Py_CLEAR(self->timeout);
    Py_CLEAR(self->waiting);
    return 0;
}

static void acquisition_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    if (PyObject_CallFinalizerFromDealloc(op) < 0)
        return;  /* resurrected by the warning's handler */
    PyObject_GC_UnTrack(op);
    (void)acquisition_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef acquisition_methods[] = {
    {"send", acquisition_send_method, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))acquisition_throw, METH_FASTCALL, NULL},
    {"close", acquisition_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot acquisition_slots[] = {
    {Py_am_await, PyObject_SelfIter},
    {Py_am_send, acquisition_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, acquisition_next},
    {Py_tp_methods, acquisition_methods},
    {Py_tp_finalize, acquisition_finalize},
    {Py_tp_traverse, acquisition_traverse},
    {Py_tp_clear, acquisition_clear},
    {Py_tp_dealloc, acquisition_dealloc},
    {0, NULL},
};

static PyType_Spec acquisition_spec = {
    .name = "aiotb._tokenbucket.Acquisition",
    .basicsize = sizeof(AcquisitionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = acquisition_slots,
};

#endif
