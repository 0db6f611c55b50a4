"""Lab 08's exercise cases (see labcases/__init__.py); its first ones (the fused epilogue, the
GM bytes) are still in tests/labs/test_exercises.py. References are written from the lab's
specs: BatchNorm's definition, Ascend C's Fixpipe parameters, the chip file's figures and the
bottleneck's op list."""
import numpy as np

from npulab.chips import get_chip

C910 = get_chip("910")
EPS = 1e-5


# -- 08.fold_bn: BN(conv(x, w) + b) = conv(x, w') + b' ------------------------------------------
def _fold(kind="ok"):
    def fn(w, b, mean, var, gamma, beta, eps):
        std = var + eps if kind == "variance" else np.sqrt(var + eps)
        k = gamma / std                                  # what multiplies each output channel
        w2 = w if kind == "weights unscaled" else w * k.reshape(-1, 1, 1, 1)
        if kind == "bias unscaled":
            return w2, b - mean + beta
        if kind == "no conv bias":
            return w2, beta - mean * k
        if kind == "one value":
            return w2
        return w2, k * (b - mean) + beta
    return fn


def _fold_blank(w, b, mean, var, gamma, beta, eps):
    ...


# -- 08.epilogue_home: FixPipe's steps, BN folding, the rest on the AIV ---------------------------
HOMES = {"bias": "drain", "relu": "drain", "cast": "drain", "dequant": "drain", "batch_norm": "fold",
         "gelu": "vector", "residual_add": "vector"}


# -- 08.cycles_saved: the Add and ReLU kernels a fused matmul removes, from the chip file ----------
M, N = 1024, 3072
PASS_CYCLES = M * N * 2 / (C910.memory.gm_bytes_per_cycle * C910.memory.gm_efficiency)
PREDICTION = 2 * C910.launch.launch_cycles + 4 * PASS_CYCLES


# -- 08.fusion_plan: ResNet-50's layer1.1 --------------------------------------------------------
OPS = ["conv1", "bn1", "relu1", "conv2", "bn2", "relu2", "conv3", "bn3", "add", "relu3"]
UNFUSED = [(op,) for op in OPS]
BEST = [("conv1", "bn1", "relu1"), ("conv2", "bn2", "relu2"), ("conv3", "bn3"), ("add", "relu3")]
ONE_FUSED = [("conv1", "bn1", "relu1")] + UNFUSED[3:]

CASES: dict = {
    "08.fold_bn": (_fold(), [(_fold("variance"), "standard deviation"), (_fold("bias unscaled"), "is scaled"),
                             (_fold("no conv bias"), "own bias b"), (_fold("weights unscaled"), "weights must carry"),
                             (_fold("one value"), "pair")], _fold_blank),
    "08.epilogue_home": (HOMES, [({**HOMES, "gelu": "drain"}, "erf or tanh"),
                                 ({**HOMES, "residual_add": "drain"}, "second tensor"),
                                 ({**HOMES, "batch_norm": "drain"}, "folds inference"),
                                 ({**HOMES, "dequant": "vector"}, "FixPipe's quantisation"),
                                 ({**HOMES, "relu": "fold"}, "not affine"),
                                 ({k: v for k, v in HOMES.items() if k != "cast"}, "seven epilogues"),
                                 ([("bias", "drain")], "a dict")], ...),
    "08.cycles_saved": (PREDICTION, [(4 * PASS_CYCLES, "two launches"),
                                     (2 * C910.launch.launch_cycles + 2 * PASS_CYCLES, "four passes"),
                                     (2 * C910.launch.launch_cycles + 5 * PASS_CYCLES, "writes C in both"),
                                     (2 * C910.launch.launch_cycles + 8 * PASS_CYCLES, "not fp32"),
                                     ("30000", "a number")], ...),
    "08.fusion_plan": (BEST, [(UNFUSED, "too slow"), (ONE_FUSED, "too slow"),
                              (BEST[:2] + [("conv3", "bn3", "add", "relu3")], "not a second tensor"),
                              (BEST[:1] + [("conv2", "bn2"), ("relu2", "conv3"), ("bn3",), ("add", "relu3")],
                               "not into the conv after them"),
                              (BEST[:3] + [("relu3", "add")], "once each, in order"),
                              ("conv1 bn1 relu1", "tuples of op names"),
                              (["conv1"] + UNFUSED[1:], "needs its comma")], ...),
}
