/*
 * ttnn_python.h - the part of the CPython C API the ttnn backend uses, loaded at run time.
 *
 * The worker is built without Python.h and without linking libpython: only a host that
 * chooses the ttnn backend needs Python. ttnn_python_load() dlopen()s libpython (RTLD_GLOBAL,
 * so extension modules such as numpy's can find the interpreter's symbols) and resolves each
 * function below with dlsym into a plain struct of function pointers. Every function used is
 * part of CPython's stable ABI from 3.10 to 3.12, so one build drives any of them.
 *
 * CPython's interpreter is process-wide, so this is the one piece of process-wide state in
 * the backend: the API table and the interpreter are set up once (under a mutex) and never
 * torn down. Everything per engine lives in the engine and in the adapter's handle.
 */
#ifndef LA_TTNN_PYTHON_H
#define LA_TTNN_PYTHON_H

#include <stddef.h>
#include <sys/types.h>

/* Opaque stand-ins for CPython's types; only pointers to them are ever used. */
typedef struct _object PyObject;
typedef ssize_t Py_ssize_t;
typedef int PyGILState_STATE; /* CPython's enum {PyGILState_LOCKED, PyGILState_UNLOCKED} */

typedef struct {
    void *lib;          /* the dlopen()ed libpython */
    const char *soname; /* which name loaded, for messages */

    /* interpreter and GIL */
    void (*Py_InitializeEx)(int initsigs);
    int (*Py_IsInitialized)(void);
    void *(*PyEval_SaveThread)(void);
    PyGILState_STATE (*PyGILState_Ensure)(void);
    void (*PyGILState_Release)(PyGILState_STATE);
    const char *(*Py_GetVersion)(void);

    /* modules, attributes, calls */
    PyObject *(*PyImport_ImportModule)(const char *name);
    PyObject *(*PyObject_GetAttrString)(PyObject *o, const char *name);
    int (*PyObject_HasAttrString)(PyObject *o, const char *name);
    int (*PyObject_SetAttrString)(PyObject *o, const char *name, PyObject *v);
    PyObject *(*PyObject_CallObject)(PyObject *callable, PyObject *args);
    PyObject *(*PyObject_Str)(PyObject *o);
    int (*PyCallable_Check)(PyObject *o);

    /* containers and scalars (SetItem of tuples and lists steals the item's reference) */
    PyObject *(*PyTuple_New)(Py_ssize_t n);
    int (*PyTuple_SetItem)(PyObject *t, Py_ssize_t i, PyObject *item);
    PyObject *(*PyTuple_GetItem)(PyObject *t, Py_ssize_t i); /* borrowed */
    Py_ssize_t (*PyTuple_Size)(PyObject *t);
    PyObject *(*PyList_New)(Py_ssize_t n);
    int (*PyList_SetItem)(PyObject *l, Py_ssize_t i, PyObject *item);
    int (*PyList_Insert)(PyObject *l, Py_ssize_t i, PyObject *item);
    Py_ssize_t (*PyList_Size)(PyObject *l);
    PyObject *(*PyList_GetItem)(PyObject *l, Py_ssize_t i); /* borrowed */
    PyObject *(*PyDict_New)(void);
    int (*PyDict_SetItemString)(PyObject *d, const char *key, PyObject *v);
    PyObject *(*PyLong_FromLong)(long v);
    long (*PyLong_AsLong)(PyObject *o);
    PyObject *(*PyFloat_FromDouble)(double v);
    double (*PyFloat_AsDouble)(PyObject *o);
    PyObject *(*PyBool_FromLong)(long v);
    PyObject *(*PyUnicode_FromString)(const char *s);
    const char *(*PyUnicode_AsUTF8)(PyObject *o);
    PyObject *(*PyBytes_FromStringAndSize)(const char *s, Py_ssize_t n);
    int (*PyBytes_AsStringAndSize)(PyObject *o, char **buf, Py_ssize_t *n);
    Py_ssize_t (*PySequence_Size)(PyObject *o);                  /* -1 when not a sequence */
    PyObject *(*PySequence_GetItem)(PyObject *o, Py_ssize_t i); /* new reference */

    /* errors and reference counts */
    PyObject *(*PyErr_Occurred)(void);
    void (*PyErr_Fetch)(PyObject **type, PyObject **value, PyObject **tb);
    void (*PyErr_NormalizeException)(PyObject **type, PyObject **value, PyObject **tb);
    void (*PyErr_Clear)(void);
    void (*Py_IncRef)(PyObject *o);
    void (*Py_DecRef)(PyObject *o);

    PyObject *none; /* &_Py_NoneStruct */
} la_python;

/*
 * ttnn_python_start returns the process's Python, loading libpython and initialising the
 * interpreter on first use: lib_name (NULL = try libpython3.12, 3.11, 3.10 in that order),
 * Py_InitializeEx(0) so Python installs no signal handlers (the Go runtime owns them), and
 * the GIL released afterwards so any OS thread can take it with PyGILState_Ensure. Later
 * calls return the same interpreter whatever lib_name says. NULL with err set on failure;
 * a failed start may be retried (another LA_PYTHON_LIB).
 */
const la_python *ttnn_python_start(const char *lib_name, char *err, size_t errlen);

/*
 * ttnn_python_error turns the pending Python exception into "Type: message (at file:line
 * in function)" prefixed with what, writes it to err, clears the exception and returns -1.
 * With no exception pending it writes what alone. Call with the GIL held.
 */
int ttnn_python_error(const la_python *py, const char *what, char *err, size_t errlen);

#endif /* LA_TTNN_PYTHON_H */
