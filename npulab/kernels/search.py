"""The one tiling search of every kernel family, and the one cache of the tilings npulab picks.

What CANN's tuning tools do for a shape, in small: list every tiling that fits the buffers,
rank them with a quick analytic estimate, simulate the most promising in timing-only mode, keep
the fastest. A family (matmul, conv) says how for its problems, as a :class:`Family`: its
candidates, its estimate, a timing-only simulation, its default tiling, and how its tiles read
and write as JSON. Every family is searched by the same code:

* :func:`tune`, the autotuner: simulate the ``limit`` best-estimated candidates, keep the winner
  as the problem's *tuned* tiling;
* :func:`search`, for a family whose default tiling simulates a shortlist (conv): rank, simulate
  the shortlist the family picks from the ranking, keep the fastest as the problem's *default*;
* :func:`pick`: the tiling to run a problem with: its tuned tiling when it was tuned, else the
  family's default (what the dispatcher asks for).

**The cache** (:data:`CACHE`, a :class:`TilingCache`): one JSON file (``NPULAB_TILING_CACHE``,
default ``$XDG_CACHE_HOME/npulab/tilings.json``; plain JSON, never pickle) holds every tiling a
search simulated its way to, keyed by chip, op and problem, shared by processes and runs; in
front of it, for this process, a memory of every tiling anyone asked for (the dispatcher's, by
op, shapes and attributes, and the searches'). A version number in the file retires entries
when the cost model changes. ``NPULAB_MAX_OP_CACHE_SIZE`` (MB, default 500; -1 no limit), the
analog of CANN's ASCEND_MAX_OP_CACHE_SIZE, bounds the file: past it the oldest entries age out,
and the shapes they held are searched again when next compiled.

**Workers**: ``NPULAB_PARALLEL_COMPILER=N`` (the analog of CANN's TE_PARALLEL_COMPILER)
simulates candidates in N processes; default 1 (in this process). **Progress**: a tqdm bar
(its notebook form in Jupyter) for searches of more than a few candidates.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..chips import ChipSpec, chip_names, get_chip
from ..errors import ArgumentError, BufferOverflowError
from ..sim.cost import lower_bound_cycles

CACHE_ENV = "NPULAB_TILING_CACHE"
PARALLEL_ENV = "NPULAB_PARALLEL_COMPILER"
#: the cache file's size limit in MB, ASCEND_MAX_OP_CACHE_SIZE's analog (CANN: default 500 MB;
#: past it, entries not used for half an hour age out; -1 turns ageing off). Here the oldest
#: written entries age out as soon as the file passes the limit, down to REMAIN_RATIO of it
#: (op_cache.ini's remain_cache_size_ratio, default 80).
MAX_SIZE_ENV = "NPULAB_MAX_OP_CACHE_SIZE"
DEFAULT_MAX_MB = 500
REMAIN_RATIO = 0.8
#: 4: one cache for every family (matmul tuned, conv tuned and default); older files are ignored.
#: 5: on the 910 and 310 the cube's output goes through UB (the epilogue on the vector unit, UB in
#: the tilings' demand): tilings and cycles found before are not those chips' any more
#: 6: the calibrated model (issue 15): issue cost, cube fill/drain, L1 port, banks, launch cost,
#: sustained HBM and a line-level L2 change every searched cycle count
CACHE_VERSION = 6
DEFAULT_LIMIT = 12           # candidates :func:`tune` simulates
PROGRESS_MIN = 4             # show the bar from this many candidates on


@dataclass(frozen=True)
class Family:
    """How one kernel family is searched.

    op: the family's name in cache keys ("matmul", "conv"). tiling, tiles: its TilingData class
    (:mod:`npulab.kernels.tiling_data`: fields problem, tiles, name) and its tiles dataclass.
    candidates(problem, chip) -> iterable of tilings that fit. estimate(tiling, chip) -> float
    cycles (ranks only). simulate(tiling, chip) -> the Trace of a timing-only run (called in
    worker processes too). default(problem, chip) -> the tiling used when none is tuned.
    problems(tiling, chip) -> every reason the tiling cannot run (empty: it can)."""
    op: str
    tiling: type
    tiles: type
    candidates: Callable
    estimate: Callable
    simulate: Callable
    default: Callable
    problems: Callable

    def problem_key(self, problem) -> str:
        """The problem in a cache key (its own ``key()``)."""
        return problem.key()

    def cycles(self, tiling, chip) -> int:
        return int(self.simulate(tiling, chip).cycles)

    def encode(self, tiling) -> dict:
        """The tiles, JSON-ready."""
        return asdict(tiling.tiles)

    def decode(self, problem, tiles: dict, name: str = "tuned"):
        """The tiling of ``problem`` with these tiles (a TypeError for an entry that does not
        name the family's tiles)."""
        return self.tiling(problem, self.tiles(**tiles), name)

    def valid(self, tiling, chip) -> bool:
        return not self.problems(tiling, chip)

    def lower_bound(self, problem, chip) -> float:
        """MACs over the chip's cube rate: cycles no tiling can beat."""
        return lower_bound_cycles(chip, problem.macs, problem.np_dtype)


_FAMILIES: dict[type, Family] = {}


def register(problem_type: type, family: Family) -> Family:
    """Make ``family`` the one that searches problems of ``problem_type``."""
    _FAMILIES[problem_type] = family
    return family


def family_of(problem) -> Family:
    fam = _FAMILIES.get(type(problem))
    if fam is None:
        raise ArgumentError(f"no tiling search knows a {type(problem).__name__}; families: "
                            f"{', '.join(t.__name__ for t in _FAMILIES) or 'none imported'}")
    return fam


def family_named(op: str) -> Family:
    """The family whose cache-key name is ``op`` ("matmul", "conv")."""
    for fam in _FAMILIES.values():
        if fam.op == op:
            return fam
    raise ArgumentError(f"no tiling family named {op!r}; families: {', '.join(f.op for f in _FAMILIES.values())}")


def chip_key(chip: ChipSpec) -> str:
    """A chip in a cache key: a built-in one by name, any other by name and a digest of its
    figures (two chip files with one name do not share tilings)."""
    if chip.name in chip_names() and get_chip(chip.name) == chip:
        return chip.name
    blob = json.dumps({k: v for k, v in chip.to_dict().items() if k != "source"}, sort_keys=True)
    return f"{chip.name}@{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def cache_key(chip, op: str, problem_key: str, kind: str = "tuned") -> str:
    """``chip|op|problem`` for a tuned tiling, ``chip|op|problem|default`` for a searched default."""
    parts = [chip_key(get_chip(chip)), op, problem_key]
    return "|".join(parts if kind == "tuned" else parts + [kind])


# -- the cache --------------------------------------------------------------------------------
class TilingCache:
    """Tilings on disk (one JSON file) and in memory (this process)."""

    def __init__(self):
        self.memory: dict = {}
        self.stats: dict[str, list[int]] = {}        # namespace -> [hits, misses]
        self.aged = 0                                # entries this process aged out of the file

    @staticmethod
    def path() -> Path:
        """The file (``NPULAB_TILING_CACHE`` overrides the default)."""
        env = os.environ.get(CACHE_ENV)
        if env:
            return Path(env)
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "npulab" / "tilings.json"

    def memo(self, namespace: str, key, compute: Callable):
        """``compute()``, remembered under (namespace, key) for the process."""
        stats = self.stats.setdefault(namespace, [0, 0])
        try:
            found = self.memory[namespace, key]
        except KeyError:
            stats[1] += 1
            found = self.memory[namespace, key] = compute()
            return found
        stats[0] += 1
        return found

    def entries(self, path: Path | None = None) -> dict:
        """The file's entries ({} if it is missing, unreadable or of another version)."""
        path = self.path() if path is None else Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return {}
        if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    def put(self, key: str, entry: dict, path: Path | None = None, *, invalidate: bool = False) -> None:
        """Store one entry; the file is replaced at once (a reader never sees half of it). With
        ``invalidate`` the memory forgets what it derived from the file (a new tuned tiling
        changes what :func:`pick` and the dispatcher answer)."""
        path = self.path() if path is None else Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = self.entries(path)
        entries.pop(key, None)
        entries[key] = entry                       # the newest last: ageing drops from the front
        text = self._aged(entries)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        if invalidate:
            self.clear_memory()

    @staticmethod
    def max_bytes() -> int | None:
        """The file's size limit (``NPULAB_MAX_OP_CACHE_SIZE`` MB, default 500; -1: no ageing)."""
        raw = os.environ.get(MAX_SIZE_ENV, "").strip() or str(DEFAULT_MAX_MB)
        try:
            mb = float(raw)
        except ValueError:
            raise ArgumentError(f"{MAX_SIZE_ENV}={raw!r}: expected a size in MB (or -1 to turn ageing off)") from None
        if mb == -1:
            return None
        if mb <= 0:
            raise ArgumentError(f"{MAX_SIZE_ENV}={raw}: expected a positive size in MB, or -1 to turn ageing off")
        return int(mb * 1024 * 1024)

    def _aged(self, entries: dict) -> str:
        """The file's text, its oldest entries dropped while it passes the size limit (down to
        REMAIN_RATIO of it; the newest entry always stays)."""
        def text(e):
            return json.dumps({"version": CACHE_VERSION, "entries": e}, indent=1)
        out = text(entries)
        limit = self.max_bytes()
        if limit is None or len(out) <= limit:
            return out
        sizes = {k: len(json.dumps({k: v}, indent=1)) for k, v in entries.items()}
        total, keep = len(out), dict(entries)
        for k in list(entries)[:-1]:
            if total <= limit * REMAIN_RATIO:
                break
            total -= sizes[k]
            del keep[k]
        self.aged += len(entries) - len(keep)
        return text(keep)

    @contextlib.contextmanager
    def isolated(self, path):
        """Use the cache file ``path`` (and an empty memory) inside the block, as a cold compile
        on a fresh machine would; the previous file and memory come back after it."""
        saved_env, saved_memory = os.environ.get(CACHE_ENV), dict(self.memory)
        os.environ[CACHE_ENV] = str(path)
        self.memory.clear()
        try:
            yield self
        finally:
            if saved_env is None:
                os.environ.pop(CACHE_ENV, None)
            else:
                os.environ[CACHE_ENV] = saved_env
            self.memory.clear()
            self.memory.update(saved_memory)

    def clear_memory(self) -> None:
        self.memory.clear()
        self.stats.clear()


CACHE = TilingCache()


def _stored(fam: Family, problem, chip: ChipSpec, kind: str):
    """The cached tiling of this kind for ``problem``, or None (missing, stale or not fitting)."""
    entry = CACHE.entries().get(cache_key(chip, fam.op, fam.problem_key(problem), kind))
    if not isinstance(entry, dict):
        return None, None
    try:
        t = fam.decode(problem, entry["tiles"], "tuned" if kind == "tuned" else "default")
    except (KeyError, TypeError, ValueError):
        return None, None                      # a stale or hand-edited entry: ignore it
    return (t, entry) if fam.valid(t, chip) else (None, None)


def lookup(problem, chip):
    """The tuned tiling of ``problem`` on ``chip``, or None if it was never tuned."""
    chip = get_chip(chip)
    return _stored(family_of(problem), problem, chip, "tuned")[0]


def pick(problem, chip):
    """The tiling to run ``problem`` with: its tuned tiling if it has one, else the family's
    default tiling (remembered for the process)."""
    chip = get_chip(chip)
    fam = family_of(problem)

    def choose():
        tuned = _stored(fam, problem, chip, "tuned")[0]
        return tuned if tuned is not None else fam.default(problem, chip)
    return CACHE.memo("pick", (chip_key(chip), fam.op, problem), choose)


# -- simulating candidates ---------------------------------------------------------------------
def parallel_workers() -> int:
    """Worker processes for a search: ``NPULAB_PARALLEL_COMPILER`` (default 1 = in-process)."""
    raw = os.environ.get(PARALLEL_ENV, "1").strip() or "1"
    try:
        n = int(raw)
    except ValueError:
        raise ArgumentError(f"{PARALLEL_ENV}={raw!r}: expected a whole number of worker processes") from None
    if n < 1:
        raise ArgumentError(f"{PARALLEL_ENV}={n}: need at least 1 worker process")
    return n


def progress_bar(total: int, label: str, stream=None):
    """A tqdm bar: on ``stream`` if given, else the notebook widget in Jupyter or stderr. It
    shows the count and the best cycles so far, no rates (figures that depend on the machine)."""
    if stream is None:
        from tqdm.auto import tqdm
        stream = sys.stderr
    else:
        from tqdm import tqdm
    return tqdm(total=total, desc=label, file=stream, ascii=True, leave=True,
                bar_format="{desc} [{bar:24}] {n_fmt}/{total_fmt}{postfix}")


def _simulate_one(op: str, tiling, chip):
    """Worker body (also used in-process): the cycles of one tiling."""
    fam = next(f for f in _FAMILIES.values() if f.op == op)
    return fam.cycles(tiling, chip)


def simulate_all(fam: Family, tilings: list, chip: ChipSpec, *, workers: int | None = None,
                 bar=None) -> list[int]:
    """Cycles of every tiling, in order, in ``workers`` processes (default
    ``NPULAB_PARALLEL_COMPILER``); ``bar`` (a progress bar) is advanced with the best so far."""
    workers = parallel_workers() if workers is None else int(workers)
    results: list[int | None] = [None] * len(tilings)
    best = None

    def done(i, cycles):
        nonlocal best
        results[i] = cycles
        best = cycles if best is None else min(best, cycles)
        if bar is not None:
            bar.set_postfix_str(f"best {best:,} cycles", refresh=False)
            bar.update(1)

    if workers > 1 and len(tilings) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed
        # fork: workers inherit the loaded package and need no __main__ guard in the caller
        method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        ref = chip.name if chip.name in chip_names() and get_chip(chip.name) == chip else chip
        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method)) as pool:
            futs = {pool.submit(_simulate_one, fam.op, t, ref): i for i, t in enumerate(tilings)}
            for fut in as_completed(futs):
                done(futs[fut], fut.result())
    else:
        for i, t in enumerate(tilings):
            done(i, fam.cycles(t, chip))
    return results


