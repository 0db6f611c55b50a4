"""UB bank conflicts (sim.banks, K1's rule): the access patterns that conflict and those that do not."""
import numpy as np
import pytest

from npulab import get_chip, lang
from npulab.sim.banks import bank_of, conflict_cycles
from npulab.sim.isa import Op


def test_k1_examples_of_banks_and_groups():
    """K1's worked examples: 0x10000 is in bank 16, 0x10020 in bank 17, 0x20020 in bank 33,
    and 15, 31, 47 form one group."""
    assert bank_of(0x10000, 4096, 16) == (16, 0)
    assert bank_of(0x10020, 4096, 16) == (17, 1)
    assert bank_of(0x20020, 4096, 16) == (33, 1)
    assert {bank_of(a, 4096, 16)[1] for a in (15 * 32, 0x10000 + 15 * 32, 0x20000 + 15 * 32)} == {15}
    # read-read: src0 0x10020 and src1 0x20020 share a group (a cycle more), 0x10020 and 0x10000 do not
    assert conflict_cycles(4096, 16, 256, 1, (0x10020, 0x20020), -1) == 1
    assert conflict_cycles(4096, 16, 256, 1, (0x10000, 0x10020), -1) == 0
    # read-write: src 0x10020 and dst 0x10E20 are both in bank 17; dst 0x10000 is not
    assert conflict_cycles(4096, 16, 256, 1, (0x10020,), 0x10E20) == 1
    assert conflict_cycles(4096, 16, 256, 1, (0x10020,), 0x10000) == 0
    # in place is one stream
    assert conflict_cycles(4096, 16, 256, 4, (0x10020,), 0x10020) == 0


def _binary(g, n, src1_at, dst_at):
    """add over n fp16 of UB: src0 at byte 0, src1 and dst where asked."""
    pipe = lang.TPipe()
    b = lang.TBuf(lang.VECCALC, "ub")
    pipe.init_buffer(b, 128 * 1024)
    t = b.get(np.float16)
    lang.add(t[dst_at // 2:dst_at // 2 + n], t[:n], t[src1_at // 2:src1_at // 2 + n], n)


@pytest.mark.parametrize("src1_at, dst_at, conflicts", [
    (32768, 16384 + 128, True),     # src1 512 B x 64 past src0: the same bank group in every repeat
    (32768 + 256, 16384 + 128, False),   # 256 B further: never
    (32768 + 256, 4096, True),      # dst in src0's bank (read-write) in every repeat
    (32768 + 256, 65536 + 8192, False),  # dst in src0's bank group but another bank: none
])
def test_a_conflicting_pattern_costs_cycles_and_shows_in_the_ratio(src1_at, dst_at, conflicts):
    n = 64 * 128                                            # 64 repeats of 128 fp16
    tr = lang.launch(_binary, 1, np.zeros(4, np.float16), n, src1_at, dst_at, chip="910b",
                     core_type="aiv", mode="timing").trace
    add = np.flatnonzero(tr.op == Op.VEC_BINARY)
    busy = int((tr.busy_end - tr.start)[add].sum())
    ratio = tr.summary()["bank_conflict_ratio"]
    clash = conflict_cycles(4096, 16, 256, 64, tuple(sorted({0, src1_at})), dst_at)
    assert (clash > 0) == conflicts and busy == 64 + clash
    assert (ratio > 0) == (clash > 0) and ratio == pytest.approx(clash / busy)
    if src1_at == 32768:
        assert clash == 64 and ratio == pytest.approx(0.5)    # every repeat twice as long
    if src1_at == 32768 + 256 and dst_at == 16384 + 128:
        assert clash == 0 and ratio == 0
