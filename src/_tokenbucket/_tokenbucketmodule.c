/* aiotb._tokenbucket: the Python binding of the token-bucket core.
 *
 * Bucket owns a tb_bucket and reads the running loop's clock. When the loop's
 * clock provably is CLOCK_MONOTONIC (checked once per task, remembered in a
 * context variable) it reads that clock itself, so an uncontended acquire
 * allocates nothing and never looks up the running loop. Waiting, futures and
 * the timer belong to the asyncio glue in aiotb/_limiter.py, which subclasses
 * Bucket and provides `_wait`. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>
#include <string.h>
#include <time.h>

#include "tokenbucket.h"

/* How late a woken waiter may be and still be granted as of its ready instant, in time of one
 * token: under one, so no interval of length t sees a whole token over burst + rate*t. */
#define LATE_CREDIT_TOKENS 0.99

static PyModuleDef tokenbucket_module;

typedef struct {
    PyTypeObject *bucket_type;
    PyTypeObject *ready_type;
    PyTypeObject *clock_type;
    PyTypeObject *acquisition_type;
    PyObject *ready;             /* the one done awaitable */
    PyObject *clock_var;         /* ContextVar: this task's LoopClock, if its loop is monotonic */
    PyObject *latest_clock;      /* weak reference to the latest LoopClock made, or NULL */
    uint64_t clock_sets;         /* how many times clock_var was set: a bucket's cached read is stale after one */
    PyObject *get_running_loop;  /* asyncio.events._get_running_loop */
    PyObject *is_monotonic_loop; /* aiotb._clock.is_monotonic_loop */
    PyObject *real_type;         /* numbers.Real */
    PyObject *str_time;
    PyObject *str_wait;
    PyObject *str_throw;
    PyObject *str_close;
} tb_state;

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

/* ---- LoopClock: proof, for one task, that its loop's clock is CLOCK_MONOTONIC ---- */

typedef struct {
    PyObject_HEAD
    PyObject *loop;            /* the running loop it was checked on */
    PyObject *loop_dict;       /* its instance dict, or NULL: a `time` there would be a patch */
    Py_ssize_t dict_size;      /* its size when checked: adding or removing `time` changes it */
    PyTypeObject *loop_type;   /* its class when checked: a new class may bring a new clock */
    unsigned int type_version; /* that class's version tag: it changes when the class or a base is patched */
    PyThreadState *thread;     /* the thread it runs on: a context copied to another thread has another loop */
    PyObject *weakrefs;        /* the module's memory of the latest proof is weak */
} ClockObject;

static PyMemberDef clock_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ClockObject, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static int clock_traverse(PyObject *op, visitproc visit, void *arg)
{
    ClockObject *self = (ClockObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->loop);
    Py_VISIT(self->loop_dict);
    Py_VISIT(self->loop_type);
    return 0;
}

static int clock_clear(PyObject *op)
{
    ClockObject *self = (ClockObject *)op;
    Py_CLEAR(self->loop);
    Py_CLEAR(self->loop_dict);
    Py_CLEAR(self->loop_type);
    return 0;
}

static void clock_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (((ClockObject *)op)->weakrefs != NULL)
        PyObject_ClearWeakRefs(op);
    (void)clock_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot clock_slots[] = {
    {Py_tp_members, clock_members},
    {Py_tp_traverse, clock_traverse},
    {Py_tp_clear, clock_clear},
    {Py_tp_dealloc, clock_dealloc},
    {0, NULL},
};

static PyType_Spec clock_spec = {
    .name = "aiotb._tokenbucket.LoopClock",
    .basicsize = sizeof(ClockObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = clock_slots,
};

/* ---- Bucket ---- */

typedef struct {
    PyObject_HEAD
    tb_state *state;    /* borrowed: the type keeps its module alive */
    tb_bucket core;
    double max_rates[TB_MAX_RATES];  /* each rate's max_rate and time_period as given (a window's: limit, period) */
    double periods[TB_MAX_RATES];
    bool compat;        /* aiolimiter's AsyncLimiter: smallest first, its error text, no timeout */
    bool has_last;      /* last_now holds a reading */
    tb_ns last_now;     /* the latest reading of the clock */
    PyObject *domain;   /* the loop whose own clock core times are on; NULL: CLOCK_MONOTONIC */
    /* The clock variable as this bucket last read it (a LoopClock, or NULL): still its value while the
     * thread, that thread's context version (bumped whenever a context is entered or left) and
     * st->clock_sets are unchanged. A strong reference: the context may drop its own. */
    PyObject *seen_clock;
    uint64_t seen_thread_id;
    uint64_t seen_context_ver;
    uint64_t seen_sets;
    uint64_t granted;   /* grants kept (a grant given back by a cancelled waiter is not counted) */
    double granted_tokens;
} BucketObject;

// Takes amount at now for a newcomer if it may have it, counting the grant.
static bool take_counted(BucketObject *self, double amount, tb_ns now)
{
    if (!tb_take(&self->core, amount, now))
        return false;
    self->granted++;
    self->granted_tokens += amount;
    return true;
}

// CLOCK_MONOTONIC now, in nanoseconds.
static tb_ns monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (tb_ns)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Converts a loop time in seconds to nanoseconds (round half up); 0, or -1 with RuntimeError.
static int seconds_to_ns(double seconds, tb_ns *ns)
{
    if (!(isfinite(seconds) && fabs(seconds) < (double)TB_MAX_SPAN / 1e9)) {
        PyObject *value = PyFloat_FromDouble(seconds);
        if (value) {
            PyErr_Format(PyExc_RuntimeError,
                         "the event loop's clock returned %R, which is not a usable time", value);
            Py_DECREF(value);
        }
        return -1;
    }
    *ns = (tb_ns)floor(seconds * 1e9 + 0.5);
    return 0;
}

// The earliest loop time in seconds that reads as ns or later.
static double ns_to_seconds(tb_ns ns)
{
    double seconds = (double)ns / 1e9;
    while ((tb_ns)floor(seconds * 1e9 + 0.5) < ns)
        seconds = nextafter(seconds, INFINITY);
    return seconds;
}

// Whether the remembered clock proof still holds here, at the cost of a few loads: same
// thread, same class unmodified, same number of instance attributes (a `time` patched on the
// instance adds one; its removal takes it away). Any change sends the caller back to the full check.
static int clock_still_valid(ClockObject *clock, PyThreadState *ts)
{
    PyTypeObject *type = Py_TYPE(clock->loop);
    return clock->thread == ts && type == clock->loop_type &&
           type->tp_version_tag == clock->type_version &&
           (clock->loop_dict == NULL || PyDict_GET_SIZE(clock->loop_dict) == clock->dict_size);
}

// Stores a proven LoopClock in this task's context. 0, or -1 with an exception.
static int adopt_clock(tb_state *st, PyObject *clock)
{
    PyObject *token = PyContextVar_Set(st->clock_var, clock);
    if (token == NULL)
        return -1;
    st->clock_sets++;
    Py_DECREF(token);
    return 0;
}

// Remembers in this task's context that loop's clock is CLOCK_MONOTONIC. 0, or -1 with an exception.
static int remember_clock(tb_state *st, PyObject *loop)
{
    if (Py_TYPE(loop)->tp_version_tag == 0)  /* no valid tag to watch the class with: do not remember */
        return 0;
    ClockObject *clock = PyObject_GC_New(ClockObject, st->clock_type);
    if (clock == NULL)
        return -1;
    clock->loop = Py_NewRef(loop);
    clock->loop_type = (PyTypeObject *)Py_NewRef(Py_TYPE(loop));
    clock->type_version = Py_TYPE(loop)->tp_version_tag;
    clock->thread = PyThreadState_Get();
    clock->loop_dict = PyObject_GenericGetDict(loop, NULL);
    if (clock->loop_dict == NULL) {  /* a loop without instance dict cannot be patched per instance */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(clock);
            return -1;
        }
        PyErr_Clear();
    }
    clock->dict_size = clock->loop_dict ? PyDict_GET_SIZE(clock->loop_dict) : 0;
    clock->weakrefs = NULL;
    PyObject_GC_Track((PyObject *)clock);
    PyObject *latest = PyWeakref_NewRef((PyObject *)clock, NULL);
    int rc = latest ? adopt_clock(st, (PyObject *)clock) : -1;
    if (latest)
        Py_XSETREF(st->latest_clock, latest);
    Py_DECREF(clock);
    return rc;
}

