/* _noopcm: the floors for `async with`.
 *
 * NoopContext is an async context manager whose __aenter__ and __aexit__ do
 * nothing and return one shared, already finished awaitable. Timing
 * `async with NoopContext(): pass` measures the cost of the protocol itself:
 * two method calls and two awaits of an object that completes at once.
 *
 * BareBucket adds the least an exact limiter must do on top: read
 * CLOCK_MONOTONIC, check and take one token of a GCRA bucket. It never waits
 * (an empty bucket raises), so it only serves the uncontended measurement.
 *
 * LoopBareBucket is BareBucket that first asks asyncio for the running loop,
 * the public way a limiter that honours the running loop's clock must ask
 * (asyncio.events._get_running_loop; _asyncio's C function called directly
 * when it is one taking no arguments, as aiotb calls it). It drops the answer:
 * the least such a limiter can do before it reads CLOCK_MONOTONIC.
 *
 * BoundNoopContext, BoundBareBucket and BoundLoopBareBucket are the same
 * with __aenter__ and __aexit__ bound once per instance, as aiotb binds them
 * before 3.14:
 * `async with` looks both methods up at every entry, and a method descriptor
 * makes a new bound method each time (before 3.14); a Bound descriptor makes
 * it at the first lookup and keeps it in the instance (a cycle the cyclic GC
 * frees). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyTypeObject *done_type;
    PyTypeObject *context_type;
    PyTypeObject *bucket_type;
    PyTypeObject *bound_type;
    PyTypeObject *bound_context_type;
    PyTypeObject *bound_bucket_type;
    PyTypeObject *loop_bucket_type;
    PyTypeObject *bound_loop_bucket_type;
    PyObject *done;  /* the one finished awaitable */
    PyObject *get_running_loop;  /* asyncio.events._get_running_loop */
    PyCFunction running_loop_c;  /* its C function when it takes no arguments (_asyncio's), else NULL */
    PyObject *running_loop_self; /* the self it is called with (borrowed: get_running_loop holds it) */
} noop_state;

static inline noop_state *get_state(PyObject *module)
{
    return (noop_state *)PyModule_GetState(module);
}

/* ---- Done: an awaitable that is finished before it starts ---- */

// am_send: returns None at once.
static PySendResult done_send(PyObject *self, PyObject *arg, PyObject **result)
{
    (void)self, (void)arg;
    *result = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

// tp_iternext: NULL with no exception set, which the interpreter reads as StopIteration(None).
static PyObject *done_next(PyObject *self)
{
    (void)self;
    return NULL;
}

static void done_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static PyType_Slot done_slots[] = {
    {Py_am_await, PyObject_SelfIter},
    {Py_am_send, done_send},
    {Py_tp_iter, PyObject_SelfIter},
    {Py_tp_iternext, done_next},
    {Py_tp_dealloc, done_dealloc},
    {0, NULL},
};

static PyType_Spec done_spec = {
    .name = "_noopcm.Done",
    .basicsize = sizeof(PyObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = done_slots,
};

/* ---- NoopContext ---- */

typedef struct {
    PyObject_HEAD
    PyObject *done;   /* strong reference to the module's finished awaitable */
    PyObject *entry;  /* the Bound* types: __aenter__ bound to this instance from its first lookup, or NULL */
    PyObject *exit;   /* the same for __aexit__ */
} ContextObject;

static PyObject *context_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "NoopContext() takes no arguments");
        return NULL;
    }
    PyObject *module = PyType_GetModule(type);
    if (module == NULL)
        return NULL;
    ContextObject *self = (ContextObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->done = Py_NewRef(get_state(module)->done);
    return (PyObject *)self;
}

static int context_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((ContextObject *)op)->done);
    Py_VISIT(((ContextObject *)op)->entry);
    Py_VISIT(((ContextObject *)op)->exit);
    return 0;
}

static int context_clear(PyObject *op)
{
    Py_CLEAR(((ContextObject *)op)->done);
    Py_CLEAR(((ContextObject *)op)->entry);
    Py_CLEAR(((ContextObject *)op)->exit);
    return 0;
}

