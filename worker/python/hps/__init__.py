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

Keys are 1-D int64 or int32 arrays: numpy (or any buffer), or objects with
__dlpack__ (torch tensors on the CPU or on the client's CUDA device); the
output is float32 (n, dim) in the same kind of memory (numpy for numpy keys,
a torch tensor on keys.device for torch keys), or the caller's out=.

HugeCTR compatibility: hps.HPS(ps_config_file) with lookup() and
lookup_fromdlpack() as hugectr.inference.HPS had them (taking this project's
INI); hps.torch.LookupLayer as hps_torch.LookupLayer (needs torch).

Every failure raises hps.Error (.code: the hps_err_t, .name: its name).
"""
import atexit
import os
import sys
import threading

import numpy as _np

from . import _hps
from ._hps import HOST, Client, Error, strerror

__all__ = ["Client", "Error", "HPS", "HOST", "strerror", "shared_client", "version"]
__version__ = version = _hps.version

# The error codes (include/hps/hps.h): hps.HPS_ENOTFOUND, ...
_ERR_NAMES = {}
for _name in dir(_hps):
    if _name.startswith("HPS_E"):
        globals()[_name] = getattr(_hps, _name)
        _ERR_NAMES[getattr(_hps, _name)] = _name
        __all__.append(_name)
del _name

_DL_CPU, _DL_CUDA_HOST = 1, 3


def _error(msg, code=None):
    """An hps.Error raised from Python (code: HPS_EINVAL unless given)."""
    e = Error(msg)
    e.code = _hps.HPS_EINVAL if code is None else code
    e.name = _ERR_NAMES.get(e.code)
    return e


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
    device, not one per layer).  Closed at interpreter exit."""
    key = (os.path.realpath(os.fspath(config)), int(device))
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

    One Client per device_id, opened on its first lookup and kept until
    close() (or the object's end).  Lookups of host keys return numpy arrays.
    """

    def __init__(self, ps_config_file):
        if not isinstance(ps_config_file, (str, bytes, os.PathLike)):
            raise _error("HPS(ps_config_file): a path to the INI configuration is needed "
                         "(ParameterServerConfig objects are not supported), got %s" %
                         type(ps_config_file).__name__)
        path = os.fsdecode(ps_config_file)
        if not os.path.isfile(path):
            import errno
            raise _error("HPS(%r): no such configuration file" % path, -errno.ENOENT)
        self.ps_config_file = path
        self._clients = {}
        self._lock = threading.Lock()

    def client(self, device_id=0):
        """The Client of device_id (opened on first use)."""
        c = self._clients.get(device_id)
        if c is None:
            with self._lock:
                c = self._clients.get(device_id)
                if c is None:
                    c = Client(self.ps_config_file, int(device_id))
                    self._clients[device_id] = c
        return c

    def lookup(self, h_keys, model_name, table_id, device_id=0):
        """lookup(h_keys, model_name, table_id, device_id=0) -> numpy (n, emb) float32.

        h_keys: 1-D int64 (or int32) keys, a numpy array (a list is converted
        to int64).  table_id: the table's index (or its name)."""
        if isinstance(h_keys, (list, tuple)):
            h_keys = _np.asarray(h_keys, dtype=_np.int64)
        return self.client(device_id).lookup(model_name, table_id, h_keys)

    def lookup_fromdlpack(self, keys_capsule, out_tensor_capsule, model_name, table_id,
                          device_id=0):
        """lookup_fromdlpack(keys_capsule, out_tensor_capsule, model_name, table_id,
        device_id=0) -> None.

        keys and out as DLPack capsules (torch.utils.dlpack.to_dlpack(t)) or
        objects with __dlpack__, on the CPU or on CUDA device device_id: keys
        int64 (or int32) 1-D, out float32 C-contiguous holding n * emb
        elements (e.g. torch.empty((n, emb))), written in place."""
        self.client(device_id)._lookup_any(model_name, table_id, keys_capsule,
                                           out_tensor_capsule)

    def close(self):
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for c in clients:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
