"""Offset planners: where in one arena each tensor of fixed lifetime goes, so that no two tensors
live at the same time share a byte, and the arena (the highest end of any tensor) is small.

The problem they solve is the *dynamic storage allocation* problem: each :class:`Block` is a
rectangle, its lifetime ``[start, end)`` along time and ``size`` bytes along the address; the
planner slides rectangles up and down (picks offsets) and the plan's **peak** is the top edge of
the highest one. Two figures bound every plan:

* the **lower bound**: the most bytes live at one moment (:func:`max_live`); no offsets beat it;
* the **sum** of all sizes: what giving every tensor its own memory takes.

Three planners, from fast to exact:

* :func:`best_fit`: blocks in the order the graph makes them (start, then larger first), each
  into the smallest gap that fits among the blocks it meets in time, else on top. This is how an
  allocator walking the graph reuses freed memory: GE's BlockMemAssigner walks the nodes in
  topological order and gives an output a freed block it fits (hicann/ge
  ``compiler/graph/build/memory/block_mem_assigner.cc``, ``CanReuseBySize``), and TFLite's
  arena takes the smallest gap between the allocations whose lifetimes meet the new tensor's
  (tensorflow ``lite/simple_memory_arena.cc``, ``SimpleMemoryArena::Allocate``);
* :func:`greedy_by_size`: the same gap search, the blocks taken largest first (TFLite's "greedy
  by size", tensorflow ``lite/delegates/gpu/common/memory_management/greedy_by_size_assignment.cc``):
  the big tensors settle first and the small ones fill the holes;
* :func:`optimal`: the minimum peak over every assignment, for small problems. It rests on one
  fact: in an optimal plan sorted by offset, each block placed at the *lowest* offset that fits
  among the ones before it lands at or below its place in that plan (every block before it that
  meets it in time lies wholly below it, and moving those down keeps them below). So the optimum
  is the best "first fit" over all orders of the blocks: a search over orders, cut where the peak
  so far already reaches the best found, where two adjacent blocks that never meet could be
  swapped without changing anything, and stopped once the lower bound is reached. Orders grow as
  n!: past :data:`EXACT_LIMIT` blocks in one group of blocks that meet it raises ArgumentError.

:func:`first_fit` (blocks in the order they start, each at the lowest address free now) is how a
run-time allocator places tensors it is asked for one by one (the dynamic mode of
:mod:`npulab.graph.memory`).

Sizes are taken as given: :mod:`npulab.graph.memory` aligns them first, so every offset, a sum of
sizes, is aligned too.
"""
from __future__ import annotations

from typing import NamedTuple

from ..errors import ArgumentError

#: blocks in one group of blocks that meet in time beyond which :func:`optimal` refuses
EXACT_LIMIT = 10


class Block(NamedTuple):
    """A tensor to place: live over ``[start, end)`` (steps), ``size`` bytes (> 0)."""
    name: str
    start: int
    end: int
    size: int


def meets(a: Block, b: Block) -> bool:
    """Whether two blocks are live at some common step (they may not share bytes)."""
    return a.start < b.end and b.start < a.end


def max_live(blocks) -> int:
    """The most bytes live at one step: the lower bound of every plan's peak."""
    events = sorted([(b.start, b.size) for b in blocks] + [(b.end, -b.size) for b in blocks],
                    key=lambda e: (e[0], e[1]))          # at one step, frees before allocations
    live = best = 0
    for _, delta in events:
        live += delta
        best = max(best, live)
    return best


def peak(blocks, offsets: dict) -> int:
    """The top edge of a plan: the highest ``offset + size``."""
    return max((offsets[b.name] + b.size for b in blocks), default=0)


def _gap(block: Block, placed: list, offsets: dict, smallest: bool) -> int:
    """The offset for ``block`` among the placed blocks it meets in time: the lowest gap it fits
    (``smallest`` False), or the smallest such gap (True); above them all when none fits.
    ``placed`` is kept sorted by offset."""
    best, best_gap, top = None, None, 0
    for other in placed:
        if not meets(block, other):
            continue
        off = offsets[other.name]
        if off - top >= block.size:
            if not smallest:
                return top
            if best_gap is None or off - top < best_gap:
                best, best_gap = top, off - top
        top = max(top, off + other.size)
    return top if best is None else best


