"""GM traffic (sim/gm.py): how a core's reads and writes share its part of HBM."""
import numpy as np
import pytest

import npulab
from npulab import lang
from npulab.bench.conv import RESNET50_CONVS, conv_row, touched
from npulab.lang import VECCALC, TPipe, TBuf, data_copy
from npulab.sim.isa import Op

N = 8192                       # fp16 elements a copy: 16 KB


def _copies(x, y, serial):
    """Two rounds of read x[i] -> UB -> write y[i]. ``serial``: a full barrier after every
    copy, so no read ever overlaps a write in time."""
    pipe = TPipe()
    buf = TBuf(VECCALC, "b")
    pipe.init_buffer(buf, 2 * N * 2)
    blk = lang.get_block_idx()
    for r in range(2):
        t = buf.get(np.float16)[r * N:(r + 1) * N]
        data_copy(t, x[(2 * blk + r) * N:], N)
        if serial:
            lang.pipe_barrier(lang.PIPE_ALL)
        lang.set_flag(lang.PIPE_MTE2, lang.PIPE_MTE3, 0)
        lang.wait_flag(lang.PIPE_MTE2, lang.PIPE_MTE3, 0)
        data_copy(y[(2 * blk + r) * N:], t, N)
        if serial:
            lang.pipe_barrier(lang.PIPE_ALL)


def _run(serial, cores=32):
    x = np.random.default_rng(0).standard_normal(2 * cores * N).astype(np.float16)
    res = lang.launch(_copies, cores, x, np.zeros_like(x), serial, chip="910", core_type="aiv")
    np.testing.assert_array_equal(res.outputs[1], x)
    return res.trace


def _gm_durations(tr, core=0):
    sel = (tr.core == core) & np.isin(tr.op, [Op.COPY_GM_TO_UB, Op.COPY_UB_TO_GM])
    return (tr.op[sel].tolist(), (tr.busy_end - tr.start)[sel].tolist())


def test_copies_that_never_overlap_get_the_whole_share():
    """Fill, drain, and a middle whose reads and writes are serialised: every copy moves its
    bytes at the core's whole share of HBM, none at a split part."""
    chip = npulab.get_chip("910")
    share = chip.gm_share_bytes_per_cycle(32)
    ops, durs = _gm_durations(_run(serial=True))
    assert len(durs) == 4
    assert durs == [int(np.ceil(N * 2 / share))] * 4, (ops, durs)


def test_overlapping_copies_split_the_share_and_stay_under_the_roof():
    """Without the barriers, the second read overlaps the first write: the overlapped copies
    are slower than alone, and the launch never moves bytes faster than HBM."""
    chip = npulab.get_chip("910")
    share = chip.gm_share_bytes_per_cycle(32)
    tr = _run(serial=False)
    _, durs = _gm_durations(tr)
    alone = int(np.ceil(N * 2 / share))
    assert durs[0] == alone                          # the fill read has nothing to share with
    assert max(durs) > alone                         # the middle read and write overlapped
    s = tr.summary()
    assert (s["hbm_read_bytes"] + s["gm_write_bytes"]) / s["cycles"] <= chip.memory.gm_bytes_per_cycle


@pytest.mark.parametrize("n,out,k,s,d,p", [(56, 28, 1, 2, 1, 0), (56, 28, 3, 2, 1, 1), (224, 112, 7, 2, 1, 3),
                                           (9, 3, 2, 3, 1, 0), (10, 4, 3, 2, 2, 1), (5, 5, 3, 1, 1, 1)])
def test_touched_counts_the_input_positions_a_conv_reads(n, out, k, s, d, p):
    reads = np.zeros(n, bool)
    for o in range(out):
        for j in range(k):
            i = o * s + j * d - p
            if 0 <= i < n:
                reads[i] = True
    assert touched(n, out, k, s, d, p) == reads.sum()


def test_a_strided_1x1_conv_stays_under_its_roofline():
    """layer2.0.downsample.0 reads a quarter of its input: the roofline counts only that, and
    the simulated kernel neither beats it nor moves bytes faster than HBM."""
    layer = next(lay for lay in RESNET50_CONVS if lay[0] == "layer2.0.downsample.0")
    row = conv_row(layer, 1, "910")
    assert 0 < row["utilization"] <= row["roofline_utilization"] <= 1


def _read_ahead(x, y, n, tiles, depth):
    """The first ``depth`` reads issued before any write (a read-ahead), then one read issued
    per tile written: early reads run while the first writes do."""
    pipe = TPipe()
    qi, qo = lang.Queue(lang.VECIN, "i"), lang.Queue(lang.VECOUT, "o")
    pipe.init_buffer(qi, depth, n * 2)
    pipe.init_buffer(qo, 2, n * 2)
    base = lang.get_block_idx() * tiles * n

    def read(t):
        a = qi.alloc_tensor(np.float16)
        data_copy(a, x[base + t * n:], n)
        qi.enque(a)
    for t in range(depth):
        read(t)
    for t in range(tiles):
        a = qi.deque()
        b = qo.alloc_tensor(np.float16)
        lang.adds(b, a, 1.0, n)
        qi.free_tensor(a)
        if t + depth < tiles:
            read(t + depth)
        qo.enque(b)
        b = qo.deque()
        data_copy(y[base + t * n:], b, n)
        qo.free_tensor(b)


@pytest.mark.parametrize("chip,depth", [("910b", 4), ("910b", 6), ("910", 6)])
def test_a_read_ahead_never_moves_bytes_faster_than_the_share(chip, depth):
    """Reads issued before the first write still share the core's part with the writes they
    run beside (the first model gave them the whole part: 910b depth 6 reached 136% of the
    share)."""
    c = npulab.get_chip(chip)
    cores, n, tiles = c.cores_for("aiv"), 4096, 8
    x = np.zeros(cores * tiles * n, np.float16)
    tr = lang.launch(_read_ahead, cores, x, np.zeros_like(x), n, tiles, depth, chip=chip,
                     core_type="aiv", mode="timing").trace
    share = c.gm_share_bytes_per_cycle(cores, "aiv")
    assert tiles * n * 2 * 2 / share <= tr.cycles


@pytest.mark.parametrize("chip", ["910", "910b", "310"])
def test_a_streaming_add_is_capped_at_what_the_dram_sustains(chip):
    """A DRAM does not sustain its pins' rate: an Add over every core moves its bytes at most at
    gm_efficiency x the pins' rate, and close to it (it streams)."""
    from npulab.kernels.elementwise import add_tiling, launch_add
    c = npulab.get_chip(chip)
    x = np.zeros(2_000_000, np.float16)
    _, tr = launch_add(x, np.zeros_like(x), add_tiling(x.size, x.dtype, c), c, "timing")
    s = tr.summary()
    rate = (s["gm_read_bytes"] + s["gm_write_bytes"]) / tr.core_time     # the cores' time, no launch
    assert c.memory.gm_efficiency < 1
    assert 0.9 * c.gm_sustained_bytes_per_cycle < rate <= c.gm_sustained_bytes_per_cycle
