"""
hps -- embedding lookups from the hierarchical parameter server, inside this
process (libhps through the C extension hps._hps).

A Client opens the INI configuration that hps-coordinator runs with and
attaches its shared-memory segment; it is a worker of the segment like
hps-worker (hps-shm info lists it), shares the GPU embedding caches of its
device with the other processes there, and is reaped if the process dies.

    import numpy as np, hps
    with hps.Client("/models/hps.ini", device=0) as c:
        c.wait_ready(10000)
        vecs = c.lookup("wdl", 0, np.array([1, 2, 3], dtype=np.int64))   # (3, dim) float32
        flat = c.lookup_multi("wdl", keys, [n0, n1])                   # KEYS / NUMKEYS form

Keys are 1-D int64 or int32 arrays, or uint64 (the bits of int64 keys) and,
for a 32-bit model (supportlonglong = false), uint32: HugeCTR's long long and
unsigned int keys.  Numpy (or any buffer), or objects with __dlpack__ (torch tensors on the CPU or on the client's CUDA device); the
output is float32 (n, dim) in the same kind of memory (numpy for numpy keys,
a torch tensor on keys.device for torch keys), or the caller's out=.

HugeCTR compatibility: hps.HPS(ps_config_file) with lookup() and
lookup_fromdlpack() as hugectr.inference.HPS had them (taking this project's
INI); hps.torch.LookupLayer as hps_torch.LookupLayer (needs torch).

Every failure raises hps.Error (.code: the hps_err_t, .name: its name).
"""
import atexit
import operator
import os
import sys
import threading

import numpy as _np

from . import _hps
from ._hps import HOST, Client, Error, check_config, err_name, strerror

__all__ = ["Client", "Error", "HPS", "HOST", "check_config", "err_name", "strerror",
           "shared_client", "version"]
__version__ = version = _hps.version

# The error codes (include/hps/hps.h): hps.HPS_ENOTFOUND, ...
for _name in dir(_hps):
    if _name.startswith("HPS_E"):
        globals()[_name] = getattr(_hps, _name)
        __all__.append(_name)
del _name

_DL_CPU, _DL_CUDA_HOST = 1, 3


def _error(msg, code=None):
    """An hps.Error raised from Python (code: HPS_EINVAL unless given)."""
    e = Error(msg)
    e.code = _hps.HPS_EINVAL if code is None else code
    e.name = err_name(e.code)  # as the C extension names them: ENOENT for -ENOENT
    return e


def _echo(x, limit=200):
    """repr(x) for an error message, cut to limit characters with "..." (as
    the C extension echoes user-given names)."""
    if isinstance(x, str) and len(x) > limit:
        return repr(x[:limit]) + "..."
    try:
        r = repr(x)
    except Exception:  # noqa: BLE001 (an int over sys.get_int_max_str_digits, ...)
        r = "<%s object>" % type(x).__name__
    return r if len(r) <= limit else r[:limit] + "..."


def _is_bool(x):
    """bool, numpy.bool_, or a torch bool tensor: refused as an index or a key
    although they have __index__."""
    return isinstance(x, (bool, _np.bool_)) or str(getattr(x, "dtype", "")) == "torch.bool"


def _index_or_name(x, what):
    """A model or table argument as the C extension takes it: a name (str) or
    an index (an int, or anything with __index__, such as numpy and torch
    integer scalars; not a bool).  hps.Error (HPS_EINVAL) otherwise."""
    if isinstance(x, str):
        return str(x)
    if _is_bool(x):
        raise _error("%s must be an index (int) or a name (str), not %s%s" %
                     (what, type(x).__name__, "" if isinstance(x, bool) else " (a bool)"))
    try:
        return operator.index(x)
    except Exception as e:  # noqa: BLE001 (TypeError, or what an __index__ raises)
        raise _error("%s must be an index (int) or a name (str), not %s" %
                     (what, type(x).__name__)) from e


