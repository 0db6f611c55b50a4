"""One simulated device as the host program sees it, with pyACL's names: ``malloc``, ``free``,
``memcpy``, ``get_mem_info`` (aclrtMalloc, aclrtFree, aclrtMemcpy, aclrtGetMemInfo).

    rt = Device("910b", 0)
    x = np.arange(1024, dtype=np.float32)
    buf = rt.malloc(x.nbytes)                                   # HUGE_FIRST, as pyACL's default
    rt.memcpy(buf, x.nbytes, x, x.nbytes, "HOST_TO_DEVICE")    # -> simulated microseconds
    y = np.empty_like(x)
    rt.memcpy(y, y.nbytes, buf, x.nbytes, "DEVICE_TO_HOST")
    rt.free(buf)

A host buffer is a C-contiguous numpy array; a device buffer is a :class:`DevicePtr`, which
``ptr + offset`` moves inside its allocation. The bytes really move (the device keeps each
allocation's bytes), so a round trip returns what went in. Every copy's simulated time is also
kept in :attr:`Device.copies`; how it is worked out is :mod:`npulab.runtime.copy`, how memory is
handed out :mod:`npulab.runtime.pages`.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from ..chips import ChipSpec, get_chip
from ..errors import ArgumentError, ArgumentTypeError, DeviceMemoryError, DevicePointerError, MemcpyError
from .copy import copy_us, kind_name
from .pages import HUGE_FIRST_NORMAL_MAX, Grant, PagePool, aligned_size, policy_name

#: where the first allocation's device (virtual) address starts. chosen: far from 0, so a stray
#: small integer is never a valid pointer
VA_BASE = 0x1_0000_0000


def _size(nbytes: int) -> str:
    """Bytes for a message: exact below 1 KiB, else KiB / MiB / GiB with two decimals."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.2f} {unit}"
    return f"{nbytes} B"


@dataclass(frozen=True)
class DevicePtr:
    """A device address (aclrtMalloc's ``devPtr``): the device it belongs to and the address.
    ``ptr + n`` is the address n bytes further on."""
    device_id: int
    address: int

    def __add__(self, offset: int) -> "DevicePtr":
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise ArgumentTypeError(f"DevicePtr + {offset!r}: an offset is a whole number of bytes")
        return DevicePtr(self.device_id, self.address + offset)

    def __repr__(self) -> str:
        return f"DevicePtr(device {self.device_id}, 0x{self.address:x})"


@dataclass
class Allocation:
    """One live aclrtMalloc: what was asked, what the device set aside, and its bytes."""
    address: int
    size: int                  # bytes asked for: what copies may use
    policy: str
    grant: Grant               # the pages it holds (grant.nbytes: what it costs the device)
    _data: np.ndarray | None = field(default=None, repr=False)

    @property
    def data(self) -> np.ndarray:
        """Its bytes (zeros until written; made on first use, so a large allocation that is never
        copied into costs the host nothing)."""
        if self._data is None:
            self._data = np.zeros(self.size, dtype=np.uint8)
        return self._data


@dataclass(frozen=True)
class CopyRecord:
    """One memcpy: its kind, its bytes and its simulated microseconds."""
    kind: str
    count: int
    us: float


