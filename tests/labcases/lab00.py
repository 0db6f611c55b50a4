"""Lab 00's exercise cases (see labcases/__init__.py), written from the lab's specs and the 910's
figures, independently of the checkers."""
import npulab
from npulab.kernels.examples.gm_copy import CopyPlan

C910 = npulab.get_chip("910")
MIB = 2**20

# exercise 1: L1 1 MiB + L0A 64 KiB + L0B 64 KiB + L0C 256 KiB + UB 256 KiB in each of 32 cores
ONE_CORE_MIB = (1024 + 64 + 64 + 256 + 256) / 1024
ON_CHIP_MIB = 32 * ONE_CORE_MIB
assert ON_CHIP_MIB == 52
# exercise 2: 4096^3 MACs of two FLOPs each, at 32 cores x 4096 MACs x 2 FLOPs a cycle
MATMUL_US = 2 * 4096**3 / (32 * 4096 * 2 * C910.clock_ghz * 1e9) * 1e6
# exercise 3: 16 MiB read and 16 MiB written, at 89% of the pins' 1200 GB/s
COPY_US = 2 * 16 * MIB / (1200e9 * 0.89) * 1e6

CASES: dict = {
    "00.on_chip_mib": (ON_CHIP_MIB, [(ONE_CORE_MIB, "one AI core"), (ON_CHIP_MIB * MIB, "units"),
                                     (ON_CHIP_MIB + 32, "L2 is not in the AI cores"),
                                     (32 * 1.5625, "all five buffers"), ("52", "a number")], ...),
    "00.matmul_us": (MATMUL_US, [(MATMUL_US / 2, "two FLOPs"), (MATMUL_US * 32, "one AI core"),
                                 (MATMUL_US * 1e6, "units"), (MATMUL_US * 2, "already counts")], ...),
    "00.copy_floor_us": (COPY_US, [(COPY_US / 2, "count them twice"), (COPY_US * 0.89, "sustains only"),
                                   (2 * 16e6 / (1200e9 * 0.89) * 1e6, "2**20"),
                                   (COPY_US * 1e-6, "units")], ...),
    "00.copy_plan": (CopyPlan(block_dim=32, tile_bytes=256 * 1024 // 4),
                     [(CopyPlan(), "use more cores"),                                  # the default plan
                      (CopyPlan(block_dim=32, tile_bytes=1024), "make the copies larger"),
                      (CopyPlan(block_dim=1, tile_bytes=64 * 1024), "use more cores"),
                      (CopyPlan(block_dim=32, tile_bytes=128 * 1024), "UB"),
                      (CopyPlan(block_dim=32, tile_bytes=1000), "32-byte blocks"),
                      ((32, 65536), "CopyPlan")], ...),
}
