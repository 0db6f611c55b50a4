"""Chips as data: read ``data/chips/*.toml`` (or a user's own file) into a frozen ChipSpec.

A chip file is a small TOML document with a fixed set of sections and fields (see
``data/chips/910.toml`` for one with a source tag on every figure). The loader is strict: a
missing field, an unknown field, a wrong type or a negative value is a :class:`ChipFileError`
that names the file and the dotted field, so a typo never silently becomes a default.
"""
from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import ArgumentError, ChipFileError

#: The on-chip buffers of one AI core, in the order the views draw them.
BUFFERS = ("l1", "l0a", "l0b", "l0c", "ub")

#: What a kernel declares it runs on (Ascend C's KERNEL_TYPE_AIC_ONLY / AIV_ONLY / MIX_AIC_1_2):
#: "aic" a cube kernel, "aiv" a vector-only kernel, "mix" one that uses both.
CORE_TYPES = ("aic", "aiv", "mix")

#: How the cube's result leaves L0C (``[cube] output_path``): "fixpipe", FixPipe to GM or L1 with
#: its epilogue on the way (910B, the teaching chip); "ub", DataCopy L0C -> UB on the vector
#: pipe with the accumulator as it is, the epilogue on the vector unit, MTE3 to GM (910);
#: "ub_convert", the same with the cast, a scalar dequantisation and ReLU on the way into UB (310).
OUTPUT_PATHS = ("fixpipe", "ub", "ub_convert")


@dataclass(frozen=True)
class CubeSpec:
    macs_per_cycle_fp16: int
    macs_per_cycle_int8: int
    fill_cycles: int            # issue to the first fractal step, hidden behind a busy cube
    drain_cycles: int           # last fractal step to its result in L0C
    output_path: str            # one of OUTPUT_PATHS


@dataclass(frozen=True)
class VectorSpec:
    bytes_per_cycle: int
    repeat_bytes: int
    max_repeat: int
    startup_cycles: int
    transcendental_cycles_per_repeat: int
    ub_bank_bytes: int          # one UB bank (rows of 32 B); the UB is ub / ub_bank_bytes banks
    ub_bank_groups: int         # bank b is in group b % ub_bank_groups


@dataclass(frozen=True)
class BufferSpec:
    """Capacity in bytes of each per-core buffer (``align`` uses the same fields for alignment)."""
    l1: int
    l0a: int
    l0b: int
    l0c: int
    ub: int


@dataclass(frozen=True)
class MemorySpec:
    gm_bytes: int
    gm_bytes_per_cycle: float        # the pins' rate (the published bandwidth)
    gm_efficiency: float             # the fraction of it a DRAM sustains under streaming copies
    l2_bytes: int
    l2_bytes_per_cycle: float
    l2_line_bytes: int               # what L2 keeps, fetches and evicts as one (sim/l2.py)
    l2_hit_startup_cycles: int       # a GM read that L2 serves wholly: its start-up instead of MTE2's


@dataclass(frozen=True)
class PipeSpec:
    mte2_bytes_per_cycle: float
    mte2_startup_cycles: int
    mte1_bytes_per_cycle: float         # L1 -> L0A
    mte1_l0b_bytes_per_cycle: float     # L1 -> L0B
    mte1_startup_cycles: int
    l1_port_bytes_per_cycle: float      # L1's one port: MTE1 reads and MTE2 writes share it
    l0c_to_ub_bytes_per_cycle: float    # L0C drain into UB (coupled chips, on the vector pipe)
    mte3_bytes_per_cycle: float
    mte3_startup_cycles: int
    fix_bytes_per_cycle: float
    fix_startup_cycles: int


@dataclass(frozen=True)
class LaunchSpec:
    """What starting a kernel costs: ``launch_cycles`` once a launch (the task scheduler starts
    it on the cores), ``block_start_cycles`` each time a core starts a block."""
    launch_cycles: int
    block_start_cycles: int


