/* The running loop's clock, read in nanoseconds.
 *
 * When the running loop's clock provably is CLOCK_MONOTONIC (aiotb._clock.is_monotonic_loop), the
 * bucket reads that clock itself. The proof (tb_proof) holds while that loop is the running one and
 * neither its class (nor a base) nor its instance attributes changed; each thread keeps its own
 * (SeenObject, in the thread's state dict), so buckets share it. Where a reading asks asyncio every time
 * (the public path) in a GIL build, it first tries the record whose proof held at the latest reading,
 * whichever thread's it is (module state's `recent`): the proof is about the loop asyncio names, not the
 * thread, and it spares finding this thread's record (its thread state, a thread-local, their checks). A
 * record clears `recent` when freed. Without the GIL no thread reads another's record.
 *
 * Which loop is running: asyncio answers, in a few loads on 3.12+ and with a getpid() system call
 * on 3.11 (the public path). Asking on every reading costs about 140 instructions per `async with`
 * on 3.12 and 3.13 (see README), so on 3.11-3.13 a thread trusts its last answer while its context
 * version is unchanged: every callback and task step a loop runs enters a context, so the running
 * loop cannot change within one version. The context version is a CPython-internal field, read only
 * on 3.11-3.13 GIL builds, where it saves 5 % or more (state.h); the build switch AIOTB_PUBLIC_CLOCK=1
 * (setup.py) builds the public path there too, and the test suite runs on both. A context watcher
 * (public, 3.14+) could count the switches instead, but it runs at every switch of every task step in
 * the process, limiter or not: 17-42 ns more per task step on 3.14 (README, "Design").
 * Class changes: type watchers on 3.12+ (public); the class's version tag on 3.11, which has no watchers:
 * without it the proof would be made again at every reading (397.5-402.7 ns per uncontended `async with`
 * against 75.3 ns, benchmarks/per_with.py, three runs of each build side by side).
 *
 * On 3.11 a new context version (each task step has one) would cost that system call at the step's first
 * reading: a release of 10,000 queued tasks paid it 10,000 times. There, asyncio keeps the running loop in a
 * holder object under "__asyncio_running_event_loop__" in the thread-state dict, made anew at each change
 * of the running loop; so while that very object is there (the thread holds a reference to it), and the
 * process has not forked (asyncio 3.11 answers None in a forked child), the running loop is the one found
 * with it. Without that key (asyncio's pure-Python implementation) every new version asks asyncio. */
#ifndef AIOTB_BINDING_CLOCK_H
#define AIOTB_BINDING_CLOCK_H

#include "state.h"

#include <stdatomic.h>

#ifdef AIOTB_TRUST_LOOP_HOLDER  /* the gates: state.h */
#include <errno.h>
#include <pthread.h>
#endif

// CLOCK_MONOTONIC now, in nanoseconds.
static inline ALWAYS_INLINE tb_ns monotonic_ns(void)
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

/* ---- class versions ---- */

#if PY_VERSION_HEX >= 0x030C0000
/* Bumped by the type watcher on any change of a watched loop class (or of one of its bases):
 * every proof made before is stale. One count for all classes: a change costs one new proof. */
static _Atomic uint64_t class_changes = 1;

// The type watcher: counts a change of a watched class. Always 0.
static int count_class_change(PyTypeObject *type)
{
    (void)type;
    atomic_fetch_add_explicit(&class_changes, 1, memory_order_relaxed);
    return 0;
}

// The version a proof records for type; 0 if its changes cannot be watched (then no proof is kept).
static inline ALWAYS_INLINE uint64_t class_version(tb_state *st, PyTypeObject *type)
{
    (void)type;
    return st->type_watcher < 0 ? 0 : atomic_load_explicit(&class_changes, memory_order_relaxed);
}

// Starts watching type for changes; 0, or -1 with an exception.
static int watch_class(tb_state *st, PyTypeObject *type)
{
    return st->type_watcher < 0 ? 0 : PyType_Watch(st->type_watcher, (PyObject *)type);
}

