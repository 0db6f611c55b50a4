"""Every exercise checker accepts the reference solution, rejects typical mistakes with a hint
that names the concept, says "not attempted yet" for an untouched blank, and never raises.

The reference answers here are written independently of the checkers (from the chip figures
and the lab specs); the learner notebooks are executed to prove their untouched blanks read as
"not attempted", and the solution notebooks' stored check outputs must all be PASS.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

import npulab
from npulab import lang
from npulab.kernels.elementwise import AddTiling, KernelAdd
from npulab.labs import check, lab02, lab04
from npulab.labs.check import REGISTRY, same_code
from npulab.labs.lab03 import RowTiling
from npulab.lang import (PIPE_MTE2, PIPE_MTE3, PIPE_V, VECCALC, VECIN, VECOUT, Pipe, Queue, TBuf, data_copy,
                         get_block_idx, load_data, mmad, set_flag, wait_flag)

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "labs"
CHECK_CALL = re.compile(r"check\.(lab\d\d)\.(\w+)\(")

C910, TEACH = npulab.get_chip("910"), npulab.get_chip("teach")


# -- reference solutions and typical mistakes, written from the specs -------------------------
def attainable_ok(ai, peak, bw):
    return min(peak, ai * bw / 1000)


def attainable_max(ai, peak, bw):
    return max(peak, ai * bw / 1000)


def attainable_units(ai, peak, bw):
    return min(peak, ai * bw)


class ComputeOk(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeNoFree(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.out_z.enque(z)


class ComputeNoEnque(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.add(z, x, y, count)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeFreeTooEarly(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)
        lang.add(z, x, y, count)
        self.out_z.enque(z)


class ComputeSub(KernelAdd):
    def compute(self, count):
        x, y = self.in_x.deque(), self.in_y.deque()
        z = self.out_z.alloc_tensor(self.dtype)
        lang.sub(z, x, y, count)
        self.out_z.enque(z)
        self.in_x.free_tensor(x)
        self.in_y.free_tensor(y)


class ComputeBlank(KernelAdd):
    def compute(self, count):
        ...


def _one_tile(fix: str):
    def kernel(x, y, z):
        n = x.size
        pipe = Pipe()
        work = TBuf(VECCALC, "work")
        pipe.init_buffer(work, 3 * n * 2)
        ub = work.get(np.float16)
        xu, yu, zu = ub[0:n], ub[n:2 * n], ub[2 * n:3 * n]
        data_copy(xu, x, n)
        data_copy(yu, y, n)
        set_flag(PIPE_MTE2, PIPE_V, 0)
        wait_flag(PIPE_MTE2, PIPE_V, 0)
        lang.add(zu, xu, yu, n)
        if fix == "flags":
            set_flag(PIPE_V, PIPE_MTE3, 0)
            wait_flag(PIPE_V, PIPE_MTE3, 0)
        elif fix == "wrong pipes":
            set_flag(PIPE_MTE2, PIPE_MTE3, 1)
            wait_flag(PIPE_MTE2, PIPE_MTE3, 1)
        elif fix == "wait only":
            wait_flag(PIPE_V, PIPE_MTE3, 0)
        data_copy(z, zu, n)
    return kernel


def _racy_copy(x, y, z):
    """lab02.add_one_tile_racy, retyped as a learner's stub would have it (plus the blank)."""
    n = x.size
    pipe = Pipe()
    work = TBuf(VECCALC, "work")
    pipe.init_buffer(work, 3 * n * 2)
    ub = work.get(np.float16)
    xu, yu, zu = ub[0:n], ub[n:2 * n], ub[2 * n:3 * n]
    data_copy(xu, x, n)                       # MTE2: GM -> UB
    data_copy(yu, y, n)
    set_flag(PIPE_MTE2, PIPE_V, 0)            # the copies in are done ...
    wait_flag(PIPE_MTE2, PIPE_V, 0)           # ... before the vector unit reads
    lang.add(zu, xu, yu, n)                   # V: the add
    # YOUR CODE HERE (about 2 lines)
    ...
    data_copy(z, zu, n)                       # MTE3: UB -> GM


