"""The runtime's device memory (runtime.Device, the ACL analog): aclrtMalloc's policies and
rounding, out-of-memory messages that teach, get_mem_info, memcpy kinds moving real bytes, copy
costs worked out here from the chip files' figures, and the errors of misused pointers."""
import numpy as np
import pytest

import npulab
from npulab.errors import (ArgumentError, ArgumentTypeError, DeviceMemoryError, DevicePointerError, MemcpyError,
                           NpuError)
from npulab.runtime import LARGE_COPY_CHUNK_BYTES, LARGE_COPY_ENV, Device

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
PAGE, HUGE = 4 * KB, 2 * MB        # FACTS: normal pages 4 KB (chosen), huge pages 2 MB (S15)


def reserved(size, page):
    """What aclrtMalloc sets aside (S15): ALIGN_UP(size, 32) + 32, then whole pages."""
    aligned = -(-size // 32) * 32 + 32
    return -(-aligned // page) * page


@pytest.fixture(autouse=True)
def no_large_copy(monkeypatch):
    monkeypatch.delenv(LARGE_COPY_ENV, raising=False)


# -- malloc: policies and rounding ---------------------------------------------------------------
@pytest.mark.parametrize("size, policy, kind, page", [
    (1000, "HUGE_FIRST", "normal", PAGE),          # <= 1 MB: normal pages even under HUGE_FIRST
    (MB, "HUGE_FIRST", "normal", PAGE),            # exactly 1 MB is still "<= 1M"
    (MB + 1, "HUGE_FIRST", "huge", HUGE),          # above 1 MB: huge pages first
    (2 * MB, "HUGE_FIRST", "huge", HUGE),          # 2 MB + 32 B of padding: two huge pages
    (100, "HUGE_ONLY", "huge", HUGE),              # HUGE_ONLY rounds even 100 B up to 2 MB
    (3 * MB, "NORMAL_ONLY", "normal", PAGE),
    (5 * MB + 7, 0, "huge", HUGE),                 # pyACL's numbers: 0 HUGE_FIRST
    (5 * MB + 7, 2, "normal", PAGE),               # 2 NORMAL_ONLY
    (64, "ACL_MEM_MALLOC_HUGE_ONLY", "huge", HUGE),
])
def test_policies_choose_pages_and_round_up(size, policy, kind, page):
    rt = Device("910b", 0)
    free0, total = rt.get_mem_info()
    assert free0 == total == 64 * GB               # the 910B1's 64 GB (S1, S11), nothing reserved
    ptr = rt.malloc(size, policy)
    alloc = rt.allocation(ptr)
    assert alloc.grant.page_kind == kind
    assert alloc.grant.nbytes == reserved(size, page)
    assert rt.get_mem_info() == (total - reserved(size, page), total)
    assert ptr.address % 64 == 0 and ptr.address % page == 0
    rt.free(ptr)
    assert rt.get_mem_info() == (total, total)


def test_two_mb_costs_four_under_huge_pages_but_not_in_normal_ones():
    """The 32 B aclrtMalloc adds push an exact 2 MB request over one huge page."""
    rt = Device("910b")
    assert rt.allocation(rt.malloc(2 * MB)).grant.nbytes == 4 * MB
    assert rt.allocation(rt.malloc(2 * MB, "NORMAL_ONLY")).grant.nbytes == 2 * MB + PAGE


@pytest.mark.parametrize("size", [0, -5, 1.5, True, "1MB"])
def test_malloc_refuses_sizes_that_are_not_bytes(size):
    with pytest.raises(ArgumentError, match="size must be a whole number"):
        Device("teach").malloc(size)


def test_unknown_policy_names_the_policies():
    with pytest.raises(ArgumentError, match="HUGE_FIRST, HUGE_ONLY, NORMAL_ONLY"):
        Device("teach").malloc(64, "HUGE1G_ONLY")


# -- out of memory and fragmentation ---------------------------------------------------------------
def test_out_of_memory_names_request_use_capacity_and_the_fixes():
    rt = Device("910b", 3)
    rt.malloc(60 * GB)
    with pytest.raises(DeviceMemoryError) as info:
        rt.malloc(8 * GB)
    msg = str(info.value)
    assert isinstance(info.value, NpuError) and isinstance(info.value, MemoryError)
    for part in ("device 3", "Ascend910B1", "8.00 GiB requested (HUGE_FIRST)", "60.00 GiB in use of 64.00 GiB",
                 "4.00 GiB free", "smaller batch", "recomputation"):
        assert part in msg, msg


def test_every_chip_runs_out_at_its_own_capacity():
    for name in npulab.chip_names():
        rt = Device(name)
        total = npulab.get_chip(name).memory.gm_bytes
        assert rt.get_mem_info() == (total, total)
        rt.malloc(total - 64, "HUGE_ONLY")               # + 32 + 32 B of padding: exactly every huge page
        assert rt.get_mem_info()[0] == 0
        with pytest.raises(DeviceMemoryError, match="0 B free"):
            rt.malloc(1)


def fragmented():
    """The teaching chip's 1 GiB as 512 huge-page frames, each half used by a 1 MB normal-page
    allocation: 512 MB free, no whole 2 MB page free."""
    rt = Device("teach")
    ptrs = [rt.malloc(MB - 64, "NORMAL_ONLY") for _ in range(1024)]   # 1 MB - 64 + 32 + 32 = 256 pages
    assert rt.get_mem_info()[0] == 0
    for p in ptrs[::2]:
        rt.free(p)
    return rt, ptrs[1::2]


def test_huge_only_fails_on_fragmented_memory_and_says_why():
    rt, _ = fragmented()
    assert rt.get_mem_info() == (512 * MB, GB)
    assert rt.get_mem_info("HUGE") == (0, GB)
    with pytest.raises(DeviceMemoryError) as info:
        rt.malloc(4 * MB, "HUGE_ONLY")
    msg = str(info.value)
    for part in ("HUGE_ONLY cannot be met", "needs 3 free 2.00 MiB huge pages and 0 are free", "HUGE_FIRST"):
        assert part in msg, msg


def test_huge_first_falls_back_to_normal_pages_and_freeing_coalesces():
    rt, held = fragmented()
    ptr = rt.malloc(4 * MB)                           # HUGE_FIRST: no huge page free, normal pages
    assert rt.allocation(ptr).grant.page_kind == "normal"
    assert rt.get_mem_info()[0] == 512 * MB - reserved(4 * MB, PAGE)
    rt.free(ptr)
    for p in held:
        rt.free(p)
    assert rt.get_mem_info("HUGE") == (GB, GB)        # every frame whole again
    assert rt.allocation(rt.malloc(GB - 64, "HUGE_ONLY")).grant.nbytes == GB


# -- memcpy moves bytes ----------------------------------------------------------------------------
def test_round_trip_through_the_device_returns_the_bytes():
    rt = Device("910b")
    x = np.random.default_rng(0).standard_normal((64, 33)).astype(np.float16)
    a, b = rt.malloc(x.nbytes), rt.malloc(x.nbytes, "NORMAL_ONLY")
    rt.memcpy(a, x.nbytes, x, x.nbytes, "HOST_TO_DEVICE")
    rt.memcpy(b, x.nbytes, a, x.nbytes, "DEVICE_TO_DEVICE")
    y = np.zeros_like(x)
    rt.memcpy(y, y.nbytes, b, x.nbytes, "DEVICE_TO_HOST")
    np.testing.assert_array_equal(y, x)
    z = np.zeros_like(x)
    rt.memcpy(z, z.nbytes, y, y.nbytes, "HOST_TO_HOST")
    np.testing.assert_array_equal(z, x)
    assert [c.kind for c in rt.copies] == ["HOST_TO_DEVICE", "DEVICE_TO_DEVICE", "DEVICE_TO_HOST", "HOST_TO_HOST"]
    assert all(c.count == x.nbytes for c in rt.copies)
    assert rt.total_copy_us == pytest.approx(sum(c.us for c in rt.copies))


def test_pointer_offsets_pyacl_numbers_and_default_kind():
    rt = Device("teach")
    buf = rt.malloc(64)
    x = np.arange(8, dtype=np.int32)
    rt.memcpy(buf + 16, 48, x[:4], 16, 1)             # 1 = HOST_TO_DEVICE, into bytes 16..31
    rt.memcpy(buf, 64, x[4:], 16, "DEFAULT")          # DEFAULT: the runtime works the kind out
    out = np.full(16, -1, dtype=np.int32)
    rt.memcpy(out, out.nbytes, buf, 64, "ACL_MEMCPY_DEVICE_TO_HOST")
    np.testing.assert_array_equal(out, [4, 5, 6, 7, 0, 1, 2, 3] + [0] * 8)
    assert rt.copies[1].kind == "HOST_TO_DEVICE"


# -- memcpy costs, worked out from the chip files' figures -------------------------------------------
def link_gb_per_s(gen, lanes):
    """PCIe (S16): GT/s a lane, 128b/130b from Gen3, 256 B payloads beside 24 B of TLP overhead."""
    return lanes * {3: 8.0, 4: 16.0}[gen] * 128 / 130 / 8 * 256 / (256 + 24)


START_US, HOST_GB_PER_S = 10.0, 10.0                    # the chip files' [device] (chosen)


def h2d_us(count, gen, lanes):
    """Pageable host memory is staged by a host core, then DMA'd across the link (one after the other)."""
    return START_US + count / (HOST_GB_PER_S * 1e3) + count / (link_gb_per_s(gen, lanes) * 1e3)


@pytest.mark.parametrize("chip, gen, lanes", [("910", 4, 16), ("910b", 4, 16), ("310", 3, 4)])
@pytest.mark.parametrize("count", [1, 64 * KB, 32 * MB])
def test_host_device_copies_cost_start_staging_and_link(chip, gen, lanes, count):
    rt = Device(chip)
    buf = rt.malloc(count)
    x = np.zeros(count, dtype=np.uint8)
    assert rt.memcpy(buf, count, x, count, "HOST_TO_DEVICE") == pytest.approx(h2d_us(count, gen, lanes))
    assert rt.memcpy(x, count, buf, count, "DEVICE_TO_HOST") == pytest.approx(h2d_us(count, gen, lanes))


def test_copy_time_grows_with_bytes_and_the_narrow_link_is_slower():
    def cost(chip, kind, count):
        rt = Device(chip)
        a, b = rt.malloc(count), rt.malloc(count)
        host = np.zeros(count, dtype=np.uint8)
        dst, src = {"HOST_TO_DEVICE": (a, host), "DEVICE_TO_HOST": (host, a), "DEVICE_TO_DEVICE": (b, a),
                    "HOST_TO_HOST": (host, np.ones(count, dtype=np.uint8))}[kind]
        return rt.memcpy(dst, count, src, count, kind)
    for kind in ("HOST_TO_DEVICE", "DEVICE_TO_HOST", "DEVICE_TO_DEVICE", "HOST_TO_HOST"):
        start = 0.0 if kind == "HOST_TO_HOST" else START_US
        one, two = cost("910b", kind, 8 * MB) - start, cost("910b", kind, 16 * MB) - start
        assert two == pytest.approx(2 * one), kind            # linear in bytes after the start-up
    # the 310's PCIe 3.0 x4 against the 910's 4.0 x16: the link part is 8x slower
    link310 = cost("310", "HOST_TO_DEVICE", 8 * MB) - START_US - 8 * MB / (HOST_GB_PER_S * 1e3)
    link910 = cost("910", "HOST_TO_DEVICE", 8 * MB) - START_US - 8 * MB / (HOST_GB_PER_S * 1e3)
    assert link310 == pytest.approx(8 * link910)


def test_device_to_device_reads_and_writes_hbm_at_its_sustained_rate():
    chip = npulab.get_chip("910b")
    hbm_gb_per_s = 864.9 * 0.89 * 1.85                    # [memory] pins x efficiency x clock: 1.42 TB/s
    rt = Device(chip)
    a, b = rt.malloc(64 * MB), rt.malloc(64 * MB)
    us = rt.memcpy(b, 64 * MB, a, 64 * MB, "DEVICE_TO_DEVICE")
    assert us == pytest.approx(START_US + 2 * 64 * MB / (hbm_gb_per_s * 1e3))
    assert us < h2d_us(64 * MB, 4, 16) / 20               # on-device copies are far cheaper than PCIe


def test_large_copy_switch_overlaps_staging_and_dma(monkeypatch):
    count = 32 * LARGE_COPY_CHUNK_BYTES                  # 256 MiB
    rt = Device("910b")
    buf = rt.malloc(count)
    x = np.zeros(count, dtype=np.uint8)
    serial = rt.memcpy(buf, count, x, count, "HOST_TO_DEVICE")
    monkeypatch.setenv(LARGE_COPY_ENV, "1")
    piped = rt.memcpy(buf, count, x, count, "HOST_TO_DEVICE")
    # a two-stage pipeline bound by staging (10 GB/s, below the link's 28.8): every chunk staged,
    # then the last chunk's DMA
    link = link_gb_per_s(4, 16)
    assert piped == pytest.approx(START_US + count / (HOST_GB_PER_S * 1e3) + LARGE_COPY_CHUNK_BYTES / (link * 1e3))
    assert serial == pytest.approx(h2d_us(count, 4, 16))
    assert piped < 0.8 * serial
    small = rt.malloc(MB)
    y = np.zeros(MB, dtype=np.uint8)
    assert rt.memcpy(small, MB, y, MB, "HOST_TO_DEVICE") == pytest.approx(h2d_us(MB, 4, 16))   # one chunk: no overlap
    monkeypatch.setenv(LARGE_COPY_ENV, "yes")
    with pytest.raises(ArgumentError, match="NPULAB_LARGE_COPY='yes': expected 0"):
        rt.memcpy(small, MB, y, MB, "HOST_TO_DEVICE")


# -- errors of misused pointers and copies ------------------------------------------------------------
def test_double_free_and_use_after_free():
    rt = Device("teach")
    p = rt.malloc(256)
    rt.free(p)
    with pytest.raises(DevicePointerError, match="double free"):
        rt.free(p)
    with pytest.raises(DevicePointerError, match="use after free"):
        rt.memcpy(np.zeros(4, np.uint8), 4, p, 4, "DEVICE_TO_HOST")


def test_free_needs_the_pointer_malloc_returned():
    rt = Device("teach")
    p = rt.malloc(256)
    with pytest.raises(DevicePointerError, match="points 32 bytes into"):
        rt.free(p + 32)
    with pytest.raises(DevicePointerError, match="not in any live allocation"):
        rt.free(p + 4096)
    with pytest.raises(DevicePointerError, match="belongs to device 1"):
        Device("teach", 0).free(Device("teach", 1).malloc(64))
    with pytest.raises(ArgumentTypeError, match="expected a DevicePtr"):
        rt.free(p.address)


def test_copies_past_their_room_are_refused():
    rt = Device("teach")
    buf = rt.malloc(100)
    host = np.zeros(200, dtype=np.uint8)
    with pytest.raises(MemcpyError, match="count 64 bytes is more than dst_max 32"):
        rt.memcpy(buf, 32, host, 64, "HOST_TO_DEVICE")
    with pytest.raises(MemcpyError, match="dst_max 200 bytes, but dst holds 100"):
        rt.memcpy(buf, 200, host, 200, "HOST_TO_DEVICE")
    with pytest.raises(MemcpyError, match="dst_max 100 bytes, but dst holds 50"):
        rt.memcpy(buf + 50, 100, host, 50, "HOST_TO_DEVICE")
    with pytest.raises(MemcpyError, match="count 150 bytes, but src holds 100"):
        rt.memcpy(host, 200, buf, 150, "DEVICE_TO_HOST")


@pytest.mark.parametrize("kind, found", [("HOST_TO_DEVICE", "DEVICE_TO_HOST"), ("DEVICE_TO_DEVICE", "DEVICE_TO_HOST"),
                                         ("HOST_TO_HOST", "DEVICE_TO_HOST")])
def test_a_kind_that_does_not_match_the_pointers_says_which_it_is(kind, found):
    rt = Device("teach")
    buf = rt.malloc(16)
    with pytest.raises(MemcpyError, match=f"kind {kind}, but src is a device pointer and dst is a host array: "
                                          f"that copy is {found}"):
        rt.memcpy(np.zeros(16, np.uint8), 16, buf, 16, kind)


def test_host_arrays_must_be_contiguous_and_a_destination_writable():
    rt = Device("teach")
    buf = rt.malloc(64)
    with pytest.raises(MemcpyError, match="not C-contiguous"):
        rt.memcpy(buf, 64, np.zeros((8, 8), np.uint8)[:, ::2], 32, "HOST_TO_DEVICE")
    ro = np.zeros(64, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(MemcpyError, match="read-only"):
        rt.memcpy(ro, 64, buf, 64, "DEVICE_TO_HOST")
    with pytest.raises(ArgumentTypeError, match="DevicePtr .* or a numpy array"):
        rt.memcpy(buf, 64, b"bytes", 5, "HOST_TO_DEVICE")
    with pytest.raises(ArgumentError, match="not an aclrtMemcpyKind"):
        rt.memcpy(buf, 64, np.zeros(64, np.uint8), 64, "HOST_TO_NPU")
