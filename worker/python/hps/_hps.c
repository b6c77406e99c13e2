/*
 * _hps.c -- the CPython extension under the Python module `hps`: a binding
 * of libhps (include/hps/client.h), C only.
 *
 * Everything a lookup call does per call is here, so the Python layer adds
 * almost nothing: the model and table are resolved through dicts built once
 * at open; keys and outputs are read through the buffer protocol (numpy) or
 * DLPack (torch, cupy, raw capsules); every check is done before the GIL is
 * released around the libhps call.  Outputs that the caller did not pass
 * are allocated by callables that hps/__init__.py registers
 * (_set_allocators): numpy.empty for host keys read through the buffer
 * protocol, a Python function for DLPack keys (torch.empty on the keys'
 * device, ...).
 *
 * DLPack (dlpack/dlpack.h, the Python array API's exchange protocol): the
 * consumer (this module) asks the producer for its device
 * (__dlpack_device__), then for a capsule (__dlpack__, with stream= the
 * consumer's CUDA stream for CUDA memory, 1 for the legacy default stream),
 * renames the capsule "used_dltensor" once it owns the DLManagedTensor and
 * calls its deleter when done.
 *
 * Every failure raises hps.Error (code: an hps_err_t, name: hps_err_name).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlpack/dlpack.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "hps/client.h"
#include "hps/hps.h"

/* ---- module state ------------------------------------------------------- */

static PyObject *HpsError;   /* hps.Error */
static PyObject *np_empty;   /* numpy.empty, from _set_allocators */
static PyObject *np_float32; /* numpy.dtype('float32') */
static PyObject *dl_alloc;   /* alloc(keys, shape, device_type, device_id) */
static PyObject *str_dlpack, *str_dlpack_device, *str_cuda_stream, *str_torch, *kw_stream;

/* ---- errors ------------------------------------------------------------- */

/* Raise hps.Error(msg) with .code = code, .name = hps_err_name(code); cause,
 * if not NULL, becomes __cause__ (stolen).  Returns NULL. */
static PyObject *raise_msg(hps_err_t code, PyObject *msg, PyObject *cause)
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
static PyObject *raise_fmt(hps_err_t code, const char *fmt, ...)
{
    va_list ap;
    PyObject *msg;

    va_start(ap, fmt);
    msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    return raise_msg(code, msg, NULL);
}

/* hps.Error of a failed libhps call: the calling thread's message, else the
 * code's text. */
static PyObject *raise_c(hps_err_t rc)
{
    const char *m = hps_client_last_error();

    if (!m || !*m)
        m = hps_strerror(rc);
    return raise_msg(rc, PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace"), NULL);
}

/* Turn the pending Python exception (from a producer's __dlpack__, a buffer
 * export, an allocator) into hps.Error("<what>: <Type>: <text>") chained to
 * it; an hps.Error passes unchanged. */
static PyObject *wrap_pyerr(const char *what)
{
    PyObject *type, *value, *tb, *s, *msg;

    if (!PyErr_Occurred())
        return raise_fmt(HPS_EINVAL, "%s failed", what);
    if (PyErr_ExceptionMatches(HpsError))
        return NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb)
        PyException_SetTraceback(value, tb);
    s = PyObject_Str(value);
    msg = s ? PyUnicode_FromFormat("%s: %s: %U", what, ((PyTypeObject *)type)->tp_name, s)
            : PyUnicode_FromFormat("%s: %s", what, ((PyTypeObject *)type)->tp_name);
    PyErr_Clear();
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return raise_msg(HPS_EINVAL, msg, value);
}

/* ---- argument parsing (vectorcall) -------------------------------------- */

/* Fill out[0 .. nnames-1] from positional args and keyword names; the first
 * nreq are required; absent optionals stay NULL (borrowed references). */
