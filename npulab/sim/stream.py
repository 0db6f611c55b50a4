"""One core's instruction stream: what :meth:`~npulab.sim.device.Core.issue` appends to.

Every kernel-language call ends in ``issue``: one instruction (pipe, kind, opcode, duration,
flag key, name, bytes, FLOPs, energy, route, latency) appended in program order, counted
against the launch's instruction budget, and, when the race checker is on, the byte ranges it
reads and writes recorded. The launch reads the stream back as columns when it finishes.

This is the readable specification. ``npulab._stream`` (pyx/_stream.pyx) has the same
``Budget`` and ``Stream`` with the same signatures and results and keeps the numbers in typed
arrays: it optimises the call (no Python frame) and the columns (numpy reads them without
converting each element). A launch uses the one its side of :mod:`npulab.twins` names.
"""
from __future__ import annotations

#: the fields of an instruction, in the order of :meth:`Stream.issue`'s parameters
COLUMNS = ("pipe", "kind", "op", "dur", "key", "name", "nbytes", "flops", "energy", "route", "lat")


class Budget:
    """How many instructions a launch has issued (``issued``), over all its cores, and how many
    it may (``limit``)."""

    def __init__(self, limit: int):
        self.issued = 0
        self.limit = int(limit)


class Stream:
    """The stream of one core.

    budget: the launch's :class:`Budget`. check_races: record each instruction's byte ranges
    in ``accesses`` ({index: [(buffer, lo, hi, is_write), ...]}). over_budget: called with the
    instruction's name when the budget is exceeded; it raises."""

    def __init__(self, budget: Budget, check_races: bool, over_budget):
        self.budget, self.check_races, self.over_budget = budget, bool(check_races), over_budget
        self.accesses: dict[int, list] = {}
        self._cols: dict[str, list] = {name: [] for name in COLUMNS}

    def __len__(self) -> int:
        return len(self._cols["pipe"])

    def issue(self, pipe: int, kind: int, op: int, dur: int = 0, *, key: int = -1, name: str = "",
              nbytes: int = 0, flops: int = 0, energy: float = 0.0, route: str = "",
              reads=(), writes=(), lat: int = 0) -> int:
        """Append one instruction; return its index in the stream.

        dur: cycles it occupies its pipe; lat: cycles it is still in flight after that.
        Numbers are stored as their column's type: integers (a float is truncated toward zero),
        energy as a float. reads/writes: (buffer name, byte lo, byte hi) ranges."""
        b = self.budget
        b.issued += 1
        if b.issued > b.limit:
            self.over_budget(name)
        i = len(self)
        c = self._cols
        for col, v in (("pipe", pipe), ("kind", kind), ("op", op), ("dur", dur), ("key", key),
                       ("nbytes", nbytes), ("flops", flops), ("lat", lat)):
            c[col].append(int(v))
        c["energy"].append(float(energy))
        c["name"].append(name)
        c["route"].append(route)
        if (reads or writes) and self.check_races:
            self.accesses[i] = [(buf, lo, hi, False) for buf, lo, hi in reads] + \
                               [(buf, lo, hi, True) for buf, lo, hi in writes]
        return i

    def column(self, name: str) -> list:
        """One column, in program order (the list itself: settling a GM copy writes ``dur``)."""
        return self._cols[name]
