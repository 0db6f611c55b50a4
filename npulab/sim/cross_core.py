"""Cross-core flags on a split chip (910B): which set raises which core's counter, and the cores
of a launch scheduled together.

Ascend C's ``CrossCoreSetFlag<mode, pipe>(id)`` and ``CrossCoreWaitFlag(id)`` (data/FACTS.md,
"Cross-core flags"; S12): every flag id of a core is a counter, initially 0. A wait lowers it by
one and, while it is 0, holds its pipe (the scalar unit and so everything after it, when the
wait is on PIPE_S). What a set raises depends on its mode:

* mode 2, AIC -> AIV: an AIC's set raises the counter of both AIVs of its AI core;
* mode 2, AIV -> AIC: the AIC's counter rises once *both* its AIVs have set (the j-th rise when
  each has set j times);
* mode 1: the two AIVs of an AI core; each one's counter rises once both have set;
* mode 0: every AIC (or every AIV) of the launch; each one's counter rises once all have set.

So a receiver's counter for one id has one *channel*: the cores whose sets raise it (a kernel
that feeds one counter from two channels gets a SyncError: which rise a wait then takes depends
on timing). With every set and every wait of a (core, id) on one pipe (also checked), they fire
and pass in program order, and the k-th wait on a counter takes its k-th rise: it completes at

    max(its start, max over the channel's senders of their k-th set's firing + flag latency)

(``chip.cross_core.flag_latency_cycles``). :func:`schedule_together` schedules a set of cores
that way, each core's :class:`~npulab.sim.timeline.Timeline` once: it runs every core until
each is done or stopped at a cross wait whose rise has not fired yet, gives every wait whose
rise is now known its time, and goes on. When no core can go on, the launch deadlocks: a
DeadlockError names every stopped wait, its flag, core and pipe, and how many sets its
channel's senders gave. A counter holds at most ``chip.cross_core.max_pending`` rises not yet
waited on; more is a SyncError (catlass's ``CrossCoreFlagWithReverse`` sends a reverse flag
every 16 sets for that reason).
"""
from __future__ import annotations

from ..errors import DeadlockError, SyncError
from .isa import Kind, Pipe

MODES = (0, 1, 2)
CROSS_SET, CROSS_WAIT = int(Kind.CROSS_SET), int(Kind.CROSS_WAIT)


def set_key(mode: int, flag_id: int) -> int:
    """The key column of a cross-core set: its mode and flag id (a wait's key is its flag id)."""
    return int(mode) * 16 + int(flag_id)


def nth(k: int) -> str:
    """1 -> '1st', 2 -> '2nd', 11 -> '11th'."""
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


