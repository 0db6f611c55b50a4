"""Checkers of lab 00 (the environment): reasoning from a chip's figures.

Every expected value is computed from the chip file, as the learner is asked to; the
challenge's reference is the copy plan the figures call for, run live on the simulator.
"""
from __future__ import annotations

import functools

from ...chips import BUFFERS, get_chip
from ...errors import NpuError
from ...kernels.examples.gm_copy import UB_TILES, CopyPlan, check_plan, launch_copy
from .. import lab00 as ref
from . import as_number, close, exercise, failed, is_blank, not_attempted, passed, perf_verdict, ratio_is

CHIP = "910"                  # the chip lab 00's exercises ask about
MATMUL = 4096                 # matmul_us: an M = N = K = 4096 fp16 matmul
MIB = 2**20


def _number(answer, unit: str, want: float):
    """A FAIL unless ``answer`` is a finite number, else None."""
    if as_number(answer) is None:
        return failed(f"the answer should be a number ({unit})", expected=f"{want:.4g}", got=repr(answer),
                      hint=f"compute it from the chip's fields: a float, in {unit}.")
    return None


@exercise("00", "on-chip memory: every AI core has its own buffers", key=("chip.ai_cores * sum(",))
def on_chip_mib(answer):
    """MiB of on-chip buffers (L1, L0A, L0B, L0C, UB) in the whole 910, every core's counted."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    core = sum(chip.buffer_bytes(b) for b in BUFFERS)
    want = chip.ai_cores * core / MIB
    bad = _number(answer, "MiB", want)
    if bad:
        return bad
    got = as_number(answer)
    l2 = chip.memory.l2_bytes / MIB
    if close(got, want):
        return passed(f"{got:g} MiB: {chip.ai_cores} cores x {core / MIB:g} MiB each, "
                      f"{want / l2:.2g}x the {l2:g} MiB L2 the cores share; yet a kernel sees only its own "
                      f"core's {core / MIB:g} MiB, so data a core needs is copied to it (from GM or L2).")
    if ratio_is(got, want, 1 / chip.ai_cores):
        hint = f"that is one AI core's buffers; the {CHIP} has {chip.ai_cores} cores, each with its own."
    elif ratio_is(got, want, MIB) or ratio_is(got, want, MIB / 1024):
        hint = "units: the answer is in MiB (2**20 bytes)."
    elif ratio_is(got, want, MIB / 1e6):
        hint = "a MiB is 2**20 bytes, not 10**6."
    elif close(got, want + l2) or close(got, (core + chip.memory.l2_bytes) / MIB):
        hint = "the L2 is not in the AI cores: it is a cache in front of GM, shared by all of them."
    elif got < want:
        hint = "count all five buffers of a core (L1, L0A, L0B, L0C, UB), in every core."
    else:
        hint = "add the five buffers of one core, then count every core."
    return failed("not the chip's on-chip buffer capacity", expected=f"{want:g} MiB", got=f"{got:g}", hint=hint)


@exercise("00", "peak throughput: a MAC is two FLOPs, and every core's cube works at once",
          key=("2 * 4096**3",))
def matmul_us(answer):
    """Microseconds a 4096 x 4096 x 4096 fp16 matmul takes at best on the 910: its FLOPs at the
    chip's peak."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    peak = chip.ai_cores * chip.cube.macs_per_cycle_fp16 * 2 * chip.clock_ghz * 1e9   # FLOPs a second
    want = 2 * MATMUL**3 / peak * 1e6
    bad = _number(answer, "microseconds", want)
    if bad:
        return bad
    got = as_number(answer)
    if close(got, want):
        return passed(f"{got:.1f} us: {2 * MATMUL**3:.3g} FLOPs at {peak / 1e12:.0f} TFLOPS ({chip.ai_cores} "
                      f"cores x {chip.cube.macs_per_cycle_fp16} MACs a cycle x 2 FLOPs x {chip.clock_ghz:g} GHz). "
                      f"A kernel only gets there if GM can feed it: lab 01.")
    if ratio_is(got, want, 0.5):
        hint = "a matmul does M x N x K multiply-accumulates, and a MAC counts as two FLOPs."
    elif ratio_is(got, want, 2):
        hint = "the peak already counts a MAC as two FLOPs: count the matmul's FLOPs the same way."
    elif ratio_is(got, want, chip.ai_cores):
        hint = f"that is one AI core's cube; the {CHIP}'s {chip.ai_cores} cores share the work."
    elif any(ratio_is(got, want, f) for f in (1e3, 1e-3, 1e6, 1e-6, 1e9, 1e-9)):
        hint = "units: TFLOPS is 1e12 FLOPs a second, and the answer is in microseconds (1e-6 s)."
    else:
        hint = "count the matmul's FLOPs (M x N x K MACs) and divide by the chip's peak."
    return failed("not the time at peak", expected=f"{want:.1f} us", got=f"{got:g}", hint=hint)


@exercise("00", "GM bandwidth: a copy crosses GM twice, at the rate the DRAM sustains",
          key=("2 * x.nbytes",))
