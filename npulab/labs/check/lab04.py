"""Checkers of lab 04 (double buffering): make the SiLU kernel double buffered within the same
UB and meet a cycle target; name the queue MTE2 stalls on in the single-buffered run."""
from __future__ import annotations

import numpy as np

from ...arch import ceil_div
from ...chips import get_chip
from ...errors import BufferOverflowError, DeadlockError, RaceError, SyncError
from ...kernels.examples.silu import SiluDouble, SiluSingle, SiluStages, silu_tiling, ub_tile
from ...plot import copies_in, pipe_time, queue_slot_bytes, queue_slots
from ...sim.isa import TRACK_NAMES, Pipe
from .. import lab04 as ref
from . import (exercise, failed, is_blank, is_empty_function, not_attempted, passed, perf_verdict, pipe_named,
               screen_class, stopped)

_ERRORS = {
    BufferOverflowError: "two slots of the single-buffered tile need twice its UB: with 2 queues x 2 "
                         "slots, the tile is UB / 4 (whole 32-byte blocks), half the single-buffered one.",
    DeadlockError: "keep the stages as they are; only the queues' slots and the tile change.",
    SyncError: "init_buffer each queue once, with its slot count and the slot's bytes.",
    RaceError: "keep the stages as they are; the queues order the pipes.",
}


@exercise("04", "double buffering: 2 slots per queue so MTE2, the vector unit and MTE3 overlap; "
                "the same UB then holds half the tile", performance=True)
def double_buffered(cls):
    """A SiluStages subclass whose ``__init__`` the learner wrote (double buffered)."""
    if (v := screen_class(cls, SiluStages, "SiluStages", "MySilu")) is not None:
        return v
    if is_empty_function(cls.__init__) or cls.__init__ is SiluStages.__init__:
        return not_attempted("write the body of __init__")
    x = ref.inputs()
    try:
        z, trace = ref.run_silu(cls, x)
    except tuple(_ERRORS) as err:
        return stopped(err, _ERRORS)
    want, _ = ref.run_silu(SiluSingle, x)
    if not np.array_equal(z, want):
        bad = np.flatnonzero(z != want)
        return failed("z is not SiLU(x)", expected=f"z[{bad[0]}] = {float(want[bad[0]])!r}",
                      got=f"z[{bad[0]}] = {float(z[bad[0]])!r} ({len(bad):,} of {z.size:,} wrong)",
                      hint="set self.length, self.x_gm and self.z_gm to this block's slice as the "
                           "single-buffered __init__ does.")
    used = queue_slots(trace)
    queues = ("in_x", "out_z")
    slots = ", ".join(f"{q}: {used.get(q, 0)} slot(s) used" for q in queues)
    single = [q for q in queues if used.get(q, 0) < 2]
    if single:
        hint = ("still one slot per queue: init_buffer(queue, 2, slot bytes) gives a queue two slots."
                if len(single) == 2 else
                f"{single[0]} has one slot: the pipe that fills it waits for the pipe that empties it. "
                f"Every queue between two pipes needs two slots.")
        return failed("not double buffered", expected="in_x and out_z with 2 slots each", got=slots,
                      hint=hint)
    more = [q for q in queues if used.get(q, 0) > 2]
    if more:
        return failed("more than two slots per queue", expected="in_x and out_z with 2 slots each", got=slots,
                      hint=f"{' and '.join(more)} use{'s' if len(more) == 1 else ''} "
                           f"{max(used[q] for q in more)} slots: double buffering "
                           f"is buffer_num=2, each slot half the single-buffered tile. (The measure below "
                           f"tries a third slot.)")
    ub = get_chip(ref.CHIP).buffers.ub
    tile = ub_tile(ub, 2)
    want_bytes = tile * x.dtype.itemsize
    sizes = queue_slot_bytes(trace)
    wrong = [q for q in queues if sizes.get(q) != want_bytes]
    if wrong:
        q = wrong[0]
        got_b = sizes.get(q, 0)
        hint = (f"2 queues x 2 slots share the UB of {ub:,} B: each slot holds UB / 4 = {want_bytes:,} B "
                f"(whole 32-byte blocks), half the single-buffered tile.")
        if got_b == ub // (3 * 2) // 32 * 32:
            hint = "UB / 6 is Add's split (3 queues x 2 slots); SiLU has two queues, in_x and out_z. " + hint
        return failed("each slot should hold half the single-buffered tile", expected=f"{want_bytes:,} B a slot "
                      f"({tile:,} fp16 elements)", got=", ".join(f"{k}: {v:,} B a slot" for k, v in sizes.items()
                                                                 if k in queues), hint=hint)
    block = min(silu_tiling(x.size, ref.CHIP).block_factor, x.size)
    tiles, want_tiles = copies_in(trace), ceil_div(block, tile)
    if tiles != want_tiles:
        return failed("the slots are right, but self.tile is not what they hold",
                      expected=f"{want_tiles} tiles of {tile:,} elements per block",
                      got=f"{tiles} copies in on core 0",
                      hint=f"self.tile is the slot's element count ({want_bytes:,} B / 2 B = {tile:,}): the "
                           f"stages copy and compute self.tile elements a tile.")
    _, reference = ref.run_silu(SiluDouble, x)
    return perf_verdict(trace.cycles, reference.cycles,
                        f"double buffered (slots {used}), z = SiLU(x)",
                        f"a tile of UB / 4 = {ub // 4:,} B: much smaller tiles pay the per-tile "
                        f"costs (flags, vector start-ups, each slot's wait for its copy's "
                        f"{get_chip(ref.CHIP).pipes.mte2_startup_cycles}-cycle start-up) more often.")


