"""Checkers of lab 09 (graph compile and memory): the lifetimes of a small graph (against
:func:`npulab.graph.memory.liveness`), an offset planner (a valid plan within 150% of the exact
optimum, :func:`npulab.graph.offsets.optimal`), a fusion rule written with the passes' Draft API
(the reference executor's outputs unchanged, one node fewer), the largest batch that fits a
crowded device (checked by loading it, and one more), and the challenge: a planner that beats
best fit on an adversarial set of lifetimes."""
from __future__ import annotations

import numpy as np

from ...errors import GraphError
from ...graph import reference
from ...graph.memory import MEM_ALIGN
from ...graph.offsets import best_fit, greedy_by_size, peak
from ...sim.memory import fmt_bytes
from .. import lab09 as ref
from . import PERF_SLACK, exercise, failed, is_blank, not_attempted, passed, screen_function

SCALE_RTOL, SCALE_ATOL = 1e-5, 1e-5     # float32 graphs; folding reorders one multiply


# -- exercise 1: liveness --------------------------------------------------------------------------
def _pair(v):
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(
            isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in v):
        return int(v[0]), int(v[1])
    return None


@exercise("09", "liveness: a value lives from the step that writes it to the last step that reads it, "
                "the half-open [write, last read + 1); a graph output to the end of the run",
          key=('"b": (1, 6)', '"d": (3, 7)', '"e": (4, 6)'))
def lifetimes(answer):
    """{value: (start, end)} for every value a node of lab09.liveness_graph() writes."""
    if is_blank(answer):
        return not_attempted()
    if not isinstance(answer, dict):
        return failed("the answer should be a dict", expected="{value: (start, end)}", got=repr(answer)[:60],
                      hint="one entry a value a node writes, e.g. {'a': (0, 4), ...}.")
    g = ref.liveness_graph()
    want = ref.intervals(g)
    if set(answer) - set(want):
        extra = sorted(set(answer) - set(want))
        where = {v: "a graph input: the caller's buffer, never planned" if v in g.inputs else
                 "a weight: it lives in its own region for the whole run" if v in g.constants else
                 "not a value of the graph" for v in extra}
        return failed("values that are not intermediates", expected=", ".join(sorted(want)),
                      got=", ".join(sorted(answer)), hint="; ".join(f"{v} is {w}" for v, w in where.items()) + ".")
    if set(want) - set(answer):
        return failed("values missing", expected=", ".join(sorted(want)), got=", ".join(sorted(answer)),
                      hint="every value a node writes needs memory, the graph output too.")
    got = {v: _pair(answer[v]) for v in want}
    if any(p is None for p in got.values()):
        bad = next(v for v, p in got.items() if p is None)
        return failed(f"{bad}: not a pair of whole numbers", expected="(start, end)", got=repr(answer[bad]),
                      hint="each value's lifetime as a (start, end) tuple of steps.")
    if got == want:
        return passed("every lifetime right: " + ", ".join(f"{v} [{s}, {e})" for v, (s, e) in want.items()) + ".")
    wrong = [v for v in want if got[v] != want[v]]
    v = wrong[0]
    n = len(g.nodes)
    if all(got[w] == (want[w][0], want[w][1] - 1) for w in wrong):
        hint = "the end is one past the last step that reads the value: a half-open interval [start, end)."
    elif all(w in g.outputs for w in wrong):
        hint = f"a graph output lives to the end of the run (step {n}): the caller reads it after the last node."
    elif any(got[w][0] != want[w][0] for w in wrong):
        hint = "node i runs at step i (the first node at step 0) and its output lives from that step."
    else:
        hint = "find the last node that reads each value (also through a Concat or an Add much later)."
    return failed(f"{len(wrong)} lifetime(s) wrong", expected=f"{v}: {want[v]}", got=f"{v}: {got[v]}", hint=hint)


# -- exercise 2: an offset planner -----------------------------------------------------------------------
def _graded_plan(fn, blocks):
    """(problem or None, the plan's peak) of the learner's planner on ``blocks``."""
    offsets = fn([b for b in blocks])
    problem = ref.plan_problem(blocks, offsets)
    return problem, (None if problem else ref.planned_peak(blocks, offsets))


@exercise("09", "offset planning: tensors live at a common step may not share a byte; a tensor dead by "
                "then leaves its bytes to the next one, so the arena is near the most bytes live at once",
          key=("off + b.size <= offsets[o.name]", "off = max(off, offsets[o.name] + o.size)"))
