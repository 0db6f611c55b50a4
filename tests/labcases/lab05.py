"""Lab 05's exercise cases (see labcases/__init__.py); its first ones (nz_offset, k_loop) are
still in tests/labs/test_exercises.py.

The references are worked out here from the specs: the bytes A and B are copied into L1, the
flags and workspace bytes of the 910B's AIC -> AIV hand-off, and a tiling whose block tiles make
one round over the 910's 32 cores.
"""
from math import ceil

# exercise 3: (M, N, K) = (2048, 512, 1024), tiles 128 x 256, fp16. A block tile needs TILE_M
# rows of A and TILE_N columns of B: A is copied once per column of block tiles, B once per row.
M, N, K, TM, TN = 2048, 512, 1024, 128, 256
A_BYTES, B_BYTES = M * K * 2, K * N * 2
GM_TO_L1 = A_BYTES * ceil(N / TN) + B_BYTES * ceil(M / TM)

# exercise 4: (448, 512, 256) with 128 x 128 block tiles on the 910B. Per block tile the AIC sets
# one flag (tile in the workspace) and each of its two AIVs one (slot read): 3. C crosses GM
# twice in fp16: FixPipe writes it, the AIVs read it.
XM, XN, XTM, XTN = 448, 512, 128, 128
BLOCKS = ceil(XM / XTM) * ceil(XN / XTN)
MIX = {"flags_set": 3 * BLOCKS, "workspace_bytes": 2 * XM * XN * 2}

# the challenge: (384, 2816, 8192) on 32 cores. 192 x 176 block tiles are 2 x 16 = 32 tiles, one
# round; L0C holds one 192 x 176 fp32 tile (135 KB of 256 KB), L0A / L0B two 64-deep slices.
ONE_ROUND = (192, 176, 128, 64, 2, 2, 1)
DEFAULT = (128, 256, 512, 64, 2, 2, 2)            # 3 x 11 = 33 block tiles: a second round for one

CASES: dict = {
    "05.gm_to_l1": (GM_TO_L1, [(A_BYTES + B_BYTES, "more than once"),
                               (A_BYTES * ceil(M / TM) + B_BYTES * ceil(N / TN), "swapped"),
                               (GM_TO_L1 // 2, "count bytes"),
                               ("25 MB", "whole number")], ...),
    "05.mix_handoff": (MIX, [({**MIX, "flags_set": BLOCKS}, "both directions"),
                             ({**MIX, "flags_set": 2 * BLOCKS}, "both AIVs"),
                             ({**MIX, "workspace_bytes": XM * XN * 2}, "through GM twice"),
                             ({**MIX, "workspace_bytes": 2 * XM * XN * 4}, "fp16"),
                             ({"flags": 48}, "dict")], ...),
    "05.tiles_for_cores": (ONE_ROUND, [(DEFAULT, "round 2 times"),
                                       ((128, 176, 512, 64, 2, 2, 2), "round 2 times"),
                                       ((192, 176, 128, 64, 1, 1, 1), "use 2 there"),
                                       ((192, 176, 128, 64, 2, 2, 2), "cannot run"),
                                       ((192, 176), "7 whole numbers")], ...),
}
