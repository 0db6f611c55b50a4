"""``npulab``: the command line (``info`` is the npu-smi analog, ``bench`` runs benchmarks)."""
from __future__ import annotations

import argparse
import json
import sys

from .chips import chips, get_chip
from .errors import ArgumentError, NpuError
from .sim.cost import full_load_watts


def _kib(n: int) -> str:
    return f"{n // 1024} KiB" if n < 1 << 20 else f"{n / (1 << 20):g} MiB"


def _power(chip) -> str:
    """The chip's power with every unit at its peak rate at once, by part, beside the published
    board power it must stay under (sim.cost.full_load_watts)."""
    parts = full_load_watts(chip)
    total = parts.pop("total")
    by_part = ", ".join(f"{k} {v:.3g}" for k, v in parts.items())
    return f"{total:.3g} W ({by_part}) of {chip.power.board_watts:.3g} W published board power"


def _info(args) -> int:
    if args.chip:
        chip = get_chip(args.chip)
        if args.json:
            print(json.dumps(dict(chip.to_dict(), full_load_watts=full_load_watts(chip)), indent=2))
            return 0
        rows = [("name", chip.name), ("title", chip.title), ("SKU", chip.sku), ("arch", chip.arch),
                ("AI cores", chip.ai_cores), ("vector cores", chip.vector_cores or "in each AI core"),
                ("clock", f"{chip.clock_ghz:g} GHz"),
                ("peak fp16", f"{chip.peak_fp16_tflops:.1f} TFLOPS"),
                ("peak int8", f"{chip.peak_int8_tops:.1f} TOPS"),
                ("peak vector", f"{chip.peak_vector_tflops_fp16:.1f} TFLOPS fp16 ({chip.vector_units} vector units, "
                                f"a multiply-add as 2 FLOPs)"),
                ("GM bandwidth", f"{chip.gm_bandwidth_gbs:.0f} GB/s, shared by all cores; "
                                 f"{chip.gm_sustained_bytes_per_cycle * chip.clock_ghz:.0f} GB/s sustained "
                                 f"({chip.memory.gm_efficiency:.0%} of the pins)"),
                ("L2", f"{_kib(chip.memory.l2_bytes)}, {chip.memory.l2_line_bytes} B lines, "
                       f"{chip.memory.l2_bytes_per_cycle * chip.clock_ghz:.0f} GB/s" if chip.memory.l2_bytes else "none"),
                ("event ids", f"0-{chip.event_ids - 1}"),
                ("power at full load", _power(chip))]
        if chip.cross_core is not None:
            x = chip.cross_core
            rows.append(("cross-core flags", f"ids 0-{x.flag_ids - 1}, at most {x.max_pending} sets pending, "
                                             f"{x.flag_latency_cycles} cycles to the other core"))
        rows += [(b.upper(), f"{_kib(getattr(chip.buffers, b))} (align {getattr(chip.align, b)} B)")
                 for b in ("l1", "l0a", "l0b", "l0c", "ub")]
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
        return 0
    all_chips = chips()
    if args.json:
        print(json.dumps([dict(c.to_dict(), full_load_watts=full_load_watts(c)) for c in all_chips], indent=2))
        return 0
    head = ("chip", "cores", "GHz", "fp16 TFLOPS", "GM GB/s", "L1", "L0A", "L0C", "UB", "full load / board W",
            "title")
    rows = [(c.name, str(c.ai_cores), f"{c.clock_ghz:.3g}", f"{c.peak_fp16_tflops:.1f}",
             f"{c.gm_bandwidth_gbs:.0f}", _kib(c.buffers.l1), _kib(c.buffers.l0a), _kib(c.buffers.l0c),
             _kib(c.buffers.ub), f"{full_load_watts(c)['total']:.3g} / {c.power.board_watts:.3g}", c.title)
            for c in all_chips]
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def _bench(args) -> int:
    if args.model is not None:
        if args.what is not None:
            raise ArgumentError(f"bench: give either a benchmark ({args.what}) or --model, not both")
        from .bench.model import bench_model, format_model
        result = bench_model(args.model, args.batch_size, args.iterations, args.chip or "910",
                             ablation=not args.no_ablation, seq_len=args.seq_len, cold=args.cold)
        print(json.dumps(result, indent=1) if args.json else format_model(result))
        return 0
    if args.what is None:
        raise ArgumentError("bench: name a benchmark (sim, kernels, widgets, calibrate) or give --model "
                            "resnet50|bert-base|gpt2")
    if args.what == "widgets":
        from .bench.widgets import bench_widgets
        result = bench_widgets()
        print(json.dumps(result) if args.json else
              f"{result['instructions']:,} instructions: occupancy step "
              f"{result['occupancy_seconds_p90'] * 1000:.0f} ms, gantt step "
              f"{result['gantt_seconds_p90'] * 1000:.0f} ms (p90; goal "
              f"{result['goal_seconds'] * 1000:.0f} ms): {'pass' if result['pass'] else 'FAIL'}")
        return 0 if result["pass"] else 1
    if args.what == "kernels":
        rows = []
        if args.family in ("matmul", "all"):
            from .bench.matmul import bench_matmul
            rows += bench_matmul()
        if args.family in ("vector", "all"):
            from .bench.vector import bench_vector
            rows += bench_vector()
        if args.family in ("conv", "all"):
            from .bench.conv import bench_conv
            rows += bench_conv()
        if args.family in ("fused", "all"):
            from .bench.fused import bench_fused
            rows += bench_fused()
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            for r in rows:
                shape = "x".join(map(str, r["shape"])) if "shape" in r else ""
                op = r["op"] + (f" ({'erf' if r['approximate'] == 'none' else r['approximate']})"
                                 if r.get("approximate") else "")
                print(f"{op:<16} {shape:<18} {r.get('dtype', ''):<8} {r.get('chip', ''):<5} "
                      f"{r['tiling'] if isinstance(r.get('tiling'), str) else '':<10} {r.get('cycles', 0):>12,} cycles  "
                      f"utilization {r.get('utilization', 0):.1%}"
                      + (f"  vs numpy {r['vs_numpy_ratio']:.1f}x ({r.get('blas_threads')} BLAS threads)"
                         if "vs_numpy_ratio" in r else "")
                      + (f", {r['one_thread']['vs_numpy_ratio']:.1f}x on one thread"
                         if r.get("one_thread") else "")
                      + (f"  target {r['target']:.0%} {'met' if r['meets_target'] else 'MISSED'}"
                         if "target" in r else "")
                      + (f"  vs separate launches {r['separate_cycles']:,} cycles ({r['speedup']:.2f}x)"
                         if "separate_cycles" in r else ""))
        return 0
    if args.what == "calibrate":
        from .bench.calibrate import calibrate, format_rows
        rows = calibrate()
        print(json.dumps(rows, indent=1) if args.json else format_rows(rows))
        return 0 if all(r["within_tolerance"] for r in rows) else 1
    if args.what == "sim":
        from .bench.sim import bench_sim
        result = bench_sim(args.instructions)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{result['instructions']:,} instructions: Cython {result['cython_s']:.3f} s, "
                  f"Python {result['python_s']:.3f} s, ratio {result['ratio']:.0f}x, "
                  f"identical: {result['identical']}")
        return 0 if result["identical"] else 1
    raise AssertionError(args.what)