static void context_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    (void)context_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

// __aenter__(): returns a new reference to the finished awaitable.
static PyObject *context_aenter(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(((ContextObject *)self)->done);
}

// __aexit__(*exc_info): returns a new reference to the finished awaitable; exceptions propagate.
static PyObject *context_aexit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args, (void)nargs;
    return Py_NewRef(((ContextObject *)self)->done);
}

static PyMethodDef context_methods[] = {
    {"__aenter__", context_aenter, METH_NOARGS, NULL},
    {"__aexit__", (PyCFunction)(void (*)(void))context_aexit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot context_slots[] = {
    {Py_tp_new, context_new},
    {Py_tp_traverse, context_traverse},
    {Py_tp_clear, context_clear},
    {Py_tp_dealloc, context_dealloc},
    {Py_tp_methods, context_methods},
    {0, NULL},
};

static PyType_Spec context_spec = {
    .name = "_noopcm.NoopContext",
    .basicsize = sizeof(ContextObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = context_slots,
};

/* ---- BareBucket ---- */

typedef struct {
    ContextObject base;  /* the finished awaitable, and the no-op's own __aexit__ and lifetime */
    double ns_per_token;
    double full_at;      /* GCRA: the instant, in ns, the bucket is full again */
} BucketObject;

// BareBucket(rate): a bucket of one token refilled at rate per second, full at first.
static PyObject *bucket_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    double rate;
    static char *keywords[] = {"rate", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "d:BareBucket", keywords, &rate))
        return NULL;
    if (!(rate > 0 && rate < 1e300)) {
        PyErr_Format(PyExc_ValueError, "rate must be a finite number > 0, not %R", PyTuple_GET_ITEM(args, 0));
        return NULL;
    }
    PyObject *module = PyType_GetModule(type);
    if (module == NULL)
        return NULL;
    BucketObject *self = (BucketObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->base.done = Py_NewRef(get_state(module)->done);
    self->ns_per_token = 1e9 / rate;
    self->full_at = 0.0;
    return (PyObject *)self;
}

// __aenter__(): takes one token at CLOCK_MONOTONIC's now and returns the finished awaitable;
// RuntimeError if the bucket is empty.
static PyObject *bucket_aenter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    BucketObject *self = (BucketObject *)op;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
    if (self->full_at > now) {
        PyErr_SetString(PyExc_RuntimeError, "BareBucket is empty: it never waits");
        return NULL;
    }
    self->full_at = now + self->ns_per_token;
    return Py_NewRef(self->base.done);
}

static PyMethodDef bucket_methods[] = {
    {"__aenter__", bucket_aenter, METH_NOARGS, NULL},
    {"__aexit__", (PyCFunction)(void (*)(void))context_aexit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot bucket_slots[] = {
    {Py_tp_new, bucket_new},
    {Py_tp_traverse, context_traverse},
    {Py_tp_clear, context_clear},
    {Py_tp_dealloc, context_dealloc},
    {Py_tp_methods, bucket_methods},
    {0, NULL},
};

static PyType_Spec bucket_spec = {
    .name = "_noopcm.BareBucket",
    .basicsize = sizeof(BucketObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = bucket_slots,
};

/* ---- LoopBareBucket ---- */

// asyncio's running loop (a new reference; None outside one), or NULL with an exception: the C function
// called directly when there is one, else the generic call.
static inline PyObject *ask_running_loop(noop_state *st)
{
    if (st->running_loop_c != NULL)
        return st->running_loop_c(st->running_loop_self, NULL);
    return PyObject_CallNoArgs(st->get_running_loop);
}

typedef struct {
    BucketObject base;
    noop_state *state;  /* borrowed: the type keeps its module alive */
} LoopBucketObject;

// LoopBareBucket(rate): BareBucket(rate) that asks for the running loop first.
static PyObject *loop_bucket_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *module = PyType_GetModule(type);
    if (module == NULL)
        return NULL;
    PyObject *self = bucket_new(type, args, kwargs);
    if (self != NULL)
        ((LoopBucketObject *)self)->state = get_state(module);
    return self;
}

// __aenter__(): asks asyncio for the running loop and drops the answer, then takes one token as
// BareBucket's does; RuntimeError if the bucket is empty, or asyncio's exception.
static PyObject *loop_bucket_aenter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    PyObject *loop = ask_running_loop(((LoopBucketObject *)op)->state);
    if (loop == NULL)
        return NULL;
    Py_DECREF(loop);
    return bucket_aenter(op, NULL);
}

static PyMethodDef loop_bucket_methods[] = {
    {"__aenter__", loop_bucket_aenter, METH_NOARGS, NULL},
    {"__aexit__", (PyCFunction)(void (*)(void))context_aexit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot loop_bucket_slots[] = {
    {Py_tp_new, loop_bucket_new},
    {Py_tp_traverse, context_traverse},
    {Py_tp_clear, context_clear},
    {Py_tp_dealloc, context_dealloc},
    {Py_tp_methods, loop_bucket_methods},
    {0, NULL},
};

static PyType_Spec loop_bucket_spec = {
    .name = "_noopcm.LoopBareBucket",
    .basicsize = sizeof(LoopBucketObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = loop_bucket_slots,
};

/* ---- Bound: a method bound once per instance ---- */

typedef struct {
    PyObject_HEAD
    PyMethodDef *def;   /* static, in context_methods or bucket_methods */
    Py_ssize_t offset;  /* offsetof(ContextObject, entry or exit) */
} BoundObject;

// tp_descr_get: the instance's kept bound method, made at its first lookup; on the class, the descriptor itself.
static PyObject *bound_get(PyObject *op, PyObject *instance, PyObject *Py_UNUSED(type))
{
    BoundObject *self = (BoundObject *)op;
    if (instance == NULL || instance == Py_None)
        return Py_NewRef(op);
    PyObject **kept = (PyObject **)((char *)instance + self->offset);
    if (*kept == NULL && (*kept = PyCFunction_New(self->def, instance)) == NULL)
        return NULL;
    return Py_NewRef(*kept);
}

static void bound_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyType_Slot bound_slots[] = {
    {Py_tp_descr_get, bound_get},
    {Py_tp_dealloc, bound_dealloc},
    {0, NULL},
};

static PyType_Spec bound_spec = {
    .name = "_noopcm.Bound",
    .basicsize = sizeof(BoundObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = bound_slots,
};

// A new subclass of base named name whose __aenter__ and __aexit__ (from methods) are bound once; NULL on error.
static PyTypeObject *bound_subclass(PyObject *module, PyTypeObject *bound_type, PyTypeObject *base, const char *name,
                                    PyMethodDef *methods)
{
    PyType_Slot slots[] = {{Py_tp_traverse, context_traverse}, {Py_tp_clear, context_clear}, {0, NULL}};
    PyType_Spec spec = {.name = name, .basicsize = 0, .slots = slots,
                        .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC};  /* mutable until its methods are set */
    PyTypeObject *type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec, (PyObject *)base);
    if (type == NULL)
        return NULL;
    for (PyMethodDef *def = methods; def->ml_name != NULL; def++) {
        BoundObject *bound = PyObject_New(BoundObject, bound_type);
        if (bound == NULL)
            goto fail;
        bound->def = def;
        bound->offset = strcmp(def->ml_name, "__aenter__") == 0 ? offsetof(ContextObject, entry)
                                                                 : offsetof(ContextObject, exit);
        int rc = PyObject_SetAttrString((PyObject *)type, def->ml_name, (PyObject *)bound);
        Py_DECREF(bound);
        if (rc < 0)
            goto fail;
    }
    return type;
fail:
    Py_DECREF(type);
    return NULL;
}

/* ---- module ---- */

static int noop_exec(PyObject *module)
{
    noop_state *st = get_state(module);
    st->done_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &done_spec, NULL);
    if (st->done_type == NULL)
        return -1;
    st->done = PyType_GenericAlloc(st->done_type, 0);
    if (st->done == NULL)
        return -1;
    st->context_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &context_spec, NULL);
    if (st->context_type == NULL || PyModule_AddType(module, st->context_type) < 0)
        return -1;
    st->bucket_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bucket_spec, NULL);
    if (st->bucket_type == NULL || PyModule_AddType(module, st->bucket_type) < 0)
        return -1;
    st->bound_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &bound_spec, NULL);
    if (st->bound_type == NULL)
        return -1;
    st->bound_context_type = bound_subclass(module, st->bound_type, st->context_type, "_noopcm.BoundNoopContext",
                                            context_methods);
    if (st->bound_context_type == NULL || PyModule_AddType(module, st->bound_context_type) < 0)
        return -1;
    st->bound_bucket_type = bound_subclass(module, st->bound_type, st->bucket_type, "_noopcm.BoundBareBucket",
                                           bucket_methods);
    if (st->bound_bucket_type == NULL)
        return -1;
    if (PyModule_AddType(module, st->bound_bucket_type) < 0)
        return -1;
    PyObject *events = PyImport_ImportModule("asyncio.events");
    if (events == NULL)
        return -1;
    st->get_running_loop = PyObject_GetAttrString(events, "_get_running_loop");
    Py_DECREF(events);
    if (st->get_running_loop == NULL)
        return -1;
    if (PyCFunction_Check(st->get_running_loop) && PyCFunction_GetFlags(st->get_running_loop) == METH_NOARGS) {
        st->running_loop_c = PyCFunction_GetFunction(st->get_running_loop);
        st->running_loop_self = PyCFunction_GetSelf(st->get_running_loop);
    }
    st->loop_bucket_type = (PyTypeObject *)PyType_FromModuleAndSpec(module, &loop_bucket_spec, NULL);
    if (st->loop_bucket_type == NULL || PyModule_AddType(module, st->loop_bucket_type) < 0)
        return -1;
    st->bound_loop_bucket_type = bound_subclass(module, st->bound_type, st->loop_bucket_type,
                                                "_noopcm.BoundLoopBareBucket", loop_bucket_methods);
    if (st->bound_loop_bucket_type == NULL)
        return -1;
    return PyModule_AddType(module, st->bound_loop_bucket_type);
}

static int noop_traverse(PyObject *module, visitproc visit, void *arg)
{
    noop_state *st = get_state(module);
    Py_VISIT(st->done_type);
    Py_VISIT(st->context_type);
    Py_VISIT(st->bucket_type);
    Py_VISIT(st->bound_type);
    Py_VISIT(st->bound_context_type);
    Py_VISIT(st->bound_bucket_type);
    Py_VISIT(st->loop_bucket_type);
    Py_VISIT(st->bound_loop_bucket_type);
    Py_VISIT(st->done);
    Py_VISIT(st->get_running_loop);
    return 0;
}

static int noop_clear(PyObject *module)
{
    noop_state *st = get_state(module);
    Py_CLEAR(st->done);
    Py_CLEAR(st->get_running_loop);
    st->running_loop_c = NULL, st->running_loop_self = NULL;
    Py_CLEAR(st->bound_loop_bucket_type);
    Py_CLEAR(st->loop_bucket_type);
    Py_CLEAR(st->bound_bucket_type);
    Py_CLEAR(st->bound_context_type);
    Py_CLEAR(st->bound_type);
    Py_CLEAR(st->bucket_type);
    Py_CLEAR(st->context_type);
    Py_CLEAR(st->done_type);
    return 0;
}

static void noop_free(void *module)
{
    (void)noop_clear((PyObject *)module);
}

static PyModuleDef_Slot noop_slots[] = {
    {Py_mod_exec, noop_exec},
    {0, NULL},
};

static PyModuleDef noop_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_noopcm",
    .m_doc = "Floors for `async with`: a context manager that does nothing, a bare token bucket, and one that asks "
              "for the running loop first.",
    .m_size = sizeof(noop_state),
    .m_slots = noop_slots,
    .m_traverse = noop_traverse,
    .m_clear = noop_clear,
    .m_free = noop_free,
};

PyMODINIT_FUNC PyInit__noopcm(void)
{
    return PyModuleDef_Init(&noop_module);
}
