/* Segment: the shared limiter's segment (shm.h) in a named POSIX shared-memory object (shm_posix.h), for the
 * Python layer. A thin translation: every instant is an int of nanoseconds on CLOCK_MONOTONIC given by the
 * caller (a limiter's fast path over it is binding/shared.h), statuses come back as the ints of tb_shm_status,
 * and only the methods that have nothing else to return raise for one (EINVAL: ValueError; EFOREIGN:
 * SegmentCorrupt). The object mapped is untrusted: one shorter than a segment is foreign, and nothing here
 * reads past its end (but, as with any mapped file, a process that shrinks the object after it was mapped makes
 * the next access a SIGBUS). Linux only: elsewhere the module has no Segment. */
#ifndef AIOTB_BINDING_SEGMENT_H
#define AIOTB_BINDING_SEGMENT_H

#include "state.h"
#include "clock.h"
#include "params.h"

#ifdef __linux__
#define AIOTB_HAS_SEGMENT 1

#include <errno.h>

#include "../shm_posix.h"

#define SEGMENT_DEFAULT_MODE 0600  /* the mode of an object created when none is asked for */

typedef struct {
    PyObject_HEAD
    tb_state *state;         /* borrowed: the type keeps its module alive */
    tb_shm_mapping mapping;  /* seg is NULL once closed */
    bool created;            /* this object created the shared-memory object */
    uid_t owner;             /* the object's owner and permission bits when opened (kept once closed) */
    mode_t mode;
} SegmentObject;

/* ---- arguments ---- */

// Binds a vectorcall's arguments to the count parameters named in names (all required, each positional or
// by keyword), in order, into values (borrowed references); 0, or -1 with TypeError.
static int bind_arguments(const char *method, const char *const *names, Py_ssize_t count, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames, PyObject **values)
{
    if (nargs > count) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %zd arguments (%zd given)", method, count, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        values[i] = i < nargs ? args[i] : NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t i = 0;
        while (i < count && PyUnicode_CompareWithASCIIString(key, names[i]) != 0)
            i++;
        if (i == count || values[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected or repeated keyword argument %R", method, key);
            return -1;
        }
        values[i] = args[nargs + k];
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (values[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing argument '%s'", method, names[i]);
            return -1;
        }
    return 0;
}

// Converts an int (not bool) to an instant or span in nanoseconds; 0, or -1 with TypeError or ValueError
// naming the parameter.
static int parse_ns(const char *name, PyObject *value, tb_ns *out)
{
    if (PyBool_Check(value) || !PyIndex_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int of nanoseconds, got %R", name, value);
        return -1;
    }
    long long ns = PyLong_AsLongLong(value);
    if (ns == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be a signed 64-bit number of nanoseconds, got %R", name, value);
        }
        return -1;
    }
    *out = ns;
    return 0;
}

// Converts a real number (not bool) to double, at once for a float; 0, or -1 with TypeError naming the parameter.
static inline int parse_real(tb_state *st, const char *name, PyObject *value, double *out)
{
    if (PyFloat_CheckExact(value)) {
        *out = PyFloat_AS_DOUBLE(value);
        return 0;
    }
    return real_number(st, name, value, out);
}

// Converts an int (not bool) to a rate index; one outside uint32 becomes UINT32_MAX, out of every segment's range.
// 0, or -1 with TypeError.
static int parse_index(PyObject *value, uint32_t *out)
{
    if (PyBool_Check(value) || !PyIndex_Check(value)) {
        PyErr_Format(PyExc_TypeError, "index must be an int, got %R", value);
        return -1;
    }
    int overflow;
    long long index = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (index == -1 && PyErr_Occurred())
        return -1;
    *out = overflow == 0 && index >= 0 && index <= UINT32_MAX ? (uint32_t)index : UINT32_MAX;
    return 0;
}

// Returns the UTF-8 of name, a str with no NUL, borrowed from it; NULL with TypeError or ValueError.
static const char *parse_name(PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "name must be a str, got %R", name);
        return NULL;
    }
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(name, &size);
    if (utf8 != NULL && strlen(utf8) != (size_t)size) {
        PyErr_SetString(PyExc_ValueError, "name must not contain a NUL character");
        return NULL;
    }
    return utf8;
}

