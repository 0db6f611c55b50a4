"""ATC's ``--input_shape``: the shapes a model's inputs are compiled for, as the option spells
them: ``"input:1,3,224,224;mask:1,128"`` (name, a colon, the dims separated by commas; inputs
separated by semicolons)."""
from __future__ import annotations

from ...errors import ArgumentError

FORM = "name:d0,d1,...;name2:d0,..."


def parse_input_shape(spec) -> dict[str, tuple[int, ...]]:
    """``{input name: shape}`` from ATC's ``--input_shape`` spelling (a dict of shapes is passed
    through, checked). Bad spelling raises ArgumentError showing the expected form."""
    if isinstance(spec, dict):
        return {str(k): _dims(str(k), list(v), f"{k}: {v}") for k, v in spec.items()}
    if not isinstance(spec, str) or not spec.strip():
        raise ArgumentError(f"input_shape: got {spec!r}; expected a string of the form {FORM!r} "
                            f"(e.g. 'input:1,3,224,224;mask:1,128') or a dict of shapes")
    out: dict[str, tuple[int, ...]] = {}
    for part in spec.strip().strip(";").split(";"):
        name, sep, dims = part.strip().rpartition(":")
        if not sep or not name:
            raise ArgumentError(f"input_shape: {part!r} has no 'name:' before its dims; expected the form "
                                f"{FORM!r} (e.g. 'input:1,3,224,224;mask:1,128')")
        if name in out:
            raise ArgumentError(f"input_shape: input '{name}' is given twice in {spec!r}")
        out[name] = _dims(name, dims.split(","), part)
    return out


def _dims(name, dims, part) -> tuple[int, ...]:
    try:
        shape = tuple(int(str(d).strip()) for d in dims)
    except ValueError:
        shape = ()
    if not shape or any(d < 0 for d in shape):
        raise ArgumentError(f"input_shape: the dims of input '{name}' in {part!r} are not whole numbers >= 0 "
                            f"separated by commas; expected the form {FORM!r} (e.g. 'input:1,3,224,224')")
    return shape


__all__ = ["parse_input_shape"]
