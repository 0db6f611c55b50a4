"""matmul and batch_matmul on the simulated NPU's cube (the interface layer over the templates),
and fused_matmul, matmul + GELU as one mix kernel of a split chip's AIC and AIV cores.

The dispatcher here picks the tiling: a tuned one from the tiling cache when the shape has been
tuned (``npulab.kernels.search.tune``), else the default tiling function
(:func:`npulab.kernels.search.pick`). An empty M, N or batch gives an empty output, as in
torch; K must be at least 1.
"""
from __future__ import annotations

import numpy as np

from ..arch import ACC_DTYPE, CUBE_DTYPES, DEFAULT_CHIP, OUT_DTYPE
from ..errors import ShapeError
from ..kernels import search
from ..kernels.fused_matmul import FUSED_OP_TYPES, FusedMatmulProblem, launch_fused_matmul, make_fused_tiling
from ..kernels.matmul import MatmulProblem, MatmulTiles, MatmulTiling, launch_matmul, make_tiling
from .registry import TensorSpec, dispatch, register


def tiling_for(problem: MatmulProblem, chip, tiling=None) -> MatmulTiling:
    """The tiling a matmul of ``problem`` runs with: ``tiling`` as the caller gave it (None: the
    tuned tiling if the problem was tuned, else the default one; a recipe name or 7-tuple; the
    tiles of a MatmulTiling or MatmulTiles)."""
    if isinstance(tiling, MatmulTiling):
        if tiling.problem.shape != problem.shape or tiling.problem.np_dtype != problem.np_dtype:
            raise ShapeError(f"matmul: the tiling is for (batch, M, N, K) = {tiling.problem.shape} "
                             f"{tiling.problem.dtype}, the inputs are {problem.shape} {problem.np_dtype}")
        return MatmulTiling(problem, tiling.tiles, tiling.name)
    if isinstance(tiling, MatmulTiles):
        return MatmulTiling(problem, tiling)
    if isinstance(tiling, (str, tuple)):
        return make_tiling(problem, chip, tiling)
    if tiling is not None:
        raise ShapeError(f"matmul: tiling must be None, a name, a 7-tuple, MatmulTiles or a MatmulTiling, "
                         f"got {tiling!r}")
    return search.pick(problem, chip)


