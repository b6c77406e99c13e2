"""
hps.torch -- PyTorch layer of the hps module (HugeCTR's hps_torch.LookupLayer).

    import hps.torch
    emb = hps.torch.LookupLayer("/models/hps.ini", "wdl", 0, 16)
    vecs = emb(keys)        # keys: int64/int32 tensor, any shape, CPU or CUDA
                            # -> float32 keys.shape + (16,) on keys.device
    half = hps.torch.LookupLayer("/models/hps.ini", "wdl", 0, 16, dtype=torch.float16)

Inference only: the output never requires grad.  On CUDA the lookup is
ordered on torch.cuda.current_stream(keys.device).  Needs torch; `import hps`
does not.  Eager mode only: the lookup is a Python call, not a torch
operator (HugeCTR's hps_torch registered one), so torch.jit.script and
torch.jit.trace cannot capture it; the layer raises hps.Error when traced
rather than record a graph without the lookup.
"""
import os

try:
    import torch as _torch
except ImportError as _e:  # pragma: no cover (depends on the machine)
    raise ImportError("hps.torch needs PyTorch, which could not be imported (%s); install "
                      "torch, or use hps.Client with numpy arrays" % _e) from _e

from . import HPS_EMISMATCH, HPS_ENOTFOUND, _echo, _error, _index_or_name, shared_client

__all__ = ["LookupLayer"]