// Converts an int (not bool) of permission bits, 0 to 0o777, to *mode; 0, or -1 with TypeError or ValueError.
static int parse_mode(PyObject *value, long *mode)
{
    if (PyBool_Check(value) || !PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "mode must be an int, got %R", value);
        return -1;
    }
    int overflow;
    *mode = PyLong_AsLongAndOverflow(value, &overflow);
    if (*mode == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0 || *mode < 0 || *mode > 0777) {
        PyErr_Format(PyExc_ValueError, "mode must be permission bits from 0 to 0o777, got %R", value);
        return -1;
    }
    return 0;
}

// Converts one rate, a sequence (ns_per_token, burst, initial), into *params; 0, or -1 with TypeError.
static int parse_rate(tb_state *st, PyObject *rate, Py_ssize_t position, tb_shm_params *params)
{
    PyObject *items = PySequence_Check(rate) ? PySequence_Fast(rate, "") : NULL;
    if (items == NULL || PySequence_Fast_GET_SIZE(items) != 3) {
        Py_XDECREF(items);
        PyErr_Format(PyExc_TypeError, "rates[%zd] must be a tuple (ns_per_token, burst, initial), got %R", position,
                     rate);
        return -1;
    }
    PyObject **values = PySequence_Fast_ITEMS(items);
    int rc = -1;
    if (parse_real(st, "ns_per_token", values[0], &params->ns_per_token) == 0 &&
        parse_real(st, "burst", values[1], &params->burst) == 0 &&
        parse_real(st, "initial", values[2], &params->initial) == 0)
        rc = 0;
    Py_DECREF(items);
    return rc;
}

// Converts rates, a sequence of 1 to TB_MAX_RATES rates, into params; their number, or -1 with TypeError or
// ValueError.
static int parse_rates(tb_state *st, PyObject *rates, tb_shm_params *params)
{
    PyObject *items = PySequence_Check(rates) ? PySequence_Fast(rates, "") : NULL;
    if (items == NULL) {
        PyErr_Format(PyExc_TypeError, "rates must be a sequence of (ns_per_token, burst, initial) tuples, got %R",
                     rates);
        return -1;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    int rc = -1;
    if (count < 1 || count > TB_MAX_RATES) {
        PyErr_Format(PyExc_ValueError, "a segment has 1 to %d rates, got %zd", TB_MAX_RATES, count);
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (parse_rate(st, PySequence_Fast_GET_ITEM(items, i), i, &params[i]) < 0)
            goto done;
    rc = (int)count;
done:
    Py_DECREF(items);
    return rc;
}

/* ---- the mapping ---- */

// Returns the segment mapped, or NULL with ValueError if the Segment is closed.
static inline tb_shm *open_segment(SegmentObject *self)
{
    if (self->mapping.seg != NULL)
        return self->mapping.seg;
    PyErr_SetString(PyExc_ValueError, "the segment is closed");
    return NULL;
}

// Whether the object mapped is long enough to be a segment: only then may its words be read at all.
static inline bool mapped_whole(const SegmentObject *self) { return self->mapping.len >= sizeof(tb_shm); }

// The number of rates a segment's header gives, read once, or 0 if that is not 1 to TB_MAX_RATES.
static uint32_t segment_nrates(const tb_shm *seg)
{
    uint32_t nrates = seg->nrates;
    return nrates >= 1 && nrates <= TB_MAX_RATES ? nrates : 0;
}

// Raises SegmentCorrupt; returns NULL.
COLD static PyObject *segment_corrupt(SegmentObject *self)
{
    PyObject *type = self->state->segment_corrupt ? self->state->segment_corrupt : PyExc_RuntimeError;
    PyErr_SetString(type, "the shared segment is not aiotb's or is corrupt");
    return NULL;
}

// Raises the error of a status: ValueError with the message invalid for TB_SHM_EINVAL, SegmentCorrupt for
// TB_SHM_EFOREIGN, SystemError for any other; returns NULL.
COLD static PyObject *segment_failed(SegmentObject *self, tb_shm_status status, const char *invalid)
{
    if (status == TB_SHM_EINVAL)
        PyErr_SetString(PyExc_ValueError, invalid);
    else if (status == TB_SHM_EFOREIGN)
        segment_corrupt(self);
    else
        PyErr_Format(PyExc_SystemError, "unexpected status %d from the shared segment", (int)status);
    return NULL;
}

// Raises the OSError of errno value error for the object called name; returns NULL.
COLD static PyObject *segment_os_error(int error, PyObject *name)
{
    errno = error;
    return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, name);
}

// Segment(name, mode=0o600): maps the object called name, creating it (with mode exactly: no umask) and sizing
// it if there is none. Returns a new Segment, or NULL with OSError (BlockingIOError while its creator has not
// sized it, PermissionError for an object this user may not open: one of another user's still being set up).
static PyObject *segment_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"name", "mode", NULL};
    PyObject *name_object, *mode_object = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:Segment", keywords, &name_object, &mode_object))
        return NULL;
    const char *name = parse_name(name_object);
    long mode = SEGMENT_DEFAULT_MODE;
    if (name == NULL || (mode_object != NULL && parse_mode(mode_object, &mode) < 0))
        return NULL;
    tb_state *st = PyType_GetModuleState(type);
    if (st == NULL)
        return NULL;
    tb_shm_mapping mapping;
    int error = tb_shm_map(name, (mode_t)mode, &mapping);
    if (error != 0)
        return segment_os_error(error, name_object);
    SegmentObject *self = (SegmentObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        tb_shm_unmap(&mapping);
        return NULL;
    }
    self->state = st;
    self->mapping = mapping;
    self->created = mapping.created;
    self->owner = mapping.owner;
    self->mode = mapping.mode;
    return (PyObject *)self;
}