def rank(problem, chip) -> list[tuple]:
    """Every candidate of ``problem`` as (estimate, index, tiling), best estimate first."""
    chip = get_chip(chip)
    fam = family_of(problem)
    scored = [(fam.estimate(t, chip), i, t) for i, t in enumerate(fam.candidates(problem, chip))]
    if not scored:
        raise BufferOverflowError(f"no {fam.op} tiling fits chip '{chip.name}' for {fam.problem_key(problem)}")
    scored.sort(key=lambda s: (s[0], s[1]))
    return scored


# -- the searches --------------------------------------------------------------------------------
@dataclass
class TuneResult:
    tiling: object
    cycles: int
    lower_bound_cycles: float
    searched: list = field(default_factory=list)      # [(recipe text, cycles)] in search order
    from_cache: bool = False
    seconds: float = 0.0

    @property
    def utilization(self) -> float:
        return self.lower_bound_cycles / self.cycles if self.cycles else 0.0


def tune(problem, chip, *, limit: int = DEFAULT_LIMIT, workers: int | None = None,
         progress: bool | None = None, use_cache: bool = True, force: bool = False,
         stream=None) -> TuneResult:
    """Find the fastest tiling of ``problem``: simulate the ``limit`` best-estimated candidates
    in timing-only mode (in ``workers`` processes), store the winner as the problem's tuned
    tiling and return it. A cached answer is returned without searching unless ``force``.
    ``progress``: True / False forces the bar on / off; None shows it from PROGRESS_MIN
    candidates on (on ``stream`` if given)."""
    chip = get_chip(chip)
    fam = family_of(problem)
    lb = fam.lower_bound(problem, chip)
    if use_cache and not force:
        t, entry = _stored(fam, problem, chip, "tuned")
        if t is not None:
            return TuneResult(t, int(entry["cycles"]), lb, [], from_cache=True)
    t0 = time.perf_counter()
    cands = [t for _, _, t in rank(problem, chip)[:limit]]
    show = (len(cands) >= PROGRESS_MIN) if progress is None else progress
    bar = progress_bar(len(cands), f"autotune {fam.op} {fam.problem_key(problem)}", stream) if show else None
    try:
        results = simulate_all(fam, cands, chip, workers=workers, bar=bar)
    finally:
        if bar is not None:
            bar.close()
    i_best = min(range(len(cands)), key=lambda i: (results[i], i))
    winner = fam.decode(problem, fam.encode(cands[i_best]), name="tuned")
    searched = [(c.recipe(), int(r)) for c, r in zip(cands, results)]
    res = TuneResult(winner, int(results[i_best]), lb, searched, False, time.perf_counter() - t0)
    if use_cache:
        CACHE.put(cache_key(chip, fam.op, fam.problem_key(problem)),
                  {"tiles": fam.encode(winner), "cycles": res.cycles, "lower_bound_cycles": lb,
                   "searched": len(cands)}, invalidate=True)
    return res


