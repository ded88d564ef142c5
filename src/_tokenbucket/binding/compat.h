/* Newer C-API functions on the older Pythons we support, from public calls, with the same contracts
 * (pythoncapi-compat does the same for many more). Part of _tokenbucketmodule.c's translation unit. */
#ifndef AIOTB_BINDING_COMPAT_H
#define AIOTB_BINDING_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* PyWeakref_GetRef arrived in 3.13 (PyWeakref_GetObject, which returns a borrowed reference, is
 * deprecated there): the same contract from public calls on older versions, as pythoncapi-compat does. */
#if PY_VERSION_HEX < 0x030D0000
// *ref gets a new reference to the referent, or NULL if it is dead; 1, 0, or -1 with TypeError.
static inline int PyWeakref_GetRef(PyObject *weakref, PyObject **ref)
{
    if (weakref == NULL || !PyWeakref_Check(weakref)) {
        *ref = NULL;
        PyErr_SetString(PyExc_TypeError, "expected a weakref");
        return -1;
    }
    PyObject *object = PyWeakref_GetObject(weakref);  /* borrowed; public until 3.13 */
    if (object == NULL) {
        *ref = NULL;
        return -1;
    }
    if (object == Py_None) {
        *ref = NULL;
        return 0;
    }
    *ref = Py_NewRef(object);
    return 1;
}
#endif

/* PyErr_GetRaisedException and PyErr_SetRaisedException arrived in 3.12 (PyErr_Fetch and PyErr_Restore
 * are deprecated there). */
#if PY_VERSION_HEX < 0x030C0000
// The exception being raised, normalized, as a new reference (NULL if none); the error indicator is cleared.
static inline PyObject *PyErr_GetRaisedException(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL)
        PyException_SetTraceback(value, traceback);
    Py_DECREF(type);
    Py_XDECREF(traceback);
    return value;
}

// Raises exc again (a reference it steals), as PyErr_GetRaisedException took it; NULL clears the indicator.
static inline void PyErr_SetRaisedException(PyObject *exc)
{
    if (exc == NULL) {
        PyErr_Restore(NULL, NULL, NULL);
        return;
    }
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
}
#endif

#endif
