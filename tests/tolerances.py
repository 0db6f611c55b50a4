"""The tests' check of an NPU output against its reference: :func:`assert_close`, within the
tolerance table's row (:mod:`npulab.ops.tolerance` holds the rows and their reasoning)."""
from __future__ import annotations

import numpy as np

from npulab.ops.tolerance import tol


def assert_close(actual, expected, dtype=None, unit: str = "vector", err_msg: str = "") -> None:
    """Assert ``actual`` (an NPU output) matches ``expected`` (the reference) within the table's
    row for ``dtype`` (default: ``actual``'s dtype) on ``unit``."""
    actual = np.asarray(actual)
    dtype = actual.dtype if dtype is None else dtype
    assert actual.shape == np.shape(expected), f"shape {actual.shape} != expected {np.shape(expected)}"
    np.testing.assert_allclose(actual.astype(np.float64), np.asarray(expected, np.float64),
                               err_msg=err_msg, **tol(dtype, unit))
