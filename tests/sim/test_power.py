"""Energy and power (sim.cost): each chip's power with every unit at its peak rate stays under its
published board power and is of its order; what a launch draws stays under that; L2 hits cost
L2's energy, not HBM's; an mmad pays for the operands it streams."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import npulab
from npulab import lang
from npulab.kernels.elementwise import add_tiling, launch_add
from npulab.kernels.matmul import MatmulProblem, default_tiling, simulate
from npulab.lang import VECIN, TPipe, TBuf, data_copy
from npulab.sim.cost import full_load_watts, mmad_energy_pj, trace_watts

CHIPS = ["teach", "310", "910", "910b"]


@pytest.mark.parametrize("name", CHIPS)
def test_full_load_is_under_the_board_power_and_of_its_order(name):
    chip = npulab.get_chip(name)
    parts = full_load_watts(chip)
    total = parts.pop("total")
    assert total == pytest.approx(sum(parts.values()))
    assert parts["static"] == chip.power.static_watts
    assert all(w > 0 for part, w in parts.items() if part != "L2"), parts
    assert (parts["L2"] > 0) == (chip.memory.l2_bytes > 0)      # the teaching chip has no L2
    assert total <= chip.power.board_watts                       # the acceptance line
    assert total >= 0.5 * chip.power.board_watts                 # of the order of it


@pytest.mark.parametrize("name, shape", [("910", (1, 2048, 2048, 2048)), ("910b", (1, 3072, 3072, 3072)),
                                         ("310", (1, 512, 512, 512)), ("teach", (1, 256, 256, 256))])
def test_a_busy_matmul_draws_less_than_full_load(name, shape):
    tr = simulate(default_tiling(MatmulProblem(*shape, "float16"), name), name)
    watts = trace_watts(tr)
    chip = tr.chip
    assert chip.power.static_watts < watts <= full_load_watts(chip)["total"] <= chip.power.board_watts
    assert tr.summary()["power_w"] == pytest.approx(watts)
    seconds = tr.cycles / (chip.clock_ghz * 1e9)
    assert watts == pytest.approx(chip.power.static_watts + tr.energy.sum() * 1e-12 / seconds)


def _read_twice(same: bool):
    """Two GM -> UB copies of 32 KB: the same bytes twice (the second an L2 hit), or two ranges."""
    n = 16384

    def kernel(x):
        pipe = TPipe()
        buf = TBuf(VECIN, "x")
        pipe.init_buffer(buf, 2 * n * 2)
        t = buf.get(np.float16)
        data_copy(t, x, n)
        data_copy(t[n:], x if same else x[n:], n)
    return lang.launch(kernel, 1, np.zeros(2 * n, np.float16), chip="910", mode="timing").trace


def test_a_read_served_by_l2_costs_l2_energy_instead_of_hbm():
    again, fresh = _read_twice(True), _read_twice(False)
    chip = npulab.get_chip("910")
    lines = 16384 * 2 // chip.memory.l2_line_bytes     # the hits are counted in L2 lines
    assert again.gm_stats["l2_hits"] == lines and fresh.gm_stats["l2_hits"] == 0
    e = chip.energy
    assert fresh.energy.sum() - again.energy.sum() == pytest.approx(16384 * 2 * (e.gm_byte_pj - e.l2_byte_pj))


def test_an_mmad_pays_for_its_macs_and_the_operands_it_streams():
    chip = npulab.get_chip("910")
    e = chip.energy
    m, n, k = 32, 48, 64                       # 2 x 3 output fractals, 4 K steps of fp16
    fresh = mmad_energy_pj(chip, m, n, k, np.float16, init=True)
    steps = 2 * 3 * 4
    assert fresh == pytest.approx(m * n * k * e.mac_fp16_pj + e.l0_byte_pj * (steps * 1024 + 6 * 1024))
    # accumulating reads each output fractal of L0C first
    assert mmad_energy_pj(chip, m, n, k, np.float16, init=False) - fresh == pytest.approx(e.l0_byte_pj * 6 * 1024)
    # int8 MACs are cheaper, and K0 is 32: half the steps for the same K
    assert mmad_energy_pj(chip, m, n, k, np.int8) < fresh


def test_an_add_kernel_draws_its_energy_over_its_time():
    x = np.ones(200_000, np.float16)
    _, tr = launch_add(x, x, add_tiling(x.size, x.dtype, "910"), "910", "functional")
    watts = trace_watts(tr)
    assert npulab.get_chip("910").power.static_watts < watts < full_load_watts("910")["total"]
    assert "power" in tr.table()


def test_cli_info_shows_the_power_at_full_load_beside_the_board_power():
    out = subprocess.run([sys.executable, "-m", "npulab.cli", "info", "--chip", "910b"],
                         capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("power at full load"))
    assert "350 W published board power" in line and "static 80" in line
    d = json.loads(subprocess.run([sys.executable, "-m", "npulab.cli", "info", "--chip", "910b", "--json"],
                                  capture_output=True, text=True, check=True).stdout)
    assert d["full_load_watts"]["total"] == pytest.approx(full_load_watts("910b")["total"])
    assert d["power"]["board_watts"] == 350.0


def test_a_chip_file_whose_static_power_reaches_its_board_power_is_refused(tmp_path):
    teach = Path(npulab.get_chip("teach").source).read_text(encoding="utf-8")
    bad = tmp_path / "hot.toml"
    bad.write_text(teach.replace("static_watts = 5.0", "static_watts = 25.0"), encoding="utf-8")
    with pytest.raises(npulab.ChipFileError, match=r"power\.board_watts.*power\.static_watts"):
        npulab.get_chip(str(bad))
