"""A compiled model on a simulated device: load it, execute it (pyACL's ``aclmdlLoadFromFile`` and
``aclmdlExecute``), and the whole-model trace of a run.

A model executes its tasks in order on one stream, as a compiled graph does on the chip: each AI
Core task is one kernel launch (:func:`npulab.ops.registry.dispatch`, with the tiles the compile
step chose), each AI CPU task runs on the chip's ARM cores (its time from the chip file's
``[aicpu]`` figures, its values from the reference executor, which is what an AI CPU kernel
computes), each data move without a kernel (TransposeD, ConcatD, a TransData, ...) is a DMA of
its bytes through device memory at the rate the DRAM sustains plus a launch, and a relabel
(Reshape, Squeeze, ...) costs nothing.

Two modes, as the simulator has:

* ``functional``: every kernel computes its values on the simulated cores, the outputs are the
  model's outputs (checked against the reference executor and torch in the tests);
* ``timing``: no values, only time: each distinct launch (kernel, operand shapes and dtypes,
  attributes and tiles) is simulated once per model and its trace reused for every task that
  repeats it (ResNet-50's sixteen bottlenecks are four distinct ones), which is what makes a
  whole network quick to time.

:class:`ModelTrace` holds one record per task on the stream and writes a Chrome trace that
Perfetto opens: a model track with one slice per operator (AI Core and AI CPU on tracks of their
own), and under it one track per core and pipe with every instruction of every launch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..chips import ChipSpec
from ..errors import ArgumentError, DeviceMemoryError, GraphError
from ..graph import reference
from ..graph.compile import CompiledModel, load_model, task_key
from ..graph.lower import Task
from ..ops import registry
from .copy import copy_us
from .device import Device

MODES = ("functional", "timing")
#: the model process's tracks in the Chrome trace (thread ids)
MODEL_TRACKS = {"AiCore": 0, "AiCpu": 1, "DataMove": 2, "Memcpy": 3}
TRACK_LABELS = {"AiCore": "AI Core tasks", "AiCpu": "AI CPU tasks", "DataMove": "data moves (DMA)",
                "Memcpy": "host <-> device copies (aclrtMemcpy)"}


@dataclass
class OpRecord:
    """One task of a run on the stream: when it started and how long it took (us), and the
    launch's trace for an AI Core kernel (None for AI CPU tasks and data moves)."""
    name: str
    op_type: str
    engine: str          # "AiCore", "AiCpu", "DataMove" or "Memcpy"
    kernel: str | None
    start_us: float
    dur_us: float
    trace: object = None
    energy_pj: float = 0.0

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


