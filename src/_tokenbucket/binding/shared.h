/* A bucket whose limits live in a shared segment (Limiter(..., store=SharedMemoryStore(name)), aiotb._shared):
 * its newcomers take from the segment as of CLOCK_MONOTONIC, on the same fast path as the core's own
 * limits. The queue of this process's waiters, and their reservations, are the Python layer's, which says
 * here whether anyone waits (_share_busy), so that a fair newcomer queues behind them. A loop with a clock of
 * its own is refused: the processes share CLOCK_MONOTONIC only. */
#ifndef AIOTB_BINDING_SHARED_H
#define AIOTB_BINDING_SHARED_H

#include "state.h"
#include "segment.h"

#ifdef AIOTB_HAS_SEGMENT
// Takes amount at now from the segment for a newcomer, counting the grant: 1 taken, 0 not (wait), -1 with
// RuntimeError (a loop's own clock), ValueError (closed) or the corrupt segment's error.
static int shared_take(BucketObject *self, double amount, tb_ns now)
{
    if (self->domain != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a limiter with a SharedMemoryStore runs on CLOCK_MONOTONIC, which every "
                        "process shares: it cannot run on a loop with a virtual or patched clock");
        return -1;
    }
    if (self->core.fair && self->shared_busy)
        return 0;
    tb_shm *seg = ((SegmentObject *)self->segment)->mapping.seg;
    if (seg == NULL) {
        PyErr_SetString(PyExc_ValueError, "the limiter's shared segment is closed");
        return -1;
    }
    switch (tb_shm_take_now(seg, amount, now)) {
    case TB_SHM_OK:
        self->core.stats.granted++;
        self->core.stats.granted_tokens += amount;
        return 1;
    case TB_SHM_ETOOLATE:
        return 0;
    default:
        PyErr_SetString(self->shared_error,
                        "the limiter's shared segment is not aiotb's, or is corrupt: nothing was granted from it");
        return -1;
    }
}
#endif

// Takes amount at now for a newcomer, from the core's limits or the shared segment, counting the grant:
// 1 taken, 0 not (the newcomer waits), -1 with an exception.
static inline ALWAYS_INLINE int newcomer_take(BucketObject *self, double amount, tb_ns now)
{
    if (self->segment == NULL)
        return tb_take(&self->core, amount, now);
#ifdef AIOTB_HAS_SEGMENT
    return shared_take(self, amount, now);
#else
    return 0;
#endif
}

// _share(segment, error): newcomers take from segment from now on (once per bucket); a corrupt segment raises
// error, an exception class. None, or NULL with TypeError or RuntimeError.
static PyObject *bucket_share(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    PyTypeObject *type = self->state->segment_type;
    if (nargs != 2 || type == NULL || !PyObject_TypeCheck(args[0], type) ||
        !PyExceptionClass_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_share() takes a Segment and an exception class");
        return NULL;
    }
    if (self->segment != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the limiter shares a segment already");
        return NULL;
    }
    self->segment = Py_NewRef(args[0]);
    self->shared_error = Py_NewRef(args[1]);
    Py_RETURN_NONE;
}

// _share_busy(busy): whether a waiter of this process is queued for the segment. None, or NULL with
// TypeError for anything but a bool.
static PyObject *bucket_share_busy(PyObject *op, PyObject *busy)
{
    if (!PyBool_Check(busy)) {
        PyErr_Format(PyExc_TypeError, "_share_busy() takes a bool, got %R", busy);
        return NULL;
    }
    ((BucketObject *)op)->shared_busy = busy == Py_True;
    Py_RETURN_NONE;
}

#endif