def _check_pair(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise ShapeError(f"{what}: a is {a.dtype} and b is {b.dtype}; they must have one dtype "
                         f"(float16, float32 or int8)")
    if a.dtype not in CUBE_DTYPES:
        raise ShapeError(f"{what}: dtype {a.dtype} is not supported; expected float16, float32 or int8")
    return a, b


def _bias(bias, n, dtype, what):
    if bias is None:
        return None
    bias = np.asarray(bias)
    if bias.shape != (n,):
        raise ShapeError(f"{what}: bias must have shape ({n},) (one value per output column), got {bias.shape}")
    acc = ACC_DTYPE[np.dtype(dtype)]
    if acc == np.int32 and bias.dtype.kind not in "iu":
        raise ShapeError(f"{what}: an int8 matmul takes an integer bias (added in int32), got {bias.dtype}")
    return bias.astype(acc)


def _problem(specs, trans_a: bool, trans_b: bool) -> tuple:
    """(batch, M, N, K) of (batch, M, K) x (batch, K, N) operand specs (or transposed)."""
    (a_shape, _), (b_shape, _) = specs[:2]
    m, k = (a_shape[2], a_shape[1]) if trans_a else a_shape[1:]
    n = b_shape[1] if trans_b else b_shape[2]
    return (a_shape[0], m, n, k)


def _bmm_tiling(specs, chip, trans_a=False, trans_b=False, relu=False, tiling=None):
    problem = MatmulProblem.of(_problem(specs, trans_a, trans_b), specs[0].dtype, trans_a=trans_a,
                               trans_b=trans_b, has_bias=len(specs) == 3, relu=relu)
    return tiling_for(problem, chip, tiling)


def _bmm_run(arrays, t, chip, mode, **attrs):
    bias = arrays[2] if len(arrays) == 3 else None
    return launch_matmul(arrays[0], arrays[1], t, bias, chip=chip, mode=mode)


def _bmm_infer(specs, chip, trans_a=False, trans_b=False, relu=False, tiling=None):
    dt = np.dtype(specs[0].dtype)
    if dt not in CUBE_DTYPES or specs[1].dtype != dt:
        raise ShapeError(f"BatchMatMul: a is {dt} and b is {specs[1].dtype}; expected one dtype of "
                         f"float16, float32 or int8")
    batch, m, n, _ = _problem(specs, trans_a, trans_b)
    return TensorSpec((batch, m, n), OUT_DTYPE[dt])


register("BatchMatMul", "matmul", _bmm_tiling, _bmm_run,
         "C = op(A) @ op(B) (+ bias) (ReLU) over a batch, on the cube; fp16/fp32/int8",
         inputs=("a", "b", "bias?"), infer=_bmm_infer)


def _run(a3, b3, bias, trans_a, trans_b, chip, tiling, relu):
    arrays = (a3, b3) if bias is None else (a3, b3, bias)
    return dispatch("BatchMatMul", *arrays, chip=chip, trans_a=bool(trans_a), trans_b=bool(trans_b),
                    relu=bool(relu), tiling=tiling)


def matmul(a, b, *, bias=None, trans_a: bool = False, trans_b: bool = False, chip=DEFAULT_CHIP,
           relu: bool = False, tiling=None, return_trace: bool = False):
    """C = op(A) @ op(B) (+ bias) on the cube. op(X) = X.T when trans_X.

    a: (M, K), or (K, M) with trans_a; b: (K, N), or (N, K) with trans_b; one dtype of
    float16 (-> float16 C, fp32 accumulation), float32 (-> float32) or int8 (-> int32, exact).
    bias: (N,), added in the accumulator's precision before the cast; relu applies after it.
    tiling: None (tuned or default), a name from ``TILINGS``, a 7-tuple, MatmulTiles or a
    MatmulTiling (its tiles).
    With ``return_trace`` returns (C, trace).
    """
    a, b = _check_pair(a, b, "matmul")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"matmul: a and b must be 2-D, got shapes {a.shape} and {b.shape} "
                         f"(batch_matmul takes stacks)")
    m, ka = (a.shape[1], a.shape[0]) if trans_a else a.shape
    kb, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if ka != kb:
        raise ShapeError(f"matmul: op(a) is {m} x {ka} and op(b) is {kb} x {n}; the inner "
                         f"dimensions (K) must match")
    if ka == 0:
        raise ShapeError(f"matmul: K = 0 (M, N, K) = ({m}, {n}, {ka}): the cube needs at least one "
                         f"product to accumulate")
    bias = _bias(bias, n, a.dtype, "matmul")
    c, trace = _run(a[None], b[None], bias, trans_a, trans_b, chip, tiling, relu)
    return (c[0], trace) if return_trace else c[0]


def batch_matmul(a, b, *, bias=None, trans_a: bool = False, trans_b: bool = False, chip=DEFAULT_CHIP,
                 relu: bool = False, tiling=None, return_trace: bool = False):
    """A stack of matmuls: a (..., M, K), b (..., K, N) (or transposed, as in :func:`matmul`)
    with the same leading dimensions; b may also be 2-D (shared by every matrix of a).
    Returns (..., M, N). The block scheduler spreads batch x M-tiles x N-tiles over the cores."""
    a, b = _check_pair(a, b, "batch_matmul")
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(f"batch_matmul: a and b need at least 2 dimensions, got {a.shape} and {b.shape}")
    lead = a.shape[:-2]
    if b.ndim == 2:
        b = np.broadcast_to(b, lead + b.shape)
    if b.shape[:-2] != lead:
        raise ShapeError(f"batch_matmul: leading (batch) dimensions differ: a {a.shape[:-2]}, "
                         f"b {b.shape[:-2]}; they must match (or b is 2-D)")
    m, ka = (a.shape[-1], a.shape[-2]) if trans_a else a.shape[-2:]
    kb, n = (b.shape[-1], b.shape[-2]) if trans_b else b.shape[-2:]
    if ka != kb:
        raise ShapeError(f"batch_matmul: op(a) is {m} x {ka} and op(b) is {kb} x {n}; the inner "
                         f"dimensions (K) must match")
    batch = int(np.prod(lead)) if lead else 1
    if ka == 0:
        raise ShapeError(f"batch_matmul: K = 0 (batch, M, N, K) = ({batch}, {m}, {n}, {ka}): the cube "
                         f"needs at least one product to accumulate")
    bias = _bias(bias, n, a.dtype, "batch_matmul")
    a3 = np.ascontiguousarray(a).reshape((batch,) + a.shape[-2:])
    b3 = np.ascontiguousarray(b).reshape((batch,) + b.shape[-2:])
    c, trace = _run(a3, b3, bias, trans_a, trans_b, chip, tiling, relu)
    c = c.reshape(lead + (m, n))
    return (c, trace) if return_trace else c


