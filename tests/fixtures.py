"""Plain helpers the test modules share (``import fixtures``: tests/conftest.py puts tests/ on
sys.path). No test module imports another; what two of them need lives here:

* comparing: :func:`assert_close` (an NPU output against its reference, within the row of
  :mod:`npulab.ops.tolerance` for its dtype), :func:`same_numbers` (two runs of one launch);
* traces: :func:`trace_digest`, :func:`run_vector` (a vector instruction in a one-block kernel);
* inputs: :func:`rand`, :func:`bias_for`, :func:`positive` (seeded by a key each case names),
  :func:`random_ints`;
* twins: :func:`same_error_on_both_twins`.
"""
from __future__ import annotations

import hashlib
import zlib

import numpy as np
import pytest

from npulab import get_chip, lang
from npulab.lang import VECCALC, TBuf, TPipe, data_copy_pad
from npulab.ops.tolerance import tol

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
    than for all of them: formats.worker.product_into). fp16 to one of its ulps (2^-10 relative)
    or, where the sum cancelled to a value far below the operands' scale, to the float32
    accumulator's rounding at that scale (1e-6 of the largest value: an fp16 ulp of a tiny
    result is smaller than what the fp32 sum's order moves); fp32 to 1e-5 relative; anything
    else exactly."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.float16:
        w = want.astype(np.float32)
        np.testing.assert_allclose(got.astype(np.float32), w, rtol=2.0 ** -10, atol=1e-6 * float(np.abs(w).max()))
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


# -- comparing ---------------------------------------------------------------------------------
def assert_close(actual, expected, dtype=None, unit: str = "vector", err_msg: str = "") -> None:
    """Assert ``actual`` (an NPU output) matches ``expected`` (the reference) within the table's
    row for ``dtype`` (default: ``actual``'s dtype) on ``unit``."""
    actual = np.asarray(actual)
    dtype = actual.dtype if dtype is None else dtype
    assert actual.shape == np.shape(expected), f"shape {actual.shape} != expected {np.shape(expected)}"
    np.testing.assert_allclose(actual.astype(np.float64), np.asarray(expected, np.float64),
                               err_msg=err_msg, **tol(dtype, unit))


# -- inputs ------------------------------------------------------------------------------------
def _rng(key: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(key.encode()))


def rand(shape, dtype, key: str, scale: float = 1.0) -> np.ndarray:
    """Values of ``dtype``: normal x ``scale`` for floats, all of -128..127 for int8, and
    -3000..2999 for int32 (an int8 op's bias, added in the int32 accumulator)."""
    dt = np.dtype(dtype)
    if dt == np.int8:
        return _rng(key).integers(-128, 128, size=shape).astype(np.int8)
    if dt == np.int32:
        return _rng(key).integers(-3000, 3000, size=shape).astype(np.int32)
    return (_rng(key).standard_normal(shape) * scale).astype(dt)


def bias_for(n: int, dtype, key: str) -> np.ndarray:
    """A bias for an op on ``dtype`` inputs: int32 for int8 ones, else ``dtype``."""
    return rand(n, np.int32 if np.dtype(dtype) == np.int8 else dtype, key)


def positive(shape, dtype, key: str) -> np.ndarray:
    """Values in 0.5 .. 2 (variances)."""
    return _rng(key).uniform(0.5, 2.0, shape).astype(dtype)


# -- a vector instruction in a kernel ----------------------------------------------------------
def run_vector(body, *arrays, dtype=np.float32, out_dtype=None, chip="teach"):
    """Copy arrays into UB, run body(dst, *srcs) on V, copy dst out. Flags placed by hand."""
    out_dtype = out_dtype or dtype
    n = arrays[0].size

    spec = get_chip(chip)
    need = [n * np.dtype(dtype).itemsize + 32] * len(arrays) + [n * np.dtype(out_dtype).itemsize + 32]
    # the operands where their blocks never meet in one UB bank group (sim.banks: the groups
    # repeat every 512 B), as a kernel that avoids bank conflicts places them: the sources at
    # 0, 256, 64, 320, ... and dst at 128 bytes past a multiple of 512, when that fits
    where = [(0, 256, 64, 320, 192, 448)[i % 6] for i in range(len(arrays))] + [128]
    starts, at = [], 0
    for size, w in zip(need, where):
        at += (w - at) % 512
        starts.append(at)
        at += size
    sizes = [b - a for a, b in zip(starts, starts[1:] + [at])] if at <= spec.buffers.ub else need

    def kernel(out, *ins):
        pipe = TPipe()
        bufs = [TBuf(VECCALC, f"in{i}") for i in range(len(ins))]
        obuf = TBuf(VECCALC, "out")
        for b, size in zip(bufs, sizes):
            pipe.init_buffer(b, size)
        pipe.init_buffer(obuf, sizes[-1])
        assert sizes is need or [b.get(np.uint8).offset for b in bufs + [obuf]] == starts
        srcs = [b.get(dtype) for b in bufs]
        for s, g in zip(srcs, ins):
            data_copy_pad(s, g, n)
        lang.set_flag(lang.PIPE_MTE2, lang.PIPE_V, 0)
        lang.wait_flag(lang.PIPE_MTE2, lang.PIPE_V, 0)
        dst = obuf.get(out_dtype)
        body(dst, *srcs)
        lang.set_flag(lang.PIPE_V, lang.PIPE_MTE3, 0)
        lang.wait_flag(lang.PIPE_V, lang.PIPE_MTE3, 0)
        data_copy_pad(out, dst, n)

    (out, *_), trace = lang.launch(kernel, 1, np.zeros(n, out_dtype), *arrays, chip=chip)
    return out, trace