def copy_floor_us(answer):
    """The fewest microseconds copying lab00.COPY_MIB MiB from one GM buffer to another can take
    on the 910, set by GM alone."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    nbytes = ref.COPY_MIB * MIB
    sustained = chip.gm_sustained_bytes_per_cycle * chip.clock_ghz * 1e9        # bytes a second
    want = 2 * nbytes / sustained * 1e6
    bad = _number(answer, "microseconds", want)
    if bad:
        return bad
    got = as_number(answer)
    if close(got, want):
        sim = _reference_cycles() / (chip.clock_ghz * 1e3)
        return passed(f"{got:.2f} us: {2 * nbytes:,} bytes (read and written) at the {sustained / 1e9:.0f} GB/s "
                      f"the DRAM sustains. The challenge's reference plan takes {sim:.1f} us on the simulator: "
                      f"the launch (launch_cycles) and the start-up of its first and last copies come on top.")
    if ratio_is(got, want, 0.5):
        hint = "the copy writes every byte it reads, and both cross GM: count them twice."
    elif ratio_is(got, want, chip.memory.gm_efficiency) or ratio_is(got, want / 2, chip.memory.gm_efficiency):
        hint = (f"the {chip.gm_bandwidth_gbs:g} GB/s is the rate at the pins; the DRAM sustains only "
                f"{chip.memory.gm_efficiency:.0%} of it (the 'sustained' figure).")
    elif ratio_is(got, want, 1e6 / MIB, rel=2e-3) or ratio_is(got, want, 0.5e6 / MIB, rel=2e-3):
        hint = f"1 MiB is 2**20 = {MIB:,} bytes, not 10**6."
    elif ratio_is(got, want, chip.ai_cores) or ratio_is(got, want, 1 / chip.ai_cores):
        hint = "GM's rate is the whole chip's, shared by every core: do not scale it by the cores."
    elif any(ratio_is(got, want, f) for f in (1e3, 1e-3, 1e6, 1e-6)):
        hint = "units: GB/s is 1e9 bytes a second and the answer is in microseconds (1e-6 s)."
    else:
        hint = "time = bytes that cross GM / the rate GM sustains."
    return failed("not the copy's GM floor", expected=f"{want:.2f} us", got=f"{got:g}", hint=hint)


def reference_plan(chip=CHIP) -> CopyPlan:
    """The plan the figures call for: every core (GM needs several cores' pipes to fill it) and
    the largest copies the UB holds (each copy waits out the pipe's start-up, so bytes in flight
    must cover start-up x rate)."""
    c = get_chip(chip)
    return CopyPlan(block_dim=c.cores_for("aiv"), tile_bytes=c.buffers.ub // UB_TILES)


@functools.lru_cache(maxsize=None)
def _reference_cycles() -> int:
    return _cycles(reference_plan())


def _cycles(plan: CopyPlan) -> int:
    return int(launch_copy(ref.copy_input(), plan, CHIP)[1].cycles)


def _plan_hint(plan: CopyPlan) -> str:
    """What the chip's figures say is short in ``plan``: the cores' pipes, or the bytes in flight."""
    c = get_chip(CHIP)
    p = c.pipes
    gm = c.gm_sustained_bytes_per_cycle
    pipes = plan.block_dim * (p.mte2_bytes_per_cycle + p.mte3_bytes_per_cycle)
    flight = plan.block_dim * UB_TILES * plan.tile_bytes
    need = p.mte2_startup_cycles * gm
    short = []
    if pipes < gm:
        short.append(f"{plan.block_dim} core(s) move at most {pipes:,} B a cycle through their MTE2 and MTE3, "
                     f"and GM sustains {gm:.0f}: use more cores")
    if flight < need:
        short.append(f"every copy lands {p.mte2_startup_cycles} cycles after it starts, so to keep GM's {gm:.0f} B "
                     f"a cycle moving, about {need:,.0f} B must be in flight; {plan.block_dim} core(s) x "
                     f"{UB_TILES} tiles x {plan.tile_bytes:,} B hold {flight:,}: make the copies larger")
    return "; ".join(short) or "more cores and larger copies (up to what the UB holds) both help."


@exercise("00", "filling GM: enough cores, and copies large enough to cover the start-up",
          performance=True, challenge=True, key=("tile_bytes=chip.buffers.ub // UB_TILES",))
def copy_plan(answer):
    """A CopyPlan(block_dim, tile_bytes) that copies lab00.COPY_MIB MiB on the 910 within 150% of
    the reference plan's cycles."""
    if is_blank(answer):
        return not_attempted()
    if not isinstance(answer, CopyPlan):
        return failed("the answer should be a CopyPlan", expected="CopyPlan(block_dim=..., tile_bytes=...)",
                      got=repr(answer), hint="build it as CopyPlan(block_dim=..., tile_bytes=...).")
    try:
        check_plan(answer, CHIP)
    except NpuError as err:
        c = get_chip(CHIP)
        return failed("the kernel cannot run this plan", got=str(err),
                      hint=f"a {CHIP} has {c.cores_for('aiv')} cores, copies move whole 32-byte blocks, and the "
                           f"kernel keeps {UB_TILES} tiles in one core's UB ({c.buffers.ub:,} B).")
    cycles = _cycles(answer)
    return perf_verdict(cycles, _reference_cycles(), f"{answer} copies {ref.COPY_MIB} MiB", _plan_hint(answer))


__all__ = ["on_chip_mib", "matmul_us", "copy_floor_us", "copy_plan", "reference_plan"]
