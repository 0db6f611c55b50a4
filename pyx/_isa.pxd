# The numbers of the simulated AI core's instruction set, declared once: the pipes, the four
# kinds the scheduler knows and the opcodes. The Cython modules cimport them from here
# (``from npulab._isa cimport ...``); ``npulab._isa`` hands them to Python, where
# ``npulab.sim.isa`` gives them their readable names and meanings (Pipe, Kind, Op).

cdef enum:
    # pipes: each runs its instructions in order; they run in parallel
    PIPE_S = 0          # scalar: issues every instruction, runs scalar code
    PIPE_MTE1 = 1       # L1 -> L0A / L0B
    PIPE_MTE2 = 2       # GM -> L1 / UB
    PIPE_MTE3 = 3       # UB -> GM
    PIPE_M = 4          # cube (matrix) unit
    PIPE_V = 5          # vector unit
    PIPE_FIX = 6        # FixPipe: L0C -> GM / L1 / UB
    PIPE_ALL = 7        # only as the argument of a full pipe_barrier
    NUM_PIPES = 7       # the pipes an instruction can run on: S .. FIX

cdef enum:
    # kinds: what the scheduler must know of an instruction
    KIND_WORK = 0
    KIND_SET = 1
    KIND_WAIT = 2
    KIND_BARRIER_ALL = 3
    KIND_CROSS_SET = 4      # CrossCoreSetFlag: a set whose waits are on another core
    KIND_CROSS_WAIT = 5     # CrossCoreWaitFlag: a wait whose time comes from another core

cdef enum:
    # opcodes, grouped by unit
    OP_SET_FLAG = 0
    OP_WAIT_FLAG = 1
    OP_BARRIER = 2
    OP_MARK = 3
    OP_CROSS_SET_FLAG = 4
    OP_CROSS_WAIT_FLAG = 5
    OP_SCALAR = 10
    OP_COPY_GM_TO_UB = 20
    OP_COPY_GM_TO_L1 = 21
    OP_COPY_UB_TO_GM = 22
    OP_COPY_L1_TO_L0A = 23
    OP_COPY_L1_TO_L0B = 24
    OP_COPY_L1_TO_UB = 25
    OP_COPY_UB_TO_UB = 26
    OP_FIXPIPE = 27
    OP_COPY_L0C_TO_UB = 28   # coupled chips: L0C -> UB on the vector pipe (DataCopy CO1 -> CO2)
    OP_VEC_BINARY = 40
    OP_VEC_SCALAR = 41
    OP_VEC_UNARY = 42
    OP_VEC_CAST = 43
    OP_VEC_DUP = 44
    OP_VEC_REDUCE = 45
    OP_MMAD = 60
