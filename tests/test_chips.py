"""Chip files: the built-in chips, their derived peaks, and errors on bad files."""
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

import npulab
from npulab.chips import BUFFERS, load_chip

CHIP_DIR = Path(__file__).resolve().parents[1] / "data" / "chips"


def test_at_least_four_builtin_chips():
    names = npulab.chip_names()
    assert {"teach", "310", "910", "910b"} <= set(names)
    assert [c.name for c in npulab.chips()] == names


@pytest.mark.parametrize("name", ["teach", "310", "910", "910b"])
def test_peak_is_cores_times_cube_times_clock(name):
    chip = npulab.get_chip(name)
    assert chip.peak_fp16_tflops == pytest.approx(chip.ai_cores * 4096 * 2 * chip.clock_ghz / 1000)
    assert chip.cube.macs_per_cycle_fp16 == 4096          # FACTS: 16x16x16 a cycle
    assert chip.vector.repeat_bytes == 256 and chip.vector.max_repeat == 255


def test_published_figures():
    assert npulab.get_chip("910").peak_fp16_tflops == pytest.approx(256.0)    # press
    assert npulab.get_chip("910b").ai_cores == 24 and npulab.get_chip("910b").vector_cores == 48
    assert npulab.get_chip("910b").buffers.ub == 192 * 1024                    # S4
    assert npulab.get_chip("teach").ai_cores == 2


def test_910b_models_the_ascend910b1_and_its_peaks_follow_from_its_platform_file():
    """The calibration GEMM ran on an Ascend910B1 (C2); CANN's Ascend910B1.ini (S11) gives 24
    AIC, 48 AIV at 1850 MHz. S1's figures are other configurations: 353T is 24 cores at
    1.8 GHz (the B2), 376T and the vector 23.5T both 1.0625 times the 1.8 GHz figures."""
    c = npulab.get_chip("910b")
    assert c.sku == "Ascend910B1" and c.clock_ghz == 1.85
    assert c.peak_fp16_tflops == pytest.approx(363.7, abs=0.05)
    assert c.vector_units == 48
    assert c.peak_vector_tflops_fp16 == pytest.approx(48 * 128 * 2 * 1.85 / 1000)   # 22.7
    at_18 = c.ai_cores * 4096 * 2 * 1.8 / 1000
    assert round(at_18) == 354 and 376 / at_18 == pytest.approx(23.5 / (48 * 128 * 2 * 1.8 / 1000), rel=1e-3)
    assert c.gm_bandwidth_gbs == pytest.approx(1600, rel=1e-3)                 # S1: 1.6 TB/s
    assert (c.cross_core.flag_ids, c.cross_core.max_pending) == (11, 15)     # S12


def test_every_chip_names_its_sku():
    assert {c.name: c.sku for c in npulab.chips()} == {
        "910b": "Ascend910B1", "910": "Ascend 910", "310": "Ascend 310", "teach": "none"}


def test_vector_peak_counts_every_vector_unit_and_a_multiply_add_as_two():
    c910 = npulab.get_chip("910")
    assert c910.vector_units == c910.ai_cores == 32                          # coupled: in each core
    assert c910.peak_vector_tflops_fp16 == pytest.approx(32 * 128 * 2 * c910.clock_ghz / 1000)


def test_cross_core_section_belongs_to_split_chips_only(tmp_path):
    teach = (CHIP_DIR / "teach.toml").read_text()
    extra = "\n[cross_core]\nflag_ids = 11\nmax_pending = 15\nflag_latency_cycles = 0\n"
    with pytest.raises(npulab.ChipFileError, match=r"\[cross_core\] is for split chips"):
        npulab.get_chip(str(_write(tmp_path, teach + extra)))
    split = (CHIP_DIR / "910b.toml").read_text()
    cut = split[:split.index("[cross_core]")]
    with pytest.raises(npulab.ChipFileError, match=r"needs a \[cross_core\] section"):
        npulab.get_chip(str(_write(tmp_path, cut)))


