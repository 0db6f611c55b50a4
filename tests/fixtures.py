"""Plain helpers the test modules share (``import fixtures``: tests/conftest.py puts tests/ on
sys.path). No test module imports another; what two of them need lives here."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest

COLUMNS = {"core": np.int32, "pipe": np.int8, "kind": np.int8, "op": np.int16, "start": np.int64,
           "end": np.int64, "busy_end": np.int64, "nbytes": np.int64, "flops": np.int64,
           "energy": np.float64, "block": np.int32}


def trace_digest(tr, outputs=()) -> str:
    """sha256 over every column of ``tr`` (in its stated dtype), the names, routes,
    allocations, per-core cycles, GM statistics, and the bytes of ``outputs``."""
    h = hashlib.sha256()
    for name, dtype in COLUMNS.items():
        col = getattr(tr, name)
        assert col.dtype == dtype, f"column {name} is {col.dtype}, expected {np.dtype(dtype)}"
        h.update(name.encode())
        h.update(np.ascontiguousarray(col).tobytes())
    h.update("\x00".join(tr.name).encode())
    h.update("\x00".join(tr.route).encode())
    h.update(repr([tuple(vars(a).values()) for a in tr.allocations]).encode())
    h.update(np.asarray(tr.core_cycles, dtype=np.int64).tobytes())
    h.update(repr(sorted(tr.gm_stats.items())).encode())
    for out in outputs:
        h.update(np.ascontiguousarray(out).tobytes())
    return h.hexdigest()[:24]


def same_numbers(got: np.ndarray, want: np.ndarray) -> None:
    """Two results of one launch whose mmad products may have been summed differently: the
    moves are exact, so the only freedom is a float32 product's rounding (the Cython worker
    splits a product in two halves of rows, and BLAS may pick another kernel for half the rows
    than for all of them: formats.worker.product_into). fp16 to one ulp, fp32 to 1e-5 relative,
    anything else exactly."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.float16:
        np.testing.assert_array_max_ulp(got, want, maxulp=1)
    elif got.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * float(np.abs(want).max()))
    else:
        np.testing.assert_array_equal(got, want)


def random_ints(shape, dtype, seed=0) -> np.ndarray:
    """Whole numbers in [-100, 100) of ``dtype``: exact in every dtype the formats move, so the
    moves can be compared bit for bit."""
    return np.random.default_rng(seed).integers(-100, 100, shape).astype(dtype)


def same_error_on_both_twins(twin_modules, name: str, args, error) -> str:
    """Call ``name(*args)`` of each of ``twin_modules`` (a Cython module and its Python twin):
    each must raise ``error`` with the same message, which is returned."""
    messages = []
    for module in twin_modules:
        with pytest.raises(error) as info:
            getattr(module, name)(*args)
        messages.append(str(info.value))
    assert messages[0] == messages[1], messages
    return messages[0]
