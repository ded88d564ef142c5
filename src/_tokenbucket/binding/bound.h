/* __aenter__ and __aexit__ bound once per bucket, before 3.14 (state.h's AIOTB_BIND_ONCE says why not after).
 *
 * `async with` looks both methods up on the instance's class at every entry. Through a method
 * descriptor each lookup makes a new bound method, which the block then frees: two allocations of
 * an object the cyclic GC tracks, per block. A Bound descriptor instead makes the bound method at
 * the first lookup on an instance and keeps it there (BucketObject's `entry` and `exit`), so later
 * lookups allocate nothing. A kept bound method holds its bucket, which holds it: a cycle, which the
 * cyclic GC frees once nothing else holds the bucket (Bucket traverses and clears both).
 *
 * Bucket's subclasses get their own Bound for each of the two methods they inherit unchanged
 * (Bucket.__init_subclass__); looked up on the class, a Bound gives Bucket's method descriptor,
 * so `Limiter.__aenter__` reads as it does without it. */
#ifndef AIOTB_BINDING_BOUND_H
#define AIOTB_BINDING_BOUND_H

#include "state.h"

#include <stddef.h>

typedef struct {
    PyObject_HEAD
    PyMethodDef *def;      /* the method (static, in bucket_methods) */
    PyTypeObject *owner;   /* strong: the class it binds instances of, and of its subclasses */
    PyObject *unbound;     /* strong: Bucket's method descriptor, what a lookup on the class gives */
    Py_ssize_t offset;     /* where an instance keeps the bound method: offsetof(BucketObject, entry or exit) */
} BoundObject;

// Where a bucket keeps def bound once: offsetof(BucketObject, entry or exit), or -1 for a method it does not keep.
static Py_ssize_t bound_place(const PyMethodDef *def)
{
    if (strcmp(def->ml_name, "__aenter__") == 0)
        return offsetof(BucketObject, entry);
    if (strcmp(def->ml_name, "__aexit__") == 0)
        return offsetof(BucketObject, exit);
    return -1;
}

// Bound(def, owner, unbound): a new reference to a descriptor binding def to owner's instances, kept at
// offset (bound_place), or NULL.
static PyObject *bound_new(PyTypeObject *bound_type, PyMethodDef *def, Py_ssize_t offset, PyTypeObject *owner,
                           PyObject *unbound)
{
    BoundObject *self = PyObject_GC_New(BoundObject, bound_type);
    if (self == NULL)
        return NULL;
    self->def = def;
    self->owner = (PyTypeObject *)Py_NewRef(owner);
    self->unbound = Py_NewRef(unbound);
    self->offset = offset;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

// The slow cases of bound_get: the class's lookup, an instance of another class (TypeError) or of a subclass,
// and an instance's first lookup. A new reference, or NULL.
COLD static PyObject *bound_get_slow(BoundObject *self, PyObject *instance)
{
    if (instance == NULL)
        return Py_NewRef(self->unbound);
    if (!PyObject_TypeCheck(instance, self->owner))
        return PyErr_Format(PyExc_TypeError, "descriptor '%s' for '%s' objects doesn't apply to a '%s' object",
                            self->def->ml_name, self->owner->tp_name, Py_TYPE(instance)->tp_name);
    PyObject **kept = (PyObject **)((char *)instance + self->offset);
    if (*kept == NULL && (*kept = PyCFunction_New(self->def, instance)) == NULL)
        return NULL;
    return Py_NewRef(*kept);
}

// tp_descr_get: the instance's bound method (made at its first lookup, then kept), as a new
// reference; on the class, Bucket's method descriptor; TypeError for an instance of another class.
// The kept method of an instance of the owner itself is returned without a call: no frame to set up.
static PyObject *bound_get(PyObject *op, PyObject *instance, PyObject *Py_UNUSED(type))
{
    BoundObject *self = (BoundObject *)op;
    if (instance != NULL && Py_IS_TYPE(instance, self->owner)) {
        PyObject *kept = *(PyObject **)((char *)instance + self->offset);
        if (kept != NULL)
            return Py_NewRef(kept);
    }
    return bound_get_slow(self, instance);
}

static int bound_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(((BoundObject *)op)->owner);
    Py_VISIT(((BoundObject *)op)->unbound);
    return 0;
}

static int bound_clear(PyObject *op)
{
    Py_CLEAR(((BoundObject *)op)->owner);
    Py_CLEAR(((BoundObject *)op)->unbound);
    return 0;
}

static void bound_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    (void)bound_clear(op);
    tp->tp_free(op);
    Py_DECREF(tp);
}

// repr(): names the method and the class it binds.
static PyObject *bound_repr(PyObject *op)
{
    BoundObject *self = (BoundObject *)op;
    return PyUnicode_FromFormat("<method '%s' of '%s' objects, bound once per instance>", self->def->ml_name,
                                self->owner->tp_name);
}

static PyType_Slot bound_slots[] = {
    {Py_tp_descr_get, bound_get},
    {Py_tp_traverse, bound_traverse},
    {Py_tp_clear, bound_clear},
    {Py_tp_dealloc, bound_dealloc},
    {Py_tp_repr, bound_repr},
    {0, NULL},
};

static PyType_Spec bound_spec = {
    .name = "aiotb._tokenbucket.Bound",
    .basicsize = sizeof(BoundObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = bound_slots,
};

#endif
