"""The cube kernels' epilogue on the vector unit: how a block tile leaves L0C on a chip with no
FixPipe (the 910 and 310, ``[cube] output_path`` "ub" / "ub_convert"; catlass's BlockEpilogue,
GE's UB fusion).

What a FixPipe chip does on the way from L0C to GM, per output column j,

    y = (acc + bias[j]) * scale[j] + offset[j];  y = max(y, 0) if relu;  cast to the output dtype

(:class:`Epilogue` says which parts a problem has), a coupled chip does in UB, a tile at a time:

1. **move** the tile's fractals L0C -> UB on the vector pipe (:func:`npulab.lang.data_copy_l0c2ub`;
   on a "ub_convert" chip with no per-channel vector the cast, one dequantisation scale and ReLU
   ride on this move, and nothing else runs);
2. **vector work** on the tile, NZ as it arrived: the per-channel vectors per fractal column (16
   columns), each vector laid out once per N tile as 4 copies of a column's 16 values, one 256-byte
   repeat, so that a fractal column of ``rows`` rows is ``rows / 4`` full repeats (UB -> UB strided
   copies build it); the int32 -> fp32 cast of a dequantisation; the fp32 -> fp16 cast into the
   output buffer; ReLU on the output;
3. **write** it out with MTE3, NZ -> ND by strided copies (:func:`npulab.lang.data_copy_nz2nd`).

A block tile of 128 x 256 fp32 is 128 KiB: it goes through UB in *pieces* of whole fractal columns,
as many as fit (:func:`ub_plan` picks them from the chip's UB; the tilings count that UB in their
buffer demand). The output buffer has two slots, so MTE3 writes one piece while the vector unit
works on the next, and the tile's L0C slot goes back to the cube after its last move, so the cube
computes the next block tile meanwhile (two L0C slots). One stage slot serves the vector unit when
a separate output buffer exists (the vector pipe runs in order); when the stage itself is written
out (fp32 or int32 output, or a conversion on the move) it has two.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arch import FRACTAL_ROWS, ceil_div, round_up
from ..chips import ChipSpec
from ..lang import (VECCALC, VECIN, VECOUT, Queue, TBuf, cast, data_copy_l0c2ub, data_copy_nz2nd,
                    data_copy_pad, data_copy_strided, relu)
from ..lang.drain_ub import FRACTAL
from ..lang.vector import muls
from ..lang.vector_rows import add_per_col, fused_mul_add_per_col, mul_per_col

VECTOR_NAMES = ("bias", "scale", "offset")   # the per-channel vectors, in the order they apply
#: a per-channel vector in UB: each fractal column's 16 values 4 times, one 256-byte repeat of fp32
TILED = 4 * FRACTAL_ROWS


@dataclass(frozen=True)
class Epilogue:
    """What a cube kernel does to its accumulator on the way out (the formula above): ``acc`` and
    ``out`` dtype names, the per-channel ``vectors`` it reads (a subset of VECTOR_NAMES: bias in
    the accumulator's dtype, scale and offset fp32), ``scale`` one scale for every column (None:
    none), ``relu``."""
    acc: str
    out: str
    vectors: tuple = ()
    scale: float | None = None
    relu: bool = False

    def moves_converted(self, chip: ChipSpec) -> bool:
        """Whether the L0C -> UB move itself gives the final values (a "ub_convert" chip, no
        per-channel vector, and a conversion the move makes: fp32 -> fp16, int32 -> fp16 by one
        scale, or the dtype kept with at most ReLU)."""
        if chip.cube.output_path != "ub_convert" or self.vectors:
            return False
        pair = (self.acc, self.out)
        return (pair == ("float32", "float16") and self.scale is None) or \
            (pair == ("int32", "float16") and self.scale is not None) or \
            (self.acc == self.out and self.scale is None)

    def steps(self, chip: ChipSpec) -> list[str]:
        """The vector-pipe steps of one piece, in order (the kernel runs them, the estimates cost
        them): "move", then "bias", "to_f32", "scale_offset" / "scale" / "scale_tensor" /
        "offset", "cast", "relu" as the epilogue needs."""
        if self.moves_converted(chip):
            return ["move"]
        out = ["move"]
        if "bias" in self.vectors:
            out.append("bias")
        if self.acc == "int32" and self.out != "int32":
            out.append("to_f32")
        if "scale" in self.vectors and "offset" in self.vectors:
            out.append("scale_offset")
        else:
            if "scale" in self.vectors:
                out.append("scale")
            elif self.scale is not None:
                out.append("scale_tensor")
            if "offset" in self.vectors:
                out.append("offset")
        if np.dtype(self.out).itemsize < 4:
            out.append("cast")
        if self.relu:
            out.append("relu")
        return out


@dataclass(frozen=True)
class UbPlan:
    """How a block tile of ``rows`` x ``cols`` (both whole fractals) goes through UB: pieces of
    ``piece`` fractal columns, a stage buffer of ``stage_slots`` slots in ``stage_dtype`` and an
    output buffer of ``out_slots`` slots (0: the stage is written out); ``converted``: the move
    converts on the way (:meth:`Epilogue.moves_converted`)."""
    epilogue: Epilogue
    rows: int
    cols: int
    piece: int
    stage_dtype: str
    stage_slots: int
    out_slots: int
    steps: tuple
    converted: bool

    @property
    def piece_elems(self) -> int:
        return self.rows * self.piece * FRACTAL_ROWS

    def ub_demand(self) -> tuple[int, str]:
        """(bytes, how the figure is made) of the UB the epilogue takes."""
        e = self.epilogue
        stage = self.piece_elems * np.dtype(self.stage_dtype).itemsize
        out = self.piece_elems * np.dtype(e.out).itemsize
        vec = len(e.vectors) * (round_up(self.cols * 4, 32) + ceil_div(self.cols, FRACTAL_ROWS) * TILED * 4)
        how = (f"{self.stage_slots} x piece {self.rows}x{self.piece * FRACTAL_ROWS} {self.stage_dtype}"
               + (f" + {self.out_slots} x {e.out}" if self.out_slots else "")
               + (f" + {len(e.vectors)} vectors as laid out" if e.vectors else ""))
        return self.stage_slots * stage + self.out_slots * out + vec, how

    def vector_cycles(self, chip: ChipSpec, rows: int, cols: int) -> float:
        """Cycles the vector pipe is busy with a rows x cols tile (whole fractals): each step
        touches every element once at 256 bytes a cycle (S2), the wider of its dtypes counted."""
        elems = rows * cols
        out_item = np.dtype(self.epilogue.out).itemsize
        return sum(elems * (out_item if s == "relu" else 4) for s in self.steps) / chip.vector.bytes_per_cycle


def ub_plan(epi: Epilogue, tile_m: int, tile_n: int, chip: ChipSpec) -> UbPlan | None:
    """The plan of a tile_m x tile_n block tile on ``chip``: None when the chip drains through
    FixPipe; else the widest pieces (whole fractal columns, evened out over the tile) whose UB
    demand fits the chip's UB, or one-column pieces when none does (the demand then says so)."""
    if chip.cube.output_path == "fixpipe":
        return None
    rows, cols = round_up(tile_m, FRACTAL_ROWS), round_up(tile_n, FRACTAL_ROWS)
    converted = epi.moves_converted(chip)
    separate = not converted and np.dtype(epi.out).itemsize < 4      # a cast into its own buffer
    n1 = cols // FRACTAL_ROWS

    def plan(piece):
        return UbPlan(epi, rows, cols, piece, epi.out if converted else epi.acc, 1 if separate else 2,
                      2 if separate else 0, tuple(epi.steps(chip)), converted)
    piece = next((p for p in range(n1, 0, -1) if plan(p).ub_demand()[0] <= chip.buffer_bytes("UB")), 1)
    return plan(ceil_div(n1, ceil_div(n1, piece)))


