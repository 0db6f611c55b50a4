"""Host side of the fused matmul: the cube's tiles (the matmul's own tiling function), the GM
workspace the AIC hands its block tiles over in, and how each AIV takes its half of a tile
through UB.

* **workspace**: ``WS_SLOTS`` block tiles per AI core, fp16, each TILE_M rows of ``ws_stride``
  elements (TILE_N rounded up to a 32-byte block): the AIC fills slot j % 2 while the AIVs read
  the other (double buffering on the workspace). A few MB at most, so it stays in L2.
* **epilogue**: AIV s of an AI core takes rows [s * half, (s + 1) * half) of each block tile,
  ``half = ceil(TILE_M / 2)``, in UB chunks of ``chunk_rows`` rows: an input and an output queue
  with ``buffer_num`` slots and the activation's scratch tiles, as large as the UB holds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div, round_up
from ...chips import get_chip
from ...errors import ShapeError
from .. import search
from ..activation import ActivationFormula
from ..matmul import MatmulTiling, can_implement as matmul_can_implement, make_tiling
from ..tiling_data import Tiling
from .problem import FusedMatmulProblem

WS_SLOTS = 2            # workspace tiles per AI core: the AIC fills one while the AIVs read the other
BUFFER_NUM = 2          # UB queue slots of the epilogue (CopyIn of chunk c + 1 during chunk c)
SUB_BLOCKS = 2          # AIVs per AI core (KERNEL_TYPE_MIX_AIC_1_2)


@dataclass(frozen=True)
class FusedMatmulTiling(Tiling):
    """The TilingData of the fused matmul: the problem, the cube's tiling and the epilogue's."""
    problem: FusedMatmulProblem
    mm: MatmulTiling
    ws_stride: int          # elements from one workspace row to the next (TILE_N, whole blocks)
    half: int               # rows of a block tile each AIV takes
    chunk_rows: int         # rows of one UB chunk
    buffer_num: int = BUFFER_NUM

    @property
    def block_dim(self) -> int:
        return self.mm.tiles.block_dim

    @property
    def slot_elems(self) -> int:
        return self.mm.tiles.tile_m * self.ws_stride

    @property
    def workspace_elems(self) -> int:
        """fp16 elements of the GM workspace: WS_SLOTS tiles for every AI core."""
        return self.block_dim * WS_SLOTS * self.slot_elems

    @property
    def workspace_bytes(self) -> int:
        """Bytes of GM workspace the kernel needs beside its operands, the figure a graph's
        memory plan reserves for the task while it runs (the op's workspace size in GE)."""
        return self.workspace_elems * np.dtype(np.float16).itemsize


def ub_demand(activation: str, chunk_rows: int, ws_stride: int, buffer_num: int, repeat_bytes: int) -> int:
    """UB bytes an AIV needs: input and output queue slots of fp16 chunks, and the formula's."""
    elems = chunk_rows * ws_stride
    return 2 * buffer_num * elems * 2 + ActivationFormula.ub_bytes(activation, np.float16, elems, repeat_bytes)


def can_implement(t: FusedMatmulTiling, chip=DEFAULT_CHIP) -> None:
    """ShapeError unless ``t`` runs on ``chip``: a split chip, whole 32-byte output rows, the
    cube's tiles fitting (the matmul's own check) and the epilogue's chunk fitting the UB."""
    chip = get_chip(chip)
    p = t.problem
    if chip.arch != "split":
        raise ShapeError(f"fused_matmul: a mix kernel needs a split chip (AIC and AIV cores, 910b); chip "
                         f"'{chip.name}' couples cube and vector in one core. Run ops.matmul, then ops.gelu.")
    if (p.n * 2) % BLOCK_BYTES:
        raise ShapeError(f"fused_matmul: N = {p.n} fp16 values a row are {p.n * 2} B; the epilogue copies "
                         f"whole 32-byte blocks of a row: N must be a multiple of {BLOCK_BYTES // 2}")
    matmul_can_implement(t.mm, chip)
    need = ub_demand(p.activation, t.chunk_rows, t.ws_stride, t.buffer_num, chip.vector.repeat_bytes)
    if need > chip.buffers.ub:
        raise ShapeError(f"fused_matmul: an epilogue chunk of {t.chunk_rows} rows x {t.ws_stride} takes "
                         f"{need:,} B of UB, and chip '{chip.name}' has {chip.buffers.ub:,}: lower chunk_rows")


def make_fused_tiling(problem: FusedMatmulProblem, chip=DEFAULT_CHIP, tiling=None,
                      chunk_rows: int | None = None) -> FusedMatmulTiling:
    """The fused matmul's tiling: the cube's tiles from ``tiling`` (a MatmulTiling of the same
    GEMM, a recipe name) or the matmul's own default (tuned, if the GEMM was tuned), the
    workspace rows from TILE_N, and UB chunks as large as the UB holds (or ``chunk_rows``)."""
    chip = get_chip(chip)
    mp = problem.matmul
    if tiling is None:
        mm = search.pick(mp, chip)
    elif isinstance(tiling, MatmulTiling):
        mm = MatmulTiling(mp, tiling.tiles, tiling.name)
    else:
        mm = make_tiling(mp, chip, tiling)
    s = mm.tiles
    stride = round_up(s.tile_n, BLOCK_BYTES // 2)
    half = ceil_div(s.tile_m, SUB_BLOCKS)
    if chunk_rows is None:
        chunk_rows = half
        while chunk_rows > 1 and ub_demand(problem.activation, chunk_rows, stride, BUFFER_NUM,
                                           chip.vector.repeat_bytes) > chip.buffers.ub:
            chunk_rows = ceil_div(chunk_rows, 2)
    elif not 1 <= int(chunk_rows) <= half:
        raise ShapeError(f"fused_matmul: chunk_rows={chunk_rows} must be 1 to {half} (half a block tile)")
    t = FusedMatmulTiling(problem, mm, stride, half, int(chunk_rows))
    can_implement(t, chip)
    return t


__all__ = ["WS_SLOTS", "BUFFER_NUM", "SUB_BLOCKS", "FusedMatmulTiling", "ub_demand", "can_implement",
           "make_fused_tiling"]