def planner(fn):
    """``fn(blocks) -> {name: offset}`` on exercise 2's problems: valid, within 150% of the optimum."""
    if (v := screen_function(fn, "plan_offsets")) is not None:
        return v
    lines = []
    for name, blocks in ref.planner_cases().items():
        problem, top = _graded_plan(fn, blocks)
        if problem:
            hint = ("offsets are multiples of 512 bytes (GE's alignment): the sizes are, so sums of them are."
                    if "alignment" in problem else
                    "before placing a block, look at every placed block live at a common step (start < other's end "
                    "and other's start < end) and move above any it would overlap.")
            return failed(f"{name}: not a valid plan", got=problem, hint=hint)
        best, total = ref.optimum(blocks), sum(b.size for b in blocks)
        lines.append(f"{name}: your peak {fmt_bytes(top)}, optimum {fmt_bytes(best)}, sum {fmt_bytes(total)}")
        if top > PERF_SLACK * best:
            hint = ("every tensor has its own bytes: reuse the bytes of tensors no longer live."
                    if top >= total else "place each block at the lowest offset where it fits, not on top.")
            return failed(f"{name}: valid, but it needs too much memory", expected=f"<= {fmt_bytes(int(PERF_SLACK * best))} "
                          f"(150% of the optimum {fmt_bytes(best)})", got=fmt_bytes(top), hint=hint, lines=lines)
    return passed("valid plans within 150% of the exact optimum on every problem.", *lines)


# -- exercise 3: a fusion rule -----------------------------------------------------------------------------
@exercise("09", "a fusion rule rewrites a pattern only where it computes the same: Mul by a per-channel "
                "constant after a conv scales each output channel's weights and its bias, if nothing else "
                "reads the conv's output",
          key=("w * s.reshape(-1, 1, 1, 1)", "b * s.reshape(-1)"))
def fold_rule(fn):
    """``fn(draft, record, chip)``: the rule, run on lab09.scale_graph()."""
    if (v := screen_function(fn, "fold_channel_scale")) is not None:
        return v
    g = ref.scale_graph()
    try:
        g2, rec = ref.apply_rule(fn, g)
    except GraphError as exc:
        return failed("the rewritten graph does not build", got=str(exc).splitlines()[0][:160],
                      hint="a fused node writes the Mul's output value (mul.outputs) and reads only values "
                           "that still exist: fold only where the conv's output has the Mul as its one reader "
                           "(d.only_use).")
    except ValueError as exc:                      # numpy could not broadcast the scale onto W
        return failed("the rule stopped with ValueError", got=str(exc)[:160],
                      hint="only a (1, Cout, 1, 1) constant is one value per channel and folds into the "
                           "weights; check the constant's shape before folding.")
    want = reference.run(g, ref.scale_inputs())
    got = reference.run(g2, ref.scale_inputs())
    fused = sorted({n.name for n in g.nodes} - {n.name for n in g2.nodes})
    for k in want:
        if not np.allclose(got[k], want[k], rtol=SCALE_RTOL, atol=SCALE_ATOL):
            if "mul2" in fused:
                hint = "conv2's output is also read by add2: folding the scale into conv2 changes what add2 reads."
            elif "mul3" in fused:
                hint = "scale3 is not one value per channel: only a (1, Cout, 1, 1) constant folds into the weights."
            else:
                hint = ("scale each output channel: W[o] x s[o] (s reshaped to (Cout, 1, 1, 1)), and the bias "
                        "too: (x * W + b) x s = x * (W x s) + b x s.")
            err = float(np.abs(got[k] - want[k]).max())
            return failed("the graph's output changed", expected=f"{k} within {SCALE_RTOL} of the original",
                          got=f"off by up to {err:.4g}; removed nodes: {', '.join(fused) or 'none'}", hint=hint)
    if len(g2.nodes) >= len(g.nodes):
        return failed("nothing was fused", expected=f"{len(g.nodes) - 1} nodes", got=f"{len(g2.nodes)} nodes",
                      hint="find a Mul whose first input a Conv2D writes (d.producer) and whose second is a "
                           "constant (d.const); replace both by one Conv2D (d.replace).")
    if fused != ["mul1"]:
        return failed("the wrong nodes were removed", expected="mul1 folded into conv1",
                      got=f"removed: {', '.join(fused)}", hint="exactly one Mul here can be folded: mul1.")
    return passed(f"{len(g.nodes)} -> {len(g2.nodes)} nodes (mul1 folded into conv1; mul2 and mul3 left), "
                  f"outputs unchanged within {SCALE_RTOL} (float32). Record: {rec.changes}")