// Whether no watched class changed since proof p was made; p must hold a proof (then a watcher made it).
static inline ALWAYS_INLINE bool class_unchanged(const tb_proof *p)
{
    return atomic_load_explicit(&class_changes, memory_order_relaxed) == p->type_epoch;
}
#else
// The version a proof records for type: its version tag, 0 if it has none (then no proof is kept).
static inline ALWAYS_INLINE uint64_t class_version(tb_state *st, PyTypeObject *type)
{
    (void)st;
    return type->tp_version_tag;  /* changes whenever the class or a base is modified */
}

// Nothing to do: the version tag changes by itself. 0.
static int watch_class(tb_state *st, PyTypeObject *type)
{
    (void)st, (void)type;
    return 0;
}

// Whether proof p's class (and its bases) did not change since p was made; p must hold a proof.
static inline ALWAYS_INLINE bool class_unchanged(const tb_proof *p)
{
    return p->loop_type->tp_version_tag == p->type_epoch;
}
#endif

/* ---- proofs ---- */

// Whether proof p, made for loop, still holds: same class, unchanged since, same instance attributes. An empty
// p (loop_type NULL) never holds, so class_unchanged sees only made proofs.
static inline ALWAYS_INLINE bool proof_holds(const tb_proof *p, PyObject *loop)
{
    return Py_TYPE(loop) == p->loop_type && class_unchanged(p) &&
           (p->loop_dict == NULL || PyDict_GET_SIZE(p->loop_dict) == p->dict_size);
}

// Forgets a proof.
static void proof_clear(tb_proof *p)
{
    Py_CLEAR(p->loop);
    Py_CLEAR(p->loop_type);
    Py_CLEAR(p->loop_dict);
}

// Records in *p that loop's clock is CLOCK_MONOTONIC as of now; leaves *p empty if its class cannot be
// watched. 0, or -1 with an exception.
static int proof_make(tb_state *st, tb_proof *p, PyObject *loop)
{
    proof_clear(p);
    uint64_t version = class_version(st, Py_TYPE(loop));
    if (version == 0)
        return 0;
    if (watch_class(st, Py_TYPE(loop)) < 0)
        return -1;
    PyObject *dict = PyObject_GenericGetDict(loop, NULL);
    if (dict == NULL) {  /* a loop without instance dict cannot be patched per instance */
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
    }
    p->loop = Py_NewRef(loop);
    p->loop_type = (PyTypeObject *)Py_NewRef(Py_TYPE(loop));
    p->loop_dict = dict;
    p->dict_size = dict ? PyDict_GET_SIZE(dict) : 0;
    p->type_epoch = version;
    return 0;
}

// Whether loop's clock is CLOCK_MONOTONIC, proving it in *p if it is: from the module's latest proof
// when that was made for the same loop and still holds, else by asking aiotb._clock. 1, 0, or -1
// with an exception.
COLD static int prove_clock(tb_state *st, tb_proof *p, PyObject *loop)
{
    PyObject *latest = NULL;
    if (st->latest_loop != NULL && PyWeakref_GetRef(st->latest_loop, &latest) < 0)
        return -1;
    bool known = latest == loop && proof_holds(&st->latest, loop);
    Py_XDECREF(latest);
    if (!known) {
        PyObject *verdict = PyObject_CallOneArg(st->is_monotonic_loop, loop);
        int monotonic = verdict ? PyObject_IsTrue(verdict) : -1;
        Py_XDECREF(verdict);
        if (monotonic <= 0) {
            proof_clear(p);
            return monotonic;
        }
    }
    if (proof_make(st, p, loop) < 0)
        return -1;
    if (known || p->loop == NULL)
        return 1;
    PyObject *ref = PyWeakref_NewRef(loop, NULL);
    if (ref == NULL) {  /* a loop without weak references: nothing to share */
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
    }
    Py_XSETREF(st->latest_loop, ref);
    proof_clear(&st->latest);
    st->latest.loop_type = (PyTypeObject *)Py_NewRef(p->loop_type);
    st->latest.loop_dict = Py_XNewRef(p->loop_dict);
    st->latest.dict_size = p->dict_size;
    st->latest.type_epoch = p->type_epoch;
    return 1;
}

