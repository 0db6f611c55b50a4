"""UB bank conflicts: the cycles a vector instruction loses when its operands meet in one bank.

The rule (data/FACTS.md, "Core timing mechanisms", K1; NPU architecture 220x, the A2): the UB's
32-byte rows are dealt to ``vector.ub_bank_groups`` bank groups in turn (16: row ``i`` is in
group ``i % 16``), and each ``ub_bank_groups * ub_bank_bytes`` bytes (16 x 4 KB = 64 KB) hold one
bank of every group: bank ``(addr // 64 KB) * 16 + group``, so bank 15, 31 and 47 form one group
(K1's examples: 0x10000 in bank 16, 0x10020 in bank 17, 0x20020 in bank 33). Each cycle the vector
unit reads or writes one row of each bank group. K1's conflicts, for the operands' blocks that
go together:

* read-read: two sources in one bank group (src0 0x10020 and src1 0x20020: banks 17 and 33, one
  group): a cycle more;
* read-write: a source and the destination in one bank (src 0x10020, dst 0x10E20: bank 17);
* write-write: one destination here, so none.

A repeat (256 B, 8 blocks) of each operand advances by the same bytes, so the conflicts of its
blocks are those of its first: two sources whose offsets differ by a multiple of 512 B (16 rows)
meet in one group in every repeat; 256 B apart, never. msprof reports the lost cycles as
ResourceConflictRatio; the Trace as ``bank_conflict_ratio``. The count depends only on the
operands' offsets and the repeats, and is cached on them (a kernel's loop reuses a few buffers).
"""
from __future__ import annotations

from functools import lru_cache

ROW_BYTES = 32                  # K1: a bank row is 32 B (one block)


def bank_of(addr: int, bank_bytes: int, groups: int) -> tuple[int, int]:
    """(bank, bank group) of UB byte ``addr``."""
    g = (addr // ROW_BYTES) % groups
    return (addr // (groups * bank_bytes)) * groups + g, g


@lru_cache(maxsize=8192)
def conflict_cycles(bank_bytes: int, groups: int, repeat_bytes: int, repeats: int,
                    reads: tuple, write: int) -> int:
    """Extra cycles of a vector instruction of ``repeats`` repeats whose sources start at the UB
    byte offsets ``reads`` (distinct: two sources at one offset are one read) and whose
    destination starts at ``write`` (-1: none that conflicts): per repeat, one for each source
    beyond the first in one bank group, and one when the destination is in the bank of a source
    at another offset. A source that is the destination itself (in place: ``adds(x, x, ...)``,
    FusedMulAdd's dst) is read and written as one stream, the write-back of a repeat landing
    where its read has been (chosen: no conflict)."""
    extra = 0
    for r in range(repeats):
        step = r * repeat_bytes
        where = [bank_of(a + step, bank_bytes, groups) for a in reads]
        seen: dict[int, int] = {}
        for _, g in where:
            seen[g] = seen.get(g, 0) + 1
        extra += sum(n - 1 for n in seen.values())
        if write >= 0:
            wb = bank_of(write + step, bank_bytes, groups)[0]
            if any(b == wb for a, (b, _) in zip(reads, where) if a != write):
                extra += 1
    return extra


__all__ = ["ROW_BYTES", "bank_of", "conflict_cycles"]
