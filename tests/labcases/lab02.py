"""Lab 02's newer exercise cases (see labcases/__init__.py): the pipe ranking predicted from the
chip's rates, and the challenge, a many-tile Add with its flags set by hand. The references are
written from the lab's spec: the challenge's is the two-slot ping-pong, each slot's reuse
guarded by flags back from the pipes that used it."""
from __future__ import annotations

from npulab import lang
from npulab.labs.lab02 import STREAM_TILE, add_stream_serial, scratch
from npulab.lang import PIPE_MTE2, PIPE_MTE3, PIPE_V, data_copy, set_flag, wait_flag


def _tiles(n, whole_only=False):
    """(first element, count) of each STREAM_TILE tile of n elements (the tail dropped if asked)."""
    out = [(at, min(STREAM_TILE, n - at)) for at in range(0, n, STREAM_TILE)]
    return [t for t in out if t[1] == STREAM_TILE] if whole_only else out


def _stream(slots=2, backward=True, tail=True, drain_each=False, pair=True):
    """The challenge's kernel with ``slots`` sets of UB tensors, or one of its typical slips:
    ``backward=False`` leaves out the flags that guard a slot's reuse; ``tail=False`` stops at
    the last whole tile; ``drain_each`` waits for each tile's z to leave before the next tile's
    copies (two slots, used one after the other); ``pair=False`` leaves the last tiles' flags
    set and never waited on."""
    def add_stream(x, y, z):
        sets = [scratch(STREAM_TILE, (f"x{s}", f"y{s}", f"z{s}")) for s in range(slots)]
        for i, (at, n) in enumerate(_tiles(x.size, whole_only=not tail)):
            s = i % slots
            xu, yu, zu = sets[s]
            reused = i >= slots
            if backward and reused:
                wait_flag(PIPE_V, PIPE_MTE2, s)
            data_copy(xu, x[at:], n)
            data_copy(yu, y[at:], n)
            set_flag(PIPE_MTE2, PIPE_V, s)
            wait_flag(PIPE_MTE2, PIPE_V, s)
            if backward and reused:
                wait_flag(PIPE_MTE3, PIPE_V, s)
            lang.add(zu, xu, yu, n)
            if backward:
                set_flag(PIPE_V, PIPE_MTE2, s)
            set_flag(PIPE_V, PIPE_MTE3, s)
            wait_flag(PIPE_V, PIPE_MTE3, s)
            data_copy(z[at:], zu, n)
            if backward:
                set_flag(PIPE_MTE3, PIPE_V, s)
            if drain_each:
                set_flag(PIPE_MTE3, PIPE_MTE2, 0)
                wait_flag(PIPE_MTE3, PIPE_MTE2, 0)
        for s in range(slots if backward and pair else 0):
            wait_flag(PIPE_V, PIPE_MTE2, s)
            wait_flag(PIPE_MTE3, PIPE_V, s)
    return add_stream


def _stream_wait_first(x, y, z):
    """Waits on the backward flags from the first tile on: nothing ever set them."""
    xu, yu, zu = scratch(STREAM_TILE)
    for at, n in _tiles(x.size):
        wait_flag(PIPE_V, PIPE_MTE2, 0)
        data_copy(xu, x[at:], n)
        data_copy(yu, y[at:], n)
        set_flag(PIPE_MTE2, PIPE_V, 0)
        wait_flag(PIPE_MTE2, PIPE_V, 0)
        lang.add(zu, xu, yu, n)
        set_flag(PIPE_V, PIPE_MTE2, 0)
        set_flag(PIPE_V, PIPE_MTE3, 0)
        wait_flag(PIPE_V, PIPE_MTE3, 0)
        data_copy(z[at:], zu, n)


def _stream_blank(x, y, z):
    """z = x + y over x.size elements, STREAM_TILE at a time, flags by hand."""
    ...


CASES: dict = {
    "02.pipe_ranking": (("MTE2", "MTE3", "VECTOR"),
                        [(("VECTOR", "MTE2", "MTE3"), "memory-bound"), (("MTE3", "MTE2", "VECTOR"), "reads two"),
                         (("MTE2", "VECTOR", "MTE3"), "rate is several times"), ("MTE2", "tuple"),
                         (("MTE2", "MTE2", "VECTOR"), "each pipe once"), (("MTE2", "MTE3", "CUBE"), "each pipe once")],
                        ...),
    "02.stream_pingpong": (_stream(),
                           [(add_stream_serial, "take turns"),                 # the default: one slot
                            (_stream(slots=1), "take turns"),                  # flags right, one slot
                            (_stream(drain_each=True), "take turns"),          # two slots, used in turn
                            (_stream(backward=False), "slot used again"),      # the reuse unguarded
                            (_stream(tail=False), "tail"),
                            (_stream(pair=False), "come in pairs"),
                            (_stream_wait_first, "earlier tile to wait for")],
                           _stream_blank),
}
