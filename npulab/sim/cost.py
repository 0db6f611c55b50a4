"""The cost model: what each instruction costs, in cycles and picojoules, from the chip's figures.

One home for every cost the simulator charges and every bound the tiling searches, benches,
plots and labs compare with:

* **copies** (:meth:`CostModel.copy`): a DMA occupies its pipe for bytes / rate cycles (a copy
  to or from GM at most at its core's share of GM) and is then in flight for the pipe's start-up
  latency: back-to-back copies of one pipe pay the latency once (:mod:`npulab.sim.timeline`).
  What a GM copy finally costs depends on every other copy of the launch; :mod:`npulab.sim.gm`
  settles it when the launch finishes;
* **the cube** (:func:`mmad_cost`): one 16 x 16 x K0 fractal step at a time, K0 = 32 bytes of the
  input dtype; fp32 at half the fp16 MAC rate (chosen);
* **the vector unit** (:meth:`CostModel.vector`): repeats of 256 bytes, the instruction's
  start-up as latency; on the coupled chips it also moves the cube's result out of L0C
  (:meth:`CostModel.l0c_to_ub`);
* **energy and power**: per byte at each level a copy touches, per MAC and per operand byte an
  mmad streams, per vector byte; the chip's power with every unit busy (:func:`full_load_watts`)
  and what a launch drew (:func:`trace_watts`);
* **the roofline** (:func:`attainable`, :func:`ridge`, :func:`peak_tflops`) and the cube's lower
  bound (:func:`lower_bound_cycles`), which utilizations are measured against.
"""
from __future__ import annotations

import math

import numpy as np

from ..arch import FRACTAL_ROWS, c0_of, ceil_div
from ..chips import ChipSpec, get_chip
from ..errors import ArgumentError
from .isa import Pipe

#: chosen: fp32 runs 16 x 16 x 8 fractals at half the fp16 MAC rate
FP32_RATE = 0.5
#: FACTS (Pipes): two back-to-back mmads into the same L0C need a PIPE_M barrier when
#: (m/16)(n/16) < 10: the cube walks the output fractals for each K step, so an mmad reads a
#: fractal as many steps after the one before last wrote it as the tile has fractals, and
#: under ten the sum is not in L0C yet (the cube's ``drain_cycles``); from this many fractals
#: on, mmads pipeline
PIPELINED_FRACTALS = 10
#: the pipes that move bytes, and the chip-file fields of their rate and start-up
COPY_PIPES = {Pipe.MTE2: "mte2", Pipe.MTE1: "mte1", Pipe.MTE3: "mte3", Pipe.FIX: "fix"}


def copy_rates(chip: ChipSpec) -> dict:
    """{pipe: (bytes a cycle, start-up cycles)} of the pipes that move bytes."""
    p = chip.pipes
    return {pipe: (getattr(p, f"{name}_bytes_per_cycle"), getattr(p, f"{name}_startup_cycles"))
            for pipe, name in COPY_PIPES.items()}