/* ---- what this thread has seen ---- */

/* A shortcut to a thread's SeenObject, past the thread-state dict that owns it (tb_seen_shortcut): valid for
 * the thread state, by address and id, and the interpreter it names. A SeenObject freed clears the shortcut
 * to it (seen_dealloc); one freed in another thread than its own belongs to a thread state that is gone,
 * whose address, id and interpreter are never all reused. While no SeenObject at all was freed since it was
 * found, the address alone says it: a thread state's address is reused only once it is freed, and its
 * dict, which owns its SeenObject, with it. With the GIL, one shortcut in module state serves the thread
 * that read the clock last (another thread finds its own again through its dict): a thread-local one costs a
 * __tls_get_addr call or two per reading in a shared library, 1,046 instructions per uncontended `async with`
 * against 1,030 on 3.11, 1,512 against 1,496 on 3.13 (callgrind, `benchmarks/per_with.py --count`,
 * PYTHONHASHSEED=0). Without the GIL each thread keeps its own. */
static _Atomic uint64_t seen_frees;  /* SeenObjects freed in the process so far */

#ifdef Py_GIL_DISABLED
static _Thread_local tb_seen_shortcut this_thread;

// Where this thread finds its SeenObject quickly.
static inline ALWAYS_INLINE tb_seen_shortcut *seen_shortcut(tb_state *st)
{
    (void)st;
    return &this_thread;
}
#else
static inline ALWAYS_INLINE tb_seen_shortcut *seen_shortcut(tb_state *st)
{
    return &st->seen_shortcut;
}
#endif

static int seen_traverse(PyObject *op, visitproc visit, void *arg)
{
    SeenObject *self = (SeenObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->proof.loop);
    Py_VISIT(self->proof.loop_type);
    Py_VISIT(self->proof.loop_dict);
#ifdef AIOTB_TRUST_LOOP_HOLDER
    Py_VISIT(self->loop_holder);
#endif
    return 0;
}

static int seen_clear(PyObject *op)
{
    proof_clear(&((SeenObject *)op)->proof);
    ((SeenObject *)op)->running = false;
#ifdef AIOTB_TRUST_LOOP_HOLDER
    Py_CLEAR(((SeenObject *)op)->loop_holder);
#endif
    return 0;
}

static void seen_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    tb_state *st = PyType_GetModuleState(tp);  /* the type keeps its module, hence this state, alive */
    if (st != NULL && seen_shortcut(st)->seen == op)
        seen_shortcut(st)->seen = NULL;
#ifdef AIOTB_RECENT_PROOF
    if (st != NULL && st->recent == op)
        st->recent = NULL;
#endif
    atomic_fetch_add_explicit(&seen_frees, 1, memory_order_relaxed);
    PyObject_GC_UnTrack(op);
    (void)seen_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot seen_slots[] = {
    {Py_tp_traverse, seen_traverse},
    {Py_tp_clear, seen_clear},
    {Py_tp_dealloc, seen_dealloc},
    {0, NULL},
};

