"""Checkers of lab 04 (double buffering): predict the speed-up of a second slot from the pipe
rates; name the cause of a colleague's stalls; decide how many slots pay for SiLU and for Mish;
give SiLU the slots it needs in the same UB; and, the challenge, speed up the first version of
SwiGLU's gate to a cycle target no single change reaches."""
from __future__ import annotations

import functools

import numpy as np

from ...arch import BLOCK_BYTES, ceil_div
from ...chips import get_chip
from ...errors import AlignmentError, BufferOverflowError, DeadlockError, RaceError, SyncError
from ...kernels.examples.silu import SiluStages, silu_kernel, silu_tiling, ub_tile
from ...kernels.examples.swiglu_gate import QUEUES as GATE_QUEUES
from ...kernels.examples.swiglu_gate import GateStages, gate_kernel
from ...plot import copies_in, queue_slot_bytes, queue_slots
from ...sim.isa import TRACK_NAMES, Pipe
from .. import lab04 as ref
from . import (as_number, exercise, failed, is_blank, is_empty_function, not_attempted, passed, perf_verdict,
               pipe_named, screen_class, stopped)

SPEEDUP_SLACK = 0.2       # a predicted speed-up may be 20% off the measured one
OPS = ("SiLU", "Add")


def _ops_dict(answer, ops, kind) -> dict | None:
    """``answer`` as {op: number} when it is a dict of exactly ``ops`` (bools are no numbers)."""
    if not (isinstance(answer, dict) and set(answer) == set(ops)):
        return None
    vals = {op: as_number(answer[op]) for op in ops}
    if any(v is None or v <= 0 for v in vals.values()):
        return None
    if kind is int and any(v != int(v) for v in vals.values()):
        return None
    return {op: kind(v) for op, v in vals.items()}


@exercise("04", "predicting double buffering: one slot pays the pipes in turn, two overlap them, and the "
                "run then takes as long as its busiest resource (GM, shared by a core's copies in and out)",
          key=("max(",))
def predict_speedup(answer):
    """{"SiLU": s, "Add": s}: the speed-up of two slots over one at the same tile, predicted."""
    if is_blank(answer):
        return not_attempted()
    want = ref.speedups()
    got = _ops_dict(answer, OPS, float)
    shown = ", ".join(f"{op} {v:.2f}x" for op, v in want.items())
    if got is None:
        return failed("the answer should be a dict of two positive numbers", expected='{"SiLU": ..., "Add": ...}',
                      got=repr(answer), hint="one predicted speed-up (cycles with one slot / with two) per op.")
    off = {op: got[op] / want[op] - 1 for op in OPS}
    if all(abs(e) <= SPEEDUP_SLACK for e in off.values()):
        return passed(f"predicted SiLU {got['SiLU']:.2f}x and Add {got['Add']:.2f}x; measured {shown}. SiLU's "
                      f"pipes take about as long as each other, so overlapping them nearly halves the run; "
                      f"Add's copies take almost all of it, and GM, which its copies in and out share, "
                      f"is as busy with two slots as with one.")
    op = max(OPS, key=lambda o: abs(off[o]))
    if all(abs(got[o] - 2) < 0.05 for o in OPS):
        hint = ("two slots do not make every kernel twice as fast: they overlap the pipes, and the run "
                "then takes as long as its busiest one. Is any pipe of Add's nearly as long as all three?")
    elif off[op] > 0:
        hint = (f"{op}: too optimistic. With two slots MTE2 and MTE3 copy at once, and a core's copies in "
                f"and out share its part of GM (the chip's GM rate over its cores): a tile then takes at "
                f"least (bytes in + bytes out) / that part. Count also the first copy in and the last copy "
                f"out, which nothing overlaps.")
    else:
        hint = (f"{op}: too pessimistic. With one slot each tile pays MTE2, the vector unit and MTE3 one "
                f"after the other, each with its start-up; with two, the slowest of them (or GM) sets "
                f"the pace.")
    return failed("a prediction is more than 20% off the measured speed-up",
                  expected=f"within 20% of {shown}",
                  got=", ".join(f"{o} {got[o]:.2f}x ({off[o]:+.1%})" for o in OPS), hint=hint)