#if defined(__GNUC__)
#define COLD __attribute__((noinline, cold))  /* keeps the fast path's frame small */
#define ALWAYS_INLINE __attribute__((always_inline))
#else
#define COLD
#define ALWAYS_INLINE
#endif

// Reads the running loop's clock the long way; *domain gets a new reference to the loop
// when its clock is its own, else NULL. 0, or -1 with an exception.
COLD static int read_clock_slow(tb_state *st, tb_ns *now, PyObject **domain)
{
    *domain = NULL;
    PyObject *loop = PyObject_CallNoArgs(st->get_running_loop);
    if (loop == NULL)
        return -1;
    if (loop == Py_None) {  /* outside a loop: asyncio's default clock */
        Py_DECREF(loop);
        *now = monotonic_ns();
        return 0;
    }
    int rc = -1;
    PyObject *latest = st->latest_clock ? PyWeakref_GetObject(st->latest_clock) : NULL;  /* borrowed */
    if (latest != NULL && latest != Py_None && ((ClockObject *)latest)->loop == loop &&
        clock_still_valid((ClockObject *)latest, PyThreadState_Get())) {  /* a new task on a loop proven before */
        if (adopt_clock(st, latest) < 0)
            goto done;
        *now = monotonic_ns();
        rc = 0;
        goto done;
    }
    PyObject *verdict = PyObject_CallOneArg(st->is_monotonic_loop, loop);
    if (verdict == NULL)
        goto done;
    int monotonic = PyObject_IsTrue(verdict);
    Py_DECREF(verdict);
    if (monotonic < 0)
        goto done;
    if (monotonic) {
        if (remember_clock(st, loop) < 0)
            goto done;
        *now = monotonic_ns();
        rc = 0;
        goto done;
    }
    PyObject *seconds = PyObject_CallMethodNoArgs(loop, st->str_time);
    if (seconds == NULL)
        goto done;
    double value = PyFloat_AsDouble(seconds);
    Py_DECREF(seconds);
    if ((value == -1.0 && PyErr_Occurred()) || seconds_to_ns(value, now) < 0)
        goto done;
    *domain = Py_NewRef(loop);
    rc = 0;
done:
    Py_DECREF(loop);
    return rc;
}

// Moves the core onto another clock (domain: a loop, or NULL for CLOCK_MONOTONIC) that reads now.
COLD static void switch_clock(BucketObject *self, PyObject *domain, tb_ns now)
{
    if (self->has_last)
        tb_rebase(&self->core, self->last_now, now);
    Py_XSETREF(self->domain, Py_XNewRef(domain));
}

// Whether self->seen_clock is still the clock variable's value here: same thread, no context entered
// or left on it, and no set of the variable since the bucket read it.
static inline ALWAYS_INLINE bool seen_is_current(const BucketObject *self, const PyThreadState *ts)
{
    return ts->id == self->seen_thread_id && ts->context_ver == self->seen_context_ver &&
           self->state->clock_sets == self->seen_sets;
}

// Reads this task's LoopClock (or NULL) from the context into self->seen_clock. 0, or -1 with an
// exception. Releasing the previous one may run Python: callers read self->seen_clock afterwards.
COLD static int read_clock_var(BucketObject *self, PyThreadState *ts)
{
    tb_state *st = self->state;
    PyObject *clock;
    if (PyContextVar_Get(st->clock_var, NULL, &clock) < 0)
        return -1;
    if (clock != NULL && !Py_IS_TYPE(clock, st->clock_type))  /* set by someone else: no proof */
        Py_CLEAR(clock);
    self->seen_thread_id = ts->id;
    self->seen_context_ver = ts->context_ver;
    self->seen_sets = st->clock_sets;
    Py_XSETREF(self->seen_clock, clock);
    return 0;
}

