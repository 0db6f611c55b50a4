"""The labs' machinery: checkers for the exercises, the notebook generator, and each lab's glue.

* :mod:`npulab.labs.check`: ``check.lab00.on_chip_mib(answer)`` and friends, one checker per
  exercise, printing PASS / NOT ATTEMPTED YET / FAIL with a hint;
* :mod:`npulab.labs.notebooks`: ``labs/src/NN_name.md`` -> learner and (executed) solution notebooks
  (``python -m npulab.labs build``);
* ``lab00`` .. ``lab09``: glue only, what a lab runs that is longer than a notebook cell should
  be: the lab's inputs and constants, running a learner's code (a kernel class, a tiling
  function, a K loop or an epilogue plugged into a scaffold), the measurements and the tables
  it prints, and the exercise material (the reference answers of the checks, lab 02's racy
  kernel, lab 05's K-loop and lab 08's epilogue scaffolds, lab 08's BN fold).

What the labs use from the layers below lives there: the teaching kernels in
:mod:`npulab.kernels.examples` (lab 03's row scale, lab 04's SiLU, lab 06's img2col probe), the
pictures and trace readings in :mod:`npulab.plot` (NZ, NC1HWC0 and img2col pictures; queue slots,
UB plans, the vector pipe's instructions and time), the float64 references in
:mod:`npulab.ops.golden`.

==========  ==============================================================================
module      holds
==========  ==============================================================================
``lab00``   the install check, ``npulab info``
``lab01``   roofline shapes, reference intensities, the Add measure
``lab02``   the Add inputs, running a KernelAdd-shaped class, the racy one-tile Add, tile sizes
``lab03``   an Add tiling in words and run, the row inputs, the matmul tiling, the core sweep
``lab04``   the SiLU input, running a SiluStages class, the slot comparison and its tables
``lab05``   the K-loop scaffold and its reference, the tiling explorer, the tiling comparison
``lab06``   img2col sizes, exercise 3's conv layer and tiling tuple, the batch-1 measure
``lab07``   the naive softmax, logits, the RMSNorm exercise's kernel and runs, GELU measures
``lab08``   fused-vs-separate rows, the BN fold, the epilogue scaffold and its reference
``lab09``   the pass report, liveness and planner sets, the fold-rule graph, a crowded device
==========  ==============================================================================
"""
from . import check
from .notebooks import build

__all__ = ["build", "check"]
