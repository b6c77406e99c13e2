/*
 * _hps.c -- the CPython extension under the Python module `hps`: a binding
 * of libhps (include/hps/client.h), C only.  This file holds the module:
 * its state, hps.Error and the helpers that raise it, the argument parsing
 * of the vectorcall methods, the module functions and PyInit__hps.  The
 * Client type is in _hps_client.c (its info, readiness and model-control
 * methods in _hps_client_info.c), the array arguments (buffer protocol,
 * DLPack, torch) in _hps_arrays.c; _hps.h is what they share.
 *
 * Everything a lookup call does per call is in these files, so the Python
 * layer adds almost nothing: the model and table are resolved through dicts
 * built once at open; keys and outputs are read through the buffer protocol
 * (numpy) or DLPack (torch, cupy, raw capsules); every check is done before
 * the GIL is released around the libhps call.  Outputs that the caller did
 * not pass are allocated by callables that hps/__init__.py registers
 * (_set_allocators): numpy.empty for host keys read through the buffer
 * protocol, a Python function for DLPack keys (torch.empty on the keys'
 * device, ...).
 *
 * Every failure raises hps.Error (code: an hps_err_t, name: hps_err_name).
 */
#include "_hps.h"
#include "hps/conf.h"

#include <limits.h>
#include <string.h>

/* ---- module state ------------------------------------------------------- */

static PyObject *HpsError;  /* hps.Error */
PyObject *hpspy_np_empty;   /* numpy.empty, from _set_allocators */
PyObject *hpspy_np_float32; /* numpy.dtype('float32') */
PyObject *hpspy_dl_alloc;   /* alloc(keys, shape, device_type, device_id) */
PyObject *hpspy_str_dlpack, *hpspy_str_dlpack_device, *hpspy_str_cuda_stream, *hpspy_str_torch,
    *hpspy_kw_stream;

/* ---- errors ------------------------------------------------------------- */

/* Raise hps.Error(msg) with .code = code, .name = hps_err_name(code); cause,
 * if not NULL, becomes __cause__ (stolen).  Returns NULL. */
PyObject *hpspy_raise_msg(hps_err_t code, PyObject *msg, PyObject *cause)
{
    PyObject *exc = NULL, *v = NULL;

    if (!msg)
        goto out;
    exc = PyObject_CallOneArg(HpsError, msg);
    if (!exc)
        goto out;
    v = PyLong_FromLong(code);
    if (!v || PyObject_SetAttrString(exc, "code", v) < 0)
        goto out;
    Py_DECREF(v);
    v = PyUnicode_FromString(hps_err_name(code));
    if (!v || PyObject_SetAttrString(exc, "name", v) < 0)
        goto out;
    if (cause) {
        PyException_SetCause(exc, cause); /* steals */
        cause = NULL;
    }
    PyErr_SetObject(HpsError, exc);
out:
    Py_XDECREF(cause);
    Py_XDECREF(v);
    Py_XDECREF(exc);
    Py_XDECREF(msg);
    return NULL;
}

/* hps.Error with a printf-style message (PyUnicode_FromFormat's formats). */
PyObject *hpspy_raise_fmt(hps_err_t code, const char *fmt, ...)
{
    va_list ap;
    PyObject *msg;

    va_start(ap, fmt);
    msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    return hpspy_raise_msg(code, msg, NULL);
}

/* hps.Error of a failed libhps call: the calling thread's message, else the
 * code's text. */