@dataclass(frozen=True)
class AiCpuSpec:
    """The AI CPU engine: the chip's ARM cores that run the ops no AI Core kernel covers
    (GatherV2, Cumsum, comparisons, ...). A task costs ``task_start_us`` to start (the task
    scheduler hands it to an ARM core, which looks the kernel up and reads its arguments) and
    then its bytes at ``gb_per_s`` a core over ``cores`` cores."""
    cores: int
    task_start_us: float
    gb_per_s: float

    def task_us(self, nbytes: int) -> float:
        """A task's time in microseconds: the start-up, then its bytes over every core."""
        return self.task_start_us + nbytes / (self.gb_per_s * 1e3 * max(1, self.cores))


#: PCIe transfer rate a lane, in gigatransfers a second, and its line code's payload bits of
#: every coded bit, by generation (S16: 8b/10b up to Gen2, 128b/130b from Gen3 on).
PCIE_GT_PER_S = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}
PCIE_ENCODING = {1: 8 / 10, 2: 8 / 10, 3: 128 / 130, 4: 128 / 130, 5: 128 / 130}


@dataclass(frozen=True)
class DeviceSpec:
    """The device as the host sees it (the runtime layer, ``npulab.runtime``): its host link and
    the pages its memory is handed out in. Its memory's size is ``[memory] gm_bytes``.

    The link is PCIe ``pcie_gen`` x ``pcie_lanes``. What a copy gets of it: the lanes' rate after
    the line code, times the share of every transaction that is data: a write of
    ``max_payload_bytes`` travels with ``tlp_overhead_bytes`` of framing, header and CRC.
    ``memcpy_start_us`` is what a synchronous copy pays before its first byte moves (the runtime
    hands a task to the device's DMA engine and waits for it to report back);
    ``host_copy_gb_per_s`` is a host CPU core copying host memory (a copy from host to host, and
    the staging of pageable host memory into the runtime's pinned buffer before the DMA)."""
    pcie_gen: int
    pcie_lanes: int
    max_payload_bytes: int
    tlp_overhead_bytes: int
    memcpy_start_us: float
    host_copy_gb_per_s: float
    normal_page_bytes: int
    huge_page_bytes: int

    @property
    def pcie_raw_gb_per_s(self) -> float:
        """GB/s of the lanes after the line code: lanes x GT/s x payload bits per coded bit / 8."""
        return self.pcie_lanes * PCIE_GT_PER_S[self.pcie_gen] * PCIE_ENCODING[self.pcie_gen] / 8

    @property
    def host_link_gb_per_s(self) -> float:
        """What a large copy between host and device achieves: the raw rate times the share of
        every transaction that is payload, max_payload / (max_payload + overhead)."""
        share = self.max_payload_bytes / (self.max_payload_bytes + self.tlp_overhead_bytes)
        return self.pcie_raw_gb_per_s * share


@dataclass(frozen=True)
class EnergySpec:
    mac_fp16_pj: float
    mac_int8_pj: float
    vector_byte_pj: float
    gm_byte_pj: float
    l2_byte_pj: float
    l1_byte_pj: float
    l0_byte_pj: float
    ub_byte_pj: float


@dataclass(frozen=True)
class PowerSpec:
    """Watts: ``static_watts`` the chip draws whatever runs (leakage, clocks, the uncore), and
    ``board_watts`` the published power the model must stay under at full load."""
    static_watts: float
    board_watts: float


@dataclass(frozen=True)
class CrossCoreSpec:
    """The cross-core flags of a split chip (CrossCoreSetFlag / CrossCoreWaitFlag between the
    AIC and AIV cores): ``flag_ids`` ids (0 .. flag_ids - 1), each a counter that holds at most
    ``max_pending`` sets not yet waited on, and the cycles a set takes to reach the other core."""
    flag_ids: int
    max_pending: int
    flag_latency_cycles: int


