"""The kernel language: every vector op against plain numpy, copies, blocks, queues."""
import numpy as np
import pytest

from fixtures import run_vector
from npulab import lang
from npulab.lang import VECCALC, VECIN, TPipe, Queue, TBuf, data_copy, data_copy_pad
from npulab.sim.isa import Kind, Op

N = 300   # not a whole number of repeats: exercises the partial last repeat


rng = np.random.default_rng(7)
A = (rng.standard_normal(N) * 3).astype(np.float32)
B = (rng.standard_normal(N) * 3 + 0.5).astype(np.float32)
POS = np.abs(A) + 0.25

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "max": np.maximum, "min": np.minimum}


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_binary_ops(name, dtype):
    a, b = A.astype(dtype), B.astype(dtype)
    out, _ = run_vector(lambda d, x, y: getattr(lang, name)(d, x, y, N), a, b, dtype=dtype)
    np.testing.assert_array_equal(out, BINARY[name](a, b))


@pytest.mark.parametrize("name, ref", [("adds", np.add), ("muls", np.multiply), ("maxs", np.maximum),
                                       ("mins", np.minimum)])
def test_scalar_ops(name, ref):
    out, _ = run_vector(lambda d, x: getattr(lang, name)(d, x, 0.75, N), A)
    np.testing.assert_array_equal(out, ref(A, np.float32(0.75)))


# fp32 results equal numpy's; fp16 transcendental results are computed in fp32 and rounded once,
# so they sit within one fp16 ulp of numpy's own fp16 function
@pytest.mark.parametrize("name, ref, src", [("abs", np.abs, A), ("relu", lambda x: np.maximum(x, 0), A),
                                            ("exp", np.exp, A), ("ln", np.log, POS), ("sqrt", np.sqrt, POS),
                                            ("reciprocal", lambda x: 1 / x, POS)])
@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-6), (np.float16, 1e-3)])
def test_unary_ops(name, ref, src, dtype, rtol):
    x = src.astype(dtype)
    out, _ = run_vector(lambda d, s: getattr(lang, name)(d, s, N), x, dtype=dtype)
    expect = ref(x.astype(np.float64))
    np.testing.assert_allclose(out.astype(np.float64), expect, rtol=rtol, atol=0)


def test_cast_rounding_and_saturation():
    x = np.array([2.5, -2.5, 1.7, -1.7, 300.0, -300.0, 0.5, 127.4] * 4, dtype=np.float32)
    n = x.size
    for mode, ref in [("rint", np.rint), ("floor", np.floor), ("ceil", np.ceil), ("trunc", np.trunc),
                      ("round", lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5))]:
        out, _ = run_vector(lambda d, s: lang.cast(d, s, mode, n), x, dtype=np.float32, out_dtype=np.int8)
        np.testing.assert_array_equal(out, np.clip(ref(x), -128, 127).astype(np.int8), err_msg=mode)
    out, _ = run_vector(lambda d, s: lang.cast(d, s, "none", n), x, dtype=np.float32, out_dtype=np.float16)
    np.testing.assert_array_equal(out, x.astype(np.float16))


def test_duplicate_and_reductions():
    out, _ = run_vector(lambda d, s: lang.duplicate(d, 4.5, N), A)
    assert (out == 4.5).all()
    out, _ = run_vector(lambda d, s: lang.reduce_sum(d, s, N), A)
    assert out[0] == pytest.approx(float(A.astype(np.float64).sum()), rel=1e-5)
    out, _ = run_vector(lambda d, s: lang.reduce_max(d, s, N), A)
    assert out[0] == A.max()


