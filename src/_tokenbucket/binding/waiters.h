/* The Bucket's queue as the dispatcher drives it (aiotb/_dispatch.py, aiotb/_owners.py): a waiter queued with
 * its owner, a grant pass that hands back who was granted and when the owner's first waiter is due, the
 * withdrawals, refunds, holds and reservations; one call per decision, each reading the clock once. */
#ifndef AIOTB_BINDING_WAITERS_H
#define AIOTB_BINDING_WAITERS_H

#include "state.h"
#include "clock.h"
#include "params.h"

// Reads the clock of a configured bucket; 0, or -1 with an exception.
static int configured_now(BucketObject *self, tb_ns *now)
{
    if (!self->configured)
        return not_configured(self);
    return bucket_now(self, now);
}

// _enqueue(amount, timeout, handle, owner) -> id: queues a waiter of owner (who times and wakes it, kept alive
// by the caller while it has waiters queued); TimeoutError if it cannot be granted in time.
static PyObject *bucket_enqueue(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "_enqueue() takes 4 arguments (%zd given)", nargs);
    double amount = PyFloat_AsDouble(args[0]);
    if (amount == -1.0 && PyErr_Occurred())
        return NULL;
    tb_ns now, deadline = TB_NEVER;
    if (configured_now(self, &now) < 0)
        return NULL;
    if (args[1] != Py_None) {
        double timeout = PyFloat_AsDouble(args[1]);
        tb_ns span;
        if ((timeout == -1.0 && PyErr_Occurred()) || seconds_to_ns(timeout, &span) < 0)
            return NULL;
        deadline = now + span;
    }
    tb_id id;
    switch (tb_enqueue(&self->core, amount, now, deadline, args[2], args[3], &id)) {
    case TB_OK:
        Py_INCREF(args[2]);  /* the queue's reference */
        return PyLong_FromUnsignedLongLong(id);
    case TB_ETOOLATE:
        return PyErr_Format(PyExc_TimeoutError, "%R tokens cannot be granted within %R s", args[0], args[1]);
    case TB_ENOMEM:
        return PyErr_NoMemory();
    default:
        return PyErr_Format(PyExc_ValueError, "a deadline needs first-come-first-served order");
    }
}

// _withdraw(id) -> bool: removes a waiter that was not granted; False if it is no longer queued.
static PyObject *bucket_withdraw(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (!self->configured)
        Py_RETURN_FALSE;
    PyObject *handle = tb_withdraw(&self->core, (tb_id)id);
    Py_XDECREF(handle);
    return PyBool_FromLong(handle != NULL);
}

// _withdraw_first_of(owner) -> handle or None: removes owner's first queued waiter without granting it.
static PyObject *bucket_withdraw_first_of(PyObject *op, PyObject *owner)
{
    BucketObject *self = (BucketObject *)op;
    PyObject *handle = self->configured ? tb_withdraw_first_of(&self->core, owner) : NULL;
    return handle ? handle : Py_NewRef(Py_None);  /* the queue's reference passes to the caller */
}

typedef struct {
    PyObject *granted;  /* the waiters granted, in order */
    PyObject *amounts;  /* their amounts */
    PyObject *skipped;  /* the waiters removed without a grant */
    PyTypeObject *future_type;
    PyObject *str_done;
} due_pass;

// tb_grant_due's question: a waiter whose asyncio future is done already (cancelled) leaves without
// tokens; the others are granted and listed with their amounts. Only futures are asked: their done()
// runs no Python code, so no other thread can enter the bucket during the pass (other handles, the
// blocked threads' waiters, leave the queue by themselves). The lists take over the queue's references
// only after the pass (see bucket_grant_due): a waiter left queued keeps its own.
static tb_verdict decide_waiter(void *ctx, void *handle, double amount)
{
    due_pass *pass = ctx;
    int gone = 0;
    if (PyObject_TypeCheck((PyObject *)handle, pass->future_type)) {
        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)handle, pass->str_done);
        gone = done ? PyObject_IsTrue(done) : -1;
        Py_XDECREF(done);
    }
    if (gone < 0)
        return TB_STOP;
    if (gone)
        return PyList_Append(pass->skipped, (PyObject *)handle) < 0 ? TB_STOP : TB_SKIP;
    PyObject *tokens = PyFloat_FromDouble(amount);
    int listed = tokens ? PyList_Append(pass->amounts, tokens) : -1;
    Py_XDECREF(tokens);
    if (listed < 0)
        return TB_STOP;
    if (PyList_Append(pass->granted, (PyObject *)handle) < 0) {
        Py_ssize_t n = PyList_GET_SIZE(pass->amounts);
        (void)PyList_SetSlice(pass->amounts, n - 1, n, NULL);  /* as it was: the waiter stays queued */
        return TB_STOP;
    }
    return TB_GRANT;
}

// Releases the queue's references to the waiters in list, which keeps its own.
static void release_waiters(PyObject *list)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
        Py_DECREF(PyList_GET_ITEM(list, i));
}

