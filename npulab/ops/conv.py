"""Convolutions on the simulated NPU's cube, with torch.nn.functional's names and arguments.

=====================  =================  ==========================================================
function               op type            what runs
=====================  =================  ==========================================================
``conv2d``             Conv2D             img2col conv (:mod:`npulab.kernels.conv`), NCHW in and out
``conv3d``             Conv3D             the same kernel with a depth axis, NCDHW
``conv_transpose2d``   Conv2DTranspose    a conv over the zero-inserted input with the flipped,
                                          transposed weights (the zero insertion is done on the host,
                                          so the cube also multiplies the inserted zeros)
``conv2d_bn_relu``     Conv2DBNRelu       conv + batch-norm (inference) + ReLU in one kernel: BN is a
                                          per-channel scale/offset in the epilogue (FixPipe, or the
                                          vector unit in UB on the 910 / 310), the conv output never
                                          reaches GM before BN and ReLU
``linear``             BatchMatMul        y = x W^T + b (+ ReLU) on the matmul templates
=====================  =================  ==========================================================

dtypes: float16 (fp32 accumulation, float16 out), float32, int8 (int32 accumulation, exact;
out int32, or float16/float32 with ``scale=``: a per-tensor float or a per-channel (Cout,)
vector, applied in the epilogue as the dequantisation). Every function returns numpy arrays, and
(out, trace) with ``return_trace=True``. As in torch, an empty batch (N = 0) gives an empty
output; stride, padding, dilation are ints or tuples of ints (:mod:`npulab.ops.args`).
"""
from __future__ import annotations

import functools

import numpy as np

from ..arch import ACC_DTYPE, DEFAULT_CHIP
from ..errors import ShapeError
from ..kernels import search
from ..kernels.conv import ConvProblem, ConvTiles, ConvTiling, launch_conv, make_problem
from .args import int_tuple, positive_int
from .registry import TensorSpec, batch_of_one, dispatch, register

# -- attribute parsing -------------------------------------------------------------------------

def conv_pads(padding, n: int, ksize: tuple, dilation: tuple, stride: tuple, what: str) -> tuple:
    """((before, after), ...) per spatial axis from torch's padding argument."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(f"{what}: padding='same' needs stride 1 (as in torch), got stride {stride}")
            tot = [d * (k - 1) for k, d in zip(ksize, dilation)]
            return tuple((t // 2, t - t // 2) for t in tot)
        raise ShapeError(f"{what}: padding must be 'same', 'valid', an int or {n} ints, got {padding!r}")
    p = int_tuple(padding, n, "padding", what, 0)
    return tuple((x, x) for x in p)


def _check_inputs(x, w, nd: int, what: str):
    x, w = np.asarray(x), np.asarray(w)
    names = "N, C, H, W" if nd == 2 else "N, C, D, H, W"
    if x.ndim != nd + 2:
        raise ShapeError(f"{what}: input must be {nd + 2}-D ({names}), got shape {x.shape}")
    if w.ndim != nd + 2:
        raise ShapeError(f"{what}: weight must be {nd + 2}-D, got shape {w.shape}")
    if x.dtype != w.dtype:
        raise ShapeError(f"{what}: input is {x.dtype} and weight is {w.dtype}; they must have one "
                         f"dtype (float16, float32 or int8)")
    if min(x.shape[1:]) == 0:
        raise ShapeError(f"{what}: the input {x.shape} has an empty channel or spatial axis; only the "
                         f"batch axis may be 0 (an empty batch gives an empty output)")
    if min(w.shape) == 0:
        raise ShapeError(f"{what}: the weight {w.shape} is empty")
    return x, w


def _check_output(what, x, w, out, args: str, rule: str):
    """The user's call in the message when the output would have no pixels."""
    if min(out) < 1:
        raise ShapeError(f"{what}: the output would be {out} for input {x.shape}, weight {w.shape}, "
                         f"{args}: {rule}")