def place_in_order(blocks, smallest_gap: bool) -> dict:
    """Offsets for ``blocks`` placed one after another in the order given, each in a gap among
    the blocks already placed that it meets (see :func:`_gap`). Returns {name: offset}."""
    offsets, placed = {}, []
    for b in blocks:
        offsets[b.name] = off = _gap(b, placed, offsets, smallest_gap)
        i = 0
        while i < len(placed) and offsets[placed[i].name] <= off:
            i += 1
        placed.insert(i, b)
    return offsets


def best_fit(blocks) -> dict:
    """In the order the graph makes them (start, larger first), each block into the smallest gap
    it fits (the allocator's best fit)."""
    return place_in_order(sorted(blocks, key=lambda b: (b.start, -b.size, b.name)), True)


def greedy_by_size(blocks) -> dict:
    """Largest first (ties by start), each block into the smallest gap it fits (TFLite)."""
    return place_in_order(sorted(blocks, key=lambda b: (-b.size, b.start, b.name)), True)


def first_fit(blocks) -> dict:
    """In the order they start, each block at the lowest address free over its lifetime: what an
    allocator asked at run time for one tensor after another does."""
    return place_in_order(sorted(blocks, key=lambda b: (b.start, b.name)), False)


def groups(blocks) -> list[list[Block]]:
    """The blocks split where no lifetime spans a step boundary: plans of different groups never
    meet, so each can be planned alone and the peak is the largest group's."""
    out, end = [], None
    for b in sorted(blocks, key=lambda b: (b.start, b.end, b.name)):
        if end is None or b.start >= end:
            out.append([])
            end = b.end
        out[-1].append(b)
        end = max(end, b.end)
    return out


def _optimal_group(blocks: list, limit: int) -> dict:
    if len(blocks) > limit:
        raise ArgumentError(
            f"optimal: {len(blocks)} tensors live in one stretch of the graph, beyond the exact "
            f"search's limit of {limit} (it tries up to n! orders); plan with best_fit or "
            f"greedy_by_size, or raise limit= for a search that may take very long")
    bound = max_live(blocks)
    seeds = [best_fit(blocks), greedy_by_size(blocks)]
    best = min(seeds, key=lambda o: peak(blocks, o))
    state = {"best": dict(best), "peak": peak(blocks, best)}
    n = len(blocks)
    meet = [[meets(a, b) for b in blocks] for a in blocks]

    def search(order: list, placed: list, offsets: dict, top: int):
        if state["peak"] == bound:
            return
        if len(order) == n:
            state["best"], state["peak"] = dict(offsets), top
            return
        last = order[-1] if order else None
        for i in range(n):
            if i in order or (last is not None and i < last and not meet[i][last]):
                continue                       # swapping two blocks that never meet changes nothing
            b = blocks[i]
            off = _gap(b, placed, offsets, False)
            if max(top, off + b.size) >= state["peak"]:
                continue
            offsets[b.name] = off
            j = 0
            while j < len(placed) and offsets[placed[j].name] <= off:
                j += 1
            placed.insert(j, b)
            order.append(i)
            search(order, placed, offsets, max(top, off + b.size))
            order.pop()
            placed.pop(j)
            del offsets[b.name]

    search([], [], {}, 0)
    return state["best"]


def optimal(blocks, limit: int = EXACT_LIMIT) -> dict:
    """The offsets of least peak (exact; see the module docstring). Each group of blocks that
    meet in time (:func:`groups`) is searched alone; one of more than ``limit`` blocks raises
    ArgumentError."""
    offsets = {}
    for group in groups(blocks):
        offsets.update(_optimal_group(group, limit))
    return offsets


#: planner name -> function (blocks) -> {name: offset}
PLANNERS = {"best_fit": best_fit, "greedy_by_size": greedy_by_size, "optimal": optimal}


__all__ = ["Block", "EXACT_LIMIT", "PLANNERS", "best_fit", "first_fit", "greedy_by_size", "groups",
           "max_live", "meets", "optimal", "peak", "place_in_order"]
