"""Suite-wide settings: the tiling cache lives in a temporary folder for the whole run, so tests
never read a developer's tuned or searched tilings (results stay deterministic) nor write
theirs, and the notebooks the suite runs inherit the setting; and ``tests/`` is on sys.path, so a
test in a subfolder (tests/ops/...) imports the shared helpers (``from tolerances import
assert_close``) whatever pytest's import mode."""
import os
import sys
import tempfile

_tests_dir = os.path.dirname(os.path.abspath(__file__))
if _tests_dir not in sys.path:
    sys.path.insert(0, _tests_dir)

_cache_dir = tempfile.mkdtemp(prefix="npulab-test-cache-")
os.environ["NPULAB_TILING_CACHE"] = os.path.join(_cache_dir, "tilings.json")