def _vector(v, cout: int, name: str, what: str, dtype) -> np.ndarray:
    v = np.asarray(v)
    if v.shape != (cout,):
        raise ShapeError(f"{what}: {name} must have shape ({cout},) (one value per output channel), "
                         f"got {v.shape}")
    if np.dtype(dtype) == np.int32 and v.dtype.kind not in "iu":
        raise ShapeError(f"{what}: an int8 conv takes an integer {name} (added in int32), got {v.dtype}")
    return v.astype(dtype)


def _epilogue(x, cout, bias, scale, out_dtype, what):
    """The vectors and flags of the epilogue: bias, dequant scale."""
    acc = ACC_DTYPE.get(x.dtype, x.dtype)        # an unsupported dtype: the problem says so
    vecs = {}
    if bias is not None:
        vecs["bias"] = _vector(bias, cout, "bias", what, acc)
    mode, value = "none", 1.0
    if scale is not None:
        if x.dtype != np.int8:
            raise ShapeError(f"{what}: scale= (dequantisation) is for int8 inputs, got {x.dtype}")
        if np.ndim(scale) == 0:
            mode, value = "tensor", float(scale)
        else:
            mode = "channel"
            vecs["scale"] = _vector(scale, cout, "scale", what, np.float32)
    if out_dtype is not None:
        od = np.dtype(out_dtype)
        ok = (np.float16, np.float32) if scale is not None else \
            ((np.int32,) if x.dtype == np.int8 else (x.dtype.type,))
        if od not in [np.dtype(o) for o in ok]:
            raise ShapeError(f"{what}: out_dtype {od} is not possible here; expected one of "
                             f"{', '.join(np.dtype(o).name for o in ok)}")
        out_dtype = od.name
    return vecs, mode, value, out_dtype


# -- the registered kernels -------------------------------------------------------------------
# Each op has a problem function (specs, chip, **attrs) -> its ConvProblem: the one place a
# call is checked (make_problem; ``what`` names the caller's op and ``nd`` its spatial axes in
# the messages). The tiling function derives the tiling from it (_tiled), the shape inference
# reads the output off the problem of one batch item (_infer).
def _conv_problem(specs, chip, *, stride, pads, dilation, groups, vectors=(), scale="none",
                  scale_value=1.0, relu=False, out_dtype=None, tiling=None, what="conv", nd=3, c04=None):
    """``c04``: the small-channel format, None to let the conv pick it as CANN's Conv2DV2 does
    (a compiled model passes ATC's ``--enable_small_channel`` choice)."""
    (xs, xd), (ws, _) = specs[:2]
    return make_problem(xs, ws, xd, stride, pads, dilation, groups, has_bias="bias" in vectors,
                        scale=scale, scale_value=scale_value, has_offset="offset" in vectors,
                        relu=relu, out_dtype=out_dtype, what=what, nd=nd, c04=c04)


def tiling_for(problem: ConvProblem, chip, tiling=None) -> ConvTiling:
    """The tiling a conv of ``problem`` runs with: None, the tuned tiling if the problem was
    tuned, else the default one (:func:`npulab.kernels.search.pick`); ConvTiles, or a ConvTiling
    whose tiles are taken, on this problem."""
    if tiling is None:
        return search.pick(problem, chip)
    if isinstance(tiling, ConvTiling):
        return ConvTiling(problem, tiling.tiles, tiling.name)
    if isinstance(tiling, ConvTiles):
        return ConvTiling(problem, tiling)
    raise ShapeError(f"conv: tiling must be None, ConvTiles or a ConvTiling, got {type(tiling).__name__}")


def _tiled(problem):
    """The tiling function of ``problem`` (same signature): :func:`tiling_for` of the problem
    with the ``tiling`` attribute."""
    @functools.wraps(problem)
    def tiling_fn(specs, chip, **attrs):
        return tiling_for(problem(specs, chip, **attrs), chip, attrs.get("tiling"))
    return tiling_fn


