"""Checkers of lab 02 (a first kernel): the Compute stage, which pipe is busiest (predicted from
the chip's rates), a missing flag, a tile that fits UB, and the challenge: a many-tile Add with
its flags set by hand, as fast as the queues make it."""
from __future__ import annotations

import functools

import numpy as np

from ...chips import get_chip
from ...errors import AlignmentError, BufferOverflowError, DeadlockError, RaceError, ShapeError, SyncError
from ...kernels.elementwise import QUEUES_PER_TILE, KernelAdd, add_tiling, launch_add
from ...sim.isa import TRACK_NAMES, Pipe
from .. import lab02 as ref
from . import (exercise, failed, is_blank, is_empty_function, not_attempted, passed, perf_verdict, pipe_named,
               same_code, screen_function, stopped)

_QUEUE_HINTS = {
    DeadlockError: "every deque needs an enque before it: Compute must deque x and y from the input "
                   "queues and enque z into out_z, or CopyOut waits forever.",
    SyncError: "a queue hands out buffer_num slots: free_tensor each input after the add, so "
               "CopyIn can alloc_tensor the slot again.",
    RaceError: "free_tensor gives a slot back to CopyIn, which may overwrite it at once: free the "
               "inputs only after the add that reads them, and enque z only after the add writes it.",
    ShapeError: "the vector add takes (dst, src0, src1, count) with LocalTensors in UB.",
    AlignmentError: "copies and slices work in 32-byte blocks.",
}


def _mismatch(z, x, y) -> tuple[str, str, str]:
    """(expected, got, hint) at the first wrong element."""
    want = (x + y).astype(np.float16)
    bad = np.flatnonzero(z != want)
    i = int(bad[0])
    if np.array_equal(z, x) or np.array_equal(z, y):
        hint = "z equals an input: add both inputs into z before enqueuing it."
    elif not np.any(z):
        hint = "z is all zeros: the add must write the tensor you enque into out_z."
    elif np.array_equal(z, (x - y).astype(np.float16)) or np.array_equal(z, (x * y).astype(np.float16)):
        hint = "that is another operation: z = x + y is lang.add (Ascend C Add)."
    else:
        hint = f"{len(bad)} of {z.size} elements differ: count must be the tile's element count."
    return f"z[{i}] = {float(want[i])!r} (x + y)", f"z[{i}] = {float(z[i])!r}", hint


@exercise("02", "CopyIn / Compute / CopyOut: queues hand tensors between pipes", performance=True,
          key=("self.in_x.deque()", "self.out_z.enque(z)", "self.in_x.free_tensor(x)"))
def compute_stage(cls):
    """A KernelAdd-shaped class (``cls(x, y, z, tiling).process()``) whose
    ``compute(self, count)`` the learner wrote."""
    if not (isinstance(cls, type) and callable(getattr(cls, "compute", None))
            and callable(getattr(cls, "process", None))):
        return failed("the answer should be your kernel class", expected="a class with compute and process",
                      got=repr(cls), hint="pass the class (MyAdd), not an instance.")
    if is_empty_function(cls.compute):
        return not_attempted("write the body of compute")
    x, y = ref.inputs()
    try:
        z, trace = ref.run_kernel_class(cls, x, y)
    except tuple(_QUEUE_HINTS) as err:
        return stopped(err, _QUEUE_HINTS)
    if not np.array_equal(z, (x + y).astype(np.float16)):
        want, got, hint = _mismatch(z, x, y)
        return failed("z is not x + y", expected=want, got=got, hint=hint)
    _, reference = ref.run_kernel_class(KernelAdd, x, y)
    return perf_verdict(trace.cycles, reference.cycles, f"z = x + y on {x.size:,} elements",
                        "free each input as soon as the add has read it and enque z at once; "
                        "no pipe_barrier is needed, the queues already order the pipes.")


@exercise("02", "flags between pipes: set_flag on the producer, wait_flag on the consumer",
          key=("set_flag(PIPE_V, PIPE_MTE3", "wait_flag(PIPE_V, PIPE_MTE3"))
def fix_race(kernel):
    """The one-tile Add with the missing flag pair added."""
    if not callable(kernel):
        return failed("the answer should be your kernel function", expected="a function",
                      got=repr(kernel), hint="pass add_one_tile, without calling it.")
    if is_empty_function(kernel) or same_code(kernel, ref.add_one_tile_racy):
        return not_attempted("add the missing set_flag / wait_flag pair to add_one_tile")
    try:
        z, trace, x, y = ref.run_one_tile(kernel)
    except RaceError as err:
        return failed("the race detector still finds a race", expected="no race", got=ref.hazard(err),
                      hint="a flag orders two pipes: set_flag(src, dst, id) on the pipe that wrote, "
                           "after its write; wait_flag(src, dst, id) on the pipe that reads, before "
                           "its read. Read which pipes the message names.")
    except DeadlockError as err:
        return failed("the kernel deadlocks", expected="no deadlock", got=f"DeadlockError: {err}",
                      hint="every wait_flag needs a set_flag with the same (src, dst, id) before it.")
    except SyncError as err:
        return failed("a flag is used wrongly", got=f"SyncError: {err}",
                      hint="event ids run from 0 to the chip's event_ids - 1, one set per wait.")
    if not np.array_equal(z, (x + y).astype(np.float16)):
        return failed("race-free, but z is not x + y", expected="z = x + y", got=f"z[:4] = {z[:4]}",
                      hint="keep the copies and the add as they were; only add the flags.")
    return passed(f"no race, z = x + y, {trace.cycles:,} cycles. The queues of KernelAdd issue "
                  f"exactly these flags for you (enque = set_flag, deque = wait_flag).")