def search(problem, chip, shortlist: Callable, *, kind: str = "default", name: str = "default") -> object:
    """A default tiling by simulation: rank every candidate, simulate ``shortlist(ranked)``
    (a list of (estimate, index, tiling) the family chooses from the ranking; an empty one means
    the estimate decides), keep the fewest simulated cycles (ties: the better estimate). The
    answer is stored in the cache under ``kind`` (a family with more than one shortlist rule
    names each), so later runs and processes do not search again."""
    chip = get_chip(chip)
    fam = family_of(problem)
    key = cache_key(chip, fam.op, fam.problem_key(problem), kind)

    def find():
        stored, _ = _stored(fam, problem, chip, kind)
        if stored is not None:
            return stored
        scored = rank(problem, chip)
        pick_ = shortlist(scored)
        if not pick_:
            return fam.decode(problem, fam.encode(scored[0][2]), name=name)
        cycles = simulate_all(fam, [t for _, _, t in pick_], chip)
        best = min(zip(cycles, pick_), key=lambda s: (s[0], s[1][1]))
        winner = fam.decode(problem, fam.encode(best[1][2]), name=name)
        CACHE.put(key, {"tiles": fam.encode(winner), "cycles": int(best[0]),
                        "lower_bound_cycles": fam.lower_bound(problem, chip), "searched": len(pick_)})
        return winner
    return CACHE.memo("search", key, find)


__all__ = ["Family", "register", "family_of", "family_named", "chip_key", "cache_key", "TilingCache", "CACHE", "lookup",
           "pick", "parallel_workers", "progress_bar", "simulate_all", "rank", "TuneResult", "tune", "search",
           "CACHE_ENV", "PARALLEL_ENV", "MAX_SIZE_ENV", "DEFAULT_MAX_MB", "REMAIN_RATIO", "CACHE_VERSION", "DEFAULT_LIMIT", "PROGRESS_MIN"]