def _colleague_cause() -> tuple[str, Pipe]:
    """(the queue with too few slots, the pipe that frees it) of lab04.colleague()."""
    used = queue_slots(ref.colleague())
    queue = min(used, key=used.get)
    return queue, (Pipe.V if queue.startswith("in_") else Pipe.MTE3)


@exercise("04", "reading stalls: a pipe that waits for a slot waits for the pipe that frees it; follow "
                "the waits to the queue whose slots run out",
          key=('("out_z", "MTE3")',))
def stall_cause(answer):
    """(queue, pipe): the colleague's queue that needs another slot, and the pipe whose work
    frees that queue's slot."""
    if is_blank(answer):
        return not_attempted()
    queue, pipe = _colleague_cause()
    want = (queue, TRACK_NAMES[pipe])
    if not (isinstance(answer, (tuple, list)) and len(answer) == 2 and all(isinstance(a, str) for a in answer)):
        return failed("the answer should be a pair of names", expected="(queue, pipe)", got=repr(answer),
                      hint='a tuple of two strings: ("queue name", "pipe name").')
    q, p = answer[0].strip(), pipe_named(answer[1])
    if q != queue:
        if q == "in_a":
            hint = ("MTE2 waits for a free in_a slot, which the vector unit gives back when it is done with "
                    "a tile. But the vector unit is not busy either: read its row. What does it wait for?")
        elif q == "in_b":
            hint = "no pipe's row waits on in_b: its slots come back in time. Follow the waits you can see."
        else:
            hint = "the queues are in_a, in_b and out_z, as the table names them."
        return failed("not the queue whose slots run out", expected="a queue of the table", got=repr(answer[0]),
                      hint=hint)
    if p != pipe:
        if p == Pipe.V:
            hint = "the vector unit fills out_z and is the pipe that waits for it; which pipe empties a slot and frees it?"
        else:
            hint = "a slot of out_z comes back when copy_out frees it: on which pipe does copy_out run?"
        return failed("not the pipe that frees the slot", expected="the pipe of copy_out", got=repr(answer[1]),
                      hint=hint)
    return passed(f"out_z has one slot: the vector unit cannot start a tile until MTE3 has copied the "
                  f"last one out and freed it, so it waits on 'alloc_tensor {queue} (wait free)', and "
                  f"MTE2 in turn waits for the vector unit to free in_a. The waits MTE2 shows are a "
                  f"symptom; {want} is the cause.")


@exercise("04", "how many slots pay: a pipe stalls when all of a queue's slots are on their round trip; "
                "once the slots cover the round trip, the busiest pipe sets the pace and more slots buy nothing",
          key=('"SiLU": 3', '"Mish": 2'))