def _infer(problem):
    """Shape inference from a problem function: the problem of one batch item validates the
    call and gives the output's (Cout, D, H, W) and dtype."""
    def infer(specs, chip, **attrs):
        x = specs[0]
        p = problem([TensorSpec(batch_of_one(x.shape), x.dtype)] + list(specs[1:]), chip, **attrs)
        g = p.geom
        return TensorSpec((x.shape[0], p.cout, g.od, g.oh, g.ow), np.dtype(p.out_dtype))
    return infer


def _conv_run(arrays, t, chip, mode, *, vectors=(), **attrs):
    vec = dict(zip(vectors, arrays[2:]))
    return launch_conv(arrays[0], arrays[1], t, chip=chip, mode=mode, **vec)


_CONV_INPUTS = ("x", "weight", "bias?", "scale?")
register("Conv2D", "conv", _tiled(_conv_problem), _conv_run,
         "img2col convolution on the cube (stride, padding, dilation, groups, bias); fp16/fp32/int8",
         inputs=_CONV_INPUTS, infer=_infer(_conv_problem))
register("Conv3D", "conv", _tiled(_conv_problem), _conv_run,
         "3-D img2col convolution on the cube; fp16/fp32/int8", inputs=_CONV_INPUTS, infer=_infer(_conv_problem))