// _grant_due(at, owner) -> (granted, amounts, next_at): grants every waiter due now (or at the loop time
// at, if that is later: a timer the loop ran as due up to its clock resolution early), in order;
// amounts are theirs; next_at is the loop time owner's first waiter is due, or None if it has none.
static PyObject *bucket_grant_due(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "_grant_due() takes 2 arguments (%zd given)", nargs);
    tb_ns now;
    if (configured_now(self, &now) < 0)
        return NULL;
    if (args[0] != Py_None) {
        double seconds = PyFloat_AsDouble(args[0]);
        tb_ns due;
        if ((seconds == -1.0 && PyErr_Occurred()) || seconds_to_ns(seconds, &due) < 0)
            return NULL;
        if (due > now)
            now = due;
    }
    due_pass pass = {PyList_New(0), PyList_New(0), PyList_New(0), self->state->future_type, self->state->str_done};
    PyObject *result = NULL;
    if (pass.granted == NULL || pass.amounts == NULL || pass.skipped == NULL)
        goto done;
    tb_ns head = tb_grant_due(&self->core, now, decide_waiter, &pass);
    tb_ns next = head == TB_NEVER ? TB_NEVER : tb_first_due_of(&self->core, args[1], now);
    release_waiters(pass.granted);
    release_waiters(pass.skipped);
    if (PyErr_Occurred())  /* the pass stopped at the waiter it could not list, due at once: the waiters */
        PyErr_WriteUnraisable(op);  /* granted before it are returned, and the caller's timer retries it */
    if (next == TB_NEVER)
        result = PyTuple_Pack(3, pass.granted, pass.amounts, Py_None);
    else
        result = Py_BuildValue("(OOd)", pass.granted, pass.amounts, ns_to_seconds(next));
done:
    Py_XDECREF(pass.granted);
    Py_XDECREF(pass.amounts);
    Py_XDECREF(pass.skipped);
    return result;
}

// tb_grant_due's verdict for a question only: grant no one.
static tb_verdict grant_no_one(void *ctx, void *handle, double amount)
{
    (void)ctx, (void)handle, (void)amount;
    return TB_STOP;
}

// _next_due() -> float or None: the loop time the head waiter can be granted (now, if it can be now),
// None if no one waits. Changes nothing.
static PyObject *bucket_next_due(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (configured_now(self, &now) < 0)
        return NULL;
    tb_ns at = tb_grant_due(&self->core, now, grant_no_one, NULL);
    if (at == TB_NEVER)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(ns_to_seconds(at));
}

// Reads the amount the glue passes (a float it checked) and the clock of a configured bucket. 0, or -1.
static int glue_amount_now(BucketObject *self, PyObject *arg, double *amount, tb_ns *now)
{
    *amount = PyFloat_AsDouble(arg);
    if (*amount == -1.0 && PyErr_Occurred())
        return -1;
    return configured_now(self, now);
}

// _refund(amount): gives back tokens granted to a waiter that never used them.
static PyObject *bucket_refund(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    tb_ns now;
    if (glue_amount_now(self, arg, &amount, &now) < 0)
        return NULL;
    tb_refund(&self->core, amount, now);
    Py_RETURN_NONE;
}

// _reckon_late(amount): grants of amount, taken earlier, are used only now.
static PyObject *bucket_reckon_late(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    tb_ns now;
    if (glue_amount_now(self, arg, &amount, &now) < 0)
        return NULL;
    tb_reckon_late(&self->core, amount, now);
    Py_RETURN_NONE;
}

// _hold(amount): holds a grant of amount just taken until _end_hold (a window's; nothing for a bucket).
static PyObject *bucket_hold(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double amount = PyFloat_AsDouble(arg);
    if (amount == -1.0 && PyErr_Occurred())
        return NULL;
    if (!self->configured)
        return not_configured(self), NULL;
    tb_hold(&self->core, amount);
    Py_RETURN_NONE;
}

// _end_hold(amount): a held grant of amount is done with: it leaves the window a period from now.
static PyObject *bucket_end_hold(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    tb_ns now;
    if (glue_amount_now(self, arg, &amount, &now) < 0)
        return NULL;
    tb_end_hold(&self->core, amount, now);
    Py_RETURN_NONE;
}

// _reserve(amount, handle, owner) -> (id, ready_at): queues a waiter of owner promised its projected grant.
static PyObject *bucket_reserve(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_reserve() takes 3 arguments (%zd given)", nargs);
    double amount;
    tb_ns now;
    if (!self->configured)
        return not_configured(self), NULL;
    if (parse_amount(self, args[0], &amount) < 0 || bucket_now(self, &now) < 0)
        return NULL;
    tb_ns ready = tb_projected_grant(&self->core, amount, now);
    if (ready == TB_NEVER)
        return PyErr_NoMemory();
    tb_id id;
    tb_status status = tb_enqueue(&self->core, amount, now, ready, args[1], args[2], &id);
    if (status != TB_OK)
        return status == TB_ENOMEM ? PyErr_NoMemory()
                                   : PyErr_Format(PyExc_SystemError, "the core broke its own projection");
    Py_INCREF(args[1]);  /* the queue's reference */
    return Py_BuildValue("(Kd)", (unsigned long long)id, ns_to_seconds(ready));
}

// _withdraw_stranded() -> (handle, never) or None: a waiter that can no longer be granted as
// promised; never is True if it can never be granted at all.
static PyObject *bucket_withdraw_stranded(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    bool never;
    if (configured_now(self, &now) < 0)
        return NULL;
    PyObject *handle = tb_withdraw_stranded(&self->core, now, &never);
    if (handle == NULL)
        Py_RETURN_NONE;
    PyObject *result = Py_BuildValue("(OO)", handle, never ? Py_True : Py_False);
    Py_DECREF(handle);  /* the queue's reference */
    return result;
}

#endif
