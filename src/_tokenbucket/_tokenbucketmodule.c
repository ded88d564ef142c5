/* aiotb._tokenbucket: the Python binding of the token-bucket core.
 *
 * Bucket owns a tb_bucket (limits and waiter queue, src/_tokenbucket/queue.h) and reads the running
 * loop's clock (binding/clock.h). An uncontended acquire takes its tokens here and allocates nothing;
 * a request that must wait goes to the limiter's dispatcher (aiotb/_dispatch.py) through
 * Limiter._wait, which then drives the queue with one call per decision: _enqueue, _grant_due,
 * _withdraw, _refund, _reckon_late. The concerns live in the headers of binding/, one translation unit: state, clock, params,
 * awaitables, the queue's calls for the dispatcher (waiters.h), the adapters' reading of a server's rate-limit
 * headers (follow.h), the precise timer and the shared segment (Segment,
 * over shm.h, and a bucket's fast path over it, shared.h), `async with`'s two methods bound once per bucket
 * before 3.14 (bound.h); this file holds the Bucket type and the module. */
#include "binding/state.h"
#include "binding/clock.h"
#include "binding/params.h"
#include "binding/segment.h"
#include "binding/shared.h"
#include "binding/awaitables.h"
#include "binding/waiters.h"
#include "binding/follow.h"
#include "binding/lease.h"
#include "binding/timer.h"
#ifdef AIOTB_BIND_ONCE
#include "binding/bound.h"
#endif

static PyModuleDef tokenbucket_module;

/* ---- Bucket: construction and lifetime ---- */

// Bucket(*args, **kwargs): an unconfigured bucket; the subclass's __init__ configures it, whatever it takes.
static PyObject *bucket_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args, (void)kwargs;
    PyObject *module = PyType_GetModuleByDef(type, &tokenbucket_module);
    if (module == NULL)
        return NULL;
    BucketObject *self = (BucketObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->state = PyModule_GetState(module);
    return (PyObject *)self;
}

// Converts a core status after a checked call: 0 for TB_OK, else -1 with MemoryError or SystemError.
static int core_status(tb_status status)
{
    if (status == TB_OK)
        return 0;
    if (status == TB_ENOMEM)
        PyErr_NoMemory();
    else
        PyErr_Format(PyExc_SystemError, "the core rejected checked parameters (status %d)", (int)status);
    return -1;
}

// Sets up core from normalised rates ((ns_per_token, burst, initial), ...) or window (period_ns, limit).
// 0, or -1 with an exception.
static int configure_core(tb_bucket *core, PyObject *rates, PyObject *window, bool fair, tb_order order)
{
    if (window != Py_None) {
        long long period;
        double limit;
        if (!PyArg_ParseTuple(window, "Ld:window", &period, &limit))
            return -1;
        return core_status(tb_init_window(core, period, limit, fair, order));
    }
    if (!PyTuple_Check(rates) || PyTuple_GET_SIZE(rates) < 1 || PyTuple_GET_SIZE(rates) > TB_MAX_RATES) {
        PyErr_Format(PyExc_TypeError, "rates must be a tuple of 1 to %d rates, got %R", TB_MAX_RATES, rates);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(rates); i++) {
        double ns_per_token, burst, initial;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(rates, i), "ddd:rate", &ns_per_token, &burst, &initial))
            goto fail;
        tb_status status = i == 0 ? tb_init(core, ns_per_token, burst, initial, fair, order)
                                  : tb_add_rate(core, ns_per_token, burst, initial);
        if (core_status(status) < 0)
            goto fail;
    }
    return 0;
fail:
    tb_release(core);
    return -1;
}

// _configure(rates, window, fair, smallest_first): sets the limits once, from values checked by the caller.
static PyObject *bucket_configure(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "_configure() takes 4 arguments (%zd given)", nargs);
    if (self->configured)
        return PyErr_Format(PyExc_RuntimeError, "%s is configured already", Py_TYPE(op)->tp_name);
    int fair = PyObject_IsTrue(args[2]), smallest_first = PyObject_IsTrue(args[3]);
    if (fair < 0 || smallest_first < 0)
        return NULL;
    tb_bucket core = {0};  /* configure_core's failures release it, set or not */
    if (configure_core(&core, args[0], args[1], fair, smallest_first ? TB_SMALLEST_FIRST : TB_FIFO) < 0)
        return NULL;
    tb_set_late_credit(&core, LATE_CREDIT_TOKENS);
    self->core = core;  /* the bucket now owns the core's memory */
    self->configured = true;
    Py_RETURN_NONE;
}

