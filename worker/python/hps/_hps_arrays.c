/*
 * _hps_arrays.c -- the array arguments of the extension hps._hps (_hps.c):
 * keys and outputs read through the buffer protocol (numpy) or DLPack
 * (torch, cupy, raw capsules), torch tensors by a shorter path to the same
 * DLPack result, and the output of a call: the caller's out=, or one
 * allocated where the keys are.
 *
 * DLPack (dlpack/dlpack.h, the Python array API's exchange protocol): the
 * consumer (this module) asks the producer for its device
 * (__dlpack_device__), then for a capsule (__dlpack__, with stream= the
 * consumer's CUDA stream for CUDA memory, 1 for the legacy default stream),
 * renames the capsule "used_dltensor" once it owns the DLManagedTensor and
 * calls its deleter when done.
 */
#include "_hps.h"

#include <string.h>

/* ---- arrays: buffer protocol or DLPack ---------------------------------- */

/* Called on every path, also with an hps.Error pending: a producer's
 * deleter, a capsule's destructor or a buffer's release may run Python code,
 * which must not see that exception (nor lose its work to it), so it is
 * set aside meanwhile; what they raise themselves is unraisable. */
void hpspy_arr_release(arr_t *a)
{
    PyObject *exc = hpspy_err_take();

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
    PyMem_Free(a->tmp);
    a->tmp = NULL;
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(hpspy_str_dlpack); /* a->obj may be gone */
    hpspy_err_restore(exc);
}

const char *hpspy_loc_str(int loc, char *buf, size_t len)
{
    if (loc == HPS_HOST)
        snprintf(buf, len, "host memory");
    else
        snprintf(buf, len, "CUDA memory of device %d", loc);
    return buf;
}

/* The output types of a lookup, by hps_dtype_t. */
static const char *const type_names[] = {"float32", "float16", "bfloat16"};

/* Buffer format of an integer (int32 / int64 by itemsize: the
 * hps_key_type_t; uint32 / uint64 too, *ret_unsigned set) or of an output
 * (float32 / float16: the hps_dtype_t). */
static int fmt_kind(const char *f, Py_ssize_t itemsize, int want, int *ret_unsigned)
{
    if (!f)
        f = "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return -1;
    if (want == ARR_KEYS) {
        if (!strchr("ilqnILQN", f[0]))
            return -1;
        *ret_unsigned = f[0] >= 'A' && f[0] <= 'Z';
        return itemsize == 8 ? HPS_KEY_INT64 : itemsize == 4 ? HPS_KEY_INT32 : -1;
    }
    if (f[0] == 'f' && itemsize == 4)
        return HPS_DTYPE_FP32;
    return f[0] == 'e' && itemsize == 2 ? HPS_DTYPE_FP16 : -1;
}

/* An array of 1 .. HPSPY_MAX_NDIM dimensions; the call decides which it
 * takes (hpspy_get_out, the lookups' keys).  -1 with hps.Error raised. */
static int check_ndim(int ndim, const char *what)
{
    if (ndim >= 1 && ndim <= HPSPY_MAX_NDIM)
        return 0;
    hpspy_raise_fmt(HPS_EINVAL, "%s must have 1 to %d dimensions, got %d", what, HPSPY_MAX_NDIM,
                    ndim);
    return -1;
}

/* The shape of a, as a tuple (for a message); NULL with an exception set. */
static PyObject *shape_tuple(const arr_t *a)
{
    PyObject *t = PyTuple_New(a->ndim);
    for (int i = 0; t && i < a->ndim; i++) {
        PyObject *n = PyLong_FromLongLong((long long)a->shape[i]);
        if (!n) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, n);
    }
    return t;
}