def _atc(args) -> int:
    from .tools.atc import convert
    convert(args.model, args.framework, args.output, args.soc_version, input_shape=args.input_shape,
            fusion_switch_file=args.fusion_switch_file, enable_small_channel=args.enable_small_channel,
            log=args.log, progress=not args.no_progress)
    return 0


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="npulab", description="a simulated Ascend-style NPU for learning")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="the chips (npu-smi info)")
    p.add_argument("--chip", help="one chip in detail: a name or a .toml path")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_info)
    p = sub.add_parser("bench", help="benchmarks, as JSON")
    p.add_argument("what", nargs="?", choices=["sim", "kernels", "widgets", "calibrate"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--model", choices=["resnet50", "bert-base", "gpt2"],
                   help="a whole network, naive and optimised builds (as the seeds' benchmark.py --model)")
    p.add_argument("--batch-size", "--batch_size", type=_positive, default=1, help="bench --model: the batch")
    p.add_argument("--iterations", "--num_iterations", type=_positive, default=1,
                   help="bench --model: inference runs of each build (the seeds' benchmark.py spellings work too)")
    p.add_argument("--chip", help="bench --model: the chip (default 910)")
    p.add_argument("--seq-len", type=_positive, help="bench --model: BERT / GPT-2 sequence length (default 128)")
    p.add_argument("--no-ablation", action="store_true", help="bench --model: skip the one-optimisation builds")
    p.add_argument("--cold", action="store_true", help="bench --model: start from an empty tiling cache")
    p.add_argument("--instructions", type=_positive, default=1_000_000, help="bench sim: stream length")
    p.add_argument("--family", choices=["matmul", "vector", "conv", "fused", "all"], default="all",
                   help="bench kernels: which kernel family (default all)")
    p.set_defaults(func=_bench)
    p = sub.add_parser("atc", help="a model to an offline model file for one chip (ATC's flags)")
    p.add_argument("--model", required=True, help="an .onnx file, a torch.export .pt2, a saved npulab graph, or zoo:NAME")
    p.add_argument("--framework", required=True, help="5 or onnx, pytorch, npulab")
    p.add_argument("--output", required=True, help="the offline model's name (NAME.om is written)")
    p.add_argument("--soc_version", required=True, help="Ascend910, Ascend910B, Ascend310, a chip name or a .toml")
    p.add_argument("--input_shape", help='"name:d0,d1,...;name2:..." as ATC spells it')
    p.add_argument("--fusion_switch_file", help="RuleName:off lines, or the JSON {\"Switch\": ...} form")
    p.add_argument("--enable_small_channel", type=int, default=0, help="1: the C04 stem conv (default 0, as ATC)")
    p.add_argument("--log", default="null", help="debug, info, warning, error or null (default)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_atc)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except NpuError as exc:
        print(f"npulab: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (``npulab info --json | head``): stop quietly, as Unix tools do,
        # and keep Python from complaining again when it flushes stdout at exit
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
