"""L1's one port (sim.l1port): an MTE1 load that overlaps MTE2 writing L1 gets what is left of it."""
import numpy as np

from npulab import get_chip
from npulab.lang import (A1, A2, PIPE_MTE1, PIPE_MTE2, TBuf, TPipe, data_copy_nd2nz, launch, load_data,
                         set_flag, wait_flag)
from npulab.sim.isa import Op


def _load_while_copying(a_gm, big_gm, copy_meanwhile):
    """A 128 x 128 tile into L1, then its load into L0A, while (or not) a large copy fills
    another part of L1."""
    pipe = TPipe()
    l1, l1_big, l0a = TBuf(A1, "l1"), TBuf(A1, "big"), TBuf(A2, "l0a")
    pipe.init_buffer(l1, 128 * 128 * 2)
    pipe.init_buffer(l1_big, 384 * 512 * 2)
    pipe.init_buffer(l0a, 128 * 128 * 2)
    data_copy_nd2nz(l1.get(np.float16), a_gm, 128, 128)
    set_flag(PIPE_MTE2, PIPE_MTE1, 0)
    wait_flag(PIPE_MTE2, PIPE_MTE1, 0)
    if copy_meanwhile:
        data_copy_nd2nz(l1_big.get(np.float16), big_gm, 384, 512)
    for _ in range(8):
        load_data(l0a.get(np.float16), l1.get(np.float16), 128, 128, src_rows=128)


def test_a_load_beside_an_mte2_write_into_l1_is_slower():
    chip = get_chip("910b")
    a, big = np.zeros((128, 128), np.float16), np.zeros((384, 512), np.float16)
    durs = {}
    for meanwhile in (False, True):
        tr = launch(_load_while_copying, 1, a, big, meanwhile, chip="910b", core_type="aic", mode="timing").trace
        loads = np.flatnonzero(tr.op == Op.COPY_L1_TO_L0A)
        durs[meanwhile] = (tr.busy_end - tr.start)[loads]
    alone = 128 * 128 * 2 / chip.pipes.mte1_bytes_per_cycle
    assert (durs[False] == alone).all()
    # MTE2 writes L1 at up to its rate meanwhile: the load gets the port's rest
    left = chip.pipes.l1_port_bytes_per_cycle - chip.pipes.mte2_bytes_per_cycle
    assert left < chip.pipes.mte1_bytes_per_cycle
    assert durs[True].max() > alone and durs[True].max() <= np.ceil(alone * chip.pipes.mte1_bytes_per_cycle / left)
