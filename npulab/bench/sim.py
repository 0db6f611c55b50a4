"""``npulab bench sim``: the Cython timeline scheduler against its Python twin on one long stream."""
from __future__ import annotations

import time

import numpy as np


def bench_sim(instructions: int = 1_000_000, seed: int = 0, repeat: int = 3) -> dict:
    """The Cython timeline against its Python twin on one stream; checks they agree."""
    from .. import _timeline
    from ..sim import timeline
    from .streams import streaming_stream
    pipe, kind, dur, key, lat = streaming_stream(instructions, seed)
    cy = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        s_c, e_c, _, _ = _timeline.schedule(pipe, kind, dur, key, 1, lat)
        cy.append(time.perf_counter() - t0)
    lists = (pipe.tolist(), kind.tolist(), dur.tolist(), key.tolist())
    t0 = time.perf_counter()
    s_p, e_p, _, _ = timeline.schedule(*lists, 1, lat.tolist())
    py = time.perf_counter() - t0
    same = bool(np.array_equal(s_c, s_p) and np.array_equal(e_c, e_p))
    return {"bench": "sim", "instructions": int(instructions), "cython_s": min(cy), "python_s": py,
            "ratio": py / min(cy), "identical": same, "cycles": int(e_c.max())}
