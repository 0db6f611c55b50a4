"""Data formats of the cube unit: ND, the fractal formats NZ / ZZ / ZN, NC1HWC0 and FRACTAL_Z.

The cube multiplies 16 x 16 (fp16) tiles, so every byte it reads must sit in *fractals*: small
matrices of 16 rows x C0 columns, C0 = 32 bytes of elements (16 for fp16, 32 for int8, 8 for
fp32), each fractal 512 bytes (data/FACTS.md, Data formats). A format says two things: in which
order the fractals follow each other (capital letter) and how elements sit inside one fractal
(small letter). "Z" is row-major, "N" column-major:

=========  ====================  ===============  ==================  =====================
format     where                 fractal shape    fractal order       inside a fractal
=========  ====================  ===============  ==================  =====================
ND         GM (user tensors)     -                -                   plain row-major
NZ         L1, L0C, GM (NZ)      16 x C0          column-major (N)    row-major (z)
ZZ         L0A (left matrix)     16 x C0          row-major (Z)       row-major (z)
ZN         L0B (right matrix)    C0 x 16          row-major (Z)       column-major (n)
=========  ====================  ===============  ==================  =====================

As arrays: NZ of an (M, N) matrix has shape (N1, M1, 16, N0); ZZ of (M, K) has shape
(M1, K1, 16, K0); ZN of (K, N) has shape (K1, N1, 16, K0) (each stored row of a ZN fractal is one
column n holding K0 values of k). Dimensions are padded with zeros up to whole fractals. The
accumulator in L0C is NZ with 16 x 16 fractals of fp32/int32 (1024 bytes each): pass ``c0=16``.

Feature maps use NC1HWC0 (channels split into C1 groups of C0 = 32 bytes, C0 innermost) and
conv weights FRACTAL_Z: (C1*H*W, N1, N0, C0) with N0 = 16 output channels.

This module is the specification, in plain numpy. ``npulab._formats`` (Cython) implements the
hot conversions (``pack``/``unpack``, which every fractal format is an instance of) with the
same signatures; ``pack``/``unpack`` here pick it when it is built. A format change done by a
data-moving instruction (``data_copy_nd2nz``, ``load_data``, ``fixpipe``) costs what the move
costs: the instructions move the padded bytes, nothing more.
"""
from __future__ import annotations

import numpy as np

from .arch import FRACTAL_BYTES, FRACTAL_ROWS, c0_of, ceil_div
from .errors import ShapeError

L0C_C0 = FRACTAL_ROWS    # the accumulator's fractal is 16 x 16 elements of 4 bytes

#: format name -> (fractal rows are 16 (True) or C0 (False), fractal order col-major, inner col-major)
LAYOUTS = {
    "NZ": (True, True, False),
    "ZZ": (True, False, False),
    "ZN": (False, False, True),
}


def fractal_shape(fmt: str, rows: int, cols: int, dtype, c0: int | None = None) -> tuple:
    """The 4-D array shape of an (rows, cols) matrix in ``fmt`` ("NZ", "ZZ" or "ZN")."""
    fr, fc, col_order, col_inner = _geometry(fmt, dtype, c0)
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    outer = (c1, r1) if col_order else (r1, c1)
    inner = (fc, fr) if col_inner else (fr, fc)
    return outer + inner


def _geometry(fmt: str, dtype, c0):
    if fmt not in LAYOUTS:
        raise ShapeError(f"format must be one of {', '.join(LAYOUTS)}, got {fmt!r}")
    rows16, col_order, col_inner = LAYOUTS[fmt]
    c0 = c0_of(dtype) if c0 is None else int(c0)
    fr, fc = (FRACTAL_ROWS, c0) if rows16 else (c0, FRACTAL_ROWS)
    return fr, fc, col_order, col_inner


def _check_2d(x, what):
    x = np.asarray(x)
    if x.ndim != 2:
        raise ShapeError(f"{what}: expected a 2-D (rows, cols) matrix, got shape {x.shape}")
    return x


