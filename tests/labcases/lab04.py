"""Lab 04's exercise cases (see labcases/__init__.py), the references written from the lab's
specs: the speed-up predicted from the teaching chip's figures, the colleague's short queue,
the slots SiLU and Mish need, SiLU with those slots in the same UB, and the gate's challenge."""
from __future__ import annotations

import npulab
from npulab.kernels.examples.silu import SiluStages
from npulab.kernels.examples.swiglu_gate import FIRST_TILE, GateFirst, GateStages
from npulab.lang import VECIN, VECOUT, Queue, TPipe, get_block_idx

TEACH = npulab.get_chip("teach")
N = 65536


def _speedup(tile, n_in, n_out, cycles_per_repeat, instructions, gm_shared=True):
    """Cycles with one slot / with two, per tile from the chip file (fill and drain counted):
    one slot pays MTE2, the vector unit and MTE3 in turn, two the slowest of them or GM."""
    p, v, b = TEACH.pipes, TEACH.vector, tile * 2
    mte2 = n_in * b / p.mte2_bytes_per_cycle + p.mte2_startup_cycles
    mte3 = n_out * b / p.mte3_bytes_per_cycle + p.mte3_startup_cycles
    vec = cycles_per_repeat * b / v.repeat_bytes + instructions * v.startup_cycles
    share = TEACH.memory.gm_bytes_per_cycle / TEACH.ai_cores
    pace = max((n_in + n_out) * b / share, vec) if gm_shared else max(mte2, vec, mte3)
    tiles = N / TEACH.ai_cores / tile
    return tiles * (mte2 + vec + mte3) / (tiles * pace + mte2 + mte3)


def _predictions(gm_shared=True):
    silu_tile = TEACH.buffers.ub // 4 // 2                  # 2 queues x 2 slots, fp16
    add_tile = TEACH.buffers.ub // 6 // 32 * 32 // 2        # 3 queues x 2 slots
    return {"SiLU": _speedup(silu_tile, 1, 1, 10, 4, gm_shared), "Add": _speedup(add_tile, 2, 1, 1, 1, gm_shared)}


def _silu(slots=3, tile_div=6, tile_of_slot=1):
    """SiLU with ``slots`` slots per queue of UB / ``tile_div`` bytes; the stages work on
    1 / ``tile_of_slot`` of a slot."""
    class Silu(SiluStages):
        def __init__(self, x, z, tiling):
            start = get_block_idx() * tiling.block_factor
            self.length = min(tiling.block_factor, tiling.total - start)
            self.x_gm, self.z_gm = x[start:start + self.length], z[start:start + self.length]
            self.dtype = x.dtype
            slot = tiling.ub_bytes // tile_div // 32 * 32 // 2
            self.tile = slot // tile_of_slot
            self.pipe = TPipe()
            self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
            self.pipe.init_buffer(self.in_x, slots, slot * 2)
            self.pipe.init_buffer(self.out_z, slots, slot * 2)
    return Silu


class _SiluBlank(SiluStages):
    def __init__(self, x, z, tiling):
        ...


def _gate(slots=2, tile=None):
    """The gate with ``slots`` slots in each queue of ``tile`` elements (None: the largest
    three queues x ``slots`` fit in the tiling's UB)."""
    class Gate(GateStages):
        def __init__(self, a, b, z, tiling):
            start = get_block_idx() * tiling.block_factor
            self.length = min(tiling.block_factor, tiling.total - start)
            self.a_gm, self.b_gm = a[start:start + self.length], b[start:start + self.length]
            self.z_gm = z[start:start + self.length]
            self.dtype = a.dtype
            self.tile = tile or tiling.ub_bytes // (3 * slots) // 32 * 32 // 2
            self.pipe = TPipe()
            self.in_a, self.in_b, self.out_z = Queue(VECIN, "in_a"), Queue(VECIN, "in_b"), Queue(VECOUT, "out_z")
            for q in (self.in_a, self.in_b, self.out_z):
                self.pipe.init_buffer(q, slots, self.tile * 2)
    return Gate


class _GateWrongSlice(GateStages):
    """Every block reads the first block's part of GM."""

    def __init__(self, a, b, z, tiling):
        self.length = min(tiling.block_factor, tiling.total)
        self.a_gm, self.b_gm = a[:self.length], b[:self.length]
        start = get_block_idx() * tiling.block_factor
        self.z_gm = z[start:start + self.length]
        self.dtype = a.dtype
        self.tile = tiling.ub_bytes // 6 // 32 * 32 // 2
        self.pipe = TPipe()
        self.in_a, self.in_b, self.out_z = Queue(VECIN, "in_a"), Queue(VECIN, "in_b"), Queue(VECOUT, "out_z")
        for q in (self.in_a, self.in_b, self.out_z):
            self.pipe.init_buffer(q, 2, self.tile * 2)


class _GateBlank(GateStages):
    def __init__(self, a, b, z, tiling):
        ...


CASES: dict = {
    "04.predict_speedup": (_predictions(), [({"SiLU": 2, "Add": 2}, "twice as fast"),
                                            (_predictions(gm_shared=False), "share its part of GM"),
                                            ({"SiLU": 1.1, "Add": 1.0}, "too pessimistic"),
                                            ({"SiLU": True, "Add": 1.3}, "two positive numbers"),
                                            ([2.0, 1.3], "dict")], ...),
    "04.stall_cause": (("out_z", "MTE3"), [(("in_a", "VECTOR"), "read its row"),
                                           (("out_z", "VECTOR"), "which pipe empties"),
                                           (("in_b", "MTE2"), "no pipe's row"), (("out_z", "MTE2"), "copy_out"),
                                           ("out_z", "pair")], ...),
    "04.slots_needed": ({"SiLU": 3, "Mish": 2}, [({"SiLU": 2, "Mish": 2}, "How many tiles long"),
                                                 ({"SiLU": 3, "Mish": 3}, "cannot make that pipe faster"),
                                                 ({"SiLU": 1, "Mish": 2}, "one slot"),
                                                 ({"SiLU": 3.5, "Mish": 2}, "whole numbers"),
                                                 ({"SiLU": 3}, "whole numbers")], ...),
    "04.silu_slots": (_silu(), [(_silu(2, 4), "fewer slots than exercise 3"), (_silu(4, 8), "more slots than pay"),
                                (_silu(3, 4), "must fit the tiling's UB"), (_silu(3, 8), "UB / 6"),
                                (_silu(3, 6, 5), "self.tile"), (3, "your kernel class")], _SiluBlank),
    "04.gate_challenge": (_gate(), [(GateFirst, "every queue needs two"), (_gate(2, FIRST_TILE), "How large a tile"),
                                    (_gate(1), "every queue needs two"), (_GateWrongSlice, "z is not silu(a) * b"),
                                    (_gate(2, 4096), "must fit"), (GateFirst.__init__, "your kernel class")], _GateBlank),
}
