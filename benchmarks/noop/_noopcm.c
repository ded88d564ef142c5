/* _noopcm: the floor for `async with`.
 *
 * NoopContext is an async context manager whose __aenter__ and __aexit__ do
 * nothing and return one shared, already finished awaitable. Timing
 * `async with NoopContext(): pass` measures the cost of the protocol itself:
 * two method calls and two awaits of an object that completes at once. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyTypeObject *done_type;
    PyTypeObject *context_type;
    PyObject *done;  /* the one finished awaitable */
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
    PyObject *done;  /* strong reference to the module's finished awaitable */
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
    return 0;
}

static int context_clear(PyObject *op)
{
    Py_CLEAR(((ContextObject *)op)->done);
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
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = context_slots,
};

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
    if (st->context_type == NULL)
        return -1;
    return PyModule_AddType(module, st->context_type);
}

static int noop_traverse(PyObject *module, visitproc visit, void *arg)
{
    noop_state *st = get_state(module);
    Py_VISIT(st->done_type);
    Py_VISIT(st->context_type);
    Py_VISIT(st->done);
    return 0;
}

static int noop_clear(PyObject *module)
{
    noop_state *st = get_state(module);
    Py_CLEAR(st->done);
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
    .m_doc = "An async context manager that does nothing: the floor for `async with`.",
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