// bucket_now past its fast path: reads the clock variable again if needed, and any clock. 0, or -1.
COLD static int bucket_now_slow(BucketObject *self, PyThreadState *ts, tb_ns *now)
{
    if (!seen_is_current(self, ts) && read_clock_var(self, ts) < 0)
        return -1;
    ClockObject *clock = (ClockObject *)self->seen_clock;
    PyObject *domain = NULL;
    if (clock && clock_still_valid(clock, ts))
        *now = monotonic_ns();
    else if (read_clock_slow(self->state, now, &domain) < 0)
        return -1;
    if (domain != self->domain)
        switch_clock(self, domain, *now);
    Py_XDECREF(domain);
    self->last_now = *now;
    self->has_last = true;
    return 0;
}

// The running loop's time in ns, moving the core onto that clock if it changed. 0, or -1 with an exception.
// Inlined: the fast path is a few loads and compares, then CLOCK_MONOTONIC.
static inline ALWAYS_INLINE int bucket_now(BucketObject *self, tb_ns *now)
{
    PyThreadState *ts = PyThreadState_Get();
    ClockObject *clock = (ClockObject *)self->seen_clock;
    if (clock != NULL && self->domain == NULL && seen_is_current(self, ts) && clock_still_valid(clock, ts)) {
        *now = monotonic_ns();
        self->last_now = *now;
        self->has_last = true;
        return 0;
    }
    return bucket_now_slow(self, ts, now);
}

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

// A finite number > 0; 0, or -1 with TypeError/ValueError naming the parameter.
static int positive_number(tb_state *st, const char *name, PyObject *value, double *out)
{
    if (real_number(st, name, value, out) < 0)
        return -1;
    if (!(*out > 0 && isfinite(*out))) {
        PyErr_Format(PyExc_ValueError, "%s must be finite and > 0, got %R", name, value);
        return -1;
    }
    return 0;
}

// Raises ValueError with a message that ends in the repr of a double.
static void value_error_with(const char *format, double number, PyObject *value)
{
    PyObject *shown = PyFloat_FromDouble(number);
    if (shown) {
        PyErr_Format(PyExc_ValueError, format, shown, value);
        Py_DECREF(shown);
    }
}

// A valid amount for this bucket: > 0 and <= burst. 0, or -1 with an exception.
static int parse_amount(BucketObject *self, PyObject *value, double *out)
{
    if (PyFloat_CheckExact(value))
        *out = PyFloat_AS_DOUBLE(value);
    else if (real_number(self->state, "amount", value, out) < 0)
        return -1;
    if (*out > self->core.max_amount) {
        if (self->compat)
            PyErr_SetString(PyExc_ValueError, "Can't acquire more than the maximum capacity");
        else
            value_error_with("amount must not exceed burst (%R), got %R", self->core.max_amount, value);
        return -1;
    }
    if (!(*out > 0)) {
        PyErr_Format(PyExc_ValueError, "amount must be finite and > 0, got %R", value);
        return -1;
    }
    if (*out < ldexp(self->core.max_amount, -50)) {
        PyErr_Format(PyExc_ValueError, "amount must be at least burst / 2**50 to be counted exactly, got %R", value);
        return -1;
    }
    return 0;
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
    if (self->compat) {
        PyErr_SetString(PyExc_TypeError,
                        "AsyncLimiter.acquire() takes no timeout; use aiotb.Limiter for timeouts");
        return -1;
    }
    if (x < (double)TB_MAX_SPAN / 1e9)
        *out = x;
    return 0;
}

// Hands a request that must wait to the glue: returns self._wait(amount, timeout), a coroutine.
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

typedef struct {
    double max_rate, time_period, burst, initial, ns_per_token;
} rate_spec;

// Checks one rate's parameters, named with prefix ("" or "rates[1] "); fills *out. 0, or -1 with
// TypeError/ValueError naming the parameter and its value.
static int parse_rate(tb_state *st, const char *prefix, PyObject *max_rate_arg, PyObject *period_arg,
                      PyObject *burst_arg, PyObject *initial_arg, bool compat, rate_spec *out)
{
    char name[64];
    snprintf(name, sizeof name, "%smax_rate", prefix);
    if (positive_number(st, name, max_rate_arg, &out->max_rate) < 0)
        return -1;
    out->time_period = 60;
    snprintf(name, sizeof name, "%stime_period", prefix);
    if (period_arg && positive_number(st, name, period_arg, &out->time_period) < 0)
        return -1;
    snprintf(name, sizeof name, "%sburst", prefix);
    if (burst_arg == NULL || burst_arg == Py_None) {
        out->burst = compat || out->max_rate >= 1 ? out->max_rate : 1.0;
    } else {
        if (positive_number(st, name, burst_arg, &out->burst) < 0)
            return -1;
        if (out->burst < 1) {
            PyErr_Format(PyExc_ValueError, "%s must be >= 1, the default amount, got %R", name, burst_arg);
            return -1;
        }
    }
    snprintf(name, sizeof name, "%sinitial", prefix);
    if (initial_arg == NULL || initial_arg == Py_None) {
        out->initial = out->burst;
    } else {
        if (real_number(st, name, initial_arg, &out->initial) < 0)
            return -1;
        if (!(0 <= out->initial && out->initial <= out->burst)) {
            PyObject *shown = PyFloat_FromDouble(out->burst);
            if (shown) {
                PyErr_Format(PyExc_ValueError, "%s must be between 0 and burst (%R), got %R", name, shown,
                             initial_arg);
                Py_DECREF(shown);
            }
            return -1;
        }
    }
    out->ns_per_token = out->time_period * 1e9 / out->max_rate;
    if (!(out->ns_per_token > 0 && isfinite(out->ns_per_token))) {
        PyErr_Format(PyExc_ValueError, "%smax_rate / time_period is out of range: %R / %R", prefix,
                     max_rate_arg, period_arg ? period_arg : Py_None);
        return -1;
    }
    if (!(out->burst * out->ns_per_token <= (double)TB_MAX_SPAN)) {
        PyObject *shown = PyFloat_FromDouble(out->burst);
        if (shown) {
            PyErr_Format(PyExc_ValueError, "%sburst %R would take over 73 years to refill at %R per %R s",
                         prefix, shown, max_rate_arg, period_arg ? period_arg : Py_None);
            Py_DECREF(shown);
        }
        return -1;
    }
    if (out->burst > 0x1p50) {  /* amounts below burst / 2**50 cannot be counted: 1 must be countable */
        PyObject *shown = PyFloat_FromDouble(out->burst);
        if (shown) {
            PyErr_Format(PyExc_ValueError, "%sburst must be at most 2**50, so that an amount of 1 counts "
                         "exactly, got %R", prefix, shown);
            Py_DECREF(shown);
        }
        return -1;
    }
    return 0;
}

