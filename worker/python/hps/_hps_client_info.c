/*
 * _hps_client_info.c -- the info, readiness and model-control methods of
 * the type hps.Client (_hps_client.c holds the type: its life cycle, its
 * model and table names, the lookups, close): models, tables, model_info,
 * counters and cache_stats (libhps's info calls as lists and dicts), ready,
 * coordinator_alive and wait_ready, load_model and unload_model (Triton's
 * explicit model control).  The method table in _hps_client.c names them
 * and their docstrings through _hps.h.
 *
 * They follow _hps_client.c's rule: close() may run in the middle of any
 * method (from another thread, or from an argument's Python code), so a
 * method converts its arguments first, then checks that the client is open
 * (hpspy_client_enter) right before each use of self->c, with no Python
 * code in between; a call that releases the GIL (wait_ready, load_model,
 * unload_model) counts itself in self->busy, which close() waits for.
 */
#include "_hps.h"

#include <stddef.h>
#include <string.h>

const char hpspy_client_models_doc[] =
    PyDoc_STR("models() -> list of str: the models of the configuration, file order,\n"
              "then those added to its INI file since (read again when it changed);\n"
              "position i is model index i.  A model whose tables a reload changed is\n"
              "listed again at its new index (name the model, not its index, across\n"
              "reloads: a name always finds the index that serves it).");

PyObject *hpspy_client_models(client_object *self, PyObject *unused)
{
    (void)unused;
    PyObject *l;

    if (hpspy_client_enter(self) < 0 || hpspy_learn_models(self) < 0)
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

/* One uint64_t member of a C struct: its dict key and offset. */
typedef struct u64_field {
    const char *name;
    size_t off;
} u64_field_t;

/* A new dict of the n uint64_t members of the struct at base (ints), or
 * NULL with an exception set. */
static PyObject *u64_dict(const void *base, const u64_field_t *f, size_t n)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < n; i++) {
        uint64_t v;
        memcpy(&v, (const char *)base + f[i].off, sizeof(v));
        if (dset(d, f[i].name, PyLong_FromUnsignedLongLong(v)) < 0)
            Py_CLEAR(d);
    }
    return d;
}

const char hpspy_client_tables_doc[] =
    PyDoc_STR("tables(model) -> list of dict\n"
              "\n"
              "The tables of a model, index order: name, dim, key_bytes (8 or 4),\n"
              "default_value, rows (in the volatile DB now; 0 before the segment is\n"
              "attached), max_keys_per_sample, storage_type (how the volatile DB\n"
              "stores the rows: 'fp32', 'fp16', 'bf16' or 'int8'; lookups return\n"
              "float32 whatever it is).");

