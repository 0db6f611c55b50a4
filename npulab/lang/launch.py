"""Launch a kernel on the simulated NPU (the ``kernel<<<block_dim, ...>>>`` of Ascend C).

``launch`` runs the kernel body once per block, on core ``block_idx % cores``, collecting each
core's instruction stream (each block starting with what starting it costs: the chip's
``[launch]`` figures, :func:`_block_start`); then schedules the streams, checks races, and returns the GM
arguments after the run with the Trace.

A kernel declares what it runs on, as Ascend C's KERNEL_TYPE_AIC_ONLY / AIV_ONLY / MIX do:
``core_type="aiv"`` for a vector-only kernel, ``"aic"`` (the default) for a cube kernel,
``"mix"`` for one that uses both. ``cores`` is ``chip.cores_for(core_type)``: on a split chip
(910B class) a vector kernel runs on the 48 AIV cores, not the 24 AIC cores, and a mix kernel
runs each block on an AIC and the two AIVs of its AI core, the body once on each
(:mod:`npulab.lang.mix`; KERNEL_TYPE_MIX_AIC_1_2).
"""
from __future__ import annotations

import contextlib
import gc
from typing import NamedTuple

import numpy as np

from ..arch import DEFAULT_CHIP
from ..errors import ArgumentError, ArgumentTypeError
from ..sim.device import DEFAULT_BUDGET, Device
from ..sim.isa import Kind, Op, Pipe
from ..sim.trace import Trace
from . import context
from .mix import MixRun
from .tensor import GlobalTensor


class LaunchResult(NamedTuple):
    outputs: list            # every GM argument after the run (1-D numpy arrays, the caller's own;
                             # None in timing mode)
    trace: Trace


#: the most blocks a launch takes: Ascend C's blockDim is 1 to 65535 (Ascend C guide, "kernel
#: function": BlockDim is a logical core count in [1, 65535])
MAX_BLOCK_DIM = 65535


def launch(kernel, block_dim: int, *args, chip=DEFAULT_CHIP, mode: str = "functional",
           budget: int = DEFAULT_BUDGET, check_races: bool | None = None,
           core_type: str = "aic", donate=(), outputs=None) -> LaunchResult:
    """Run ``kernel(*args)`` on ``block_dim`` blocks.

    args: numpy arrays become GM tensors named ``arg0``, ``arg1``, ...; your arrays are never
    written: the kernel reads them where they are and writes its own copy (made on the first
    write). GlobalTensors are used as they are; anything else (a tiling struct) is passed
    through. mode: "functional" computes every tile with numpy, "timing" only times.
    check_races defaults to on in functional mode. core_type: "aic", "aiv" or "mix" (see the
    module docstring); an "aiv" kernel has only the UB of the on-chip buffers, and an "aic"
    kernel on a split chip (910B) has no UB.

    donate: positions of numpy arguments you give to the launch (as JAX's donate_argnums): it
    writes them in place, with no copy. outputs: positions of the GM arguments to hand back
    (default: all); the others are None in ``LaunchResult.outputs``.

    The launch runs on the side of :mod:`npulab.twins` it finds when it starts: the Cython core
    (the default), or its readable Python twins inside ``with npulab.twins.use("python"):``.
    The trace is the same either way.
    """
    if not callable(kernel):
        raise ArgumentTypeError(f"launch: kernel must be callable, got {type(kernel).__name__}")
    if isinstance(block_dim, (bool, np.bool_)) or not isinstance(block_dim, (int, np.integer)) or block_dim < 1:
        raise ArgumentError(f"launch: block_dim must be a positive integer, got {block_dim!r}")
    if block_dim > MAX_BLOCK_DIM:
        raise ArgumentError(f"launch: block_dim {block_dim:,} is more blocks than a launch can have: Ascend C "
                         f"takes 1 to {MAX_BLOCK_DIM:,} (the kernel call's blockDim); give each block more "
                         f"work instead")
    donate = set(donate)
    for i in donate:
        if not (isinstance(i, (int, np.integer)) and 0 <= i < len(args) and isinstance(args[i], np.ndarray)):
            raise ArgumentError(f"launch: donate={sorted(donate)!r} must name positions of numpy arguments "
                             f"(there are {len(args)} arguments)")
    dev = Device(chip, mode, int(block_dim), budget=budget, check_races=check_races,
                 core_type=core_type)
    dev.launch_cycles = dev.chip.launch.launch_cycles      # the task scheduler starting the cores
    gm_args, own = [], set()
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            a = GlobalTensor(a, name=f"arg{i}", _borrow=i not in donate) if dev.functional else \
                GlobalTensor.empty(a.size, a.dtype, name=f"arg{i}")
            own.add(i)
        gm_args.append(a)
    # no cyclic garbage collection during the launch: the blocks allocate thousands of small
    # objects that live until it ends (allocation records, queues, tensors) and the collector
    # would traverse them again and again; it resumes, as it was, when the launch returns
    collecting = gc.isenabled()
    gc.disable()
    try:
        # functional: the cube path's numerics may run on a worker thread (formats.worker)
        with dev.moves.worker.deferred_moves() if dev.functional else contextlib.nullcontext():
            _run_blocks(dev, kernel, gm_args, int(block_dim))
        trace = dev.finish()
    finally:
        dev.release()
        if collecting:
            gc.enable()
    # a numpy argument's GM array is handed over: the launch's own copy if the kernel wrote it,
    # the donated array itself, else a copy of the bytes it read; a GlobalTensor the caller
    # passed is theirs, so its bytes are copied
    wanted = range(len(gm_args)) if outputs is None else set(outputs)
    handed = []
    for i, a in enumerate(gm_args):
        if i not in wanted or not isinstance(a, GlobalTensor) or a.data is None:
            handed.append(None)
        elif i in own and not a.borrowed:
            handed.append(a.data)
        else:
            handed.append(a.data.copy())
    return LaunchResult(handed, trace)