def _transpose_problem(x_shape, w_shape, stride, padding, output_padding, dilation, groups):
    """The conv that computes conv_transpose: its input (zero-inserted, padded or cropped) shape,
    its weight shape, pads and the crops to apply to the zero-inserted input."""
    n, cin = x_shape[:2]
    _, cout_g = w_shape[:2]
    k = w_shape[2:]
    dil_in = tuple((s - 1) * st + 1 for s, st in zip(x_shape[2:], stride))
    pads, crops = [], []
    for kk, d, p, op in zip(k, dilation, padding, output_padding):
        lo, hi = d * (kk - 1) - p, d * (kk - 1) - p + op
        crops.append((max(0, -lo), max(0, -hi)))
        pads.append((max(0, lo), max(0, hi)))
    conv_in = (n, cin) + tuple(s - a - b for s, (a, b) in zip(dil_in, crops))
    return conv_in, (cout_g * groups, cin // groups) + tuple(k), tuple(pads), tuple(crops)


def _transpose_arrays(x, w, stride, crops, groups):
    """Zero-insert x (stride - 1 zeros between pixels), crop; flip w and swap its channel axes
    per group: (Cin, Cout_g, k...) -> (Cout, Cin_g, k...)."""
    n, cin = x.shape[:2]
    sp = x.shape[2:]
    xd = np.zeros((n, cin) + tuple((s - 1) * st + 1 for s, st in zip(sp, stride)), dtype=x.dtype)
    xd[(slice(None), slice(None)) + tuple(slice(None, None, st) for st in stride)] = x
    xd = xd[(slice(None), slice(None)) + tuple(slice(a, xd.shape[2 + i] - b) for i, (a, b) in enumerate(crops))]
    cin_g = cin // groups
    cout_g = w.shape[1]
    wf = np.flip(w, axis=tuple(range(2, w.ndim)))
    wf = wf.reshape((groups, cin_g, cout_g) + w.shape[2:]).swapaxes(1, 2)
    return np.ascontiguousarray(xd), np.ascontiguousarray(wf.reshape((groups * cout_g, cin_g) + w.shape[2:]))


def _tconv_problem(specs, chip, *, stride, padding, output_padding, dilation, groups, vectors=(),
                   scale="none", scale_value=1.0, relu=False, out_dtype=None, tiling=None):
    (xs, xd), (ws, wd) = specs[:2]
    cin_shape, cw_shape, pads, _ = _transpose_problem(xs, ws, stride, padding, output_padding, dilation, groups)
    cs = [TensorSpec(cin_shape, xd), TensorSpec(cw_shape, wd)] + list(specs[2:])
    return _conv_problem(cs, chip, stride=(1,) * len(stride), pads=pads, dilation=dilation, groups=groups,
                         vectors=vectors, scale=scale, scale_value=scale_value, relu=relu, out_dtype=out_dtype)


def _tconv_run(arrays, t, chip, mode, *, stride, padding, output_padding, dilation, groups,
               vectors=(), **attrs):
    x, w = arrays[:2]
    _, _, _, crops = _transpose_problem(x.shape, w.shape, stride, padding, output_padding, dilation, groups)
    xc, wc = _transpose_arrays(x, w, stride, crops, groups)
    return _conv_run([xc, wc] + list(arrays[2:]), t, chip, mode, vectors=vectors)


register("Conv2DTranspose", "conv", _tiled(_tconv_problem), _tconv_run,
         "transposed 2-D convolution: a conv over the zero-inserted input; fp16/fp32/int8",
         inputs=_CONV_INPUTS, infer=_infer(_tconv_problem))


def _bn_problem(specs, chip, *, eps, has_bias, stride, pads, dilation, groups, relu=True, tiling=None,
                what="conv2d_bn_relu", nd=3, c04=None):
    vec = ("bias",) if has_bias else ()
    return _conv_problem(list(specs[:2 + len(vec)]), chip, stride=stride, pads=pads, dilation=dilation,
                         groups=groups, vectors=vec + ("scale", "offset"), scale="channel", relu=relu,
                         what=what, nd=nd, c04=c04)


def _bn_run(arrays, t, chip, mode, *, eps, has_bias, **attrs):
    x, w = arrays[:2]
    rest = list(arrays[2:])
    bias = rest.pop(0) if has_bias else None
    mean, var, gamma, beta = (np.asarray(a, dtype=np.float64) for a in rest)
    s = gamma / np.sqrt(var + eps)                          # BN (inference) = per-channel affine
    vec = {"scale": s.astype(np.float32), "offset": (beta - mean * s).astype(np.float32)}
    if bias is not None:
        vec["bias"] = bias
    return launch_conv(x, w, t, chip=chip, mode=mode, **vec)


register("Conv2DBNRelu", "conv", _tiled(_bn_problem), _bn_run,
         "fused conv2d + batch-norm (inference) + ReLU: BN and ReLU in the epilogue",
         inputs=("x", "weight", "bias?", "running_mean", "running_var", "bn_weight", "bn_bias"),
         infer=_infer(_bn_problem))


# -- the functional interface ------------------------------------------------------------------
def conv_args(w_shape, stride, padding, dilation, groups, nd, what):
    """A conv call's stride, padding, dilation and groups parsed as the kernel takes them
    (nd-tuples, pads as (before, after) pairs) for a weight of shape ``w_shape``; whether they
    fit the input and weight is the problem's to check (make_problem, through the dispatcher)."""
    stride = int_tuple(stride, nd, "stride", what, 1)
    dilation = int_tuple(dilation, nd, "dilation", what, 1)
    groups = positive_int(groups, "groups", what)
    pads = conv_pads(padding, nd, tuple(w_shape)[2:], dilation, stride, what)
    return stride, pads, dilation, groups


def depth_one(stride, pads, dilation) -> tuple:
    """A 2-D conv's parsed stride, pads and dilation as the 3-D kernel takes them: a depth axis
    of 1 in front (Conv2D runs as a 3-D problem of depth 1)."""
    return (1,) + tuple(stride), ((0, 0),) + tuple(pads), (1,) + tuple(dilation)


def _conv_nd(input, weight, bias, stride, padding, dilation, groups, nd, op, what, chip, scale,
             out_dtype, tiling, relu, return_trace):
    x, w = _check_inputs(input, weight, nd, what)
    stride, pads, dilation, groups = conv_args(w.shape, stride, padding, dilation, groups, nd, what)
    vecs, mode, value, out_dtype = _epilogue(x, w.shape[0], bias, scale, out_dtype, what)
    if nd == 2:
        x, w = x[:, :, None], w[:, :, None]
        stride, pads, dilation = depth_one(stride, pads, dilation)
    y, trace = dispatch(op, x, w, *vecs.values(), chip=chip, stride=stride, pads=pads,
                        dilation=dilation, groups=groups, vectors=tuple(vecs), scale=mode,
                        scale_value=value, relu=bool(relu), out_dtype=out_dtype, tiling=tiling,
                        what=what, nd=nd)
    if nd == 2:
        y = y[:, :, 0]
    return (y, trace) if return_trace else y


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, chip=DEFAULT_CHIP,
           scale=None, out_dtype=None, relu: bool = False, tiling=None, return_trace: bool = False):
    """2-D convolution, as ``torch.nn.functional.conv2d``: input (N, Cin, H, W), weight
    (Cout, Cin / groups, kh, kw), bias (Cout,); padding an int, a pair, 'same' or 'valid'.
    int8: int32 out, or float16 (``out_dtype``) with ``scale`` (float or (Cout,)) applied in
    the epilogue. ``relu=True`` applies ReLU in the epilogue (after bias and scale), the
    same as ``relu(conv2d(...))`` in one kernel. Returns (N, Cout, Ho, Wo)."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 2, "Conv2D", "conv2d",
                    chip, scale, out_dtype, tiling, relu, return_trace)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, chip=DEFAULT_CHIP,
           scale=None, out_dtype=None, relu: bool = False, tiling=None, return_trace: bool = False):
    """3-D convolution, as ``torch.nn.functional.conv3d``: input (N, Cin, D, H, W), weight
    (Cout, Cin / groups, kd, kh, kw). ``relu`` as in :func:`conv2d`. Returns (N, Cout, Do, Ho, Wo)."""
    return _conv_nd(input, weight, bias, stride, padding, dilation, groups, 3, "Conv3D", "conv3d",
                    chip, scale, out_dtype, tiling, relu, return_trace)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, *, chip=DEFAULT_CHIP, scale=None, out_dtype=None,
                     return_trace: bool = False):
    """Transposed 2-D convolution, as ``torch.nn.functional.conv_transpose2d``: input
    (N, Cin, H, W), weight (Cin, Cout / groups, kh, kw). Output size (H - 1) x stride - 2 x
    padding + dilation x (kh - 1) + output_padding + 1."""
    what = "conv_transpose2d"
    x, w = _check_inputs(input, weight, 2, what)
    stride = int_tuple(stride, 2, "stride", what, 1)
    dilation = int_tuple(dilation, 2, "dilation", what, 1)
    padding = int_tuple(padding, 2, "padding", what, 0)
    output_padding = int_tuple(output_padding, 2, "output_padding", what, 0)
    groups = positive_int(groups, "groups", what)
    if x.shape[1] % groups:
        raise ShapeError(f"{what}: groups={groups} must divide in_channels={x.shape[1]}")
    if w.shape[0] != x.shape[1]:
        raise ShapeError(f"{what}: weight {w.shape} has {w.shape[0]} input channels (axis 0), the "
                         f"input has {x.shape[1]}")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= max(s, d):
            raise ShapeError(f"{what}: output_padding {output_padding} must be smaller than stride "
                             f"or dilation ({stride}, {dilation}), as in torch")
    out = tuple((sz - 1) * s - 2 * p + d * (k - 1) + op + 1 for sz, s, p, d, k, op in
                zip(x.shape[2:], stride, padding, dilation, w.shape[2:], output_padding))
    _check_output(what, x, w, out, f"stride {stride}, padding {padding}, output_padding "
                  f"{output_padding}, dilation {dilation}",
                  "(H - 1) x stride - 2 x padding + dilation x (k - 1) + output_padding + 1 must be "
                  "at least 1; lower the padding")
    cout = w.shape[1] * groups
    vecs, mode, value, out_dtype = _epilogue(x, cout, bias, scale, out_dtype, what)
    y, trace = dispatch("Conv2DTranspose", x[:, :, None], w[:, :, None], *vecs.values(), chip=chip,
                        stride=(1,) + stride, padding=(0,) + padding,
                        output_padding=(0,) + output_padding, dilation=(1,) + dilation,
                        groups=groups, vectors=tuple(vecs), scale=mode, scale_value=value,
                        out_dtype=out_dtype)
    y = y[:, :, 0]
    return (y, trace) if return_trace else y


def conv2d_bn_relu(input, weight, bias=None, running_mean=None, running_var=None, bn_weight=None,
                   bn_bias=None, eps: float = 1e-5, stride=1, padding=0, dilation=1, groups=1, *,
                   relu: bool = True, chip=DEFAULT_CHIP, tiling=None, return_trace: bool = False):
    """Fused Conv2d -> BatchNorm2d (inference, running statistics) -> ReLU in one kernel: the
    same as ``relu(batch_norm(conv2d(input, weight, bias, ...), running_mean, running_var,
    bn_weight, bn_bias, training=False, eps=eps))`` (without the relu when ``relu=False``). BN
    is applied in the epilogue (FixPipe, or the vector unit on the 910 / 310) as the per-channel
    scale gamma / sqrt(var + eps) and offset
    beta - mean x scale; the conv result never goes to GM before BN and ReLU. float16 or
    float32."""
    what = "conv2d_bn_relu"
    x, w = _check_inputs(input, weight, 2, what)
    if x.dtype == np.int8:
        raise ShapeError(f"{what}: takes float16 or float32 (for int8 fold BN into the dequant scale)")
    cout = w.shape[0]
    if running_mean is None or running_var is None:
        raise ShapeError(f"{what}: running_mean and running_var are required (inference BN)")
    stats = [_vector(v, cout, name, what, np.float32) for v, name in
             ((running_mean, "running_mean"), (running_var, "running_var"))]
    gamma = np.ones(cout, np.float32) if bn_weight is None else _vector(bn_weight, cout, "bn_weight", what, np.float32)
    beta = np.zeros(cout, np.float32) if bn_bias is None else _vector(bn_bias, cout, "bn_bias", what, np.float32)
    if np.any(stats[1] + eps <= 0):
        raise ShapeError(f"{what}: running_var + eps must be positive")
    stride, pads, dilation, groups = conv_args(w.shape, stride, padding, dilation, groups, 2, what)
    arrays = [x[:, :, None], w[:, :, None]]
    if bias is not None:
        arrays.append(_vector(bias, cout, "bias", what, np.float32))
    arrays += stats + [gamma, beta]
    y, trace = dispatch("Conv2DBNRelu", *arrays, chip=chip, stride=(1,) + stride, pads=((0, 0),) + pads,
                        dilation=(1,) + dilation, groups=groups, eps=float(eps), nd=2,
                        has_bias=bias is not None, relu=bool(relu), tiling=tiling)
    y = y[:, :, 0]
    return (y, trace) if return_trace else y


def linear(input, weight, bias=None, *, activation: str | None = None, chip=DEFAULT_CHIP,
           return_trace: bool = False):
    """y = input @ weight.T + bias (+ ReLU), as ``torch.nn.functional.linear``: input (..., K),
    weight (N, K), bias (N,). Runs on the matmul templates (BatchMatMul with trans_b), bias and
    ReLU fused in the epilogue. ``activation``: None or "relu" (FixPipe has ReLU; GELU
    and SiLU are not fused here: run the vector op after). int8 gives int32."""
    from .matmul import matmul
    x, w = np.asarray(input), np.asarray(weight)
    if activation not in (None, "relu"):
        raise ShapeError(f"linear: activation must be None or 'relu' (the one FixPipe fuses), got "
                         f"{activation!r}; apply gelu/silu as a separate op")
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"linear: input (..., K) and weight (N, K) must agree on K, got {x.shape} "
                         f"and {w.shape}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    y, trace = matmul(x2, w, bias=bias, trans_b=True, relu=activation == "relu", chip=chip,
                      return_trace=True)
    y = y.reshape(lead + (w.shape[0],))
    return (y, trace) if return_trace else y


__all__ = ["conv2d", "conv3d", "conv_transpose2d", "conv2d_bn_relu", "linear"]
