/* PreciseTimer: a Linux timerfd on CLOCK_MONOTONIC, armed at absolute instants, for an event loop to
 * watch with add_reader. A loop times its own timers in whole milliseconds; the kernel wakes a reader
 * of this descriptor within tens of microseconds of the instant (aiotb._dispatch uses it for short
 * waits). Linux only: elsewhere the module has no PreciseTimer and the loop's timer serves. */
#ifndef AIOTB_BINDING_TIMER_H
#define AIOTB_BINDING_TIMER_H

#include "state.h"

#ifdef __linux__
#define AIOTB_HAS_PRECISE_TIMER 1

#include <errno.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    int fd;  /* -1 once closed */
} PreciseTimerObject;

// Sets ValueError and returns -1 if the timer is closed; 0 otherwise.
static int timer_check_open(PreciseTimerObject *self)
{
    if (self->fd >= 0)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the precise timer is closed");
    return -1;
}

// Arms (or, with a zero instant, disarms) the timerfd; 0, or -1 with OSError.
static int timer_set(PreciseTimerObject *self, tb_ns at_ns)
{
    struct itimerspec spec = {{0, 0}, {(time_t)(at_ns / 1000000000), (long)(at_ns % 1000000000)}};
    if (timerfd_settime(self->fd, TFD_TIMER_ABSTIME, &spec, NULL) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

// Returns a new PreciseTimer with a fresh descriptor, or NULL with OSError.
static PyObject *timer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_Size(args) != 0 || (kwargs != NULL && PyDict_Size(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "PreciseTimer() takes no arguments");
        return NULL;
    }
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PreciseTimerObject *self = (PreciseTimerObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        close(fd);
        return NULL;
    }
    self->fd = fd;
    return (PyObject *)self;
}

// Closes the descriptor if still open.
static void timer_release(PreciseTimerObject *self)
{
    if (self->fd >= 0) {
        close(self->fd);
        self->fd = -1;
    }
}

static void timer_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    timer_release((PreciseTimerObject *)op);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *timer_fileno(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    PreciseTimerObject *self = (PreciseTimerObject *)op;
    return timer_check_open(self) < 0 ? NULL : PyLong_FromLong(self->fd);
}

// arm(at): fires at the first nanosecond of CLOCK_MONOTONIC that reads as at seconds (round half up,
// as the core reads a loop time) or later; at once if that has passed.
static PyObject *timer_arm(PyObject *op, PyObject *at)
{
    PreciseTimerObject *self = (PreciseTimerObject *)op;
    double seconds = PyFloat_AsDouble(at);
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(isfinite(seconds) && fabs(seconds) < (double)TB_MAX_SPAN / 1e9)) {
        PyErr_Format(PyExc_ValueError, "at must be a finite CLOCK_MONOTONIC time in seconds, not %R", at);
        return NULL;
    }
    if (timer_check_open(self) < 0)
        return NULL;
    tb_ns at_ns = (tb_ns)floor(seconds * 1e9 + 0.5);
    if (timer_set(self, at_ns > 0 ? at_ns : 1) < 0)  /* zero would disarm: 1 ns has passed, it fires at once */
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *timer_disarm(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    PreciseTimerObject *self = (PreciseTimerObject *)op;
    if (timer_check_open(self) < 0 || timer_set(self, 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

// expired(): True if the instant armed last has come (and consumes that news: the descriptor stops
// being readable); False if not, as when the loop saw it readable before it was armed again.
static PyObject *timer_expired(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    PreciseTimerObject *self = (PreciseTimerObject *)op;
    if (timer_check_open(self) < 0)
        return NULL;
    uint64_t expirations;
    ssize_t got = read(self->fd, &expirations, sizeof expirations);
    if (got == (ssize_t)sizeof expirations)
        Py_RETURN_TRUE;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        Py_RETURN_FALSE;
    if (got < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PyErr_Format(PyExc_OSError, "a timerfd read returned %zd bytes", got);
    return NULL;
}

static PyObject *timer_close(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    timer_release((PreciseTimerObject *)op);
    Py_RETURN_NONE;
}

static PyObject *timer_get_closed(PyObject *op, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(((PreciseTimerObject *)op)->fd < 0);
}

static PyMethodDef timer_methods[] = {
    {"fileno", timer_fileno, METH_NOARGS, "The descriptor, for loop.add_reader."},
    {"arm", timer_arm, METH_O, "Fires at the CLOCK_MONOTONIC time at (seconds), replacing any earlier arming."},
    {"disarm", timer_disarm, METH_NOARGS, "Stops the timer; it is not readable until armed and fired again."},
    {"expired", timer_expired, METH_NOARGS, "Whether the instant armed last has come; consumes the news."},
    {"close", timer_close, METH_NOARGS, "Closes the descriptor (again: nothing happens)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef timer_getset[] = {
    {"closed", timer_get_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot timer_slots[] = {
    {Py_tp_new, timer_new},
    {Py_tp_dealloc, timer_dealloc},
    {Py_tp_methods, timer_methods},
    {Py_tp_getset, timer_getset},
    {Py_tp_doc, (void *)"A timerfd on CLOCK_MONOTONIC armed at absolute instants, for loop.add_reader."},
    {0, NULL},
};

static PyType_Spec timer_spec = {
    .name = "aiotb._tokenbucket.PreciseTimer",
    .basicsize = sizeof(PreciseTimerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = timer_slots,
};

#endif /* __linux__ */
#endif