@dataclass(frozen=True)
class ChipSpec:
    """One simulated NPU. Sizes in bytes, rates per cycle, energy in picojoules. ``sku``: the
    product (and configuration) every figure of the file belongs to. ``cross_core``: on a split
    chip only."""
    name: str
    title: str
    sku: str
    arch: str
    ai_cores: int
    vector_cores: int
    clock_ghz: float
    issue_cycles: int
    event_ids: int
    cube: CubeSpec
    vector: VectorSpec
    buffers: BufferSpec
    align: BufferSpec
    memory: MemorySpec
    pipes: PipeSpec
    launch: LaunchSpec
    aicpu: AiCpuSpec
    device: DeviceSpec
    energy: EnergySpec
    power: PowerSpec
    cross_core: CrossCoreSpec | None = None
    source: str = ""

    # -- derived figures -------------------------------------------------------------------
    @property
    def peak_fp16_tflops(self) -> float:
        """cores x MACs a cycle x 2 FLOPs a MAC x clock."""
        return self.ai_cores * self.cube.macs_per_cycle_fp16 * 2 * self.clock_ghz / 1000.0

    @property
    def peak_int8_tops(self) -> float:
        return self.ai_cores * self.cube.macs_per_cycle_int8 * 2 * self.clock_ghz / 1000.0

    @property
    def vector_units(self) -> int:
        """The cores that hold a vector unit: the AIV cores of a split chip, every AI core of a
        coupled one."""
        return self.vector_cores if self.arch == "split" else self.ai_cores

    @property
    def peak_vector_tflops_fp16(self) -> float:
        """The vector peak as the vendor counts it: every vector unit doing one fp16
        multiply-add (2 FLOPs) per 2 bytes of vector width a cycle (S1: Atlas A2 "23.5T" is
        48 AIV x 128 lanes x 2 at 1.9125 GHz; see data/FACTS.md). An add or a multiply alone
        reaches half of it."""
        return self.vector_units * self.vector.bytes_per_cycle / 2 * 2 * self.clock_ghz / 1000.0

    @property
    def gm_bandwidth_gbs(self) -> float:
        return self.memory.gm_bytes_per_cycle * self.clock_ghz

    @property
    def gm_sustained_bytes_per_cycle(self) -> float:
        """What HBM (or DDR) sustains for the whole chip: the pins' rate x ``gm_efficiency``."""
        return self.memory.gm_bytes_per_cycle * self.memory.gm_efficiency

    def cores_for(self, core_type: str = "aic") -> int:
        """How many cores a kernel of ``core_type`` ("aic", "aiv" or "mix") has to run its blocks on.

        On a coupled chip (910, 310) every core holds cube and vector, so every kernel runs on the
        ``ai_cores``. On a split chip (910B class) a vector-only kernel ("aiv") runs on the
        ``vector_cores`` (AIV: UB, vector and scalar units, no cube, no L1/L0); a cube or mixed
        kernel ("aic", "mix") counts its blocks in AIC cores (``ai_cores``)."""
        if core_type not in CORE_TYPES:
            raise ArgumentError(f"core_type must be one of {CORE_TYPES}, got {core_type!r}")
        if self.arch == "split" and core_type == "aiv":
            return self.vector_cores
        return self.ai_cores

    def gm_share_bytes_per_cycle(self, active_cores: int, core_type: str = "aic") -> float:
        """GM bandwidth one core gets when ``active_cores`` cores of ``core_type`` copy at once:
        an equal share of what the DRAM sustains (:attr:`gm_sustained_bytes_per_cycle`)."""
        return self.gm_sustained_bytes_per_cycle / max(1, min(active_cores, self.cores_for(core_type)))

    def buffer_bytes(self, buffer: str) -> int:
        return getattr(self.buffers, buffer.lower())

    def buffer_align(self, buffer: str) -> int:
        return getattr(self.align, buffer.lower())

    def to_dict(self) -> dict:
        """Every field plus the derived peaks, JSON-ready."""
        d = dataclasses.asdict(self)
        d["peak_fp16_tflops"] = self.peak_fp16_tflops
        d["peak_int8_tops"] = self.peak_int8_tops
        d["peak_vector_tflops_fp16"] = self.peak_vector_tflops_fp16
        d["gm_bandwidth_gbs"] = self.gm_bandwidth_gbs
        d["gm_sustained_gbs"] = self.gm_sustained_bytes_per_cycle * self.clock_ghz
        d["host_link_gbs"] = self.device.host_link_gb_per_s
        return d


