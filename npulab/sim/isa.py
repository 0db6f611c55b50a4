"""The closed instruction set of the simulated AI core, grouped by the unit that runs it.

Every call of the kernel language lowers to these. The scheduler only needs four *kinds*
(plain work, set a flag, wait on a flag, full barrier); the opcode says what the work was, for
the trace, the energy model and the learner.
"""
from enum import IntEnum


class Pipe(IntEnum):
    """The pipes of one AI core. Each runs its instructions in order; pipes run in parallel."""
    S = 0      # scalar: issues every instruction, runs scalar code
    MTE1 = 1   # L1 -> L0A / L0B
    MTE2 = 2   # GM -> L1 / UB
    MTE3 = 3   # UB -> GM
    M = 4      # cube (matrix) unit
    V = 5      # vector unit
    FIX = 6    # FixPipe: L0C -> GM / L1 / UB
    ALL = 7    # only as the argument of a full pipe_barrier

    @property
    def track(self) -> str:
        """The track name msprof's simulator gives this pipe in trace.json."""
        return TRACK_NAMES[self]


NUM_PIPES = 7
TRACK_NAMES = {Pipe.S: "SCALAR", Pipe.MTE1: "MTE1", Pipe.MTE2: "MTE2", Pipe.MTE3: "MTE3",
               Pipe.M: "CUBE", Pipe.V: "VECTOR", Pipe.FIX: "FIXP"}
#: msprof PipeUtilization / op_summary ratio names.
RATIO_NAMES = {Pipe.S: "scalar_ratio", Pipe.MTE1: "mte1_ratio", Pipe.MTE2: "mte2_ratio",
               Pipe.MTE3: "mte3_ratio", Pipe.M: "mac_ratio", Pipe.V: "vec_ratio",
               Pipe.FIX: "fixpipe_ratio"}


class Kind(IntEnum):
    """What the scheduler must know of an instruction."""
    WORK = 0         # occupies its pipe for its duration
    SET = 1          # set_flag: fires when every earlier instruction of its pipe has finished
    WAIT = 2         # wait_flag: its pipe stalls until the matching set has fired
    BARRIER_ALL = 3  # pipe_barrier(PIPE_ALL): waits for every pipe, then lets all continue


class Op(IntEnum):
    """Opcodes, grouped by unit."""
    # sync (any pipe)
    SET_FLAG = 0
    WAIT_FLAG = 1
    BARRIER = 2
    MARK = 3            # zero-cost marker (a queue slot taken without waiting)
    # scalar
    SCALAR = 10
    # data movement
    COPY_GM_TO_UB = 20
    COPY_GM_TO_L1 = 21
    COPY_UB_TO_GM = 22
    COPY_L1_TO_L0A = 23
    COPY_L1_TO_L0B = 24
    COPY_L1_TO_UB = 25
    COPY_UB_TO_UB = 26
    FIXPIPE = 27
    # vector
    VEC_BINARY = 40     # add, sub, mul, div, max, min
    VEC_SCALAR = 41     # adds, muls, maxs, mins
    VEC_UNARY = 42      # abs, relu, exp, ln, sqrt, reciprocal
    VEC_CAST = 43
    VEC_DUP = 44
    VEC_REDUCE = 45
    # cube
    MMAD = 60


#: Opcodes whose work counts as the cube unit's arithmetic (for mac_ratio and FLOPs).
CUBE_OPS = frozenset({Op.MMAD})
VECTOR_OPS = frozenset({Op.VEC_BINARY, Op.VEC_SCALAR, Op.VEC_UNARY, Op.VEC_CAST, Op.VEC_DUP, Op.VEC_REDUCE})


def flag_key(src: int, dst: int, event_id: int) -> int:
    """One integer per (source pipe, destination pipe, event id): what set and wait match on."""
    return (int(src) * 8 + int(dst)) * 16 + int(event_id)


def describe_key(key: int) -> str:
    src, rest = divmod(key, 128)
    dst, eid = divmod(rest, 16)
    return f"{Pipe(src).name}->{Pipe(dst).name} event {eid}"
