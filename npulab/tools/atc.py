"""``npulab atc``: ATC's analog, a model to an offline model file for one chip, with ATC's own flag
spelling::

    npulab atc --model resnet50.onnx --framework 5 --output resnet50 --soc_version Ascend910 \\
               --input_shape "input:1,3,224,224" [--fusion_switch_file fusion.cfg] \\
               [--enable_small_channel 1] [--log info]

Steps, as ATC's: read the model (``--framework``: 5 or ``onnx`` an ONNX file; ``pytorch`` a
``torch.export`` program saved as ``.pt2``; ``npulab`` a graph saved by
:func:`npulab.graph.save` or a zoo model, ``zoo:resnet50``), run GE's passes (the switch file
turns rules off), compile for the chip (every distinct operator's tiling through the one search
and its cache, a progress bar; the memory plan), write ``NAME.om``, and print a summary: nodes
before and after fusion, the planned memory, and the latency per batch a timing-only run of the
compiled model estimates.

ATC's other ``--framework`` values (0 Caffe, 1 MindSpore, 3 TensorFlow) are named in the error
for them: npulab has no importer for those formats.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..chips import chip_names, get_chip
from ..errors import ArgumentError
from ..graph import from_onnx, parse_input_shape, passes, serial, zoo
from ..graph.compile import BuildOptions, compile_graph, save_model
from ..runtime.model import Executor

#: --framework values: ATC's numbers and npulab's names
FRAMEWORKS = {"5": "onnx", "onnx": "onnx", "pytorch": "pytorch", "npulab": "npulab"}
#: ATC's numbers npulab does not read, and what they are
OTHER_FRAMEWORKS = {"0": "Caffe", "1": "MindSpore", "3": "TensorFlow"}
#: --soc_version names and the chip files they select
SOC_VERSIONS = {"ascend910": "910", "ascend910a": "910", "ascend910b": "910b", "ascend910b1": "910b",
                "ascend310": "310"}
LOG_LEVELS = ("debug", "info", "warning", "error", "null")
OM_SUFFIX = ".om"


def chip_of_soc(soc_version: str):
    """The chip of ``--soc_version``: Ascend910 / Ascend910B / Ascend310 (ATC's names), a
    built-in chip name, or a chip file."""
    key = soc_version.strip().lower()
    if key in SOC_VERSIONS:
        return get_chip(SOC_VERSIONS[key])
    if key in chip_names() or key.endswith(".toml"):
        return get_chip(soc_version)
    raise ArgumentError(f"--soc_version {soc_version!r}: expected one of Ascend910, Ascend910B, Ascend310, "
                        f"a chip name ({', '.join(chip_names())}) or a .toml chip file")


def framework_of(value: str) -> str:
    key = str(value).strip().lower()
    if key in FRAMEWORKS:
        return FRAMEWORKS[key]
    if key in OTHER_FRAMEWORKS:
        raise ArgumentError(f"--framework {value}: {OTHER_FRAMEWORKS[key]} models have no importer in npulab; "
                            f"export the model to ONNX (--framework 5) or give a torch.export .pt2 (pytorch)")
    raise ArgumentError(f"--framework {value!r}: expected 5 or onnx, pytorch, npulab (ATC's 0 Caffe, 1 MindSpore "
                        f"and 3 TensorFlow are not read here)")


def _zoo_graph(name: str, shapes: dict | None):
    """A zoo model at the batch (and image size or sequence length) ``--input_shape`` gives."""
    config = {}
    if shapes:
        dims = next(iter(shapes.values()))
        config["batch"] = dims[0]
        if name == "resnet50" and len(dims) == 4:
            config["image"] = dims[2]
        elif name != "resnet50" and len(dims) == 2:
            config["seq"] = dims[1]
    if name != "resnet50":
        config["materialize"] = False
    return zoo.build(name, dtype="float16", **config)


def read_model(model: str, framework: str, input_shape: str | None = None):
    """The model file (or zoo name) as a typed graph."""
    kind = framework_of(framework)
    shapes = parse_input_shape(input_shape) if input_shape else None
    if kind == "npulab" and model.startswith("zoo:"):
        return _zoo_graph(model[4:], shapes).infer()
    path = Path(model)
    if not path.exists() and not (kind == "npulab" and Path(str(path) + ".json").exists()):
        raise ArgumentError(f"--model {model}: no such file")
    if kind == "onnx":
        return from_onnx(path, shapes)
    if kind == "pytorch":
        import torch
        from ..graph.importers import from_exported
        ep = torch.export.load(str(path))
        g = from_exported(ep, name=path.stem)
    else:
        g = serial.load(path.with_suffix("") if path.suffix in (".json", ".npz") else path)
    if shapes:
        for name, dims in shapes.items():
            if name not in g.inputs or g.type_of(name).shape != tuple(dims):
                have = ", ".join(f"{v}:{','.join(map(str, g.type_of(v).shape))}" for v in g.inputs)
                raise ArgumentError(f"--input_shape {name}:{','.join(map(str, dims))}: the model's inputs are "
                                    f"{have}; a {kind} model's shapes are fixed when it is exported")
    return g.infer()


@dataclass
class AtcResult:
    """What a conversion wrote and measured."""
    path: Path
    summary: dict


def convert(model: str, framework: str, output: str, soc_version: str, *, input_shape: str | None = None,
            fusion_switch_file: str | None = None, enable_small_channel: int = 0, log: str = "null",
            progress: bool = True, out=print) -> AtcResult:
    """Convert ``model`` into ``output``.om for ``soc_version`` (see the module docstring)."""
    if log not in LOG_LEVELS:
        raise ArgumentError(f"--log {log!r}: expected one of {', '.join(LOG_LEVELS)}")
    if enable_small_channel not in (0, 1):
        raise ArgumentError(f"--enable_small_channel {enable_small_channel!r}: expected 0 or 1")
    chip = chip_of_soc(soc_version)
    switches = passes.FusionSwitches.load(fusion_switch_file) if fusion_switch_file else passes.FusionSwitches()
    t0 = time.perf_counter()
    graph = read_model(model, framework, input_shape)
    report = {}

    def run_passes(g):
        fused, report["passes"] = passes.optimize(g, switches, chip)
        return fused

    cm = compile_graph(graph, chip, passes=run_passes,
                       options=BuildOptions(small_channel=bool(enable_small_channel), memory_mode=2), progress=progress)
    path = Path(output if output.endswith(OM_SUFFIX) else output + OM_SUFFIX)
    save_model(cm, path)
    compile_s = time.perf_counter() - t0
    _, trace = Executor(cm).run(None, "timing")
    batch = graph.type_of(graph.inputs[0]).shape[0] if graph.inputs else 1
    r = cm.report
    summary = {"model": cm.name, "output": str(path), "soc_version": soc_version, "chip": chip.name,
               "nodes_before": r["nodes_before"], "nodes_after": r["nodes_after"],
               "fusions": report["passes"].effected(), "feature_memory_bytes": r["feature_bytes"],
               "intermediate_bytes": r["intermediate_bytes"], "weight_bytes": r["weights_bytes"],
               "batch": batch, "estimated_latency_ms": trace.latency_us / 1000, "compile_s": compile_s}
    if log in ("info", "debug"):
        out(report["passes"].summary())
        out(cm.plan.summary())
    if log == "debug":
        out(trace.table(20))
    out(format_summary(summary))
    return AtcResult(path, summary)


def format_summary(s: dict) -> str:
    fused = ", ".join(f"{k} {v}" for k, v in s["fusions"].items()) or "none"
    return "\n".join([
        f"ATC run success: {s['output']} for {s['chip']} ({s['soc_version']})",
        f"  nodes        {s['nodes_before']} before the passes, {s['nodes_after']} after ({fused})",
        f"  memory       {s['feature_memory_bytes']:,} B planned for intermediates (their sum "
        f"{s['intermediate_bytes']:,} B), {s['weight_bytes']:,} B of weights",
        f"  latency      {s['estimated_latency_ms']:.3f} ms per batch of {s['batch']} (timing-only simulation)",
        f"  compile      {s['compile_s']:.1f} s"])


__all__ = ["FRAMEWORKS", "SOC_VERSIONS", "LOG_LEVELS", "AtcResult", "chip_of_soc", "convert", "format_summary",
           "framework_of", "read_model"]