class CrossFlags:
    """The cross-core flags of one launch: for every core and flag id, the pipe its sets and its
    waits use, and for every receiving counter its channel (mode, senders). Filled as the
    kernel issues (:func:`npulab.lang.mix.cross_core_set_flag`), read when the launch finishes."""

    def __init__(self, device):
        self.device = device
        self.pipes: dict = {}          # (core, id, "set" | "wait") -> (pipe, first instruction)
        self.channels: dict = {}       # (receiving core, id) -> (mode, senders (tuple of cores))
        self.sets: dict = {}           # (sending core, mode, id) -> [instruction, ...]
        self.waits: dict = {}          # (core, id) -> [instruction, ...]

    def __bool__(self) -> bool:
        return bool(self.sets or self.waits)

    def receivers(self, core, mode: int) -> tuple[tuple, tuple]:
        """(receivers, senders) of a set of ``mode`` from ``core``: the cores whose counter
        rises and the cores whose sets together make one rise."""
        dev = self.device
        if mode == 2:
            if core.role == "aic":
                return dev.aivs_of(core.group), (core.index,)
            aic = dev.aic_of(core.group)
            return (aic,), tuple(dev.aivs_of(core.group))
        if mode == 1:
            pair = tuple(dev.aivs_of(core.group))
            return pair, pair
        same = tuple(c.index for c in dev.cores if c.role == core.role)
        return same, same

    def _pipe(self, core, flag_id: int, what: str, pipe: Pipe, i: int, call: str) -> None:
        key = (core.index, flag_id, what)
        first = self.pipes.setdefault(key, (int(pipe), i))
        if first[0] != int(pipe):
            raise SyncError(
                f"{call}: {core.label} {'sets' if what == 'set' else 'waits on'} cross-core flag "
                f"{flag_id} on {Pipe(pipe).name} here and on {Pipe(first[0]).name} at #{first[1]}: a "
                f"counter is raised and taken in the order its sets fire and its waits pass, which "
                f"two pipes do not fix. Use one pipe per flag id on a core, or another id.")

    def add_set(self, core, mode: int, flag_id: int, pipe: Pipe, i: int, call: str) -> None:
        self._pipe(core, flag_id, "set", pipe, i, call)
        receivers, senders = self.receivers(core, mode)
        for r in receivers:
            have = self.channels.setdefault((r, flag_id), (mode, senders))
            if have != (mode, senders):
                dev = self.device
                raise SyncError(
                    f"{call}: cross-core flag {flag_id} of {dev.cores[r].label} is raised by "
                    f"mode-{have[0]} sets of {', '.join(dev.cores[c].label for c in have[1])} and now "
                    f"by a mode-{mode} set of {core.label}: which rise a wait then takes depends on "
                    f"timing. Give each channel its own flag id.")
        self.sets.setdefault((core.index, mode, flag_id), []).append(i)

    def add_wait(self, core, flag_id: int, pipe: Pipe, i: int, call: str) -> None:
        self._pipe(core, flag_id, "wait", pipe, i, call)
        self.waits.setdefault((core.index, flag_id), []).append(i)

    # -- what the functional run needs: rises issued so far -----------------------------------
    def issued_rises(self, core_index: int, flag_id: int) -> int:
        """How many rises of ``core``'s counter ``flag_id`` the kernel has issued so far (each
        sender's sets counted in program order); 0 while no set has named the counter."""
        ch = self.channels.get((core_index, flag_id))
        if ch is None:
            return 0
        mode, senders = ch
        return min(len(self.sets.get((s, mode, flag_id), ())) for s in senders)

    def issued_waits(self, core_index: int, flag_id: int) -> int:
        return len(self.waits.get((core_index, flag_id), ()))

    # -- the links between cores ----------------------------------------------------------------
    def components(self) -> list[list[int]]:
        """The cores in groups that share GM traffic to check or flags connect: an AI core's AIC
        and AIVs in a mix launch, and whatever flags join; every other core is a group of one.
        Each group sorted, in order of their first core."""
        dev = self.device
        parent = list(range(len(dev.cores)))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x
        for (r, _), (_, senders) in self.channels.items():
            for s in senders:
                parent[find(s)] = find(r)
        for c in dev.cores:
            parent[find(c.index)] = find(c.group)
        groups: dict = {}
        for c in range(len(parent)):
            groups.setdefault(find(c), []).append(c)
        return sorted(groups.values())

    def describe_wait(self, r: int, flag_id: int, k: int) -> str:
        """The k-th (0-based) wait of core ``r`` on ``flag_id``, and what its channel's senders gave."""
        dev = self.device
        core = dev.cores[r]
        i = self.waits[(r, flag_id)][k]
        pipe = Pipe(int(core.pipe[i])).name
        where = f"{core.label} waits at {dev.describe(core, i)} on cross-core flag {flag_id} (pipe {pipe}, its {nth(k + 1)} wait)"
        ch = self.channels.get((r, flag_id))
        if ch is None:
            return where + ", which no cross_core_set_flag of the launch raises"
        mode, senders = ch
        counts = ", ".join(f"{dev.cores[s].label} {len(self.sets.get((s, mode, flag_id), ()))}" for s in senders)
        rule = "each rise needs a set from every one of them" if len(senders) > 1 else "one rise a set"
        return where + f"; its mode-{mode} senders have set it: {counts} times ({rule})"