_SECTIONS = {"cube": CubeSpec, "vector": VectorSpec, "buffers": BufferSpec, "align": BufferSpec,
             "memory": MemorySpec, "pipes": PipeSpec, "launch": LaunchSpec, "aicpu": AiCpuSpec, "device": DeviceSpec,
             "energy": EnergySpec, "power": PowerSpec,
             "cross_core": CrossCoreSpec}
#: sections a chip file may leave out (their field is then None)
_OPTIONAL = ("cross_core",)
_ARCHS = ("coupled", "split")


def _check_fields(cls, table: dict, where: str, origin: str) -> dict:
    """Return ``table`` checked against dataclass ``cls``: every field present, none unknown,
    numbers of the right kind and not negative."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "source"}
    for key in table:
        if key not in fields:
            raise ChipFileError(f"{origin}: unknown field '{where}{key}'; expected one of "
                                f"{', '.join(where + k for k in fields)}")
    out = {}
    for name, field in fields.items():
        dotted = where + name
        if name not in table and name in _OPTIONAL:
            continue
        if name not in table:
            raise ChipFileError(f"{origin}: missing field '{dotted}' ({field.type})")
        value = table[name]
        if name in _SECTIONS:
            if not isinstance(value, dict):
                raise ChipFileError(f"{origin}: '{dotted}' must be a table [{dotted}], got {value!r}")
            out[name] = _SECTIONS[name](**_check_fields(_SECTIONS[name], value, dotted + ".", origin))
            continue
        if field.type == "str":
            if not isinstance(value, str):
                raise ChipFileError(f"{origin}: field '{dotted}' must be a string, got {value!r}")
        else:
            want_int = field.type == "int"
            ok = isinstance(value, int) if want_int else isinstance(value, (int, float))
            if not ok or isinstance(value, bool):
                kind = "an integer" if want_int else "a number"
                raise ChipFileError(f"{origin}: field '{dotted}' must be {kind}, got {value!r}")
            if value < 0:
                raise ChipFileError(f"{origin}: field '{dotted}' must not be negative, got {value!r}")
            value = int(value) if want_int else float(value)
        out[name] = value
    return out


def load_chip(path: str | Path) -> ChipSpec:
    """Read and validate one chip file."""
    path = Path(path)
    origin = f"chip file '{path.name}'"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ChipFileError(f"{origin}: no such file ({path}); built-in chips are "
                            f"{', '.join(chip_names())}") from None
    except IsADirectoryError:
        raise ChipFileError(f"{origin}: {path} is a directory; give the path of a .toml chip file") from None
    except UnicodeDecodeError:
        raise ChipFileError(f"{origin}: not a text file (a chip file is TOML, UTF-8)") from None
    except OSError as exc:
        raise ChipFileError(f"{origin}: cannot be read: {exc.strerror or exc}") from None
    return chip_from_toml(text, origin, str(path))


def chip_from_toml(text: str, origin: str = "chip text", source: str = "") -> ChipSpec:
    """A chip from the text of a chip file (what :func:`load_chip` reads; an offline model
    carries the text of the chip it was compiled for). ``origin`` opens every error message."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ChipFileError(f"{origin}: not valid TOML: {exc}") from None
    spec = ChipSpec(**_check_fields(ChipSpec, table, "", origin), source=source)
    if spec.arch not in _ARCHS:
        raise ChipFileError(f"{origin}: field 'arch' must be one of {_ARCHS}, got {spec.arch!r}")
    if spec.cube.output_path not in OUTPUT_PATHS:
        raise ChipFileError(f"{origin}: field 'cube.output_path' must be one of {OUTPUT_PATHS}, got "
                            f"{spec.cube.output_path!r}")
    for name in ("ai_cores", "clock_ghz", "issue_cycles", "event_ids"):
        if getattr(spec, name) <= 0:
            raise ChipFileError(f"{origin}: field '{name}' must be positive, got {getattr(spec, name)!r}")
    if spec.arch == "split" and spec.vector_cores <= 0:
        raise ChipFileError(f"{origin}: field 'vector_cores' must be positive on a split chip "
                            f"(arch = \"split\": vector-only kernels run on the AIV cores), got "
                            f"{spec.vector_cores!r}")
    if spec.arch == "split" and spec.cross_core is None:
        raise ChipFileError(f"{origin}: a split chip needs a [cross_core] section (flag_ids, max_pending, "
                            f"flag_latency_cycles): its AIC and AIV cores synchronise through cross-core flags")
    if spec.arch != "split" and spec.cross_core is not None:
        raise ChipFileError(f"{origin}: [cross_core] is for split chips (arch = \"split\"); a coupled core has "
                            f"cube and vector in one core and no cross-core flags")
    if spec.cross_core is not None and (spec.cross_core.flag_ids < 1 or spec.cross_core.max_pending < 1):
        raise ChipFileError(f"{origin}: 'cross_core.flag_ids' and 'cross_core.max_pending' must be at least 1")
    if spec.event_ids > 8:
        raise ChipFileError(f"{origin}: field 'event_ids' must be at most 8 (ids 0-7), got {spec.event_ids}")
    for name in BUFFERS:
        if getattr(spec.buffers, name) <= 0:
            raise ChipFileError(f"{origin}: field 'buffers.{name}' must be positive")
        a = getattr(spec.align, name)
        if a <= 0 or a & (a - 1):
            raise ChipFileError(f"{origin}: field 'align.{name}' must be a power of two, got {a}")
    for name in ("mte2_bytes_per_cycle", "mte1_bytes_per_cycle", "mte1_l0b_bytes_per_cycle", "mte3_bytes_per_cycle",
                 "fix_bytes_per_cycle", "l1_port_bytes_per_cycle", "l0c_to_ub_bytes_per_cycle"):
        if getattr(spec.pipes, name) <= 0:
            raise ChipFileError(f"{origin}: field 'pipes.{name}' must be positive")
    if spec.memory.gm_bytes_per_cycle <= 0 or spec.vector.bytes_per_cycle <= 0:
        raise ChipFileError(f"{origin}: bandwidths 'memory.gm_bytes_per_cycle' and "
                            f"'vector.bytes_per_cycle' must be positive")
    for name in ("macs_per_cycle_fp16", "macs_per_cycle_int8"):
        if getattr(spec.cube, name) <= 0:
            raise ChipFileError(f"{origin}: field 'cube.{name}' must be positive, got {getattr(spec.cube, name)!r}")
    for name in ("max_repeat", "transcendental_cycles_per_repeat"):
        if getattr(spec.vector, name) < 1:
            raise ChipFileError(f"{origin}: field 'vector.{name}' must be at least 1, got "
                                f"{getattr(spec.vector, name)!r}")
    rb = spec.vector.repeat_bytes
    if rb < 32 or rb % 32:
        raise ChipFileError(f"{origin}: field 'vector.repeat_bytes' must be a whole number of 32-byte "
                            f"blocks (a repeat is 8 of them on Ascend: 256), got {rb!r}")
    vb = spec.vector
    if vb.ub_bank_bytes < 32 or vb.ub_bank_bytes % 32 or vb.ub_bank_groups < 1:
        raise ChipFileError(f"{origin}: 'vector.ub_bank_bytes' must be a whole number of 32-byte rows and "
                            f"'vector.ub_bank_groups' at least 1, got {vb.ub_bank_bytes!r} and {vb.ub_bank_groups!r}")
    if spec.memory.gm_bytes <= 0 or spec.memory.l2_bytes < 0 or spec.memory.l2_bytes_per_cycle < 0:
        raise ChipFileError(f"{origin}: 'memory.gm_bytes' must be positive and 'memory.l2_bytes' / "
                            f"'memory.l2_bytes_per_cycle' 0 or more")
    if spec.power.board_watts <= 0 or spec.power.static_watts >= spec.power.board_watts:
        raise ChipFileError(f"{origin}: 'power.board_watts' must be positive and more than "
                            f"'power.static_watts' (what the chip draws doing nothing), got "
                            f"{spec.power.board_watts!r} and {spec.power.static_watts!r}")
    if not 0 < spec.memory.gm_efficiency <= 1:
        raise ChipFileError(f"{origin}: field 'memory.gm_efficiency' is the fraction of the pins' rate a "
                            f"DRAM sustains, in (0, 1], got {spec.memory.gm_efficiency!r}")
    _check_device(spec.device, origin)
    lb = spec.memory.l2_line_bytes
    if lb < 32 or lb & (lb - 1):
        raise ChipFileError(f"{origin}: field 'memory.l2_line_bytes' must be a power of two of at least "
                            f"32 (a DMA moves 32-byte blocks), got {lb!r}")
    if spec.memory.l2_bytes > 0 and spec.memory.l2_bytes_per_cycle <= 0:
        raise ChipFileError(f"{origin}: a chip with an L2 (l2_bytes > 0) needs a positive "
                            f"'memory.l2_bytes_per_cycle'")
    return spec


