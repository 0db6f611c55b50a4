"""Checkers of lab 03 (tiling): a tiling function for Add over cores with tails, a tiling of
whole rows for a row-wise operator, which buffers a matmul tiling overflows, how many cores
saturate HBM, and the challenge: a 2-D tiling of a row scale of a few very long rows."""
from __future__ import annotations

import functools

import numpy as np

from ...arch import BLOCK_BYTES, DEFAULT_CHIP, ceil_div
from ...chips import get_chip
from ...errors import AlignmentError, BufferOverflowError, ShapeError
from ...kernels.elementwise import MIN_TILES_PER_BLOCK, QUEUES_PER_TILE
from ...kernels.examples.row_scale import launch_row_scale, row_bytes, row_demand
from ...kernels.examples.row_scale_2d import RowScale2DTiling
from ...kernels.matmul import buffer_demand
from ...sim.memory import fmt_bytes
from .. import lab03 as ref
from . import exercise, failed, is_blank, not_attempted, passed, perf_verdict, screen_function

#: (n, dtype, chip, buffer_num) the Add tiling function is run on: even splits, tails, tiny n
ADD_CASES = ((65536, np.float16, "teach", 2), (17, np.float16, "teach", 2),
             (5000, np.float16, "teach", 2), (1000, np.float32, "teach", 1),
             (100_003, np.float16, "910", 2))
BUFFERS = ("L1", "L0A", "L0B", "L0C")


def _fields(t, names):
    missing = [f for f in names if not hasattr(t, f)]
    if missing:
        return None, f"it has no {', '.join(missing)}"
    vals = {}
    for f in names:
        v = getattr(t, f)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            return None, f"{f}={v!r} is not a whole number"
        vals[f] = int(v)
    return vals, None


def ub_tile(chip, itemsize: int, buffer_num: int) -> int:
    """Largest Add tile (elements, whole 32-byte blocks) whose 3 x buffer_num slots fit UB,
    found by search: grow the tile a 32-byte block at a time while it fits."""
    per_block, tile = BLOCK_BYTES // itemsize, 0
    while QUEUES_PER_TILE * buffer_num * (tile + per_block) * itemsize <= chip.buffers.ub:
        tile += per_block
    return tile


def block_tile(block_factor: int, itemsize: int) -> int:
    """The shortest tile (whole 32-byte blocks) that covers a block in MIN_TILES_PER_BLOCK tiles,
    found by search."""
    per_block = BLOCK_BYTES // itemsize
    tile = per_block
    while ceil_div(block_factor, tile) > MIN_TILES_PER_BLOCK:
        tile += per_block
    return tile


def even_split(n: int, cores: int, itemsize: int) -> int:
    """The shortest block_factor (whole 32-byte blocks) with which ``cores`` blocks cover n,
    found by search: the longest block, which sets the time, as short as alignment allows."""
    per_block = BLOCK_BYTES // itemsize
    bf = per_block
    while bf * cores < n:
        bf += per_block
    return bf


@exercise("03", "tiling across cores: blocks start on 32-byte boundaries and the longest is as short "
                "as it can be; a tile fits UB's 3 queues x buffer_num slots and still cuts its block "
                "into MIN_TILES_PER_BLOCK tiles",
          key=("round_up(ceil_div(n, chip.ai_cores), per_block)", "// (3 * buffer_num)",
               "ceil_div(block_factor, MIN_TILES_PER_BLOCK)"))