def expected_stall():
    """(queue, reason, share of the run) of MTE2's longest stall in the single-buffered run."""
    _, trace = ref.run_silu(SiluSingle)
    row = next(r for r in pipe_time(trace, 0) if r["pipe"] == TRACK_NAMES[Pipe.MTE2])
    reason, cycles = next(iter(row["waits"].items()))
    queue = reason.split()[1]
    return queue, reason, cycles / row["span"]


@exercise("04", "reading stalls: a producer waits for a free slot, which the consumer's free_tensor gives back")
def mte2_stall(answer):
    """(queue, pipe): the queue MTE2 waits on most in the single-buffered SiLU, and the pipe whose
    work ends that wait."""
    if is_blank(answer):
        return not_attempted()
    queue, reason, share = expected_stall()
    want = (queue, TRACK_NAMES[Pipe.V])
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and all(isinstance(a, str) for a in answer)):
        return failed("the answer should be a pair of names", expected=repr(want), got=repr(answer),
                      hint='a tuple of two strings: ("queue name", "pipe name").')
    q, p = answer[0].strip(), pipe_named(answer[1])
    if q != queue:
        if q == "out_z":
            hint = ("out_z is filled by the vector unit and emptied by MTE3; MTE2 never touches it. "
                    "Read MTE2's row of the table.")
        else:
            hint = f"read MTE2's row of the stall table: the reason names the queue ({reason!r})."
        return failed("not the queue MTE2 waits on", expected=repr(queue), got=repr(answer[0]), hint=hint)
    if p != Pipe.V:
        if p == Pipe.MTE2:
            hint = "MTE2 is the pipe that waits; which pipe gives the slot back?"
        elif p == Pipe.MTE3:
            hint = "MTE3 empties out_z. The in_x slot is freed by Compute's free_tensor, on the vector unit."
        else:
            hint = "the slot comes back when Compute calls in_x.free_tensor(x): on which pipe does Compute run?"
        return failed("not the pipe that ends the wait", expected=repr(want[1]), got=repr(answer[1]), hint=hint)
    return passed(f"MTE2 waits {share:.0%} of the run on {reason!r}: with one slot, the next tile "
                  f"cannot be copied in until the vector unit has finished the current one and "
                  f"freed in_x. A second slot lets MTE2 fill it meanwhile.")


@exercise("04", "how many slots pay: slots overlap the pipes and hide copy latency; "
                "in a fixed UB more slots mean shorter tiles")
def fastest_buffer_num(answer):
    """{"SiLU": n, "Add": n}: the fastest buffer_num of each op in lab04.measure()."""
    if is_blank(answer):
        return not_attempted()
    rows = ref.measure()
    want = {op: min((r for r in rows if r["op"] == op), key=lambda r: r["cycles"])["buffer_num"]
            for op in ("SiLU", "Add")}
    table = ", ".join(f"{r['op']} x{r['buffer_num']}: {r['cycles']:,}" for r in rows)
    if not (isinstance(answer, dict) and set(answer) == set(want)
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                    for v in answer.values())):
        return failed("the answer should be a dict of two whole numbers", expected=repr(want),
                      got=repr(answer), hint='{"SiLU": buffer_num, "Add": buffer_num}.')
    answer = {k: int(v) for k, v in answer.items()}
    if answer == want:
        return passed(f"fastest: SiLU with {want['SiLU']} slots, Add with {want['Add']} (cycles: {table}). "
                      f"Most of the gain comes with the second slot.")
    wrong = "Add" if answer["Add"] != want["Add"] else "SiLU"
    if answer[wrong] == 1:
        hint = (f"with one slot {wrong}'s copy in waits for the slot to come back, so every copy's "
                f"start-up latency is paid while the other pipes wait. Read the cycles column.")
    else:
        hint = (f"more slots keep {wrong}'s copies back to back, their start-ups overlapping, but "
                f"shorten the tile: compare the cycles of each buffer_num, not the ratios.")
    return failed("not the fastest buffer_num", expected=repr(want), got=repr(answer), hint=hint,
                  lines=[f"cycles: {table}"])
