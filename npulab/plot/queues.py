"""A kernel's queues read off its trace: how many slots each queue used and how large they were,
how many tiles were copied into UB, and one buffer's allocations as a memory plan.

A queue's slots are the allocations its ``init_buffer`` made, logged with owner names such as
``in_x[1]`` (queue ``in_x``, slot 1) in ``trace.allocations``. These are the facts lab 04's
double-buffering check grades, and :func:`buffer_plan` is what :func:`~npulab.plot.memory_plan`
draws for it.
"""
from __future__ import annotations


def queue_slots(trace, core: int = 0) -> dict:
    """{queue: slots it used} from the trace's allocations (owner names like 'in_x[1]')."""
    out: dict[str, set] = {}
    for a in trace.allocations:
        if a.core == core and "[" in a.owner:
            name, idx = a.owner.rstrip("]").split("[")
            out.setdefault(name, set()).add(int(idx))
    return {k: len(v) for k, v in sorted(out.items())}


def queue_slot_bytes(trace, core: int = 0) -> dict:
    """{queue: bytes of its largest slot} from the trace's allocations."""
    out: dict[str, int] = {}
    for a in trace.allocations:
        if a.core == core and "[" in a.owner:
            name = a.owner.split("[")[0]
            out[name] = max(out.get(name, 0), a.size)
    return dict(sorted(out.items()))


def copies_in(trace, core: int = 0) -> int:
    """How many GM -> UB copies ``core`` issued (one per tile in a kernel with one input)."""
    return sum(1 for i in range(len(trace)) if trace.core[i] == core and trace.name[i].startswith("data_copy GM->UB"))


def buffer_plan(trace, buffer: str = "UB", core: int = 0, until: int | None = None) -> list:
    """The allocations of one buffer of one core as a memory plan: (name, start, end, offset,
    size), for :func:`~npulab.plot.memory_plan`; ``until``: only the first cycles (allocations
    starting later dropped, the others cut)."""
    end = until if until is not None else trace.cycles + 1
    return [(a.owner, a.start, min(a.end, end), a.offset, a.size) for a in trace.allocations
            if a.core == core and a.buffer == buffer and a.start < end]


__all__ = ["queue_slots", "queue_slot_bytes", "copies_in", "buffer_plan"]