class ModelTrace:
    """The tasks of one model run, in stream order."""

    def __init__(self, chip: ChipSpec, name: str, records: list[OpRecord], mode: str):
        self.chip, self.name, self.records, self.mode = chip, name, records, mode

    @property
    def latency_us(self) -> float:
        """The run's time: its tasks one after another on the stream."""
        return self.records[-1].end_us if self.records else 0.0

    def time_by(self, what: str = "engine") -> dict[str, float]:
        """Microseconds by ``engine`` or by ``op_type``, largest first."""
        out: dict[str, float] = {}
        for r in self.records:
            key = getattr(r, what)
            out[key] = out.get(key, 0.0) + r.dur_us
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def slowest(self, n: int = 10) -> list[OpRecord]:
        return sorted(self.records, key=lambda r: -r.dur_us)[:n]

    def _flops(self, kind: str) -> int:
        return sum(int(r.trace.summary()[kind]) for r in self.records if r.trace is not None)

    def summary(self) -> dict:
        """JSON-ready figures of the run: latency, time by engine, cube and vector utilization
        (the FLOPs they did over what their peaks could do in the run's time), energy, power."""
        seconds = self.latency_us * 1e-6
        energy_j = sum(r.energy_pj for r in self.records) * 1e-12
        cube_peak = self.chip.peak_fp16_tflops * 1e12
        vec_peak = self.chip.peak_vector_tflops_fp16 * 1e12
        return {
            "model": self.name, "chip": self.chip.name, "mode": self.mode, "tasks": len(self.records),
            "latency_us": self.latency_us,
            "time_by_engine_us": self.time_by("engine"),
            "cube_utilization": self._flops("cube_flops") / (cube_peak * seconds) if seconds else 0.0,
            "vector_utilization": self._flops("vector_flops") / (vec_peak * seconds) if seconds else 0.0,
            "energy_j": energy_j,
            "power_w": self.chip.power.static_watts + (energy_j / seconds if seconds else 0.0),
        }

    # -- Chrome / Perfetto ------------------------------------------------------------------
    def chrome_events(self, detail: str = "instructions") -> list[dict]:
        """Chrome trace events. pid 0 is the model: one slice per task on its engine's track;
        with ``detail="instructions"`` each AI Core launch's instructions follow on the tracks
        of its cores and pipes (pid 1 + core), shifted to the launch's start."""
        if detail not in ("ops", "instructions"):
            raise ArgumentError(f"detail must be 'ops' or 'instructions', got {detail!r}")
        events = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": f"model {self.name}"}}]
        for engine, tid in MODEL_TRACKS.items():
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": TRACK_LABELS[engine]}})
        seen_meta = set()
        for r in self.records:
            events.append({"ph": "X", "name": r.name, "cat": r.op_type, "pid": 0, "tid": MODEL_TRACKS[r.engine],
                           "ts": r.start_us, "dur": r.dur_us,
                           "args": {"op_type": r.op_type, "kernel": r.kernel, "engine": r.engine}})
            if detail != "instructions" or r.trace is None:
                continue
            for e in r.trace.chrome_events():
                e = dict(e, pid=e["pid"] + 1)
                if e["ph"] == "M":
                    key = (e["pid"], e["tid"], e["name"])
                    if key in seen_meta:
                        continue
                    seen_meta.add(key)
                else:
                    e["ts"] += r.start_us
                    e["args"] = dict(e["args"], op=r.name)
                events.append(e)
        return events

    def to_chrome(self, path, detail: str = "instructions") -> None:
        """Write the run as Chrome trace JSON (Perfetto, chrome://tracing)."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": self.chrome_events(detail), "displayTimeUnit": "ns",
                       "otherData": {"model": self.name, "chip": self.chip.name, "mode": self.mode,
                                     "latency_us": self.latency_us}}, f)

    def table(self, n: int = 10) -> str:
        """The slowest ``n`` tasks and the time by engine, as aligned text."""
        rows = [f"{r.name:<40} {r.op_type:<14} {r.engine:<8} {r.dur_us:>10.1f} us" for r in self.slowest(n)]
        by = ", ".join(f"{e} {us:,.0f} us" for e, us in self.time_by("engine").items())
        return "\n".join([f"{self.name} on {self.chip.name}: {self.latency_us:,.1f} us ({by})", *rows])


def _data_move_cycles(chip: ChipSpec, nbytes: int) -> float:
    """A DMA of ``nbytes`` (read and written) through device memory at the rate it sustains,
    after a launch."""
    return chip.launch.launch_cycles + nbytes / chip.gm_sustained_bytes_per_cycle


def _zeros(shape, dtype) -> np.ndarray:
    """A zero array of ``shape`` that holds one element (what a timing-only run or a copy's
    size needs: the shape and dtype, no values)."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def timing_operands(task: Task) -> list:
    """The operands a timing-only launch of ``task`` takes: zeros of each operand's kernel shape."""
    return [_zeros(o.shape, o.dtype) for o in task.operands if o is not None]


def _zeros_of(g, values) -> dict:
    return {v: _zeros(g.type_of(v).shape, g.type_of(v).dtype) for v in values}


def _kernel_input(value: np.ndarray, operand) -> np.ndarray:
    a = np.asarray(value)
    if tuple(a.shape) != tuple(operand.shape):
        a = a.reshape(operand.shape)
    return a if a.dtype == np.dtype(operand.dtype) else a.astype(operand.dtype)


