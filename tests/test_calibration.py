"""The calibrated timing model against the public measurements of data/FACTS.md ("Calibration
set"), through ``npulab bench calibrate --json``."""
from __future__ import annotations

import contextlib
import io
import json
import math

import pytest

from npulab.cli import main


@pytest.fixture(scope="module")
def rows():
    """``npulab bench calibrate --json`` run once: (exit code, rows)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bench", "calibrate", "--json"])
    return code, json.loads(out.getvalue())


def test_every_calibration_row_is_reported_with_its_source(rows):
    _, out = rows
    assert [r["id"] for r in out] == ["C1-cube", "C1-vector", "C2-time", "C2-mac"]
    for r in out:
        assert r["source"] in ("C1", "C2")
        assert r["simulated"] > 0 and r["published"] > 0
        expected = ((r["simulated"] - r["published"]) * 100 if r["error_unit"] == "pp"
                    else (r["simulated"] / r["published"] - 1) * 100)
        assert math.isclose(r["error"], expected, rel_tol=1e-9, abs_tol=1e-9)


def test_tolerances_are_the_issue_s_and_the_verdict_follows_them(rows):
    _, out = rows
    for r in out:
        assert r["tolerance"] == (10.0 if r["id"] == "C1-vector" else 5.0)
        assert r["within_tolerance"] == (abs(r["error"]) <= r["tolerance"])


def test_vector_microbenchmark_within_ten_percent(rows):
    """C1-vector holds; C1-cube and C2 do not yet (issue 15 stays open on them: the cube
    micro's loads do not overlap its mmads, single-buffered as the TIK source declares its
    tensors; the 6144^3 GEMM's tiles are fed from L2 faster than the real chip's MTE2)."""
    _, out = rows
    r = next(r for r in out if r["id"] == "C1-vector")
    assert abs(r["error"]) <= r["tolerance"], r


def test_calibrate_exit_code_says_whether_all_rows_hold(rows):
    code, out = rows
    assert code == (0 if all(r["within_tolerance"] for r in out) else 1)