def slots_needed(answer):
    """{"SiLU": n, "Mish": n}: the fewest slots past which another saves nothing, at lab04.SLOT_TILE."""
    if is_blank(answer):
        return not_attempted()
    cycles = ref.slot_cycles()
    want = {op: ref.slots_that_pay(c) for op, c in cycles.items()}
    got = _ops_dict(answer, tuple(want), int)
    table = "; ".join(f"{op}: " + ", ".join(f"{bn} slots {c:,}" for bn, c in cyc.items()) for op, cyc in cycles.items())
    if got is None:
        return failed("the answer should be a dict of two whole numbers", expected='{"SiLU": n, "Mish": n}',
                      got=repr(answer), hint="the number of slots per queue each kernel needs.")
    if got == want:
        return passed(f"SiLU needs {want['SiLU']}, Mish {want['Mish']} (cycles: {table}). SiLU's slot round trip "
                      f"(a copy in, its start-up, the vector's work) is longer than two tiles of its busiest "
                      f"pace; Mish's vector unit is slow enough that a slot is back before it is wanted.")
    op = next(o for o in want if got[o] != want[o])
    if got[op] == 1:
        hint = "with one slot every pipe waits for the whole round trip of the slot: two at least."
    elif got[op] > want[op]:
        hint = (f"{op}: is the busiest pipe ever waiting for a slot? If a slot comes back before that pipe "
                f"wants it, another slot cannot make that pipe faster.")
    else:
        hint = (f"{op}: a slot's round trip is the producer's copy (and its start-up) plus the consumer's work; "
                f"while it lasts, the busiest pipe wants a new slot every tile. How many tiles long is it?")
    return failed("not the number of slots that pays", expected="the fewest slots past which another saves "
                  "nothing (under 1%)", got=repr(answer), hint=hint, lines=[f"cycles: {table}"])


_ERRORS = {
    AlignmentError: "a DMA moves whole 32-byte blocks: round each slot (and the tile) down to them.",
    BufferOverflowError: "2 queues x the slots must fit the tiling's UB: shorten the tile.",
    DeadlockError: "keep the stages as they are; only the queues' slots and the tile change.",
    SyncError: "init_buffer each queue once, with its slot count and the slot's bytes.",
    RaceError: "keep the stages as they are; the queues order the pipes.",
}


def _silu_slots() -> int:
    return ref.slots_that_pay(ref.slot_cycles()["SiLU"])


@functools.lru_cache(maxsize=None)
def _silu_reference_cycles() -> int:
    return ref.run_silu(silu_kernel(_silu_slots()), mode="timing")[1].cycles


@exercise("04", "slots in a fixed UB: each queue's slots share it, so more slots mean a shorter tile",
          performance=True, key=("// (2 * 3)",))
def silu_slots(cls):
    """A SiluStages subclass whose ``__init__`` the learner wrote: the slots SiLU needs, the
    largest tile they fit."""
    if (v := screen_class(cls, SiluStages, "SiluStages", "MySilu")) is not None:
        return v
    if is_empty_function(cls.__init__) or cls.__init__ is SiluStages.__init__:
        return not_attempted("write the body of __init__")
    x = ref.inputs()
    try:
        z, trace = ref.run_silu(cls, x)
    except tuple(_ERRORS) as err:
        return stopped(err, _ERRORS)
    want, _ = ref.run_silu(silu_kernel(1), x)
    if not np.array_equal(z, want):
        bad = np.flatnonzero(z != want)
        return failed("z is not SiLU(x)", expected=f"z[{bad[0]}] = {float(want[bad[0]])!r}",
                      got=f"z[{bad[0]}] = {float(z[bad[0]])!r} ({len(bad):,} of {z.size:,} wrong)",
                      hint="set self.length, self.x_gm and self.z_gm to this block's slice as the "
                           "single-buffered __init__ does.")
    n = _silu_slots()
    used = queue_slots(trace)
    queues = ("in_x", "out_z")
    slots = ", ".join(f"{q}: {used.get(q, 0)} slot(s) used" for q in queues)
    if any(used.get(q, 0) != n for q in queues):
        few = min(used.get(q, 0) for q in queues) < n
        hint = ("fewer slots than exercise 3 found SiLU needs: with them, a pipe still waits for a "
                "slot's round trip." if few else
                "more slots than pay: each shortens the tile and buys no speed (exercise 3).")
        return failed("not the slots SiLU needs", expected=f"in_x and out_z with the same slots, as many as "
                      f"exercise 3 found", got=slots, hint=hint)
    ub = get_chip(ref.CHIP).buffers.ub
    tile = ub_tile(ub, n)
    want_bytes = tile * x.dtype.itemsize
    sizes = queue_slot_bytes(trace)
    if any(sizes.get(q) != want_bytes for q in queues):
        got_b = ", ".join(f"{k}: {v:,} B a slot" for k, v in sizes.items() if k in queues)
        return failed("each slot should be as large as the UB allows", expected="the largest slot (whole "
                      "32-byte blocks) that fits every slot of both queues in the tiling's UB", got=got_b,
                      hint=f"2 queues x {n} slots share the UB of {ub:,} B: each slot holds UB / {2 * n}, "
                           f"rounded down to whole 32-byte blocks.")
    block = min(silu_tiling(x.size, ref.CHIP).block_factor, x.size)
    tiles, want_tiles = copies_in(trace), ceil_div(block, tile)
    if tiles != want_tiles:
        return failed("the slots are right, but self.tile is not what they hold",
                      expected=f"{want_tiles} tiles a block", got=f"{tiles} copies in on core 0",
                      hint="self.tile is the slot's element count (its bytes / 2 B): the stages copy and "
                           "compute self.tile elements a tile.")
    return perf_verdict(trace.cycles, _silu_reference_cycles(), f"{n} slots of {want_bytes:,} B, z = SiLU(x)",
                        "keep the stages as they are: only the slots and the tile change.")


