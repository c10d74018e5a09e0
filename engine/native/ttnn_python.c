/*
 * ttnn_python.c - loading libpython at run time and turning Python exceptions into text.
 * See ttnn_python.h for why the API is resolved with dlsym instead of linked.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "la_errors.h"
#include "ttnn_python.h"

/* The process-wide interpreter (see ttnn_python.h): guarded by start_mu, written once. */
static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static la_python process_python;
static int python_started;


/* One symbol to resolve: its name and where its pointer goes in la_python. */
typedef struct {
    const char *name;
    size_t offset;
} symbol;

#define SYM(f) {#f, offsetof(la_python, f)}

static const symbol symbols[] = {
    SYM(Py_InitializeEx),         SYM(Py_IsInitialized),        SYM(PyEval_SaveThread),
    SYM(PyGILState_Ensure),       SYM(PyGILState_Release),      SYM(Py_GetVersion),
    SYM(PyImport_ImportModule),   SYM(PyObject_GetAttrString),  SYM(PyObject_HasAttrString),
    SYM(PyObject_SetAttrString),  SYM(PyObject_CallObject),     SYM(PyObject_Str),
    SYM(PyCallable_Check),        SYM(PyTuple_New),             SYM(PyTuple_SetItem),
    SYM(PyTuple_GetItem),         SYM(PyTuple_Size),            SYM(PyList_New),
    SYM(PyList_SetItem),          SYM(PyList_Insert),           SYM(PyList_Size),
    SYM(PyList_GetItem),          SYM(PyDict_New),              SYM(PyDict_SetItemString),
    SYM(PyLong_FromLong),         SYM(PyLong_AsLong),           SYM(PyFloat_FromDouble),
    SYM(PyUnicode_FromString),    SYM(PyUnicode_AsUTF8),        SYM(PyBytes_FromStringAndSize),
    SYM(PyBytes_AsStringAndSize), SYM(PyErr_Occurred),          SYM(PyErr_Fetch),
    SYM(PyErr_NormalizeException), SYM(PyErr_Clear),            SYM(Py_IncRef),
    SYM(Py_DecRef),               SYM(PyFloat_AsDouble),        SYM(PyBool_FromLong),
    SYM(PySequence_Size),         SYM(PySequence_GetItem),
};

/* The default libpython names, newest first: the Blackhole image ships 3.12, the tt-metal
 * host venv 3.10, Debian 12 (CI) 3.11. */
static const char *const default_libs[] = {
    "libpython3.12.so.1.0",
    "libpython3.11.so.1.0",
    "libpython3.10.so.1.0",
};

/* open_lib dlopen()s lib_name, or the first default that loads. */
static void *open_lib(const char *lib_name, const char **loaded, char *err, size_t errlen) {
    if (lib_name && *lib_name) {
        void *h = dlopen(lib_name, RTLD_NOW | RTLD_GLOBAL);
        if (!h)
            la_errorf(err, errlen, "loading libpython: %s (set LA_PYTHON_LIB to a libpython3.X.so "
                   "that exists, e.g. Debian's libpython3.11 package)", dlerror());
        *loaded = lib_name;
        return h;
    }
    size_t n = sizeof default_libs / sizeof default_libs[0];
    for (size_t i = 0; i < n; i++) {
        void *h = dlopen(default_libs[i], RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            *loaded = default_libs[i];
            return h;
        }
    }
    la_errorf(err, errlen, "loading libpython: none of libpython3.12.so.1.0, libpython3.11.so.1.0, "
           "libpython3.10.so.1.0 could be loaded (install libpython3.X, e.g. Debian's "
           "libpython3.11, or point LA_PYTHON_LIB at one)");
    return NULL;
}

/* resolve fills py's function pointers from its library. */
static int resolve(la_python *py, char *err, size_t errlen) {
    size_t n = sizeof symbols / sizeof symbols[0];
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(py->lib, symbols[i].name);
        if (!f)
            return la_errorf(err, errlen, "%s lacks %s: not a CPython 3.10+ shared library",
                          py->soname, symbols[i].name);
        /* A data pointer to a function pointer, as POSIX dlsym requires; memcpy keeps it
         * free of aliasing casts. */
        memcpy((char *)py + symbols[i].offset, &f, sizeof f);
    }
    py->none = (PyObject *)dlsym(py->lib, "_Py_NoneStruct");
    if (!py->none)
        return la_errorf(err, errlen, "%s lacks _Py_NoneStruct", py->soname);
    return 0;
}

/* configure_sys prepares the sys module of an embedded interpreter (GIL held):
 *  - sys.argv = ["la-worker"]: some libraries read sys.argv[0] at import time, and an
 *    embedded interpreter starts without one;
 *  - sys.stdout = sys.stderr: the worker's stdout carries its own output (logs, the
 *    launcher's landmark), so a print() in an adapter or a library goes to stderr. */
