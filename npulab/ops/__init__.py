"""The interface layer: functional operators on numpy arrays, run on the simulated NPU."""
from __future__ import annotations

import numpy as np

from ..kernels.elementwise import run_add
from .matmul import batch_matmul, matmul


def add(x, y, chip="910", *, buffer_num: int = 2, return_trace: bool = False):
    """z = x + y on the simulated NPU (fp16 or fp32, same shape). With ``return_trace`` returns
    (z, trace)."""
    z, trace = run_add(x, y, chip=chip, buffer_num=buffer_num)
    return (z, trace) if return_trace else z


__all__ = ["add", "matmul", "batch_matmul"]