def _check_device(dev: DeviceSpec, origin: str) -> None:
    """The [device] section's rules: a PCIe generation and width that exist, a payload size PCIe
    allows, positive rates, and pages whose sizes are powers of two, the huge a whole number of
    the normal."""
    if dev.pcie_gen not in PCIE_GT_PER_S:
        raise ChipFileError(f"{origin}: field 'device.pcie_gen' must be one of {sorted(PCIE_GT_PER_S)}, got {dev.pcie_gen!r}")
    if dev.pcie_lanes not in (1, 2, 4, 8, 16):
        raise ChipFileError(f"{origin}: field 'device.pcie_lanes' must be a PCIe link width (1, 2, 4, 8 or 16), "
                            f"got {dev.pcie_lanes!r}")
    mp = dev.max_payload_bytes
    if mp < 128 or mp > 4096 or mp & (mp - 1):
        raise ChipFileError(f"{origin}: field 'device.max_payload_bytes' must be a PCIe Max_Payload_Size, a power "
                            f"of two from 128 to 4096, got {mp!r}")
    if dev.host_copy_gb_per_s <= 0:
        raise ChipFileError(f"{origin}: field 'device.host_copy_gb_per_s' must be positive")
    for name in ("normal_page_bytes", "huge_page_bytes"):
        v = getattr(dev, name)
        if v < 1 or v & (v - 1):
            raise ChipFileError(f"{origin}: field 'device.{name}' must be a power of two, got {v!r}")
    if dev.huge_page_bytes < dev.normal_page_bytes:
        raise ChipFileError(f"{origin}: 'device.huge_page_bytes' ({dev.huge_page_bytes}) must be at least "
                            f"'device.normal_page_bytes' ({dev.normal_page_bytes}): a huge page holds normal ones")