def reference_tile(chip: str = ref.CHIP, itemsize: int = 2, buffer_num: int = 2) -> int:
    """The largest tile (elements, whole 32-byte blocks) whose queues fit UB."""
    return ref.largest_tile(chip, buffer_num, itemsize)


@exercise("02", "tiling for UB: 3 queues x buffer_num slots x tile bytes must fit; the largest such tile",
          key=("// (3 * 2)", "// 32 * 32"))
def ub_tile(tile):
    """TILE (fp16 elements): the largest tile whose 3 queues x 2 slots fit the teaching chip's
    UB, in whole 32-byte blocks."""
    if is_blank(tile):
        return not_attempted()
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)):
        return failed("the tile should be a whole number of elements", expected="an int",
                      got=repr(tile), hint="use // (floor division) so the tile stays an int.")
    tile = int(tile)
    chip = get_chip(ref.CHIP)
    ub, best = chip.buffers.ub, reference_tile()
    rule = (f"the largest tile whose slots all fit {ub:,} B of UB, in whole 32-byte blocks "
            f"(a multiple of 16 fp16 elements)")
    if tile < 1 or tile % 16:
        return failed("not a valid tile", expected=rule, got=f"TILE = {tile}",
                      hint="a tile is a whole number of 32-byte blocks: a positive multiple of 16 fp16 "
                           "elements (round the UB share down to 32 bytes before converting).")
    need = QUEUES_PER_TILE * 2 * tile * 2
    x, y = ref.inputs(ref.TILE_N)
    if need > ub:
        try:
            launch_add(x, y, add_tiling(x.size, x.dtype, chip, 2, tile), chip)
            got = f"TILE = {tile}"
        except BufferOverflowError as err:
            got = f"TILE = {tile}: BufferOverflowError: {err}"
        hint = (f"3 queues (x, y, z) x 2 buffers x {tile} elements x 2 bytes = {need:,} B, but UB "
                f"holds {ub:,} B: the tile does not fit.")
        if tile == best * 2:
            hint += (" It is twice the largest: either it is counted in bytes (TILE counts fp16 "
                     "elements, 2 bytes each) or sized for one buffer per queue (double buffering "
                     "needs two).")
        elif QUEUES_PER_TILE * tile * 2 <= ub:
            hint += " That tile would fit with one buffer per queue: double buffering needs two."
        return failed("the tile does not fit UB", expected=rule, got=got, hint=hint)
    z, trace = launch_add(x, y, add_tiling(x.size, x.dtype, chip, 2, tile), chip)
    if not np.array_equal(z, (x + y).astype(np.float16)):
        return failed("z is not x + y", expected="z = x + y", got=f"z[:4] = {z[:4]}",
                      hint="the tile must be a positive multiple of 16 elements.")
    if tile < best:
        _, largest = launch_add(x, y, add_tiling(x.size, x.dtype, chip, 2, best), chip)
        return failed(f"TILE = {tile} fits, but it is not the largest tile that fits", expected=rule,
                      got=f"TILE = {tile}: {need:,} of {ub:,} B",
                      hint=f"the slots still have room: {ub - need:,} B of UB are left. Count the slots "
                           f"the three queues hold, give each an equal share of UB, round it down to "
                           f"whole 32-byte blocks, then convert bytes to elements.",
                      lines=[f"the Add of {ref.TILE_N:,} elements in cycles: yours {trace.cycles:,}, the "
                             f"largest tile's {largest.cycles:,} (the measure below shows where a bigger "
                             f"tile stops paying)"])
    return passed(f"TILE = {tile}: 3 x 2 x {tile} x 2 B = {need:,} of {ub:,} B of UB, and one more "
                  f"32-byte block per slot would not fit. The Add of {ref.TILE_N:,} elements with it: "
                  f"z = x + y in {trace.cycles:,} cycles.")


RANKED = (Pipe.MTE2, Pipe.MTE3, Pipe.V)      # the pipes an Add keeps busy