static int from_buffer(PyObject *o, int kind, const char *what, arr_t *a)
{
    int flags = kind == ARR_KEYS ? PyBUF_RECORDS_RO : PyBUF_RECORDS;
    Py_buffer *v = &a->view;

    if (PyObject_GetBuffer(o, v, flags) < 0) {
        hpspy_wrap_pyerr(kind == ARR_KEYS ? "keys" : "out (a writable buffer)");
        return -1;
    }
    a->have_view = 1;
    a->loc = HPS_HOST;
    a->dl_device_type = kDLCPU;
    a->data = a->user = v->buf;
    a->elsize = (size_t)v->itemsize;
    if (check_ndim(v->ndim, what) < 0)
        return -1;
    int k = fmt_kind(v->format, v->itemsize, kind, &a->key_unsigned);
    if (k < 0) {
        hpspy_raise_fmt(HPS_EINVAL, "%s must be %s, got buffer format '%s' (itemsize %zd)", what,
                        kind == ARR_KEYS ? "int64, int32, uint64 or uint32" : "float32 or float16",
                        v->format ? v->format : "B", v->itemsize);
        return -1;
    }
    if (!PyBuffer_IsContiguous(v, 'C')) {
        hpspy_raise_fmt(HPS_EINVAL, "%s must be C-contiguous", what);
        return -1;
    }
    if (kind == ARR_KEYS)
        a->key_type = (hps_key_type_t)k;
    else
        a->out_type = (hps_dtype_t)k;
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
    dev = PyObject_CallMethodNoArgs(o, hpspy_str_dlpack_device);
    if (dev) {
        if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2)
            devtype = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
        Py_DECREF(dev);
        if (devtype == -1 && PyErr_Occurred())
            return hpspy_wrap_pyerr(what);
    } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear(); /* an older producer: __dlpack__ alone */
    } else {
        return hpspy_wrap_pyerr(what);
    }
    if (devtype == kDLCUDA) {
        PyObject *s = PyLong_FromUnsignedLongLong(stream ? (uintptr_t)stream : 1);
        PyObject *args[3] = {NULL, o, s}; /* args[0]: room for the OFFSET flag */
        if (!s)
            return NULL;
        cap = PyObject_VectorcallMethod(hpspy_str_dlpack, args + 1,
                                        1 | PY_VECTORCALL_ARGUMENTS_OFFSET, hpspy_kw_stream);
        Py_DECREF(s);
    } else {
        cap = PyObject_CallMethodNoArgs(o, hpspy_str_dlpack);
    }
    if (!cap)
        return hpspy_wrap_pyerr(what);
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
        hpspy_raise_fmt(HPS_EINVAL, "%s: not a DLPack capsule, or one already consumed", what);
        return -1;
    }
    a->mt = PyCapsule_GetPointer(a->capsule, "dltensor");
    if (!a->mt || PyCapsule_SetName(a->capsule, "used_dltensor") < 0) {
        a->mt = NULL;
        hpspy_wrap_pyerr(what);
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
        hpspy_raise_fmt(HPS_EINVAL,
                        "%s: DLPack device type %d is not supported (CPU, CUDA, CUDAHost)", what,
                        (int)t->device.device_type);
        return -1;
    }
    if (check_ndim(t->ndim, what) < 0)
        return -1;
    if (kind == ARR_KEYS) {
        if ((t->dtype.code != kDLInt && t->dtype.code != kDLUInt) || t->dtype.lanes != 1 ||
            (t->dtype.bits != 64 && t->dtype.bits != 32)) {
            hpspy_raise_fmt(HPS_EINVAL,
                            "%s must be int64, int32, uint64 or uint32, got DLPack dtype code %d "
                            "bits %d",
                            what, (int)t->dtype.code, (int)t->dtype.bits);
            return -1;
        }
        a->key_type = t->dtype.bits == 64 ? HPS_KEY_INT64 : HPS_KEY_INT32;
        a->key_unsigned = t->dtype.code == kDLUInt;
    } else if (t->dtype.lanes == 1 && t->dtype.code == kDLFloat &&
               (t->dtype.bits == 32 || t->dtype.bits == 16)) {
        a->out_type = t->dtype.bits == 32 ? HPS_DTYPE_FP32 : HPS_DTYPE_FP16;
    } else if (t->dtype.lanes == 1 && t->dtype.code == kDLBfloat && t->dtype.bits == 16) {
        a->out_type = HPS_DTYPE_BF16;
    } else {
        hpspy_raise_fmt(HPS_EINVAL,
                        "%s must be float32, float16 or bfloat16, got DLPack dtype code %d "
                        "bits %d",
                        what, (int)t->dtype.code, (int)t->dtype.bits);
        return -1;
    }
    a->elsize = t->dtype.bits / 8;
    a->ndim = t->ndim;
    a->numel = 1;
    if (!t->shape) {
        hpspy_raise_fmt(HPS_EINVAL, "%s: DLPack tensor without a shape", what);
        return -1;
    }
    for (int i = 0; i < t->ndim; i++) {
        int64_t n = t->shape[i];
        if (n < 0) {
            hpspy_raise_fmt(HPS_EINVAL, "%s: DLPack shape[%d] is negative (%lld)", what, i,
                            (long long)n);
            return -1;
        }
        if (t->strides && t->strides[i] < 0) {
            hpspy_raise_fmt(HPS_EINVAL, "%s: DLPack strides[%d] is negative (%lld)", what, i,
                            (long long)t->strides[i]);
            return -1;
        }
        if (n && a->numel > INT64_MAX / 8 / n) { /* numel * elsize must fit */
            hpspy_raise_fmt(HPS_EINVAL, "%s: DLPack shape too large (shape[%d] = %lld)", what, i,
                            (long long)n);
            return -1;
        }
        a->shape[i] = n;
        a->numel *= n;
    }
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->strides && t->shape[i] > 1 && t->strides[i] != expect) {
            hpspy_raise_fmt(HPS_EINVAL, "%s must be C-contiguous", what);
            return -1;
        }
        expect *= t->shape[i];
    }
    a->data = a->user = (char *)t->data + t->byte_offset;
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
    PyObject *types[3];   /* torch.float32, torch.float16, torch.bfloat16 (by hps_dtype_t) */
    PyObject *bool_type;  /* torch.bool, or NULL */
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
    mod = PyImport_GetModule(hpspy_str_torch); /* imported already? (never imports) */
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
    for (int i = 0; i < 3; i++) {
        tch.types[i] = PyObject_GetAttrString(mod, type_names[i]);
        PyErr_Clear();
    }
    tch.bool_type = PyObject_GetAttrString(mod, "bool");
    PyErr_Clear();
    tch.kw_dtype = Py_BuildValue("(s)", "dtype");
    tch.kw_dtype_device = Py_BuildValue("(ss)", "dtype", "device");
    tch.Tensor = PyObject_GetAttrString(mod, "Tensor");
    PyErr_Clear();
    Py_XDECREF(c);
    Py_XDECREF(cuda);
    Py_DECREF(mod);
    if (!tch.Tensor || !tch.empty || !tch.types[0] || !tch.types[1] || !tch.types[2] ||
        !tch.to_dlpack || !tch.kw_dtype || !tch.kw_dtype_device || !PyType_Check(tch.Tensor)) {
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

int hpspy_is_bool(PyObject *o)
{
    const char *n = Py_TYPE(o)->tp_name;
    PyObject *dt;
    int r;

    if (PyBool_Check(o) || strcmp(n, "numpy.bool_") == 0 || strcmp(n, "numpy.bool") == 0)
        return 1;
    if (!is_torch(o) || !tch.bool_type)
        return 0;
    dt = PyObject_GetAttrString(o, "dtype");
    r = dt == tch.bool_type;
    Py_XDECREF(dt);
    PyErr_Clear();
    return r;
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
        r = s ? PyObject_GetAttr(s, hpspy_str_cuda_stream) : NULL;
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
                hpspy_wrap_pyerr(what);
            else
                hpspy_raise_fmt(HPS_EINVAL, "%s requires grad (lookups are inference only)", what);
            return -1;
        }
    }
    cap = PyObject_CallOneArg(tch.to_dlpack, o);
    if (!cap) {
        hpspy_wrap_pyerr(what);
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

/* A torch output of shape and type (hps_dtype_t) on the device of the
 * torch keys k. */
static PyObject *torch_empty(PyObject *k, PyObject *shape, int type, int loc)
{
    PyObject *r, *dev;

    if (loc == HPS_HOST) {
        PyObject *args[3] = {NULL, shape, tch.types[type]};
        return PyObject_Vectorcall(tch.empty, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                   tch.kw_dtype);
    }
    dev = PyObject_GetAttrString(k, "device");
    if (!dev)
        return NULL;
    PyObject *args[4] = {NULL, shape, tch.types[type], dev};
    r = PyObject_Vectorcall(tch.empty, args + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                            tch.kw_dtype_device);
    Py_DECREF(dev);
    return r;
}

/* Read an array argument: the buffer protocol first (numpy), then torch
 * tensors, then DLPack. */
int hpspy_arr_get(PyObject *o, int kind, const char *what, void *stream, arr_t *a)
{
    a->obj = o;
    if (PyObject_CheckBuffer(o))
        return from_buffer(o, kind, what, a);
    if (is_torch(o)) {
        a->is_torch = 1;
        return from_torch(o, kind, what, stream, a);
    }
    if (PyCapsule_CheckExact(o) || PyObject_HasAttr(o, hpspy_str_dlpack))
        return from_dlpack(o, NULL, kind, what, stream, a);

    hpspy_raise_fmt(HPS_EINVAL,
                    "%s must be %s (a numpy array, or an object with __dlpack__ such as a torch "
                    "tensor), not %s",
                    what,
                    kind == ARR_KEYS ? "a 1-D int64 or int32 (or uint64, uint32) array"
                                     : "a float32, float16 or bfloat16 array",
                    Py_TYPE(o)->tp_name);
    return -1;
}

/* ---- outputs ------------------------------------------------------------ */

int hpspy_parse_dtype(PyObject *o, int *ret)
{
    *ret = -1;
    if (!o || o == Py_None)
        return 0;
    /* a name, or what str() gives for numpy and torch dtypes: "float16",
     * "torch.float16", "<class 'numpy.float16'>" */
    PyObject *str = PyObject_Str(o), *e;
    Py_ssize_t slen;
    const char *s = str ? PyUnicode_AsUTF8AndSize(str, &slen) : NULL;
    if (!s) {
        Py_XDECREF(str);
        hpspy_wrap_pyerr("dtype");
        return -1;
    }
    int cls = strncmp(s, "<class 'numpy.", 14) == 0;
    const char *n = strncmp(s, "torch.", 6) == 0 ? s + 6 : cls ? s + 14 : s;
    size_t len = strcspn(n, "'");
    /* the whole name ("float16'junk" is none), and no NUL ("float16\0junk") */
    if (strlen(s) == (size_t)slen && strcmp(n + len, cls ? "'>" : "") == 0) {
        for (int i = 0; i < 3; i++)
            if (strlen(type_names[i]) == len && strncmp(n, type_names[i], len) == 0)
                *ret = i;
        if (len == 4 && strncmp(n, "half", 4) == 0)
            *ret = HPS_DTYPE_FP16;
    }
    if (*ret < 0 && (e = hpspy_cut(str)) != NULL) {
        hpspy_raise_fmt(HPS_EINVAL, "dtype must be float32, float16 or bfloat16, got %U", e);
        Py_DECREF(e);
    }
    Py_DECREF(str);
    return *ret < 0 ? -1 : 0;
}

/* Get or allocate the output of a call, shape (rows, dim) (ndim 2) or
 * (rows,) (ndim 1), where the keys are, of type want (a new one: float32
 * for -1).  strict: out= of exactly that shape; else any C-contiguous
 * array of at least that many elements (the call writes the first
 * rows * dim of them: hps.HPS.lookup_fromdlpack, as HugeCTR's).  A given
 * out= must be of type want when want is not -1. */
PyObject *hpspy_get_out(PyObject *out_arg, const arr_t *keys, int64_t rows, int64_t dim, int ndim,
                        int strict, int want, void *stream, arr_t *out)
{
    char b1[64], b2[64];
    PyObject *o;
    int type = want < 0 ? HPS_DTYPE_FP32 : want;

    if (out_arg) {
        Py_INCREF(out_arg);
        o = out_arg;
    } else {
        PyObject *shape = ndim == 2 ? Py_BuildValue("(LL)", (long long)rows, (long long)dim)
                                    : Py_BuildValue("(L)", (long long)rows);
        if (!shape)
            return NULL;
        if (keys->is_torch) {
            o = torch_empty(keys->obj, shape, type, keys->loc);
        } else if (keys->capsule && !PyCapsule_CheckExact(keys->obj) && hpspy_dl_alloc &&
                   type == HPS_DTYPE_FP32) {
            /* DLPack keys: an array of the keys' kind (torch.empty on keys.device) */
            o = PyObject_CallFunction(hpspy_dl_alloc, "OOii", keys->obj, shape,
                                      keys->dl_device_type, keys->loc);
        } else if (keys->loc == HPS_HOST && hpspy_np_empty && type != HPS_DTYPE_BF16) {
            /* numpy.empty(shape, "float32" / "float16") */
            PyObject *dt = type == HPS_DTYPE_FP32 ? (Py_INCREF(hpspy_np_float32), hpspy_np_float32)
                                                  : PyUnicode_FromString(type_names[type]);
            PyObject *args[2] = {shape, dt};
            o = dt ? PyObject_Vectorcall(hpspy_np_empty, args, 2, NULL) : NULL;
            Py_XDECREF(dt);
        } else {
            Py_DECREF(shape);
            if (!hpspy_np_empty)
                return hpspy_raise_fmt(HPS_EINVAL, "no output allocator registered (import hps)");
            if (type != HPS_DTYPE_FP32 && !keys->capsule && keys->loc == HPS_HOST)
                return hpspy_raise_fmt(HPS_EINVAL,
                                       "a %s output for numpy keys: numpy has no bfloat16; pass "
                                       "torch keys or out=",
                                       type_names[type]);
            if (type != HPS_DTYPE_FP32)
                return hpspy_raise_fmt(HPS_EINVAL,
                                       "a %s output for DLPack keys: pass out=", type_names[type]);
            return hpspy_raise_fmt(HPS_EINVAL, "keys in %s given as a DLPack capsule: pass out=",
                                   hpspy_loc_str(keys->loc, b1, sizeof b1));
        }
        Py_DECREF(shape);
        if (!o)
            return hpspy_wrap_pyerr("allocating the output");
    }
    if (hpspy_arr_get(o, ARR_OUT, "out", stream, out) < 0)
        goto fail;
    if (out->loc != keys->loc) {
        hpspy_raise_fmt(HPS_EINVAL, "out is in %s but the keys are in %s",
                        hpspy_loc_str(out->loc, b1, 64), hpspy_loc_str(keys->loc, b2, 64));
        goto fail;
    }
    if (want >= 0 && (int)out->out_type != want) {
        hpspy_raise_fmt(HPS_EINVAL, "out is %s but dtype %s was asked for",
                        type_names[out->out_type], type_names[want]);
        goto fail;
    }
    int ok;
    if (!strict)
        ok = out->numel >= rows * dim;
    else if (ndim == 2)
        ok = out->ndim == 2 && out->shape[0] == rows && out->shape[1] == dim;
    else
        ok = out->ndim == 1 && out->shape[0] == rows;
    if (!ok) {
        PyObject *got = shape_tuple(out);
        if (!got)
            goto fail;
        if (!strict)
            hpspy_raise_fmt(HPS_EINVAL,
                            "out must hold at least %lld elements (%lld keys x dim %lld), "
                            "got shape %R",
                            (long long)(rows * dim), (long long)rows, (long long)dim, got);
        else if (ndim == 2)
            hpspy_raise_fmt(HPS_EINVAL, "out must have shape (%lld, %lld), got %R", (long long)rows,
                            (long long)dim, got);
        else
            hpspy_raise_fmt(HPS_EINVAL, "out must have shape (%lld,), got %R", (long long)rows,
                            got);
        Py_DECREF(got);
        goto fail;
    }
    out->used = strict ? out->numel : rows * dim; /* a larger out keeps its tail */
    return o;
fail:
    Py_DECREF(o);
    return NULL;
}

/* ---- the last checks before a call -------------------------------------- */

/* Host memory not aligned to its element size (a numpy view at an odd
 * offset, np.frombuffer(buf, offset=1)): libhps reads int64 keys and writes
 * 2-byte outputs as such, so the call works on an aligned copy (PyMem: 16-
 * byte aligned).  Device memory cannot be copied here: refused. */
static int align(arr_t *a, const char *what, int copy_in)
{
    size_t bytes = (size_t)a->numel * a->elsize;
    char b1[64];

    if (!bytes || (uintptr_t)a->data % a->elsize == 0)
        return 0;
    if (a->loc != HPS_HOST) {
        hpspy_raise_fmt(HPS_EINVAL, "%s in %s must be %zu-byte aligned (address %p)", what,
                        hpspy_loc_str(a->loc, b1, sizeof b1), a->elsize, a->data);
        return -1;
    }
    a->tmp = PyMem_Malloc(bytes);
    if (!a->tmp) {
        PyErr_NoMemory();
        return -1;
    }
    if (copy_in)
        memcpy(a->tmp, a->user, bytes);
    a->data = a->tmp;
    return 0;
}

int hpspy_arr_finish(arr_t *keys, arr_t *out)
{
    uintptr_t k = (uintptr_t)keys->user, o = (uintptr_t)out->user;
    size_t kb = (size_t)keys->numel * keys->elsize, ob = (size_t)out->numel * out->elsize;

    /* The same memory space (hpspy_get_out checked it): the rows written
     * would overwrite keys not read yet. */
    if (kb && ob && k < o + ob && o < k + kb) {
        hpspy_raise_fmt(HPS_EINVAL, "out overlaps keys (bytes %p..%p of the keys, %p..%p of out)",
                        (void *)k, (void *)(k + kb), (void *)o, (void *)(o + ob));
        return -1;
    }
    if (align(keys, "keys", 1) < 0 || align(out, "out", 0) < 0)
        return -1;
    return 0;
}

void hpspy_arr_copy_back(const arr_t *out)
{
    if (out->tmp) /* what the call wrote: the rest of the copy was never set */
        memcpy(out->user, out->tmp, (size_t)out->used * out->elsize);
}