PyObject *hpspy_raise_c(hps_err_t rc)
{
    const char *m = hps_client_last_error();

    if (!m || !*m)
        m = hps_strerror(rc);
    return hpspy_raise_msg(rc, PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace"), NULL);
}

PyObject *hpspy_raise_open(hps_err_t rc, const char *err, const char *path)
{
    if (err[0])
        return hpspy_raise_msg(rc, PyUnicode_DecodeUTF8(err, (Py_ssize_t)strlen(err), "replace"),
                               NULL);
    return hpspy_raise_fmt(rc, "%.200s%s: %s", path, strlen(path) > 200 ? "..." : "",
                           hps_strerror(rc));
}

/* Turn the pending Python exception (from a producer's __dlpack__, a buffer
 * export, an allocator) into hps.Error("<what>: <Type>: <text>") chained to
 * it; an hps.Error passes unchanged. */
PyObject *hpspy_wrap_pyerr(const char *what)
{
    PyObject *exc, *s, *msg;

    if (!PyErr_Occurred())
        return hpspy_raise_fmt(HPS_EINVAL, "%s failed", what);
    if (PyErr_ExceptionMatches(HpsError))
        return NULL;
    exc = hpspy_err_take();
    if (!exc)
        return hpspy_raise_fmt(HPS_EINVAL, "%s failed", what);
    s = PyObject_Str(exc);
    msg = s ? PyUnicode_FromFormat("%s: %s: %U", what, Py_TYPE(exc)->tp_name, s)
            : PyUnicode_FromFormat("%s: %s", what, Py_TYPE(exc)->tp_name);
    PyErr_Clear();
    Py_XDECREF(s);
    return hpspy_raise_msg(HPS_EINVAL, msg, exc);
}

/* Error messages echo user-given names and values cut to HPSPY_ECHO_MAX
 * characters: a 100,000-character name makes no 100,000-character message. */
PyObject *hpspy_cut(PyObject *s)
{
    PyObject *head, *r;

    if (PyUnicode_GET_LENGTH(s) <= HPSPY_ECHO_MAX) {
        Py_INCREF(s);
        return s;
    }
    head = PyUnicode_Substring(s, 0, HPSPY_ECHO_MAX);
    r = head ? PyUnicode_FromFormat("%U...", head) : NULL;
    Py_XDECREF(head);
    return r;
}

PyObject *hpspy_echo(PyObject *o)
{
    PyObject *s, *r;

    if (PyUnicode_Check(o)) { /* the repr of an exact str runs no Python code */
        Py_ssize_t n = PyUnicode_GET_LENGTH(o);
        PyObject *head = PyUnicode_Substring(o, 0, n > HPSPY_ECHO_MAX ? HPSPY_ECHO_MAX : n);
        s = head ? PyObject_Repr(head) : NULL;
        Py_XDECREF(head);
        if (!s || n <= HPSPY_ECHO_MAX)
            return s;
        r = PyUnicode_FromFormat("%U...", s);
        Py_DECREF(s);
        return r;
    }
    s = PyObject_Repr(o);
    if (!s && PyLong_Check(o) && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear(); /* more digits than int's str() allows: hex has no limit */
        s = PyNumber_ToBase(o, 16);
    }
    if (!s) {
        PyErr_Clear();
        return PyUnicode_FromFormat("<%.100s object>", Py_TYPE(o)->tp_name);
    }
    r = hpspy_cut(s);
    Py_DECREF(s);
    return r;
}

/* ---- argument parsing (vectorcall) -------------------------------------- */

/* Fill out[0 .. nnames-1] from positional args and keyword names; the first
 * nreq are required; absent optionals stay NULL (borrowed references). */
int hpspy_parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int nnames, int nreq, PyObject **out)
{
    for (int i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > nnames) {
        hpspy_raise_fmt(HPS_EINVAL, "%s() takes at most %d arguments (%zd given)", fn, nnames,
                        nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t len;
        const char *kn = PyUnicode_AsUTF8AndSize(kw, &len);
        int i;
        if (!kn)
            return -1;
        for (i = 0; i < nnames; i++) /* "model\0x" is not "model" */
            if (strlen(names[i]) == (size_t)len && strcmp(kn, names[i]) == 0)
                break;
        if (i == nnames) {
            PyObject *e = hpspy_echo(kw);
            if (e)
                hpspy_raise_fmt(HPS_EINVAL, "%s() got an unexpected keyword argument %U", fn, e);
            Py_XDECREF(e);
            return -1;
        }
        if (out[i]) {
            hpspy_raise_fmt(HPS_EINVAL, "%s() got multiple values for argument '%s'", fn, kn);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!out[i]) {
            hpspy_raise_fmt(HPS_EINVAL, "%s() missing required argument '%s'", fn, names[i]);
            return -1;
        }
    }
    for (int i = 0; i < nnames; i++)
        if (out[i] == Py_None && i >= nreq)
            out[i] = NULL;
    return 0;
}

/* stream: None (NULL: the legacy default stream), an int (a cudaStream_t),
 * or an object with .cuda_stream (torch.cuda.Stream, cupy's streams). */
int hpspy_parse_stream(PyObject *o, void **ret)
{
    PyObject *v = NULL;
    unsigned long long s;

    *ret = NULL;
    if (!o)
        return 0;
    if (!PyLong_Check(o)) {
        v = PyObject_GetAttr(o, hpspy_str_cuda_stream);
        if (!v) {
            PyErr_Clear();
            hpspy_raise_fmt(HPS_EINVAL,
                            "stream must be None, an int (cudaStream_t) or an object with "
                            ".cuda_stream, not %s",
                            Py_TYPE(o)->tp_name);
            return -1;
        }
        o = v;
    }
    s = PyLong_AsUnsignedLongLong(o);
    Py_XDECREF(v);
    if (s == (unsigned long long)-1 && PyErr_Occurred()) {
        hpspy_wrap_pyerr("stream");
        return -1;
    }
    *ret = (void *)(uintptr_t)s;
    return 0;
}

/* ---- module functions --------------------------------------------------- */

PyDoc_STRVAR(set_allocators_doc,
             "_set_allocators(numpy_empty, float32_dtype, dlpack_alloc): the output\n"
             "allocators (hps/__init__.py registers them at import).");

static PyObject *mod_set_allocators(PyObject *mod, PyObject *args)
{
    PyObject *e, *f, *d;

    (void)mod;

    if (!PyArg_ParseTuple(args, "OOO:_set_allocators", &e, &f, &d))
        return NULL;
    Py_INCREF(e);
    Py_INCREF(f);
    Py_INCREF(d);
    Py_XSETREF(hpspy_np_empty, e);
    Py_XSETREF(hpspy_np_float32, f);
    Py_XSETREF(hpspy_dl_alloc, d);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(strerror_doc, "strerror(code) -> str: hps_strerror() of an error code.");

static PyObject *mod_strerror(PyObject *mod, PyObject *arg)
{
    long code = PyLong_AsLong(arg);

    (void)mod;

    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(hps_strerror((hps_err_t)code));
}

PyDoc_STRVAR(err_name_doc,
             "err_name(code) -> str: hps_err_name() of an error code, the name that\n"
             "hps.Error.name carries: HPS_E... for the library's own codes, the errno\n"
             "name (ENOENT, ...) for a negative errno, OK for 0, UNKNOWN otherwise.");

static PyObject *mod_err_name(PyObject *mod, PyObject *arg)
{
    int overflow = 0;
    long code = PyLong_AsLongAndOverflow(arg, &overflow);

    (void)mod;

    if (code == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || code < INT_MIN || code > INT_MAX)
        return PyUnicode_FromString("UNKNOWN");
    return PyUnicode_FromString(hps_err_name((hps_err_t)code));
}

PyDoc_STRVAR(check_config_doc,
             "check_config(path) -> None\n"
             "\n"
             "Parse and validate the INI configuration at path (str, bytes or\n"
             "os.PathLike), as a Client or hps-coordinator will; the model files are\n"
             "not opened.  Raises hps.Error (code HPS_ECONFIG, or a negative errno\n"
             "such as -ENOENT) with the message naming file, line, key and the allowed\n"
             "values.");

static PyObject *mod_check_config(PyObject *mod, PyObject *arg)
{
    PyObject *path = NULL;
    hps_conf_t *conf = NULL;
    char err[1024] = "";
    hps_err_t rc;

    (void)mod;
    if (!PyUnicode_FSConverter(arg, &path))
        return hpspy_wrap_pyerr("check_config()");
    const char *p = PyBytes_AS_STRING(path);
    PyThreadState *ts = PyEval_SaveThread();
    rc = hps_conf_load(p, &conf, err, sizeof(err));
    PyEval_RestoreThread(ts);
    hps_conf_free(conf);
    if (rc < 0)
        hpspy_raise_open(rc, err, p);
    Py_DECREF(path);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"check_config", mod_check_config, METH_O, check_config_doc},
    {"_set_allocators", mod_set_allocators, METH_VARARGS, set_allocators_doc},
    {"strerror", mod_strerror, METH_O, strerror_doc},
    {"err_name", mod_err_name, METH_O, err_name_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef mod_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hps._hps",
    .m_doc = "libhps binding (C); use the package hps.",
    .m_size = -1,
    .m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__hps(void)
{
    PyObject *m = NULL, *v;

    hpspy_str_dlpack = PyUnicode_InternFromString("__dlpack__");
    hpspy_str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    hpspy_str_cuda_stream = PyUnicode_InternFromString("cuda_stream");
    hpspy_str_torch = PyUnicode_InternFromString("torch");
    hpspy_kw_stream = Py_BuildValue("(s)", "stream");
    if (!hpspy_str_dlpack || !hpspy_str_dlpack_device || !hpspy_str_cuda_stream ||
        !hpspy_str_torch || !hpspy_kw_stream)
        return NULL;
    if (PyType_Ready(&hpspy_client_type) < 0)
        return NULL;
    m = PyModule_Create(&mod_def);
    if (!m)
        return NULL;
    HpsError = PyErr_NewExceptionWithDoc(
        "hps.Error",
        "Every failure of the hps module.  code: the hps_err_t (include/hps/hps.h;\n"
        "HPS_EINVAL for bad arguments), name: its symbolic name.",
        PyExc_Exception, NULL);
    if (!HpsError)
        goto fail;
    v = PyLong_FromLong(0);
    if (!v || PyObject_SetAttrString(HpsError, "code", v) < 0) {
        Py_XDECREF(v);
        goto fail;
    }
    Py_DECREF(v);
    if (PyObject_SetAttrString(HpsError, "name", Py_None) < 0)
        goto fail;
    Py_INCREF(HpsError);
    if (PyModule_AddObject(m, "Error", HpsError) < 0) {
        Py_DECREF(HpsError);
        goto fail;
    }
    Py_INCREF(&hpspy_client_type);
    if (PyModule_AddObject(m, "Client", (PyObject *)&hpspy_client_type) < 0) {
        Py_DECREF(&hpspy_client_type);
        goto fail;
    }
    if (PyModule_AddIntConstant(m, "HOST", HPS_HOST) < 0 ||
        PyModule_AddStringConstant(m, "version", hps_version()) < 0)
        goto fail;
#define ADD_ERR(name, value, msg)                                                                  \
    if (PyModule_AddIntConstant(m, #name, value) < 0)                                              \
        goto fail;
    HPS_ERRNO_MAP(ADD_ERR)
#undef ADD_ERR
    return m;
fail:
    Py_XDECREF(m);
    return NULL;
}
