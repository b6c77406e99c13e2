/*
 * _hps_client.c -- the type hps.Client of the extension hps._hps (_hps.c):
 * a libhps client (hps_client_t) whose models and tables are resolved once
 * through dicts (names -> indices, dims) and learned again when the INI
 * gains models; the lookups (lookup, _lookup_any, lookup_multi), which
 * check everything before they release the GIL around the libhps call;
 * close and the context manager; the type's method table.  The info,
 * readiness and model-control methods are in _hps_client_info.c, which
 * uses the object (client_object, _hps.h) and the helpers below that carry
 * the prefix hpspy_.
 *
 * close() may run in the middle of any method: from another thread whenever
 * this one runs Python code (which may release the GIL), or from that
 * Python code itself (an argument's __index__ or __hash__, an allocator).
 * So a method converts its arguments first (running their Python code),
 * then checks that the client is open (hpspy_client_enter) right before
 * each use of self->c, with no Python code in between; a call that releases
 * the GIL counts itself in self->busy, which close() waits for.
 */
#include "_hps.h"

#include <limits.h>
#include <string.h>
#include <unistd.h>

/* ---- the Client type ---------------------------------------------------- */

int hpspy_client_enter(client_object *self)
{
    if (!self->c || self->closing) {
        hpspy_raise_fmt(HPS_EINVAL, "the client is closed");
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

/* close(): refuses new calls (closing), waits for those in flight (busy),
 * then closes.  A close() while another thread's close() waits returns once
 * that one is done. */
static void client_do_close(client_object *self)
{
    hps_client_t *c = self->c;

    if (!c)
        return;
    if (self->closing) {
        while (self->closing) {
            PyThreadState *ts = PyEval_SaveThread();
            usleep(1000);
            PyEval_RestoreThread(ts);
        }
        return;
    }
    self->closing = 1;
    if (self->busy > 0) /* waits in other threads (wait_ready, load_model) return at once */
        hps_client_cancel_waits(c);
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
        if (hpspy_client_enter(self) < 0) /* allocations may run a finalizer that closes it */
            return -1;
        hps_err_t rc = hps_client_model_info(self->c, m, &mi);
        if (rc < 0) {
            hpspy_raise_c(rc);
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
            if (hpspy_client_enter(self) < 0)
                return -1;
            rc = hps_client_table_info(self->c, m, t, &ti);
            if (rc < 0) {
                hpspy_raise_c(rc);
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
        hpspy_raise_fmt(HPS_EINVAL, "Client.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|i:Client", kwlist, PyUnicode_FSConverter,
                                     &path, &device)) {
        hpspy_wrap_pyerr("Client()");
        return -1;
    }
    const char *p = PyBytes_AS_STRING(path);
    PyThreadState *ts = PyEval_SaveThread();
    rc = hps_client_open(p, device, &c, err, sizeof(err));
    PyEval_RestoreThread(ts);
    if (rc >= 0 && (self->c || self->models)) {
        /* __init__ again meanwhile: from device's __index__, or from
         * another thread while the GIL was released */
        ts = PyEval_SaveThread();
        hps_client_close(c);
        PyEval_RestoreThread(ts);
        Py_DECREF(path);
        hpspy_raise_fmt(HPS_EINVAL, "Client.__init__ called twice");
        return -1;
    }
    if (rc < 0) {
        hpspy_raise_open(rc, err, p);
        Py_DECREF(path);
        return -1;
    }
    self->config = PyUnicode_DecodeFSDefault(p);
    Py_DECREF(path);
    self->c = c;
    /* What the client is: -1 where the device asked for does not exist (or
     * the build has no CUDA), which libhps also logs. */
    self->device = hps_client_gpu_device(c);
    if (self->config && device >= 0 && self->device < 0 &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "hps.Client: CUDA device %d cannot be used (no such device, or libhps "
                         "was built without CUDA): the client is host-only (device -1)",
                         device) < 0) {
        client_do_close(self);
        return -1; /* warnings are errors (python -W error) */
    }
    if (!self->config || load_models(self) < 0) {
        client_do_close(self);
        free_models(self);
        return -1;
    }
    return 0;
}

/* A model not known yet: the client looks for models added to its INI
 * since (hps_client_refresh_models), and this object adds what it learned.
 * -1 with an exception set on failure (a closed client). */
int hpspy_learn_models(client_object *self)
{
    if (hpspy_client_enter(self) < 0)
        return -1;
    hps_client_refresh_models(self->c, NULL);
    return hps_client_num_models(self->c) > self->num_models ? load_models(self) : 0;
}

/* A model or table argument as a name (an exact str) or an index (an exact
 * int): a str (a subclass copied: its __hash__ and __eq__ are not called),
 * or anything with __index__ (numpy and torch integer scalars) but a bool.
 * This runs the argument's Python code, so it comes before the client is
 * used.  New reference, or NULL with hps.Error raised. */
PyObject *hpspy_index_or_name(PyObject *o, const char *what)
{
    if (PyUnicode_Check(o))
        return PyUnicode_FromObject(o);
    if (hpspy_is_bool(o)) /* bool has __index__ too */
        return hpspy_raise_fmt(HPS_EINVAL, "%s must be an index (int) or a name (str), not %s%s",
                               what, Py_TYPE(o)->tp_name, PyBool_Check(o) ? "" : " (a bool)");
    if (PyIndex_Check(o)) {
        PyObject *v = PyNumber_Index(o);
        return v ? v : hpspy_wrap_pyerr(what);
    }
    return hpspy_raise_fmt(HPS_EINVAL, "%s must be an index (int) or a name (str), not %s", what,
                           Py_TYPE(o)->tp_name);
}

/* The index that serves the name of model entry *mi now (a reload that
 * changed the model's tables adds an entry: hps_client_model_find), learnt
 * first if new to this object; -1 with an exception set. */
static int current_model(client_object *self, size_t *mi)
{
    size_t cur;
    if (hpspy_client_enter(self) < 0)
        return -1;
    if (hps_client_model_find(self->c, hps_client_model_conf(self->c, *mi)->name, &cur) < 0)
        return 0; /* cannot happen: *mi has that name */
    if (cur >= self->num_models && hpspy_learn_models(self) < 0)
        return -1;
    if (cur < self->num_models)
        *mi = cur;
    return 0;
}

/* The index of model o (from hpspy_index_or_name): for a name, the entry
 * that serves it now (current_model); runs no Python code. */
int hpspy_get_model(client_object *self, PyObject *o, size_t *ret)
{
    PyObject *e;

    if (PyUnicode_Check(o)) {
        PyObject *v = PyDict_GetItemWithError(self->model_index, o);
        if (!v && !PyErr_Occurred() && hpspy_learn_models(self) == 0)
            v = PyDict_GetItemWithError(self->model_index, o);
        if (!v) {
            if (!PyErr_Occurred() && (e = hpspy_echo(o)) != NULL) {
                PyObject *names = PyDict_Keys(self->model_index);
                if (names)
                    hpspy_raise_fmt(HPS_ENOTFOUND, "unknown model %U (models: %R)", e, names);
                Py_XDECREF(names);
                Py_DECREF(e);
            }
            return -1;
        }
        *ret = PyLong_AsSize_t(v);
        return current_model(self, ret);
    }
    long long m = PyLong_AsLongLong(o);
    if (m == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        m = -1;
    }
    if (m >= 0 && (unsigned long long)m >= self->num_models && hpspy_learn_models(self) < 0)
        return -1;
    if (m < 0 || (unsigned long long)m >= self->num_models) {
        if ((e = hpspy_echo(o)) != NULL)
            hpspy_raise_fmt(HPS_EINVAL, "model index %U out of range (%zu models)", e,
                            self->num_models);
        Py_XDECREF(e);
        return -1;
    }
    *ret = (size_t)m;
    return 0;
}

/* The index of table o (from hpspy_index_or_name) of model m; runs no Python
 * code. */
int hpspy_get_table(client_object *self, size_t m, PyObject *o, uint32_t *ret)
{
    model_t *md = &self->models[m];
    PyObject *e;

    if (PyUnicode_Check(o)) {
        PyObject *v = PyDict_GetItemWithError(md->table_index, o);
        if (!v) {
            if (!PyErr_Occurred() && (e = hpspy_echo(o)) != NULL) {
                PyObject *names = PyDict_Keys(md->table_index);
                if (names)
                    hpspy_raise_fmt(HPS_ENOTFOUND, "model '%U' has no table %U (tables: %R)",
                                    md->name, e, names);
                Py_XDECREF(names);
                Py_DECREF(e);
            }
            return -1;
        }
        *ret = (uint32_t)PyLong_AsUnsignedLong(v);
        return 0;
    }
    long long t = PyLong_AsLongLong(o);
    if (t == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        t = -1;
    }
    if (t < 0 || t >= md->num_tables) {
        if ((e = hpspy_echo(o)) != NULL)
            hpspy_raise_fmt(HPS_EINVAL, "table_id %U out of range: model '%U' has %u tables", e,
                            md->name, md->num_tables);
        Py_XDECREF(e);
        return -1;
    }
    *ret = (uint32_t)t;
    return 0;
}

/* The location of an array must be host memory or the client's device. */
static int check_loc(client_object *self, const arr_t *a, const char *what)
{
    char b1[64], b2[64];

    if (a->loc == HPS_HOST || a->loc == self->device)
        return 0;
    if (self->device < 0)
        hpspy_raise_fmt(HPS_EINVAL, "%s are in %s but the client is host-only (device -1)", what,
                        hpspy_loc_str(a->loc, b1, sizeof b1));
    else
        hpspy_raise_fmt(HPS_EINVAL, "%s are in %s but the client is on %s", what,
                        hpspy_loc_str(a->loc, b1, sizeof b1),
                        hpspy_loc_str(self->device, b2, sizeof b2));
    return -1;
}

/* Unsigned keys: uint64 keys are the bits of int64 ones (HugeCTR's long
 * long), for any model; uint32 keys are HugeCTR's unsigned int, the keys
 * of a 32-bit model (supportlonglong = false), which libhps zero-extends.
 * A 64-bit model sign-extends 32-bit keys (int32 values), so uint32 keys of
 * 2^31 and above would change: refused there. */
static int check_key_width(const arr_t *keys, const model_t *md)
{
    if (!keys->key_unsigned || keys->key_type != HPS_KEY_INT32 || md->key_bytes == 4)
        return 0;
    hpspy_raise_fmt(HPS_EINVAL,
                    "keys are uint32, but model '%U' has 64-bit keys (supportlonglong = true): "
                    "uint32 keys are taken for 32-bit models only; pass int64 or uint64 "
                    "(int32 keys are sign-extended)",
                    md->name);
    return -1;
}

/* One try of lookup_impl; *ret_rc: the C call's error (0 when it did not
 * fail), *ret_named: the model was given by name. */
static PyObject *lookup_try(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames, int strict, const char *fn, hps_err_t *ret_rc,
                            bool *ret_named)
{
    static const char *const names[] = {"model", "table", "keys", "out", "stream", "dtype"};
    PyObject *a[6], *mo = NULL, *to = NULL, *o = NULL;
    size_t m;
    uint32_t t;
    void *stream;
    arr_t keys = {0}, out = {0};
    hps_err_t rc;
    int want;

    if (hpspy_parse_args(fn, args, nargs, kwnames, names, 6, strict ? 3 : 4, a) < 0)
        return NULL;
    *ret_named = PyUnicode_Check(a[0]);
    /* Python code of the arguments first, then the client */
    if (!(mo = hpspy_index_or_name(a[0], "model")) || !(to = hpspy_index_or_name(a[1], "table")) ||
        hpspy_parse_stream(a[4], &stream) < 0 || hpspy_parse_dtype(a[5], &want) < 0 ||
        hpspy_client_enter(self) < 0 || hpspy_get_model(self, mo, &m) < 0 ||
        hpspy_get_table(self, m, to, &t) < 0)
        goto done;
    uint32_t dim = self->models[m].dims[t];
    if (hpspy_arr_get(a[2], ARR_KEYS, "keys", stream, &keys) < 0)
        goto done;
    if (strict && keys.ndim != 1) { /* _lookup_any: keys of any shape, flattened */
        hpspy_raise_fmt(HPS_EINVAL, "keys must be 1-D, got %d dimensions", keys.ndim);
        goto done;
    }
    if (check_key_width(&keys, &self->models[m]) < 0)
        goto done;
    if (check_loc(self, &keys, "keys") < 0)
        goto done;
    if (keys.numel > INT32_MAX) {
        hpspy_raise_fmt(HPS_EINVAL, "too many keys (%lld; at most %d)", (long long)keys.numel,
                        INT32_MAX);
        goto done;
    }
    o = hpspy_get_out(a[3], &keys, keys.numel, dim, 2, strict, want, stream, &out);
    if (!o || hpspy_arr_finish(&keys, &out) < 0)
        goto fail;
    if (keys.numel > 0) {
        if (hpspy_client_enter(self) < 0) /* the arrays' Python code may have closed it */
            goto fail;
        hps_client_t *c = self->c;
        self->busy++;
        PyThreadState *ts = PyEval_SaveThread();
        if (out.out_type == HPS_DTYPE_FP32) {
            rc = hps_client_lookup_table(c, m, t, (size_t)keys.numel, keys.data, keys.key_type,
                                         keys.loc, (float *)out.data, out.loc, stream);
        } else { /* table t alone: no keys for the tables before it */
            int32_t numkeys[HPS_CONF_MAX_TABLES] = {0};
            numkeys[t] = (int32_t)keys.numel;
            rc = hps_client_lookup_typed(c, m, t + 1, numkeys, keys.data, keys.key_type, keys.loc,
                                         out.data, out.out_type, out.loc, stream, 0);
        }
        if (rc >= 0)
            hpspy_arr_copy_back(&out);
        PyEval_RestoreThread(ts);
        self->busy--;
        if (rc < 0) {
            *ret_rc = rc;
            hpspy_raise_c(rc);
            goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(o);
done:
    hpspy_arr_release(&out);
    hpspy_arr_release(&keys);
    Py_XDECREF(mo);
    Py_XDECREF(to);
    if (!strict && o) {
        Py_DECREF(o);
        Py_RETURN_NONE;
    }
    return o;
}

/* A lookup whose model was given by name is tried once more when a reload
 * that changed the model's tables switched the client between the name's
 * resolution and the call, which ran without the GIL (HPS_EMISMATCH: the
 * index resolved no longer serves the name): resolved again, as hps-worker
 * parses a request caught in the switch again.  An index given by the
 * caller keeps the error (README: find the model again by name). */
static PyObject *lookup_impl(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, int strict, const char *fn)
{
    hps_err_t rc = 0;
    bool named = false;
    PyObject *o = lookup_try(self, args, nargs, kwnames, strict, fn, &rc, &named);
    if (!o && named && rc == HPS_EMISMATCH) {
        PyErr_Clear();
        rc = 0;
        o = lookup_try(self, args, nargs, kwnames, strict, fn, &rc, &named);
    }
    return o;
}

PyDoc_STRVAR(lookup_doc,
             "lookup(model, table, keys, out=None, stream=None, dtype=None) -> out\n"
             "\n"
             "Embedding vectors of the keys of one table (HugeCTR's lookup(keys, model, "
             "table_id)).\n"
             "\n"
             "model   name (str) of a model of the configuration, or its index.\n"
             "table   index (HugeCTR's table_id) or name (str, embedding_table_names).\n"
             "        An index is an int or anything with __index__ (numpy and torch\n"
             "        integer scalars), not a bool.\n"
             "keys    1-D contiguous int64 or int32 array of n keys (also uint64, the bits\n"
             "        of int64 keys, and for a 32-bit model, supportlonglong = false,\n"
             "        uint32: HugeCTR's unsigned int keys): a numpy array (or any\n"
             "        buffer), or an object with __dlpack__ (a torch tensor on the CPU or on\n"
             "        the client's CUDA device), or a DLPack capsule.  Host keys at an\n"
             "        address not a multiple of their size (a numpy view at an odd\n"
             "        offset) are copied first; device keys must be aligned.\n"
             "out     None, or a C-contiguous float32 (or float16, bfloat16) array of\n"
             "        shape (n, dim) in the same kind of memory as the keys, not\n"
             "        overlapping them; written and returned (through an aligned copy\n"
             "        where host memory is not aligned to the element size).\n"
             "stream  None (the legacy default CUDA stream), an int (cudaStream_t) or an\n"
             "        object with .cuda_stream (torch.cuda.Stream).\n"
             "dtype   None (out's type, else float32), or float32, float16 (half) or\n"
             "        bfloat16: a name, a numpy dtype or a torch dtype.  float16 and\n"
             "        bfloat16 are the float32 vectors rounded to nearest even (as\n"
             "        torch's .half() / .bfloat16()); numpy has no bfloat16.\n"
             "\n"
             "Returns (n, dim) of that type where the keys live: a numpy array for host\n"
             "keys read through the buffer protocol, a torch tensor on keys.device for\n"
             "torch keys.  Keys found nowhere get the table's default value.  The output\n"
             "is complete when the call returns.  The call runs without the GIL: another\n"
             "thread must not resize or free keys or out until it returns (a numpy array\n"
             "refuses resizing while the call holds its buffer; a torch tensor does not,\n"
             "as for any torch operation).  Raises hps.Error; code HPS_EBUSY while\n"
             "no coordinator has served the model since the client opened (every key\n"
             "would get the default).");

static PyObject *client_lookup(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    return lookup_impl(self, args, nargs, kwnames, 1, "lookup");
}

PyDoc_STRVAR(lookup_any_doc,
             "_lookup_any(model, table, keys, out, stream=None, dtype=None) -> "
             "None\n"
             "\n"
             "lookup() of C-contiguous keys of any shape (n: their count, taken\n"
             "in C order) into out of any C-contiguous shape holding at least n*dim\n"
             "elements of float32 (float16, bfloat16): its first n*dim elements are\n"
             "written, the rest left as they are (hps.HPS.lookup_fromdlpack).");

static PyObject *client_lookup_any(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    return lookup_impl(self, args, nargs, kwnames, 0, "_lookup_any");
}

/* numkeys: a sequence of ints >= 0 (not bools) -> int32 array (PyMem) of
 * *ret_n entries.  A tuple copy is read: an entry's __index__ may change the
 * caller's list.  NULL with hps.Error raised. */
static int32_t *get_numkeys(PyObject *o, Py_ssize_t *ret_n)
{
    PyObject *seq = PySequence_Tuple(o);
    int32_t *nk = NULL;
    Py_ssize_t n;

    if (!seq) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            hpspy_raise_fmt(HPS_EINVAL, "numkeys must be a sequence of ints, not %s",
                            Py_TYPE(o)->tp_name);
        } else {
            hpspy_wrap_pyerr("numkeys");
        }
        return NULL;
    }
    n = PyTuple_GET_SIZE(seq);
    nk = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!nk) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(seq, i);
        if (hpspy_is_bool(item)) {
            hpspy_raise_fmt(HPS_EINVAL, "numkeys[%zd] must be an int, not %s%s", i,
                            Py_TYPE(item)->tp_name, PyBool_Check(item) ? "" : " (a bool)");
            goto fail;
        }
        PyObject *ix = PyNumber_Index(item);
        long long v = ix ? PyLong_AsLongLong(ix) : -1;
        Py_XDECREF(ix);
        if (PyErr_Occurred()) {
            hpspy_wrap_pyerr("numkeys");
            goto fail;
        }
        if (v < 0 || v > INT32_MAX) {
            hpspy_raise_fmt(HPS_EINVAL, "numkeys[%zd] = %lld is out of range [0, %d]", i, v,
                            INT32_MAX);
            goto fail;
        }
        nk[i] = (int32_t)v;
    }
    Py_DECREF(seq);
    *ret_n = n;
    return nk;
fail:
    PyMem_Free(nk);
    Py_DECREF(seq);
    return NULL;
}