class Executor:
    """Runs a :class:`~npulab.graph.compile.CompiledModel`'s tasks; remembers each distinct
    launch's timing-only trace for the model's life. ``launches``: a dict to keep those traces
    in, shared between executors (two builds of one model that launch the same kernel on the
    same operands and tiles simulate it once)."""

    def __init__(self, model: CompiledModel, launches: dict | None = None):
        self.model = model
        self.nodes = {n.name: n for n in model.graph.nodes}
        self._timed: dict = {} if launches is None else launches

    # -- one task ----------------------------------------------------------------------------
    def _launch(self, task: Task, values: dict | None, mode: str):
        chip = self.model.chip
        if mode == "timing":
            key = (chip.name, chip.source, task_key(task))
            if key not in self._timed:
                self._timed[key] = registry.dispatch(task.kernel, *timing_operands(task), chip=chip, mode="timing",
                                                     **task.launch_attrs())[1]
            return None, self._timed[key]
        arrays = [_kernel_input(values[o.value], o) for o in task.operands if o is not None]
        return registry.dispatch(task.kernel, *arrays, chip=chip, mode="functional", **task.launch_attrs())

    def _reference(self, task: Task, values: dict) -> list:
        node = self.nodes[task.name]
        g = self.model.graph
        ins = [values[v] if v else None for v in node.inputs]
        return reference.run_node(node, ins, [g.type_of(v) for v in node.outputs])

    def _store(self, values: dict, task: Task, outs: list) -> None:
        g = self.model.graph
        for v, a in zip(task.outputs, outs):
            if v in g.types:
                t = g.type_of(v)
                a = np.asarray(a).reshape(t.shape)
                a = a if a.dtype == np.dtype(t.dtype) else a.astype(t.dtype)
            values[v] = a

    # -- the whole model ---------------------------------------------------------------------
    def run(self, feeds: dict | None, mode: str) -> tuple[dict | None, ModelTrace]:
        if mode not in MODES:
            raise ArgumentError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        m, chip = self.model, self.model.chip
        clock_mhz = chip.clock_ghz * 1000.0
        values = None
        if mode == "functional":
            values = dict(m.graph.constants)
            values.update(_checked_feeds(m, feeds))
        records, t = [], 0.0
        for task in m.tasks:
            if task.engine == "None":
                if values is not None:
                    self._store(values, task, [values[task.operands[0].value]])
                continue
            if task.engine == "AiCore" and task.kernel is not None:
                out, trace = self._launch(task, values, mode)
                if values is not None:
                    self._store(values, task, [out])
                rec = OpRecord(task.name, task.op_type, "AiCore", task.kernel, t, trace.cycles / clock_mhz, trace,
                               float(np.sum(trace.energy)))
            else:
                if values is not None:
                    self._store(values, task, self._reference(task, values))
                if task.engine == "AiCpu":
                    rec = OpRecord(task.name, task.op_type, "AiCpu", None, t, chip.aicpu.task_us(task.bytes_moved))
                else:
                    rec = OpRecord(task.name, task.op_type, "DataMove", None, t,
                                   _data_move_cycles(chip, task.bytes_moved) / clock_mhz,
                                   energy_pj=task.bytes_moved * chip.energy.gm_byte_pj)
            records.append(rec)
            t = rec.end_us
        trace = ModelTrace(chip, m.name, records, mode)
        if values is None:
            return None, trace
        return {v: values[v] for v in m.graph.outputs}, trace