// Unmaps the segment if still mapped, and frees the object.
static void segment_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    tb_shm_unmap(&((SegmentObject *)op)->mapping);
    type->tp_free(op);
    Py_DECREF(type);
}

// close(): unmaps the segment (again: nothing happens); None.
static PyObject *segment_close(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    tb_shm_unmap(&((SegmentObject *)op)->mapping);
    Py_RETURN_NONE;
}

// created: whether this object created the shared-memory object (still known once closed).
static PyObject *segment_get_created(PyObject *op, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(((SegmentObject *)op)->created);
}

// owner: the uid that owned the shared-memory object when it was opened.
static PyObject *segment_get_owner(PyObject *op, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(((SegmentObject *)op)->owner);
}

// mode: the object's permission bits when it was opened.
static PyObject *segment_get_mode(PyObject *op, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(((SegmentObject *)op)->mode);
}

/* ---- publication ---- */

// Shared by create and join: parses rates, then returns the status of publish (one of them) as an int.
static PyObject *segment_publication(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                                     const char *method,
                                     tb_shm_status (*publish)(SegmentObject *, uint32_t, const tb_shm_params *))
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"rates"};
    PyObject *rates;
    tb_shm_params params[TB_MAX_RATES];
    if (bind_arguments(method, names, 1, args, nargs, kwnames, &rates) < 0)
        return NULL;
    int count = parse_rates(self->state, rates, params);
    if (count < 0 || open_segment(self) == NULL)
        return NULL;
    tb_shm_status status = mapped_whole(self) ? publish(self, (uint32_t)count, params) : TB_SHM_EFOREIGN;
    return PyLong_FromLong(status);
}

// Fills and publishes the segment this object created.
static tb_shm_status publish_created(SegmentObject *self, uint32_t nrates, const tb_shm_params *params)
{
    return tb_shm_create(self->mapping.seg, self->mapping.len, nrates, params);
}

// Checks a published segment against the rates a joiner expects.
static tb_shm_status publish_joined(SegmentObject *self, uint32_t nrates, const tb_shm_params *params)
{
    return tb_shm_join(self->mapping.seg, self->mapping.len, nrates, params);
}

// create(rates): fills and publishes a new segment; its status.
static PyObject *segment_create(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return segment_publication(op, args, nargs, kwnames, "create", publish_created);
}

// join(rates): whether the segment is published, whole, and of these rates; its status.
static PyObject *segment_join(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return segment_publication(op, args, nargs, kwnames, "join", publish_joined);
}

