"""The ops-nn style kernel layer: each operator a problem (what the user asks for, checked once),
a host tiling function (a TilingData dataclass with its ``block_dim``, derived from the problem)
and a kernel in the kernel language (:mod:`npulab.lang`), as ops-nn keeps ``op_host`` tiling
beside ``op_kernel``.

The vector unit:

* :mod:`~.vector_base` (what every vector kernel shares: float dtypes, tail copies, the tiles of
  a block's pipeline, the launch) and :mod:`~.rows` (the row kernels' base);
* :mod:`~.elementwise` (Add), :mod:`~.broadcast` (Add, Mul, Sub, RealDiv, Maximum, Minimum
  with broadcasting), :mod:`~.activation` (ReLU, GELU in its erf and tanh forms, SiLU),
  :mod:`~.unary` (Exp, Log, Sqrt, Rsqrt, Reciprocal, Abs, Neg, Tanh, Sigmoid, Erf, Pows on the
  activation kernel; Cast), :mod:`~.reduce` (ReduceSum, ReduceMean, ReduceMax over any axes),
  :mod:`~.softmax` (SoftmaxV2, any axis), :mod:`~.norm` (LayerNorm, RMSNorm, BatchNorm
  inference), :mod:`~.pooling` (MaxPool2d, AvgPool2d, Pool+Scale).

The cube, each family a package of problem, tiling, kernel and search:

* :mod:`~.matmul` (MatMul, BatchMatMul, MatMul+BiasAdd(+ReLU), int8);
* :mod:`~.conv` (Conv2d/Conv3d through img2col, ConvTranspose2d, grouped and depthwise, a
  per-channel epilogue, C04, strided reads);
* :mod:`~.epilogue`: both families' epilogue on a chip with no FixPipe (the 910, 310): the
  block tile through UB, the vector unit doing what FixPipe does elsewhere.

The teaching kernels the labs run, beside the real operators and simpler than them on purpose
(each says how), are :mod:`~.examples`: lab 03's row scale, lab 04's SiLU single and double
buffered, lab 06's img2col probe. :mod:`~.tiling_data` is what the tilings share (the cube
families' problem and TilingData, the tile rules, the capacity verdict).

:mod:`~.search` is the one tiling search every family uses (rank by estimate, simulate the best,
keep the fastest; the autotuner) and the one cache of the tilings npulab picks (in memory, and a
JSON file on disk). The functional API and the modules over these kernels are :mod:`npulab.ops`;
kernels never import it. The benchmarks are :mod:`npulab.bench`.
"""