def schedule_together(flags: CrossFlags, cores: list, timelines: dict, kinds: dict, keys: dict,
                      latency: int) -> dict:
    """Schedule ``cores`` (indices; their Timelines in ``timelines``, their kind and key columns
    in ``kinds`` and ``keys``) together. Returns {(receiving core, wait instruction):
    [(sending core, set instruction), ...]}: the sets each cross wait's rise came from."""
    seen = {c: 0 for c in cores}
    fired: dict = {}                       # (sending core, mode, id) -> [firing time, ...]
    taken: dict = {}                       # (receiving core, id) -> waits given their time
    joins: dict = {}
    finished = {c: False for c in cores}
    counters = [(r, f) for (r, f) in flags.waits if r in finished]
    while True:
        for c in cores:
            if finished[c]:
                continue
            tl = timelines[c]
            try:
                finished[c] = tl.run()
            except DeadlockError as exc:        # on the core itself: which core, for the device
                exc.core = c
                raise
            kind, key = kinds[c], keys[c]
            for i in tl.ordered(seen[c], tl.count):
                if kind[i] == CROSS_SET:
                    mode, fid = divmod(int(key[i]), 16)
                    fired.setdefault((c, mode, fid), []).append(tl.end_of(i))
            seen[c] = tl.count
        if all(finished.values()):
            return joins
        resolved = False
        for r, f in counters:
            ch = flags.channels.get((r, f))
            if ch is None:
                continue
            mode, senders = ch
            waits = flags.waits[(r, f)]
            k = taken.get((r, f), 0)
            while k < len(waits) and all(len(fired.get((s, mode, f), ())) > k for s in senders):
                timelines[r].resolve(waits[k], max(fired[(s, mode, f)][k] for s in senders) + latency)
                joins[(r, waits[k])] = [(s, flags.sets[(s, mode, f)][k]) for s in senders]
                k += 1
                resolved = True
            taken[(r, f)] = k
        if not resolved:
            raise _deadlock(flags, timelines, finished, taken)


def _deadlock(flags: CrossFlags, timelines: dict, finished: dict, taken: dict) -> DeadlockError:
    """The DeadlockError of cores that all stopped: every stopped cross wait, its flag, core, pipe
    and what its senders gave; ``blocked``: (core, instruction) of every stopped head."""
    which = {(r, i): (f, k) for (r, f), waits in flags.waits.items() for k, i in enumerate(waits)}
    lines, blocked = [], []
    for c, done in finished.items():
        if done:
            continue
        for i in timelines[c].blocked():
            blocked.append((c, i))
            if (c, i) in which and which[(c, i)][1] >= taken.get((c, which[(c, i)][0]), 0):
                lines.append(flags.describe_wait(c, *which[(c, i)]))
    return DeadlockError(
        "deadlock between cores: " + "; ".join(lines) + ". A cross_core_wait_flag passes once its "
        "counter has risen, so every wait needs its set on the other core, and that set must not "
        "itself come after a wait that only this one's passing would release.", blocked=blocked)


def check_pending(flags: CrossFlags, timelines: dict, most: int, latency: int) -> None:
    """A counter may hold at most ``most`` rises no wait has taken yet: the j-th rise must come
    no earlier than the completion of the (j - most)-th wait (counted from 1). SyncError if not."""
    dev = flags.device
    for (r, f), (mode, senders) in flags.channels.items():
        sets = [flags.sets.get((s, mode, f), []) for s in senders]
        n = min(len(x) for x in sets)
        if n <= most:
            continue
        rises = [max(timelines[s].end_of(x[j]) for s, x in zip(senders, sets)) + latency for j in range(n)]
        waits = flags.waits.get((r, f), [])
        for j in range(most, n):
            w = j - most
            if w >= len(waits) or timelines[r].end_of(waits[w]) > rises[j]:
                core = dev.cores[r]
                raise SyncError(
                    f"cross-core flag {f} of {core.label} was raised {most + 1} times with "
                    f"no wait between (its {nth(j + 1)} rise, from "
                    f"{', '.join(dev.cores[s].label for s in senders)}, came at cycle {rises[j]}); a "
                    f"counter holds at most {most} (chip '{dev.chip.name}': cross_core.max_pending). Let "
                    f"the receiver answer with a reverse flag every few sets, as catlass's "
                    f"CrossCoreFlagWithReverse does, or wait more often.")


__all__ = ["MODES", "set_key", "nth", "CrossFlags", "schedule_together", "check_pending"]