def _fused_problem(specs, fused_op_type) -> FusedMatmulProblem:
    (a_shape, a_dt), (b_shape, b_dt) = specs[:2]
    if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != b_shape[0]:
        raise ShapeError(f"FusedMatMul: x1 (M, K) and x2 (K, N) must agree on K, got {a_shape} and {b_shape}")
    if np.dtype(a_dt) != np.float16 or np.dtype(b_dt) != np.float16:
        raise ShapeError(f"FusedMatMul: x1 and x2 must be float16, got {np.dtype(a_dt)} and {np.dtype(b_dt)}")
    return FusedMatmulProblem(a_shape[0], b_shape[1], a_shape[1], fused_op_type, has_bias=len(specs) == 3)


def _fused_tiling(specs, chip, fused_op_type="gelu_erf", tiling=None):
    return make_fused_tiling(_fused_problem(specs, fused_op_type), chip, tiling)


def _fused_run(arrays, t, chip, mode, **attrs):
    bias = arrays[2] if len(arrays) == 3 else None
    return launch_fused_matmul(arrays[0], arrays[1], t, bias, chip=chip, mode=mode)


def _fused_infer(specs, chip, fused_op_type="gelu_erf", tiling=None):
    p = _fused_problem(specs, fused_op_type)
    return TensorSpec((p.m, p.n), np.dtype(np.float16))


register("FusedMatMul", "matmul", _fused_tiling, _fused_run,
         "y = gelu(x1 @ x2 + bias) as one mix kernel on a split chip (the AIC's tiles through a GM "
         "workspace to its two AIVs); fp16", inputs=("x1", "x2", "bias?"), infer=_fused_infer)


def fused_matmul(a, b, *, bias=None, fused_op_type: str = "gelu_erf", chip="910b", tiling=None,
                 return_trace: bool = False):
    """y = OP(a @ b + bias), OP = GELU (``fused_op_type`` "gelu_erf" or "gelu_tanh", ops-nn
    FusedMatMul's names), in one launch: a mix kernel on a split chip (the default 910b), each
    AI core's AIC computing block tiles into a GM workspace and its two AIVs applying GELU
    (:mod:`npulab.kernels.fused_matmul`). a (M, K) and b (K, N) float16, bias (N,) added in fp32
    by FixPipe; y (M, N) float16; N a multiple of 16. tiling: the cube's tiles (a MatmulTiling
    or a recipe name; default: the matmul's own). On a coupled chip (910, 310) there are no AIV
    cores: run ops.matmul, then ops.gelu. With ``return_trace`` returns (y, trace)."""
    a, b = np.asarray(a), np.asarray(b)
    if fused_op_type not in FUSED_OP_TYPES:
        raise ShapeError(f"fused_matmul: fused_op_type must be one of {sorted(FUSED_OP_TYPES)}, got "
                         f"{fused_op_type!r}")
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"fused_matmul: a and b must be 2-D, got shapes {a.shape} and {b.shape}")
    if a.dtype != np.float16 or b.dtype != np.float16:
        raise ShapeError(f"fused_matmul: a and b must be float16 (ops-nn's FusedMatMul fuses GELU for 16-bit "
                         f"inputs), got {a.dtype} and {b.dtype}")
    if a.shape[1] == 0:
        raise ShapeError("fused_matmul: K = 0: the cube needs at least one product to accumulate")
    bias = _bias(bias, b.shape[1], a.dtype, "fused_matmul")
    arrays = (a, b) if bias is None else (a, b, bias)
    y, trace = dispatch("FusedMatMul", *arrays, chip=chip, fused_op_type=fused_op_type, tiling=tiling)
    return (y, trace) if return_trace else y


__all__ = ["matmul", "batch_matmul", "fused_matmul"]