def test_every_figure_has_a_source_or_says_chosen():
    for path in CHIP_DIR.glob("*.toml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0].strip()
            if "=" in code and not code.startswith(("name", "title", "arch")):
                comment = line.split("#", 1)[1] if "#" in line else ""
                tags = ("S1", "S2", "S4", "S7", "S11", "S12", "S13", "S14", "S15", "S16", "E1", "E2", "C1", "C2", "M1", "M2", "M3", "3rd", "press", "chosen",
                        "derived", "FACTS", "n/f")
                in_section_note = code.startswith("[")
                assert in_section_note or any(t in comment for t in tags) or \
                    code.split("=")[0].strip() == "vector_cores", f"{path.name}:{n} has no source: {line}"


def test_which_chips_have_fixpipe():
    """Fixpipe.md (S13) lists the A2/A3 series: the 910B drains L0C through FixPipe, the 910 and
    310 through UB; the teaching chip keeps FixPipe (chosen)."""
    paths = {c: npulab.get_chip(c).cube.output_path for c in ("910", "310", "910b", "teach")}
    assert paths == {"910": "ub", "310": "ub_convert", "910b": "fixpipe", "teach": "fixpipe"}


def test_buffers_and_alignment_from_facts():
    chip = npulab.get_chip("910b")
    assert (chip.align.ub, chip.align.l1, chip.align.l0a, chip.align.l0c) == (32, 32, 512, 64)
    for b in BUFFERS:
        assert chip.buffer_bytes(b.upper()) > 0


def test_gm_bandwidth_is_shared_between_cores():
    chip = npulab.get_chip("910")
    sustained = chip.memory.gm_bytes_per_cycle * chip.memory.gm_efficiency
    assert chip.memory.gm_efficiency < 1            # a DRAM never sustains its pins
    assert chip.gm_share_bytes_per_cycle(1) == pytest.approx(sustained)
    assert chip.gm_share_bytes_per_cycle(32) == pytest.approx(sustained / 32)


@pytest.mark.parametrize("field,value,match", [("gm_efficiency = 0.89", "gm_efficiency = 1.2", "in \\(0, 1\\]"),
                                               ("l2_line_bytes = 128", "l2_line_bytes = 96", "power of two")])
def test_a_chip_file_with_an_impossible_memory_figure_says_why(tmp_path, field, value, match):
    text = (Path(npulab.get_chip("910").source)).read_text(encoding="utf-8")
    assert field in text
    (tmp_path / "bad.toml").write_text(text.replace(field, value), encoding="utf-8")
    with pytest.raises(npulab.ChipFileError, match=match):
        load_chip(tmp_path / "bad.toml")


def test_host_links_follow_from_pcie_generation_lanes_and_packet_overhead():
    """[device]: raw GB/s = lanes x GT/s x line code / 8 (S16), a copy gets payload / (payload +
    24 B) of it; the 910's PCIe 4.0 x16 and the 310's 3.0 x4 (3rd)."""
    d910, d310 = npulab.get_chip("910").device, npulab.get_chip("310").device
    assert (d910.pcie_gen, d910.pcie_lanes, d310.pcie_gen, d310.pcie_lanes) == (4, 16, 3, 4)
    assert d910.pcie_raw_gb_per_s == pytest.approx(16 * 16 * 128 / 130 / 8)          # 31.5 GB/s
    assert d910.host_link_gb_per_s == pytest.approx(31.5077 * 256 / 280, rel=1e-4)   # 28.8 GB/s
    assert d310.host_link_gb_per_s == pytest.approx(d910.host_link_gb_per_s / 8)
    for chip in npulab.chips():
        assert chip.device.huge_page_bytes == 2 << 20                               # S15
        assert chip.to_dict()["host_link_gbs"] == pytest.approx(chip.device.host_link_gb_per_s)


@pytest.mark.parametrize("field,value,match", [
    ("pcie_gen = 4 ", "pcie_gen = 7 ", "'device.pcie_gen' must be one of"),
    ("pcie_lanes = 16 ", "pcie_lanes = 12 ", "a PCIe link width"),
    ("max_payload_bytes = 256 ", "max_payload_bytes = 300 ", "Max_Payload_Size"),
    ("normal_page_bytes = 4096 ", "normal_page_bytes = 4000 ", "'device.normal_page_bytes' must be a power of two"),
    ("huge_page_bytes = 2097152 ", "huge_page_bytes = 2048 ", "a huge page holds normal ones"),
    ("host_copy_gb_per_s = 10.0 ", "host_copy_gb_per_s = 0.0 ", "must be positive"),
])
def test_a_chip_file_with_an_impossible_device_figure_says_why(tmp_path, field, value, match):
    text = (Path(npulab.get_chip("910").source)).read_text(encoding="utf-8")
    assert field in text
    (tmp_path / "bad.toml").write_text(text.replace(field, value), encoding="utf-8")
    with pytest.raises(npulab.ChipFileError, match=match):
        load_chip(tmp_path / "bad.toml")


def _write(tmp_path, text):
    p = tmp_path / "mine.toml"
    p.write_text(text)
    return p


def test_user_chip_file_loads_by_path(tmp_path):
    text = (CHIP_DIR / "teach.toml").read_text().replace('name = "teach"', 'name = "mine"')
    chip = npulab.get_chip(str(_write(tmp_path, text)))
    assert chip.name == "mine" and chip.ai_cores == 2


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.replace("ub = 16384", ""), "buffers.ub"),                   # missing
    (lambda t: t.replace("ai_cores = 2 ", "ai_cores = -2 "), "ai_cores"),    # negative
    (lambda t: t.replace("[cube]", "[cube]\nmacs_per_cycle_fp8 = 1"), "cube.macs_per_cycle_fp8"),  # unknown
    (lambda t: t.replace("clock_ghz = 1.0", 'clock_ghz = "fast"'), "clock_ghz"),  # wrong type
    (lambda t: t.replace("l0a = 512", "l0a = 500"), "align.l0a"),            # not a power of two
    (lambda t: t.replace("max_repeat = 255", "max_repeat = 0"), "vector.max_repeat"),
    (lambda t: t.replace("repeat_bytes = 256", "repeat_bytes = 1"), "vector.repeat_bytes"),
    (lambda t: t.replace("macs_per_cycle_fp16 = 4096", "macs_per_cycle_fp16 = 0"), "cube.macs_per_cycle_fp16"),
    (lambda t: t.replace('output_path = "fixpipe"', 'output_path = "gm"'), "cube.output_path"),   # not a path
    (lambda t: t.replace('output_path = "fixpipe"', ""), "cube.output_path"),                      # missing
])
def test_bad_chip_file_names_the_field(tmp_path, edit, field):
    text = edit((CHIP_DIR / "teach.toml").read_text())
    with pytest.raises(npulab.ChipFileError, match=field.replace(".", r"\.")):
        npulab.get_chip(str(_write(tmp_path, text)))


