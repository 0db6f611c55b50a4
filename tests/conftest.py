"""Suite-wide settings: the tiling cache lives in a temporary folder for the whole run, so tests
never read a developer's tuned or searched tilings (results stay deterministic) nor write
theirs; the notebooks the suite runs inherit the setting."""
import os
import tempfile

_cache_dir = tempfile.mkdtemp(prefix="npulab-test-cache-")
os.environ["NPULAB_TILING_CACHE"] = os.path.join(_cache_dir, "tilings.json")