static int bucket_traverse(PyObject *op, visitproc visit, void *arg)
{
    BucketObject *self = (BucketObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->domain);
    Py_VISIT(self->segment);
    Py_VISIT(self->shared_error);
#ifdef AIOTB_BIND_ONCE
    Py_VISIT(self->entry);
    Py_VISIT(self->exit);
#endif
    if (self->configured)
        for (uint32_t s = self->core.head; s != TB_NIL; s = self->core.slots[s].next)
            Py_VISIT((PyObject *)self->core.slots[s].handle);
    return 0;
}

static int bucket_clear(PyObject *op)
{
    BucketObject *self = (BucketObject *)op;
    while (self->configured && self->core.waiting > 0)  /* forgotten, not granted */
        Py_DECREF((PyObject *)tb_withdraw_head(&self->core));
    Py_CLEAR(self->domain);
    Py_CLEAR(self->segment);
    Py_CLEAR(self->shared_error);
#ifdef AIOTB_BIND_ONCE
    Py_CLEAR(self->entry);
    Py_CLEAR(self->exit);
#endif
    return 0;
}

static void bucket_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    (void)bucket_clear(op);
    if (((BucketObject *)op)->configured)
        tb_release(&((BucketObject *)op)->core);
    tp->tp_free(op);
    Py_DECREF(tp);
}

/* ---- Bucket: the hot path ---- */

// Whether the grants of `async with` are held until its block exits: a window's are.
static inline bool holds_grants(const BucketObject *self)
{
    return self->core.limits.window.period != 0;
}

// __aenter__ when no token is granted now: the limiter's wait, for a window one that holds the token until __aexit__.
NOINLINE static PyObject *aenter_wait(BucketObject *self)
{
    double amount;
    if (default_amount(self, &amount) < 0)
        return NULL;
    return holds_grants(self) ? wait_to_hold(self, amount) : wait_for_grant(self, amount, Py_None);
}

// __aenter__ at now for a bucket over a shared segment or a window: the ready awaitable if a token is granted,
// a window's held until __aexit__; else the limiter's wait.
NOINLINE static PyObject *aenter_shared_or_window(BucketObject *self, tb_ns now)
{
    int taken = self->resuming && self->core.fair ? 0 : newcomer_take(self, 1.0, now);
    if (taken < 0)
        return NULL;
    if (!taken)
        return aenter_wait(self);
    if (holds_grants(self))
        tb_hold(&self->core, 1.0);
    return Py_NewRef(self->state->ready);
}

// __aenter__(): the ready awaitable if a token is granted now, else the limiter's wait; a window
// holds the token until __aexit__. The core's own rates take the token here; the rest is out of line.
FLATTEN static PyObject *bucket_aenter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (!self->configured)
        return not_configured(self), NULL;
    if (bucket_now(self, &now) < 0)
        return NULL;
    if (self->segment != NULL || holds_grants(self))
        return aenter_shared_or_window(self, now);
    if ((self->resuming && self->core.fair) || !tb_take(&self->core, 1.0, now))
        return aenter_wait(self);
    return Py_NewRef(self->state->ready);
}

// A window's held token leaves it a period from now (out of line: bucket_aexit keeps no frame for it).
// The ready awaitable, or NULL with an exception.
COLD static PyObject *window_exit(BucketObject *self)
{
    tb_ns now;
    if (bucket_now(self, &now) < 0)
        return NULL;
    tb_end_hold(&self->core, 1.0, now);
    return Py_NewRef(self->state->ready);
}

// __aexit__(*exc_info): a window's held token leaves it a period from now; else nothing to give
// back, as tokens pace starts, not durations. An unconfigured bucket's core is all zeros: no window.
static PyObject *bucket_aexit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    BucketObject *self = (BucketObject *)op;
    (void)args, (void)nargs;
    if (holds_grants(self))
        return window_exit(self);
    return Py_NewRef(self->state->ready);
}

