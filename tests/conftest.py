"""Suite-wide settings: the autotuner's cache lives in a temporary folder for the whole run, so
tests never read a developer's tuned tilings (results stay deterministic) nor write theirs."""
import os
import tempfile

_cache_dir = tempfile.mkdtemp(prefix="npulab-test-cache-")
os.environ["NPULAB_AUTOTUNE_CACHE"] = os.path.join(_cache_dir, "autotune.json")
