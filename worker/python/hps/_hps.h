/*
 * _hps.h -- private to the CPython extension hps._hps: what its four files
 * share.  _hps.c holds the module (its state, hps.Error and the helpers
 * that raise it, argument parsing, the module functions, PyInit__hps),
 * _hps_arrays.c the array arguments (buffer protocol, DLPack, torch) and
 * the outputs a call allocates, _hps_client.c the type hps.Client (its
 * life cycle, names, lookups, close, method table), _hps_client_info.c its
 * info, readiness and model-control methods.
 * Functions and variables used across these files carry the prefix hpspy_
 * (this extension's alone); everything else is static in its file.
 */
#ifndef HPS_PYTHON_HPS_H
#define HPS_PYTHON_HPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlpack/dlpack.h>
#include <stdint.h>

#include "hps/client.h"
#include "hps/hps.h"

/* ---- module state (_hps.c) ----------------------------------------------- */

/* The output allocators that hps/__init__.py registers (_set_allocators);
 * NULL until then. */
extern PyObject *hpspy_np_empty;   /* numpy.empty, from _set_allocators */
extern PyObject *hpspy_np_float32; /* numpy.dtype('float32') */
extern PyObject *hpspy_dl_alloc;   /* alloc(keys, shape, device_type, device_id) */

/* Interned names, made by PyInit__hps: "__dlpack__", "__dlpack_device__",
 * "cuda_stream", "torch", and the keyword-name tuple ("stream",). */
extern PyObject *hpspy_str_dlpack, *hpspy_str_dlpack_device, *hpspy_str_cuda_stream,
    *hpspy_str_torch, *hpspy_kw_stream;

/* ---- errors and argument parsing (_hps.c) -------------------------------- */

/* How many characters of a user-given name or value an error message
 * shows (hpspy_cut, hpspy_echo); longer ones end in "...". */
#define HPSPY_ECHO_MAX 200

/* Raise hps.Error(msg) with .code, .name; msg and cause stolen.  NULL. */
PyObject *hpspy_raise_msg(hps_err_t code, PyObject *msg, PyObject *cause);
/* hps.Error with a PyUnicode_FromFormat message.  NULL. */
PyObject *hpspy_raise_fmt(hps_err_t code, const char *fmt, ...);
/* hps.Error of a failed libhps call.  NULL. */
PyObject *hpspy_raise_c(hps_err_t rc);
/* hps.Error of a failed open of the configuration at path: err (the
 * library's message) if not empty, else "path: hps_strerror(rc)".  NULL. */
PyObject *hpspy_raise_open(hps_err_t rc, const char *err, const char *path);
/* The pending Python exception as hps.Error("<what>: ..."), chained.  NULL. */
PyObject *hpspy_wrap_pyerr(const char *what);
/* str s (borrowed) cut to HPSPY_ECHO_MAX characters with "...": new
 * reference, NULL with an exception set. */
PyObject *hpspy_cut(PyObject *s);
/* A user-given value as an error message shows it: its repr(), cut as
 * hpspy_cut (a str without running its methods).  New reference, NULL with
 * an exception set (no memory). */
PyObject *hpspy_echo(PyObject *o);

/* The pending exception taken out of the thread state (NULL when none), and
 * put back (stolen; NULL: nothing): around code that may run Python code
 * while an exception is pending.  PyErr_GetRaisedException where the Python
 * version has it (3.12), else PyErr_Fetch. */