def ub_demand(plan: UbPlan | None) -> dict:
    """{"UB": (bytes, how)} of a plan, for a tiling's buffer demand ({} on a FixPipe chip)."""
    return {} if plan is None else {"UB": plan.ub_demand()}


class UbEpilogue:
    """The block epilogue on the vector unit (see the module docstring): ``load`` the per-channel
    vectors of an N tile, then ``epilogue(y_gm, stride, m, n, handle)`` per block tile."""

    def __init__(self, pipe, plan: UbPlan, queue: Queue):
        self.plan, self.c = plan, queue
        e = plan.epilogue
        self.acc, self.out = np.dtype(e.acc), np.dtype(e.out)
        stage_dt = np.dtype(plan.stage_dtype)
        piece_bytes = plan.piece_elems * stage_dt.itemsize
        if plan.out_slots:
            self.stage = TBuf(VECCALC, "c_ub")              # the vector unit's alone
            pipe.init_buffer(self.stage, piece_bytes)
            self.y = Queue(VECOUT, "y_ub")
            pipe.init_buffer(self.y, plan.out_slots, plan.piece_elems * self.out.itemsize)
        else:
            self.stage = Queue(VECOUT, "c_ub")              # written out as it is
            pipe.init_buffer(self.stage, plan.stage_slots, piece_bytes)
        self.key, self.tiled = None, {}
        if e.vectors:
            self.raw_n = plan.cols                          # one vector (fp32 / int32), whole fractals
            self.raw = Queue(VECIN, "vec_ub")
            pipe.init_buffer(self.raw, 1, len(e.vectors) * self.raw_n * 4)
            self.laid = TBuf(VECCALC, "vec_tiled_ub")
            pipe.init_buffer(self.laid, len(e.vectors) * (plan.cols // FRACTAL_ROWS) * TILED * 4)

    def _dtype(self, name: str) -> np.dtype:
        return self.acc if name == "bias" else np.dtype(np.float32)

    def load(self, vectors: dict, key, n: int):
        """Copy the per-channel vectors of an N tile (``vectors``: name -> GM tensor at the tile's
        first column; ``n`` columns) into UB (MTE2) and lay each out for the fractal columns (UB ->
        UB, vector pipe); consecutive tiles of one ``key`` reuse them. Returns the handle the
        epilogue call takes."""
        names = self.plan.epilogue.vectors
        if not names or key == self.key:
            return self.tiled
        raw = self.raw.alloc_tensor(np.float32)
        n1 = ceil_div(n, FRACTAL_ROWS)
        for j, name in enumerate(names):
            data_copy_pad(raw.reinterpret_cast(self._dtype(name))[j * self.raw_n:], vectors[name], n)
        self.raw.enque(raw)
        raw = self.raw.deque()
        width = (self.plan.cols // FRACTAL_ROWS) * TILED
        for j, name in enumerate(names):
            dt = self._dtype(name)
            src = raw.reinterpret_cast(dt)[j * self.raw_n:]
            laid = self.laid.get(dt)[j * width:]
            for rep in range(TILED // FRACTAL_ROWS):     # fractal column f's 16 values, 4 times
                data_copy_strided(laid[rep * FRACTAL_ROWS:], src, n1, FRACTAL_ROWS, FRACTAL_ROWS, TILED)
            self.tiled[name] = laid
        self.raw.free_tensor(raw)
        self.key = key
        return self.tiled

    def _per_column(self, step: str, z, vecs: dict, f0: int, cols: int, rows: int) -> None:
        """One per-channel step over the piece's fractal columns f0 .. f0 + cols - 1 (NZ in ``z``)."""
        reps = rows * FRACTAL_ROWS // TILED
        for f in range(cols):
            zf = z[f * rows * FRACTAL_ROWS:]
            at = (f0 + f) * TILED
            if step == "bias":
                add_per_col(zf, zf, vecs["bias"][at:], reps, TILED, TILED)
            elif step == "scale":
                mul_per_col(zf, zf, vecs["scale"][at:], reps, TILED, TILED)
            elif step == "offset":
                add_per_col(zf, zf, vecs["offset"][at:], reps, TILED, TILED)
            else:                                           # scale_offset: z = scale * z + offset
                fused_mul_add_per_col(zf, vecs["scale"][at:], vecs["offset"][at:], reps, TILED, TILED)

    def __call__(self, y_gm, stride: int, m: int, n: int, vecs) -> None:
        """Drain the next block tile of the L0C queue (``m`` x ``n`` of it to ``y_gm``, row stride
        ``stride``) piece by piece."""
        plan, e = self.plan, self.plan.epilogue
        rows = round_up(m, FRACTAL_ROWS)
        c = self.c.deque()
        n1 = ceil_div(n, FRACTAL_ROWS)
        for f0 in range(0, n1, plan.piece):
            cols = min(plan.piece, n1 - f0)
            count = rows * cols * FRACTAL_ROWS
            stage_dt = np.dtype(plan.stage_dtype)
            z = self.stage.get(stage_dt) if plan.out_slots else self.stage.alloc_tensor(stage_dt)
            src = c[f0 * rows * FRACTAL_ROWS:]
            if plan.converted:
                data_copy_l0c2ub(z, src, count // FRACTAL, relu=e.relu, deq_scale=e.scale)
            else:
                data_copy_l0c2ub(z, src, count // FRACTAL)
            out = z
            for step in plan.steps[1:]:
                if step in ("bias", "scale", "offset", "scale_offset"):
                    self._per_column(step, z, vecs, f0, cols, rows)
                elif step == "to_f32":
                    z = z.reinterpret_cast(np.float32)
                    cast(z, z.reinterpret_cast(np.int32), count=count)
                    out = z
                elif step == "scale_tensor":
                    muls(z, z, float(e.scale), count)
                elif step == "cast":
                    out = self.y.alloc_tensor(self.out)
                    cast(out, z, count=count)
                else:                                       # relu, on what goes out
                    relu(out, out, count)
            queue = self.y if plan.out_slots else self.stage
            queue.enque(out)
            out = queue.deque()
            data_copy_nz2nd(y_gm[f0 * FRACTAL_ROWS:], out, m, min(n - f0 * FRACTAL_ROWS, cols * FRACTAL_ROWS),
                            dst_stride=stride, src_rows=rows)
            queue.free_tensor(out)
        self.c.free_tensor(c)

    def finish(self) -> None:
        """Nothing is left in flight at block end (the queues' flags drain with the pipe)."""


__all__ = ["Epilogue", "UbPlan", "ub_plan", "ub_demand", "UbEpilogue", "VECTOR_NAMES", "TILED"]
