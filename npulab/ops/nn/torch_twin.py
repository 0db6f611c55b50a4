"""The torch twin import: what ``from_torch`` does with a torch.nn module, and the one place
torch is imported.

A module is built from its twin in three steps: :func:`_expect_torch` checks the twin is an
instance of the torch.nn class of the module's name, the class takes the twin's attributes, and
:func:`_copy_weights` copies its tensors (through :func:`_as_numpy`, so a module never shares
memory with the tensor it came from). :func:`_check_batch_norm` says which torch BatchNorm2d
npulab can copy. ``_MODULES`` names the modules ``from_torch`` knows, by their twin's class
name; the package fills it once every family is imported.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError

# the modules from_torch knows by their torch twin's class name (filled by npulab.ops.nn)
_MODULES: dict[str, type] = {}


def _as_numpy(t, dtype) -> np.ndarray | None:
    """A torch tensor (or array, or None) as a numpy array of ``dtype``, copied: a module never
    shares memory with the tensor it came from."""
    if t is None:
        return None
    if hasattr(t, "detach"):
        t = t.detach().cpu().numpy()
    return np.array(t, dtype=dtype)


def _expect_torch(module, who: str) -> None:
    """``module`` must be an instance of torch.nn.<who>; the error names what came instead and,
    when npulab has a module of that name, which from_torch takes it."""
    import torch
    twin = getattr(torch.nn, who, None)
    if twin is None:
        raise ShapeError(f"{who}.from_torch: torch.nn has no {who}, so there is nothing to copy "
                         f"from (a torch.nn.Linear goes to npulab.ops.nn.Linear.from_torch)")
    if isinstance(module, twin):
        return
    got = type(module).__name__
    if got in _MODULES:
        hint = f"; for a torch.nn.{got} use npulab.ops.nn.{got}.from_torch"
    else:
        hint = f"; npulab has no {got} module"
    raise ShapeError(f"{who}.from_torch: expects a torch.nn.{who}, got {got}{hint}")


def _copy_weights(m, torch_module, names, who: str) -> None:
    """Set ``m``'s (a :class:`~npulab.ops.nn.Module`) parameters ``names`` to copies of the
    torch module's, in ``m.dtype``; the one place weights cross from torch."""
    if m.dtype.kind != "f":
        raise ShapeError(f"{who}.from_torch: copies float weights, so dtype must be float16 or "
                         f"float32, got {m.dtype}; quantise to int8 yourself")
    for name in names:
        new = _as_numpy(getattr(torch_module, name, None), m.dtype)
        old = getattr(m, name, None)
        if (new is None) != (old is None) or (new is not None and new.shape != old.shape):
            raise ShapeError(f"{who}.from_torch: {name} of the torch module is "
                             f"{None if new is None else new.shape}, expected "
                             f"{None if old is None else old.shape}")
        setattr(m, name, new)


def _check_batch_norm(bn, who: str, channels: int | None = None) -> None:
    """A torch BatchNorm2d npulab can copy: one with running statistics (npulab's BatchNorm is
    inference only) and, fused into a conv, one value per conv output channel."""
    import torch
    if not isinstance(bn, torch.nn.BatchNorm2d):
        raise ShapeError(f"{who}.from_torch: bn must be a torch.nn.BatchNorm2d, got {type(bn).__name__}")
    if bn.running_mean is None or bn.running_var is None:
        raise ShapeError(f"{who}.from_torch: the BatchNorm2d has no running statistics "
                         f"(track_running_stats=False); npulab's BatchNorm is inference only and "
                         f"normalises with running_mean and running_var. Build it with "
                         f"track_running_stats=True and train or load its statistics")
    if channels is not None and bn.num_features != channels:
        raise ShapeError(f"{who}.from_torch: the BatchNorm2d has {bn.num_features} features and the "
                         f"conv {channels} output channels; they must be equal (BN follows the conv)")