// acquire(amount=1, timeout=None): an awaitable that takes the tokens when awaited. Arguments are checked now.
static PyObject *bucket_acquire(PyObject *op, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    BucketObject *self = (BucketObject *)op;
    PyObject *amount_arg = NULL, *timeout_arg = Py_None;
    double amount, timeout;
    if (amount_and_timeout("acquire", args, PyVectorcall_NARGS(nargsf), kwnames, true, &amount_arg, &timeout_arg) < 0)
        return NULL;
    if (!self->configured)
        return not_configured(self), NULL;
    if ((amount_arg ? parse_amount(self, amount_arg, &amount) : default_amount(self, &amount)) < 0)
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
    acquisition->started = acquisition->timeout == NULL;  /* a failed one is dropped without a warning */
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
    if (amount_and_timeout(method, args, PyVectorcall_NARGS(nargsf), kwnames, false, &amount_arg, &unused) < 0)
        return -1;
    if (!self->configured)
        return not_configured(self);
    if ((amount_arg ? parse_amount(self, amount_arg, amount) : default_amount(self, amount)) < 0)
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
    int taken = newcomer_take(self, amount, now);
    return taken < 0 ? NULL : PyBool_FromLong(taken);
}

// has_capacity(amount=1) -> bool: whether acquire(amount) would go through now; takes nothing.
static PyObject *bucket_has_capacity(PyObject *op, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    BucketObject *self = (BucketObject *)op;
    double amount;
    tb_ns now;
    if (amount_now(self, "has_capacity", args, nargsf, kwnames, &amount, &now) < 0)
        return NULL;
    return PyBool_FromLong(tb_can_take(&self->core, amount, now));
}

/* ---- Bucket: changes of the limits ---- */