# -- the challenge ------------------------------------------------------------------------------
def _gate_best_tile() -> int:
    """The reference's tile: two slots in each of the gate's three queues, the largest that fits."""
    return get_chip(ref.CHIP).buffers.ub // (GATE_QUEUES * 2) // BLOCK_BYTES * BLOCK_BYTES // 2


@functools.lru_cache(maxsize=None)
def _gate_reference():
    """(z, cycles) of the reference: two slots a queue, the largest tile UB holds."""
    z, trace = ref.run_gate(gate_kernel(2, _gate_best_tile()))
    return z, trace.cycles


@exercise("04", "double buffering pays only with a tile worth overlapping: the slots hide the copies' "
                "start-ups, the tile amortises every per-tile cost",
          performance=True, challenge=True, key=("// (3 * 2)",))
def gate_challenge(cls):
    """A GateStages subclass whose ``__init__`` the learner wrote, fast enough."""
    if (v := screen_class(cls, GateStages, "GateStages", "MyGate")) is not None:
        return v
    if is_empty_function(cls.__init__) or cls.__init__ is GateStages.__init__:
        return not_attempted("write the body of __init__")
    try:
        z, trace = ref.run_gate(cls)
    except tuple(_ERRORS) as err:
        return stopped(err, {**_ERRORS, BufferOverflowError: "3 queues x their slots must fit the tiling's "
                                                             "UB: shorten the tile."})
    want, cycles = _gate_reference()
    if not np.array_equal(z, want):
        bad = np.flatnonzero(z != want)
        return failed("z is not silu(a) * b", expected=f"z[{bad[0]}] = {float(want[bad[0]])!r}",
                      got=f"z[{bad[0]}] = {float(z[bad[0]])!r} ({len(bad):,} of {z.size:,} wrong)",
                      hint="set self.length and the three GM slices to this block's part, as GateFirst does.")
    used, sizes = queue_slots(trace), queue_slot_bytes(trace)
    few = min(used.get(q, 0) for q in ("in_a", "in_b", "out_z"))
    slot = min(sizes.get(q, 0) for q in ("in_a", "in_b", "out_z"))
    if few < 2:
        hint = ("a queue with one slot makes its producer wait for the whole round trip of that slot, "
                "and every copy's start-up is paid while the other pipes wait: every queue needs two.")
    else:
        hint = (f"{slot:,} B slots: every tile pays its start-ups, flags and dependent-instruction waits, so a "
                f"short tile pays them often. How large a tile do the gate's slots leave room for?")
    return perf_verdict(trace.cycles, cycles, f"z = silu(a) * b with {used} slots of up to "
                        f"{max(sizes.values()):,} B", hint)