class Device:
    """Device ``device_id`` of chip ``chip`` (a name, a chip file path or a ChipSpec), its memory
    empty: ``[memory] gm_bytes`` of it in pages of the chip's ``[device]`` sizes."""

    def __init__(self, chip="910b", device_id: int = 0):
        if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
            raise ArgumentError(f"Device: device_id must be a whole number 0 or more, got {device_id!r}")
        self.chip: ChipSpec = get_chip(chip)
        self.device_id = device_id
        dev = self.chip.device
        self.pool = PagePool(self.chip.memory.gm_bytes, dev.normal_page_bytes, dev.huge_page_bytes)
        self.copies: list[CopyRecord] = []
        self._live: dict[int, Allocation] = {}
        self._bases: list[int] = []        # sorted addresses of the live allocations
        self._freed: set[int] = set()      # addresses freed and not handed out again
        self._next_va = VA_BASE

    def __repr__(self) -> str:
        free, total = self.get_mem_info()
        return f"Device({self.chip.name!r}, {self.device_id}: {_size(total - free)} of {_size(total)} in use)"

    # -- memory ------------------------------------------------------------------------------
    def malloc(self, size: int, policy="HUGE_FIRST") -> DevicePtr:
        """aclrtMalloc: ``size`` bytes of device memory under ``policy`` (HUGE_FIRST, HUGE_ONLY,
        NORMAL_ONLY; see :mod:`npulab.runtime.pages`). The device sets aside
        ALIGN_UP(size, 32) + 32 bytes rounded up to whole pages: 2 MB huge pages, or normal
        pages; a DeviceMemoryError says what was asked, what is in use and what to do."""
        if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size <= 0:
            raise ArgumentError(f"malloc: size must be a whole number of bytes above 0 (aclrtMalloc refuses 0), "
                                f"got {size!r}")
        size, policy = int(size), policy_name(policy)
        need = aligned_size(size)
        if policy == "NORMAL_ONLY" or (policy == "HUGE_FIRST" and size <= HUGE_FIRST_NORMAL_MAX):
            grant = self.pool.take_normal(need)
        else:
            grant = self.pool.take_huge(need)
            if grant is None and policy == "HUGE_FIRST":
                grant = self.pool.take_normal(need)
        if grant is None:
            raise self._out_of_memory(size, need, policy)
        address = self._place(grant)
        self._live[address] = Allocation(address, size, policy, grant)
        bisect.insort(self._bases, address)
        self._freed.discard(address)
        return DevicePtr(self.device_id, address)

    def _place(self, grant: Grant) -> int:
        """A fresh virtual address aligned to the grant's page size (never reused: a freed
        pointer stays recognisable as freed)."""
        align = grant.page_bytes
        address = -(-self._next_va // align) * align
        self._next_va = address + grant.nbytes
        return address

    def _out_of_memory(self, size: int, need: int, policy: str) -> DeviceMemoryError:
        free, total = self.get_mem_info()
        head = (f"malloc: out of device memory on device {self.device_id} ({self.chip.sku}): {_size(size)} "
                f"requested ({policy}), {_size(total - free)} in use of {_size(total)} capacity, {_size(free)} free")
        huge = self.pool.huge
        if policy == "HUGE_ONLY" and free >= -(-need // huge) * huge:
            frames = -(-need // huge)
            return DeviceMemoryError(
                f"{head}. HUGE_ONLY cannot be met: it needs {frames} free {_size(huge)} huge pages and "
                f"{self.pool.free_huge_pages} are free; the rest of the free bytes lie in huge pages that "
                f"normal-page allocations already use in part. Use HUGE_FIRST (it falls back to normal "
                f"pages), or allocate large buffers first and small ones after.")
        return DeviceMemoryError(
            f"{head}. Free buffers no longer needed (free), or need less memory: a smaller batch "
            f"(activations grow with it), or recomputation (keep fewer activations and recompute them "
            f"in the backward pass).")

    def free(self, ptr: DevicePtr) -> None:
        """aclrtFree: give an allocation's pages back. ``ptr`` must be what malloc returned."""
        alloc = self._resolve(ptr, "free")
        if alloc.address != ptr.address:
            raise DevicePointerError(f"free: {ptr!r} points {ptr.address - alloc.address} bytes into the allocation "
                                     f"at 0x{alloc.address:x}; free takes the pointer malloc returned")
        self.pool.give_back(alloc.grant)
        del self._live[alloc.address]
        self._bases.remove(alloc.address)
        self._freed.add(alloc.address)

    def get_mem_info(self, attr: str = "ALL") -> tuple[int, int]:
        """aclrtGetMemInfo: (free, total) bytes. ``attr`` "ALL" (ACL_HBM_MEM: every page) or
        "HUGE" (ACL_HBM_MEM_HUGE: free is the whole 2 MB pages a huge allocation can take)."""
        if attr == "ALL":
            return self.pool.free_bytes, self.pool.total_bytes
        if attr == "HUGE":
            return self.pool.free_huge_pages * self.pool.huge, self.pool.total_bytes
        raise ArgumentError(f"get_mem_info: attr {attr!r}; expected 'ALL' or 'HUGE'")

    def allocation(self, ptr: DevicePtr) -> Allocation:
        """The live allocation ``ptr`` points into."""
        return self._resolve(ptr, "allocation")

    def _resolve(self, ptr, op: str) -> Allocation:
        if not isinstance(ptr, DevicePtr):
            raise ArgumentTypeError(f"{op}: expected a DevicePtr from malloc, got {type(ptr).__name__}")
        if ptr.device_id != self.device_id:
            raise DevicePointerError(f"{op}: {ptr!r} belongs to device {ptr.device_id}, not to device "
                                     f"{self.device_id}")
        i = bisect.bisect_right(self._bases, ptr.address) - 1
        if i >= 0:
            alloc = self._live[self._bases[i]]
            if ptr.address < alloc.address + alloc.size:
                return alloc
        if ptr.address in self._freed:
            what = "was freed already (a double free)" if op == "free" else "was freed already (a use after free)"
            raise DevicePointerError(f"{op}: {ptr!r} {what}")
        raise DevicePointerError(f"{op}: {ptr!r} is not in any live allocation of device {self.device_id} "
                                 f"(freed, never allocated, or past the end of its buffer)")

    # -- copies ------------------------------------------------------------------------------
    def memcpy(self, dst, dst_max: int, src, count: int, kind) -> float:
        """aclrtMemcpy, pyACL's argument order: copy ``count`` bytes from ``src`` to ``dst``, at
        most ``dst_max`` (the room the caller says dst has). A host side is a C-contiguous numpy
        array, a device side a DevicePtr. Returns the simulated microseconds (also kept in
        :attr:`copies`); :mod:`npulab.runtime.copy` says what they are made of."""
        for name, v in (("dst_max", dst_max), ("count", count)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise ArgumentError(f"memcpy: {name} must be a whole number of bytes 0 or more, got {v!r}")
        count, dst_max = int(count), int(dst_max)
        dst_bytes = self._side(dst, "dst", writable=True)
        src_bytes = self._side(src, "src", writable=False)
        actual = ("DEVICE" if isinstance(src, DevicePtr) else "HOST") + "_TO_" + \
                 ("DEVICE" if isinstance(dst, DevicePtr) else "HOST")
        kind = kind_name(kind)
        if kind not in ("DEFAULT", actual):
            raise MemcpyError(f"memcpy: kind {kind}, but src is {_where(src)} and dst is {_where(dst)}: "
                              f"that copy is {actual} (or pass DEFAULT to let the runtime decide)")
        if count > dst_max:
            raise MemcpyError(f"memcpy: count {count} bytes is more than dst_max {dst_max}: a copy never writes "
                              f"past the room its destination was given")
        if dst_max > dst_bytes.size:
            raise MemcpyError(f"memcpy: dst_max {dst_max} bytes, but dst holds {dst_bytes.size} bytes from there; "
                              f"dst_max is the destination's real room")
        if count > src_bytes.size:
            raise MemcpyError(f"memcpy: count {count} bytes, but src holds {src_bytes.size} bytes from there")
        dst_bytes[:count] = src_bytes[:count]          # numpy copies overlapping slices as memmove
        us = copy_us(self.chip, actual, count)
        self.copies.append(CopyRecord(actual, count, us))
        return us

    @property
    def total_copy_us(self) -> float:
        """The simulated microseconds of every copy so far."""
        return sum(c.us for c in self.copies)

    def _side(self, side, name: str, writable: bool) -> np.ndarray:
        """The bytes one side of a copy reaches, from its address to the end of its buffer."""
        if isinstance(side, DevicePtr):
            alloc = self._resolve(side, "memcpy")
            return alloc.data[side.address - alloc.address:alloc.size]
        if isinstance(side, np.ndarray):
            if not side.flags.c_contiguous:
                raise MemcpyError(f"memcpy: {name} is a numpy array that is not C-contiguous (a view with "
                                  f"strides); copy it first with np.ascontiguousarray")
            if writable and not side.flags.writeable:
                raise MemcpyError(f"memcpy: {name} is a read-only numpy array; the destination must be writable")
            return side.reshape(-1).view(np.uint8)
        raise ArgumentTypeError(f"memcpy: {name} must be a DevicePtr (device) or a numpy array (host), "
                                f"got {type(side).__name__}")


def _where(side) -> str:
    return "a device pointer" if isinstance(side, DevicePtr) else "a host array"
