# cython: language_level=3
"""The instruction set's numbers (declared once, in ``pyx/_isa.pxd``) for Python: name ->
number for the pipes, the kinds and the opcodes. ``npulab.sim.isa`` builds its readable enums
(``Pipe``, ``Kind``, ``Op``) from these; tests/sim/test_isa.py holds the two to the same set."""

#: pipe name -> number (ALL only as the argument of a full pipe_barrier)
PIPES = {"S": PIPE_S, "MTE1": PIPE_MTE1, "MTE2": PIPE_MTE2, "MTE3": PIPE_MTE3, "M": PIPE_M,
         "V": PIPE_V, "FIX": PIPE_FIX, "ALL": PIPE_ALL}
#: the pipes an instruction can run on (S .. FIX)
PIPE_COUNT = NUM_PIPES
#: kind name -> number
KINDS = {"WORK": KIND_WORK, "SET": KIND_SET, "WAIT": KIND_WAIT, "BARRIER_ALL": KIND_BARRIER_ALL,
         "CROSS_SET": KIND_CROSS_SET, "CROSS_WAIT": KIND_CROSS_WAIT}
#: opcode name -> number
OPS = {"SET_FLAG": OP_SET_FLAG, "WAIT_FLAG": OP_WAIT_FLAG, "BARRIER": OP_BARRIER, "MARK": OP_MARK,
       "CROSS_SET_FLAG": OP_CROSS_SET_FLAG, "CROSS_WAIT_FLAG": OP_CROSS_WAIT_FLAG,
       "SCALAR": OP_SCALAR, "COPY_GM_TO_UB": OP_COPY_GM_TO_UB, "COPY_GM_TO_L1": OP_COPY_GM_TO_L1,
       "COPY_UB_TO_GM": OP_COPY_UB_TO_GM, "COPY_L1_TO_L0A": OP_COPY_L1_TO_L0A,
       "COPY_L1_TO_L0B": OP_COPY_L1_TO_L0B, "COPY_L1_TO_UB": OP_COPY_L1_TO_UB,
       "COPY_UB_TO_UB": OP_COPY_UB_TO_UB, "FIXPIPE": OP_FIXPIPE,
       "COPY_L0C_TO_UB": OP_COPY_L0C_TO_UB, "VEC_BINARY": OP_VEC_BINARY,
       "VEC_SCALAR": OP_VEC_SCALAR, "VEC_UNARY": OP_VEC_UNARY, "VEC_CAST": OP_VEC_CAST,
       "VEC_DUP": OP_VEC_DUP, "VEC_REDUCE": OP_VEC_REDUCE, "MMAD": OP_MMAD}
