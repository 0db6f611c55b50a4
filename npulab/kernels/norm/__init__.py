"""The norm family on the vector unit, one operator a module (as ops-nn's ``norm/``):
LayerNorm and RMSNorm (row kernels, :mod:`npulab.kernels.rows`) and BatchNorm (inference)."""
from .batch_norm import BatchNormTiling, KernelBatchNorm, batch_norm_kernel, batch_norm_tiling, launch_batch_norm
from .layer_norm import KernelLayerNorm, check_layer_norm, launch_layer_norm, layer_norm_kernel, layer_norm_tiling
from .rms_norm import KernelRmsNorm, launch_rms_norm, rms_norm_kernel, rms_norm_tiling

__all__ = ["KernelLayerNorm", "layer_norm_kernel", "layer_norm_tiling", "check_layer_norm", "launch_layer_norm",
           "KernelRmsNorm", "rms_norm_kernel", "rms_norm_tiling", "launch_rms_norm", "BatchNormTiling",
           "batch_norm_tiling", "KernelBatchNorm", "batch_norm_kernel", "launch_batch_norm"]