// _set_rate(index, ns_per_token, burst): changes a rate as of now, from values checked by the caller.
static PyObject *bucket_set_rate(PyObject *op, PyObject *args)
{
    BucketObject *self = (BucketObject *)op;
    unsigned int index;
    double ns_per_token, burst;
    tb_ns now;
    if (!PyArg_ParseTuple(args, "Idd:_set_rate", &index, &ns_per_token, &burst) || configured_now(self, &now) < 0)
        return NULL;
    if (core_status(tb_set_rate(&self->core, index, ns_per_token, burst, now)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

// _set_window(period_ns, limit): changes the window, from values checked by the caller.
static PyObject *bucket_set_window(PyObject *op, PyObject *args)
{
    BucketObject *self = (BucketObject *)op;
    long long period;
    double limit;
    if (!PyArg_ParseTuple(args, "Ld:_set_window", &period, &limit))
        return NULL;
    if (!self->configured)
        return not_configured(self), NULL;
    if (core_status(tb_set_window(&self->core, period, limit)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

// _pause_until(when): no grant before the loop time when, in seconds (a float checked by the caller).
static PyObject *bucket_pause_until(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double when = PyFloat_AsDouble(arg);
    tb_ns now, until;
    if ((when == -1.0 && PyErr_Occurred()) || configured_now(self, &now) < 0)
        return NULL;
    if (when >= (double)TB_MAX_SPAN / 1e9)
        return PyErr_Format(PyExc_ValueError, "when is too far ahead: %R", arg);
    if (when > -(double)TB_MAX_SPAN / 1e9 && seconds_to_ns(when, &until) == 0)
        tb_pause_until(&self->core, until);
    Py_RETURN_NONE;
}

// _limit_until(tokens, when, slack) -> as tb_limit_until's: grants before the loop time when take at most
// tokens in all, as tb_limit_until says, slack in seconds; floats checked by the caller.
static PyObject *bucket_limit_until(PyObject *op, PyObject *args)
{
    BucketObject *self = (BucketObject *)op;
    double tokens, when, slack;
    tb_ns now, until, slack_ns;
    if (!PyArg_ParseTuple(args, "ddd:_limit_until", &tokens, &when, &slack) || configured_now(self, &now) < 0)
        return NULL;
    if (when >= (double)TB_MAX_SPAN / 1e9 || slack >= (double)TB_MAX_SPAN / 1e9)
        return PyErr_Format(PyExc_ValueError, "when or slack is too far ahead: %R", args);
    if (when <= -(double)TB_MAX_SPAN / 1e9)
        Py_RETURN_FALSE;  /* ended long before any reading of the clock */
    if (seconds_to_ns(when, &until) < 0 || seconds_to_ns(slack, &slack_ns) < 0)
        return NULL;
    return PyBool_FromLong(tb_limit_until(&self->core, tokens, until, slack_ns, now));
}

// _settle_cost(taken, used, held): a grant of taken tokens cost used, as tb_settle says (held: a window holds
// it); floats checked by the caller. ValueError, changing nothing, for a debt beyond the engine's range.
static PyObject *bucket_settle_cost(PyObject *op, PyObject *args)
{
    BucketObject *self = (BucketObject *)op;
    double taken, used;
    int held;
    tb_ns now;
    if (!PyArg_ParseTuple(args, "ddp:_settle_cost", &taken, &used, &held) || configured_now(self, &now) < 0)
        return NULL;
    if (tb_settle(&self->core, taken, used, held, now) != TB_OK)
        return PyErr_Format(PyExc_ValueError, "used is beyond the engine's range: %R tokens where %R were taken "
                            "would leave a rate empty for more than %lld s", PyTuple_GET_ITEM(args, 1),
                            PyTuple_GET_ITEM(args, 0), (long long)(TB_MAX_SPAN / 1000000000));
    Py_RETURN_NONE;
}

/* ---- Bucket: what it can tell ---- */

#define MOST_AHEAD 1000000  /* s: the furthest _owed looks (a lease is at most 3,600 s) */

// _owed(ahead) -> the most tokens a rate would still owe ahead seconds from now (0 when none would);
// ValueError unless ahead is from 0 to MOST_AHEAD s.
static PyObject *bucket_owed(PyObject *op, PyObject *arg)
{
    BucketObject *self = (BucketObject *)op;
    double ahead;
    tb_ns now;
    if (glue_amount_now(self, arg, &ahead, &now) < 0)
        return NULL;
    if (!(ahead >= 0 && ahead <= MOST_AHEAD))
        return PyErr_Format(PyExc_ValueError, "ahead must be from 0 to %d s, got %R", MOST_AHEAD, arg);
    return PyFloat_FromDouble(tb_owed(&self->core, now, now + (tb_ns)(ahead * 1e9)));
}

// _stats() -> (granted, granted_tokens, waits, wait_total, wait_max, cancelled, timeouts), times in seconds.
static PyObject *bucket_stats(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    if (!self->configured)
        return not_configured(self), NULL;
    const tb_stats *s = &self->core.stats;
    return Py_BuildValue("(KdKddKK)", (unsigned long long)s->granted, s->granted_tokens,
                         (unsigned long long)s->waits, s->wait_ns_total / 1e9, (double)s->wait_ns_max / 1e9,
                         (unsigned long long)s->cancelled, (unsigned long long)s->timeouts);
}

// _as_good_as_new() -> bool: no waiter, every limit full: the same as a bucket made now.
static PyObject *bucket_as_good_as_new(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (configured_now(self, &now) < 0)
        return NULL;
    return PyBool_FromLong(tb_as_good_as_new(&self->core, now));
}

// _resuming(delta): one loop more (1) or less (-1) holds grants whose tasks have not resumed; while any
// does, `async with` and acquire() on a fair limiter wait behind them instead of taking at once. None, or
// NULL with ValueError.
static PyObject *bucket_resuming(PyObject *op, PyObject *delta)
{
    BucketObject *self = (BucketObject *)op;
    long step = PyLong_Check(delta) ? PyLong_AsLong(delta) : 0;
    if ((step != 1 && step != -1) || self->resuming + step < 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "_resuming() takes 1 or -1 (and never below 0), got %R", delta);
        return NULL;
    }
    self->resuming += (int)step;
    Py_RETURN_NONE;
}

static PyObject *bucket_get_tokens(PyObject *op, void *closure)
{
    (void)closure;
    BucketObject *self = (BucketObject *)op;
    tb_ns now;
    if (configured_now(self, &now) < 0)
        return NULL;
    return PyFloat_FromDouble(tb_tokens(&self->core, now));
}

static PyObject *bucket_get_waiting(PyObject *op, void *closure)
{
    (void)closure;
    BucketObject *self = (BucketObject *)op;
    return PyLong_FromSize_t(self->configured ? self->core.waiting : 0);
}

static PyGetSetDef bucket_getset[] = {
    {"tokens", bucket_get_tokens, NULL, "Tokens available now.", NULL},
    {"waiting", bucket_get_waiting, NULL, "Number of queued waiters.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *bucket_init_subclass(PyObject *cls, PyObject *Py_UNUSED(ignored));

static PyMethodDef bucket_methods[] = {
    {"__init_subclass__", bucket_init_subclass, METH_CLASS | METH_NOARGS, "__init_subclass__($cls, /)\n--\n\nGives the new class its own descriptor of each method it inherits unchanged."},
    {"__aenter__", bucket_aenter, METH_NOARGS, "__aenter__($self, /)\n--\n\nTakes one token: returns a done awaitable, or the wait for it."},
    {"__aexit__", (PyCFunction)(void (*)(void))bucket_aexit, METH_FASTCALL, "__aexit__($self, /, *exc_info)\n--\n\nA window's token leaves it a period from now; else gives nothing back."},
    {"acquire", (PyCFunction)(void (*)(void))bucket_acquire, METH_FASTCALL | METH_KEYWORDS, "acquire($self, /, amount=1, timeout=None)\n--\n\nWaits for amount tokens, taken when awaited; TimeoutError at once if they cannot come within timeout."},
    {"try_acquire", (PyCFunction)(void (*)(void))bucket_try_acquire, METH_FASTCALL | METH_KEYWORDS, "try_acquire($self, /, amount=1)\n--\n\nTakes amount tokens now if a newcomer may, else returns False."},
    {"has_capacity", (PyCFunction)(void (*)(void))bucket_has_capacity, METH_FASTCALL | METH_KEYWORDS, "has_capacity($self, /, amount=1)\n--\n\nWhether acquire(amount) would go through now; takes nothing."},
    {"_configure", (PyCFunction)(void (*)(void))bucket_configure, METH_FASTCALL, NULL},
    {"_enqueue", (PyCFunction)(void (*)(void))bucket_enqueue, METH_FASTCALL, NULL},
    {"_withdraw", bucket_withdraw, METH_O, NULL},
    {"_withdraw_first_of", bucket_withdraw_first_of, METH_O, NULL},
    {"_grant_due", (PyCFunction)(void (*)(void))bucket_grant_due, METH_FASTCALL, NULL},
    {"_next_due", bucket_next_due, METH_NOARGS, NULL},
    {"_running_loop", bucket_running_loop, METH_NOARGS, NULL},
    {"_refund", bucket_refund, METH_O, NULL},
    {"_reckon_late", bucket_reckon_late, METH_O, NULL},
    {"_hold", bucket_hold, METH_O, NULL},
    {"_end_hold", bucket_end_hold, METH_O, NULL},
    {"_reserve", (PyCFunction)(void (*)(void))bucket_reserve, METH_FASTCALL, NULL},
    {"_withdraw_stranded", bucket_withdraw_stranded, METH_NOARGS, NULL},
    {"_set_rate", bucket_set_rate, METH_VARARGS, NULL},
    {"_set_window", bucket_set_window, METH_VARARGS, NULL},
    {"_pause_until", bucket_pause_until, METH_O, NULL},
    {"_limit_until", bucket_limit_until, METH_VARARGS, NULL},
    {"_grant_until", bucket_grant_until, METH_O, NULL},
    {"_set_largest", bucket_set_largest, METH_O, NULL},
    {"_credit", bucket_credit, METH_O, NULL},
    {"_obey", (PyCFunction)(void (*)(void))bucket_obey, METH_FASTCALL, NULL},
    {"_settle_cost", bucket_settle_cost, METH_VARARGS, NULL},
    {"_stats", bucket_stats, METH_NOARGS, NULL},
    {"_owed", bucket_owed, METH_O, NULL},
    {"_as_good_as_new", bucket_as_good_as_new, METH_NOARGS, NULL},
    {"_share", (PyCFunction)(void (*)(void))bucket_share, METH_FASTCALL, NULL},
    {"_share_busy", bucket_share_busy, METH_O, NULL},
    {"_resuming", bucket_resuming, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};

// __init_subclass__(): gives the new class its own descriptor of each Bucket method it inherits unchanged.
// Calling a method descriptor first checks that self is an instance of the descriptor's class: one
// compare when self's class is that very class, else a walk up self's MRO, paid by every call on a
// subclass such as Limiter. Before 3.14, __aenter__ and __aexit__ get a Bound (bound.h), which `async with`
// finds without allocating (3.14 binds neither: state.h's AIOTB_BIND_ONCE). A method is inherited unchanged when the class finds Bucket's own descriptor
// for it. None, or NULL with an exception.
static PyObject *bucket_init_subclass(PyObject *cls, PyObject *Py_UNUSED(ignored))
{
    PyObject *module = PyType_GetModuleByDef((PyTypeObject *)cls, &tokenbucket_module);
    if (module == NULL)
        return NULL;
    tb_state *st = PyModule_GetState(module);
    PyObject *base = (PyObject *)st->bucket_type;
    for (PyMethodDef *def = bucket_methods; def->ml_name != NULL; def++) {
        if (def->ml_flags & METH_CLASS)
            continue;
        PyObject *inherited = PyObject_GetAttrString(cls, def->ml_name);
        PyObject *own = inherited ? PyObject_GetAttrString(base, def->ml_name) : NULL;
        bool unchanged = own != NULL && inherited == own;
        Py_XDECREF(inherited);
        if (!unchanged) {  /* overridden on the way, or an error */
            Py_XDECREF(own);
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
#ifdef AIOTB_BIND_ONCE
        Py_ssize_t place = bound_place(def);
        PyObject *copy = place >= 0 ? bound_new(st->bound_type, def, place, (PyTypeObject *)cls, own)
                                   : PyDescr_NewMethod((PyTypeObject *)cls, def);
#else
        PyObject *copy = PyDescr_NewMethod((PyTypeObject *)cls, def);
#endif
        Py_DECREF(own);
        int rc = copy ? PyObject_SetAttrString(cls, def->ml_name, copy) : -1;
        Py_XDECREF(copy);
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
    {Py_tp_doc, (void *)"The limiter's engine: limits, waiter queue, clock and fast path. Subclasses "
                        "configure it in __init__ and provide the wait as _wait(amount, timeout)."},
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
    st->type_watcher = -1;
#if PY_VERSION_HEX >= 0x030C0000
    st->type_watcher = PyType_AddWatcher(count_class_change);
    if (st->type_watcher < 0)  /* every watcher taken: the clock is proven on each reading instead */
        PyErr_Clear();
#endif
    st->ready_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &ready_spec, NULL);
    st->bucket_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bucket_spec, NULL);
    st->seen_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &seen_spec, NULL);
    st->acquisition_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &acquisition_spec, NULL);
    if (!st->ready_type || !st->bucket_type || !st->seen_type || !st->acquisition_type)
        return -1;
#ifdef AIOTB_BIND_ONCE
    st->bound_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bound_spec, NULL);
    if (st->bound_type == NULL)
        return -1;
#endif
    st->ready = PyType_GenericAlloc(st->ready_type, 0);
    st->get_running_loop = import_attribute("asyncio.events", "_get_running_loop");
    st->is_monotonic_loop = import_attribute("aiotb._clock", "is_monotonic_loop");
    st->real_type = import_attribute("numbers", "Real");
    st->future_type = (PyTypeObject *)import_attribute("asyncio", "Future");
    if (st->future_type && !PyType_Check(st->future_type)) {
        PyErr_SetString(PyExc_TypeError, "asyncio.Future is not a class");
        Py_CLEAR(st->future_type);
    }
    if (!st->future_type)
        return -1;
    st->str_time = PyUnicode_InternFromString("time");
    st->str_wait = PyUnicode_InternFromString("_wait");
    st->str_wait_to_hold = PyUnicode_InternFromString("_wait_to_hold");
    st->str_over_capacity = PyUnicode_InternFromString("_over_capacity");
    st->str_throw = PyUnicode_InternFromString("throw");
    st->str_close = PyUnicode_InternFromString("close");
    st->str_done = PyUnicode_InternFromString("done");
    st->str_drop_closed = PyUnicode_InternFromString("_drop_closed");
    st->str_settle = PyUnicode_InternFromString("_settle");
    st->str_seen = PyUnicode_InternFromString("aiotb._tokenbucket.seen");
    if (!st->ready || !st->get_running_loop || !st->is_monotonic_loop || !st->real_type || !st->str_time ||
        !st->str_wait || !st->str_wait_to_hold || !st->str_over_capacity || !st->str_throw || !st->str_close || !st->str_done ||
        !st->str_drop_closed || !st->str_settle || !st->str_seen)
        return -1;
    if (PyCFunction_Check(st->get_running_loop) && PyCFunction_GetFlags(st->get_running_loop) == METH_NOARGS) {
        st->running_loop_c = PyCFunction_GetFunction(st->get_running_loop);
        st->running_loop_self = PyCFunction_GetSelf(st->get_running_loop);
    }
#ifdef AIOTB_TRUST_LOOP_HOLDER
    st->str_loop_holder = PyUnicode_InternFromString("__asyncio_running_event_loop__");
    if (st->str_loop_holder == NULL || watch_forks() < 0)
        return -1;
#endif
#ifdef AIOTB_HAS_PRECISE_TIMER
    PyObject *timer_type = PyType_FromModuleAndSpec(module, &timer_spec, NULL);
    int added = timer_type ? PyModule_AddType(module, (PyTypeObject *)timer_type) : -1;
    Py_XDECREF(timer_type);
    if (added < 0)
        return -1;
#endif
#ifdef AIOTB_HAS_SEGMENT
    if (segment_add_to_module(module, st) < 0)
        return -1;
#endif
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
    Py_VISIT(st->seen_type);
    Py_VISIT(st->ready_type);
    Py_VISIT(st->acquisition_type);
#ifdef AIOTB_BIND_ONCE
    Py_VISIT(st->bound_type);
#endif
    Py_VISIT(st->ready);
    Py_VISIT(st->get_running_loop);
    Py_VISIT(st->is_monotonic_loop);
    Py_VISIT(st->real_type);
    Py_VISIT(st->future_type);
    Py_VISIT(st->latest_loop);
    Py_VISIT(st->latest.loop_type);
    Py_VISIT(st->latest.loop_dict);
    Py_VISIT(st->segment_corrupt);
    Py_VISIT(st->segment_type);
    return 0;
}

static int tokenbucket_clear(PyObject *module)
{
    tb_state *st = PyModule_GetState(module);
    Py_CLEAR(st->bucket_type);
    Py_CLEAR(st->seen_type);
    Py_CLEAR(st->ready_type);
    Py_CLEAR(st->acquisition_type);
#ifdef AIOTB_BIND_ONCE
    Py_CLEAR(st->bound_type);
#endif
    Py_CLEAR(st->ready);
    Py_CLEAR(st->get_running_loop);
    st->running_loop_c = NULL, st->running_loop_self = NULL;
    Py_CLEAR(st->is_monotonic_loop);
    Py_CLEAR(st->real_type);
    Py_CLEAR(st->future_type);
    Py_CLEAR(st->latest_loop);
    proof_clear(&st->latest);
#ifdef AIOTB_RECENT_PROOF
    st->recent = NULL;  /* borrowed */
#endif
    Py_CLEAR(st->str_time);
    Py_CLEAR(st->str_wait);
    Py_CLEAR(st->str_wait_to_hold);
    Py_CLEAR(st->str_over_capacity);
    Py_CLEAR(st->str_throw);
    Py_CLEAR(st->str_close);
    Py_CLEAR(st->str_done);
    Py_CLEAR(st->str_drop_closed);
    Py_CLEAR(st->str_settle);
    Py_CLEAR(st->str_seen);
#ifdef AIOTB_TRUST_LOOP_HOLDER
    Py_CLEAR(st->str_loop_holder);
#endif
    Py_CLEAR(st->segment_corrupt);
    Py_CLEAR(st->segment_type);
    return 0;
}

static void tokenbucket_free(void *module)
{
    tb_state *st = PyModule_GetState((PyObject *)module);
#if PY_VERSION_HEX >= 0x030C0000
    if (st->type_watcher >= 0 && PyType_ClearWatcher(st->type_watcher) < 0)
        PyErr_WriteUnraisable((PyObject *)module);
    st->type_watcher = -1;
#else
    (void)st;
#endif
    (void)tokenbucket_clear((PyObject *)module);
}

static PyModuleDef_Slot tokenbucket_slots[] = {
    {Py_mod_exec, tokenbucket_exec},
    {0, NULL},
};

static PyModuleDef tokenbucket_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aiotb._tokenbucket",
    .m_doc = "The C engine of aiotb: token limits with a fair waiter queue.",
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
