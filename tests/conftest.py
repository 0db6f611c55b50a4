"""Suite-wide settings and fixtures.

* The tiling cache lives in a temporary folder for the whole run, so tests never read a
  developer's tuned or searched tilings (results stay deterministic) nor write theirs, and the
  notebooks the suite runs inherit the setting.
* ``tests/`` is on sys.path: test modules in its subfolders share plain helpers through
  ``import fixtures`` (tests/fixtures.py) whatever pytest's import mode; no test module imports
  another.
* ``side``: a test that takes it runs once per side of npulab.twins, the switch set to that side
  for the test's duration (a twin parity test: one body, both twins).
"""
import os
import sys
import tempfile

import pytest

_cache_dir = tempfile.mkdtemp(prefix="npulab-test-cache-")
os.environ["NPULAB_TILING_CACHE"] = os.path.join(_cache_dir, "tilings.json")

_TESTS = os.path.dirname(os.path.abspath(__file__))
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from npulab import twins  # noqa: E402  (after the environment above)


@pytest.fixture(params=twins.SIDES)
def side(request):
    """"cython", then "python": the side of npulab.twins this run of the test is on."""
    with twins.use(request.param):
        yield request.param