def blank_fn(intensity, peak_tflops, bandwidth_gbs):
    ...


# -- lab 03 ------------------------------------------------------------------------------------
def _add_tiling(align="up", tile="ub", buffers=True):
    def fn(n, dtype, chip, buffer_num):
        pb = 32 // dtype.itemsize
        if align == "up":
            bf = -(-(-(-n // chip.ai_cores)) // pb) * pb
        elif align == "down":
            bf = max(pb, -(-n // chip.ai_cores) // pb * pb)
        else:
            bf = -(-n // chip.ai_cores)
        bn = buffer_num if buffers else 1
        top = chip.buffers.ub // (3 * bn) // 32 * 32
        t = {"ub": min(top // dtype.itemsize, bf), "bytes": top, "tiny": pb}[tile]
        return AddTiling(n, bf, -(-n // bf), t, buffer_num)
    return fn


def _add_tiling_tuple(n, dtype, chip, buffer_num):
    return (n, 16, 1, 16, buffer_num)


def _add_tiling_blank(n, dtype, chip, buffer_num):
    ...


def _row_tiling(mistake=None):
    def fn(rows, cols, dtype, chip):
        rb = -(-cols * dtype.itemsize // 32) * 32
        rpc = rows // chip.ai_cores if mistake == "floor" else -(-rows // chip.ai_cores)
        bd = -(-rows // rpc)
        ub = chip.buffers.ub if mistake == "no gamma" else chip.buffers.ub - rb
        per = 2 * rb if mistake == "one slot" else 4 * rb
        rpt = 1 if mistake == "one row" else min(rpc, ub // per)
        return RowTiling(rows, cols, rpc, bd, rpt, 2)
    return fn


def _row_tiling_blank(rows, cols, dtype, chip):
    ...


# -- lab 04 ------------------------------------------------------------------------------------
def _silu(slots_x=2, slots_z=2, tile_div=4):
    class Silu(lab04.SiluStages):
        def __init__(self, x, z, tiling):
            start = get_block_idx() * tiling.block_factor
            self.length = min(tiling.block_factor, tiling.total - start)
            self.x_gm, self.z_gm = x[start:start + self.length], z[start:start + self.length]
            self.dtype = x.dtype
            self.tile = 64 if tile_div is None else tiling.ub_bytes // tile_div // 32 * 32 // 2
            self.pipe = Pipe()
            self.in_x, self.out_z = Queue(VECIN, "in_x"), Queue(VECOUT, "out_z")
            self.pipe.init_buffer(self.in_x, slots_x, self.tile * 2)
            self.pipe.init_buffer(self.out_z, slots_z, self.tile * 2)
    return Silu


class _SiluBlank(lab04.SiluStages):
    def __init__(self, x, z, tiling):
        ...


# -- lab 05 ------------------------------------------------------------------------------------
def _nz(kind="ok"):
    def fn(r, c, m, n):
        m16 = -(-m // 16) * 16
        if kind == "ok":
            return (c // 16) * m16 * 16 + r * 16 + c % 16
        if kind == "no pad":
            return (c // 16) * m * 16 + r * 16 + c % 16
        if kind == "nd":
            return r * n + c
        if kind == "zz":
            return (r // 16) * (-(-n // 16) * 256) + (c // 16) * 256 + (r % 16) * 16 + c % 16
        return (c // 16) * m16 * 16 + (r // 16) * 256 + (c % 16) * 16 + r % 16      # inner swapped
    return fn


def _nz_blank(r, c, m, n):
    ...


def _k_loop(init="first", free=True, fixed_k0=False):
    def fn(c, a1, b1, a2q, b2q, m, n, k, k0):
        for k_off in range(0, k, k0):
            kk = k0 if fixed_k0 else min(k0, k - k_off)
            a2 = a2q.alloc_tensor(np.float16)
            load_data(a2, a1, m, kk, src_rows=-(-m // 16) * 16, col_off=k_off)
            a2q.enque(a2)
            b2 = b2q.alloc_tensor(np.float16)
            load_data(b2, b1, kk, n, src_rows=-(-k // 16) * 16, row_off=k_off)
            b2q.enque(b2)
            a2, b2 = a2q.deque(), b2q.deque()
            first = {"first": k_off == 0, "always": True, "never": False}[init]
            mmad(c, a2, b2, m, n, kk, init=first)
            if free:
                a2q.free_tensor(a2)
                b2q.free_tensor(b2)
    return fn


def _k_loop_blank(c, a1, b1, a2q, b2q, m, n, k, k0):
    ...


PEAK_910 = 32 * 4096 * 2 * C910.clock_ghz / 1000
READ_US = 64 * 2**20 / (C910.memory.gm_bytes_per_cycle * C910.clock_ghz * 1e9) * 1e6
M = N = K = 1024
R, C = 4096, 1024
BEST_TILE = TEACH.buffers.ub // 6 // 32 * 32 // 2

#: exercise -> (reference answer, [(wrong answer, words the hint must contain), ...], blank)
CASES = {
    "00.largest_buffer": ("L1", [("UB", "compare the sizes"), ("GM", "shared by all cores"),
                                 (1048576, "string")], ...),
    "00.peak_tflops": (PEAK_910, [(PEAK_910 / 2, "two FLOPs"), (PEAK_910 / 32, "one AI core"),
                                  (PEAK_910 * 1000, "TFLOPS")], ...),
    "00.gm_read_us": (READ_US, [(64e6 / 1200e9 * 1e6, "2**20"), (READ_US * 1e3, "units"),
                                (READ_US / 32, "shared")], ...),
    "01.attainable": (attainable_ok, [(attainable_max, "smaller"), (attainable_units, "units")], blank_fn),
    "01.intensity_add": (1 / 6, [(1 / 4, "written"), (1 / 3, "2 bytes"), (6.0, "FLOPs divided by bytes")], ...),
    "01.intensity_matmul": (2 * M * N * K / (2 * (M * K + K * N + M * N)),
                            [(M * N * K / (2 * (M * K + K * N + M * N)), "two FLOPs"),
                             (2 * M * N * K / (2 * (M * K + K * N)), "C written")], ...),
    "01.intensity_layernorm": (8 * R * C / (2 * (2 * R * C + 2 * C)),
                               [(8 * R * C / (2 * R * C), "written"),
                                (8 * R * C / (2 * (2 * R * C + 2 * R * C)), "gamma and beta")], ...),
    "01.bound": ({"add": "memory", "matmul": "compute", "layernorm": "memory-bound"},
                 [({"add": "compute", "matmul": "compute", "layernorm": "compute"}, "ridge point"),
                  ({"add": "memory", "matmul": "memory", "layernorm": "memory"}, "ridge point"),
                  (["memory"], "dict")], ...),
    "02.compute_stage": (ComputeOk, [(ComputeNoFree, "free_tensor"), (ComputeNoEnque, "enque"),
                                     (ComputeFreeTooEarly, "only after the add"),
                                     (ComputeSub, "another operation"), (3, "class")], ComputeBlank),
    "02.busiest_pipe": ("MTE2", [("VECTOR", "memory-bound"), ("MTE3", "reads two"), ("CUBE", "no work")], ...),
    "02.fix_race": (_one_tile("flags"), [(_one_tile("none"), "set_flag"), (_one_tile("wrong pipes"), "set_flag"),
                                         (_one_tile("wait only"), "set_flag with the same")], _racy_copy),
    "02.ub_tile": (BEST_TILE, [(TEACH.buffers.ub // 3 // 32 * 32 // 2, "double buffering needs two"),
                               (4096, "does not fit"), (1000, "multiple of 16"),
                               (64, "start-up"), (1360.0, "whole number")], ...),
    "03.add_tiling_fn": (_add_tiling(), [(_add_tiling(align="down"), "never down"),
                                         (_add_tiling(align="none"), "32-byte boundary"),
                                         (_add_tiling(buffers=False), "buffer_num=2 slots"),
                                         (_add_tiling(tile="bytes"), "in bytes"),
                                         (_add_tiling(tile="tiny"), "largest tile"),
                                         (_add_tiling_tuple, "not an AddTiling")], _add_tiling_blank),
    "03.row_tiling": (_row_tiling(), [(_row_tiling("no gamma"), "gamma"), (_row_tiling("floor"), "loses the remainder"),
                                      (_row_tiling("one slot"), "each hold"), (_row_tiling("one row"), "as many whole rows")],
                      _row_tiling_blank),
    "03.overflowing_buffers": ({"L1", "L0C"}, [(set(), "buffer_num copies"), ({"L1"}, "fp32"),
                                               ({"L0C"}, "L1 overflows too"), ({"L1", "L0C", "UB"}, "UB is not used"),
                                               ("L1", "set of")], ...),
    "04.double_buffered": (_silu(), [(_silu(1, 1, 2), "still one slot"), (_silu(2, 2, 2), "twice its UB"),
                                     (_silu(2, 1, 4), "Every queue between two pipes"),
                                     (_silu(2, 2, None), "smaller tiles"), (3, "your kernel class")], _SiluBlank),
    "04.mte2_stall": (("in_x", "VECTOR"), [(("out_z", "VECTOR"), "never touches"), (("in_x", "MTE3"), "free_tensor"),
                                           (("in_x", "MTE2"), "pipe that waits"), ("in_x", "pair")], ...),
    "04.fastest_buffer_num": ({"SiLU": 2, "Add": 1}, [({"SiLU": 2, "Add": 2}, "start-ups"),
                                                      ({"SiLU": 3, "Add": 1}, "third slot"),
                                                      ([2, 1], "dict")], ...),
    "05.nz_offset": (_nz(), [(_nz("no pad"), "pads the rows"), (_nz("nd"), "that is ND"), (_nz("zz"), "that is ZZ"),
                             (_nz("swapped"), "row-major ('z')")], _nz_blank),
    "05.k_loop": (_k_loop(), [(_k_loop(init="always"), "only the last K0 slice"),
                              (_k_loop(init="never"), "must overwrite"), (_k_loop(free=False), "free_tensor"),
                              (_k_loop(fixed_k0=True), "m x kk")], _k_loop_blank),
    "05.tiles_80": ((128, 256, 256, 64, 2, 2, 2), [((128, 64, 32, 32, 2, 2, 2), "longer K"),
                                                   ((128, 256, 512, 64, 1, 1, 1), "use 2 at every level"),
                                                   ((256, 256, 512, 128, 2, 2, 2), "shrink"),
                                                   ((64, 64, 256, 64, 2, 2, 2), "bigger block tiles"),
                                                   ((128, 256), "7 whole numbers")], ...),
}


def _checker(key: str):
    lab, name = key.split(".")
    return getattr(getattr(check, f"lab{lab}"), name)


def test_enough_exercises_and_every_one_is_tested():
    assert len(REGISTRY) >= 8
    assert set(REGISTRY) == set(CASES), "every checker needs a case here (and every case a checker)"
    assert {ex.lab for ex in REGISTRY.values()} == {"00", "01", "02", "03", "04", "05"}
    assert any(ex.performance for ex in REGISTRY.values())


@pytest.mark.parametrize("key", sorted(CASES))
def test_reference_solution_passes(key, capsys):
    answer, _, _ = CASES[key]
    v = _checker(key).grade(answer)
    assert v.status == "pass", v.render(key)
    _checker(key)(answer)                                   # the notebook form prints, returns None
    out = capsys.readouterr().out
    assert out.startswith(f"PASS  {key.split('.')[1]}: ")


@pytest.mark.parametrize("key, i", [(k, i) for k in sorted(CASES) for i in range(len(CASES[k][1]))])
def test_typical_mistake_fails_with_a_hint(key, i, capsys):
    wrong, words = CASES[key][1][i]
    ex = REGISTRY[key]
    assert _checker(key)(wrong) is None
    out = capsys.readouterr().out
    assert out.startswith(f"FAIL  {ex.name}"), out
    hint = next(line for line in out.splitlines() if line.strip().startswith("hint:"))
    assert words in out, f"expected {words!r} in:\n{out}"
    assert f"(revisit: {ex.concept})" in hint
    v = _checker(key).grade(wrong)
    assert v.status == "fail" and (v.got is not None or v.lines)


@pytest.mark.parametrize("key", sorted(CASES))
def test_untouched_blank_is_not_attempted(key, capsys):
    blank = CASES[key][2]
    _checker(key)(blank)
    out = capsys.readouterr().out
    assert out.startswith(f"NOT ATTEMPTED YET  {key.split('.')[1]}: "), out


@pytest.mark.parametrize("key", sorted(CASES))
@pytest.mark.parametrize("junk", [None, "", "x", -1, float("nan"), object(), lambda *a: 1 / 0])
def test_checkers_never_raise(key, junk, capsys):
    assert _checker(key)(junk) is None
    assert capsys.readouterr().out.startswith("FAIL  ")


def test_performance_exercise_reports_cycles_and_target():
    slow = _checker("02.ub_tile").grade(64)
    text = slow.render("ub_tile")
    assert slow.status == "fail" and "too slow" in slow.summary
    assert re.search(r"your kernel: [\d,]+ cycles; reference [\d,]+; target <= [\d,]+ \(150%\)", text)
    ok = _checker("02.ub_tile").grade(BEST_TILE).render("ub_tile")
    assert re.search(r"in [\d,]+ simulated cycles \(target <= [\d,]+, 150% of the reference's [\d,]+\)", ok)
    # correctness comes first: a wrong kernel fails on its values, not its cycles
    assert "z is not x + y" in _checker("02.compute_stage").grade(ComputeSub).summary


def test_the_racy_stub_is_recognised_and_the_race_is_real():
    assert same_code(_racy_copy, lab02.add_one_tile_racy)
    assert not same_code(_one_tile("flags"), lab02.add_one_tile_racy)
    assert lab02.race_message().startswith("RaceError: race on core 0 in UB")
    assert lab02.race_message(_one_tile("flags")) == "no race"


# -- the notebooks' check cells ------------------------------------------------------------
def _check_cells(nb):
    return [(m.group(1), m.group(2), c) for c in nb.cells if c.cell_type == "code"
            for m in [CHECK_CALL.search(c.source)] if m]


def test_every_exercise_has_a_check_cell_in_its_lab():
    found = set()
    for nb_path in sorted(LABS.glob("0*.ipynb")):
        for lab, name, _ in _check_cells(nbformat.read(nb_path, as_version=4)):
            assert nb_path.name.startswith(lab[3:]), f"{nb_path.name} calls check.{lab}.{name}"
            found.add(f"{lab[3:]}.{name}")
    assert found == set(REGISTRY)


def test_solution_notebooks_pass_every_check():
    for nb_path in sorted((LABS / "solutions").glob("0*.ipynb")):
        cells = _check_cells(nbformat.read(nb_path, as_version=4))
        assert cells
        for lab, name, cell in cells:
            text = "".join(o.get("text", "") for o in cell.outputs)
            assert text.startswith(f"PASS  {name}: "), f"{nb_path.name}: {text!r}"


@pytest.mark.parametrize("nb_path", sorted(LABS.glob("0*.ipynb")), ids=lambda p: p.stem)
def test_learner_notebook_runs_and_every_check_says_not_attempted(nb_path):
    from nbclient import NotebookClient

    from npulab.labs.notebooks import kernel_env
    nb = nbformat.read(nb_path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(LABS)}}).execute(env=kernel_env())
    cells = _check_cells(nb)
    assert cells
    for lab, name, cell in cells:
        text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        assert text.startswith(f"NOT ATTEMPTED YET  {name}: "), f"{nb_path.name}, check.{lab}.{name}: {text!r}"
