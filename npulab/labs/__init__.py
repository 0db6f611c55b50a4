"""The labs' machinery: checkers for the exercises, the notebook generator, and each lab's glue.

* :mod:`npulab.labs.check`: ``check.lab00.on_chip_mib(answer)`` and friends, one checker per
  exercise, printing PASS / NOT ATTEMPTED YET / FAIL with a hint;
* :mod:`npulab.labs.notebooks`: ``labs/src/NN_name.md`` -> learner and (executed) solution notebooks
  (``python -m npulab.labs build``);
* ``lab00`` .. ``lab09`` and ``lab15``: glue only, what a lab runs that is longer than a notebook cell should
  be: the lab's inputs and constants, running a learner's code (a kernel class, a tiling
  function, a K loop or an epilogue plugged into a scaffold), the measurements and the tables
  it prints, and the exercise material (the reference answers of the checks, lab 02's racy
  kernel, lab 05's K-loop, lab 07's chunked and lab 08's epilogue scaffolds).

What the labs use from the layers below lives there: the teaching kernels in
:mod:`npulab.kernels.examples` (the challenges' kernels, lab 04's SiLU, Mish and gate, lab 06's
img2col probe), the
pictures and trace readings in :mod:`npulab.plot` (NZ, NC1HWC0 and img2col pictures; queue slots,
UB plans, the vector pipe's instructions and time), the float64 references in
:mod:`npulab.ops.golden`.

==========  ==============================================================================
module      holds
==========  ==============================================================================
``lab00``   the install check, ``npulab info``, the copy challenge's plan and runs
``lab01``   roofline shapes, the chips' cores (AIC / AIV), LayerNorm's passes, the polynomial
``lab02``   the Add inputs and stages, the pipe rates, the racy Add's hazard, the hand-flagged stream
``lab03``   an Add tiling in words and run, the row inputs, the core sweep, the 2-D challenge
``lab04``   speed-up predictions, the colleague's gate and its stalls, slot round trips, the gate runs
``lab05``   the K-loop scaffold, GM -> L1 bytes, the 910B mix run and its gantts, the tiling explorer
``lab06``   img2col sizes, the conv layers and tilings of the exercises, HBM terms, the batch measure
``lab07``   row tiles and passes, the softmax and RMSNorm stages, the bound-pipe runs, chunked rows
``lab08``   the folded conv's run, the GM traffic trace, the epilogue scaffold, fusion plans' cycles
``lab09``   the pass report, liveness and planner sets, the fold-rule graph, a crowded device
``lab15``   ResNet-50 builds and their traces, the layer fix's runs
==========  ==============================================================================
"""
from . import check
from .notebooks import build

__all__ = ["build", "check"]