def _keys_from_list(h_keys):
    """A list or tuple of keys as an int64 array: Python ints and numpy
    integers in the int64 range only (no floats, strings, bools, None)."""
    try:
        a = _np.array(h_keys)
    except (ValueError, OverflowError, TypeError):
        a = None
    if a is not None and a.ndim == 1 and a.dtype.kind in "iu" and \
            not {bool, _np.bool_} & set(map(type, h_keys)):  # [True, 1] makes int64 too
        if a.dtype.kind == "u" and a.size and int(a.max()) >= 2 ** 63:
            raise _error("h_keys: %d is out of the int64 range" % int(a.max()))
        return a.astype(_np.int64)
    # the slow way, which says which element is wrong (also mixes of ints and
    # numpy uint64 that numpy promotes to float64)
    out = _np.empty(len(h_keys), _np.int64)
    for i, k in enumerate(h_keys):
        if _is_bool(k) or not isinstance(k, (int, _np.integer)):
            raise _error("h_keys[%d] must be an int, not %s" % (i, type(k).__name__))
        k = int(k)
        if not -2 ** 63 <= k < 2 ** 63:
            raise _error("h_keys[%d] = %s is out of the int64 range" % (i, _echo(k)))
        out[i] = k
    return out


def _alloc_dlpack(keys, shape, device_type, device_id):
    """The output of a lookup of DLPack keys (called by the C extension):
    float32 of shape on the keys' device, of the keys' kind."""
    top = type(keys).__module__.partition(".")[0]
    if top == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=torch.float32, device=keys.device)
    if top == "cupy":
        cupy = sys.modules["cupy"]
        with cupy.cuda.Device(device_id):
            return cupy.empty(shape, dtype=cupy.float32)
    if device_type in (_DL_CPU, _DL_CUDA_HOST):
        return _np.empty(shape, _np.float32)
    raise _error("no output allocator for device arrays of type %s.%s: pass out=" %
                 (type(keys).__module__, type(keys).__name__))


_hps._set_allocators(_np.empty, _np.dtype(_np.float32), _alloc_dlpack)

# ---- clients shared within the process -------------------------------------

_shared = {}
_shared_lock = threading.Lock()


def shared_client(config, device=0):
    """The process's Client of (config, device), opened on first use and shared
    by every caller (hps.torch.LookupLayer uses it: one worker entry per
    device, not one per layer).  Closed at interpreter exit.  A child
    process forked after its parent opened one (a torch DataLoader worker)
    gets a Client of its own: a client serves the process that opened it."""
    key = (os.path.realpath(os.fspath(config)), int(device), os.getpid())
    c = _shared.get(key)
    if c is not None and not c.closed:
        return c
    with _shared_lock:
        c = _shared.get(key)
        if c is None or c.closed:
            c = Client(config, device)
            _shared[key] = c
        return c


@atexit.register
def _close_shared():
    with _shared_lock:
        clients = list(_shared.values())
        _shared.clear()
    for c in clients:
        c.close()


# ---- HugeCTR's hugectr.inference.HPS ----------------------------------------

