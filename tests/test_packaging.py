"""Packaging: an sdist builds into a wheel that carries the Cython core and the chip files, and
the installed wheel works outside the source tree."""
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import npulab

ROOT = Path(__file__).resolve().parents[1]


def run(*cmd, cwd=ROOT, env=None):
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(out))
    sdist = next(out.glob("npulab-*.tar.gz"))
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(sdist))
    return sdist, next(out.glob("npulab-*.whl"))


def test_sdist_has_sources_not_generated_files(dist):
    sdist, _ = dist
    names = tarfile.open(sdist).getnames()
    assert any(n.endswith("pyx/_timeline.pyx") for n in names)
    for pxd in ("_isa", "_stream", "_worker", "_layouts"):     # what the Cython modules share
        assert any(n.endswith(f"pyx/{pxd}.pxd") for n in names), pxd
    assert any(n.endswith("data/chips/910.toml") for n in names)
    assert not any(n.endswith((".so", ".c", ".pyc")) for n in names)


def test_wheel_has_extension_and_chips(dist):
    _, wheel = dist
    names = zipfile.ZipFile(wheel).namelist()
    for ext in ("_isa", "_timeline", "_stream", "_queue", "_layouts", "_drains", "_worker"):
        assert any(n.startswith(f"npulab/{ext}.") and n.endswith(".so") for n in names), ext
    for chip in ("910", "910b", "310", "teach"):
        assert f"npulab/data/chips/{chip}.toml" in names
    for twin in ("sim/timeline.py", "sim/stream.py", "lang/queue.py", "formats/layouts.py",
                 "formats/drains.py", "formats/worker.py"):
        assert f"npulab/{twin}" in names, twin


def test_installed_wheel_works_outside_the_tree(dist, tmp_path):
    _, wheel = dist
    site = tmp_path / "site"
    run(sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel))
    code = ("import numpy as np, npulab, npulab.ops as ops; "
            "assert npulab.__file__.startswith(%r); "
            "x = np.arange(100, dtype=np.float16); assert (ops.add(x, x, chip='teach') == x + x).all(); "
            "print(len(npulab.chips()))") % str(site)
    out = run(sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {code}", cwd=tmp_path)
    assert out.stdout.strip() == "4"


def test_every_subpackage_is_reachable_from_the_package_name():
    code = ("import npulab; "
            "assert npulab.ops.add is not None and npulab.lang.launch is not None; "
            "assert npulab.kernels.__name__ == 'npulab.kernels' and npulab.sim.trace.Trace; "
            "missing = [n for n in npulab.SUBMODULES if getattr(npulab, n).__name__ != 'npulab.' + n]; "
            "assert not missing, missing; "
            "import sys; assert 'npulab.ops' in sys.modules")
    run(sys.executable, "-c", code)
    # every public subpackage and module on disk is among them (npulab.chips is the function)
    on_disk = {p.stem if p.suffix == ".py" else p.name for p in (ROOT / "npulab").iterdir()
               if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert on_disk - {"chips"} == set(npulab.SUBMODULES), on_disk ^ set(npulab.SUBMODULES)
    out = subprocess.run([sys.executable, "-c", "import npulab; npulab.nothing_here"], capture_output=True, text=True)
    assert out.returncode != 0 and "has no attribute 'nothing_here'" in out.stderr