static int configure_sys(la_python *py, char *err, size_t errlen) {
    PyObject *sys = py->PyImport_ImportModule("sys");
    PyObject *argv = py->PyList_New(1);
    PyObject *arg0 = py->PyUnicode_FromString("la-worker");
    PyObject *stderr_obj = NULL;
    int rc = -1;
    if (sys && argv && arg0) {
        py->PyList_SetItem(argv, 0, arg0); /* steals arg0 */
        arg0 = NULL;
        stderr_obj = py->PyObject_GetAttrString(sys, "stderr");
        if (stderr_obj && py->PyObject_SetAttrString(sys, "argv", argv) == 0)
            rc = py->PyObject_SetAttrString(sys, "stdout", stderr_obj);
    }
    if (rc != 0)
        ttnn_python_error(py, "configuring the embedded interpreter's sys module", err, errlen);
    PyObject *owned[] = {stderr_obj, arg0, argv, sys};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (owned[i])
            py->Py_DecRef(owned[i]);
    return rc;
}

const la_python *ttnn_python_start(const char *lib_name, char *err, size_t errlen) {
    pthread_mutex_lock(&start_mu);
    if (python_started) {
        pthread_mutex_unlock(&start_mu);
        return &process_python;
    }
    la_python py;
    memset(&py, 0, sizeof py);
    py.lib = open_lib(lib_name, &py.soname, err, errlen);
    if (!py.lib || resolve(&py, err, errlen) != 0) {
        /* A library that loaded but is not CPython stays loaded: dlclose of something that
         * may have run constructors is not worth the risk. */
        pthread_mutex_unlock(&start_mu);
        return NULL;
    }
    int configured = 0;
    if (!py.Py_IsInitialized()) {
        /* 0: no Python signal handlers; the Go runtime keeps SIGINT, SIGTERM, SIGPIPE. */
        py.Py_InitializeEx(0);
        configured = configure_sys(&py, err, errlen);
        /* Py_InitializeEx left this thread holding the GIL; release it for good so every
         * call (from whichever OS thread an engine is locked to) takes it with
         * PyGILState_Ensure and gives it back with PyGILState_Release. */
        py.PyEval_SaveThread();
    }
    /* Started even if configure_sys failed: the interpreter exists and cannot be
     * initialised twice; this open reports the failure, later ones proceed. */
    process_python = py;
    python_started = 1;
    pthread_mutex_unlock(&start_mu);
    return configured == 0 ? &process_python : NULL;
}

/* str_of writes str(o) into buf, or "?" if that fails. */
static void str_of(const la_python *py, PyObject *o, char *buf, size_t len) {
    snprintf(buf, len, "?");
    if (!o)
        return;
    PyObject *s = py->PyObject_Str(o);
    const char *c = s ? py->PyUnicode_AsUTF8(s) : NULL;
    if (c)
        snprintf(buf, len, "%s", c);
    if (s)
        py->Py_DecRef(s);
    py->PyErr_Clear();
}

/* attr_str writes str(o.name) into buf. */
static void attr_str(const la_python *py, PyObject *o, const char *name, char *buf, size_t len) {
    PyObject *a = o ? py->PyObject_GetAttrString(o, name) : NULL;
    str_of(py, a, buf, len);
    if (a)
        py->Py_DecRef(a);
    py->PyErr_Clear();
}

/* last_frame writes " (at file:line in function)" for the innermost frame of tb, using
 * traceback.extract_tb; empty if anything about it fails. */
static void last_frame(const la_python *py, PyObject *tb, char *buf, size_t len) {
    buf[0] = 0;
    if (!tb)
        return;
    PyObject *mod = py->PyImport_ImportModule("traceback");
    PyObject *extract = mod ? py->PyObject_GetAttrString(mod, "extract_tb") : NULL;
    PyObject *args = extract ? py->PyTuple_New(1) : NULL;
    PyObject *frames = NULL;
    if (args) {
        py->Py_IncRef(tb);
        py->PyTuple_SetItem(args, 0, tb);
        frames = py->PyObject_CallObject(extract, args);
    }
    Py_ssize_t n = frames ? py->PyList_Size(frames) : 0;
    if (n > 0) {
        PyObject *f = py->PyList_GetItem(frames, n - 1);
        char file[256], line[32], func[96];
        attr_str(py, f, "filename", file, sizeof file);
        attr_str(py, f, "lineno", line, sizeof line);
        attr_str(py, f, "name", func, sizeof func);
        snprintf(buf, len, " (at %s:%s in %s)", file, line, func);
    }
    PyObject *owned[] = {frames, args, extract, mod};
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (owned[i])
            py->Py_DecRef(owned[i]);
    py->PyErr_Clear();
}

int ttnn_python_error(const la_python *py, const char *what, char *err, size_t errlen) {
    if (!py->PyErr_Occurred())
        return la_errorf(err, errlen, "%s", what);
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    py->PyErr_Fetch(&type, &value, &tb);
    py->PyErr_NormalizeException(&type, &value, &tb);
    char name[96], msg[320], where[400];
    attr_str(py, type, "__name__", name, sizeof name);
    str_of(py, value, msg, sizeof msg);
    last_frame(py, tb, where, sizeof where);
    if (type)
        py->Py_DecRef(type);
    if (value)
        py->Py_DecRef(value);
    if (tb)
        py->Py_DecRef(tb);
    py->PyErr_Clear();
    return la_errorf(err, errlen, "%s: %s: %s%s", what, name, msg, where);
}
