"""
pyhps: helpers of the tests of the Python module hps (int-python_client,
int-python_hostile, int-python_control, gpu-python): expected rows from
hpstest's generator port, a mismatch description, the hps.Error check,
TAP skips, and an object exposing only DLPack.
"""
import numpy as np

import hps


def vecs(model, t, keys):
    """Expected (n, dim) float32 rows of table t."""
    return np.array(model.expected([[] for _ in range(t)] + [[int(k) for k in keys]]),
                    dtype=np.float32).reshape(len(keys), model.dims[t])


def flat(model, kpt):
    return np.array(model.expected(kpt), dtype=np.float32)


def mismatch(got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return "shape %r, want %r" % (got.shape, want.shape)
    bad = np.argwhere(got != want)
    if len(bad) == 0:
        return "equal"
    i = tuple(bad[0])
    return "%d elements differ; first at %r: got %r, want %r" % (len(bad), i, got[i], want[i])


def raises(t, fn, desc, code=None, text=None):
    """fn() must raise hps.Error (with .code == code, and text in its
    message, when given)."""
    try:
        fn()
    except hps.Error as e:
        ok = (code is None or e.code == code) and (text is None or text in str(e))
        return t.ok(ok, "%s: hps.Error (%s)" % (desc, str(e)[:300]),
                    "code %r (%s), want %r; message %r, want %r in it" %
                    (e.code, e.name, code, str(e)[:300], text))
    except Exception as e:  # noqa: BLE001
        return t.ok(False, "%s: hps.Error" % desc, "raised %s: %s" % (type(e).__name__, e))
    return t.ok(False, "%s: hps.Error" % desc, "no exception")


def skip(t, desc, reason):
    t.skip(desc, reason)


class DL:
    """An object with only __dlpack__ / __dlpack_device__ (no buffer)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        assert stream is None, "stream given for host memory"
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()
