"""The ops-nn style kernel layer: one module per operator family, each operator a host tiling
function (a TilingData dataclass with its ``block_dim``) beside its kernel in the kernel
language (:mod:`npulab.lang`), as ops-nn keeps ``op_host`` tiling beside ``op_kernel``.

* ``elementwise`` (Add), ``broadcast`` (Add and Mul with broadcasting), ``activation`` (ReLU,
  GELU in its erf and tanh forms, SiLU), ``softmax`` (SoftmaxV2, any axis), ``norm``
  (LayerNorm, RMSNorm, BatchNorm inference), ``pooling`` (MaxPool2d, AvgPool2d, Pool+Scale):
  the vector unit;
* ``matmul`` with ``matmul_tiling`` (MatMul, BatchMatMul, MatMul+BiasAdd(+ReLU), int8) and
  ``conv`` with ``conv_tiling`` (Conv2d/Conv3d through img2col, ConvTranspose2d, depthwise,
  Conv+BN+ReLU fused in FixPipe): the cube; ``autotune`` searches matmul tilings;
* ``bench``, ``bench_vector``, ``bench_conv``: the rows of ``npulab bench kernels``.

The functional API and the modules over these kernels are :mod:`npulab.ops`; kernels never
import it.
"""