// A window's period in whole nanoseconds, checked; 0, or -1 with ValueError.
static int window_period(double time_period, PyObject *period_arg, tb_ns *period)
{
    double ns = floor(time_period * 1e9 + 0.5);
    if (!(ns >= 1 && ns <= (double)TB_MAX_SPAN)) {
        PyErr_Format(PyExc_ValueError, "time_period must be between 1 ns and 73 years, got %R",
                     period_arg ? period_arg : Py_None);
        return -1;
    }
    *period = (tb_ns)ns;
    return 0;
}

// Sets up *core from the constructor's arguments; fills the given rates. 0, or -1 with an exception.
static int build_core(tb_state *st, PyObject *max_rate_arg, PyObject *period_arg, PyObject *burst_arg,
                      PyObject *initial_arg, bool fair, bool compat, PyObject *rates_arg, bool window,
                      tb_bucket *core, double *max_rates, double *periods)
{
    tb_order order = compat ? TB_SMALLEST_FIRST : TB_FIFO;
    rate_spec spec;
    if (rates_arg != Py_None) {
        if (max_rate_arg != NULL || period_arg != NULL || burst_arg != Py_None || initial_arg != Py_None ||
            window) {
            PyErr_SetString(PyExc_TypeError, "rates= takes the place of max_rate, time_period, burst and initial");
            return -1;
        }
        if (!PyList_Check(rates_arg) && !PyTuple_Check(rates_arg)) {
            PyErr_SetString(PyExc_TypeError, "rates must be a list or tuple of (max_rate, time_period"
                                             "[, burst[, initial]]) tuples");
            return -1;
        }
        PyObject *rates = PySequence_Fast(rates_arg, "rates");  /* a new reference to the same list or tuple */
        if (rates == NULL)
            return -1;
        Py_ssize_t count = PySequence_Fast_GET_SIZE(rates);
        int rc = -1;
        if (count < 1 || count > TB_MAX_RATES) {
            PyErr_Format(PyExc_ValueError, "rates must hold 1 to %d rates, got %zd", TB_MAX_RATES, count);
            goto rates_done;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(rates, i);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2 || PyTuple_GET_SIZE(item) > 4) {
                PyErr_Format(PyExc_TypeError, "rates[%zd] must be a tuple (max_rate, time_period[, burst[, "
                             "initial]]), got %R", i, item);
                goto rates_done;
            }
            char prefix[32];
            snprintf(prefix, sizeof prefix, "rates[%zd] ", i);
            Py_ssize_t n = PyTuple_GET_SIZE(item);
            if (parse_rate(st, prefix, PyTuple_GET_ITEM(item, 0), PyTuple_GET_ITEM(item, 1),
                           n > 2 ? PyTuple_GET_ITEM(item, 2) : NULL, n > 3 ? PyTuple_GET_ITEM(item, 3) : NULL,
                           compat, &spec) < 0)
                goto rates_done;
            if ((i == 0 ? tb_init(core, spec.ns_per_token, spec.burst, spec.initial, fair, order)
                        : tb_add_rate(core, spec.ns_per_token, spec.burst, spec.initial)) != TB_OK) {
                PyErr_SetString(PyExc_SystemError, "the core rejected checked rates");
                goto rates_done;
            }
            max_rates[i] = spec.max_rate;
            periods[i] = spec.time_period;
        }
        rc = 0;
    rates_done:
        Py_DECREF(rates);
        return rc;
    }
    if (max_rate_arg == NULL) {
        PyErr_SetString(PyExc_TypeError, "max_rate must be a real number, got None (or give rates=)");
        return -1;
    }
    if (window) {
        tb_ns period;
        if (burst_arg != Py_None || initial_arg != Py_None) {
            PyErr_SetString(PyExc_TypeError, "a window takes no burst or initial: its limit is max_rate");
            return -1;
        }
        if (parse_rate(st, "", max_rate_arg, period_arg, NULL, NULL, true, &spec) < 0 ||
            window_period(spec.time_period, period_arg, &period) < 0)
            return -1;
        tb_status status = tb_init_window(core, period, spec.max_rate, fair, order);
        if (status != TB_OK) {
            if (status == TB_ENOMEM)
                PyErr_NoMemory();
            else
                PyErr_SetString(PyExc_SystemError, "the core rejected a checked window");
            return -1;
        }
    } else {
        if (parse_rate(st, "", max_rate_arg, period_arg, burst_arg, initial_arg, compat, &spec) < 0)
            return -1;
        if (tb_init(core, spec.ns_per_token, spec.burst, spec.initial, fair, order) != TB_OK) {
            PyErr_SetString(PyExc_SystemError, "the core rejected a checked rate");
            return -1;
        }
    }
    max_rates[0] = spec.max_rate;
    periods[0] = spec.time_period;
    return 0;
}

static PyObject *bucket_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"max_rate", "time_period", "burst", "initial", "fair", "compat",
                               "rates", "window", NULL};
    PyObject *max_rate_arg = NULL, *period_arg = NULL, *burst_arg = Py_None, *initial_arg = Py_None;
    PyObject *fair_arg = Py_True, *compat_arg = Py_False, *rates_arg = Py_None, *window_arg = Py_False;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOOOOOOO:Bucket", keywords, &max_rate_arg, &period_arg,
                                     &burst_arg, &initial_arg, &fair_arg, &compat_arg, &rates_arg, &window_arg))
        return NULL;
    if (max_rate_arg == Py_None)
        max_rate_arg = NULL;
    if (period_arg == Py_None)
        period_arg = NULL;
    PyObject *module = PyType_GetModuleByDef(type, &tokenbucket_module);
    if (module == NULL)
        return NULL;
    tb_state *st = PyModule_GetState(module);
    if (!PyBool_Check(fair_arg))
        return PyErr_Format(PyExc_TypeError, "fair must be a bool, got %R", fair_arg);
    if (!PyBool_Check(compat_arg))
        return PyErr_Format(PyExc_TypeError, "compat must be a bool, got %R", compat_arg);
    if (!PyBool_Check(window_arg))
        return PyErr_Format(PyExc_TypeError, "window must be a bool, got %R", window_arg);

    tb_bucket core;
    double max_rates[TB_MAX_RATES] = {0}, periods[TB_MAX_RATES] = {0};
    if (build_core(st, max_rate_arg, period_arg, burst_arg, initial_arg, fair_arg == Py_True,
                   compat_arg == Py_True, rates_arg, window_arg == Py_True, &core, max_rates, periods) < 0)
        return NULL;
    tb_set_late_credit(&core, LATE_CREDIT_TOKENS);
    BucketObject *self = (BucketObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        tb_release(&core);
        return NULL;
    }
    self->state = st;
    self->core = core;  /* the bucket now owns the core's memory */
    memcpy(self->max_rates, max_rates, sizeof max_rates);
    memcpy(self->periods, periods, sizeof periods);
    self->compat = compat_arg == Py_True;
    return (PyObject *)self;
}