def test_vector_cost_counts_256_byte_repeats():
    _, trace = run_vector(lambda d, x, y: lang.add(d, x, y, N), A, B)
    add = [i for i, name in enumerate(trace.name) if name.startswith("add")]
    assert len(add) == 1
    chip = trace.chip
    repeats = -(-N * 4 // 256)                           # 300 fp32 = 1200 B = 5 repeats
    assert trace.end[add[0]] - trace.start[add[0]] == chip.vector.startup_cycles + repeats


def test_more_than_255_repeats_split_into_instructions():
    n = 255 * 64 + 10                                    # fp32: 64 elements a repeat
    a = np.ones(n, np.float32)
    out, trace = run_vector(lambda d, x: lang.adds(d, x, 1.0, n), a, chip="910")
    assert (out == 2).all()
    assert sum(name.startswith("adds") for name in trace.name) == 2


def test_data_copy_pad_pads_the_last_block():
    def kernel(x):
        pipe = TPipe()
        q = Queue(VECIN, "in_x")
        pipe.init_buffer(q, 1, 64)
        t = q.alloc_tensor(np.float16)
        t.numpy()[:] = 9                                 # stale contents
        data_copy_pad(t, x, 5, pad_value=-1)
        seen.append(t.numpy().copy())
    seen = []
    lang.launch(kernel, 1, np.arange(5, dtype=np.float16), chip="teach")
    assert list(seen[0][:16]) == [0, 1, 2, 3, 4] + [-1] * 11     # padded to 16 halves = 32 B
    assert (seen[0][16:] == 9).all()                             # nothing past the block


def test_blocks_see_their_index_and_map_to_cores():
    seen = []

    def kernel(x):
        seen.append((lang.get_block_idx(), lang.get_block_num()))
    _, trace = lang.launch(kernel, 5, np.zeros(4, np.float32), chip="teach")
    assert seen == [(b, 5) for b in range(5)]
    assert set(trace.core.tolist()) == {0, 1}                    # 5 blocks on 2 cores


def test_queues_lower_to_flags_exactly():
    """buffer_num=2: the first two allocs take free slots (no wait), later ones wait on a free."""
    def kernel(x):
        pipe = TPipe()
        q = Queue(VECIN, "in_x")
        pipe.init_buffer(q, 2, 64)
        for i in range(4):
            t = q.alloc_tensor(np.float32)
            data_copy(t, x, 16)
            q.enque(t)
            t = q.deque()
            lang.adds(t, t, 1.0, 16)
            q.free_tensor(t)
    _, trace = lang.launch(kernel, 1, np.zeros(16, np.float32), chip="teach")
    names = trace.name
    assert sum(n.startswith("alloc_tensor in_x") and "wait free" in n for n in names) == 2
    assert sum(n.startswith("enque") for n in names) == 4 and sum(n.startswith("deque") for n in names) == 4
    waits = [i for i, n in enumerate(names) if n.startswith("deque")]
    assert all(trace.kind[i] == Kind.WAIT and trace.pipe[i] == 5 for i in waits)
    assert sum(n.startswith("release in_x") for n in names) == 2   # end of block drains the frees
    assert (trace.op == Op.MARK).sum() >= 2


def test_user_arrays_are_not_written():
    x = np.arange(16, dtype=np.float32)

    def kernel(g):
        pipe = TPipe()
        b = TBuf(VECCALC, "b")
        pipe.init_buffer(b, 64)
        lang.duplicate(b.get(np.float32), 0.0, 16)
        lang.set_flag(lang.PIPE_V, lang.PIPE_MTE3, 0)
        lang.wait_flag(lang.PIPE_V, lang.PIPE_MTE3, 0)
        data_copy(g, b.get(np.float32), 16)
    (out,), _ = lang.launch(kernel, 1, x, chip="teach")
    assert (out == 0).all() and (x == np.arange(16)).all()


def _adds_in_pieces(g, n, piece):
    """adds over n fp16 elements of a UB buffer, as instructions of ``piece`` elements each
    (independent: each its own bytes, so no PIPE_V barrier orders them)."""
    pipe = TPipe()
    b = TBuf(VECCALC, "b")
    pipe.init_buffer(b, 2 * n * 2)
    t = b.get(np.float16)
    for lo in range(0, n, piece):
        lang.adds(t[n + lo:n + lo + piece], t[lo:lo + piece], 1.0, piece)


def test_many_small_instructions_cost_their_issue():
    """The scalar unit issues every instruction (issue_cycles each): the same 255 repeats as
    255 one-repeat instructions are issue-bound, as one 255-repeat instruction they are not."""
    from npulab import get_chip
    chip = get_chip("910")
    n = 255 * 128                                        # fp16: 128 elements a repeat
    spans, ratios = {}, {}
    for piece in (n, 128):
        tr = lang.launch(_adds_in_pieces, 1, np.zeros(4, np.float16), n, piece, chip="910", mode="timing").trace
        sel = np.flatnonzero(tr.op == Op.VEC_SCALAR)
        assert len(sel) == n // piece
        spans[piece] = int(tr.end[sel].max() - tr.start[sel].min())
        ratios[piece] = tr.pipe_ratios()
    assert chip.issue_cycles > 1
    assert spans[n] == 255 + chip.vector.startup_cycles
    # at least one issue slot each (lang.sync's conservative barrier every MAX_TRACKED adds a few)
    assert spans[128] >= 254 * chip.issue_cycles + 1 + chip.vector.startup_cycles
    assert spans[128] > 3 * spans[n]
    # and the trace says why: the scalar unit, issuing, is busier than the vector unit
    assert ratios[128]["scalar_ratio"] > ratios[128]["vec_ratio"]
    assert ratios[n]["scalar_ratio"] < ratios[n]["vec_ratio"]