class HPS:
    """HPS(ps_config_file): hugectr.inference.HPS's lookup API on this
    project's INI configuration.

    One Client per device_id and process (a forked child opens its own), opened
    on its first lookup and kept until close() (or the object's end).  Lookups
    of host keys return numpy arrays.
    Raises hps.Error: the file is missing or not a valid configuration (a
    HugeCTR ps.json is refused with how to convert it: hps-conf import).
    """

    def __init__(self, ps_config_file):
        if not isinstance(ps_config_file, (str, bytes, os.PathLike)):
            raise _error("HPS(ps_config_file): a path to the INI configuration is needed "
                         "(ParameterServerConfig objects are not supported), got %s" %
                         type(ps_config_file).__name__)
        path = os.fsdecode(ps_config_file)
        if not os.path.isfile(path):
            import errno
            raise _error("HPS(%s): no such configuration file" % _echo(path), -errno.ENOENT)
        check_config(path)  # refused here, as HugeCTR's HPS() refused it
        self.ps_config_file = path
        self._clients = {}
        self._lock = threading.Lock()

    def client(self, device_id=0):
        """The Client of device_id (an int: a CUDA device ordinal, or -1 for
        a host-only client) in this process, opened on first use.  Raises
        hps.Error HPS_EINVAL for a device_id that is no int (a bool, a float,
        a string), and Client()'s errors."""
        if _is_bool(device_id) or not isinstance(device_id, (int, _np.integer)):
            raise _error("device_id must be an int, not %s" % type(device_id).__name__)
        key = (int(device_id), os.getpid())
        c = self._clients.get(key)
        if c is None:
            with self._lock:
                c = self._clients.get(key)
                if c is None:
                    c = Client(self.ps_config_file, key[0])
                    self._clients[key] = c
        return c

    def lookup(self, h_keys, model_name, table_id, device_id=0):
        """lookup(h_keys, model_name, table_id, device_id=0) -> numpy (n, emb) float32.

        h_keys: int64 (or int32; uint64; uint32 for a 32-bit model) keys, a
        numpy array of any shape and strides (flattened, as HugeCTR did: a
        copy when not contiguous, e.g. one column batch[:, j]), or a list
        (or tuple) of ints (Python ints or numpy integers in the int64 range;
        anything else raises hps.Error HPS_EINVAL), converted to int64; n is
        the number of keys.  table_id: the table's index (or its name).
        device_id: as client().  Keys found nowhere get the table's default.

        Raises hps.Error: HPS_EINVAL (bad keys, table_id, device_id),
        HPS_ENOTFOUND (no such model or table, or the model is not loaded),
        HPS_EBUSY (no coordinator has served the model since the client
        opened: unlike HugeCTR's HPS(), which loaded everything before it
        returned, this one attaches to a coordinator that may still be
        loading; self.client(device_id).wait_ready(timeout_ms) waits for
        it), HPS_EMISMATCH (a reload changed the model's tables), HPS_EIO.
        Thread-safe; the GIL is released while the lookup runs."""
        if isinstance(h_keys, (list, tuple)):
            h_keys = _keys_from_list(h_keys)
        elif isinstance(h_keys, _np.ndarray) and (h_keys.ndim != 1 or
                                                  not h_keys.flags.c_contiguous):
            h_keys = _np.ascontiguousarray(h_keys).reshape(-1)
        return self.client(device_id).lookup(model_name, table_id, h_keys)

    def lookup_fromdlpack(self, keys_capsule, out_tensor_capsule, model_name, table_id,
                          device_id=0):
        """lookup_fromdlpack(keys_capsule, out_tensor_capsule, model_name, table_id,
        device_id=0) -> None.

        keys and out as DLPack capsules (torch.utils.dlpack.to_dlpack(t)) or
        objects with __dlpack__, on the CPU or on CUDA device device_id: keys
        int64 (or int32; uint64; uint32 for a 32-bit model) C-contiguous of
        any shape (up to 32 dimensions), n of them taken in C order (as
        HugeCTR flattened them); out float32 C-contiguous of any shape
        (up to 32 dimensions) holding at least n * emb
        elements (e.g. torch.empty((n, emb)), or a buffer sized for the
        largest batch): its first n * emb elements are written in place
        (row i: key i's vector), the rest left as they are.  Raises
        hps.Error as lookup() does; non-contiguous keys or out, or an out
        of fewer elements, are refused (HPS_EINVAL; HugeCTR wrote past the
        end of a short out)."""
        self.client(device_id)._lookup_any(model_name, table_id, keys_capsule,
                                           out_tensor_capsule)

    def close(self):
        """Close every Client this object opened (Client.close(): leave the
        segment and the GPU caches, after the calls in flight on them).
        Idempotent; thread-safe.  A later lookup opens a new Client for its
        device_id.  Arrays returned by earlier lookups stay valid (they own
        their memory)."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for c in clients:
            c.close()

    def __enter__(self):
        """The object itself: `with HPS(path) as h:` closes it at the end."""
        return self

    def __exit__(self, *exc):
        """close(); exceptions propagate."""
        self.close()
        return False