static int bucket_traverse(PyObject *op, visitproc visit, void *arg)
{
    BucketObject *self = (BucketObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->domain);
    Py_VISIT(self->seen_clock);
    for (uint32_t s = self->core.head; s != TB_NIL; s = self->core.slots[s].next)
        Py_VISIT((PyObject *)self->core.slots[s].handle);
    return 0;
}

// Drops every queued waiter's handle; the waiters are forgotten, not granted.
static void drop_waiters(BucketObject *self)
{
    while (self->core.head != TB_NIL) {
        PyObject *handle = tb_pop_head(&self->core, self->last_now, false);
        Py_DECREF(handle);
    }
}

static int bucket_clear(PyObject *op)
{
    BucketObject *self = (BucketObject *)op;
    drop_waiters(self);
    Py_CLEAR(self->domain);
    Py_CLEAR(self->seen_clock);
    return 0;
}

static void bucket_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    (void)bucket_clear(op);
    tb_release(&((BucketObject *)op)->core);
    tp->tp_free(op);
    Py_DECREF(tp);
}

// __aenter__(): the ready awaitable if a token is granted now, else the glue's wait.
static PyObject *bucket_aenter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (bucket_now(self, &now) < 0)
        return NULL;
    if (take_counted(self, 1.0, now))
        return Py_NewRef(self->state->ready);
    return wait_for_grant(self, 1.0, Py_None);
}

// __aexit__(*exc_info): nothing to give back; tokens pace starts, not durations.
static PyObject *bucket_aexit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args, (void)nargs;
    return Py_NewRef(((BucketObject *)op)->state->ready);
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
        if (take_counted(bucket, self->amount, now)) {
            *result = Py_NewRef(Py_None);
            return PYGEN_RETURN;
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

// acquire(amount=1, timeout=None): an awaitable that takes the tokens when awaited. Arguments are checked now.
static PyObject *bucket_acquire(PyObject *op, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    BucketObject *self = (BucketObject *)op;
    PyObject *amount_arg = NULL, *timeout_arg = Py_None;
    double amount = 1.0, timeout;
    if (amount_and_timeout("acquire", args, PyVectorcall_NARGS(nargsf), kwnames, true, &amount_arg, &timeout_arg) < 0)
        return NULL;
    if (amount_arg && parse_amount(self, amount_arg, &amount) < 0)
        return NULL;
    if (parse_timeout(self, timeout_arg, &timeout) < 0)
        return NULL;
    AcquisitionObject *acquisition = PyObject_GC_New(AcquisitionObject, self->state->acquisition_type);
    if (acquisition == NULL)
        return NULL;
    acquisition->bucket = (BucketObject *)Py_NewRef(self);
    acquisition->amount = amount;
    acquisition->timeout = timeout < 0 ? Py_NewRef(Py_None) : PyFloat_FromDouble(timeout);
    acquisition->waiting = NULL;
    acquisition->started = false;
    PyObject_GC_Track((PyObject *)acquisition);
    if (acquisition->timeout == NULL)
        Py_CLEAR(acquisition);
    return (PyObject *)acquisition;
}

// Shared by try_acquire and has_capacity: parses amount and reads the clock. 0, or -1.
static int amount_now(BucketObject *self, const char *method, PyObject *const *args, Py_ssize_t nargsf,
                      PyObject *kwnames, double *amount, tb_ns *now)
{
    PyObject *amount_arg = NULL, *unused = NULL;
    *amount = 1.0;
    if (amount_and_timeout(method, args, PyVectorcall_NARGS(nargsf), kwnames, false, &amount_arg, &unused) < 0)
        return -1;
    if (amount_arg && parse_amount(self, amount_arg, amount) < 0)
        return -1;
    return bucket_now(self, now);
}

// try_acquire(amount=1) -> bool: takes the tokens now, or returns False.
static PyObject *bucket_try_acquire(PyObject *op, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    tb_ns now;
    if (amount_now(self, "try_acquire", args, nargsf, kwnames, &amount, &now) < 0)
        return NULL;
    return PyBool_FromLong(take_counted(self, amount, now));
}

// has_capacity(amount=1) -> bool: whether acquire(amount) would go through now; takes nothing.
static PyObject *bucket_has_capacity(PyObject *op, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    tb_ns now;
    if (self->compat) {  /* aiolimiter answers False above capacity */
        PyObject *asked_arg = NULL, *unused = NULL;
        if (amount_and_timeout("has_capacity", args, PyVectorcall_NARGS(nargsf), kwnames, false, &asked_arg,
                               &unused) < 0)
            return NULL;
        if (asked_arg && !PyBool_Check(asked_arg) && (PyFloat_Check(asked_arg) || PyLong_Check(asked_arg))) {
            double asked = PyFloat_AsDouble(asked_arg);
            if ((asked == -1.0 && PyErr_Occurred()) || asked > self->core.max_amount) {
                PyErr_Clear();
                Py_RETURN_FALSE;
            }
        }
    }
    if (amount_now(self, "has_capacity", args, nargsf, kwnames, &amount, &now) < 0)
        return NULL;
    return PyBool_FromLong(tb_can_take(&self->core, amount, now));
}

// _enqueue(amount, timeout, handle) -> id: queues a waiter; TimeoutError if it cannot be granted in time.
static PyObject *bucket_enqueue(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError, "_enqueue() takes 3 arguments (%zd given)", nargs);
    double amount = PyFloat_AsDouble(args[0]);
    if (amount == -1.0 && PyErr_Occurred())
        return NULL;
    tb_ns now, deadline = TB_NEVER;
    if (bucket_now(self, &now) < 0)
        return NULL;
    if (args[1] != Py_None) {
        double timeout = PyFloat_AsDouble(args[1]);
        tb_ns span;
        if ((timeout == -1.0 && PyErr_Occurred()) || seconds_to_ns(timeout, &span) < 0)
            return NULL;
        deadline = now + span;
    }
    tb_id id;
    switch (tb_enqueue(&self->core, amount, now, deadline, args[2], &id)) {
    case TB_OK:
        Py_INCREF(args[2]);
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
    PyObject *handle = tb_withdraw(&self->core, (tb_id)id);
    Py_XDECREF(handle);
    return PyBool_FromLong(handle != NULL);
}

// The clock's time, or the loop time at if that is later (a timer the loop ran as due although
// it is up to its clock resolution early); 0, or -1 with an exception.
static int now_at_least(BucketObject *self, PyObject *at, tb_ns *now)
{
    if (bucket_now(self, now) < 0)
        return -1;
    if (at == Py_None)
        return 0;
    double seconds = PyFloat_AsDouble(at);
    tb_ns due;
    if ((seconds == -1.0 && PyErr_Occurred()) || seconds_to_ns(seconds, &due) < 0)
        return -1;
    if (due > *now)
        *now = due;
    return 0;
}

// _ready_head(at=None) -> handle or None: the head waiter if it can be granted now (or at at).
static PyObject *bucket_ready_head(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError, "_ready_head() takes at most 1 argument (%zd given)", nargs);
    if (now_at_least(self, nargs ? args[0] : Py_None, &now) < 0)
        return NULL;
    PyObject *handle = tb_ready_head(&self->core, now);
    return Py_NewRef(handle ? handle : Py_None);
}

