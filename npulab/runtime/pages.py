"""Device memory as pages: how aclrtMalloc's policies hand out HBM (or DDR), and why a huge-page
request can fail while bytes are still free.

What CANN documents (S15, aclrtMalloc and aclrtMemMallocPolicy):

* a request of ``size`` bytes is rounded up to a multiple of 32 bytes and 32 bytes are added
  (``ALIGN_UP(size, 32) + 32``); the returned address is 64-byte aligned;
* huge pages are handed out in 2 MB grains: a huge-page allocation is rounded up to a multiple
  of 2 MB. ``HUGE_FIRST`` takes normal pages for a request of at most 1 MB, and for a larger one
  huge pages first, normal pages when too few huge pages are free; ``HUGE_ONLY`` takes huge pages
  or fails; ``NORMAL_ONLY`` takes normal pages or fails.

The model (npulab's, each step a choice that follows from the rules above): physical memory is
``capacity // huge_page_bytes`` frames of one huge page each. A huge-page allocation takes whole
free frames; a normal-page allocation takes ``normal_page_bytes`` pages, first from frames that
normal allocations already split (packing the small ones together), then by splitting free
frames. A split frame whose pages are all free again is whole again. Device addresses are
virtual, so an allocation's frames need not be neighbours: the only fragmentation there is, and
the only one modelled, is free bytes scattered over split frames, which huge pages cannot use.
Not modelled: the 1 GB huge pages (HUGE1G_ONLY), P2P memory, the memory CANN reserves for
itself (aclrtGetMemInfo's total leaves it out; npulab reserves none).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentError

#: aclrtMemMallocPolicy, with pyACL's numbers (acl.rt.malloc(size, policy))
POLICIES = ("HUGE_FIRST", "HUGE_ONLY", "NORMAL_ONLY")

#: HUGE_FIRST serves a request of at most this many bytes from normal pages (S15: "<= 1M")
HUGE_FIRST_NORMAL_MAX = 1 << 20

#: aclrtMalloc's rounding (S15): a multiple of ALIGN bytes, then PAD bytes more
ALIGN = 32
PAD = 32


def policy_name(policy) -> str:
    """``policy`` as one of POLICIES: a name (``"HUGE_FIRST"`` or ``"ACL_MEM_MALLOC_HUGE_FIRST"``)
    or pyACL's number (0, 1, 2)."""
    if isinstance(policy, int) and not isinstance(policy, bool) and 0 <= policy < len(POLICIES):
        return POLICIES[policy]
    if isinstance(policy, str):
        name = policy.upper().removeprefix("ACL_MEM_MALLOC_")
        if name in POLICIES:
            return name
    raise ArgumentError(f"malloc: policy {policy!r} is not an aclrtMemMallocPolicy; expected one of "
                        f"{', '.join(POLICIES)} (or pyACL's 0, 1, 2)")


def aligned_size(size: int) -> int:
    """The bytes aclrtMalloc sets aside for ``size``: ALIGN_UP(size, 32) + 32 (S15)."""
    return -(-size // ALIGN) * ALIGN + PAD


@dataclass(frozen=True)
class Grant:
    """What one allocation holds: ``huge`` whole frames, or normal pages as (frame, pages) pairs."""
    page_kind: str                       # "huge" or "normal"
    frames: tuple[int, ...] = ()         # huge: the frames taken whole
    pieces: tuple[tuple[int, int], ...] = ()   # normal: (frame, pages taken from it)
    page_bytes: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes of device memory the grant holds (whole pages)."""
        return len(self.frames) * self.page_bytes + sum(p for _, p in self.pieces) * self.page_bytes


class PagePool:
    """The frames and pages of one device's memory (see the module's docstring)."""

    def __init__(self, capacity: int, normal_page_bytes: int, huge_page_bytes: int):
        self.normal = normal_page_bytes
        self.huge = huge_page_bytes
        self.pages_per_frame = huge_page_bytes // normal_page_bytes
        self.frames = capacity // huge_page_bytes
        self._whole = list(range(self.frames - 1, -1, -1))   # free frames, lowest on top
        self._split: dict[int, int] = {}                      # split frame -> its free pages

    # -- what is free ------------------------------------------------------------------------
    @property
    def total_bytes(self) -> int:
        return self.frames * self.huge

    @property
    def free_bytes(self) -> int:
        return len(self._whole) * self.huge + sum(self._split.values()) * self.normal

    @property
    def free_huge_pages(self) -> int:
        """Whole free frames: what a huge-page allocation can take."""
        return len(self._whole)

    # -- taking and giving back ----------------------------------------------------------------
    def take_huge(self, nbytes: int) -> Grant | None:
        """Whole frames for ``nbytes`` (rounded up to huge pages), or None if too few are free."""
        n = -(-nbytes // self.huge)
        if n > len(self._whole):
            return None
        return Grant("huge", frames=tuple(self._whole.pop() for _ in range(n)), page_bytes=self.huge)

    def take_normal(self, nbytes: int) -> Grant | None:
        """Normal pages for ``nbytes``: split frames' free pages first (lowest frame first), then
        free frames split; None if fewer pages are free."""
        need = -(-nbytes // self.normal)
        if need > sum(self._split.values()) + len(self._whole) * self.pages_per_frame:
            return None
        pieces = []
        for frame in sorted(self._split):
            if need == 0:
                break
            got = min(need, self._split[frame])
            if got:
                pieces.append((frame, got))
                self._split[frame] -= got
                need -= got
        while need:
            frame = self._whole.pop()
            got = min(need, self.pages_per_frame)
            self._split[frame] = self.pages_per_frame - got
            pieces.append((frame, got))
            need -= got
        return Grant("normal", pieces=tuple(pieces), page_bytes=self.normal)

    def give_back(self, grant: Grant) -> None:
        """Return a grant's pages; a split frame with every page free becomes whole again."""
        for frame in grant.frames:
            self._whole.append(frame)
        for frame, pages in grant.pieces:
            self._split[frame] += pages
            if self._split[frame] == self.pages_per_frame:
                del self._split[frame]
                self._whole.append(frame)
        self._whole.sort(reverse=True)
