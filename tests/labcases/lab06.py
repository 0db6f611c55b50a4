"""Lab 06's exercise cases (see labcases/__init__.py); its first two (img2col, NC1HWC0) are still
in tests/labs/test_exercises.py. The references are worked out here from the lab's specs and the
chip file, not taken from the checkers."""
from __future__ import annotations

import math

import npulab
from npulab.kernels.conv import ConvTiles


def _stem_k() -> dict:
    """ResNet-50's stem: 3 channels, 7 x 7 taps, fp16 (C0 = 16, K0 = 16)."""
    taps, cin = 7 * 7, 3
    return {"NC1HWC0": math.ceil(cin / 16) * taps * 16, "C04": math.ceil(taps * 4 / 16) * 16}


def _smallest_batch(cin: int, cout: int, k: int, hw: int, pins: bool = False, weights: bool = True):
    """The smallest batch whose cube time (MACs over every core's cube) reaches its HBM time (map
    in, weights in, output out, fp16, at the sustained rate), stride 1, 'same' padding; None when
    one image's bytes per MAC already exceed the chip's ratio."""
    c = npulab.get_chip("910")
    rate = c.memory.gm_bytes_per_cycle * (1.0 if pins else c.memory.gm_efficiency)
    macs = hw * hw * cout * cin * k * k
    per_image = 2 * hw * hw * (cin + cout)
    fixed = 2 * cout * cin * k * k if weights else 0
    cube = macs / (c.ai_cores * c.cube.macs_per_cycle_fp16)
    for b in range(1, 10_000):
        if b * cube >= (fixed + b * per_image) / rate:
            return b
    return None


BATCH = {"layer4.1.conv2": _smallest_batch(512, 512, 3, 7), "layer3.1.conv3": _smallest_batch(256, 1024, 1, 14)}

CASES: dict = {
    "06.c04_k": (_stem_k(), [({**_stem_k(), "NC1HWC0": 3 * 49}, "no padding"),
                             ({**_stem_k(), "C04": 49 * 4}, "pads K once"),
                             ({**_stem_k(), "C04": 49 * 16}, "4 channels a tap"),
                             ({**_stem_k(), "C04": 160}, "4 channels a pixel"),
                             ({**_stem_k(), "C04": 208.0}, "whole number"),
                             ([784, 208], "a dict")], {"NC1HWC0": ..., "C04": ...}),
    "06.conv_tiles": ((128, 32, 1, 32, 2, 2, 2), [((128, 128, 1, 16, 2, 2, 2), "halo included"),
                                                  ((64, 32, 1, 64, 2, 2, 2), "read the halo and the weights fewer times"),
                                                  ((64, 32, 1, 64, 1, 1, 1), "use 2 at every level"),
                                                  ((100, 32, 1, 32, 2, 2, 2), "multiples of 16"),
                                                  ((128, 32), "7 whole numbers")], ...),
    "06.smallest_batch": (BATCH, [({**BATCH, "layer4.1.conv2": _smallest_batch(512, 512, 3, 7, weights=False)},
                                   "read from HBM too"),
                                  ({**BATCH, "layer4.1.conv2": _smallest_batch(512, 512, 3, 7, pins=True)},
                                   "sustained"),
                                  ({**BATCH, "layer3.1.conv3": 64}, "shares only the weights"),
                                  ({**BATCH, "layer4.1.conv2": None}, "some batch gets there"),
                                  ({**BATCH, "layer4.1.conv2": BATCH["layer4.1.conv2"] + 1}, "either side"),
                                  ({"layer4.1.conv2": BATCH["layer4.1.conv2"]}, "two layers as keys"),
                                  ({**BATCH, "layer4.1.conv2": 6.5}, "whole number")],
                          {"layer4.1.conv2": ..., "layer3.1.conv3": ...}),
    "06.fill_the_cores": (ConvTiles(tile_m=64, tile_n=32, c1_step=4, tile_k0=144, block_dim=32),
                          [(ConvTiles(), "only 1 of the 32 cores"),
                           (ConvTiles(block_dim=32), "only 4 of the 32 cores"),
                           (ConvTiles(tile_n=16, block_dim=32), "TILE_K0 = 16 cuts it"),
                           (ConvTiles(tile_n=16, tile_k0=144, c1_step=4, block_dim=64), "more than the 32 cores"),
                           (ConvTiles(tile_m=256, tile_n=256, c1_step=16, tile_k0=256, block_dim=32), "cannot run"),
                           ((64, 32, 4, 144), "a ConvTiles")], ...),
}