def add_tiling_fn(fn):
    """``fn(n, dtype, chip, buffer_num) -> AddTiling``: the best tiling the spec's constraints
    allow, compared with references found by search (:func:`even_split`, :func:`ub_tile`,
    :func:`block_tile`) on problems with tails."""
    if (v := screen_function(fn, "my_add_tiling", "tiling function")) is not None:
        return v
    for n, dtype, chip_name, bn in ADD_CASES:
        chip = get_chip(chip_name)
        dt = np.dtype(dtype)
        item, per_block = dt.itemsize, BLOCK_BYTES // dt.itemsize
        case = f"n={n:,}, {dt.name}, chip '{chip_name}' ({chip.ai_cores} cores), buffer_num={bn}"
        t = fn(n, dt, chip, bn)
        v, why = _fields(t, ("total", "block_factor", "block_dim", "tile", "buffer_num"))
        if v is None:
            return failed(f"for {case} the answer is not an AddTiling", expected="AddTiling(total, "
                          "block_factor, block_dim, tile, buffer_num)", got=f"{t!r}: {why}",
                          hint="return AddTiling(n, block_factor, block_dim, tile, buffer_num).")
        bf, bd, tile = v["block_factor"], v["block_dim"], v["tile"]
        want_bf = even_split(n, chip.ai_cores, item)
        want_bd = ceil_div(n, want_bf)
        got = f"block_factor={bf}, block_dim={bd}, tile={tile}"
        if v["total"] != n or v["buffer_num"] != bn:
            return failed(f"for {case}: total and buffer_num must be passed through",
                          expected=f"total={n}, buffer_num={bn}", got=f"total={v['total']}, "
                          f"buffer_num={v['buffer_num']}", hint="the kernel reads both from the tiling.")
        if bf < 1 or bf % per_block:
            return failed(f"for {case}: block_factor is not whole 32-byte blocks",
                          expected=f"a multiple of {per_block} ({dt.name}), here {want_bf}", got=got,
                          hint=f"every block starts at block_idx x block_factor, and a DMA copy starts on "
                               f"a 32-byte boundary: block_factor must be a multiple of {per_block} "
                               f"elements.")
        if bf * bd < n:
            hint = ("n // cores drops the remainder: the last elements belong to no block; divide "
                    "rounding up." if bf * chip.ai_cores < n else
                    "block_dim = ceil(n / block_factor): enough blocks to cover every element.")
            return failed(f"for {case}: the blocks cover {bf * bd:,} of {n:,} elements",
                          expected=f"block_factor={want_bf}, block_dim={want_bd}", got=got, hint=hint)
        if bd > chip.ai_cores or (bd - 1) * bf >= n:
            hint = ("block_factor x cores must reach n: when you align the share of a core to whole "
                    "32-byte blocks, round it up, never down." if bf * chip.ai_cores < n else
                    "block_dim = ceil(n / block_factor): a tiny n needs fewer cores.")
            return failed(f"for {case}: block_dim={bd} launches blocks with nothing to do or more "
                          f"than the {chip.ai_cores} cores", expected=f"block_factor={want_bf}, "
                          f"block_dim={want_bd}", got=got, hint=hint)
        if bf != want_bf:
            return failed(f"for {case}: block_factor is not the even split",
                          expected=f"block_factor={want_bf}", got=got,
                          hint="the slowest core sets the time: the shortest aligned block_factor that "
                               "still covers n with the chip's cores spreads the work evenly; a bigger "
                               "block leaves cores idle or short of work.")
        top, cap = ub_tile(chip, item, bn), block_tile(bf, item)
        want_tile = min(top, cap)
        expected_tile = (f"tile={want_tile} (the longest that fits UB: {top}; the shortest that covers the "
                         f"block in {MIN_TILES_PER_BLOCK} tiles: {cap})")
        if tile < 1 or tile % per_block:
            return failed(f"for {case}: tile={tile} is not whole 32-byte blocks",
                          expected=f"a positive multiple of {per_block}", got=got,
                          hint="round the UB share down to 32 bytes before converting to elements.")
        need = QUEUES_PER_TILE * bn * tile * item
        if need > chip.buffers.ub:
            if tile == top * item and QUEUES_PER_TILE * tile * item <= chip.buffers.ub:
                hint = (f"that tile is {item}x the largest: either it is counted in bytes (the tiling "
                        f"counts elements: divide by the itemsize) or sized for one slot (each queue "
                        f"holds buffer_num={bn} slots).")
            elif tile == top * item:
                hint = "that is the tile in bytes; the tiling counts elements: divide by the itemsize."
            elif QUEUES_PER_TILE * tile * item <= chip.buffers.ub:
                hint = (f"each queue holds buffer_num={bn} slots: 3 x {bn} x tile x {item} B must "
                        f"fit {chip.buffers.ub:,} B.")
            else:
                hint = "UB holds 3 queues (x, y in; z out), buffer_num slots each, of one tile."
            return failed(f"for {case}: the tile does not fit UB",
                          expected=f"3 x {bn} x tile x {item} B <= {chip.buffers.ub:,} B (tile <= {top})",
                          got=f"{got}: {need:,} B", hint=hint)
        if tile > bf:
            return failed(f"for {case}: the tile is longer than its block", expected=expected_tile,
                          got=got, hint=f"a block holds block_factor={bf} elements: a longer tile only "
                                        f"reserves UB that no element fills, and leaves the block one "
                                        f"tile, which the pipes cannot overlap (lab 04).")
        if tile > cap:
            return failed(f"for {case}: the block is cut into {-(-bf // tile)} tile(s)", expected=expected_tile,
                          got=got, hint=f"a block must still be cut into {MIN_TILES_PER_BLOCK} tiles: with "
                                        f"fewer, longer tiles it has too few for the pipes to overlap "
                                        f"(lab 04), however much UB is free.")
        if tile < want_tile:
            if tile == cap - per_block or tile == (bf // MIN_TILES_PER_BLOCK) // per_block * per_block:
                hint = (f"the shortest tile that covers the block in {MIN_TILES_PER_BLOCK} tiles, aligned: "
                        f"round up to whole 32-byte blocks, never down ({cap} here).")
            else:
                hint = ("every tile pays fixed costs (instructions, flags, start-ups): take the larger "
                        "tile the two caps allow, the smaller of the UB cap and the block cap.")
            return failed(f"for {case}: the tile is smaller than it needs to be", expected=expected_tile,
                          got=got, hint=hint)
        x, y = ref.inputs(n, dt)
        try:
            z, _ = ref.run_add_tiling(t, x, y, chip=chip)
        except (AlignmentError, BufferOverflowError) as err:
            return failed(f"for {case} the kernel stopped", got=f"{type(err).__name__}: {err}",
                          hint="block_factor and tile must be whole 32-byte blocks.")
        if not np.array_equal(z, (x + y).astype(dt)):
            bad = int(np.flatnonzero(z != x + y)[0])
            return failed(f"for {case} z is not x + y", expected="z = x + y everywhere",
                          got=f"first wrong element at {bad}", hint="every element must fall in one block.")
    t = fn(ref.TAIL_N, np.dtype(np.float16), get_chip(ref.CHIP), 2)
    return passed(f"the best tiling the constraints allow on all {len(ADD_CASES)} problems (even "
                  f"splits, n=17, tails, fp32, the 910's 32 cores): the package's add_tiling makes "
                  f"the same. For n={ref.TAIL_N:,} on the teaching chip:", *ref.describe(t).splitlines())


def _row_ref(rows, cols, dtype, chip, bn=2):
    rb = row_bytes(cols, dtype)
    rpc = ceil_div(rows, chip.ai_cores)
    return rpc, ceil_div(rows, rpc), min(rpc, (chip.buffers.ub - rb) // (2 * bn * rb))


@exercise("03", "2-D tiling: whole rows per core and per tile; UB holds gamma + 2 queues x "
                "buffer_num x rows_per_tile rows",
          key=("ceil_div(rows, chip.ai_cores)", "(chip.buffers.ub - rb) // (2 * 2 * rb)"))
def row_tiling(fn):
    """``fn(rows, cols, dtype, chip) -> RowScaleTiling`` (buffer_num 2) for KernelRowScale."""
    if (v := screen_function(fn, "my_row_tiling", "tiling function")) is not None:
        return v
    for rows, cols, dtype, chip_name in ref.ROW_CASES:
        chip, dt = get_chip(chip_name), np.dtype(dtype)
        case = f"{rows} x {cols} {dt.name} on chip '{chip_name}' ({chip.ai_cores} cores, UB {fmt_bytes(chip.buffers.ub)})"
        t = fn(rows, cols, dt, chip)
        v, why = _fields(t, ("rows", "cols", "rows_per_core", "block_dim", "rows_per_tile", "buffer_num"))
        if v is None:
            return failed(f"for {case} the answer is not a RowScaleTiling", expected="RowScaleTiling(rows, "
                          "cols, rows_per_core, block_dim, rows_per_tile, buffer_num)", got=f"{t!r}: {why}",
                          hint="return RowScaleTiling(rows, cols, rows_per_core, block_dim, rows_per_tile, 2).")
        rpc, bd, rpt = v["rows_per_core"], v["block_dim"], v["rows_per_tile"]
        want = _row_ref(rows, cols, dt, chip)
        got = f"rows_per_core={rpc}, block_dim={bd}, rows_per_tile={rpt}"
        expected = f"rows_per_core={want[0]}, block_dim={want[1]}, rows_per_tile={want[2]}"
        if (v["rows"], v["cols"], v["buffer_num"]) != (rows, cols, 2):
            return failed(f"for {case}: rows, cols and buffer_num=2 must be passed through",
                          expected=f"rows={rows}, cols={cols}, buffer_num=2",
                          got=f"rows={v['rows']}, cols={v['cols']}, buffer_num={v['buffer_num']}",
                          hint="the kernel reads them from the tiling.")
        if rpc < 1 or rpc * bd < rows:
            return failed(f"for {case}: the blocks hold {max(0, rpc * bd)} of {rows} rows",
                          expected=expected, got=got,
                          hint="rows_per_core = ceil(rows / cores): rows // cores loses the remainder.")
        if bd > chip.ai_cores or (bd - 1) * rpc >= rows:
            return failed(f"for {case}: block_dim={bd} launches empty blocks or more than "
                          f"{chip.ai_cores} cores", expected=expected, got=got,
                          hint="rows_per_core = ceil(rows / cores): rows // cores loses the remainder."
                          if rpc * chip.ai_cores < rows else "block_dim = ceil(rows / rows_per_core).")
        if rpc != want[0]:
            return failed(f"for {case}: the rows are not split evenly", expected=expected, got=got,
                          hint="rows_per_core = ceil(rows / cores) keeps every core equally busy.")
        if rpt < 1:
            return failed(f"for {case}: a tile must hold at least one row", expected=expected, got=got,
                          hint="rows_per_tile counts whole rows: at least 1.")
        need = row_demand(rpt, cols, dt)
        if need > chip.buffers.ub:
            rb = row_bytes(cols, dt)
            if 4 * rpt * rb <= chip.buffers.ub:
                hint = (f"gamma ({fmt_bytes(rb)}, one row) stays in UB for the whole kernel: take it "
                        f"off UB before dividing the rest among the queues.")
            elif 2 * rpt * rb + rb <= chip.buffers.ub:
                hint = "in_x and out_z each hold buffer_num=2 slots: 2 queues x 2 slots x rows_per_tile rows."
            else:
                hint = "UB holds gamma + in_x and out_z, 2 slots each, of rows_per_tile whole rows."
            return failed(f"for {case}: the tile does not fit UB",
                          expected=f"gamma + 2 x 2 x rows_per_tile x {rb:,} B <= {chip.buffers.ub:,} B",
                          got=f"{got}: {need:,} B", hint=hint)
        if rpt > rpc:
            return failed(f"for {case}: a tile holds more rows than the block has", expected=expected,
                          got=got, hint=f"rows_per_tile is no more than rows_per_core={rpc}: the slots of a "
                                        f"longer tile reserve UB for rows that never come. Take "
                                        f"min(rows_per_core, the rows that fit).")
        if rpt < want[2]:
            return failed(f"for {case}: tiles are smaller than UB allows", expected=expected, got=got,
                          hint="take as many whole rows as fit (no more than a block has): fewer, "
                               "longer tiles pay the per-tile costs fewer times.")
        x, g = ref.row_inputs(rows, cols, dt)
        z, _ = launch_row_scale(x, g, t, chip=chip)
        if not np.array_equal(z, x * g):
            return failed(f"for {case} z is not x * gamma", expected="every row scaled",
                          got=f"{int(np.sum(np.any(z != x * g, axis=1)))} wrong rows",
                          hint="every row must fall in exactly one block.")
    rows, cols, dt, chip_name = ref.ROW_CASES[1]
    t = fn(rows, cols, np.dtype(dt), get_chip(chip_name))
    return passed(f"whole rows fit UB in all {len(ref.ROW_CASES)} problems. {rows} x {cols} on the "
                  f"teaching chip: {t.rows_per_core} rows per core, {t.rows_per_tile} row per tile "
                  f"({fmt_bytes(row_demand(t.rows_per_tile, cols, dt))} of UB with gamma); a "
                  f"row longer than UB holds must be split along its columns (exercise 5).")


def _as_names(answer):
    if isinstance(answer, str) or not isinstance(answer, (set, frozenset, list, tuple)):
        return None
    if not all(isinstance(a, str) for a in answer):
        return None
    return {a.strip().upper() for a in answer}


@exercise("03", "buffer demand of a matmul tiling: buffers x tile bytes x buffer count, "
                "the L0C accumulator in fp32", key=('{"L1", "L0C"}',))
def overflowing_buffers(answer):
    """The set of buffers (of L1, L0A, L0B, L0C) that lab03.predict_tiling() overflows on the
    teaching chip."""
    if is_blank(answer):
        return not_attempted()
    chip = get_chip(ref.CHIP)
    t = ref.predict_tiling()
    demand = buffer_demand(t)
    want = {b for b, (need, _) in demand.items() if need > chip.buffer_bytes(b)}
    table = [f"{b}: {how} = {fmt_bytes(need)} of {fmt_bytes(chip.buffer_bytes(b))}"
             f"{'  OVERFLOWS' if need > chip.buffer_bytes(b) else ''}" for b, (need, how) in demand.items()]
    got = _as_names(answer)
    if got is None:
        return failed("the answer should be a set of buffer names", expected=repr(sorted(want)),
                      got=repr(answer), hint='a set of strings such as {"L0A"} (set() if none overflows).')
    if got == want:
        return passed(f"{' and '.join(sorted(want))} overflow:", *table)
    single = {b for b, (need, _) in demand.items()
              if need // {"L1": t.tiles.l1_buffers, "L0A": t.tiles.l0_buffers, "L0B": t.tiles.l0_buffers,
                          "L0C": t.tiles.l0c_buffers}[b] > chip.buffer_bytes(b)}
    fp16_acc = {b for b in want if b != "L0C"} | ({"L0C"} if demand["L0C"][0] // 2 > chip.buffers.l0c else set())
    unknown = got - set(BUFFERS)
    if unknown:
        hint = f"the tiling's buffers are {', '.join(BUFFERS)} (UB is not used by a matmul)."
    elif got == single:
        hint = "each buffer holds buffer_num copies of its tile (2 = double buffering): double them."
    elif got == fp16_acc:
        hint = "L0C accumulates in fp32: 4 bytes per element of the TILE_M x TILE_N tile, not 2."
    elif want - got:
        b = sorted(want - got)[0]
        hint = f"{b} overflows too: {demand[b][1]} = {fmt_bytes(demand[b][0])} > {fmt_bytes(chip.buffer_bytes(b))}."
    else:
        b = sorted(got - want)[0]
        hint = f"{b} fits: {demand[b][1]} = {fmt_bytes(demand[b][0])} <= {fmt_bytes(chip.buffer_bytes(b))}."
    return failed("not the buffers that overflow", expected=repr(sorted(want)), got=repr(sorted(got)),
                  hint=hint)


# -- exercise 4: where more cores stop helping ------------------------------------------------
@functools.lru_cache(maxsize=1)
def _sweep() -> tuple:
    """(cores, cycles) of lab03.cores_sweep(), measured once."""
    return tuple((r["cores"], r["cycles"]) for r in ref.cores_sweep())


def knee_of(sweep) -> int:
    """The fewest cores of the sweep whose time is within 10% of the most cores' time."""
    best = sweep[-1][1]
    return next(k for k, cycles in sweep if cycles <= 1.1 * best)


@exercise("03", "shared HBM: each core's copy pipes move a fixed number of bytes a cycle; the cores "
                "together cannot move more than HBM sustains", key=("* 6 / 4",))
def knee_cores(answer):
    """The fewest cores (of lab03.SWEEP_CORES) with which the 4 Mi-element fp16 Add on the 910 is
    within 10% of its 32-core time."""
    if is_blank(answer):
        return not_attempted()
    if isinstance(answer, bool) or not isinstance(answer, (int, np.integer)) or answer not in ref.SWEEP_CORES:
        return failed("the answer should be one of the sweep's core counts", expected=repr(ref.SWEEP_CORES),
                      got=repr(answer), hint="a whole number of cores, one of 1, 2, 4, 8, 16, 32.")
    sweep = _sweep()
    want = knee_of(sweep)
    c = get_chip(DEFAULT_CHIP)
    lines = [f"{k:>2} cores: {cycles:>8,} cycles" for k, cycles in sweep]
    if answer == want:
        return passed(f"from {want} cores on the Add waits on HBM, not on the cores' pipes:", *lines)
    one = c.pipes.mte2_bytes_per_cycle * 6 / 4
    if answer > want:
        hint = (f"{want} cores already ask HBM for {want * one:,.0f} B a cycle (each moves x and y through "
                f"MTE2 at {c.pipes.mte2_bytes_per_cycle:g} B a cycle and writes z alongside), more than "
                f"the {c.gm_sustained_bytes_per_cycle:,.0f} it sustains for all cores together.")
    else:
        hint = (f"{answer} core(s) ask HBM for only {answer * one:,.0f} B a cycle, less than the "
                f"{c.gm_sustained_bytes_per_cycle:,.0f} it sustains: each core has its own pipes, so more "
                f"cores still help.")
    return failed("not where the speed-up stops", expected="the fewest cores within 10% of 32 cores' time",
                  got=f"{answer} cores", hint=hint)


# -- the challenge: a 2-D tiling of a row scale of a few very long rows -------------------------
#: the reference: both rows in every block (one gamma copy serves them), the columns cut 16 ways
REFERENCE_2D = RowScale2DTiling(*ref.WIDE_SHAPE, rows_per_core=2, cols_per_core=ref.WIDE_SHAPE[1] // 32,
                                rows_per_tile=2, cols_per_tile=4096)


@functools.lru_cache(maxsize=1)
def reference_2d_cycles() -> int:
    """The reference tiling's simulated cycles on the challenge shape (measured once)."""
    return ref.run_2d(REFERENCE_2D)[3].cycles


def _run_2d_case(fn, rows, cols, dt, chip_name, mode):
    """(tiling, x, gamma, z, trace) of the learner's tiling on one problem, or a FAIL verdict."""
    chip = get_chip(chip_name)
    case = f"{rows} x {cols:,} {dt.name} on chip '{chip_name}' ({chip.cores_for('aiv')} cores, UB {fmt_bytes(chip.buffers.ub)})"
    t = fn(rows, cols, dt, chip)
    if not isinstance(t, RowScale2DTiling):
        return failed(f"for {case} the answer is not a RowScale2DTiling", expected="RowScale2DTiling(rows, "
                      "cols, rows_per_core, cols_per_core, rows_per_tile, cols_per_tile)", got=repr(t),
                      hint="return RowScale2DTiling(rows, cols, rows_per_core, cols_per_core, "
                           "rows_per_tile, cols_per_tile).")
    if (t.rows, t.cols) != (rows, cols):
        return failed(f"for {case}: rows and cols must be passed through", expected=f"rows={rows}, cols={cols}",
                      got=f"rows={t.rows}, cols={t.cols}", hint="the kernel reads the shape from the tiling.")
    try:
        x, g, z, trace = ref.run_2d(t, chip=chip, dtype=dt, mode=mode)
    except AlignmentError as err:
        return failed(f"for {case} the tiling cannot run", got=f"AlignmentError: {err}",
                      hint="a block's and a tile's columns start on a 32-byte boundary: cols_per_core "
                           "and cols_per_tile are whole 32-byte blocks.")
    except BufferOverflowError as err:
        return failed(f"for {case} the tiling cannot run", got=f"BufferOverflowError: {err}",
                      hint="UB holds buffer_num slots of a gamma chunk and of the in_x and out_z tiles "
                           "(rows_per_tile x cols_per_tile): shrink the tile.")
    except ShapeError as err:
        return failed(f"for {case} the tiling cannot run", got=f"ShapeError: {err}",
                      hint="row groups x column groups is the number of blocks: at most one per core.")
    if mode == "functional" and not np.array_equal(z, x * g):
        return failed(f"for {case} z is not x * gamma", expected="every element scaled",
                      got=f"{int(np.sum(z != x * g)):,} wrong elements", hint="every element must fall in one block.")
    return t, trace


@exercise("03", "a 2-D tiling: when rows are few, cut the columns over the cores too; share each "
                "gamma chunk across a block's rows; tiles long enough to pay their fixed costs",
          performance=True, challenge=True, key=("round_up(ceil_div(cols, groups), per_block)",))
def tiling_2d(fn):
    """``fn(rows, cols, dtype, chip) -> RowScale2DTiling``: correct on lab03.WIDE_CASES, and on
    lab03.WIDE_SHAPE on the 910 within 150% of the reference tiling's cycles."""
    if (v := screen_function(fn, "my_2d_tiling", "tiling function")) is not None:
        return v
    for rows, cols, dtype, chip_name in ref.WIDE_CASES:
        got = _run_2d_case(fn, rows, cols, np.dtype(dtype), chip_name, "functional")
        if not isinstance(got, tuple):
            return got
    got = _run_2d_case(fn, *ref.WIDE_SHAPE, np.dtype(np.float16), ref.WIDE_CHIP, "timing")
    if not isinstance(got, tuple):
        return got
    t, trace = got
    cores = get_chip(ref.WIDE_CHIP).cores_for("aiv")
    if t.block_dim <= cores // 2:
        hint = (f"only {t.block_dim} of {cores} cores work, each at its own copy pipes' rate: element "
                f"[r, c] needs only gamma[c], so cut the columns over the cores too.")
    elif t.rows_per_core < t.rows and t.rows_per_tile < t.rows:
        hint = ("every block copies its gamma chunk once for all its rows: a block of one row reads "
                "as many gamma bytes as x bytes; give a block more rows and fewer columns.")
    else:
        hint = ("each tile pays fixed costs (a copy's start-up, an instruction's issue): "
                "fewer, longer tiles, as long as UB and the block allow.")
    v = perf_verdict(trace.cycles, reference_2d_cycles(), f"{ref.describe_2d(t)}", hint)
    return v