def _run_block(dev: Device, core, b: int, kernel, gm_args: list) -> None:
    """Run block ``b``'s body on ``core``: its TPipes go and its end barrier is issued after it;
    after the core's last block, its bytes go to the next core, still in the host's cache. On an
    AIV of a mix launch the body's ``get_block_idx()`` is 2 x b + its sub-block (Ascend C)."""
    core.block_idx = b
    _block_start(dev, core, b)
    ctx = context.KernelContext(dev, core, 2 * b + core.sub if core.role == "aiv" and dev.mix else b,
                                dev.block_dim)
    contexts = context.stack()
    contexts.append(ctx)
    try:
        kernel(*gm_args)
        for p in ctx.pipes:
            p.destroy()
        core.end_block()
    finally:
        contexts.pop()
    if b + dev.active_cores >= dev.block_dim:
        dev.recycle_buffers(core)


def _block_start(dev: Device, core, b: int) -> None:
    """What starting a block costs its core, on the scalar unit before the body's first
    instruction: ``launch.block_start_cycles`` each block (the core fetches the kernel's first
    instructions and its arguments). The launch itself (``launch.launch_cycles``, the task
    scheduler starting the cores) comes before every core's time: :func:`launch` charges it to
    the Trace (``Trace.launch_cycles``, part of ``Trace.cycles``). At batch 1 a network is a
    hundred small launches, and these are a large part of its time."""
    cycles = dev.chip.launch.block_start_cycles
    if cycles:
        core.issue(Pipe.S, Kind.WORK, Op.SCALAR, cycles, name=f"block {b} start")


def _run_blocks(dev: Device, kernel, gm_args: list, block_dim: int) -> None:
    """Run the kernel body once per block on core ``block_idx % cores``. A mix launch on a
    split chip runs it on every core of the block's AI core (its AIC and two AIVs): by turns in
    a functional run (lang.mix.MixRun), one core after another in a timing run."""
    def run(core, b):
        _run_block(dev, core, b, kernel, gm_args)
    try:
        if not dev.mix:
            for b in range(block_dim):
                run(dev.core_for_block(b), b)
        elif dev.functional:
            MixRun(dev, block_dim, run).run()
        else:
            for core in dev.cores:
                for b in range(core.group, block_dim, dev.active_cores):
                    run(core, b)
    finally:
        dev.recycle_buffers()           # on-chip bytes do not outlive the launch