static PyType_Spec seen_spec = {
    .name = "aiotb._tokenbucket.Seen",
    .basicsize = sizeof(SeenObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = seen_slots,
};

// seen_find past its shortcut: the shortcut checked by id and interpreter when SeenObjects were freed since it
// was set, else found in ts's state dict. The SeenObject (borrowed), or NULL, with no exception, if ts has none yet.
COLD static SeenObject *seen_find_again(tb_state *st, PyThreadState *ts, uint64_t frees)
{
    tb_seen_shortcut *shortcut = seen_shortcut(st);
    PyObject *seen = shortcut->seen;
    if (seen != NULL && shortcut->ts == ts && shortcut->ts_id == PyThreadState_GetID(ts) &&
        shortcut->interp_id == PyInterpreterState_GetID(PyThreadState_GetInterpreter(ts)) &&
        Py_IS_TYPE(seen, st->seen_type)) {
        shortcut->frees = frees;
        return (SeenObject *)seen;
    }
    PyObject *dict = PyThreadState_GetDict();
    PyObject *found = dict ? PyDict_GetItemWithError(dict, st->str_seen) : NULL;  /* a str key: no error */
    if (found == NULL || !Py_IS_TYPE(found, st->seen_type))
        return NULL;
    shortcut->ts = ts;
    shortcut->frees = frees;
    shortcut->ts_id = PyThreadState_GetID(ts);
    shortcut->interp_id = PyInterpreterState_GetID(PyThreadState_GetInterpreter(ts));
    shortcut->seen = found;
    return (SeenObject *)found;
}

// The thread state ts's SeenObject (borrowed from its state dict), or NULL, with no exception, if it has none yet.
static inline ALWAYS_INLINE SeenObject *seen_find(tb_state *st, PyThreadState *ts)
{
    tb_seen_shortcut *shortcut = seen_shortcut(st);
    PyObject *seen = shortcut->seen;
    uint64_t frees = atomic_load_explicit(&seen_frees, memory_order_relaxed);
#ifdef Py_GIL_DISABLED  /* one shortcut for every instance of this module in the thread: is it this one's? */
    if (seen != NULL && shortcut->ts == ts && shortcut->frees == frees && Py_IS_TYPE(seen, st->seen_type))
#else  /* a shortcut of this module's state, set to a SeenObject of its type */
    if (seen != NULL && shortcut->ts == ts && shortcut->frees == frees)
#endif
        return (SeenObject *)seen;
    return seen_find_again(st, ts, frees);
}

// This thread's SeenObject (borrowed), made on first use; NULL with an exception.
COLD static SeenObject *seen_get(tb_state *st)
{
    SeenObject *seen = seen_find(st, PyThreadState_Get());
    if (seen != NULL)
        return seen;
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL)
        return PyErr_SetString(PyExc_RuntimeError, "this thread has no state dict"), NULL;
    PyObject *made = PyType_GenericAlloc(st->seen_type, 0);
    int rc = made ? PyDict_SetItem(dict, st->str_seen, made) : -1;  /* the dict owns it from now on */
    Py_XDECREF(made);
    return rc < 0 ? NULL : (SeenObject *)made;
}

#ifdef AIOTB_TRUST_LOOP_HOLDER
/* ---- 3.11: asyncio's running-loop holder ---- */

static _Atomic uint64_t forks;  /* forks of this process and its parents; a child sees one more than its parent */

// pthread_atfork's child handler: counts the fork.
static void count_fork(void)
{
    forks++;
}

// Registers count_fork once per process image. 0, or -1 with OSError.
static int watch_forks(void)
{
    static _Atomic bool registered;
    if (registered)
        return 0;
    int error = pthread_atfork(NULL, NULL, count_fork);
    if (error != 0)
        return errno = error, PyErr_SetFromErrno(PyExc_OSError), -1;
    registered = true;
    return 0;
}

// asyncio's running-loop holder in this thread's state dict (borrowed), or NULL, with no exception.
static inline ALWAYS_INLINE PyObject *loop_holder(tb_state *st)
{
    PyObject *dict = PyThreadState_GetDict();
    return dict ? PyDict_GetItemWithError(dict, st->str_loop_holder) : NULL;  /* a str key: no error */
}

// Whether the running loop is still the one seen found running: asyncio has not changed it since, in
// this process. Then seen trusts the current context version too.
static inline ALWAYS_INLINE bool same_running_loop(tb_state *st, SeenObject *seen, PyThreadState *ts)
{
    if (seen->loop_holder == NULL || seen->loop_holder != loop_holder(st) || seen->forks != forks)
        return false;
    seen->context_ver = ts->context_ver;
    return true;
}
#endif

/* ---- reading the clock ---- */

// asyncio's running loop (a new reference; None outside one), or NULL with an exception. _asyncio's C function
// is called as the interpreter would call it, without the generic call's dispatch and checks around it: 1,622
// instructions per uncontended async with against 1,671 on 3.14, 1,586 against 1,638 on 3.15 (callgrind); a
// Python function (asyncio without its accelerator) goes the generic way.
static inline ALWAYS_INLINE PyObject *ask_running_loop(tb_state *st)
{
    if (st->running_loop_c != NULL)
        return st->running_loop_c(st->running_loop_self, NULL);
    return PyObject_CallNoArgs(st->get_running_loop);
}

