"""Torch-style modules over the functional operators: ``npulab.ops.nn.Conv2d(...)(x)``.

Each module holds its parameters as numpy arrays, runs on the simulated NPU when called, and
keeps the Trace of its last call in ``last_trace``. Every module whose class torch.nn also has
(Conv2d, Conv3d, ConvTranspose2d, Linear, BatchNorm2d, LayerNorm, RMSNorm, ReLU, GELU, SiLU,
Softmax, MaxPool2d, AvgPool2d, Sequential) builds from its torch twin with
``Module.from_torch(torch_module)``, which takes the twin's attributes and copies its weights
(torch is optional: only that method imports it). That is the flow the seeds show: build a
model in PyTorch, swap its Conv2d + BatchNorm2d + ReLU for one fused
``Conv2d.from_torch(conv, bn, relu=True)``, and get the same outputs.

Constructors take torch's arguments in torch's order. Parameters are initialised as PyTorch
does (uniform in +-1/sqrt(fan_in)), from a seeded generator so that two runs give the same
module. An int8 module gets the same draw scaled to the int8 range and rounded,
round(u / bound * 127), so its weights spread over -127..127 (a symmetric quantisation of the
float draw with scale bound / 127); its bias, added in the int32 accumulator, is the same
scaled draw as int32.

=================  ==============================================================================
module             holds
=================  ==============================================================================
``module``         :class:`Module`, the base, and the parameter initialisation
``torch_twin``     the torch twin import behind ``from_torch``: type check, weight copy
``conv``           :class:`Conv2d` (and the fused Conv + BN + ReLU), :class:`Conv3d`,
                   :class:`ConvTranspose2d`
``linear``         :class:`Linear`, :class:`MatMul`, :class:`BatchMatMul`
``normalization``  :class:`BatchNorm2d`, :class:`LayerNorm`, :class:`RMSNorm`
``activation``     :class:`ReLU`, :class:`SiLU`, :class:`GELU`, :class:`Softmax`
``pooling``        :class:`MaxPool2d`, :class:`AvgPool2d`
``container``      :class:`Sequential`
``keras``          :func:`Conv2D`, the Keras-style alias of Conv2d
=================  ==============================================================================
"""
from __future__ import annotations

from .activation import GELU, ReLU, SiLU, Softmax
from .container import Sequential
from .conv import Conv2d, Conv3d, ConvTranspose2d
from .keras import Conv2D
from .linear import BatchMatMul, Linear, MatMul
from .module import INT8_MAX, Module
from .normalization import BatchNorm2d, LayerNorm, RMSNorm
from .pooling import AvgPool2d, MaxPool2d
from .torch_twin import _MODULES

__all__ = ["Module", "Conv2d", "Conv3d", "ConvTranspose2d", "Linear", "MatMul", "BatchMatMul",
           "BatchNorm2d", "LayerNorm", "RMSNorm", "ReLU", "GELU", "SiLU", "Softmax", "MaxPool2d",
           "AvgPool2d", "Sequential", "Conv2D"]

# the modules from_torch knows by their torch twin's class name
_MODULES.update({c.__name__: c for c in (Conv2d, Conv3d, ConvTranspose2d, Linear, BatchNorm2d, LayerNorm,
                                         RMSNorm, ReLU, GELU, SiLU, Softmax, MaxPool2d, AvgPool2d, Sequential)})