# -- the two primitives every fractal format is made of --------------------------------------
def pack_numpy(x: np.ndarray, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """Cut ``x`` (rows, cols) into fr x fc fractals (zero padding), order them row- or
    column-major, store each row- or column-major; return the 4-D array.

    As loops: out[f_outer, f_inner, i, j] where (R, C) = fractal (row, col) index and (r, c) the
    position inside it::

        for R, C, r, c: out[(C, R) if col_order else (R, C)][(c, r) if col_inner else (r, c)]
                        = x[R * fr + r, C * fc + c]   (0 past the edge)
    """
    rows, cols = x.shape
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    pad = np.zeros((r1 * fr, c1 * fc), dtype=x.dtype)
    pad[:rows, :cols] = x
    t = pad.reshape(r1, fr, c1, fc)                       # (R, r, C, c)
    axes = ((2, 0) if col_order else (0, 2)) + ((3, 1) if col_inner else (1, 3))
    return np.ascontiguousarray(t.transpose(axes))


def unpack_numpy(z: np.ndarray, rows: int, cols: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """The inverse of :func:`pack_numpy`: the (rows, cols) matrix (padding dropped)."""
    if z.ndim != 4:
        raise ShapeError(f"a fractal array is 4-D, got shape {z.shape}")
    a, b, c, d = z.shape
    r1, c1 = (b, a) if col_order else (a, b)
    fr, fc = (d, c) if col_inner else (c, d)
    if r1 * fr < rows or c1 * fc < cols:
        raise ShapeError(f"a fractal array of shape {z.shape} holds at most {r1 * fr} x {c1 * fc}, "
                         f"asked for {rows} x {cols}")
    # bring the axes back to (R, r, C, c)
    pos = {"R": 1 if col_order else 0, "C": 0 if col_order else 1,
           "r": 3 if col_inner else 2, "c": 2 if col_inner else 3}
    t = z.transpose(pos["R"], pos["r"], pos["C"], pos["c"]).reshape(r1 * fr, c1 * fc)
    return np.ascontiguousarray(t[:rows, :cols])


def pack_into_numpy(x: np.ndarray, out: np.ndarray, fr: int, fc: int, col_order: bool,
                    col_inner: bool) -> np.ndarray:
    """Write :func:`pack_numpy` of ``x`` into ``out`` (C-contiguous, same dtype, exactly the
    padded fractals' size, any shape: e.g. a buffer's flat view)."""
    z = pack_numpy(x, fr, fc, col_order, col_inner)
    if out.size != z.size or out.dtype != z.dtype:
        raise ShapeError(f"pack_into: out holds {out.size} x {out.dtype}, the fractals need "
                         f"{z.size} x {z.dtype}")
    out.reshape(-1)[:] = z.reshape(-1)
    return out


def unpack_into_numpy(z: np.ndarray, out: np.ndarray, fr: int, fc: int, col_order: bool,
                      col_inner: bool) -> np.ndarray:
    """Write the out.shape = (rows, cols) matrix held in the fractal array ``z`` (any shape
    holding ceil(rows/fr) x ceil(cols/fc) fractals of fr x fc) into the 2-D ``out``."""
    rows, cols = out.shape
    r1, c1 = ceil_div(rows, fr), ceil_div(cols, fc)
    shape = ((c1, r1) if col_order else (r1, c1)) + ((fc, fr) if col_inner else (fr, fc))
    out[...] = unpack_numpy(np.asarray(z).reshape(-1)[: r1 * c1 * fr * fc].reshape(shape), rows, cols,
                            col_order, col_inner)
    return out



def nz_window_into_numpy(src: np.ndarray, src_rows: int, c0: int, s_r0: int, s_c0: int, rows: int,
                         cols: int, transpose: bool, dst: np.ndarray, fr: int, fc: int,
                         col_inner: bool) -> np.ndarray:
    """What ``load_data`` does to the bytes: take the window of the matrix S held in NZ in
    ``src`` (``src_rows`` padded rows, C0 = ``c0``), rows s_r0.., columns s_c0.., as the operand
    op = window (rows, cols), or window transposed when ``transpose``; write op into ``dst``
    as fr x fc fractals in row-major order, each row-major (ZZ, L0A) or column-major when
    ``col_inner`` (ZN, L0B), zero padding."""
    s_rows, s_cols = (cols, rows) if transpose else (rows, cols)
    c1a, c1b = s_c0 // c0, ceil_div(s_c0 + s_cols, c0)
    if s_r0 < 0 or s_c0 < 0 or s_r0 + s_rows > src_rows or src_rows % FRACTAL_ROWS \
            or c1b * src_rows * c0 > src.size:
        raise ShapeError(f"nz_window_into: the window ({s_r0}+{s_rows}, {s_c0}+{s_cols}) is outside "
                         f"the NZ source ({src_rows} rows, {src.size} elements)")
    nz = src.reshape(-1)[c1a * src_rows * c0: c1b * src_rows * c0].reshape(c1b - c1a, src_rows, c0)
    window = nz[:, s_r0:s_r0 + s_rows, :].transpose(1, 0, 2).reshape(s_rows, (c1b - c1a) * c0)
    window = window[:, s_c0 - c1a * c0: s_c0 - c1a * c0 + s_cols]
    return pack_into_numpy(window.T if transpose else window, dst, fr, fc, False, col_inner)


def unpack_f16_to_f32_numpy(z: np.ndarray, out: np.ndarray, fr: int, fc: int, col_order: bool,
                            col_inner: bool = False) -> np.ndarray:
    """Unpack float16 fractals into the float32 matrix ``out`` (rows, cols), widening exactly:
    :func:`unpack_into_numpy` followed by a cast."""
    if z.dtype != np.float16 or out.dtype != np.float32:
        raise ShapeError(f"unpack_f16_to_f32: expected float16 fractals into float32, got "
                         f"{z.dtype} into {out.dtype}")
    narrow = np.empty(out.shape, dtype=np.float16)
    unpack_into_numpy(z, narrow, fr, fc, col_order, col_inner)
    out[...] = narrow
    return out


try:                                        # the Cython twins, when built
    from . import _formats as _fast
except ImportError:                         # pragma: no cover - a source tree without the build
    _fast = None

# Deferred moves (see ``pyx/_formats.pyx``): in a functional launch the cube path's byte moves
# run on a worker thread. ``PENDING`` is non-empty while moves may be queued; ``sync()`` waits
# for them. Without the Cython build every move runs at once and there is nothing to wait for.
if _fast is not None:
    PENDING, sync, deferred_moves = _fast.PENDING, _fast.sync, _fast.deferred_moves
    zero_bytes = _fast.zero_bytes
else:                                       # pragma: no cover - a source tree without the build
    import contextlib
    PENDING, sync, deferred_moves = [], (lambda: None), contextlib.nullcontext

    def zero_bytes(buf, n):
        buf[:n] = 0


def pack(x: np.ndarray, fr: int, fc: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`pack_numpy`, in Cython when built."""
    x = _check_2d(x, "pack")
    if _fast is not None:
        try:
            return _fast.pack(x, fr, fc, col_order, col_inner)
        except ValueError as exc:           # the Cython twin's checks, as the error this module raises
            raise ShapeError(str(exc)) from None
    return pack_numpy(x, fr, fc, col_order, col_inner)


def unpack(z: np.ndarray, rows: int, cols: int, col_order: bool, col_inner: bool) -> np.ndarray:
    """:func:`unpack_numpy`, in Cython when built."""
    if _fast is not None:
        try:
            return _fast.unpack(np.asarray(z), rows, cols, col_order, col_inner)
        except ValueError as exc:           # the Cython twin's checks, as the error this module raises
            raise ShapeError(str(exc)) from None
    return unpack_numpy(np.asarray(z), rows, cols, col_order, col_inner)


def _cython_first(fast_name: str, spec, doc: str):
    """The public form of a move: the Cython function ``fast_name`` when built (its checks
    raise this module's ShapeError), else the numpy specification ``spec`` (same arguments)."""
    def move(*args):
        if _fast is not None:
            try:
                return getattr(_fast, fast_name)(*args)
            except ValueError as exc:
                raise ShapeError(str(exc)) from None
        return spec(*args)
    move.__name__ = move.__qualname__ = fast_name
    move.__doc__ = doc
    move.fast_name, move.spec = fast_name, spec
    return move


def direct(move):
    """What ``move`` (one of this module's Cython-first functions) calls: the Cython function
    when built, else the numpy specification. For the simulator's per-instruction calls, which
    skip the wrapper's Python frame and turn a ValueError into a ShapeError themselves."""
    return getattr(_fast, move.fast_name) if _fast is not None else move.spec


def _nz_window_buffers_numpy(src_buf, src_off, src_len, item, src_rows, c0, s_r0, s_c0, rows, cols,
                             transpose, dst_buf, dst_off, dst_len, fr, fc, col_inner) -> None:
    word = np.dtype(f"u{item}")
    nz_window_into_numpy(src_buf[src_off:src_off + src_len * item].view(word), src_rows, c0, s_r0, s_c0,
                         rows, cols, transpose, dst_buf[dst_off:dst_off + dst_len * item].view(word),
                         fr, fc, col_inner)


def _unpack_f16_buffer_numpy(buf, offset, out, row0, rows, col0, cols, fr, fc, col_order, col_inner):
    n = ceil_div(rows, fr) * ceil_div(cols, fc) * fr * fc
    return unpack_f16_to_f32_numpy(buf[offset:offset + 2 * n].view(np.float16),
                                   out[row0:row0 + rows, col0:col0 + cols], fr, fc, col_order, col_inner)


def _pack_nz_buffers_numpy(src, src_off, rows, cols, stride, dst_buf, dst_off, c0) -> None:
    if c0 * src.itemsize != 32:
        raise ShapeError(f"pack_nz_buffers: fractal rows of {c0} x {src.itemsize} B are not 32 B")
    if src_off < 0 or rows < 1 or cols < 1 or stride < cols or src_off + (rows - 1) * stride + cols > src.size:
        raise ShapeError(f"pack_nz_buffers: a {rows} x {cols} tile (row stride {stride}) at element "
                         f"{src_off} does not fit {src.size} elements")
    tile = np.lib.stride_tricks.as_strided(src[src_off:], shape=(rows, cols),
                                           strides=(stride * src.itemsize, src.itemsize))
    n = ceil_div(rows, FRACTAL_ROWS) * FRACTAL_ROWS * ceil_div(cols, c0) * c0
    if dst_off < 0 or dst_off + n * src.itemsize > dst_buf.size:
        raise ShapeError(f"pack_nz_buffers: {n * src.itemsize} B at byte {dst_off} do not fit "
                         f"{dst_buf.size} bytes")
    pack_into_numpy(tile, dst_buf[dst_off:dst_off + n * src.itemsize].view(src.dtype), FRACTAL_ROWS, c0,
                    True, False)


pack_into = _cython_first("pack_into", pack_into_numpy,
                          "pack_into(x, out, fr, fc, col_order, col_inner): :func:`pack_into_numpy`, "
                          "in Cython when built.")
unpack_into = _cython_first("unpack_into", unpack_into_numpy,
                            "unpack_into(z, out, fr, fc, col_order, col_inner): "
                            ":func:`unpack_into_numpy`, in Cython when built.")
nz_window_into = _cython_first("nz_window_into", nz_window_into_numpy,
                               "nz_window_into(src, src_rows, c0, s_r0, s_c0, rows, cols, transpose, "
                               "dst, fr, fc, col_inner): :func:`nz_window_into_numpy`, in Cython when built.")
unpack_f16_to_f32 = _cython_first("unpack_f16_to_f32", unpack_f16_to_f32_numpy,
                                  "unpack_f16_to_f32(z, out, fr, fc, col_order, col_inner=False): "
                                  ":func:`unpack_f16_to_f32_numpy`, in Cython when built.")
nz_window_buffers = _cython_first(
    "nz_window_raw", _nz_window_buffers_numpy,
    "nz_window_buffers(src_buf, src_off, src_len, item, src_rows, c0, s_r0, s_c0, rows, cols, "
    "transpose, dst_buf, dst_off, dst_len, fr, fc, col_inner): :func:`nz_window_into` between two "
    "buffers' byte arrays (``load_data``'s move): the source is ``src_len`` elements of ``item`` "
    "bytes from byte ``src_off``, the destination ``dst_len`` elements from byte ``dst_off``.")
pack_nz_buffers = _cython_first(
    "pack_nz_raw", _pack_nz_buffers_numpy,
    "pack_nz_buffers(src, src_off, rows, cols, stride, dst_buf, dst_off, c0): ``data_copy_nd2nz``'s "
    "move: the (rows, cols) tile with row stride ``stride`` elements from element ``src_off`` of "
    "the 1-D array ``src``, as NZ (:func:`pack_into` with 16 x c0 fractals, column-major order) "
    "into bytes ``dst_off ..`` of the uint8 array ``dst_buf``.")
unpack_f16_buffer = _cython_first(
    "unpack_f16_to_f32_raw", _unpack_f16_buffer_numpy,
    "unpack_f16_buffer(buf, offset, out, row0, rows, col0, cols, fr, fc, col_order, col_inner): "
    ":func:`unpack_f16_to_f32` of the float16 fractals from byte ``offset`` of a buffer's byte "
    "array into rows ``row0 ..`` and columns ``col0 ..`` of the float32 matrix ``out`` (what "
    "``mmad`` reads out of L0A / L0B).")


def drain_nz_f32_to_f16(z, m, n, out, bias, relu) -> bool:
    """FixPipe's fp32 -> fp16 drain of an NZ result in one pass (+ bias, ReLU, round to nearest
    even) when the Cython build and the CPU's F16C can do it; False when not (drain with numpy,
    which gives the same bytes)."""
    if _fast is None:
        return False
    try:
        return _fast.drain_nz_f32_to_f16(z, m, n, out, bias, relu)
    except ValueError as exc:
        raise ShapeError(str(exc)) from None


# -- the named formats ------------------------------------------------------------------------
def to_fractal(x, fmt: str, c0: int | None = None) -> np.ndarray:
    """ND (rows, cols) -> ``fmt`` ("NZ", "ZZ", "ZN") as a 4-D array (see the table above)."""
    x = _check_2d(x, f"to_fractal({fmt})")
    fr, fc, col_order, col_inner = _geometry(fmt, x.dtype, c0)
    return pack(x, fr, fc, col_order, col_inner)


def from_fractal(z, fmt: str, rows: int, cols: int) -> np.ndarray:
    """``fmt`` 4-D array -> ND (rows, cols), padding dropped."""
    if fmt not in LAYOUTS:
        raise ShapeError(f"format must be one of {', '.join(LAYOUTS)}, got {fmt!r}")
    _, col_order, col_inner = LAYOUTS[fmt]
    return unpack(z, rows, cols, col_order, col_inner)


def nd_to_nz(x, c0: int | None = None) -> np.ndarray:
    """(M, N) -> NZ (N1, M1, 16, N0): column-major order of 16 x N0 fractals, each row-major."""
    return to_fractal(x, "NZ", c0)


def nz_to_nd(z, m: int, n: int) -> np.ndarray:
    """NZ (N1, M1, 16, N0) -> (m, n)."""
    return from_fractal(z, "NZ", m, n)


def nd_to_zz(x, c0: int | None = None) -> np.ndarray:
    """The left matrix A (M, K) as L0A holds it: ZZ (M1, K1, 16, K0)."""
    return to_fractal(x, "ZZ", c0)


def zz_to_nd(z, m: int, k: int) -> np.ndarray:
    return from_fractal(z, "ZZ", m, k)


def nd_to_zn(x, c0: int | None = None) -> np.ndarray:
    """The right matrix B (K, N) as L0B holds it: ZN (K1, N1, 16, K0), K0 x 16 fractals in
    row-major order, each stored column by column."""
    return to_fractal(x, "ZN", c0)


def zn_to_nd(z, k: int, n: int) -> np.ndarray:
    return from_fractal(z, "ZN", k, n)


# -- feature maps and conv weights ------------------------------------------------------------
def nchw_to_nc1hwc0(x, c0: int | None = None) -> np.ndarray:
    """(N, C, H, W) -> (N, C1, H, W, C0), C0 = 32 bytes of elements (16 fp16, 32 int8), the
    channels padded with zeros to C1 * C0."""
    x = np.asarray(x)
    if x.ndim != 4:
        raise ShapeError(f"nchw_to_nc1hwc0: expected (N, C, H, W), got shape {x.shape}")
    c0 = c0_of(x.dtype) if c0 is None else int(c0)
    n, c, h, w = x.shape
    c1 = ceil_div(c, c0)
    pad = np.zeros((n, c1 * c0, h, w), dtype=x.dtype)
    pad[:, :c] = x
    return np.ascontiguousarray(pad.reshape(n, c1, c0, h, w).transpose(0, 1, 3, 4, 2))


def nc1hwc0_to_nchw(x, c: int) -> np.ndarray:
    """(N, C1, H, W, C0) -> (N, c, H, W)."""
    x = np.asarray(x)
    if x.ndim != 5:
        raise ShapeError(f"nc1hwc0_to_nchw: expected (N, C1, H, W, C0), got shape {x.shape}")
    n, c1, h, w, c0 = x.shape
    if c > c1 * c0:
        raise ShapeError(f"nc1hwc0_to_nchw: {c} channels asked, the array holds {c1 * c0}")
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, c1 * c0, h, w)[:, :c])


def nchw_to_fractal_z(w, c0: int | None = None) -> np.ndarray:
    """Conv weights (Cout, Cin, H, W) -> FRACTAL_Z (C1*H*W, N1, 16, C0):
    out[(c1*H + h)*W + x, n1, n0, j] = w[n1*16 + n0, c1*C0 + j, h, x] (0 past the edges)."""
    w = np.asarray(w)
    if w.ndim != 4:
        raise ShapeError(f"nchw_to_fractal_z: expected weights (Cout, Cin, H, W), got shape {w.shape}")
    c0 = c0_of(w.dtype) if c0 is None else int(c0)
    cout, cin, h, wd = w.shape
    c1, n1 = ceil_div(cin, c0), ceil_div(cout, FRACTAL_ROWS)
    pad = np.zeros((n1 * FRACTAL_ROWS, c1 * c0, h, wd), dtype=w.dtype)
    pad[:cout, :cin] = w
    t = pad.reshape(n1, FRACTAL_ROWS, c1, c0, h, wd).transpose(2, 4, 5, 0, 1, 3)
    return np.ascontiguousarray(t.reshape(c1 * h * wd, n1, FRACTAL_ROWS, c0))


def fractal_z_to_nchw(z, cout: int, cin: int, h: int, w: int) -> np.ndarray:
    """FRACTAL_Z (C1*H*W, N1, 16, C0) -> weights (cout, cin, h, w)."""
    z = np.asarray(z)
    if z.ndim != 4:
        raise ShapeError(f"fractal_z_to_nchw: expected (C1*H*W, N1, 16, C0), got shape {z.shape}")
    chw, n1, n0, c0 = z.shape
    if chw % (h * w):
        raise ShapeError(f"fractal_z_to_nchw: first axis {chw} is not a multiple of H*W = {h * w}")
    c1 = chw // (h * w)
    if cout > n1 * n0 or cin > c1 * c0:
        raise ShapeError(f"fractal_z_to_nchw: asked for ({cout}, {cin}) channels, the array holds "
                         f"({n1 * n0}, {c1 * c0})")
    t = z.reshape(c1, h, w, n1, n0, c0).transpose(3, 4, 0, 5, 1, 2).reshape(n1 * n0, c1 * c0, h, w)
    return np.ascontiguousarray(t[:cout, :cin])


__all__ = ["FRACTAL_ROWS", "FRACTAL_BYTES", "L0C_C0", "LAYOUTS", "c0_of", "fractal_shape", "pack",
           "unpack", "pack_numpy", "unpack_numpy", "pack_into", "unpack_into", "pack_into_numpy",
           "unpack_into_numpy", "to_fractal", "from_fractal", "nd_to_nz",
           "nz_to_nd", "nd_to_zz", "zz_to_nd", "nd_to_zn", "zn_to_nd", "nchw_to_nc1hwc0",
           "nc1hwc0_to_nchw", "nchw_to_fractal_z", "fractal_z_to_nchw"]