// Moves the core onto another clock (domain: a loop, or NULL for CLOCK_MONOTONIC) that reads now.
COLD static void switch_clock(BucketObject *self, PyObject *domain, tb_ns now)
{
    if (self->has_last)
        tb_rebase(&self->core, self->last_now, now);
    self->has_last = false;  /* readings on the new clock start afresh */
    Py_XSETREF(self->domain, Py_XNewRef(domain));
}

// Records a reading of the clock, never earlier than the last: threads that read the clock in one
// order may reach the bucket in the other. Returns the reading recorded.
static inline ALWAYS_INLINE tb_ns bucket_read(BucketObject *self, tb_ns now)
{
    if (self->has_last && now < self->last_now)
        now = self->last_now;
    self->last_now = now;
    self->has_last = true;
    return now;
}

// Whether the core may move onto another clock: only with no waiter queued, as the waiters' times are
// on the old clock. Waiters of closed loops are dropped first (the limiter's _drop_closed). 0, or -1
// with RuntimeError if others wait.
COLD static int may_switch_clock(BucketObject *self)
{
    if (!self->configured || self->core.waiting == 0)
        return 0;
    PyObject *dropped = PyObject_CallMethodNoArgs((PyObject *)self, self->state->str_drop_closed);
    if (dropped == NULL)
        return -1;
    Py_DECREF(dropped);
    if (self->core.waiting == 0)
        return 0;
    PyErr_SetString(PyExc_RuntimeError,
                    "this limiter has waiters on an event loop with another clock: loops that share a limiter "
                    "must all keep time on the monotonic clock (a virtual or patched loop.time() cannot be shared)");
    return -1;
}

// The clock of loop (the running loop, or None; a reference the call takes over) read the long way:
// proves it if needed, moves the core onto it if it changed. 0, or -1 with an exception.
COLD static int bucket_now_slow(BucketObject *self, PyObject *loop, tb_ns *now)
{
    tb_state *st = self->state;
    PyObject *domain = NULL;
    int rc = -1;
#ifdef AIOTB_TRUST_LOOP_HOLDER
    PyObject *holder = Py_XNewRef(loop_holder(st));  /* the one that names loop: nothing ran since asyncio's answer */
#endif
    SeenObject *seen = seen_get(st);
    if (seen == NULL)
        goto done;
    seen->running = false;
    if (loop != Py_None && !(loop == seen->proof.loop && proof_holds(&seen->proof, loop))) {
        int monotonic = prove_clock(st, &seen->proof, loop);
        if (monotonic < 0)
            goto done;
        if (!monotonic) {  /* a clock of its own: core times are on it */
            PyObject *seconds = PyObject_CallMethodNoArgs(loop, st->str_time);
            if (seconds == NULL)
                goto done;
            double value = PyFloat_AsDouble(seconds);
            Py_DECREF(seconds);
            if ((value == -1.0 && PyErr_Occurred()) || seconds_to_ns(value, now) < 0)
                goto done;
            domain = loop;
        }
    }
    if (domain == NULL)  /* outside a loop, asyncio's default clock is CLOCK_MONOTONIC too */
        *now = monotonic_ns();
#ifdef AIOTB_TRUST_CONTEXT_VERSION
    seen->running = domain == NULL && loop == seen->proof.loop;
    seen->context_ver = PyThreadState_Get()->context_ver;
#endif
#ifdef AIOTB_RECENT_PROOF
    if (domain == NULL && loop == seen->proof.loop)  /* the next reading of this loop, in any bucket, is quick */
        st->recent = (PyObject *)seen;
#endif
#ifdef AIOTB_TRUST_LOOP_HOLDER
    Py_XSETREF(seen->loop_holder, seen->running ? Py_XNewRef(holder) : NULL);
    seen->forks = forks;
#endif
    if (domain != self->domain) {
        if (may_switch_clock(self) < 0)
            goto done;
        switch_clock(self, domain, *now);
    }
    *now = bucket_read(self, *now);
    rc = 0;
done:
#ifdef AIOTB_TRUST_LOOP_HOLDER
    Py_XDECREF(holder);
#endif
    Py_DECREF(loop);
    return rc;
}