def _ranking(answer) -> tuple | None:
    """The learner's three pipe names as Pipes, or None when it is not three names of pipes."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 3 or not all(isinstance(a, str) for a in answer):
        return None
    pipes = tuple(pipe_named(a) for a in answer)
    return pipes if None not in pipes else None


@exercise("02", "pipe rates: a pipe's busy time is the bytes it moves over its rate (Add is memory-bound)",
          key=('("MTE2", "MTE3", "VECTOR")',))
def pipe_ranking(answer):
    """MTE2, MTE3 and VECTOR ordered from most to fewest busy cycles in the lab's Add on the
    teaching chip, predicted from the chip's rates before the run."""
    if is_blank(answer):
        return not_attempted()
    got = _ranking(answer)
    if got is None or sorted(got) != sorted(RANKED):
        return failed("the answer should name MTE2, MTE3 and VECTOR once each, busiest first",
                      expected="a tuple of three gantt track names", got=repr(answer),
                      hint="a tuple such as ('VECTOR', 'MTE2', 'MTE3'), each pipe once.")
    _, trace = ref.run_kernel_class()
    busy = trace.busy_cycles()
    want = tuple(sorted(RANKED, key=lambda p: -busy[p]))
    table = ", ".join(f"{TRACK_NAMES[p]} {int(busy[p]):,}" for p in want)
    if got == want:
        return passed(f"busy cycles (both cores): {table}. Per element MTE2 copies two inputs, MTE3 one "
                      f"output at the same rate, and the vector unit works through 256 bytes a cycle: "
                      f"Add is bound by its copies.")
    if got[0] == Pipe.V:
        hint = ("the vector unit adds a whole tile in a few cycles and then waits for the next copy: "
                "compare each pipe's bytes per cycle in the chip file (Add is memory-bound, lab 01).")
    elif got.index(Pipe.MTE3) < got.index(Pipe.MTE2):
        hint = "MTE3 writes one tensor per tile; MTE2 reads two, at the same bytes per cycle."
    else:
        hint = ("the vector unit's rate is several times MTE3's: per tile it has as many bytes to "
                "write as MTE3 has to copy, in far fewer cycles.")
    return failed("that is not the order of the measured busy cycles", expected="the busiest pipe first",
                  got=repr(tuple(answer)), hint=hint)


# -- the challenge ------------------------------------------------------------------------------
_STREAM_HINTS = {
    RaceError: "a slot is refilled (or its z overwritten) while another pipe still uses it: a slot "
               "used again needs a flag from the pipe that used it last to the pipe that refills it.",
    DeadlockError: "a wait_flag whose set_flag never comes: the first tiles that use a slot have no "
                   "earlier tile to wait for, and every set needs its own wait (one set, one wait).",
    SyncError: "event ids run from 0 to the chip's event_ids - 1; a flag set twice must be waited on "
               "in between.",
    ShapeError: "data_copy(dst, src, count) and lang.add(dst, src0, src1, count): count elements of "
                "UB tensors and GM slices.",
    AlignmentError: "copies and slices work in 32-byte blocks.",
}


@functools.lru_cache(maxsize=None)
def _stream_reference() -> int:
    """The cycles of the package's queue-based Add at the challenge's tile (measured once)."""
    return ref.stream_reference_cycles()


@exercise("02", "flags by hand: two slots, each reused only after the pipes that read it are done",
          performance=True, challenge=True, key=("% 2", "wait_flag(PIPE_V, PIPE_MTE2"))
def stream_pingpong(kernel):
    """add_stream(x, y, z): z = x + y over lab02.STREAM_N elements on one core, tiles of
    lab02.STREAM_TILE in UB scratch space, flags set by hand."""
    screen = screen_function(kernel, "add_stream")
    if screen is not None:
        return screen
    try:
        z, trace, x, y = ref.run_stream(kernel)
    except tuple(_STREAM_HINTS) as err:
        if isinstance(err, RaceError):
            return failed("the race detector stops the kernel", expected="no race", got=ref.hazard(err),
                          hint=_STREAM_HINTS[RaceError])
        return stopped(err, _STREAM_HINTS)
    want = (x + y).astype(np.float16)
    if not np.array_equal(z, want):
        bad = np.flatnonzero(z != want)
        tail = ref.stream_tiles(x.size)[-1]
        hint = (f"the last tile is a tail: elements {tail[0]:,} on, {tail[1]} of them, are never written."
                if bad[0] >= tail[0] else "copy each tile in, add it and copy it out at its own offset.")
        return failed("z is not x + y", expected=f"z[{bad[0]}] = {float(want[bad[0]])!r}",
                      got=f"z[{bad[0]}] = {float(z[bad[0]])!r} ({len(bad):,} elements wrong)", hint=hint)
    left = ref.unpaired_flags(trace)
    if left:
        return failed("right values, but some flags are set and never waited on", expected="a wait for every set",
                      got="set more often than waited: " + ", ".join(left),
                      hint="SetFlag / WaitFlag come in pairs: a flag still set when the kernel ends is "
                           "pending for whatever runs next. After the last tile, wait for the flags "
                           "nothing waited for.")
    return perf_verdict(trace.cycles, _stream_reference(), f"z = x + y on {x.size:,} elements, flags by hand",
                        "the pipes take turns: a tile's copies in still wait for the tile before to leave "
                        "UB. Give the tiles a second set of tensors to alternate between, and make a "
                        "tensor's reuse wait only for the pipe that used that tensor last.")