PyObject *hpspy_client_tables(client_object *self, PyObject *model)
{
    size_t m;
    PyObject *mo, *l = NULL;

    if (!(mo = hpspy_index_or_name(model, "model")))
        return NULL;
    if (hpspy_client_enter(self) < 0 || hpspy_get_model(self, mo, &m) < 0)
        goto out;
    l = PyList_New(0);
    for (uint32_t t = 0; l && t < self->models[m].num_tables; t++) {
        hps_client_table_info_t ti;
        if (hpspy_client_enter(self) < 0) { /* allocations may run a finalizer that closes it */
            Py_CLEAR(l);
            break;
        }
        hps_err_t rc = hps_client_table_info(self->c, m, t, &ti);
        PyObject *d;
        if (rc < 0) {
            Py_CLEAR(l);
            hpspy_raise_c(rc);
            break;
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
out:
    Py_DECREF(mo);
    return l;
}

const char hpspy_client_model_info_doc[] =
    PyDoc_STR("model_info(model) -> dict: name, num_tables, max_batch_size, "
              "key_bytes, gpu_cache.");

PyObject *hpspy_client_model_info(client_object *self, PyObject *model)
{
    size_t m;
    hps_client_model_info_t mi;
    hps_err_t rc;
    PyObject *mo, *name, *d;

    if (!(mo = hpspy_index_or_name(model, "model")))
        return NULL;
    int ok = hpspy_client_enter(self) == 0 && hpspy_get_model(self, mo, &m) == 0;
    Py_DECREF(mo);
    if (!ok)
        return NULL;
    rc = hps_client_model_info(self->c, m, &mi);
    if (rc < 0)
        return hpspy_raise_c(rc);
    name = PyUnicode_FromString(mi.name); /* before anything that may close the client */
    if (!name)
        return NULL;
    d = PyDict_New();
    if (!d) {
        Py_DECREF(name);
        return NULL;
    }
    if (dset(d, "name", name) < 0 ||
        dset(d, "num_tables", PyLong_FromUnsignedLong(mi.num_tables)) < 0 ||
        dset(d, "max_batch_size", PyLong_FromUnsignedLong(mi.max_batch_size)) < 0 ||
        dset(d, "key_bytes", PyLong_FromUnsignedLong(mi.key_bytes)) < 0 ||
        dset(d, "gpu_cache", PyBool_FromLong(mi.gpu_cache)) < 0)
        Py_CLEAR(d);
    return d;
}

const char hpspy_client_counters_doc[] =
    PyDoc_STR("counters(model) -> dict\n"
              "\n"
              "This client's counters of a model since it opened (hps-worker's nv_hps_*\n"
              "metrics): lookup_keys, vdb_hits, lower_hits, default_keys, miss_busy,\n"
              "miss_timeout, lookup_ns, lookup_calls.");

PyObject *hpspy_client_counters(client_object *self, PyObject *model)
{
    size_t m;
    hps_client_counters_t k;
    hps_err_t rc;
    PyObject *mo;

    if (!(mo = hpspy_index_or_name(model, "model")))
        return NULL;
    int ok = hpspy_client_enter(self) == 0 && hpspy_get_model(self, mo, &m) == 0;
    Py_DECREF(mo);
    if (!ok)
        return NULL;
    rc = hps_client_counters(self->c, m, &k);
    if (rc < 0)
        return hpspy_raise_c(rc);
#define F(type, field)                                                                             \
    {                                                                                              \
#field, offsetof(type, field)                                                              \
    }
    static const u64_field_t fields[] = {
        F(hps_client_counters_t, lookup_keys), F(hps_client_counters_t, vdb_hits),
        F(hps_client_counters_t, lower_hits),  F(hps_client_counters_t, default_keys),
        F(hps_client_counters_t, miss_busy),   F(hps_client_counters_t, miss_timeout),
        F(hps_client_counters_t, lookup_ns),   F(hps_client_counters_t, lookup_calls)};
    return u64_dict(&k, fields, sizeof(fields) / sizeof(fields[0]));
}

const char hpspy_client_cache_stats_doc[] =
    PyDoc_STR("cache_stats(model, table) -> dict\n"
              "\n"
              "The GPU embedding cache of a table as this client maps it: lookups, hits,\n"
              "inserts, evictions, updates, occupied_rows, capacity_rows, full_refreshes,\n"
              "lock_timeouts, processes (processes mapping it), refresher (bool).\n"
              "hps.Error (code HPS_ENOTFOUND) where there is none: a host-only client,\n"
              "gpucache = false, or not built yet.");

PyObject *hpspy_client_cache_stats(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    static const char *const names[] = {"model", "table"};
    PyObject *a[2], *mo = NULL, *to = NULL, *d;
    size_t m;
    uint32_t t;
    hps_client_cache_stats_t s;
    hps_err_t rc;

    if (hpspy_parse_args("cache_stats", args, nargs, kwnames, names, 2, 2, a) < 0)
        return NULL;
    int ok = (mo = hpspy_index_or_name(a[0], "model")) != NULL &&
             (to = hpspy_index_or_name(a[1], "table")) != NULL && hpspy_client_enter(self) == 0 &&
             hpspy_get_model(self, mo, &m) == 0 && hpspy_get_table(self, m, to, &t) == 0;
    Py_XDECREF(mo);
    Py_XDECREF(to);
    if (!ok)
        return NULL;
    rc = hps_client_cache_stats(self->c, m, t, &s);
    if (rc < 0)
        return hpspy_raise_c(rc);
    static const u64_field_t fields[] = {
        F(hps_client_cache_stats_t, lookups),       F(hps_client_cache_stats_t, hits),
        F(hps_client_cache_stats_t, inserts),       F(hps_client_cache_stats_t, evictions),
        F(hps_client_cache_stats_t, updates),       F(hps_client_cache_stats_t, occupied_rows),
        F(hps_client_cache_stats_t, capacity_rows), F(hps_client_cache_stats_t, full_refreshes),
        F(hps_client_cache_stats_t, lock_timeouts)};
#undef F
    d = u64_dict(&s, fields, sizeof(fields) / sizeof(fields[0]));
    if (d && (dset(d, "processes", PyLong_FromUnsignedLong(s.processes)) < 0 ||
              dset(d, "refresher", PyBool_FromLong(s.refresher)) < 0))
        Py_CLEAR(d);
    return d;
}

const char hpspy_client_ready_doc[] =
    PyDoc_STR("ready() -> bool: segment attached, every table found, the coordinator "
              "serving, the GPU caches built.  Never blocks.");

PyObject *hpspy_client_ready(client_object *self, PyObject *unused)
{
    (void)unused;
    if (hpspy_client_enter(self) < 0)
        return NULL;
    return PyBool_FromLong(hps_client_ready(self->c));
}

const char hpspy_client_coordinator_alive_doc[] =
    PyDoc_STR("coordinator_alive() -> bool: whether the coordinator's heartbeat is fresh.");

PyObject *hpspy_client_coordinator_alive(client_object *self, PyObject *unused)
{
    (void)unused;
    if (hpspy_client_enter(self) < 0)
        return NULL;
    return PyBool_FromLong(hps_client_coordinator_alive(self->c));
}

/* A timeout_ms argument: *ret = its value, clamped to UINT32_MAX; -1 with
 * hps.Error raised when it is not an int or negative. */
static int timeout_arg(PyObject *o, long long *ret)
{
    long long ms = PyLong_AsLongLong(o);
    if (ms == -1 && PyErr_Occurred()) {
        hpspy_wrap_pyerr("timeout_ms");
        return -1;
    }
    if (ms < 0) {
        hpspy_raise_fmt(HPS_EINVAL, "timeout_ms must be >= 0");
        return -1;
    }
    *ret = ms > UINT32_MAX ? UINT32_MAX : ms;
    return 0;
}

/* wait_ready() waits in slices of this many ms, handling signals between. */
#define WAIT_SLICE_MS 100

const char hpspy_client_wait_ready_doc[] =
    PyDoc_STR("wait_ready(timeout_ms=10000) -> bool\n"
              "\n"
              "Wait (GIL released) until ready() or timeout_ms passed; True when ready,\n"
              "False on timeout.  timeout_ms=0 does not wait: it tells whether the client\n"
              "is ready now, as ready() (unlike load_model's timeout_ms=0, which means no\n"
              "limit).  timeout_ms: an int >= 0, in milliseconds; values over 2**32 - 1\n"
              "count as 2**32 - 1.  A signal (Ctrl-C) interrupts it within 0.1 s, and a\n"
              "close() from another thread makes it return False at once.");

PyObject *hpspy_client_wait_ready(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    static const char *const names[] = {"timeout_ms"};
    PyObject *a[1];
    long long ms = 10000;
    hps_err_t rc;

    if (hpspy_parse_args("wait_ready", args, nargs, kwnames, names, 1, 0, a) < 0 ||
        (a[0] && timeout_arg(a[0], &ms) < 0) || hpspy_client_enter(self) < 0)
        return NULL;
    hps_client_t *c = self->c;
    self->busy++;
    /* in slices, so that a signal (Ctrl-C) is handled within WAIT_SLICE_MS */
    for (long long left = ms;;) {
        uint32_t slice = left > WAIT_SLICE_MS ? WAIT_SLICE_MS : (uint32_t)left;
        PyThreadState *ts = PyEval_SaveThread();
        rc = hps_client_wait_ready(c, slice);
        PyEval_RestoreThread(ts);
        left -= slice;
        if (rc != HPS_ETIMEDOUT || left <= 0 || self->closing)
            break;
        if (PyErr_CheckSignals() < 0) {
            self->busy--;
            return NULL;
        }
    }
    self->busy--;
    if (rc == HPS_ETIMEDOUT)
        Py_RETURN_FALSE;
    if (rc < 0)
        return hpspy_raise_c(rc);
    Py_RETURN_TRUE;
}

const char hpspy_client_load_model_doc[] =
    PyDoc_STR("load_model(model, timeout_ms=600000) -> str\n"
              "\n"
              "Load model (a name of the INI's [model.<name>] sections) while the others\n"
              "serve: Triton's explicit model control ([hps] model_control_mode = explicit).\n"
              "The coordinator re-reads the INI, checks the model's files and builds a new\n"
              "segment beside the serving one; returns the coordinator's answer once this\n"
              "client serves from it (GIL released while waiting).  Loading a loaded model\n"
              "reloads it (new files or version).  A model added to the INI after this\n"
              "client opened is learned from the INI and served by this client too.\n"
              "\n"
              "model       the name (str; at most 120 bytes, no NUL character).\n"
              "timeout_ms  how long to wait for the answer, an int >= 0 in milliseconds\n"
              "            (values over 2**32 - 1 count as 2**32 - 1).\n"
              "            timeout_ms=0 means no limit: the call waits until the\n"
              "            coordinator answers (unlike wait_ready(0), which does not\n"
              "            wait).  A close() from another thread ends the wait at once.\n"
              "\n"
              "hps.Error: code HPS_EUNSUPPORTED (mode none), HPS_EIO (refused or failed:\n"
              "the message says why; nothing changed), HPS_ETIMEDOUT (no answer in\n"
              "timeout_ms, or the client closes: the request may still complete),\n"
              "HPS_EAGAIN (no coordinator serves: its last heartbeat is\n"
              "worker_timeout_ms + 200 ms old; the request was taken back unless a\n"
              "coordinator took it), HPS_EBUSY (8 requests already wait), HPS_EINVAL\n"
              "(a bad name).");

const char hpspy_client_unload_model_doc[] =
    PyDoc_STR("unload_model(model, timeout_ms=600000) -> str\n"
              "\n"
              "Unload model (explicit model control): its shared memory and GPU caches\n"
              "are freed and its persistent-DB tables dropped (a later load ingests its\n"
              "files again: online updates applied to it are gone); lookups of it then\n"
              "raise hps.Error (HPS_ENOTFOUND).  A model never served raises hps.Error\n"
              "(HPS_EIO, \"Model to be unloaded has not been served\", Triton's answer).\n"
              "Arguments and errors as load_model(): timeout_ms=0 means no limit.");

static PyObject *client_control(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames, hps_model_op_t op)
{
    static const char *const names[] = {"model", "timeout_ms"};
    const char *what = op == HPS_MODEL_LOAD ? "load_model" : "unload_model";
    PyObject *a[2];
    long long ms = 600000;
    char msg[600];

    if (hpspy_parse_args(what, args, nargs, kwnames, names, 2, 1, a) < 0 ||
        (a[1] && timeout_arg(a[1], &ms) < 0))
        return NULL;
    if (!PyUnicode_Check(a[0]))
        return hpspy_raise_fmt(HPS_EINVAL, "model must be a str, not %s", Py_TYPE(a[0])->tp_name);
    Py_ssize_t len;
    const char *name = PyUnicode_AsUTF8AndSize(a[0], &len); /* a str's methods are not run */
    if (!name)
        return hpspy_wrap_pyerr("model");
    if (strlen(name) != (size_t)len || len > HPS_CONF_NAME_MAX) { /* libhps reads a C string */
        PyObject *e = hpspy_echo(a[0]);
        if (e && strlen(name) != (size_t)len)
            hpspy_raise_fmt(HPS_EINVAL, "model name %U contains a NUL character", e);
        else if (e)
            hpspy_raise_fmt(HPS_EINVAL, "model name %U is too long (%zd bytes; at most %d)", e, len,
                            HPS_CONF_NAME_MAX);
        Py_XDECREF(e);
        return NULL;
    }
    if (hpspy_client_enter(self) < 0)
        return NULL;
    hps_client_t *c = self->c;
    self->busy++;
    PyThreadState *ts = PyEval_SaveThread();
    hps_err_t rc = hps_client_model_control(c, op, name, (uint32_t)ms, msg, sizeof(msg));
    PyEval_RestoreThread(ts);
    self->busy--;
    if (rc < 0)
        return hpspy_raise_c(rc);
    return PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
}

PyObject *hpspy_client_load_model(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    return client_control(self, args, nargs, kwnames, HPS_MODEL_LOAD);
}

PyObject *hpspy_client_unload_model(client_object *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames)
{
    return client_control(self, args, nargs, kwnames, HPS_MODEL_UNLOAD);
}