// _pop_head(grant, at=None) -> handle: removes the head waiter, taking its tokens now (or at at) if grant.
static PyObject *bucket_pop_head(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs < 1 || nargs > 2)
        return PyErr_Format(PyExc_TypeError, "_pop_head() takes 1 or 2 arguments (%zd given)", nargs);
    int grant = PyObject_IsTrue(args[0]);
    if (grant < 0)
        return NULL;
    tb_ns now;
    if (now_at_least(self, nargs > 1 ? args[1] : Py_None, &now) < 0)  /* may run Python: look at the queue after */
        return NULL;
    if (self->core.head == TB_NIL) {
        PyErr_SetString(PyExc_IndexError, "no waiter is queued");
        return NULL;
    }
    if (grant) {
        self->granted++;
        self->granted_tokens += self->core.slots[self->core.head].amount;
    }
    return tb_pop_head(&self->core, now, grant);  /* the queue's reference passes to the caller */
}

// _head_ready_at() -> float or None: the loop time at which the head waiter can be granted.
static PyObject *bucket_head_ready_at(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (bucket_now(self, &now) < 0)
        return NULL;
    tb_ns at = tb_head_ready_at(&self->core, now);
    if (at == TB_NEVER)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(ns_to_seconds(at));
}

// _refund(amount): gives back tokens granted to a waiter that never used them.
static PyObject *bucket_refund(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double amount = PyFloat_AsDouble(arg);
    if (amount == -1.0 && PyErr_Occurred())
        return NULL;
    tb_ns now;
    if (bucket_now(self, &now) < 0)
        return NULL;
    tb_refund(&self->core, amount, now);
    self->granted--;
    self->granted_tokens -= amount;
    Py_RETURN_NONE;
}

// _granted() -> (count, tokens): the grants kept so far.
static PyObject *bucket_granted(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    return Py_BuildValue("(Kd)", (unsigned long long)self->granted, self->granted_tokens);
}

// _set_rate(index, max_rate, time_period, burst): changes a rate (or the window) as of now.
static PyObject *bucket_set_rate(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "_set_rate() takes 4 arguments (%zd given)", nargs);
    Py_ssize_t index = PyLong_AsSsize_t(args[0]);
    if (index == -1 && PyErr_Occurred())
        return NULL;
    bool window = self->core.window.period != 0;
    if (index < 0 || index >= (window ? 1 : (Py_ssize_t)self->core.nrates))
        return PyErr_Format(PyExc_IndexError, "index must name one of the limiter's rates, got %zd", index);
    rate_spec spec;
    if (parse_rate(self->state, "", args[1], args[2] == Py_None ? NULL : args[2],
                   window ? NULL : args[3], NULL, window || self->compat, &spec) < 0)
        return NULL;
    tb_ns now;
    if (bucket_now(self, &now) < 0)
        return NULL;
    if (window) {
        tb_ns period;
        if (args[3] != Py_None)
            return PyErr_Format(PyExc_TypeError, "a window takes no burst: its limit is max_rate");
        if (window_period(spec.time_period, args[2], &period) < 0)
            return NULL;
        (void)tb_set_window(&self->core, period, spec.max_rate);
    } else {
        (void)tb_set_rate(&self->core, (uint32_t)index, spec.ns_per_token, spec.burst, now);
    }
    self->max_rates[index] = spec.max_rate;
    self->periods[index] = spec.time_period;
    Py_RETURN_NONE;
}

// _pause_until(when): no grant before the loop time when, in seconds.
static PyObject *bucket_pause_until(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double when;
    tb_ns now, until;
    if (real_number(self->state, "when", arg, &when) < 0)
        return NULL;
    if (isnan(when))
        return PyErr_Format(PyExc_ValueError, "when must be a loop time, got %R", arg);
    if (bucket_now(self, &now) < 0)
        return NULL;
    if (when >= (double)TB_MAX_SPAN / 1e9)
        return PyErr_Format(PyExc_ValueError, "when is too far ahead: %R", arg);
    if (when > -(double)TB_MAX_SPAN / 1e9 && seconds_to_ns(when, &until) == 0)
        tb_pause_until(&self->core, until);
    Py_RETURN_NONE;
}

// _withdraw_stranded() -> (handle, never) or None: a waiter that can no longer be granted as
// promised; never is True if it can never be granted at all.
static PyObject *bucket_withdraw_stranded(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    bool never;
    if (bucket_now(self, &now) < 0)
        return NULL;
    PyObject *handle = tb_withdraw_stranded(&self->core, now, &never);
    if (handle == NULL)
        Py_RETURN_NONE;
    PyObject *result = Py_BuildValue("(OO)", handle, never ? Py_True : Py_False);
    Py_DECREF(handle);  /* the queue's reference */
    return result;
}