def test_missing_file_and_unknown_name():
    with pytest.raises(npulab.ChipFileError, match="no such file"):
        npulab.get_chip("nowhere/none.toml")
    with pytest.raises(npulab.ChipFileError, match="built-in chips are"):
        npulab.get_chip("ascend9000")


def test_bad_toml_is_a_chip_file_error(tmp_path):
    with pytest.raises(npulab.ChipFileError, match="not valid TOML"):
        load_chip(_write(tmp_path, "name = \n"))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "npulab.cli", *args], capture_output=True, text=True, check=False)


def test_cli_info_json_peak_matches_chip_file():
    out = _cli("info", "--chip", "910", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["peak_fp16_tflops"] == pytest.approx(d["ai_cores"] * 4096 * 2 * d["clock_ghz"] / 1000)


def test_cli_info_lists_chips():
    out = _cli("info")
    assert out.returncode == 0
    rows = [line.split()[0] for line in out.stdout.splitlines()[1:]]
    assert {"teach", "310", "910", "910b"} <= set(rows)
    assert len(json.loads(_cli("info", "--json").stdout)) >= 4


def test_cli_info_bad_chip_is_a_clear_error():
    out = _cli("info", "--chip", "nope")
    assert out.returncode == 2 and "unknown chip 'nope'" in out.stderr


def test_chip_path_that_is_a_directory(tmp_path):
    with pytest.raises(npulab.ChipFileError, match="is a directory"):
        npulab.get_chip(str(tmp_path) + "/")


def test_cli_rejects_bad_arguments_without_a_traceback(tmp_path):
    out = _cli("info", "--chip", str(tmp_path) + "/")
    assert out.returncode == 2 and "is a directory" in out.stderr and "Traceback" not in out.stderr
    for n in ("0", "-5", "many"):
        out = _cli("bench", "sim", "--instructions", n)
        assert out.returncode == 2 and "--instructions" in out.stderr and "Traceback" not in out.stderr


def test_cli_output_into_a_closed_pipe_ends_quietly():
    # ``npulab info --json | head -1`` once head has gone: a pipe nobody reads any more
    r, w = os.pipe()
    os.close(r)
    try:
        out = subprocess.run([sys.executable, "-m", "npulab.cli", "info", "--json"], stdout=w,
                             stderr=subprocess.PIPE, text=True, check=False)
    finally:
        os.close(w)
    assert out.returncode == 0 and "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr


def test_every_source_tag_a_chip_file_cites_is_listed_in_the_facts_file():
    # the chip files cite S1..S14, E1, E2, C1, C2, K1, K2 (and M.. from the GM side); data/FACTS.md,
    # in the repository, says what each is
    facts = (CHIP_DIR.parent / "FACTS.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^- ([SECKM]\d+) ", facts, flags=re.M))
    cited = {t for p in CHIP_DIR.glob("*.toml") for t in re.findall(r"\b([SECKM]\d+)\b", p.read_text())}
    assert cited and cited <= listed, cited - listed