class LookupLayer(_torch.nn.Module):
    """LookupLayer(ps_config_file, model_name, table_id, emb_vec_size, dtype=None)

    forward(keys) -> tensor of shape keys.shape + (emb_vec_size,) on
    keys.device, float32 (or dtype: torch.float16 or torch.bfloat16, the
    float32 vectors rounded to nearest even, for a dense model that runs in
    half precision): the embedding vectors of table table_id (index or
    name) of model_name (name or index); an index is an int or anything with
    __index__ (numpy and torch integer scalars), not a bool, and both are
    checked when the layer is built.  Keys of any shape and layout are
    flattened (int64 or int32; non-contiguous keys, such as keys[::2] or a
    transposed tensor, are copied first).  CUDA keys are looked up on their device (through the GPU
    caches of models with gpucache = true), CPU keys on the current CUDA
    device's client (host-only where CUDA is not available).  Clients are
    shared per (configuration, device) in the process (hps.shared_client).
    The layer pickles (torch.save, copy.deepcopy, multiprocessing) as its
    arguments; a copy opens its own clients at its first forward(), and so
    does the layer in a forked child (a torch DataLoader worker).

    Raises hps.Error: emb_vec_size differs from the table's dim, unknown
    model or table, a model or table that is neither a name nor an index, a
    dtype other than float32 / float16 / bfloat16 (all when it is built);
    bad keys.
    """

    def __init__(self, ps_config_file, model_name, table_id, emb_vec_size, dtype=None):
        super().__init__()
        if dtype not in (None, _torch.float32, _torch.float16, _torch.bfloat16):
            raise _error("dtype %s: must be torch.float32, torch.float16 or torch.bfloat16" %
                         _echo(dtype))
        self.dtype = dtype
        self.ps_config_file = os.fsdecode(ps_config_file)
        # as forward() passes them: a name (str) or an int
        self.model_name = model_name = _index_or_name(model_name, "model_name")
        self.table_id = table_id = _index_or_name(table_id, "table_id")
        self.emb_vec_size = int(emb_vec_size)
        self._host_device = _torch.cuda.current_device() if _torch.cuda.is_available() else -1
        self._clients = {}
        c = self._client(self._host_device)
        tables = c.tables(model_name)
        if isinstance(table_id, str):
            idx = [i for i, t in enumerate(tables) if t["name"] == table_id]
            if not idx:
                raise _error("model %s has no table %s (tables: %r)" %
                             (_echo(model_name), _echo(table_id), [t["name"] for t in tables]),
                             HPS_ENOTFOUND)
            info = tables[idx[0]]
        else:
            if not 0 <= table_id < len(tables):
                raise _error("table_id %s out of range: model %s has %d tables" %
                             (_echo(table_id), _echo(model_name), len(tables)))
            info = tables[table_id]
        if info["dim"] != self.emb_vec_size:
            raise _error("emb_vec_size %d differs from the dim %d of table %r of model %s" %
                         (self.emb_vec_size, info["dim"], info["name"], _echo(model_name)))

    def __getstate__(self):
        # Clients are per process (a shared-memory attach): pickling
        # (torch.save of the module, copy.deepcopy, multiprocessing) keeps
        # the layer's arguments and drops them; the copy opens its own.
        state = self.__dict__.copy()
        state["_clients"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._clients = {}
        self._host_device = _torch.cuda.current_device() if _torch.cuda.is_available() else -1

    def _client(self, device):
        key = (device, os.getpid())  # a forked child looks up through a client of its own
        c = self._clients.get(key)
        if c is None or c.closed:
            c = shared_client(self.ps_config_file, device)
            self._clients[key] = c
        return c

    def forward(self, keys):
        """forward(keys) -> tensor of shape keys.shape + (emb_vec_size,).

        keys: int64 or int32 keys of any shape, a torch tensor (CPU, or CUDA
        on any device) or anything torch.as_tensor takes; flattened (a copy
        only when not contiguous).  Returns a new tensor (not requiring
        grad) on keys.device, float32 or the layer's dtype, owned by the
        caller.  CUDA keys: the lookup is enqueued on
        torch.cuda.current_stream(keys.device) after the work already there
        and complete when forward returns.  Opens the device's shared client
        on first use (hps.shared_client) and reopens one that was closed.
        Keys found nowhere get the table's default value.  Raises hps.Error
        as hps.Client.lookup: bad keys (dtype, alignment of device keys),
        HPS_EBUSY before the coordinator first served the model,
        HPS_ENOTFOUND once it is not loaded, HPS_EMISMATCH once a reload
        changed the table's dimension, HPS_EIO (a CUDA error); HPS_EINVAL
        under torch.jit.trace (eager mode only).  May be called from
        several threads (the clients are thread-safe).
        """
        if _torch.jit.is_tracing():
            # a traced graph would hold the output's allocation but not the
            # lookup: it would return uninitialised memory when run
            raise _error("hps.torch.LookupLayer cannot be traced (torch.jit.trace): its lookup "
                         "is a Python call, not a torch operator; run it in eager mode, or trace "
                         "the rest of the model and pass the embeddings in")
        if not isinstance(keys, _torch.Tensor):
            keys = _torch.as_tensor(keys)
        # a view where it can be; keys[::2] and the like are copied (the
        # client takes contiguous keys only)
        flat = keys.reshape(-1).contiguous()
        if flat.is_cuda:
            dev = flat.device
            out = self._client(dev.index).lookup(
                self.model_name, self.table_id, flat,
                stream=_torch.cuda.current_stream(dev).cuda_stream, dtype=self.dtype)
        else:
            out = self._client(self._host_device).lookup(self.model_name, self.table_id, flat,
                                                         dtype=self.dtype)
        if out.shape[-1] != self.emb_vec_size:  # a reload changed the table's dimension
            raise _error("table %s of model %s now has dimension %d (a reload changed the "
                         "model); this layer was built for emb_vec_size %d" %
                         (_echo(self.table_id), _echo(self.model_name), out.shape[-1],
                          self.emb_vec_size), HPS_EMISMATCH)
        return out.reshape(tuple(keys.shape) + (self.emb_vec_size,))

    def extra_repr(self):
        return "ps_config_file=%r, model_name=%r, table_id=%r, emb_vec_size=%d%s" % (
            self.ps_config_file, self.model_name, self.table_id, self.emb_vec_size,
            "" if self.dtype is None else ", dtype=%s" % self.dtype)