#ifdef AIOTB_TRUST_CONTEXT_VERSION
// bucket_now once the thread's context version no longer vouches for the loop seen (this thread's SeenObject,
// or NULL) found running: on 3.11 asyncio's holder may still name it, else asyncio is asked. Out of line, so
// that bucket_now's inlined fast path keeps a small frame. 0, or -1 with an exception.
NOINLINE static int bucket_now_asking(BucketObject *self, PyThreadState *ts, SeenObject *seen, tb_ns *now)
{
    tb_state *st = self->state;
#ifdef AIOTB_TRUST_LOOP_HOLDER
    if (seen != NULL && seen->running && self->domain == NULL && same_running_loop(st, seen, ts) &&
        proof_holds(&seen->proof, seen->proof.loop)) {
        *now = bucket_read(self, monotonic_ns());
        return 0;
    }
#endif
    PyObject *loop = ask_running_loop(st);
    if (loop != NULL && seen != NULL && loop == seen->proof.loop && self->domain == NULL &&
        proof_holds(&seen->proof, loop)) {
        seen->running = true;  /* a new version (a new task step, say): asyncio named the proven loop */
        seen->context_ver = ts->context_ver;
        Py_DECREF(loop);
        *now = bucket_read(self, monotonic_ns());
        return 0;
    }
    if (loop == NULL)
        return -1;
    return bucket_now_slow(self, loop, now);
}
#endif

// The running loop's time in ns, moving the core onto that clock if it changed. 0, or -1 with an
// exception. Inlined: the fast path is a few loads while the thread's context version holds (3.11-3.13),
// else one question to asyncio; and CLOCK_MONOTONIC.
static inline ALWAYS_INLINE int bucket_now(BucketObject *self, tb_ns *now)
{
    tb_state *st = self->state;
#ifdef AIOTB_TRUST_CONTEXT_VERSION
    PyThreadState *ts = PyThreadState_Get();
    SeenObject *seen = seen_find(st, ts);
    if (seen != NULL && seen->running && self->domain == NULL && ts->context_ver == seen->context_ver &&
        proof_holds(&seen->proof, seen->proof.loop)) {
        *now = bucket_read(self, monotonic_ns());
        return 0;
    }
    return bucket_now_asking(self, ts, seen, now);
#else
    PyObject *loop = ask_running_loop(st);
#ifdef AIOTB_RECENT_PROOF
    SeenObject *seen = loop ? (SeenObject *)st->recent : NULL;  /* found for loop by this thread or another */
#else
    SeenObject *seen = loop ? seen_find(st, PyThreadState_Get()) : NULL;
#endif
    if (seen != NULL && loop == seen->proof.loop && self->domain == NULL && proof_holds(&seen->proof, loop)) {
        Py_DECREF(loop);
        *now = bucket_read(self, monotonic_ns());
        return 0;
    }
    if (loop == NULL)
        return -1;
    return bucket_now_slow(self, loop, now);
#endif
}

// _running_loop() -> the running loop, or None: on 3.11-3.13 GIL builds the loop this thread's last reading found
// running, while its context version says the running loop cannot have changed since (no question to
// asyncio, which costs a getpid() system call on 3.11); else asyncio's answer.
static PyObject *bucket_running_loop(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    tb_state *st = ((BucketObject *)op)->state;
#ifdef AIOTB_TRUST_CONTEXT_VERSION
    PyThreadState *ts = PyThreadState_Get();
    SeenObject *seen = seen_find(st, ts);
    if (seen != NULL && seen->running && (ts->context_ver == seen->context_ver
#ifdef AIOTB_TRUST_LOOP_HOLDER
                                           || same_running_loop(st, seen, ts)
#endif
                                           ))
        return Py_NewRef(seen->proof.loop);
#endif
    return ask_running_loop(st);
}

#endif
