"""The convolution problem, as the user states it (catlass's Arguments), checked once when made.

A convolution is the matmul C (M, N) = A (M, K) x B (K, N) with M = batch x output pixels,
N = output channels of a group and K = C1 x taps x C0 (the input channels of a group in blocks
of C0, times kd x kh x kw taps). :func:`make_problem` validates a call (dtype, groups, channel
counts, the output size, the C04 format) and returns a :class:`ConvProblem`; the tiling
(:mod:`npulab.kernels.conv.tiling`) is derived from it.

**Group enlargement** (CANN's Conv2D tiling does the same): a group with few channels wastes
most of a C0 block, so E groups are merged into one with block-diagonal weights, E =
min(lcm(Cin_g, C0) / Cin_g, lcm(Cout_g, 16) / Cout_g, groups). A depthwise fp16 conv runs as
groups of 16 channels: the map moves without padding, the cube multiplies the zeros of the
block-diagonal weights (1/16 of its MACs are useful). CANN does the same: its graph engine turns
a depthwise conv into a grouped Conv2D on the cube (ops-nn's depthwise fusion pass).

**C04** (:func:`use_c04`): a first layer's few input channels in blocks of 4, K padded once.

**Strided read** (:func:`strided_read`): a 1 x 1 conv with a stride reads only the pixels it uses.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from ...arch import CUBE_DTYPES, FRACTAL_ROWS, c0_of, ceil_div, round_up
from ...errors import ShapeError
from ...lang.conv_load import ConvGeom
from ..tiling_data import CubeProblem

C04 = 4                    # channels per block of the C04 formats (NC1HWC0_C04, FRACTAL_Z_C04)
EPILOGUE_SCALES = ("none", "tensor", "channel")


def conv_output_size(size: int, k: int, stride: int, dilation: int, pad0: int, pad1: int) -> int:
    return (size + pad0 + pad1 - dilation * (k - 1) - 1) // stride + 1


def use_c04(dtype, cin: int, groups: int, w: int) -> bool:
    """Whether a conv runs in the C04 formats, as CANN's Conv2DV2 picks them: at most 4 input
    channels, one group, not int8 (ops-nn ``conv2d_v2_op_graph.cpp``, ``GetC04EnableFlag``:
    ``fmapC <= 4 && groups == 1 && weight not int8``). A first layer's 3 RGB channels then fill
    4 of a block instead of 16, and K = kh x kw x 4 is padded to 16 once (``kbMin =
    AlignB(4 * hK * wK, k0)`` there) instead of per tap: the 7 x 7 stem's K is 208, not 784.
    npulab restricts it to float16 (CANN's C04 format lists name float16) and to rows of whole
    32-byte blocks (W a multiple of 4: the slab is copied in whole rows). ATC enables it with
    ``--enable_small_channel 1``."""
    item = np.dtype(dtype).itemsize
    return (np.dtype(dtype) == np.float16 and cin <= C04 and groups == 1
            and (w * C04 * item) % 32 == 0)


def enlarge(groups: int, cin_g: int, cout_g: int, c0: int) -> int:
    """How many groups to merge into one (CANN's Conv2D ``enlarge``)."""
    if groups == 1:
        return 1
    e_in = math.lcm(cin_g, c0) // cin_g
    e_out = math.lcm(cout_g, 16) // cout_g
    return max(1, min(e_in, e_out, groups))


def strided_read(geom: ConvGeom) -> ConvGeom | None:
    """The map a 1 x 1 convolution with a stride reads, when it reads only the pixels it uses.

    A 1 x 1 kernel with stride s and no padding uses every s-th pixel of every s-th row (a
    ResNet downsample reads a quarter of its input). Copied in with strided bursts (one
    ``DataCopy`` per row and channel block: blockLen = C0, srcStride = s x C0) those pixels
    form a dense map of the output's size, over which the conv is a 1 x 1 stride-1 one: the
    returned geometry. None for any other conv. (The slab would otherwise copy whole rows,
    skipped pixels and all; CANN's graph engine gets the same saving by fusing a strided read
    into Conv2D.)"""
    g = geom
    if (g.kd, g.kh, g.kw) != (1, 1, 1) or any(g.pad) or tuple(g.stride) == (1, 1, 1):
        return None
    return ConvGeom(g.od, g.oh, g.ow, 1, 1, 1, (1, 1, 1), (1, 1, 1), (0, 0, 0), g.od, g.oh, g.ow)


@dataclass(frozen=True)
class ConvProblem(CubeProblem):
    """One convolution after group enlargement: what the kernel computes, before any tile is
    chosen. Made by :func:`make_problem`, which checks it."""
    batch: int
    groups: int                # groups after enlargement (G')
    cin_e: int                 # input channels of one (enlarged) group
    cout_e: int                # output channels of one (enlarged) group
    cout: int                  # real output channels in all (the output's row length)
    cin_g: int                 # input channels of one group as the user's weights have them
    geom: ConvGeom
    dtype: str
    out_dtype: str
    # the epilogue FixPipe applies on the way out
    has_bias: bool = False
    scale: str = "none"        # "none", "tensor" (scale_value) or "channel" (a vector)
    scale_value: float = 1.0
    has_offset: bool = False
    relu: bool = False
    c04: bool = False          # the small-channel first-layer format (see :func:`use_c04`): the
                               # map in C0 = 4 blocks, K = taps x 4 channels padded to 16 once
    gm_geom: ConvGeom | None = None  # strided read (see :func:`strided_read`): the input map as
                               # it lies in GM; ``geom`` is then the stride-1 map the kernel reads

    # -- derived (the hot ones cached on the instance: the tiling search asks them millions of
    # times; a frozen dataclass compares and hashes by its fields only) -----------------------
    @property
    def x_geom(self) -> ConvGeom:
        """The input map as it lies in GM (``geom`` unless the problem reads it strided)."""
        return self.gm_geom or self.geom

    @cached_property
    def c0(self) -> int:
        """The feature map's channel block: 32 bytes (c0_of), or 4 channels with ``c04``."""
        return C04 if self.c04 else c0_of(self.np_dtype)

    @cached_property
    def k0(self) -> int:
        """The cube's K block (one fractal's depth, the weights' C0): 32 bytes of the dtype."""
        return c0_of(self.np_dtype)

    @cached_property
    def c1(self) -> int:
        return ceil_div(self.cin_e, self.c0)

    def step_k(self, cs: int) -> int:
        """K columns of an L1 step of ``cs`` channel blocks (C04: all of K, padded once)."""
        if self.c04:
            return self.k
        return cs * self.geom.taps * self.c0

    @property
    def m(self) -> int:
        return self.batch * self.geom.out_pixels

    @property
    def k(self) -> int:
        if self.c04:                          # FRACTAL_Z_C04: (tap, c) rows, padded to K0 once
            return round_up(self.geom.taps * C04, self.k0)
        return self.c1 * self.geom.taps * self.c0

    @property
    def n1(self) -> int:
        """16-channel fractal columns of one group's weights (FRACTAL_Z's N1)."""
        return ceil_div(self.cout_e, FRACTAL_ROWS)

    @property
    def gemm_shape(self) -> tuple[int, int, int, int]:
        """The matmul the conv is: (enlarged) groups x M (batch x output pixels) x N (Cout of a
        group) x K."""
        return (self.groups, self.m, self.cout_e, self.k)

    @property
    def macs(self) -> int:
        """The useful multiply-accumulates: batch x output pixels x Cout x Cin_g x taps."""
        return self.m * self.cout * self.cin_g * self.geom.taps

    @property
    def vectors(self) -> tuple:
        """The per-channel epilogue vectors, in GM argument order."""
        return tuple(v for v, on in (("bias", self.has_bias), ("scale", self.scale == "channel"),
                                     ("offset", self.has_offset)) if on)

    def tags(self) -> str:
        """The formats in a recipe's words (" c04", " strided_read")."""
        return f"{' c04' if self.c04 else ''}{' strided_read' if self.gm_geom else ''}"

    def key(self) -> str:
        """The problem in a tiling-cache key: every field, as canonical JSON."""
        import json
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def _args_text(stride, pads, dilation, nd: int) -> str:
    """The call's stride, padding and dilation as the user wrote them (``nd`` spatial axes; a
    padding the same on both sides of every axis as one number or a tuple of them)."""
    s, d, p = tuple(stride)[-nd:], tuple(dilation)[-nd:], tuple(pads)[-nd:]
    if all(a == b for a, b in p):
        pad = p[0][0] if len({a for a, _ in p}) == 1 else tuple(a for a, _ in p)
    else:
        pad = p
    return f"stride {s}, padding {pad}, dilation {d}"


def make_problem(x_shape, w_shape, dtype, stride=(1, 1, 1), pads=((0, 0), (0, 0), (0, 0)),
                 dilation=(1, 1, 1), groups: int = 1, *, has_bias=False, scale="none",
                 scale_value=1.0, has_offset=False, relu=False, out_dtype=None,
                 c04: bool | None = None, what: str = "conv", nd: int = 3) -> ConvProblem:
    """The ConvProblem of a call, checked: x_shape (N, Cin, D, H, W), w_shape (Cout, Cin /
    groups, kd, kh, kw); pads ((front, back), (top, bottom), (left, right)). ``c04``: use the
    small-channel C04 formats (default: when :func:`use_c04` says CANN would). ``what`` (the
    caller's op) opens every error message and ``nd`` (the spatial axes the caller speaks of: 2
    for a conv2d, whose depth axis is 1) sets how shapes are shown in it."""
    dt = np.dtype(dtype)
    if dt not in CUBE_DTYPES:
        raise ShapeError(f"{what}: dtype {dt} is not supported; expected float16, float32 or int8")
    n, cin, d, h, w = (int(v) for v in x_shape)
    cout, cin_g, kd, kh, kw = (int(v) for v in w_shape)
    if groups < 1 or cin % groups or cout % groups:
        raise ShapeError(f"{what}: groups={groups} must divide in_channels={cin} and out_channels={cout}")
    if cin_g * groups != cin:
        shown = tuple(w_shape)[:2] + tuple(w_shape)[5 - nd:]
        raise ShapeError(f"{what}: weight {shown} expects {cin_g * groups} input channels "
                         f"(weight.shape[1] x groups), the input has {cin}")
    out = tuple(conv_output_size(s, k, st, dl, p0, p1) for s, k, st, dl, (p0, p1) in
                zip((d, h, w), (kd, kh, kw), stride, dilation, pads))
    if min(out) < 1:
        k_sizes = (kd, kh, kw)[3 - nd:]
        span = tuple(dl * (k - 1) + 1 for k, dl in zip(k_sizes, tuple(dilation)[3 - nd:]))
        padded = tuple(s + p0 + p1 for s, (p0, p1) in zip((d, h, w)[3 - nd:], tuple(pads)[3 - nd:]))
        xs = tuple(x_shape)[:2] + tuple(x_shape)[5 - nd:]
        ws = tuple(w_shape)[:2] + tuple(w_shape)[5 - nd:]
        raise ShapeError(f"{what}: the output would be {out[3 - nd:]} for input {xs}, weight {ws}, "
                         f"{_args_text(stride, pads, dilation, nd)}: the dilated kernel must fit the "
                         f"padded input (dilation x (k - 1) + 1 = {span}, padded input {padded}); pad "
                         f"more or use a smaller kernel or dilation")
    if scale not in EPILOGUE_SCALES:
        raise ShapeError(f"{what}: scale mode {scale!r} must be one of {EPILOGUE_SCALES}")
    geom = ConvGeom(d, h, w, kd, kh, kw, tuple(stride), tuple(dilation), tuple(p[0] for p in pads), *out)
    dense = strided_read(geom)
    cout_g = cout // groups
    e = enlarge(groups, cin_g, cout_g, c0_of(dt))
    if out_dtype is None:
        out_dtype = ("float16" if scale != "none" else "int32") if dt == np.int8 else dt.name
    ok = use_c04(dt, cin, groups, w) and d == kd == 1     # Conv2D's format (CANN: Conv2DV2)
    if c04 is None:
        c04 = ok
    elif c04 and not ok:
        raise ShapeError(f"{what}: the C04 format needs float16, at most {C04} input channels, one "
                         f"group, a 2-D conv and a row of whole 32-byte blocks (W a multiple of 4); "
                         f"got {dt}, {cin} channels, groups={groups}, D={d}, W={w}")
    gm_geom = None
    if dense is not None and not c04:        # read only the pixels a strided 1 x 1 conv uses
        geom, gm_geom = dense, geom
    return ConvProblem(batch=n, groups=ceil_div(groups, e), cin_e=e * cin_g, cout_e=e * cout_g, cout=cout,
                       cin_g=cin_g, geom=geom, gm_geom=gm_geom, dtype=dt.name, out_dtype=np.dtype(out_dtype).name,
                       has_bias=bool(has_bias), scale=scale, scale_value=float(scale_value),
                       has_offset=bool(has_offset), relu=bool(relu), c04=bool(c04))


__all__ = ["C04", "ConvProblem", "make_problem", "conv_output_size", "use_c04", "enlarge", "strided_read"]