# -- exercise 4: the largest batch that fits ----------------------------------------------------------------
@exercise("09", "a model's device memory is its weights plus the planned peak of its intermediates, each "
                "one aclrtMalloc rounded to 2 MB huge pages; the activations grow with the batch",
          key=("pages(b * one.peak)",))
def largest_batch(answer):
    """The largest batch of exercise 4's model that loads on the crowded 910."""
    if is_blank(answer):
        return not_attempted()
    if isinstance(answer, bool) or not isinstance(answer, (int, np.integer)) or not 1 <= answer <= 100_000:
        return failed("the answer should be a batch size", expected="a whole number >= 1", got=repr(answer)[:40],
                      hint="an int: the batch.")
    b = int(answer)
    ok, what = ref.try_load(b)
    p1 = ref.plan_at(1)
    if not ok:
        if b * p1.peak <= ref.FREE_BYTES and b * p1.peak + p1.weights_bytes > ref.FREE_BYTES - 2 * (2 << 20):
            hint = ("the weights need device memory too, and each of the two allocations (weights, arena) is "
                    "rounded up to whole 2 MB huge pages.")
        elif b * p1.lower_bound <= ref.FREE_BYTES < b * p1.peak:
            hint = "the arena is the plan's peak, not the lower bound: the planner does not reach the bound."
        else:
            hint = ("add the weights' bytes to the arena's, and round each allocation up to whole 2 MB huge "
                    "pages (aclrtMalloc's HUGE_FIRST for more than 1 MB).")
        return failed(f"batch {b} does not load", got=what.split(" Compile it")[0][:220], hint=hint)
    more, _ = ref.try_load(b + 1)
    if more:
        hint = ("the arena is the planned peak, far below the sum of the intermediates: the plan reuses memory."
                if b * p1.total_bytes <= ref.FREE_BYTES < (b + 1) * p1.total_bytes else
                "a larger batch still fits: use every byte get_mem_info reports free.")
        return failed(f"batch {b} loads, but so does batch {b + 1}", got=f"{b}", hint=hint)
    return passed(f"batch {b} loads ({what.removeprefix('loaded: ')}) and batch {b + 1} does not.")


# -- the challenge ------------------------------------------------------------------------------------------
def challenge_target(blocks) -> int:
    """Half-way from the heuristics' best peak down to the exact optimum, on the alignment."""
    heur = min(peak(blocks, best_fit(blocks)), peak(blocks, greedy_by_size(blocks)))
    best = ref.optimum(blocks)
    return best + (heur - best) // 2 // MEM_ALIGN * MEM_ALIGN


@exercise("09", "an offset planner's order decides its peak: best fit and greedy-by-size place each tensor "
                "once, in one order; a better plan tries other orders (or moves tensors) and keeps the best",
          performance=True, key=("min(plans, key=lambda p: peak(blocks, p))",))
def beat_best_fit(fn):
    """``fn(blocks) -> {name: offset}`` on lab09.adversarial_blocks(): valid and at most the target."""
    if (v := screen_function(fn, "better_planner")) is not None:
        return v
    blocks = ref.adversarial_blocks()
    problem, top = _graded_plan(fn, blocks)
    if problem:
        return failed("not a valid plan", got=problem,
                      hint="every pair of blocks live at a common step must sit on disjoint bytes.")
    bf, gs = peak(blocks, best_fit(blocks)), peak(blocks, greedy_by_size(blocks))
    best, target = ref.optimum(blocks), challenge_target(blocks)
    line = (f"your peak {fmt_bytes(top)}; best fit {fmt_bytes(bf)}, greedy-by-size {fmt_bytes(gs)}, "
            f"exact optimum {fmt_bytes(best)}; target <= {fmt_bytes(target)}")
    if top <= target:
        return passed(f"a valid plan of {fmt_bytes(top)} ({top / best:.0%} of the optimum; target "
                      f"<= {fmt_bytes(target)}, best fit {fmt_bytes(bf)}).", line)
    hint = ("that is what best fit or greedy-by-size give: one order cannot avoid the trap; try many orders "
            "(by size, by lifetime, shuffled) and keep the plan with the lowest peak."
            if top in (bf, gs) else "try more orders and keep the lowest peak.")
    return failed("a valid plan, but it needs too much memory", expected=f"<= {fmt_bytes(target)}",
                  got=fmt_bytes(top), hint=hint, lines=[line])


__all__ = ["lifetimes", "planner", "fold_rule", "largest_batch", "beat_best_fit", "challenge_target"]