class Model:
    """A compiled model loaded on a device (pyACL's ``acl.mdl.load_from_file`` gives its id):
    its weights in device memory and, when its plan is static, one arena of the planned peak
    for every intermediate, allocated once at load as GE does; :meth:`execute` copies the inputs
    host to device, runs the tasks and copies the outputs back, each copy on the trace. A plan in
    dynamic mode (``NPULAB_STATIC_MEMORY=0``) holds no arena: each run allocates and frees its
    buffers on the device as it goes (:attr:`dynamic_peak_bytes` is the most it held); what
    dynamic allocation costs in time is not modelled."""

    def __init__(self, compiled: CompiledModel, device: Device | None = None):
        self.compiled = compiled
        self.device = device if device is not None else Device(compiled.chip, 0)
        if self.device.chip != compiled.chip:
            raise ArgumentError(f"model '{compiled.name}' was compiled for {compiled.chip.name} "
                                f"(--soc_version); device {self.device.device_id} is a {self.device.chip.name}: "
                                f"compile it again for that chip")
        self.executor = Executor(compiled)
        self.buffers: list = []
        self.dynamic_peak_bytes = 0
        self._place()

    @property
    def name(self) -> str:
        return self.compiled.name

    def memory(self) -> dict:
        """Bytes the model holds on its device: weights, the static arena (0 when dynamic)."""
        plan, g = self.compiled.plan, self.compiled.graph
        weights = plan.weights_bytes if plan is not None else sum(int(a.nbytes) for a in g.constants.values())
        arena = plan.peak if plan is not None and plan.mode.static else 0
        return {"weights_bytes": int(weights), "arena_bytes": int(arena)}

    def _place(self) -> None:
        need = self.memory()
        plan = self.compiled.plan
        try:
            for what in ("weights_bytes", "arena_bytes"):
                if need[what]:
                    self.buffers.append(self.device.malloc(need[what], "HUGE_FIRST"))
        except DeviceMemoryError as exc:
            self.unload()
            peak = f"a planned peak of {plan.peak:,} bytes of intermediates" if plan is not None else "its intermediates"
            raise DeviceMemoryError(
                f"model '{self.name}' does not fit device {self.device.device_id} ({self.device.chip.name}, "
                f"{self.device.chip.memory.gm_bytes:,} bytes): it needs {need['weights_bytes']:,} bytes of weights "
                f"and {peak}. Compile it for a smaller batch, or recompute activations rather than keep "
                f"them. ({exc})") from None

    def _dynamic_allocations(self) -> int:
        """A dynamic-memory run's allocations on the device: each buffer of the plan malloc'd
        at the step that writes it and freed after the step that last reads it, in the run's
        order (the device's page rounding and fragmentation apply); returns the most bytes the
        device held. An allocation that fails names the tensor and the step."""
        plan = self.compiled.plan
        held: dict = {}
        free0, _ = self.device.get_mem_info()
        low = free0
        try:
            for step in range(plan.steps + 1):
                for p in [p for p in plan.placements if p.size and p.end <= step and p.name in held]:
                    self.device.free(held.pop(p.name))
                for p in plan.placements:
                    if p.size and p.start == step:
                        try:
                            held[p.name] = self.device.malloc(p.size, "HUGE_FIRST")
                        except DeviceMemoryError as exc:
                            raise DeviceMemoryError(
                                f"model '{self.name}' (dynamic memory) ran out of device memory at step {step} "
                                f"allocating {p.name} ({p.size:,} bytes): {exc}") from None
                low = min(low, self.device.get_mem_info()[0])
        finally:
            for ptr in held.values():
                self.device.free(ptr)
        return free0 - low

    def unload(self) -> None:
        """aclmdlUnload: give the model's device memory back."""
        for ptr in self.buffers:
            self.device.free(ptr)
        self.buffers = []

    def npu(self, chip=None, device_id: int = 0) -> "Model":
        """The model on device ``device_id`` (a new Device of ``chip``, default the model's);
        its memory on this device is given back."""
        self.unload()
        return Model(self.compiled, Device(chip if chip is not None else self.compiled.chip, device_id))

    def _copies(self, kind: str, arrays: dict, t: float) -> list[OpRecord]:
        out = []
        for name, a in arrays.items():
            us = copy_us(self.device.chip, kind, int(a.nbytes))
            out.append(OpRecord(f"{kind.lower()} {name}", "Memcpy", "Memcpy", None, t, us))
            t += us
        return out

    def execute(self, inputs: dict | None, mode: str = "functional") -> tuple[dict | None, ModelTrace]:
        """aclmdlExecute: the inputs in, the outputs out, and the run's trace (the copies in and
        out on their own track). Timing mode takes ``inputs=None`` (the copies sized from the
        graph's input types)."""
        g = self.compiled.graph
        if mode == "timing" and inputs is None:
            shaped = _zeros_of(g, g.inputs)
        else:
            shaped = _checked_feeds(self.compiled, inputs)
        plan = self.compiled.plan
        if plan is not None and not plan.mode.static:
            self.dynamic_peak_bytes = self._dynamic_allocations()
        outs, trace = self.executor.run(shaped if mode == "functional" else None, mode)
        copy_in = self._copies("HOST_TO_DEVICE", shaped, 0.0)
        shift = copy_in[-1].end_us if copy_in else 0.0
        for r in trace.records:
            r.start_us += shift
        end = trace.latency_us
        results = outs if outs is not None else _zeros_of(g, g.outputs)
        copy_out = self._copies("DEVICE_TO_HOST", results, end)
        trace.records = copy_in + trace.records + copy_out
        return outs, trace


def load_from_file(path, device: Device | None = None) -> Model:
    """aclmdlLoadFromFile: an offline model file on ``device`` (default: device 0 of the chip it
    was compiled for)."""
    return Model(load_model(path), device)


def _checked_feeds(model: CompiledModel, feeds) -> dict:
    g = model.graph
    if not isinstance(feeds, dict):
        raise ArgumentError(f"model '{g.name}': feeds must be a dict of input name -> array "
                            f"(inputs: {', '.join(g.inputs)}), got {type(feeds).__name__}")
    missing = [v for v in g.inputs if v not in feeds]
    unknown = [k for k in feeds if k not in g.inputs]
    if missing or unknown:
        raise GraphError(f"model '{g.name}': inputs are {', '.join(g.inputs)}; "
                         + (f"missing {', '.join(missing)}" if missing else "")
                         + ("; " if missing and unknown else "")
                         + (f"not inputs: {', '.join(unknown)}" if unknown else ""))
    out = {}
    for name in g.inputs:
        t = g.type_of(name)
        a = np.asarray(feeds[name])
        if tuple(a.shape) != t.shape:
            raise GraphError(f"model '{g.name}': input '{name}' is {t}, fed shape {a.shape}")
        out[name] = a if a.dtype == np.dtype(t.dtype) else a.astype(t.dtype)
    return out


__all__ = ["Executor", "Model", "ModelTrace", "OpRecord", "MODES", "load_from_file", "timing_operands"]