static int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int nnames, int nreq, PyObject **out)
{
    for (int i = 0; i < nnames; i++)
        out[i] = NULL;
    if (nargs > nnames) {
        raise_fmt(HPS_EINVAL, "%s() takes at most %d arguments (%zd given)", fn, nnames, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int i;
        if (!kn)
            return -1;
        for (i = 0; i < nnames; i++)
            if (strcmp(kn, names[i]) == 0)
                break;
        if (i == nnames) {
            raise_fmt(HPS_EINVAL, "%s() got an unexpected keyword argument '%s'", fn, kn);
            return -1;
        }
        if (out[i]) {
            raise_fmt(HPS_EINVAL, "%s() got multiple values for argument '%s'", fn, kn);
            return -1;
        }
        out[i] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++) {
        if (!out[i]) {
            raise_fmt(HPS_EINVAL, "%s() missing required argument '%s'", fn, names[i]);
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
static int parse_stream(PyObject *o, void **ret)
{
    PyObject *v = NULL;
    unsigned long long s;

    *ret = NULL;
    if (!o)
        return 0;
    if (!PyLong_Check(o)) {
        v = PyObject_GetAttr(o, str_cuda_stream);
        if (!v) {
            PyErr_Clear();
            raise_fmt(HPS_EINVAL,
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
        wrap_pyerr("stream");
        return -1;
    }
    *ret = (void *)(uintptr_t)s;
    return 0;
}

/* ---- arrays: buffer protocol or DLPack ---------------------------------- */

enum { ARR_KEYS, ARR_OUT };

/* An array argument held for the length of a call. */
typedef struct arr {
    PyObject *obj;       /* the argument (borrowed) */
    Py_buffer view;      /* buffer protocol ... */
    int have_view;       /* ... when set */
    PyObject *capsule;   /* DLPack: the consumed capsule ("used_dltensor") */
    DLManagedTensor *mt; /* its tensor; deleter called by arr_release */
    void *data;
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int loc;                 /* HPS_HOST or a CUDA device ordinal */
    int dl_device_type;      /* kDLCPU for buffers */
    int is_torch;            /* a torch.Tensor */
    hps_key_type_t key_type; /* keys */
} arr_t;

static void arr_release(arr_t *a)
{
    if (a->have_view) {
        PyBuffer_Release(&a->view);
        a->have_view = 0;
    }
    if (a->mt) {
        if (a->mt->deleter)
            a->mt->deleter(a->mt);
        a->mt = NULL;
    }
    Py_CLEAR(a->capsule);
}

static const char *loc_str(int loc, char *buf, size_t len)
{
    if (loc == HPS_HOST)
        snprintf(buf, len, "host memory");
    else
        snprintf(buf, len, "CUDA memory of device %d", loc);
    return buf;
}

/* Buffer format of a signed integer (int32 / int64 by itemsize) or float32. */
static int fmt_kind(const char *f, Py_ssize_t itemsize, int want)
{
    if (!f)
        f = "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return -1;
    if (want == ARR_KEYS) {
        if (!strchr("ilqn", f[0]))
            return -1;
        return itemsize == 8 ? HPS_KEY_INT64 : itemsize == 4 ? HPS_KEY_INT32 : -1;
    }
    return f[0] == 'f' && itemsize == 4 ? 0 : -1;
}

static int from_buffer(PyObject *o, int kind, const char *what, arr_t *a)
{
    int flags = kind == ARR_KEYS ? PyBUF_RECORDS_RO : PyBUF_RECORDS;
    Py_buffer *v = &a->view;

    if (PyObject_GetBuffer(o, v, flags) < 0) {
        wrap_pyerr(kind == ARR_KEYS ? "keys" : "out (a writable buffer)");
        return -1;
    }
    a->have_view = 1;
    a->loc = HPS_HOST;
    a->dl_device_type = kDLCPU;
    a->data = v->buf;
    if (v->ndim < 1 || v->ndim > 2) {
        raise_fmt(HPS_EINVAL, "%s must be %s, got %d dimensions", what,
                  kind == ARR_KEYS ? "1-D" : "1-D or 2-D", v->ndim);
        return -1;
    }
    int k = fmt_kind(v->format, v->itemsize, kind);
    if (k < 0) {
        raise_fmt(HPS_EINVAL, "%s must be %s, got buffer format '%s' (itemsize %zd)", what,
                  kind == ARR_KEYS ? "int64 or int32" : "float32", v->format ? v->format : "B",
                  v->itemsize);
        return -1;
    }
    if (!PyBuffer_IsContiguous(v, 'C')) {
        raise_fmt(HPS_EINVAL, "%s must be C-contiguous", what);
        return -1;
    }
    a->key_type = (hps_key_type_t)k;
    a->ndim = v->ndim;
    a->numel = 1;
    for (int i = 0; i < v->ndim; i++) {
        a->shape[i] = v->shape[i];
        a->numel *= v->shape[i];
    }
    return 0;
}

/* Ask obj for a DLPack capsule: __dlpack_device__ first, then __dlpack__
 * with stream= for CUDA memory (the protocol's consumer side).  A raw
 * capsule is taken as it is.  Returns a new reference or NULL. */
static PyObject *dlpack_capsule(PyObject *o, void *stream, const char *what)
{
    PyObject *dev, *cap;
    long devtype = kDLCPU;

    if (PyCapsule_CheckExact(o)) {
        Py_INCREF(o);
        return o;
    }
    dev = PyObject_CallMethodNoArgs(o, str_dlpack_device);
    if (dev) {
        if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2)
            devtype = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
        Py_DECREF(dev);
        if (devtype == -1 && PyErr_Occurred())
            return wrap_pyerr(what);
    } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear(); /* an older producer: __dlpack__ alone */
    } else {
        return wrap_pyerr(what);
    }
    if (devtype == kDLCUDA) {
        PyObject *s = PyLong_FromUnsignedLongLong(stream ? (uintptr_t)stream : 1);
        PyObject *args[3] = {NULL, o, s}; /* args[0]: room for the OFFSET flag */
        if (!s)
            return NULL;
        cap = PyObject_VectorcallMethod(str_dlpack, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                        kw_stream);
        Py_DECREF(s);
    } else {
        cap = PyObject_CallMethodNoArgs(o, str_dlpack);
    }
    if (!cap)
        return wrap_pyerr(what);
    return cap;
}

/* Take a DLPack array: cap (stolen) when the caller already has the capsule,
 * else asked from o by the protocol. */
static int from_dlpack(PyObject *o, PyObject *cap, int kind, const char *what, void *stream,
                       arr_t *a)
{
    DLTensor *t;

    a->capsule = cap ? cap : dlpack_capsule(o, stream, what);
    if (!a->capsule)
        return -1;
    if (!PyCapsule_IsValid(a->capsule, "dltensor")) {
        raise_fmt(HPS_EINVAL, "%s: not a DLPack capsule, or one already consumed", what);
        return -1;
    }
    a->mt = PyCapsule_GetPointer(a->capsule, "dltensor");
    if (!a->mt || PyCapsule_SetName(a->capsule, "used_dltensor") < 0) {
        a->mt = NULL;
        wrap_pyerr(what);
        return -1;
    }
    t = &a->mt->dl_tensor;
    a->dl_device_type = t->device.device_type;
    switch (t->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
        a->loc = HPS_HOST;
        break;
    case kDLCUDA:
        a->loc = t->device.device_id;
        break;
    default:
        raise_fmt(HPS_EINVAL, "%s: DLPack device type %d is not supported (CPU, CUDA, CUDAHost)",
                  what, (int)t->device.device_type);
        return -1;
    }
    if (t->ndim < 1 || t->ndim > 2) {
        raise_fmt(HPS_EINVAL, "%s must be %s, got %d dimensions", what,
                  kind == ARR_KEYS ? "1-D" : "1-D or 2-D", t->ndim);
        return -1;
    }
    if (kind == ARR_KEYS) {
        if (t->dtype.code != kDLInt || t->dtype.lanes != 1 ||
            (t->dtype.bits != 64 && t->dtype.bits != 32)) {
            raise_fmt(HPS_EINVAL, "%s must be int64 or int32, got DLPack dtype code %d bits %d",
                      what, (int)t->dtype.code, (int)t->dtype.bits);
            return -1;
        }
        a->key_type = t->dtype.bits == 64 ? HPS_KEY_INT64 : HPS_KEY_INT32;
    } else if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1) {
        raise_fmt(HPS_EINVAL, "%s must be float32, got DLPack dtype code %d bits %d", what,
                  (int)t->dtype.code, (int)t->dtype.bits);
        return -1;
    }
    a->ndim = t->ndim;
    a->numel = 1;
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        a->shape[i] = t->shape[i];
        a->numel *= t->shape[i];
        if (t->strides && t->shape[i] > 1 && t->strides[i] != expect) {
            raise_fmt(HPS_EINVAL, "%s must be C-contiguous", what);
            return -1;
        }
        expect *= t->shape[i];
    }
    a->data = (char *)t->data + t->byte_offset;
    return 0;
}

/* ---- torch tensors: DLPack without the Python-level protocol ------------
 *
 * torch's Tensor.__dlpack_device__ and __dlpack__ are Python code (about
 * 8 us per call together in torch 1.13), so torch tensors take a shortcut
 * with the same result: torch._C._to_dlpack (the C function under
 * __dlpack__), and for CUDA memory the protocol's stream handshake only
 * where it does something: when the lookup's stream is not torch's current
 * stream of the device (__dlpack__(stream=s) makes s wait for it).  Outputs
 * are allocated with torch.empty called from here. */
static struct {
    PyObject *Tensor;     /* torch.Tensor; NULL until torch is imported */
    PyObject *to_dlpack;  /* torch._C._to_dlpack */
    PyObject *empty;      /* torch.empty */
    PyObject *float32;    /* torch.float32 */
    PyObject *raw_stream; /* torch._C._cuda_getCurrentRawStream, or NULL */
    PyObject *cur_stream; /* torch.cuda.current_stream (fallback), or NULL */
    PyObject *kw_dtype, *kw_dtype_device;
    int broken; /* torch lacks something: the generic protocol path */
} tch;

/* Whether torch is imported (by anyone) and its fast path usable. */
static int torch_ready(void)
{
    PyObject *mod, *c, *cuda;

    if (tch.Tensor)
        return 1;
    if (tch.broken)
        return 0;
    mod = PyImport_GetModule(str_torch); /* imported already? (never imports) */
    if (!mod) {
        PyErr_Clear();
        return 0;
    }
    c = PyObject_GetAttrString(mod, "_C");
    PyErr_Clear();
    cuda = PyObject_GetAttrString(mod, "cuda");
    PyErr_Clear();
    tch.to_dlpack = c ? PyObject_GetAttrString(c, "_to_dlpack") : NULL;
    PyErr_Clear();
    tch.raw_stream = c ? PyObject_GetAttrString(c, "_cuda_getCurrentRawStream") : NULL;
    PyErr_Clear();
    tch.cur_stream = cuda ? PyObject_GetAttrString(cuda, "current_stream") : NULL;
    PyErr_Clear();
    tch.empty = PyObject_GetAttrString(mod, "empty");
    PyErr_Clear();
    tch.float32 = PyObject_GetAttrString(mod, "float32");
    PyErr_Clear();
    tch.kw_dtype = Py_BuildValue("(s)", "dtype");
    tch.kw_dtype_device = Py_BuildValue("(ss)", "dtype", "device");
    tch.Tensor = PyObject_GetAttrString(mod, "Tensor");
    PyErr_Clear();
    Py_XDECREF(c);
    Py_XDECREF(cuda);
    Py_DECREF(mod);
    if (!tch.Tensor || !tch.empty || !tch.float32 || !tch.to_dlpack || !tch.kw_dtype ||
        !tch.kw_dtype_device || !PyType_Check(tch.Tensor)) {
        Py_CLEAR(tch.Tensor);
        tch.broken = 1;
        return 0;
    }
    return 1;
}

static int is_torch(PyObject *o)
{
    return torch_ready() && PyObject_TypeCheck(o, (PyTypeObject *)tch.Tensor);
}

/* torch's current CUDA stream of a device (0: the default stream), or
 * (uintptr_t)-1 when unknown. */
static uintptr_t torch_current_stream(int device)
{
    PyObject *r = NULL, *s;
    unsigned long long v;

    if (tch.raw_stream) {
        r = PyObject_CallFunction(tch.raw_stream, "i", device);
    } else if (tch.cur_stream) {
        s = PyObject_CallFunction(tch.cur_stream, "i", device);
        r = s ? PyObject_GetAttr(s, str_cuda_stream) : NULL;
        Py_XDECREF(s);
    }
    v = r ? PyLong_AsUnsignedLongLong(r) : (unsigned long long)-1;
    Py_XDECREF(r);
    PyErr_Clear();
    return (uintptr_t)v;
}

static int from_torch(PyObject *o, int kind, const char *what, void *stream, arr_t *a)
{
    PyObject *cap;
    DLManagedTensor *mt;

    if (kind == ARR_OUT) {
        PyObject *rg = PyObject_GetAttrString(o, "requires_grad");
        int bad = rg ? PyObject_IsTrue(rg) : -1;
        Py_XDECREF(rg);
        if (bad) {
            if (bad < 0)
                wrap_pyerr(what);
            else
                raise_fmt(HPS_EINVAL, "%s requires grad (lookups are inference only)", what);
            return -1;
        }
    }
    cap = PyObject_CallOneArg(tch.to_dlpack, o);
    if (!cap) {
        wrap_pyerr(what);
        return -1;
    }
    mt = PyCapsule_GetPointer(cap, "dltensor");
    PyErr_Clear();
    if (mt && mt->dl_tensor.device.device_type == kDLCUDA) {
        /* The lookup's stream: NULL and 1 are the legacy default stream,
         * which is torch's default stream (raw handle 0). */
        uintptr_t want = (uintptr_t)stream == 1 ? 0 : (uintptr_t)stream;
        if (torch_current_stream(mt->dl_tensor.device.device_id) != want) {
            Py_DECREF(cap); /* unconsumed: its destructor frees it */
            cap = NULL;     /* the protocol, with its stream handshake */
        }
    }
    return from_dlpack(o, cap, kind, what, stream, a);
}

/* A torch output of shape on the device of the torch keys k. */
static PyObject *torch_empty(PyObject *k, PyObject *shape, int loc)
{
    PyObject *r, *dev;

    if (loc == HPS_HOST) {
        PyObject *args[3] = {NULL, shape, tch.float32};
        return PyObject_Vectorcall(tch.empty, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   tch.kw_dtype);
    }
    dev = PyObject_GetAttrString(k, "device");
    if (!dev)
        return NULL;
    PyObject *args[4] = {NULL, shape, tch.float32, dev};
    r = PyObject_Vectorcall(tch.empty, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                            tch.kw_dtype_device);
    Py_DECREF(dev);
    return r;
}

/* Read an array argument: the buffer protocol first (numpy), then torch
 * tensors, then DLPack. */
static int arr_get(PyObject *o, int kind, const char *what, void *stream, arr_t *a)
{
    a->obj = o;
    if (PyObject_CheckBuffer(o))
        return from_buffer(o, kind, what, a);
    if (is_torch(o)) {
        a->is_torch = 1;
        return from_torch(o, kind, what, stream, a);
    }
    if (PyCapsule_CheckExact(o) || PyObject_HasAttr(o, str_dlpack))
        return from_dlpack(o, NULL, kind, what, stream, a);

    raise_fmt(HPS_EINVAL,
              "%s must be %s (a numpy array, or an object with __dlpack__ such as a torch "
              "tensor), not %s",
              what, kind == ARR_KEYS ? "a 1-D int64 or int32 array" : "a float32 array",
              Py_TYPE(o)->tp_name);
    return -1;
}

/* ---- the Client type ---------------------------------------------------- */

typedef struct model {
    PyObject *name;        /* str */
    PyObject *table_index; /* dict: table name -> index */
    uint32_t num_tables;
    uint32_t key_bytes;
    uint32_t *dims;
} model_t;

typedef struct client_object {
    PyObject_HEAD hps_client_t *c;
    int device;
    size_t num_models;
    model_t *models;
    PyObject *model_index; /* dict: model name -> index */
    PyObject *config;      /* str */
    long busy;             /* calls running without the GIL (changed with it held) */
    int closing;
    PyObject *weakreflist;
} client_object;

static int client_enter(client_object *self)
{
    if (!self->c || self->closing) {
        raise_fmt(HPS_EINVAL, "the client is closed");
        return -1;
    }
    return 0;
}

static void free_models(client_object *self)
{
    for (size_t m = 0; m < self->num_models; m++) {
        Py_XDECREF(self->models[m].name);
        Py_XDECREF(self->models[m].table_index);
        PyMem_Free(self->models[m].dims);
    }
    PyMem_Free(self->models);
    self->models = NULL;
    self->num_models = 0;
    Py_CLEAR(self->model_index);
}

static void client_do_close(client_object *self)
{
    hps_client_t *c = self->c;

    if (!c || self->closing)
        return;
    self->closing = 1;
    while (self->busy > 0) { /* hps_client_close needs every other call returned */
        PyThreadState *ts = PyEval_SaveThread();
        usleep(1000);
        PyEval_RestoreThread(ts);
    }
    self->c = NULL;
    PyThreadState *ts = PyEval_SaveThread();
    hps_client_close(c);
    PyEval_RestoreThread(ts);
    self->closing = 0;
}

static void client_dealloc(client_object *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    client_do_close(self);
    free_models(self);
    Py_CLEAR(self->config);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The models and tables, looked up once each: names -> indices, dims.  A
 * later call adds the models the client learned since (it only grows:
 * hps_client_num_models). */
static int load_models(client_object *self)
{
    size_t n = hps_client_num_models(self->c);

    if (!self->models) {
        self->model_index = PyDict_New();
        self->models = PyMem_Calloc(HPS_CONF_MAX_MODELS, sizeof(model_t));
        if (!self->model_index || !self->models) {
            PyErr_NoMemory();
            return -1;
        }
    }
    for (size_t m = self->num_models; m < n && m < HPS_CONF_MAX_MODELS; m++) {
        self->num_models = m + 1; /* free_models frees a partial entry */
        model_t *md = &self->models[m];
        hps_client_model_info_t mi;
        hps_err_t rc = hps_client_model_info(self->c, m, &mi);
        if (rc < 0) {
            raise_c(rc);
            return -1;
        }
        md->num_tables = mi.num_tables;
        md->key_bytes = mi.key_bytes;
        md->name = PyUnicode_FromString(mi.name);
        md->table_index = PyDict_New();
        md->dims = PyMem_Calloc(mi.num_tables ? mi.num_tables : 1, sizeof(uint32_t));
        if (!md->name || !md->table_index || !md->dims)
            return -1;
        PyObject *idx = PyLong_FromSize_t(m);
        if (!idx || PyDict_SetItem(self->model_index, md->name, idx) < 0) {
            Py_XDECREF(idx);
            return -1;
        }
        Py_DECREF(idx);
        for (uint32_t t = 0; t < mi.num_tables; t++) {
            hps_client_table_info_t ti;
            rc = hps_client_table_info(self->c, m, t, &ti);
            if (rc < 0) {
                raise_c(rc);
                return -1;
            }
            md->dims[t] = ti.dim;
            PyObject *tn = PyUnicode_FromString(ti.name ? ti.name : "");
            PyObject *ix = PyLong_FromUnsignedLong(t);
            int bad = !tn || !ix;
            /* The first table of a name wins (names are unique in a valid INI). */
            if (!bad && !PyDict_Contains(md->table_index, tn))
                bad = PyDict_SetItem(md->table_index, tn, ix) < 0;
            Py_XDECREF(tn);
            Py_XDECREF(ix);
            if (bad)
                return -1;
        }
    }
    return 0;
}

static int client_init(client_object *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"config", "device", NULL};
    PyObject *path = NULL;
    int device = 0;
    char err[1024] = "";
    hps_client_t *c = NULL;
    hps_err_t rc;

    if (self->c || self->models) {
        raise_fmt(HPS_EINVAL, "Client.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|i:Client", kwlist, PyUnicode_FSConverter,
                                     &path, &device)) {
        wrap_pyerr("Client()");
        return -1;
    }
    const char *p = PyBytes_AS_STRING(path);
    PyThreadState *ts = PyEval_SaveThread();
    rc = hps_client_open(p, device, &c, err, sizeof(err));
    PyEval_RestoreThread(ts);
    if (rc < 0) {
        if (err[0])
            raise_msg(rc, PyUnicode_DecodeUTF8(err, (Py_ssize_t)strlen(err), "replace"), NULL);
        else
            raise_fmt(rc, "%s: %s", p, hps_strerror(rc));
        Py_DECREF(path);
        return -1;
    }
    self->config = PyUnicode_DecodeFSDefault(p);
    Py_DECREF(path);
    self->c = c;
    self->device = hps_client_device(c);
    if (!self->config || load_models(self) < 0) {
        client_do_close(self);
        free_models(self);
        return -1;
    }
    return 0;
}

/* A model not known yet: the client looks for models added to its INI
 * since (hps_client_refresh_models), and this object adds what it learned.
 * -1 with an exception set on failure. */
static int learn_models(client_object *self)
{
    hps_client_refresh_models(self->c, NULL);
    return hps_client_num_models(self->c) > self->num_models ? load_models(self) : 0;
}

static int get_model(client_object *self, PyObject *o, size_t *ret)
{
    if (PyUnicode_Check(o)) {
        PyObject *v = PyDict_GetItemWithError(self->model_index, o);
        if (!v && !PyErr_Occurred() && learn_models(self) == 0)
            v = PyDict_GetItemWithError(self->model_index, o);
        if (!v) {
            if (!PyErr_Occurred()) {
                PyObject *names = PyDict_Keys(self->model_index);
                raise_fmt(HPS_ENOTFOUND, "unknown model '%U' (models: %R)", o, names);
                Py_XDECREF(names);
            }
            return -1;
        }
        *ret = PyLong_AsSize_t(v);
        return 0;
    }
    if (PyLong_Check(o)) {
        long long m = PyLong_AsLongLong(o);
        if (m >= 0 && (unsigned long long)m >= self->num_models && learn_models(self) < 0)
            return -1;
        if (m < 0 || (unsigned long long)m >= self->num_models) {
            PyErr_Clear();
            raise_fmt(HPS_EINVAL, "model index %R out of range (%zu models)", o, self->num_models);
            return -1;
        }
        *ret = (size_t)m;
        return 0;
    }
    raise_fmt(HPS_EINVAL, "model must be a name (str) or an index, not %s", Py_TYPE(o)->tp_name);
    return -1;
}

static int get_table(client_object *self, size_t m, PyObject *o, uint32_t *ret)
{
    model_t *md = &self->models[m];

    if (PyUnicode_Check(o)) {
        PyObject *v = PyDict_GetItemWithError(md->table_index, o);
        if (!v) {
            if (!PyErr_Occurred()) {
                PyObject *names = PyDict_Keys(md->table_index);
                raise_fmt(HPS_ENOTFOUND, "model '%U' has no table '%U' (tables: %R)", md->name, o,
                          names);
                Py_XDECREF(names);
            }
            return -1;
        }
        *ret = (uint32_t)PyLong_AsUnsignedLong(v);
        return 0;
    }
    if (PyLong_Check(o)) {
        long long t = PyLong_AsLongLong(o);
        if (t < 0 || t >= md->num_tables) {
            PyErr_Clear();
            raise_fmt(HPS_EINVAL, "table_id %R out of range: model '%U' has %u tables", o, md->name,
                      md->num_tables);
            return -1;
        }
        *ret = (uint32_t)t;
        return 0;
    }
    raise_fmt(HPS_EINVAL, "table must be an index (int) or a name (str), not %s",
              Py_TYPE(o)->tp_name);
    return -1;
}

/* The location of an array must be host memory or the client's device. */
static int check_loc(client_object *self, const arr_t *a, const char *what)
{
    char b1[64], b2[64];

    if (a->loc == HPS_HOST || a->loc == self->device)
        return 0;
    if (self->device < 0)
        raise_fmt(HPS_EINVAL, "%s are in %s but the client is host-only (device -1)", what,
                  loc_str(a->loc, b1, sizeof b1));
    else
        raise_fmt(HPS_EINVAL, "%s are in %s but the client is on %s", what,
                  loc_str(a->loc, b1, sizeof b1), loc_str(self->device, b2, sizeof b2));
    return -1;
}

/* Get or allocate the output of a call, shape (rows, dim) (ndim 2) or
 * (rows,) (ndim 1), where the keys are.  strict: out= of exactly that shape;
 * else any C-contiguous float32 array of that many elements. */
static PyObject *get_out(PyObject *out_arg, const arr_t *keys, int64_t rows, int64_t dim, int ndim,
                         int strict, void *stream, arr_t *out)
{
    char b1[64], b2[64];
    PyObject *o;

    if (out_arg) {
        Py_INCREF(out_arg);
        o = out_arg;
    } else {
        PyObject *shape = ndim == 2 ? Py_BuildValue("(LL)", (long long)rows, (long long)dim)
                                    : Py_BuildValue("(L)", (long long)rows);
        if (!shape)
            return NULL;
        if (keys->is_torch) {
            o = torch_empty(keys->obj, shape, keys->loc);
        } else if (keys->capsule && !PyCapsule_CheckExact(keys->obj) && dl_alloc) {
            /* DLPack keys: an array of the keys' kind (torch.empty on keys.device) */
            o = PyObject_CallFunction(dl_alloc, "OOii", keys->obj, shape, keys->dl_device_type,
                                      keys->loc);
        } else if (keys->loc == HPS_HOST && np_empty) {
            PyObject *args[2] = {shape, np_float32};
            o = PyObject_Vectorcall(np_empty, args, 2, NULL);
        } else {
            Py_DECREF(shape);
            if (!np_empty)
                return raise_fmt(HPS_EINVAL, "no output allocator registered (import hps)");
            return raise_fmt(HPS_EINVAL, "keys in %s given as a DLPack capsule: pass out=",
                             loc_str(keys->loc, b1, sizeof b1));
        }
        Py_DECREF(shape);
        if (!o)
            return wrap_pyerr("allocating the output");
    }
    if (arr_get(o, ARR_OUT, "out", stream, out) < 0)
        goto fail;
    if (out->loc != keys->loc) {
        raise_fmt(HPS_EINVAL, "out is in %s but the keys are in %s", loc_str(out->loc, b1, 64),
                  loc_str(keys->loc, b2, 64));
        goto fail;
    }
    int ok;
    if (!strict)
        ok = out->numel == rows * dim;
    else if (ndim == 2)
        ok = out->ndim == 2 && out->shape[0] == rows && out->shape[1] == dim;
    else
        ok = out->ndim == 1 && out->shape[0] == rows;
    if (!ok) {
        PyObject *got = out->ndim == 2 ? Py_BuildValue("(LL)", (long long)out->shape[0],
                                                       (long long)out->shape[1])
                                       : Py_BuildValue("(L)", (long long)out->shape[0]);
        if (!strict)
            raise_fmt(HPS_EINVAL,
                      "out must hold %lld float32 elements (%lld keys x dim %lld), "
                      "got shape %R",
                      (long long)(rows * dim), (long long)rows, (long long)dim, got);
        else if (ndim == 2)
            raise_fmt(HPS_EINVAL, "out must have shape (%lld, %lld), got %R", (long long)rows,
                      (long long)dim, got);
        else
            raise_fmt(HPS_EINVAL, "out must have shape (%lld,), got %R", (long long)rows, got);
        Py_XDECREF(got);
        goto fail;
    }
    return o;
fail:
    Py_DECREF(o);
    return NULL;
}

static PyObject *lookup_impl(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, int strict, const char *fn)
{
    static const char *const names[] = {"model", "table", "keys", "out", "stream"};
    PyObject *a[5], *o = NULL;
    size_t m;
    uint32_t t;
    void *stream;
    arr_t keys = {0}, out = {0};
    hps_err_t rc;

    if (parse_args(fn, args, nargs, kwnames, names, 5, strict ? 3 : 4, a) < 0 ||
        client_enter(self) < 0 || get_model(self, a[0], &m) < 0 ||
        get_table(self, m, a[1], &t) < 0 || parse_stream(a[4], &stream) < 0)
        return NULL;
    if (arr_get(a[2], ARR_KEYS, "keys", stream, &keys) < 0)
        goto done;
    if (keys.ndim != 1) {
        raise_fmt(HPS_EINVAL, "keys must be 1-D, got %d dimensions", keys.ndim);
        goto done;
    }
    if (check_loc(self, &keys, "keys") < 0)
        goto done;
    if (keys.numel > INT32_MAX) {
        raise_fmt(HPS_EINVAL, "too many keys (%lld; at most %d)", (long long)keys.numel, INT32_MAX);
        goto done;
    }
    uint32_t dim = self->models[m].dims[t];
    o = get_out(a[3], &keys, keys.numel, dim, 2, strict, stream, &out);
    if (!o)
        goto done;
    if (keys.numel > 0) {
        if (client_enter(self) < 0) /* an allocator may have closed it */
            goto fail;
        hps_client_t *c = self->c;
        self->busy++;
        PyThreadState *ts = PyEval_SaveThread();
        rc = hps_client_lookup_table(c, m, t, (size_t)keys.numel, keys.data, keys.key_type,
                                     keys.loc, (float *)out.data, out.loc, stream);
        PyEval_RestoreThread(ts);
        self->busy--;
        if (rc < 0) {
            raise_c(rc);
            goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(o);
done:
    arr_release(&out);
    arr_release(&keys);
    if (!strict && o) {
        Py_DECREF(o);
        Py_RETURN_NONE;
    }
    return o;
}

PyDoc_STRVAR(lookup_doc,
             "lookup(model, table, keys, out=None, stream=None) -> out\n"
             "\n"
             "Embedding vectors of the keys of one table (HugeCTR's lookup(keys, model, "
             "table_id)).\n"
             "\n"
             "model   name (str) of a model of the configuration, or its index.\n"
             "table   index (int, HugeCTR's table_id) or name (str, embedding_table_names).\n"
             "keys    1-D contiguous int64 or int32 array of n keys: a numpy array (or any\n"
             "        buffer), or an object with __dlpack__ (a torch tensor on the CPU or on\n"
             "        the client's CUDA device), or a DLPack capsule.\n"
             "out     None, or a C-contiguous float32 array of shape (n, dim) in the same\n"
             "        kind of memory as the keys; written and returned.\n"
             "stream  None (the legacy default CUDA stream), an int (cudaStream_t) or an\n"
             "        object with .cuda_stream (torch.cuda.Stream).\n"
             "\n"
             "Returns float32 (n, dim) where the keys live: a numpy array for host keys\n"
             "read through the buffer protocol, a torch tensor on keys.device for torch\n"
             "keys.  Keys found nowhere get the table's default value.  The output is\n"
             "complete when the call returns.  Raises hps.Error.");

static PyObject *client_lookup(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    return lookup_impl(self, args, nargs, kwnames, 1, "lookup");
}

PyDoc_STRVAR(lookup_any_doc, "_lookup_any(model, table, keys, out, stream=None) -> None\n"
                             "\n"
                             "lookup() into out of any C-contiguous float32 shape holding n*dim "
                             "elements (hps.HPS.lookup_fromdlpack).");

static PyObject *client_lookup_any(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    return lookup_impl(self, args, nargs, kwnames, 0, "_lookup_any");
}

/* numkeys: a sequence of T non-negative ints -> int32 array (PyMem). */
static int32_t *get_numkeys(PyObject *o, const model_t *md, uint32_t *ret_t, int64_t *ret_sum,
                            int64_t *ret_rows_dim)
{
    PyObject *seq = PySequence_Fast(o, "numkeys must be a sequence of ints");
    int32_t *nk = NULL;
    Py_ssize_t n;
    int64_t sum = 0, elems = 0;

    if (!seq) {
        wrap_pyerr("numkeys");
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > (Py_ssize_t)md->num_tables) {
        raise_fmt(HPS_EINVAL, "numkeys must have 1 to %u entries (model '%U'), got %zd",
                  md->num_tables, md->name, n);
        goto fail;
    }
    nk = PyMem_Malloc((size_t)n * sizeof(int32_t));
    if (!nk) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ix = PyNumber_Index(PySequence_Fast_GET_ITEM(seq, i));
        long long v = ix ? PyLong_AsLongLong(ix) : -1;
        Py_XDECREF(ix);
        if (PyErr_Occurred()) {
            wrap_pyerr("numkeys");
            goto fail;
        }
        if (v < 0 || v > INT32_MAX) {
            raise_fmt(HPS_EINVAL, "numkeys[%zd] = %lld is out of range [0, %d]", i, v, INT32_MAX);
            goto fail;
        }
        nk[i] = (int32_t)v;
        sum += v;
        elems += v * (int64_t)md->dims[i];
    }
    Py_DECREF(seq);
    *ret_t = (uint32_t)n;
    *ret_sum = sum;
    *ret_rows_dim = elems;
    return nk;
fail:
    PyMem_Free(nk);
    Py_DECREF(seq);
    return NULL;
}

PyDoc_STRVAR(lookup_multi_doc,
             "lookup_multi(model, keys, numkeys, out=None, stream=None) -> out\n"
             "\n"
             "Embedding vectors of the keys of tables 0 .. T-1 of one model in one call\n"
             "(the Triton hps backend's KEYS / NUMKEYS form).\n"
             "\n"
             "keys     1-D int64 or int32 array of N keys, table-major (table 0's first).\n"
             "numkeys  sequence of T ints (T <= the model's tables), summing to N.\n"
             "out      None or a C-contiguous float32 array of shape (sum n_t*dim_t,).\n"
             "\n"
             "Returns the flat float32 output, table blocks in table order, where the\n"
             "keys live.  Other arguments as lookup().  Raises hps.Error.");

static PyObject *client_lookup_multi(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    static const char *const names[] = {"model", "keys", "numkeys", "out", "stream"};
    PyObject *a[5], *o = NULL;
    size_t m;
    void *stream;
    arr_t keys = {0}, out = {0};
    int32_t *nk = NULL;
    uint32_t T;
    int64_t sum, elems;
    hps_err_t rc;

    if (parse_args("lookup_multi", args, nargs, kwnames, names, 5, 3, a) < 0 ||
        client_enter(self) < 0 || get_model(self, a[0], &m) < 0 || parse_stream(a[4], &stream) < 0)
        return NULL;
    nk = get_numkeys(a[2], &self->models[m], &T, &sum, &elems);
    if (!nk)
        return NULL;
    if (arr_get(a[1], ARR_KEYS, "keys", stream, &keys) < 0)
        goto done;
    if (keys.ndim != 1) {
        raise_fmt(HPS_EINVAL, "keys must be 1-D, got %d dimensions", keys.ndim);
        goto done;
    }
    if (keys.numel != sum) {
        raise_fmt(HPS_EINVAL, "numkeys sum to %lld but keys has %lld elements", (long long)sum,
                  (long long)keys.numel);
        goto done;
    }
    if (check_loc(self, &keys, "keys") < 0)
        goto done;
    o = get_out(a[3], &keys, elems, 1, 1, 1, stream, &out);
    if (!o)
        goto done;
    if (sum > 0) {
        if (client_enter(self) < 0)
            goto fail;
        hps_client_t *c = self->c;
        self->busy++;
        PyThreadState *ts = PyEval_SaveThread();
        rc = hps_client_lookup(c, m, T, nk, keys.data, keys.key_type, keys.loc, (float *)out.data,
                               out.loc, stream);
        PyEval_RestoreThread(ts);
        self->busy--;
        if (rc < 0) {
            raise_c(rc);
            goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(o);
done:
    arr_release(&out);
    arr_release(&keys);
    PyMem_Free(nk);
    return o;
}

PyDoc_STRVAR(models_doc, "models() -> list of str: the models of the configuration, file order,\n"
                         "then those added to its INI file since (read again when it changed).");

static PyObject *client_models(client_object *self, PyObject *unused)
{
    (void)unused;
    PyObject *l;

    if (client_enter(self) < 0 || learn_models(self) < 0)
        return NULL;
    l = PyList_New((Py_ssize_t)self->num_models);
    for (size_t m = 0; l && m < self->num_models; m++) {
        Py_INCREF(self->models[m].name);
        PyList_SET_ITEM(l, (Py_ssize_t)m, self->models[m].name);
    }
    return l;
}

/* Set d[key] = v (v stolen); -1 on failure. */
static int dset(PyObject *d, const char *key, PyObject *v)
{
    int r = v ? PyDict_SetItemString(d, key, v) : -1;
    Py_XDECREF(v);
    return r;
}

PyDoc_STRVAR(tables_doc, "tables(model) -> list of dict\n"
                         "\n"
                         "The tables of a model, index order: name, dim, key_bytes (8 or 4),\n"
                         "default_value, rows (in the volatile DB now; 0 before the segment is\n"
                         "attached), max_keys_per_sample, storage_type (how the volatile DB\n"
                         "stores the rows: 'fp32', 'fp16', 'bf16' or 'int8'; lookups return\n"
                         "float32 whatever it is).");

static PyObject *client_tables(client_object *self, PyObject *model)
{
    size_t m;
    PyObject *l;

    if (client_enter(self) < 0 || get_model(self, model, &m) < 0)
        return NULL;
    l = PyList_New(0);
    for (uint32_t t = 0; l && t < self->models[m].num_tables; t++) {
        hps_client_table_info_t ti;
        hps_err_t rc = hps_client_table_info(self->c, m, t, &ti);
        PyObject *d;
        if (rc < 0) {
            Py_DECREF(l);
            return raise_c(rc);
        }
        d = PyDict_New();
        if (!d || dset(d, "name", PyUnicode_FromString(ti.name ? ti.name : "")) < 0 ||
            dset(d, "dim", PyLong_FromUnsignedLong(ti.dim)) < 0 ||
            dset(d, "key_bytes", PyLong_FromUnsignedLong(ti.key_bytes)) < 0 ||
            dset(d, "default_value", PyFloat_FromDouble(ti.default_value)) < 0 ||
            dset(d, "rows", PyLong_FromUnsignedLongLong(ti.rows)) < 0 ||
            dset(d, "max_keys_per_sample", PyLong_FromUnsignedLong(ti.max_keys_per_sample)) < 0 ||
            dset(d, "storage_type", PyUnicode_FromString(hps_dtype_name(ti.storage_type))) < 0 ||
            PyList_Append(l, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(l);
            break;
        }
        Py_DECREF(d);
    }
    return l;
}

PyDoc_STRVAR(model_info_doc, "model_info(model) -> dict: name, num_tables, max_batch_size, "
                             "key_bytes, gpu_cache.");

static PyObject *client_model_info(client_object *self, PyObject *model)
{
    size_t m;
    hps_client_model_info_t mi;
    hps_err_t rc;
    PyObject *d;

    if (client_enter(self) < 0 || get_model(self, model, &m) < 0)
        return NULL;
    rc = hps_client_model_info(self->c, m, &mi);
    if (rc < 0)
        return raise_c(rc);
    d = PyDict_New();
    if (!d || dset(d, "name", PyUnicode_FromString(mi.name)) < 0 ||
        dset(d, "num_tables", PyLong_FromUnsignedLong(mi.num_tables)) < 0 ||
        dset(d, "max_batch_size", PyLong_FromUnsignedLong(mi.max_batch_size)) < 0 ||
        dset(d, "key_bytes", PyLong_FromUnsignedLong(mi.key_bytes)) < 0 ||
        dset(d, "gpu_cache", PyBool_FromLong(mi.gpu_cache)) < 0)
        Py_CLEAR(d);
    return d;
}

PyDoc_STRVAR(counters_doc,
             "counters(model) -> dict\n"
             "\n"
             "This client's counters of a model since it opened (hps-worker's nv_hps_*\n"
             "metrics): lookup_keys, vdb_hits, lower_hits, default_keys, miss_busy,\n"
             "miss_timeout, lookup_ns, lookup_calls.");

static PyObject *client_counters(client_object *self, PyObject *model)
{
    size_t m;
    hps_client_counters_t k;
    hps_err_t rc;
    PyObject *d;

    if (client_enter(self) < 0 || get_model(self, model, &m) < 0)
        return NULL;
    rc = hps_client_counters(self->c, m, &k);
    if (rc < 0)
        return raise_c(rc);
    d = PyDict_New();
    if (!d || dset(d, "lookup_keys", PyLong_FromUnsignedLongLong(k.lookup_keys)) < 0 ||
        dset(d, "vdb_hits", PyLong_FromUnsignedLongLong(k.vdb_hits)) < 0 ||
        dset(d, "lower_hits", PyLong_FromUnsignedLongLong(k.lower_hits)) < 0 ||
        dset(d, "default_keys", PyLong_FromUnsignedLongLong(k.default_keys)) < 0 ||
        dset(d, "miss_busy", PyLong_FromUnsignedLongLong(k.miss_busy)) < 0 ||
        dset(d, "miss_timeout", PyLong_FromUnsignedLongLong(k.miss_timeout)) < 0 ||
        dset(d, "lookup_ns", PyLong_FromUnsignedLongLong(k.lookup_ns)) < 0 ||
        dset(d, "lookup_calls", PyLong_FromUnsignedLongLong(k.lookup_calls)) < 0)
        Py_CLEAR(d);
    return d;
}

PyDoc_STRVAR(cache_stats_doc,
             "cache_stats(model, table) -> dict\n"
             "\n"
             "The GPU embedding cache of a table as this client maps it: lookups, hits,\n"
             "inserts, evictions, updates, occupied_rows, capacity_rows, full_refreshes,\n"
             "lock_timeouts, processes (processes mapping it), refresher (bool).\n"
             "hps.Error (code HPS_ENOTFOUND) where there is none: a host-only client,\n"
             "gpucache = false, or not built yet.");

static PyObject *client_cache_stats(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    static const char *const names[] = {"model", "table"};
    PyObject *a[2], *d;
    size_t m;
    uint32_t t;
    hps_client_cache_stats_t s;
    hps_err_t rc;

    if (parse_args("cache_stats", args, nargs, kwnames, names, 2, 2, a) < 0 ||
        client_enter(self) < 0 || get_model(self, a[0], &m) < 0 || get_table(self, m, a[1], &t) < 0)
        return NULL;
    rc = hps_client_cache_stats(self->c, m, t, &s);
    if (rc < 0)
        return raise_c(rc);
    d = PyDict_New();
    if (!d || dset(d, "lookups", PyLong_FromUnsignedLongLong(s.lookups)) < 0 ||
        dset(d, "hits", PyLong_FromUnsignedLongLong(s.hits)) < 0 ||
        dset(d, "inserts", PyLong_FromUnsignedLongLong(s.inserts)) < 0 ||
        dset(d, "evictions", PyLong_FromUnsignedLongLong(s.evictions)) < 0 ||
        dset(d, "updates", PyLong_FromUnsignedLongLong(s.updates)) < 0 ||
        dset(d, "occupied_rows", PyLong_FromUnsignedLongLong(s.occupied_rows)) < 0 ||
        dset(d, "capacity_rows", PyLong_FromUnsignedLongLong(s.capacity_rows)) < 0 ||
        dset(d, "full_refreshes", PyLong_FromUnsignedLongLong(s.full_refreshes)) < 0 ||
        dset(d, "lock_timeouts", PyLong_FromUnsignedLongLong(s.lock_timeouts)) < 0 ||
        dset(d, "processes", PyLong_FromUnsignedLong(s.processes)) < 0 ||
        dset(d, "refresher", PyBool_FromLong(s.refresher)) < 0)
        Py_CLEAR(d);
    return d;
}

PyDoc_STRVAR(ready_doc, "ready() -> bool: segment attached, every table found, the coordinator "
                        "serving, the GPU caches built.  Never blocks.");

static PyObject *client_ready(client_object *self, PyObject *unused)
{
    (void)unused;
    if (client_enter(self) < 0)
        return NULL;
    return PyBool_FromLong(hps_client_ready(self->c));
}

PyDoc_STRVAR(coordinator_alive_doc,
             "coordinator_alive() -> bool: whether the coordinator's heartbeat is fresh.");

static PyObject *client_coordinator_alive(client_object *self, PyObject *unused)
{
    (void)unused;
    if (client_enter(self) < 0)
        return NULL;
    return PyBool_FromLong(hps_client_coordinator_alive(self->c));
}

/* A timeout_ms argument: *ret = its value, clamped to UINT32_MAX; -1 with
 * hps.Error raised when it is not an int or negative. */
static int timeout_arg(PyObject *o, long long *ret)
{
    long long ms = PyLong_AsLongLong(o);
    if (ms == -1 && PyErr_Occurred()) {
        wrap_pyerr("timeout_ms");
        return -1;
    }
    if (ms < 0) {
        raise_fmt(HPS_EINVAL, "timeout_ms must be >= 0");
        return -1;
    }
    *ret = ms > UINT32_MAX ? UINT32_MAX : ms;
    return 0;
}

PyDoc_STRVAR(wait_ready_doc,
             "wait_ready(timeout_ms=10000) -> bool\n"
             "\n"
             "Wait (GIL released) until ready() or timeout_ms passed; True when ready,\n"
             "False on timeout.");

static PyObject *client_wait_ready(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const names[] = {"timeout_ms"};
    PyObject *a[1];
    long long ms = 10000;
    hps_err_t rc;

    if (parse_args("wait_ready", args, nargs, kwnames, names, 1, 0, a) < 0 ||
        client_enter(self) < 0)
        return NULL;
    if (a[0] && timeout_arg(a[0], &ms) < 0)
        return NULL;
    hps_client_t *c = self->c;
    self->busy++;
    PyThreadState *ts = PyEval_SaveThread();
    rc = hps_client_wait_ready(c, (uint32_t)ms);
    PyEval_RestoreThread(ts);
    self->busy--;
    if (rc == HPS_ETIMEDOUT)
        Py_RETURN_FALSE;
    if (rc < 0)
        return raise_c(rc);
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(load_model_doc,
             "load_model(model, timeout_ms=600000) -> str\n"
             "\n"
             "Load model (a name of the INI's [model.<name>] sections) while the others\n"
             "serve: Triton's explicit model control ([hps] model_control_mode = explicit).\n"
             "The coordinator re-reads the INI, checks the model's files and builds a new\n"
             "segment beside the serving one; returns the coordinator's answer once this\n"
             "client serves from it (GIL released while waiting).  Loading a loaded model\n"
             "reloads it (new files or version).  A model added to the INI after this\n"
             "client opened is loaded for the other processes, not served by this one.\n"
             "hps.Error: code HPS_EUNSUPPORTED (mode none), HPS_EIO (refused or failed:\n"
             "the message says why; nothing changed), HPS_ETIMEDOUT, HPS_EBUSY.");

PyDoc_STRVAR(unload_model_doc,
             "unload_model(model, timeout_ms=600000) -> str\n"
             "\n"
             "Unload model (explicit model control): its shared memory, GPU caches and\n"
             "persistent-DB tables are freed; lookups of it then raise hps.Error\n"
             "(HPS_ENOTFOUND).  Errors as load_model().");

static PyObject *client_control(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames, hps_model_op_t op)
{
    static const char *const names[] = {"model", "timeout_ms"};
    const char *what = op == HPS_MODEL_LOAD ? "load_model" : "unload_model";
    PyObject *a[2];
    long long ms = 600000;
    char msg[600];

    if (parse_args(what, args, nargs, kwnames, names, 2, 1, a) < 0 || client_enter(self) < 0)
        return NULL;
    const char *name = PyUnicode_Check(a[0]) ? PyUnicode_AsUTF8(a[0]) : NULL;
    if (!name)
        return PyErr_Occurred()
                   ? wrap_pyerr("model")
                   : raise_fmt(HPS_EINVAL, "model must be a str, not %s", Py_TYPE(a[0])->tp_name);
    if (a[1] && timeout_arg(a[1], &ms) < 0)
        return NULL;
    hps_client_t *c = self->c;
    self->busy++;
    PyThreadState *ts = PyEval_SaveThread();
    hps_err_t rc = hps_client_model_control(c, op, name, (uint32_t)ms, msg, sizeof(msg));
    PyEval_RestoreThread(ts);
    self->busy--;
    if (rc < 0)
        return raise_c(rc);
    return PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
}

static PyObject *client_load_model(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    return client_control(self, args, nargs, kwnames, HPS_MODEL_LOAD);
}

static PyObject *client_unload_model(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    return client_control(self, args, nargs, kwnames, HPS_MODEL_UNLOAD);
}

PyDoc_STRVAR(close_doc, "close(): leave the segment and the shared GPU caches (waits for calls "
                        "in flight).  Idempotent; the client is unusable afterwards.");

static PyObject *client_close(client_object *self, PyObject *unused)
{
    (void)unused;
    client_do_close(self);
    Py_RETURN_NONE;
}

static PyObject *client_enter_ctx(client_object *self, PyObject *unused)
{
    (void)unused;
    if (client_enter(self) < 0)
        return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *client_exit_ctx(client_object *self, PyObject *args)
{
    (void)args;
    client_do_close(self);
    Py_RETURN_FALSE;
}

static PyObject *client_get_device(client_object *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->device);
}

static PyObject *client_get_closed(client_object *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->c == NULL);
}

static PyObject *client_get_config(client_object *self, void *closure)
{
    (void)closure;
    PyObject *c = self->config ? self->config : Py_None;
    Py_INCREF(c);
    return c;
}

static PyObject *client_repr(client_object *self)
{
    if (!self->config)
        return PyUnicode_FromString("<hps.Client (not open)>");
    return PyUnicode_FromFormat("<hps.Client config=%R device=%d%s>", self->config, self->device,
                                self->c ? "" : " closed");
}

static PyMethodDef client_methods[] = {
    {"lookup", (PyCFunction)(void (*)(void))client_lookup, METH_FASTCALL | METH_KEYWORDS,
     lookup_doc},
    {"_lookup_any", (PyCFunction)(void (*)(void))client_lookup_any, METH_FASTCALL | METH_KEYWORDS,
     lookup_any_doc},
    {"lookup_multi", (PyCFunction)(void (*)(void))client_lookup_multi,
     METH_FASTCALL | METH_KEYWORDS, lookup_multi_doc},
    {"models", (PyCFunction)client_models, METH_NOARGS, models_doc},
    {"tables", (PyCFunction)client_tables, METH_O, tables_doc},
    {"model_info", (PyCFunction)client_model_info, METH_O, model_info_doc},
    {"counters", (PyCFunction)client_counters, METH_O, counters_doc},
    {"cache_stats", (PyCFunction)(void (*)(void))client_cache_stats, METH_FASTCALL | METH_KEYWORDS,
     cache_stats_doc},
    {"ready", (PyCFunction)client_ready, METH_NOARGS, ready_doc},
    {"wait_ready", (PyCFunction)(void (*)(void))client_wait_ready, METH_FASTCALL | METH_KEYWORDS,
     wait_ready_doc},
    {"coordinator_alive", (PyCFunction)client_coordinator_alive, METH_NOARGS,
     coordinator_alive_doc},
    {"load_model", (PyCFunction)(void (*)(void))client_load_model, METH_FASTCALL | METH_KEYWORDS,
     load_model_doc},
    {"unload_model", (PyCFunction)(void (*)(void))client_unload_model,
     METH_FASTCALL | METH_KEYWORDS, unload_model_doc},
    {"close", (PyCFunction)client_close, METH_NOARGS, close_doc},
    {"__enter__", (PyCFunction)client_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)client_exit_ctx, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"device", (getter)client_get_device, NULL,
     "The client's CUDA device, or -1 for a host-only client.", NULL},
    {"closed", (getter)client_get_closed, NULL, "Whether close() was called.", NULL},
    {"config", (getter)client_get_config, NULL, "The configuration file's path.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(client_doc,
             "Client(config, device=0)\n"
             "\n"
             "A libhps client: opens the INI configuration (the file hps-coordinator\n"
             "runs with) and attaches its shared-memory segment (now, or in the\n"
             "background as soon as the coordinator creates it; wait_ready() waits).\n"
             "device: a CUDA device ordinal (the GPU caches of models with gpucache =\n"
             "true, shared with the other processes of that device), or -1 for a\n"
             "host-only client; a device that does not exist gives a host-only client\n"
             "with a warning.  The client is a worker of the segment (hps-shm info lists\n"
             "it) until close().  Methods may be called from any thread; lookups run\n"
             "with the GIL released.  A context manager (close() on exit).\n"
             "Raises hps.Error.");

static PyTypeObject client_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hps.Client",
    .tp_basicsize = sizeof(client_object),
    .tp_dealloc = (destructor)client_dealloc,
    .tp_repr = (reprfunc)client_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = client_doc,
    .tp_weaklistoffset = offsetof(client_object, weakreflist),
    .tp_methods = client_methods,
    .tp_getset = client_getset,
    .tp_init = (initproc)client_init,
    .tp_new = PyType_GenericNew,
};

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
    Py_XSETREF(np_empty, e);
    Py_XSETREF(np_float32, f);
    Py_XSETREF(dl_alloc, d);
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

static PyMethodDef mod_methods[] = {
    {"_set_allocators", mod_set_allocators, METH_VARARGS, set_allocators_doc},
    {"strerror", mod_strerror, METH_O, strerror_doc},
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

    str_dlpack = PyUnicode_InternFromString("__dlpack__");
    str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
    str_cuda_stream = PyUnicode_InternFromString("cuda_stream");
    str_torch = PyUnicode_InternFromString("torch");
    kw_stream = Py_BuildValue("(s)", "stream");
    if (!str_dlpack || !str_dlpack_device || !str_cuda_stream || !str_torch || !kw_stream)
        return NULL;
    if (PyType_Ready(&client_type) < 0)
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
    Py_INCREF(&client_type);
    if (PyModule_AddObject(m, "Client", (PyObject *)&client_type) < 0) {
        Py_DECREF(&client_type);
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
