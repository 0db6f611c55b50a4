"""The closed instruction set of the simulated AI core, grouped by the unit that runs it.

Every call of the kernel language lowers to these. The scheduler only needs six *kinds*
(plain work, set a flag, wait on a flag, full barrier, and the cross-core set and wait of a
split chip's AIC and AIV cores); the opcode says what the work was, for the trace, the energy
model and the learner.

The numbers are declared once, in ``pyx/_isa.pxd``, for the Cython modules and (through
``npulab._isa``) for these enums: the names and meanings live here.
"""
from enum import IntEnum

from .. import _isa

_P, _K, _O = _isa.PIPES, _isa.KINDS, _isa.OPS


class Pipe(IntEnum):
    """The pipes of one AI core. Each runs its instructions in order; pipes run in parallel."""
    S = _P["S"]            # scalar: issues every instruction, runs scalar code
    MTE1 = _P["MTE1"]      # L1 -> L0A / L0B
    MTE2 = _P["MTE2"]      # GM -> L1 / UB
    MTE3 = _P["MTE3"]      # UB -> GM
    M = _P["M"]            # cube (matrix) unit
    V = _P["V"]            # vector unit
    FIX = _P["FIX"]        # FixPipe: L0C -> GM / L1 / UB
    ALL = _P["ALL"]        # only as the argument of a full pipe_barrier

    @property
    def track(self) -> str:
        """The track name msprof's simulator gives this pipe in trace.json."""
        return TRACK_NAMES[self]


#: the pipes an instruction can run on (S .. FIX)
NUM_PIPES = _isa.PIPE_COUNT
TRACK_NAMES = {Pipe.S: "SCALAR", Pipe.MTE1: "MTE1", Pipe.MTE2: "MTE2", Pipe.MTE3: "MTE3",
               Pipe.M: "CUBE", Pipe.V: "VECTOR", Pipe.FIX: "FIXP"}
#: msprof PipeUtilization / op_summary ratio names.
RATIO_NAMES = {Pipe.S: "scalar_ratio", Pipe.MTE1: "mte1_ratio", Pipe.MTE2: "mte2_ratio",
               Pipe.MTE3: "mte3_ratio", Pipe.M: "mac_ratio", Pipe.V: "vec_ratio",
               Pipe.FIX: "fixpipe_ratio"}


class Kind(IntEnum):
    """What the scheduler must know of an instruction."""
    WORK = _K["WORK"]                  # occupies its pipe for its duration
    SET = _K["SET"]                    # set_flag: fires when every earlier instruction of its pipe has finished
    WAIT = _K["WAIT"]                  # wait_flag: its pipe stalls until the matching set has fired
    BARRIER_ALL = _K["BARRIER_ALL"]    # pipe_barrier(PIPE_ALL): waits for every pipe, then lets all continue
    CROSS_SET = _K["CROSS_SET"]        # cross_core_set_flag: fires as SET does; its waits are on other cores
    CROSS_WAIT = _K["CROSS_WAIT"]      # cross_core_wait_flag: stalls its pipe until a time another core gives


class Op(IntEnum):
    """Opcodes, grouped by unit."""
    # sync (any pipe)
    SET_FLAG = _O["SET_FLAG"]
    WAIT_FLAG = _O["WAIT_FLAG"]
    BARRIER = _O["BARRIER"]
    MARK = _O["MARK"]                  # zero-cost marker (a queue slot taken without waiting)
    CROSS_SET_FLAG = _O["CROSS_SET_FLAG"]      # between the AIC and AIV cores of a split chip
    CROSS_WAIT_FLAG = _O["CROSS_WAIT_FLAG"]
    # scalar
    SCALAR = _O["SCALAR"]
    # data movement
    COPY_GM_TO_UB = _O["COPY_GM_TO_UB"]
    COPY_GM_TO_L1 = _O["COPY_GM_TO_L1"]
    COPY_UB_TO_GM = _O["COPY_UB_TO_GM"]
    COPY_L1_TO_L0A = _O["COPY_L1_TO_L0A"]
    COPY_L1_TO_L0B = _O["COPY_L1_TO_L0B"]
    COPY_L1_TO_UB = _O["COPY_L1_TO_UB"]
    COPY_UB_TO_UB = _O["COPY_UB_TO_UB"]
    FIXPIPE = _O["FIXPIPE"]
    COPY_L0C_TO_UB = _O["COPY_L0C_TO_UB"]   # coupled chips: the cube's result into UB, on the vector pipe
    # vector
    VEC_BINARY = _O["VEC_BINARY"]      # add, sub, mul, div, max, min
    VEC_SCALAR = _O["VEC_SCALAR"]      # adds, muls, maxs, mins
    VEC_UNARY = _O["VEC_UNARY"]        # abs, relu, exp, ln, sqrt, reciprocal
    VEC_CAST = _O["VEC_CAST"]
    VEC_DUP = _O["VEC_DUP"]
    VEC_REDUCE = _O["VEC_REDUCE"]
    # cube
    MMAD = _O["MMAD"]


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