class CostModel:
    """The costs of one launch's instructions on ``chip``, with ``active_cores`` of
    ``core_type`` sharing GM (what :class:`~npulab.sim.device.Device` charges at issue)."""

    def __init__(self, chip: ChipSpec, active_cores: int, core_type: str = "aic"):
        self.chip = chip
        self.rates = copy_rates(chip)
        self.gm_share = chip.gm_share_bytes_per_cycle(active_cores, core_type)
        vec = chip.vector
        self.repeat_cycles = max(1, vec.repeat_bytes // vec.bytes_per_cycle)
        self.vector_lat = vec.startup_cycles

    def copy(self, pipe: Pipe, nbytes: int, touches_gm: bool) -> tuple[int, int]:
        """``(dur, lat)`` of one copy of ``nbytes`` on ``pipe``: bytes / rate cycles on the pipe
        (at most the core's GM share when it reads or writes GM), then the pipe's start-up in
        flight. For a GM copy ``dur`` is the estimate at issue (:mod:`npulab.sim.gm` settles it)."""
        rate, startup = self.rates[pipe]
        if touches_gm and self.gm_share < rate:
            rate = self.gm_share
        return int(ceil_div(nbytes, rate)), int(startup)

    def vector(self, repeats: int, cycles_per_repeat: int = 1) -> tuple[int, int]:
        """``(dur, lat)`` of one vector instruction of ``repeats`` repeats."""
        return repeats * cycles_per_repeat * self.repeat_cycles, self.vector_lat

    def ub_copy(self, nbytes: int) -> tuple[int, int]:
        """``(dur, lat)`` of a UB -> UB copy: the vector pipe at its byte rate."""
        return ceil_div(nbytes, self.chip.vector.bytes_per_cycle), self.vector_lat

    def l0c_to_ub(self, nbytes: int) -> tuple[int, int]:
        """``(dur, lat)`` of the coupled chips' L0C -> UB move (DataCopy CO1 -> CO2) of ``nbytes``
        read from L0C: it runs on the vector pipe (FACTS, Pipes) at the L0C drain rate,
        ``pipes.l0c_to_ub_bytes_per_cycle`` (S11: 256 B a cycle), with the vector start-up as
        latency like any vector instruction (chosen: no public figure of its own)."""
        return int(ceil_div(nbytes, self.chip.pipes.l0c_to_ub_bytes_per_cycle)), self.vector_lat

    def l1_to_l0(self, nbytes: int, to_l0b: bool) -> tuple[int, int]:
        """``(dur, lat)`` of an MTE1 load of ``nbytes`` from L1 into L0A (``pipes.mte1_bytes_per_cycle``)
        or L0B (``pipes.mte1_l0b_bytes_per_cycle``; S11: 512 and 256 B a cycle on the A2), alone on
        L1's port: :func:`npulab.sim.l1port.refine` slows it where MTE2 writes L1 meanwhile."""
        p = self.chip.pipes
        rate = p.mte1_l0b_bytes_per_cycle if to_l0b else p.mte1_bytes_per_cycle
        return int(ceil_div(nbytes, rate)), int(p.mte1_startup_cycles)


# -- the cube -----------------------------------------------------------------------------------
def macs_per_cycle(chip: ChipSpec, dtype) -> float:
    """The cube's MACs a cycle for an input dtype (fp32: :data:`FP32_RATE` of the fp16 rate)."""
    item = np.dtype(dtype).itemsize
    return {1: chip.cube.macs_per_cycle_int8, 2: chip.cube.macs_per_cycle_fp16,
            4: chip.cube.macs_per_cycle_fp16 * FP32_RATE}[item]


def mmad_cost(chip: ChipSpec, m: int, n: int, k: int, dtype) -> tuple[int, int]:
    """``(dur, lat)`` of one mmad: the cube is busy one fractal step per 16 x 16 x K0 block (K0 =
    32 bytes of the input dtype, a step taking 16*16*K0 / MACs-per-cycle cycles, 1 on the DaVinci
    cube), and the last step's sum is in L0C ``cube.drain_cycles`` later (``lat``, in flight).

    Before its first step the cube fills (``cube.fill_cycles``): the scheduler adds it when the
    cube was idle and hides it behind the mmad before when they come back to back
    (:mod:`npulab.sim.timeline`). An mmad that depends on the one before waits for its drain:
    the PIPE_M barrier that the kernel language inserts between back-to-back mmads into one
    L0C tile of fewer than :data:`PIPELINED_FRACTALS` fractals (:func:`npulab.lang.cube.mmad`),
    or the flag a drain of L0C waits on."""
    dt = np.dtype(dtype)
    k0 = c0_of(dt)
    fractals = ceil_div(m, FRACTAL_ROWS) * ceil_div(n, FRACTAL_ROWS)
    steps = fractals * ceil_div(k, k0)
    per_step = FRACTAL_ROWS * FRACTAL_ROWS * k0 / macs_per_cycle(chip, dt)
    return int(math.ceil(steps * per_step)), int(chip.cube.drain_cycles)


def mmad_cycles(chip: ChipSpec, m: int, n: int, k: int, dtype) -> int:
    """Cycles from one mmad's issue on an idle cube to its result: fill + steps + drain."""
    return chip.cube.fill_cycles + sum(mmad_cost(chip, m, n, k, dtype))


def mmad_chain_cycles(chip: ChipSpec, m: int, n: int, k: int, dtype, count: int) -> int:
    """Cycles of ``count`` mmads of one shape accumulating into one L0C tile back to back, from
    the first one's issue on an idle cube to the last result: one fill and one drain when the
    tile has at least :data:`PIPELINED_FRACTALS` fractals (they stream), else a PIPE_M barrier
    between each two, so each pays its fill and its drain."""
    busy, drain = mmad_cost(chip, m, n, k, dtype)
    fill = chip.cube.fill_cycles
    if ceil_div(m, FRACTAL_ROWS) * ceil_div(n, FRACTAL_ROWS) >= PIPELINED_FRACTALS:
        return fill + count * busy + drain
    return count * (fill + busy + drain)


def lower_bound_cycles(chip: "ChipSpec | str", macs: int, dtype) -> float:
    """MACs / (cores x MACs per cycle): no tiling of a cube kernel can beat it."""
    chip = get_chip(chip)
    return macs / (chip.ai_cores * macs_per_cycle(chip, dtype))


# -- energy -------------------------------------------------------------------------------------
def level_energy_pj(chip: ChipSpec, level: str) -> float:
    """Picojoules a byte costs at a memory level ("GM", "L1", "UB"; the L0 buffers otherwise)."""
    e = chip.energy
    return {"GM": e.gm_byte_pj, "L1": e.l1_byte_pj, "UB": e.ub_byte_pj}.get(level, e.l0_byte_pj)


def copy_energy_pj(chip: ChipSpec, src: str, dst: str, nbytes: int) -> float:
    """A copy of ``nbytes`` from level ``src`` to level ``dst``: read there, written here."""
    return (level_energy_pj(chip, src) + level_energy_pj(chip, dst)) * nbytes


def mac_energy_pj(chip: ChipSpec, dtype) -> float:
    """Picojoules one MAC of the cube costs (int8's rate for 1-byte operands, else fp16's)."""
    return chip.energy.mac_int8_pj if np.dtype(dtype).itemsize == 1 else chip.energy.mac_fp16_pj


def vector_energy_pj(chip: ChipSpec, nbytes: int, operands: int) -> float:
    """A vector instruction over ``nbytes`` that reads and writes ``operands`` tensors."""
    return chip.energy.vector_byte_pj * nbytes * operands


def mmad_energy_pj(chip: ChipSpec, m: int, n: int, k: int, dtype, init: bool = True) -> float:
    """One mmad: its MACs, plus the operands it streams through the cube. Each fractal step reads
    one A fractal from L0A and one B fractal from L0B (512 bytes each); each output fractal of
    16 x 16 accumulators (1 KB) is written to L0C once, and read first when the mmad accumulates
    (``init`` False)."""
    dt = np.dtype(dtype)
    k0 = c0_of(dt)
    m1, n1, k1 = ceil_div(m, FRACTAL_ROWS), ceil_div(n, FRACTAL_ROWS), ceil_div(k, k0)
    e = chip.energy
    operand = m1 * n1 * k1 * 2 * FRACTAL_ROWS * k0 * dt.itemsize
    out = m1 * n1 * FRACTAL_ROWS * FRACTAL_ROWS * 4 * (1 if init else 2)
    return mac_energy_pj(chip, dt) * m * n * k + e.l0_byte_pj * (operand + out)


# -- power --------------------------------------------------------------------------------------
def full_load_watts(chip: "ChipSpec | str") -> dict:
    """The chip's power with every unit at its peak rate at once, the most any kernel can draw
    under this energy model: {part: watts} and "total".

    The cube runs fractal steps back to back in the dtype that costs most, each step with a new
    output fractal (the most L0 traffic); MTE1 streams L1 -> L0 (at what L1's port leaves beside
    MTE2's writes into L1) and the vector unit reads two
    operands and writes one at their byte rates; MTE2, MTE3 and FixPipe fill and drain L1, UB and
    L0C at their pipe rates, while GM moves bytes at most at its bandwidth (every HBM byte at
    ``gm_byte_pj``) and L2 serves reads at most at its own (``l2_byte_pj`` each); static power on
    top. No kernel keeps everything busy at once, so a real one draws less: :func:`trace_watts`
    is what a Trace drew."""
    chip = get_chip(chip)
    e, p, mem = chip.energy, chip.pipes, chip.memory
    hz = chip.clock_ghz * 1e9 * 1e-12                # picojoules a cycle -> watts
    aic = chip.ai_cores
    aiv = chip.vector_cores if chip.arch == "split" else chip.ai_cores
    # one fractal step a cycle (16 x 16 x K0 MACs at the dtype's rate) with its operand traffic
    step = max(mmad_energy_pj(chip, FRACTAL_ROWS, FRACTAL_ROWS, c0_of(dt), dt, init=False)
               / max(1.0, FRACTAL_ROWS * FRACTAL_ROWS * c0_of(dt) / macs_per_cycle(chip, dt))
               for dt in (np.float16, np.int8, np.float32))
    mte2_into = aic * p.mte2_bytes_per_cycle * e.l1_byte_pj
    # MTE1 reads L1 at its L0A rate, or what L1's one port leaves beside MTE2's writes (sim.l1port)
    mte1 = max(0.0, min(p.mte1_bytes_per_cycle, p.l1_port_bytes_per_cycle - p.mte2_bytes_per_cycle))
    if chip.arch == "split":                         # the AIV cores read GM into their UB
        mte2_into += aiv * p.mte2_bytes_per_cycle * e.ub_byte_pj
    parts = {
        "static": chip.power.static_watts,
        "cube": aic * step * hz,
        "mte1": aic * mte1 * (e.l1_byte_pj + e.l0_byte_pj) * hz,
        "vector": aiv * chip.vector.bytes_per_cycle * 3 * e.vector_byte_pj * hz,
        "on-chip ends of GM copies": (mte2_into + aiv * p.mte3_bytes_per_cycle * e.ub_byte_pj
                                      + aic * p.fix_bytes_per_cycle * e.l0_byte_pj) * hz,
        "HBM": chip.gm_sustained_bytes_per_cycle * e.gm_byte_pj * hz,
        "L2": mem.l2_bytes_per_cycle * e.l2_byte_pj * hz,
    }
    parts["total"] = sum(parts.values())
    return parts


def trace_watts(trace) -> float:
    """What a launch drew on average: the energy of its instructions over its time, plus the
    chip's static power (W)."""
    seconds = trace.cycles / (trace.chip.clock_ghz * 1e9)
    dynamic = float(np.sum(trace.energy)) * 1e-12 / seconds if seconds > 0 else 0.0
    return trace.chip.power.static_watts + dynamic


# -- the roofline -------------------------------------------------------------------------------
UNITS = ("cube", "vector")


def peak_tflops(chip: "ChipSpec | str", unit: str) -> float:
    """The fp16 peak of the cube or of the vector unit, in TFLOPS (from the chip file)."""
    chip = get_chip(chip)
    if unit not in UNITS:
        raise ArgumentError(f"unit must be one of {UNITS}, got {unit!r}")
    return chip.peak_fp16_tflops if unit == "cube" else chip.peak_vector_tflops_fp16


def attainable(intensity, peak: float, bandwidth_gbs: float):
    """The roofline: min(peak, intensity x bandwidth), in TFLOPS; intensity in FLOP per GM byte
    (a number or an array); GB/s x FLOP/B = GFLOPS."""
    return np.minimum(peak, np.asarray(intensity, dtype=float) * bandwidth_gbs / 1000)


def ridge(chip: "ChipSpec | str", unit: str) -> float:
    """The intensity (FLOP/B) where the memory slope meets the unit's roof."""
    chip = get_chip(chip)
    return peak_tflops(chip, unit) * 1000 / chip.gm_bandwidth_gbs


__all__ = ["FP32_RATE", "PIPELINED_FRACTALS", "COPY_PIPES", "copy_rates", "CostModel", "macs_per_cycle",
           "mmad_cost", "mmad_cycles", "mmad_chain_cycles", "lower_bound_cycles", "level_energy_pj", "copy_energy_pj",
           "mac_energy_pj", "vector_energy_pj", "mmad_energy_pj", "full_load_watts", "trace_watts", "UNITS",
           "peak_tflops", "attainable", "ridge"]