// created_rates(): the rates a published segment was created with, as tuples (ns_per_token, burst, initial).
static PyObject *segment_created_rates(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    SegmentObject *self = (SegmentObject *)op;
    tb_shm *seg = open_segment(self);
    if (seg == NULL)
        return NULL;
    tb_shm_status status = tb_shm_validate(seg, self->mapping.len);
    if (status == TB_SHM_ENOTREADY) {
        PyErr_SetString(PyExc_ValueError, "the segment is not published yet");
        return NULL;
    }
    uint32_t nrates = segment_nrates(seg);  /* once: another process could write the header since */
    if (status != TB_SHM_OK || nrates == 0)
        return segment_corrupt(self);
    PyObject *rates = PyTuple_New(nrates);
    for (uint32_t i = 0; rates != NULL && i < nrates; i++) {
        const tb_shm_params *p = &seg->created[i];
        PyObject *rate = Py_BuildValue("(ddd)", p->ns_per_token, p->burst, p->initial);
        if (rate == NULL)
            Py_CLEAR(rates);
        else
            PyTuple_SET_ITEM(rates, i, rate);
    }
    return rates;
}

// check(): tb_shm_check's verdict, 0 if every invariant holds (1, a broken header, for an object too short).
static PyObject *segment_check(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    SegmentObject *self = (SegmentObject *)op;
    tb_shm *seg = open_segment(self);
    if (seg == NULL)
        return NULL;
    return PyLong_FromLong(mapped_whole(self) ? tb_shm_check(seg) : 1);
}

/* ---- grants ---- */

// reserve(amount, now, deadline): (status, grant instant, the reservation's record for cancel); the instant
// and record mean something for TB_SHM_OK only (0, and a record that gives nothing back, otherwise).
static PyObject *segment_reserve(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"amount", "now", "deadline"};
    PyObject *values[3];
    double amount;
    tb_ns now, deadline;
    if (bind_arguments("reserve", names, 3, args, nargs, kwnames, values) < 0 ||
        parse_real(self->state, "amount", values[0], &amount) < 0 || parse_ns("now", values[1], &now) < 0 ||
        parse_ns("deadline", values[2], &deadline) < 0 || open_segment(self) == NULL)
        return NULL;
    tb_shm_reservation r;
    memset(&r, 0, sizeof r);  /* padding included: the record's bytes are all defined */
    tb_shm_status status =
        mapped_whole(self) ? tb_shm_reserve(self->mapping.seg, amount, now, deadline, &r) : TB_SHM_EFOREIGN;
    return Py_BuildValue("(iLy#)", (int)status, (long long)r.at, (const char *)&r, (Py_ssize_t)sizeof r);
}

// take_now(amount, now): the status of taking amount at now.
static PyObject *segment_take_now(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"amount", "now"};
    PyObject *values[2];
    double amount;
    tb_ns now;
    if (bind_arguments("take_now", names, 2, args, nargs, kwnames, values) < 0 ||
        parse_real(self->state, "amount", values[0], &amount) < 0 || parse_ns("now", values[1], &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_shm_status status = mapped_whole(self) ? tb_shm_take_now(self->mapping.seg, amount, now) : TB_SHM_EFOREIGN;
    return PyLong_FromLong(status);
}

// cancel(record, now): gives back what the reservation of record took, where no later one built on it;
// the number of rates given back. ValueError for a record that is not one of this segment's.
static PyObject *segment_cancel(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"record", "now"};
    PyObject *values[2];
    tb_ns now;
    if (bind_arguments("cancel", names, 2, args, nargs, kwnames, values) < 0)
        return NULL;
    if (!PyBytes_Check(values[0])) {
        PyErr_Format(PyExc_TypeError, "record must be bytes, got %R", values[0]);
        return NULL;
    }
    if (parse_ns("now", values[1], &now) < 0)
        return NULL;
    tb_shm_reservation r;
    if (PyBytes_GET_SIZE(values[0]) != (Py_ssize_t)sizeof r) {
        PyErr_Format(PyExc_ValueError, "record must be a reservation's %zu bytes, got %zd", sizeof r,
                     PyBytes_GET_SIZE(values[0]));
        return NULL;
    }
    memcpy(&r, PyBytes_AS_STRING(values[0]), sizeof r);
    tb_shm *seg = open_segment(self);
    if (seg == NULL)
        return NULL;
    if (!mapped_whole(self))
        return segment_corrupt(self);
    uint32_t nrates = segment_nrates(seg);
    if (r.nrates > nrates) {
        PyErr_Format(PyExc_ValueError, "record names %u rates, the segment has %u", r.nrates, nrates);
        return NULL;
    }
    return PyLong_FromUnsignedLong(tb_shm_cancel(seg, &r, now));
}