// _reserve(amount, handle) -> (id, ready_at): queues a waiter promised its projected grant.
static PyObject *bucket_reserve(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "_reserve() takes 2 arguments (%zd given)", nargs);
    if (self->compat)
        return PyErr_Format(PyExc_TypeError, "AsyncLimiter has no reservations; use aiotb.Limiter");
    double amount;
    tb_ns now;
    if (parse_amount(self, args[0], &amount) < 0 || bucket_now(self, &now) < 0)
        return NULL;
    tb_ns ready = tb_projected_grant(&self->core, amount, now);
    if (ready == TB_NEVER)
        return PyErr_NoMemory();
    tb_id id;
    tb_status status = tb_enqueue(&self->core, amount, now, ready, args[1], &id);
    if (status != TB_OK)
        return status == TB_ENOMEM ? PyErr_NoMemory()
                                   : PyErr_Format(PyExc_SystemError, "the core broke its own projection");
    Py_INCREF(args[1]);
    return Py_BuildValue("(Kd)", (unsigned long long)id, ns_to_seconds(ready));
}

static PyObject *bucket_get_rates(PyObject *op, void *closure)
{
    (void)closure;
    BucketObject *self = (BucketObject *)op;
    PyObject *rates = PyTuple_New(self->core.nrates);
    for (uint32_t i = 0; rates && i < self->core.nrates; i++) {
        PyObject *rate = Py_BuildValue("(ddd)", self->max_rates[i], self->periods[i], self->core.rates[i].burst);
        if (rate == NULL)
            Py_CLEAR(rates);
        else
            PyTuple_SET_ITEM(rates, i, rate);
    }
    return rates;
}

static PyObject *bucket_get_max_rate(PyObject *op, void *closure)
{
    (void)closure;
    return PyFloat_FromDouble(((BucketObject *)op)->max_rates[0]);
}

static PyObject *bucket_get_time_period(PyObject *op, void *closure)
{
    (void)closure;
    return PyFloat_FromDouble(((BucketObject *)op)->periods[0]);
}

static PyObject *bucket_get_burst(PyObject *op, void *closure)
{
    (void)closure;
    return PyFloat_FromDouble(((BucketObject *)op)->core.max_amount);
}

static PyObject *bucket_get_rate(PyObject *op, void *closure)
{
    (void)closure;
    BucketObject *self = (BucketObject *)op;
    return PyFloat_FromDouble(self->max_rates[0] / self->periods[0]);
}

static PyObject *bucket_get_fair(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((BucketObject *)op)->core.fair);
}

static PyObject *bucket_get_tokens(PyObject *op, void *closure)
{
    (void)closure;
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (bucket_now(self, &now) < 0)
        return NULL;
    return PyFloat_FromDouble(tb_tokens(&self->core, now));
}

static PyObject *bucket_get_waiting(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(((BucketObject *)op)->core.waiting);
}

