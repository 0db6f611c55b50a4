"""What a copy costs: aclrtMemcpy's kinds and the time each takes on a chip's link and memory.

Kinds (S15, aclrtMemcpyKind, with pyACL's numbers): HOST_TO_HOST 0, HOST_TO_DEVICE 1,
DEVICE_TO_HOST 2, DEVICE_TO_DEVICE 3, and DEFAULT 4 (the runtime works the direction out from
the two pointers). CANN's own aclrtMemcpy now documents ``kind`` as a reserved argument: it
judges from the pointers whether the copy can be made and fails if not. npulab checks the kind
a learner names against the pointers instead, so a wrong mental model of where a buffer lives
fails loudly; DEFAULT asks for CANN's behaviour.

The cost model (every rate from the chip file, ``[device]`` and ``[memory]``):

* HOST_TO_DEVICE / DEVICE_TO_HOST: ``memcpy_start_us``, then the bytes cross the host link at
  ``host_link_gb_per_s`` (PCIe after line code and packet overhead). A host numpy array is
  pageable memory, which a DMA engine cannot read while the OS may move it: the runtime first
  copies it into a pinned staging buffer on a host CPU core (``host_copy_gb_per_s``), and the
  DMA moves it from there (the reverse for DEVICE_TO_HOST). Staging and DMA one after the other
  is the default; with the large-copy switch on (below), the copy goes in chunks of
  ``LARGE_COPY_CHUNK_BYTES`` and the staging of one chunk overlaps the DMA of the one before,
  so a large copy runs at the slower of the two rates instead of the two in series.
* DEVICE_TO_DEVICE: ``memcpy_start_us``, then the bytes are read from and written to HBM at
  the rate the chip's DRAM sustains (``ChipSpec.gm_sustained_bytes_per_cycle``): 2 x count bytes.
* HOST_TO_HOST: a host CPU core's memcpy, no device involved, no start-up.

The large-copy switch is ``NPULAB_LARGE_COPY`` (``0`` off, the default; ``1`` on). It is
npulab's, not CANN's: CANN documents no environment variable for large copies (USE_ENHANCED_MEMCOPY,
which blog posts mention, is not in its documentation; FACTS.md). What CANN documents for fast
host copies is page-locked host memory (aclrtMallocHost), which needs no staging, and
ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE, whose host side the runtime buffers.
"""
from __future__ import annotations

import os

from ..chips import ChipSpec
from ..errors import ArgumentError

KINDS = ("HOST_TO_HOST", "HOST_TO_DEVICE", "DEVICE_TO_HOST", "DEVICE_TO_DEVICE", "DEFAULT")

#: the environment variable of the large-copy switch (see the module's docstring)
LARGE_COPY_ENV = "NPULAB_LARGE_COPY"

#: the chunk a large copy is staged in when the switch is on. chosen: 8 MiB, large against the
#: copy's start-up (a chunk takes about 0.3 ms on PCIe 4.0 x16) and small against the copies that
#: matter (weights and batches of tens to hundreds of MB)
LARGE_COPY_CHUNK_BYTES = 8 << 20


def kind_name(kind) -> str:
    """``kind`` as one of KINDS: a name (``"HOST_TO_DEVICE"``, ``"ACL_MEMCPY_HOST_TO_DEVICE"``) or
    pyACL's number (0 .. 4)."""
    if isinstance(kind, int) and not isinstance(kind, bool) and 0 <= kind < len(KINDS):
        return KINDS[kind]
    if isinstance(kind, str):
        name = kind.upper().removeprefix("ACL_MEMCPY_")
        if name in KINDS:
            return name
    raise ArgumentError(f"memcpy: kind {kind!r} is not an aclrtMemcpyKind; expected one of {', '.join(KINDS)} "
                        f"(or pyACL's 0 .. 4)")


def large_copy() -> bool:
    """The large-copy switch: ``NPULAB_LARGE_COPY`` = 0 (default) or 1."""
    raw = os.environ.get(LARGE_COPY_ENV, "0").strip() or "0"
    if raw not in ("0", "1"):
        raise ArgumentError(f"{LARGE_COPY_ENV}={raw!r}: expected 0 (stage then copy) or 1 (overlap staging "
                            f"and DMA in chunks of {LARGE_COPY_CHUNK_BYTES >> 20} MiB)")
    return raw == "1"


def _us(nbytes: int, gb_per_s: float) -> float:
    """Microseconds for ``nbytes`` at ``gb_per_s`` (1 GB/s = 1000 bytes a microsecond)."""
    return nbytes / (gb_per_s * 1e3)


def staged_us(count: int, stage_gb_per_s: float, link_gb_per_s: float, overlap: bool) -> float:
    """A pageable host copy: stage through a pinned buffer, DMA across the link. Without
    ``overlap`` the two run one after the other over all the bytes; with it, chunk by chunk,
    the DMA of chunk i beside the staging of chunk i + 1 (a two-stage pipeline)."""
    if not overlap or count <= LARGE_COPY_CHUNK_BYTES:
        return _us(count, stage_gb_per_s) + _us(count, link_gb_per_s)
    staged = dma = 0.0
    for start in range(0, count, LARGE_COPY_CHUNK_BYTES):
        n = min(LARGE_COPY_CHUNK_BYTES, count - start)
        staged += _us(n, stage_gb_per_s)                 # the CPU stages chunks back to back
        dma = max(dma, staged) + _us(n, link_gb_per_s)   # a chunk's DMA waits for its staging
    return dma


def copy_us(chip: ChipSpec, kind: str, count: int, overlap: bool | None = None) -> float:
    """Simulated microseconds of an aclrtMemcpy of ``count`` bytes of ``kind`` on ``chip``
    (``overlap``: the large-copy switch; None reads ``NPULAB_LARGE_COPY``)."""
    dev = chip.device
    if kind == "HOST_TO_HOST":
        return _us(count, dev.host_copy_gb_per_s)
    if kind == "DEVICE_TO_DEVICE":
        hbm_gb_per_s = chip.gm_sustained_bytes_per_cycle * chip.clock_ghz
        return dev.memcpy_start_us + _us(2 * count, hbm_gb_per_s)
    if kind in ("HOST_TO_DEVICE", "DEVICE_TO_HOST"):
        overlap = large_copy() if overlap is None else overlap
        return dev.memcpy_start_us + staged_us(count, dev.host_copy_gb_per_s, dev.host_link_gb_per_s, overlap)
    raise ArgumentError(f"copy_us: kind {kind!r} has no cost; expected a direction, one of {', '.join(KINDS[:4])}")