// tokens(now): the tokens available at now (the fewest over the rates, 0 while paused), as a float.
static PyObject *segment_tokens(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"now"};
    PyObject *value;
    tb_ns now;
    if (bind_arguments("tokens", names, 1, args, nargs, kwnames, &value) < 0 || parse_ns("now", value, &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    double tokens = 0;
    tb_shm_status status = mapped_whole(self) ? tb_shm_tokens(self->mapping.seg, now, &tokens) : TB_SHM_EFOREIGN;
    if (status != TB_SHM_OK)
        return segment_failed(self, status, "now must be a CLOCK_MONOTONIC instant within 2**58 ns of 0");
    return PyFloat_FromDouble(tokens);
}

// fit_at(amount, now): the first instant >= now at which amount would be granted (NEVER: over a burst).
static PyObject *segment_fit_at(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"amount", "now"};
    PyObject *values[2];
    double amount;
    tb_ns now;
    if (bind_arguments("fit_at", names, 2, args, nargs, kwnames, values) < 0 ||
        parse_real(self->state, "amount", values[0], &amount) < 0 || parse_ns("now", values[1], &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_ns at = TB_NEVER;
    tb_shm_status status = mapped_whole(self) ? tb_shm_fit_at(self->mapping.seg, amount, now, &at) : TB_SHM_EFOREIGN;
    if (status != TB_SHM_OK)
        return segment_failed(self, status,
                              "amount must be finite and > 0, now a CLOCK_MONOTONIC instant within 2**58 ns of 0");
    return PyLong_FromLongLong(at);
}

// settle(taken, used, now): the status of settling a grant of taken whose real cost was used, for every process.
static PyObject *segment_settle(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"taken", "used", "now"};
    PyObject *values[3];
    double taken, used;
    tb_ns now;
    if (bind_arguments("settle", names, 3, args, nargs, kwnames, values) < 0 ||
        parse_real(self->state, "taken", values[0], &taken) < 0 ||
        parse_real(self->state, "used", values[1], &used) < 0 || parse_ns("now", values[2], &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_shm_status status = mapped_whole(self) ? tb_shm_settle(self->mapping.seg, taken, used, now) : TB_SHM_EFOREIGN;
    return PyLong_FromLong(status);
}

// limit_until(tokens, until, slack, now): the status of limiting every process to tokens more before until.
static PyObject *segment_limit_until(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"tokens", "until", "slack", "now"};
    PyObject *values[4];
    double tokens;
    tb_ns until, slack, now;
    if (bind_arguments("limit_until", names, 4, args, nargs, kwnames, values) < 0 ||
        parse_real(self->state, "tokens", values[0], &tokens) < 0 || parse_ns("until", values[1], &until) < 0 ||
        parse_ns("slack", values[2], &slack) < 0 || parse_ns("now", values[3], &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_shm_status status =
        mapped_whole(self) ? tb_shm_limit_until(self->mapping.seg, tokens, until, slack, now) : TB_SHM_EFOREIGN;
    return PyLong_FromLong(status);
}

/* ---- pause and rates ---- */

// pause_until(until): no grant before until, for every process (an earlier instant than the pause's changes
// nothing); SegmentCorrupt where the header has no rates (not published, or foreign) or the pause is fought over.
static PyObject *segment_pause_until(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"until"};
    PyObject *value;
    tb_ns until;
    if (bind_arguments("pause_until", names, 1, args, nargs, kwnames, &value) < 0 ||
        parse_ns("until", value, &until) < 0)
        return NULL;
    tb_shm *seg = open_segment(self);
    if (seg == NULL)
        return NULL;
    if (!mapped_whole(self) || segment_nrates(seg) == 0 || tb_shm_pause_until(seg, until) != TB_SHM_OK)
        return segment_corrupt(self);
    Py_RETURN_NONE;
}

// paused_until(): the instant before which nothing is granted (-2**63: none); SegmentCorrupt as pause_until.
static PyObject *segment_paused_until(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    SegmentObject *self = (SegmentObject *)op;
    tb_shm *seg = open_segment(self);
    if (seg == NULL)
        return NULL;
    if (!mapped_whole(self) || segment_nrates(seg) == 0)
        return segment_corrupt(self);
    return PyLong_FromLongLong(atomic_load(&seg->paused_until));
}

// set_rate(index, ns_per_token, burst, now): the status of changing rate index for every process.
static PyObject *segment_set_rate(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"index", "ns_per_token", "burst", "now"};
    PyObject *values[4];
    uint32_t index;
    double ns_per_token, burst;
    tb_ns now;
    if (bind_arguments("set_rate", names, 4, args, nargs, kwnames, values) < 0 || parse_index(values[0], &index) < 0 ||
        parse_real(self->state, "ns_per_token", values[1], &ns_per_token) < 0 ||
        parse_real(self->state, "burst", values[2], &burst) < 0 || parse_ns("now", values[3], &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_shm_status status =
        mapped_whole(self) ? tb_shm_set_rate(self->mapping.seg, index, ns_per_token, burst, now) : TB_SHM_EFOREIGN;
    return PyLong_FromLong(status);
}

// change_rate(index, from_ns_per_token, from_burst, ns_per_token, burst, now): set_rate's status, or SHM_ESTALE
// (nothing changed) unless rate index's live parameters are the from ones when the change is claimed.
static PyObject *segment_change_rate(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"index", "from_ns_per_token", "from_burst", "ns_per_token", "burst", "now"};
    PyObject *values[6];
    uint32_t index;
    tb_shm_params from = {0, 0, 0};
    double ns_per_token, burst;
    tb_ns now;
    if (bind_arguments("change_rate", names, 6, args, nargs, kwnames, values) < 0 ||
        parse_index(values[0], &index) < 0 ||
        parse_real(self->state, "from_ns_per_token", values[1], &from.ns_per_token) < 0 ||
        parse_real(self->state, "from_burst", values[2], &from.burst) < 0 ||
        parse_real(self->state, "ns_per_token", values[3], &ns_per_token) < 0 ||
        parse_real(self->state, "burst", values[4], &burst) < 0 || parse_ns("now", values[5], &now) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_shm_status status = mapped_whole(self)
                               ? tb_shm_change_rate(self->mapping.seg, index, &from, ns_per_token, burst, now)
                               : TB_SHM_EFOREIGN;
    return PyLong_FromLong(status);
}

// rate_params(index): rate index's live (ns_per_token, burst) and its initial tokens as created.
static PyObject *segment_rate_params(PyObject *op, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    SegmentObject *self = (SegmentObject *)op;
    static const char *const names[] = {"index"};
    PyObject *value;
    uint32_t index;
    if (bind_arguments("rate_params", names, 1, args, nargs, kwnames, &value) < 0 || parse_index(value, &index) < 0 ||
        open_segment(self) == NULL)
        return NULL;
    tb_shm_params params;
    tb_shm_status status = mapped_whole(self) ? tb_shm_rate_params(self->mapping.seg, index, &params) : TB_SHM_EFOREIGN;
    if (status != TB_SHM_OK)
        return segment_failed(self, status, "index must be the index of one of the segment's rates");
    return Py_BuildValue("(ddd)", params.ns_per_token, params.burst, params.initial);
}

/* ---- names and the clock ---- */

// unlink(name): True if the name was removed, False if there was none; OSError otherwise.
static PyObject *segment_unlink(PyObject *Py_UNUSED(cls), PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"name"};
    PyObject *name_object;
    if (bind_arguments("unlink", names, 1, args, nargs, kwnames, &name_object) < 0)
        return NULL;
    const char *name = parse_name(name_object);
    if (name == NULL)
        return NULL;
    int error = tb_shm_unlink(name);
    if (error == 0)
        Py_RETURN_TRUE;
    if (error == ENOENT)
        Py_RETURN_FALSE;
    return segment_os_error(error, name_object);
}

// now(): CLOCK_MONOTONIC in nanoseconds, the clock of every instant a segment takes.
static PyObject *segment_now(PyObject *Py_UNUSED(cls), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(monotonic_ns());
}

#define SEGMENT_METHOD(name, flags, doc) {#name, (PyCFunction)(void (*)(void))segment_##name, flags, doc}
#define SEGMENT_KEYWORDS (METH_FASTCALL | METH_KEYWORDS)

static PyMethodDef segment_methods[] = {
    SEGMENT_METHOD(create, SEGMENT_KEYWORDS,
                   "create($self, /, rates)\n--\n\nFills and publishes the segment this object created, with rates "
                   "((ns_per_token, burst, initial), 1 to 4 of them); returns the status (SHM_OK, SHM_EINVAL, "
                   "SHM_EFOREIGN)."),
    SEGMENT_METHOD(join, SEGMENT_KEYWORDS,
                   "join($self, /, rates)\n--\n\nWhether the segment is published, intact and created with rates: "
                   "SHM_OK, SHM_ENOTREADY (ask again), SHM_EMISMATCH or SHM_EFOREIGN."),
    SEGMENT_METHOD(created_rates, METH_NOARGS,
                   "created_rates($self, /)\n--\n\nThe rates a published segment was created with; ValueError "
                   "before it is published, SegmentCorrupt for a foreign one."),
    SEGMENT_METHOD(reserve, SEGMENT_KEYWORDS,
                   "reserve($self, /, amount, now, deadline)\n--\n\nReserves amount at its first grant instant "
                   "unless that is after deadline (NEVER: none): (status, instant, record for cancel)."),
    SEGMENT_METHOD(take_now, SEGMENT_KEYWORDS,
                   "take_now($self, /, amount, now)\n--\n\nTakes amount if it can be granted at now; returns the "
                   "status (SHM_OK, SHM_ETOOLATE: nothing taken)."),
    SEGMENT_METHOD(cancel, SEGMENT_KEYWORDS,
                   "cancel($self, /, record, now)\n--\n\nCancels the reservation of record at now, giving back each "
                   "rate no later reservation built on; returns how many rates it gave back."),
    SEGMENT_METHOD(settle, SEGMENT_KEYWORDS,
                   "settle($self, /, taken, used, now)\n--\n\nSettles a grant of taken whose real cost was used: "
                   "the difference given back or taken as debt; returns the status (SHM_EINVAL: nothing changed)."),
    SEGMENT_METHOD(limit_until, SEGMENT_KEYWORDS,
                   "limit_until($self, /, tokens, until, slack, now)\n--\n\nAt most tokens more granted before "
                   "until, for every process (a limit running is tightened by one ending within slack of it, "
                   "replaced by one ending later, kept by one ending earlier); returns the status."),
    SEGMENT_METHOD(tokens, SEGMENT_KEYWORDS,
                   "tokens($self, /, now)\n--\n\nThe tokens available at now: the fewest over the rates and a "
                   "limit, 0 while paused."),
    SEGMENT_METHOD(fit_at, SEGMENT_KEYWORDS,
                   "fit_at($self, /, amount, now)\n--\n\nThe first instant >= now at which amount would be "
                   "granted, taking nothing (NEVER for amount over a burst)."),
    SEGMENT_METHOD(pause_until, SEGMENT_KEYWORDS,
                   "pause_until($self, /, until)\n--\n\nNo grant before until, for every process (a later pause "
                   "only)."),
    SEGMENT_METHOD(paused_until, METH_NOARGS,
                   "paused_until($self, /)\n--\n\nThe instant before which nothing is granted (-2**63: none)."),
    SEGMENT_METHOD(set_rate, SEGMENT_KEYWORDS,
                   "set_rate($self, /, index, ns_per_token, burst, now)\n--\n\nChanges rate index for every "
                   "process as of now, keeping its tokens; returns the status (SHM_EAGAIN: overtaken, try again)."),
    SEGMENT_METHOD(change_rate, SEGMENT_KEYWORDS,
                   "change_rate($self, /, index, from_ns_per_token, from_burst, ns_per_token, burst, now)\n--\n\n"
                   "set_rate only while rate index's live parameters are the from ones; returns the status "
                   "(SHM_ESTALE: they are not, nothing changed)."),
    SEGMENT_METHOD(rate_params, SEGMENT_KEYWORDS,
                   "rate_params($self, /, index)\n--\n\nRate index's live (ns_per_token, burst, initial)."),
    SEGMENT_METHOD(check, METH_NOARGS,
                   "check($self, /)\n--\n\n0 if every invariant of the segment holds, else the number of the "
                   "broken one."),
    SEGMENT_METHOD(close, METH_NOARGS,
                   "close($self, /)\n--\n\nUnmaps the segment (again: nothing happens); the object and its name "
                   "stay."),
    SEGMENT_METHOD(unlink, SEGMENT_KEYWORDS | METH_STATIC,
                   "unlink(name)\n--\n\nRemoves the name: True, or False if there was none."),
    SEGMENT_METHOD(now, METH_NOARGS | METH_STATIC,
                   "now()\n--\n\nCLOCK_MONOTONIC in nanoseconds."),
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef segment_getset[] = {
    {"created", segment_get_created, NULL, "Whether this object created the shared-memory object.", NULL},
    {"owner", segment_get_owner, NULL, "The uid that owned the shared-memory object when it was opened.", NULL},
    {"mode", segment_get_mode, NULL, "The object's permission bits when it was opened.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot segment_slots[] = {
    {Py_tp_new, segment_new},
    {Py_tp_dealloc, segment_dealloc},
    {Py_tp_methods, segment_methods},
    {Py_tp_getset, segment_getset},
    {Py_tp_doc, (void *)"Segment(name, mode=0o600)\n--\n\n"
                        "A shared limiter's segment: the named POSIX shared-memory object name, mapped (created "
                        "with mode, exactly, and sized if there was none)."},
    {0, NULL},
};

static PyType_Spec segment_spec = {
    .name = "aiotb._tokenbucket.Segment",
    .basicsize = sizeof(SegmentObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = segment_slots,
};

// Adds Segment, SegmentCorrupt (kept in st) and the segment's constants to module; 0, or -1 with an exception.
static int segment_add_to_module(PyObject *module, tb_state *st)
{
    st->segment_corrupt = PyErr_NewExceptionWithDoc(
        "aiotb._tokenbucket.SegmentCorrupt", "The shared segment is not aiotb's, or is corrupt.", PyExc_RuntimeError,
        NULL);
    if (st->segment_corrupt == NULL || PyModule_AddObjectRef(module, "SegmentCorrupt", st->segment_corrupt) < 0)
        return -1;
    PyObject *type = PyType_FromModuleAndSpec(module, &segment_spec, NULL);
    st->segment_type = (PyTypeObject *)type;
    if (type == NULL || PyModule_AddType(module, (PyTypeObject *)type) < 0)
        return -1;
    int rc;
    static const struct {
        const char *name;
        long long value;
    } constants[] = {
        {"SHM_OK", TB_SHM_OK},
        {"SHM_EINVAL", TB_SHM_EINVAL},
        {"SHM_ETOOLATE", TB_SHM_ETOOLATE},
        {"SHM_ENOTREADY", TB_SHM_ENOTREADY},
        {"SHM_EMISMATCH", TB_SHM_EMISMATCH},
        {"SHM_EFOREIGN", TB_SHM_EFOREIGN},
        {"SHM_EAGAIN", TB_SHM_EAGAIN},
        {"SHM_ESTALE", TB_SHM_ESTALE},
        {"NEVER", TB_NEVER},
        {"SHM_MAX_SPAN", TB_SHM_MAX_SPAN},
        {"SHM_HORIZON", TB_SHM_HORIZON},
    };
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++) {
        PyObject *value = PyLong_FromLongLong(constants[i].value);
        rc = value ? PyModule_AddObjectRef(module, constants[i].name, value) : -1;
        Py_XDECREF(value);
        if (rc < 0)
            return -1;
    }
    return 0;
}

#endif /* __linux__ */
#endif