@lru_cache(maxsize=None)
def _chip_dir() -> Path:
    """Built-in chip files: ``npulab/data/chips`` in an installed wheel, ``data/chips`` of the
    source tree in a checkout or an editable install."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "data" / "chips", here.parent / "data" / "chips"):
        if candidate.is_dir():
            return candidate
    raise ChipFileError(f"npulab's chip files are missing (looked in {here / 'data' / 'chips'})")


def chip_names() -> list[str]:
    """Names of the built-in chips, sorted."""
    return list(_chip_names())


@lru_cache(maxsize=None)
def _chip_names() -> tuple[str, ...]:
    # the package's own files: listed once (every launch asks for its chip by name)
    return tuple(sorted(p.name[:-5] for p in _chip_dir().iterdir() if p.name.endswith(".toml")))


@lru_cache(maxsize=None)
def _builtin(name: str) -> ChipSpec:
    return load_chip(_chip_dir() / f"{name}.toml")


def get_chip(name_or_path: "str | Path | ChipSpec") -> ChipSpec:
    """A built-in chip by name (``"910"``), or a chip file by path (``"my_chip.toml"``)."""
    if isinstance(name_or_path, ChipSpec):
        return name_or_path
    text = str(name_or_path)
    if text.lower() in _chip_names():
        return _builtin(text.lower())
    if text.endswith(".toml") or "/" in text or "\\" in text:
        return load_chip(text)
    raise ChipFileError(f"unknown chip {text!r}: built-in chips are {', '.join(chip_names())}; "
                        f"or pass the path of a .toml chip file")


def chips() -> list[ChipSpec]:
    """Every built-in chip."""
    return [_builtin(n) for n in chip_names()]