static inline PyObject *hpspy_err_take(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    if (!type)
        return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

static inline void hpspy_err_restore(PyObject *exc)
{
    if (!exc)
        return;
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

/* Vectorcall arguments by position or keyword into out[0 .. nnames-1]. */
int hpspy_parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int nnames, int nreq, PyObject **out);
/* A stream= argument (None, int, .cuda_stream) as a cudaStream_t. */
int hpspy_parse_stream(PyObject *o, void **ret);

/* ---- arrays (_hps_arrays.c) ---------------------------------------------- */

/* What an array argument is: keys or an output. */
enum { ARR_KEYS, ARR_OUT };

/* The most dimensions an array argument may have (numpy 1.x's NPY_MAXDIMS;
 * a lookup reads 1-D keys, or any C-contiguous shape where it flattens). */
#define HPSPY_MAX_NDIM 32

/* An array argument held for the length of a call. */
typedef struct arr {
    PyObject *obj;                 /* the argument (borrowed) */
    Py_buffer view;                /* buffer protocol ... */
    int have_view;                 /* ... when set */
    PyObject *capsule;             /* DLPack: the consumed capsule ("used_dltensor") */
    DLManagedTensor *mt;           /* its tensor; deleter called by hpspy_arr_release */
    void *data;                    /* what the call reads or writes: user, or tmp */
    void *user;                    /* the array's own memory */
    void *tmp;                     /* an aligned copy of host memory (hpspy_arr_finish), PyMem */
    size_t elsize;                 /* bytes per element */
    int ndim;                      /* 1 .. HPSPY_MAX_NDIM */
    int64_t shape[HPSPY_MAX_NDIM]; /* shape[0 .. ndim) */
    int64_t numel;                 /* product of the shape */
    int64_t used;            /* outputs: the elements the call writes, <= numel (hpspy_get_out) */
    int loc;                 /* HPS_HOST or a CUDA device ordinal */
    int dl_device_type;      /* kDLCPU for buffers */
    int is_torch;            /* a torch.Tensor */
    hps_key_type_t key_type; /* keys */
    int key_unsigned;        /* keys: uint32 / uint64 (hpspy_check_key_width) */
    hps_dtype_t out_type;    /* outputs: fp32, fp16 or bf16 */
} arr_t;

/* Read an array argument (buffer protocol, torch, DLPack); -1 with hps.Error
 * raised on failure.  Release it with hpspy_arr_release, failed or not (it
 * keeps a pending exception: a producer's deleter may run Python code). */
int hpspy_arr_get(PyObject *o, int kind, const char *what, void *stream, arr_t *a);
void hpspy_arr_release(arr_t *a);
/* The last checks of keys and out before the call, which runs no Python
 * code: out must not overlap the keys; host memory not aligned to its
 * element size is replaced by an aligned copy (keys copied in, out copied
 * back by hpspy_arr_copy_back); device memory must be aligned.  -1 with
 * hps.Error raised. */
int hpspy_arr_finish(arr_t *keys, arr_t *out);
/* After a call that wrote out: an aligned copy back into out's own memory
 * (no Python API: callable without the GIL). */
void hpspy_arr_copy_back(const arr_t *out);
/* Whether o is a boolean scalar: bool, numpy.bool_, a torch bool tensor
 * (an index argument refuses them although they have __index__). */
int hpspy_is_bool(PyObject *o);
/* "host memory" or "CUDA memory of device <loc>", in buf. */
const char *hpspy_loc_str(int loc, char *buf, size_t len);
/* A dtype= argument (None, a name, a numpy or torch dtype) as the output
 * type of a lookup: *ret -1 for None; -1 with hps.Error raised when it is
 * none of float32, float16 (half), bfloat16. */
int hpspy_parse_dtype(PyObject *o, int *ret);
/* The output of a call, given (out_arg) or allocated where the keys are;
 * want: the output type asked for (hps_dtype_t), or -1 for out's own (or
 * float32 for a new one). */
PyObject *hpspy_get_out(PyObject *out_arg, const arr_t *keys, int64_t rows, int64_t dim, int ndim,
                        int strict, int want, void *stream, arr_t *out);

/* ---- the Client type (_hps_client.c) ------------------------------------- */

/* A model of a client, as hpspy_learn_models found it: its name, its
 * tables' names -> indices, their dims. */
typedef struct model {
    PyObject *name;        /* str */
    PyObject *table_index; /* dict: table name -> index */
    uint32_t num_tables;
    uint32_t key_bytes;
    uint32_t *dims;
} model_t;

/* An hps.Client.  c is NULL once closed; closing is set while close() waits
 * for the calls in flight (busy). */
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

extern PyTypeObject hpspy_client_type; /* hps.Client */

/* Whether the client is open (before each use of self->c): 0, or -1 with hps.Error raised. */
int hpspy_client_enter(client_object *self);
/* Adds the models the client learned since (refreshed): 0, or -1 with an exception set. */
int hpspy_learn_models(client_object *self);
/* A model or table argument as an exact str or int (runs its Python code); NULL + hps.Error. */
PyObject *hpspy_index_or_name(PyObject *o, const char *what);
/* *ret = the index of model o (learning new models); 0, or -1 with hps.Error raised. */
int hpspy_get_model(client_object *self, PyObject *o, size_t *ret);
/* *ret = the index of table o of model m (runs no Python code); 0, or -1 with hps.Error raised. */
int hpspy_get_table(client_object *self, size_t m, PyObject *o, uint32_t *ret);

/* ---- the Client's info and model-control methods (_hps_client_info.c) ---- */

/* The methods of the same names (client_methods, in _hps_client.c) and their
 * docstrings; each returns a new reference, or NULL with an exception set
 * (hps.Error; MemoryError). */

/* models(): the model names, learning new ones (a list of str). */
PyObject *hpspy_client_models(client_object *self, PyObject *unused);
extern const char hpspy_client_models_doc[]; /* models()'s docstring */
/* tables(model): a dict per table of the model (name, dim, rows, ...). */
PyObject *hpspy_client_tables(client_object *self, PyObject *model);
extern const char hpspy_client_tables_doc[]; /* tables()'s docstring */
/* model_info(model): a dict (name, num_tables, max_batch_size, key_bytes, gpu_cache). */
PyObject *hpspy_client_model_info(client_object *self, PyObject *model);
extern const char hpspy_client_model_info_doc[]; /* model_info()'s docstring */
/* counters(model): this client's counters of the model (a dict). */
PyObject *hpspy_client_counters(client_object *self, PyObject *model);
extern const char hpspy_client_counters_doc[]; /* counters()'s docstring */
/* cache_stats(model, table): the table's GPU cache (a dict); HPS_ENOTFOUND where none. */
PyObject *hpspy_client_cache_stats(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames);
extern const char hpspy_client_cache_stats_doc[]; /* cache_stats()'s docstring */
/* ready(): whether the client serves now (a bool; never blocks). */
PyObject *hpspy_client_ready(client_object *self, PyObject *unused);
extern const char hpspy_client_ready_doc[]; /* ready()'s docstring */
/* coordinator_alive(): whether the coordinator's heartbeat is fresh (a bool). */
PyObject *hpspy_client_coordinator_alive(client_object *self, PyObject *unused);
extern const char hpspy_client_coordinator_alive_doc[]; /* coordinator_alive()'s docstring */
/* wait_ready(timeout_ms=10000): waits, GIL released; True when ready, False on timeout. */
PyObject *hpspy_client_wait_ready(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);
extern const char hpspy_client_wait_ready_doc[]; /* wait_ready()'s docstring */
/* load_model(model, timeout_ms=600000): the coordinator's answer (str), GIL released. */
PyObject *hpspy_client_load_model(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);
extern const char hpspy_client_load_model_doc[]; /* load_model()'s docstring */
/* unload_model(model, timeout_ms=600000): the coordinator's answer (str), GIL released. */
PyObject *hpspy_client_unload_model(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames);
extern const char hpspy_client_unload_model_doc[]; /* unload_model()'s docstring */

#endif /* HPS_PYTHON_HPS_H */