static PyGetSetDef bucket_getset[] = {
    {"max_rate", bucket_get_max_rate, NULL, "Tokens per time_period.", NULL},
    {"time_period", bucket_get_time_period, NULL, "The period of max_rate, in seconds.", NULL},
    {"burst", bucket_get_burst, NULL, "Capacity: the most tokens available at once.", NULL},
    {"rate", bucket_get_rate, NULL, "Refill rate in tokens per second.", NULL},
    {"fair", bucket_get_fair, NULL, "Whether newcomers queue behind waiters.", NULL},
    {"tokens", bucket_get_tokens, NULL, "Tokens available now.", NULL},
    {"waiting", bucket_get_waiting, NULL, "Number of queued waiters.", NULL},
    {"rates", bucket_get_rates, NULL, "Every rate as (max_rate, time_period, burst).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *bucket_init_subclass(PyObject *cls, PyObject *Py_UNUSED(ignored));

static PyMethodDef bucket_methods[] = {
    {"__init_subclass__", bucket_init_subclass, METH_CLASS | METH_NOARGS, "__init_subclass__($cls, /)\n--\n\nGives the new class its own descriptor of each method it inherits unchanged."},
    {"__aenter__", bucket_aenter, METH_NOARGS, "__aenter__($self, /)\n--\n\nTakes one token: returns a done awaitable, or the wait for it."},
    {"__aexit__", (PyCFunction)(void (*)(void))bucket_aexit, METH_FASTCALL, "__aexit__($self, /, *exc_info)\n--\n\nGives nothing back: tokens pace starts."},
    {"acquire", (PyCFunction)(void (*)(void))bucket_acquire, METH_FASTCALL | METH_KEYWORDS, "acquire($self, /, amount=1, timeout=None)\n--\n\nWaits for amount tokens, taken when awaited; TimeoutError at once if they cannot come within timeout."},
    {"try_acquire", (PyCFunction)(void (*)(void))bucket_try_acquire, METH_FASTCALL | METH_KEYWORDS, "try_acquire($self, /, amount=1)\n--\n\nTakes amount tokens now if a newcomer may, else returns False."},
    {"has_capacity", (PyCFunction)(void (*)(void))bucket_has_capacity, METH_FASTCALL | METH_KEYWORDS, "has_capacity($self, /, amount=1)\n--\n\nWhether acquire(amount) would go through now; takes nothing."},
    {"_enqueue", (PyCFunction)(void (*)(void))bucket_enqueue, METH_FASTCALL, NULL},
    {"_withdraw", bucket_withdraw, METH_O, NULL},
    {"_ready_head", (PyCFunction)(void (*)(void))bucket_ready_head, METH_FASTCALL, NULL},
    {"_pop_head", (PyCFunction)(void (*)(void))bucket_pop_head, METH_FASTCALL, NULL},
    {"_head_ready_at", bucket_head_ready_at, METH_NOARGS, NULL},
    {"_refund", bucket_refund, METH_O, NULL},
    {"_granted", bucket_granted, METH_NOARGS, NULL},
    {"_set_rate", (PyCFunction)(void (*)(void))bucket_set_rate, METH_FASTCALL, NULL},
    {"_pause_until", bucket_pause_until, METH_O, NULL},
    {"_withdraw_stranded", bucket_withdraw_stranded, METH_NOARGS, NULL},
    {"_reserve", (PyCFunction)(void (*)(void))bucket_reserve, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

// __init_subclass__(): gives the new class its own descriptor of each Bucket method it inherits unchanged.
// Calling a method descriptor, as `async with` does with __aenter__, first checks that self is an
// instance of the descriptor's class: one compare when self's class is that very class, else a walk
// up self's MRO, paid by every `async with` on a subclass such as Limiter. None, or NULL with an exception.
static PyObject *bucket_init_subclass(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    for (PyMethodDef *def = bucket_methods; def->ml_name != NULL; def++) {
        PyObject *inherited = PyObject_GetAttrString(cls, def->ml_name);
        if (inherited == NULL)
            return NULL;
        bool unchanged = Py_IS_TYPE(inherited, &PyMethodDescr_Type) &&
                         ((PyMethodDescrObject *)inherited)->d_method == def;
        Py_DECREF(inherited);
        if (!unchanged)  /* overridden on the way, or a class method */
            continue;
        PyObject *own = PyDescr_NewMethod((PyTypeObject *)cls, def);
        int rc = own ? PyObject_SetAttrString(cls, def->ml_name, own) : -1;
        Py_XDECREF(own);
        if (rc < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyType_Slot bucket_slots[] = {
    {Py_tp_new, bucket_new},
    {Py_tp_traverse, bucket_traverse},
    {Py_tp_clear, bucket_clear},
    {Py_tp_dealloc, bucket_dealloc},
    {Py_tp_methods, bucket_methods},
    {Py_tp_getset, bucket_getset},
    {Py_tp_doc, (void *)"The limiter's engine: token bucket, clock and fast path; "
                        "subclasses provide the slow path as _wait(amount, timeout)."},
    {0, NULL},
};

static PyType_Spec bucket_spec = {
    .name = "aiotb._tokenbucket.Bucket",
    .basicsize = sizeof(BucketObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = bucket_slots,
};

/* ---- the module ---- */

// Returns a new reference to module.attribute, importing the module.
static PyObject *import_attribute(const char *module_name, const char *attribute)
{
    PyObject *module = PyImport_ImportModule(module_name);
    if (module == NULL)
        return NULL;
    PyObject *value = PyObject_GetAttrString(module, attribute);
    Py_DECREF(module);
    return value;
}

static int tokenbucket_exec(PyObject *module)
{
    tb_state *st = PyModule_GetState(module);
    st->ready_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &ready_spec, NULL);
    st->clock_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &clock_spec, NULL);
    st->bucket_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bucket_spec, NULL);
    st->acquisition_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &acquisition_spec, NULL);
    if (!st->ready_type || !st->clock_type || !st->bucket_type || !st->acquisition_type)
        return -1;
    st->ready = PyType_GenericAlloc(st->ready_type, 0);
    st->clock_var = PyContextVar_New("aiotb_loop_clock", NULL);
    st->get_running_loop = import_attribute("asyncio.events", "_get_running_loop");
    st->is_monotonic_loop = import_attribute("aiotb._clock", "is_monotonic_loop");
    st->real_type = import_attribute("numbers", "Real");
    st->str_time = PyUnicode_InternFromString("time");
    st->str_wait = PyUnicode_InternFromString("_wait");
    st->str_throw = PyUnicode_InternFromString("throw");
    st->str_close = PyUnicode_InternFromString("close");
    if (!st->ready || !st->clock_var || !st->get_running_loop || !st->is_monotonic_loop ||
        !st->real_type || !st->str_time || !st->str_wait || !st->str_throw || !st->str_close)
        return -1;
    if (PyModule_AddType(module, st->bucket_type) < 0 ||
        PyModule_AddObjectRef(module, "READY", st->ready) < 0 ||
        PyModule_AddStringConstant(module, "IMPLEMENTATION", "c") < 0)
        return -1;
    PyObject *max_span = PyLong_FromLongLong(TB_MAX_SPAN);
    int rc = max_span ? PyModule_AddObjectRef(module, "MAX_SPAN", max_span) : -1;
    Py_XDECREF(max_span);
    return rc;
}

static int tokenbucket_traverse(PyObject *module, visitproc visit, void *arg)
{
    tb_state *st = PyModule_GetState(module);
    Py_VISIT(st->bucket_type);
    Py_VISIT(st->ready_type);
    Py_VISIT(st->clock_type);
    Py_VISIT(st->acquisition_type);
    Py_VISIT(st->ready);
    Py_VISIT(st->clock_var);
    Py_VISIT(st->latest_clock);
    Py_VISIT(st->get_running_loop);
    Py_VISIT(st->is_monotonic_loop);
    Py_VISIT(st->real_type);
    return 0;
}

static int tokenbucket_clear(PyObject *module)
{
    tb_state *st = PyModule_GetState(module);
    Py_CLEAR(st->bucket_type);
    Py_CLEAR(st->ready_type);
    Py_CLEAR(st->clock_type);
    Py_CLEAR(st->acquisition_type);
    Py_CLEAR(st->ready);
    Py_CLEAR(st->clock_var);
    Py_CLEAR(st->latest_clock);
    Py_CLEAR(st->get_running_loop);
    Py_CLEAR(st->is_monotonic_loop);
    Py_CLEAR(st->real_type);
    Py_CLEAR(st->str_time);
    Py_CLEAR(st->str_wait);
    Py_CLEAR(st->str_throw);
    Py_CLEAR(st->str_close);
    return 0;
}

static void tokenbucket_free(void *module)
{
    (void)tokenbucket_clear((PyObject *)module);
}

static PyModuleDef_Slot tokenbucket_slots[] = {
    {Py_mod_exec, tokenbucket_exec},
    {0, NULL},
};

static PyModuleDef tokenbucket_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aiotb._tokenbucket",
    .m_doc = "The C engine of aiotb: a token bucket with a fair waiter queue.",
    .m_size = sizeof(tb_state),
    .m_slots = tokenbucket_slots,
    .m_traverse = tokenbucket_traverse,
    .m_clear = tokenbucket_clear,
    .m_free = tokenbucket_free,
};

PyMODINIT_FUNC PyInit__tokenbucket(void)
{
    return PyModuleDef_Init(&tokenbucket_module);
}
