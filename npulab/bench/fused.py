"""``npulab bench kernels --family fused``: the fused matmul (one mix launch: matmul + GELU on
the 910b's AIC and AIV cores) against the two launches it replaces (``ops.matmul``'s kernel,
then ``ops.gelu``'s), in cycles and GM bytes, timing-only.

Each row: ``op``, ``shape`` [M, N, K], ``chip``, ``tiling`` (the cube's recipe), ``cycles`` (the
fused launch), ``separate_cycles`` (the matmul's plus the GELU's) and each of them,
``speedup`` (separate / fused), ``utilization`` (the cube's lower bound / cycles), the GM bytes
read and written and the HBM bytes read of both, and ``aic_mac_ratio`` / ``aiv_vec_ratio`` (the
msprof-style ratios of each side of the mix launch).
"""
from __future__ import annotations

import numpy as np

from ..chips import get_chip
from ..kernels import search
from ..kernels.activation import activation_tiling, launch_activation
from ..kernels.fused_matmul import FusedMatmulProblem, launch_fused_matmul, make_fused_tiling
from ..kernels.matmul import simulate
from ..sim.cost import lower_bound_cycles

#: BERT-base's FFN up-projection for 2048 tokens (K 768, N 3072), a wider one, a square one
SHAPES = ((2048, 3072, 768), (512, 4096, 1024), (1024, 1024, 1024))


def bench_fused(chip="910b", shapes=SHAPES, fused_op_type: str = "gelu_erf") -> list[dict]:
    chip = get_chip(chip)
    rows = []
    for m, n, k in shapes:
        t = make_fused_tiling(FusedMatmulProblem(m, n, k, fused_op_type, True), chip)
        _, fused = launch_fused_matmul(None, None, t, np.zeros(n, np.float32), chip=chip, mode="timing")
        mm = simulate(search.pick(t.problem.matmul, chip), chip)
        _, act = launch_activation(np.zeros(m * n, np.float16), activation_tiling(m * n, np.float16, fused_op_type,
                                                                                  chip), chip, "timing")
        f, sm, sa = fused.summary(), mm.summary(), act.summary()
        sep = mm.cycles + act.cycles
        rows.append({
            "op": f"fused_matmul ({fused_op_type})", "shape": [m, n, k], "dtype": "float16", "chip": chip.name,
            "tiling": t.mm.recipe(), "cycles": fused.cycles, "separate_cycles": sep,
            "matmul_cycles": mm.cycles, "activation_cycles": act.cycles, "speedup": sep / fused.cycles,
            "utilization": lower_bound_cycles(chip, m * n * k, np.float16) / fused.cycles,
            "gm_read_bytes": f["gm_read_bytes"], "gm_write_bytes": f["gm_write_bytes"],
            "hbm_read_bytes": f["hbm_read_bytes"],
            "separate_gm_read_bytes": sm["gm_read_bytes"] + sa["gm_read_bytes"],
            "separate_gm_write_bytes": sm["gm_write_bytes"] + sa["gm_write_bytes"],
            "separate_hbm_read_bytes": sm["hbm_read_bytes"] + sa["hbm_read_bytes"],
            "aic_mac_ratio": f["aic_mac_ratio"], "aiv_vec_ratio": f["aiv_vec_ratio"],
        })
    return rows


__all__ = ["SHAPES", "bench_fused"]
