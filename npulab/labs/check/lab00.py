"""Checkers of lab 00 (the environment): reading the chip table.

Every expected value is computed from the chip file, as the learner is asked to.
"""
from __future__ import annotations

from ...chips import BUFFERS, get_chip
from ...sim.memory import fmt_bytes
from . import as_number, close, exercise, failed, is_blank, not_attempted, passed, ratio_is

CHIP = "910"                  # the chip lab 00's exercises ask about
READ_MIB = 64                 # gm_read_us: how much the read moves


@exercise("00", "the chip table: the buffers of one AI core")
def largest_buffer(answer):
    """Name of the largest on-chip buffer of one AI core of the 910 ("L1", "UB", ...)."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    sizes = {b.upper(): chip.buffer_bytes(b) for b in BUFFERS}
    want = max(sizes, key=sizes.get)
    table = ", ".join(f"{b} {fmt_bytes(n)}" for b, n in sizes.items())
    if not isinstance(answer, str):
        return failed("the answer should be a buffer's name, a string such as 'UB'",
                      expected=repr(want), got=repr(answer),
                      hint="use the field's name from chip.buffers, upper-case, as a string.")
    got = answer.strip().upper()
    if got == want:
        return passed(f"{want} ({fmt_bytes(sizes[want])}) is the largest buffer of a {CHIP} AI core.")
    if got in ("GM", "HBM", "L2", "DDR"):
        hint = (f"{got} is device memory outside the AI core, shared by all cores; the question "
                f"is about the buffers inside one core: {table}.")
    elif got in sizes:
        hint = f"compare the sizes: {table}."
    else:
        hint = f"an AI core's buffers are {', '.join(sizes)}."
    return failed(f"{answer!r} is not the largest", expected=repr(want), got=repr(answer), hint=hint)


@exercise("00", "peak throughput: cores x cube MACs a cycle x 2 FLOPs a MAC x clock")
def peak_tflops(answer):
    """The 910's peak fp16 throughput in TFLOPS, from its cores, clock and cube size."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    want = chip.ai_cores * chip.cube.macs_per_cycle_fp16 * 2 * chip.clock_ghz / 1000
    got = as_number(answer)
    if got is None:
        return failed("the answer should be a number (TFLOPS)", expected=f"{want:.1f}", got=repr(answer),
                      hint="multiply the chip's fields; the result is a float.")
    if close(got, want):
        return passed(f"{got:.1f} TFLOPS = {chip.ai_cores} cores x {chip.cube.macs_per_cycle_fp16} MACs "
                      f"a cycle x 2 FLOPs a MAC x {chip.clock_ghz:g} GHz.")
    if ratio_is(got, want, 0.5):
        hint = "a multiply-accumulate (MAC) counts as two FLOPs: one multiply and one add."
    elif ratio_is(got, want, 1 / chip.ai_cores):
        hint = f"that is one AI core; the chip has {chip.ai_cores} of them working at once."
    elif ratio_is(got, want, 1000):
        hint = "units: MACs a cycle x GHz counts GFLOPS (1e9 a second); 1 TFLOPS = 1000 GFLOPS."
    elif ratio_is(got, want, 1e-3) or ratio_is(got, want, 1e9) or ratio_is(got, want, 1e12):
        hint = "units: the answer is in TFLOPS (1e12 FLOPs a second)."
    else:
        hint = "peak = cores x cube.macs_per_cycle_fp16 x 2 x clock_ghz, then convert GFLOPS to TFLOPS."
    return failed("not the chip's peak", expected=f"{want:.1f} TFLOPS", got=f"{got:g}", hint=hint)


@exercise("00", "GM bandwidth: bytes a cycle x clock, shared by every core")
def gm_read_us(answer):
    """Microseconds to read 64 MiB from the 910's GM at its full bandwidth."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(CHIP)
    nbytes = READ_MIB * 2**20
    want = nbytes / (chip.gm_bandwidth_gbs * 1e9) * 1e6
    got = as_number(answer)
    if got is None:
        return failed("the answer should be a number (microseconds)", expected=f"{want:.2f}",
                      got=repr(answer), hint="bytes / (bytes a second) gives seconds; x 1e6 for us.")
    if close(got, want):
        return passed(f"{got:.2f} us: {nbytes:,} bytes at {chip.gm_bandwidth_gbs:g} GB/s "
                      f"({chip.memory.gm_bytes_per_cycle:g} bytes a cycle x {chip.clock_ghz:g} GHz).")
    if ratio_is(got, want, 1e6 / 2**20, rel=2e-3):
        hint = f"1 MiB is 2**20 = {2**20:,} bytes, not 10**6."
    elif ratio_is(got, want, 1e3) or ratio_is(got, want, 1e-3) or ratio_is(got, want, 1e6) \
            or ratio_is(got, want, 1e-6):
        hint = "units: GB/s is 1e9 bytes a second and the answer is in microseconds (1e-6 s)."
    elif ratio_is(got, want, chip.ai_cores) or ratio_is(got, want, 1 / chip.ai_cores):
        hint = "the GM bandwidth is the whole chip's, shared by all cores: do not scale it by cores."
    else:
        hint = "time = bytes / bandwidth, with the bandwidth from chip.gm_bandwidth_gbs."
    return failed("not the read time", expected=f"{want:.2f} us", got=f"{got:g}", hint=hint)