/* numkeys nk[0 .. n-1] against model md: 1 to T entries; their sum and
 * the output's elements (sum n_t * dim_t).  -1 with hps.Error raised. */
static int check_numkeys(const int32_t *nk, Py_ssize_t n, const model_t *md, int64_t *ret_sum,
                         int64_t *ret_elems)
{
    int64_t sum = 0, elems = 0;

    if (n < 1 || n > (Py_ssize_t)md->num_tables) {
        hpspy_raise_fmt(HPS_EINVAL, "numkeys must have 1 to %u entries (model '%U'), got %zd",
                        md->num_tables, md->name, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        sum += nk[i];
        elems += nk[i] * (int64_t)md->dims[i];
    }
    *ret_sum = sum;
    *ret_elems = elems;
    return 0;
}

PyDoc_STRVAR(lookup_multi_doc,
             "lookup_multi(model, keys, numkeys, out=None, stream=None, dtype=None) -> out\n"
             "\n"
             "Embedding vectors of the keys of tables 0 .. T-1 of one model in one call\n"
             "(the Triton hps backend's KEYS / NUMKEYS form).\n"
             "\n"
             "keys     1-D int64 or int32 (uint64, uint32: as lookup()) array of N keys,\n"
             "         table-major (table 0's first).\n"
             "numkeys  sequence of T ints (T <= the model's tables), summing to N: ints\n"
             "         or anything with __index__, not bools.\n"
             "out      None or a C-contiguous float32 (float16, bfloat16) array of shape\n"
             "         (sum n_t*dim_t,), not overlapping the keys.\n"
             "\n"
             "Returns the flat output (dtype as lookup()'s), table blocks in table\n"
             "order, where the keys live.  Other arguments as lookup().  Raises\n"
             "hps.Error.");

/* One try of client_lookup_multi (*ret_rc, *ret_named: as lookup_try). */
static PyObject *lookup_multi_try(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames, hps_err_t *ret_rc, bool *ret_named)
{
    static const char *const names[] = {"model", "keys", "numkeys", "out", "stream", "dtype"};
    PyObject *a[6], *mo = NULL, *o = NULL;
    size_t m;
    void *stream;
    arr_t keys = {0}, out = {0};
    int32_t *nk = NULL;
    Py_ssize_t T;
    int64_t sum, elems;
    hps_err_t rc;
    int want;

    if (hpspy_parse_args("lookup_multi", args, nargs, kwnames, names, 6, 3, a) < 0)
        return NULL;
    *ret_named = PyUnicode_Check(a[0]);
    /* Python code of the arguments first, then the client */
    if (!(mo = hpspy_index_or_name(a[0], "model")) || !(nk = get_numkeys(a[2], &T)) ||
        hpspy_parse_stream(a[4], &stream) < 0 || hpspy_parse_dtype(a[5], &want) < 0 ||
        hpspy_client_enter(self) < 0 || hpspy_get_model(self, mo, &m) < 0 ||
        check_numkeys(nk, T, &self->models[m], &sum, &elems) < 0)
        goto done;
    if (hpspy_arr_get(a[1], ARR_KEYS, "keys", stream, &keys) < 0)
        goto done;
    if (keys.ndim != 1) {
        hpspy_raise_fmt(HPS_EINVAL, "keys must be 1-D, got %d dimensions", keys.ndim);
        goto done;
    }
    if (check_key_width(&keys, &self->models[m]) < 0)
        goto done;
    if (keys.numel != sum) {
        hpspy_raise_fmt(HPS_EINVAL, "numkeys sum to %lld but keys has %lld elements",
                        (long long)sum, (long long)keys.numel);
        goto done;
    }
    if (check_loc(self, &keys, "keys") < 0)
        goto done;
    o = hpspy_get_out(a[3], &keys, elems, 1, 1, 1, want, stream, &out);
    if (!o || hpspy_arr_finish(&keys, &out) < 0)
        goto fail;
    if (sum > 0) {
        if (hpspy_client_enter(self) < 0) /* the arrays' Python code may have closed it */
            goto fail;
        hps_client_t *c = self->c;
        self->busy++;
        PyThreadState *ts = PyEval_SaveThread();
        rc = hps_client_lookup_typed(c, m, (uint32_t)T, nk, keys.data, keys.key_type, keys.loc,
                                     out.data, out.out_type, out.loc, stream, 0);
        if (rc >= 0)
            hpspy_arr_copy_back(&out);
        PyEval_RestoreThread(ts);
        self->busy--;
        if (rc < 0) {
            *ret_rc = rc;
            hpspy_raise_c(rc);
            goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(o);
done:
    hpspy_arr_release(&out);
    hpspy_arr_release(&keys);
    PyMem_Free(nk);
    Py_XDECREF(mo);
    return o;
}

static PyObject *client_lookup_multi(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                     PyObject *kwnames)
{
    hps_err_t rc = 0;
    bool named = false;
    PyObject *o = lookup_multi_try(self, args, nargs, kwnames, &rc, &named);
    if (!o && named && rc == HPS_EMISMATCH) { /* as lookup_impl */
        PyErr_Clear();
        rc = 0;
        o = lookup_multi_try(self, args, nargs, kwnames, &rc, &named);
    }
    return o;
}

PyDoc_STRVAR(close_doc, "close(): leave the segment and the shared GPU caches (waits for calls "
                        "in flight, and for a close() of another thread).  Idempotent; calls "
                        "not in flight yet, and later ones, raise hps.Error.");

static PyObject *client_close(client_object *self, PyObject *unused)
{
    (void)unused;
    client_do_close(self);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(enter_doc, "__enter__() -> self: for `with hps.Client(...) as c:`.  Raises "
                        "hps.Error (HPS_EINVAL) when the client is closed.");
PyDoc_STRVAR(exit_doc, "__exit__(*exc_info) -> False: close() (the exception, if any, "
                       "propagates).");

static PyObject *client_enter_ctx(client_object *self, PyObject *unused)
{
    (void)unused;
    if (hpspy_client_enter(self) < 0)
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
    {"models", (PyCFunction)hpspy_client_models, METH_NOARGS, hpspy_client_models_doc},
    {"tables", (PyCFunction)hpspy_client_tables, METH_O, hpspy_client_tables_doc},
    {"model_info", (PyCFunction)hpspy_client_model_info, METH_O, hpspy_client_model_info_doc},
    {"counters", (PyCFunction)hpspy_client_counters, METH_O, hpspy_client_counters_doc},
    {"cache_stats", (PyCFunction)(void (*)(void))hpspy_client_cache_stats,
     METH_FASTCALL | METH_KEYWORDS, hpspy_client_cache_stats_doc},
    {"ready", (PyCFunction)hpspy_client_ready, METH_NOARGS, hpspy_client_ready_doc},
    {"wait_ready", (PyCFunction)(void (*)(void))hpspy_client_wait_ready,
     METH_FASTCALL | METH_KEYWORDS, hpspy_client_wait_ready_doc},
    {"coordinator_alive", (PyCFunction)hpspy_client_coordinator_alive, METH_NOARGS,
     hpspy_client_coordinator_alive_doc},
    {"load_model", (PyCFunction)(void (*)(void))hpspy_client_load_model,
     METH_FASTCALL | METH_KEYWORDS, hpspy_client_load_model_doc},
    {"unload_model", (PyCFunction)(void (*)(void))hpspy_client_unload_model,
     METH_FASTCALL | METH_KEYWORDS, hpspy_client_unload_model_doc},
    {"close", (PyCFunction)client_close, METH_NOARGS, close_doc},
    {"__enter__", (PyCFunction)client_enter_ctx, METH_NOARGS, enter_doc},
    {"__exit__", (PyCFunction)client_exit_ctx, METH_VARARGS, exit_doc},
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
             "host-only client; a device that cannot be used (it does not exist, or\n"
             "libhps has no CUDA) gives a host-only client, .device -1, with a\n"
             "RuntimeWarning.  The client is a worker of the segment (hps-shm info lists\n"
             "it) until close().  Methods may be called from any thread; lookups run\n"
             "with the GIL released.  A context manager (close() on exit).\n"
             "Raises hps.Error.");

PyTypeObject hpspy_client_type = {
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
