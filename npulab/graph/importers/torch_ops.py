"""The ATen mappings of :mod:`npulab.graph.importers.torch`: one function per ATen op (or a
family of them), ``mapping(importer, fx node)``, registered in :data:`ATEN` by ``@aten(...)``.
Each emits the graph ops the op becomes (one to a few nodes) through the importer's ``emit``
and ``operand`` and returns its output value (or a list of them); a form of an op it does not
take raises ``_Unsupported``, reported with the other unsupported ops. The importer looks the
mappings up by op name in :data:`ATEN`.
"""
from __future__ import annotations

import numpy as np


#: aten op name (the overload packet, "add" for aten.add.Tensor) -> mapping(importer, fx node)
ATEN: dict = {}
#: ops with no value the graph needs (shape asserts)
IGNORED = ("_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async")
#: ops that keep their input's values: the output is the input itself, no node
ALIASES = ("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "dropout")
INT64_MAX = 2 ** 63 - 1


class _Unsupported(Exception):
    """Raised inside a mapping for a form of the op it does not take (a 3-D conv, a transposed
    conv, an index with a slice); reported with the other unsupported ops."""


def aten(*names):
    def deco(fn):
        for n in names:
            ATEN[n] = fn
        return fn
    return deco


def _dtype(torch_dtype) -> str:
    return str(torch_dtype).replace("torch.", "")


def _op_name(target) -> str:
    packet = getattr(target, "_overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(target, "__name__", str(target))


def _arg(fx, i, name, default=None):
    """Argument ``i`` (or keyword ``name``) of an FX node, or ``default``."""
    if len(fx.args) > i:
        return fx.args[i]
    return fx.kwargs.get(name, default)


def _out_dtype(im, fx) -> str:
    return _dtype(im.val(fx).dtype)


def _out_shape(im, fx) -> list:
    return [int(d) for d in im.val(fx).shape]


def _rank(im, arg) -> int:
    return len(im.val(arg).shape)


# -- convolution, norms, pools, matmul -------------------------------------------------------------
@aten("convolution", "conv2d")
def _conv(im, fx):
    x, w = fx.args[0], fx.args[1]
    b = _arg(fx, 2, "bias")
    if _op_name(fx.target) == "convolution":
        stride, padding, dilation, transposed, _, groups = fx.args[3:9]
        if transposed:
            raise _Unsupported("a transposed convolution")
    else:
        stride, padding, dilation, groups = (_arg(fx, 3, "stride", [1, 1]), _arg(fx, 4, "padding", [0, 0]),
                                             _arg(fx, 5, "dilation", [1, 1]), _arg(fx, 6, "groups", 1))
    if _rank(im, x) != 4:
        raise _Unsupported(f"a {_rank(im, x) - 2}-D convolution (the graph's Conv2D is 2-D)")
    if isinstance(padding, str):
        raise _Unsupported(f"padding={padding!r}")
    ins = [im.value(x), im.value(w)] + ([im.value(b)] if b is not None else [])
    return im.emit("Conv2D", ins, stride=list(stride), padding=list(padding), dilation=list(dilation),
                   groups=int(groups))


def _bn(im, x, w, b, mean, var, eps, outputs):
    ins = [im.value(x), im.value(mean), im.value(var)] + [im.value(v) for v in (w, b) if v is not None]
    y = im.emit("BatchNorm", ins, eps=float(eps), has_weight=w is not None, has_bias=b is not None)
    return (y,) + (None,) * (outputs - 1) if outputs > 1 else y


@aten("_native_batch_norm_legit_no_training")
def _bn_core(im, fx):
    x, w, b, mean, var, _, eps = fx.args[:7]
    return _bn(im, x, w, b, mean, var, eps, 3)


@aten("batch_norm")
def _bn_whole(im, fx):
    x, w, b, mean, var, training, _, eps = fx.args[:8]
    if training:
        raise _Unsupported("batch norm in training mode (export the module in eval mode)")
    return _bn(im, x, w, b, mean, var, eps, 1)


@aten("native_layer_norm", "layer_norm")
def _layer_norm(im, fx):
    x, shape = fx.args[0], fx.args[1]
    w, b = _arg(fx, 2, "weight"), _arg(fx, 3, "bias")
    eps = _arg(fx, 4, "eps", 1e-5)
    ins = [im.value(x), im.value(w) if w is not None else None, im.value(b) if b is not None else None]
    y = im.emit("LayerNorm", ins, normalized_shape=list(shape), eps=float(eps), has_weight=w is not None,
                has_bias=b is not None)
    return (y, None, None) if _op_name(fx.target) == "native_layer_norm" else y


@aten("max_pool2d_with_indices", "max_pool2d")
def _max_pool(im, fx):
    x, k = fx.args[0], fx.args[1]
    stride = _arg(fx, 2, "stride") or k
    y = im.emit("MaxPool", [im.value(x)], kernel_size=list(k), stride=list(stride),
                padding=list(_arg(fx, 3, "padding", [0, 0])), dilation=list(_arg(fx, 4, "dilation", [1, 1])),
                ceil_mode=bool(_arg(fx, 5, "ceil_mode", False)))
    return (y, None) if _op_name(fx.target) == "max_pool2d_with_indices" else y


@aten("avg_pool2d")
def _avg_pool(im, fx):
    x, k = fx.args[0], fx.args[1]
    if _arg(fx, 6, "divisor_override") is not None:
        raise _Unsupported("divisor_override")
    return im.emit("AvgPool", [im.value(x)], kernel_size=list(k), stride=list(_arg(fx, 2, "stride") or k),
                   padding=list(_arg(fx, 3, "padding", [0, 0])), ceil_mode=bool(_arg(fx, 4, "ceil_mode", False)),
                   count_include_pad=bool(_arg(fx, 5, "count_include_pad", True)))


def _squeezing_user(im, fx, axes):
    """The one FX user of a keep-dims reduction when it only drops the reduced axes (torch's
    ``flatten`` after ``adaptive_avg_pool2d``): then the reduction drops them itself."""
    users = list(fx.users)
    if len(users) != 1 or _op_name(users[0].target) not in ("view", "_unsafe_view", "reshape", "flatten",
                                                            "squeeze"):
        return None
    shape = list(im.val(fx.args[0]).shape)
    dropped = [int(d) for i, d in enumerate(shape) if i not in axes]
    return users[0] if _out_shape(im, users[0]) == dropped else None


def _reduce(im, fx, op_type, x, axes, keep):
    """A reduction over ``axes`` (all when empty), of the input cast to the output's dtype (a
    ``dtype=`` argument, or a bool sum's int64)."""
    rank = _rank(im, x)
    axes = sorted({a % rank for a in axes}) if axes else list(range(rank))
    v = im.operand(x, _out_dtype(im, fx))
    if keep:
        user = _squeezing_user(im, fx, axes)
        if user is not None:
            im.skip.add(user.name)
            y = im.emit(op_type, [v], axes=axes, keep_dims=False)
            im.env[user.name] = y
            return y
    return im.emit(op_type, [v], axes=axes, keep_dims=bool(keep))


@aten("adaptive_avg_pool2d", "_adaptive_avg_pool2d")
def _adaptive_avg(im, fx):
    x, size = fx.args[0], list(fx.args[1])
    h, w = im.val(x).shape[-2:]
    if size == [1, 1]:
        return _reduce(im, fx, "ReduceMean", x, [-2, -1], True)
    if h % size[0] or w % size[1]:
        raise _Unsupported(f"an output size {size} that does not divide the input's {h}x{w}")
    k = [int(h) // size[0], int(w) // size[1]]
    return im.emit("AvgPool", [im.value(x)], kernel_size=k, stride=k, padding=[0, 0])


@aten("mean", "sum", "amax")
def _reduce_op(im, fx):
    op_type = {"mean": "ReduceMean", "sum": "ReduceSum", "amax": "ReduceMax"}[_op_name(fx.target)]
    x = fx.args[0]
    axes = _arg(fx, 1, "dim") or []
    axes = [axes] if isinstance(axes, int) else list(axes)
    return _reduce(im, fx, op_type, x, axes, _arg(fx, 2, "keepdim", False))


@aten("linear")
def _linear(im, fx):
    x, w = fx.args[0], fx.args[1]
    b = _arg(fx, 2, "bias")
    ins = [im.value(x), im.value(w)] + ([im.value(b)] if b is not None else [])
    return im.emit("MatMul", ins, transpose_b=True)


@aten("addmm")
def _addmm(im, fx):
    bias, a, b = fx.args[:3]
    if _arg(fx, 3, "beta", 1) != 1 or _arg(fx, 4, "alpha", 1) != 1:
        raise _Unsupported("beta or alpha other than 1")
    n = int(im.val(b).shape[-1])
    if list(im.val(bias).shape) == [n]:
        return im.emit("MatMul", [im.value(a), im.value(b), im.value(bias)])
    y = im.emit("MatMul", [im.value(a), im.value(b)])
    return im.emit("Add", [y, im.value(bias)])


@aten("mm", "bmm", "matmul")
def _matmul(im, fx):
    a, b = fx.args[:2]
    ra, rb = _rank(im, a), _rank(im, b)
    va, vb = im.value(a), im.value(b)
    if ra == 1:
        va = im.emit("Unsqueeze", [va], axes=[0])
    if rb == 1:
        vb = im.emit("Unsqueeze", [vb], axes=[-1])
    y = im.emit("MatMul", [va, vb])
    if ra == 1 or rb == 1:
        y = im.emit("Reshape", [y], shape=_out_shape(im, fx))
    return y


# -- element-wise -------------------------------------------------------------------------------
_ARITH = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "RealDiv", "pow": "Pow", "maximum": "Maximum",
          "minimum": "Minimum", "rsub": "Sub"}
_COMPARE = {"eq": "Equal", "ne": "NotEqual", "lt": "Less", "le": "LessEqual", "gt": "Greater", "ge": "GreaterEqual"}
_LOGICAL = {"bitwise_and": "LogicalAnd", "logical_and": "LogicalAnd", "bitwise_or": "LogicalOr",
            "logical_or": "LogicalOr", "__and__": "LogicalAnd", "__or__": "LogicalOr"}
_UNARY = {"neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "rsqrt": "Rsqrt", "reciprocal": "Reciprocal",
          "abs": "Abs", "tanh": "Tanh", "sigmoid": "Sigmoid", "erf": "Erf", "relu": "Relu", "relu_": "Relu",
          "silu": "Swish", "logical_not": "LogicalNot", "bitwise_not": "LogicalNot"}


def _meta(im, arg):
    """A meta tensor standing for an operand (a Python number as itself), for torch's promotion."""
    import torch
    if hasattr(arg, "name"):
        t = im.val(arg)
        return torch.empty(tuple(t.shape), dtype=t.dtype, device="meta")
    return arg


@aten(*_ARITH)
def _arith(im, fx):
    name = _op_name(fx.target)
    a, b = fx.args[:2]
    if name == "rsub":
        a, b = b, a
    if name == "div" and fx.kwargs.get("rounding_mode") is not None:
        raise _Unsupported(f"rounding_mode={fx.kwargs['rounding_mode']!r}")
    dtype = _out_dtype(im, fx)
    alpha = fx.kwargs.get("alpha", _arg(fx, 2, "alpha", 1) if name in ("add", "sub", "rsub") else 1)
    vb = im.operand(b, dtype)
    if alpha != 1:
        vb = im.emit("Mul", [vb, im.scalar(alpha, dtype)])
    return im.emit(_ARITH[name], [im.operand(a, dtype), vb])


@aten(*_COMPARE)
def _compare(im, fx):
    import torch
    a, b = fx.args[:2]
    dtype = _dtype(torch.result_type(_meta(im, a), _meta(im, b)))
    return im.emit(_COMPARE[_op_name(fx.target)], [im.operand(a, dtype), im.operand(b, dtype)])


@aten(*_LOGICAL)
def _logical(im, fx):
    a, b = fx.args[:2]
    if _out_dtype(im, fx) != "bool":
        raise _Unsupported("a bitwise op on integers (the graph's logical ops take bool)")
    return im.emit(_LOGICAL[_op_name(fx.target)], [im.operand(a, "bool"), im.operand(b, "bool")])


@aten(*_UNARY)
def _unary(im, fx):
    op_type = _UNARY[_op_name(fx.target)]
    if op_type == "LogicalNot" and _out_dtype(im, fx) != "bool":
        raise _Unsupported("a bitwise not on integers")
    return im.emit(op_type, [im.operand(fx.args[0], _out_dtype(im, fx))])


@aten("gelu")
def _gelu(im, fx):
    return im.emit("Gelu", [im.value(fx.args[0])], approximate=fx.kwargs.get("approximate", _arg(fx, 1, "approximate",
                                                                                                  "none")))


@aten("_softmax", "softmax")
def _softmax(im, fx):
    x, dim = fx.args[:2]
    if _out_dtype(im, fx) != _dtype(im.val(x).dtype):
        raise _Unsupported("a softmax that changes the dtype")
    return im.emit("SoftmaxV2", [im.value(x)], dim=int(dim) % _rank(im, x))


@aten("clamp")
def _clamp(im, fx):
    x = fx.args[0]
    lo, hi = _arg(fx, 1, "min"), _arg(fx, 2, "max")
    dtype = _out_dtype(im, fx)
    y = im.operand(x, dtype)
    if lo is not None:
        y = im.emit("Maximum", [y, im.operand(lo, dtype)])
    if hi is not None:
        y = im.emit("Minimum", [y, im.operand(hi, dtype)])
    return y


@aten("where")
def _where(im, fx):
    cond, a, b = fx.args[:3]
    dtype = _out_dtype(im, fx)
    return im.emit("Select", [im.operand(cond, "bool"), im.operand(a, dtype), im.operand(b, dtype)])


@aten("masked_fill")
def _masked_fill(im, fx):
    x, mask, value = fx.args[:3]
    dtype = _out_dtype(im, fx)
    fill = im.operand(value, dtype) if hasattr(value, "name") else im.scalar(value, dtype)
    return im.emit("Select", [im.operand(mask, "bool"), fill, im.value(x)])


# -- data ---------------------------------------------------------------------------------------------
@aten("view", "_unsafe_view", "reshape", "flatten", "view_as", "reshape_as")
def _view(im, fx):
    return im.emit("Reshape", [im.value(fx.args[0])], shape=_out_shape(im, fx))


@aten("permute")
def _permute(im, fx):
    rank = _rank(im, fx.args[0])
    return im.emit("Transpose", [im.value(fx.args[0])], perm=[int(p) % rank for p in fx.args[1]])


@aten("transpose", "t")
def _transpose(im, fx):
    rank = _rank(im, fx.args[0])
    perm = list(range(rank))
    if rank >= 2:
        d0, d1 = (fx.args[1] % rank, fx.args[2] % rank) if len(fx.args) > 2 else (0, 1)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return im.emit("Transpose", [im.value(fx.args[0])], perm=perm)


@aten("expand", "expand_as")
def _expand(im, fx):
    return im.emit("Expand", [im.value(fx.args[0])], shape=_out_shape(im, fx))


@aten("slice")
def _slice(im, fx):
    x = fx.args[0]
    dim = _arg(fx, 1, "dim", 0) % _rank(im, x)
    n = int(im.val(x).shape[dim])
    start, end, step = _arg(fx, 2, "start") or 0, _arg(fx, 3, "end"), _arg(fx, 4, "step", 1)
    end = n if end is None or end >= INT64_MAX or end > n else end
    return im.emit("Slice", [im.value(x)], starts=[int(start)], ends=[int(end)], axes=[dim], steps=[int(step)])


@aten("select")
def _select(im, fx):
    x, dim, index = fx.args[:3]
    dim %= _rank(im, x)
    index %= int(im.val(x).shape[dim])
    y = im.emit("Slice", [im.value(x)], starts=[int(index)], ends=[int(index) + 1], axes=[dim], steps=[1])
    return im.emit("Squeeze", [y], axes=[dim])


@aten("unsqueeze")
def _unsqueeze(im, fx):
    return im.emit("Unsqueeze", [im.value(fx.args[0])], axes=[int(fx.args[1]) % _rank(im, fx)])


@aten("squeeze")
def _squeeze(im, fx):
    return im.emit("Reshape", [im.value(fx.args[0])], shape=_out_shape(im, fx))


@aten("cat", "concat")
def _cat(im, fx):
    tensors = fx.args[0]
    dim = _arg(fx, 1, "dim", 0) % _rank(im, fx)
    dtype = _out_dtype(im, fx)
    return im.emit("Concat", [im.operand(t, dtype) for t in tensors if im.val(t).numel() or len(tensors) == 1],
                   axis=dim)


@aten("split", "split_with_sizes")
def _split(im, fx):
    x, sizes = fx.args[:2]
    dim = _arg(fx, 2, "dim", 0) % _rank(im, x)
    parts = [int(t.shape[dim]) for t in im.val(fx)]
    outs = im.emit("Split", [im.value(x)], outputs=len(parts), axis=dim, sizes=parts)
    return tuple(outs) if isinstance(outs, list) else (outs,)


@aten(*ALIASES)
def _alias(im, fx):
    if _op_name(fx.target) == "dropout" and _arg(fx, 2, "train", False):
        raise _Unsupported("dropout in training mode")
    return im.value(fx.args[0])


@aten("to", "_to_copy")
def _cast(im, fx):
    src, dst = _dtype(im.val(fx.args[0]).dtype), _out_dtype(im, fx)
    v = im.value(fx.args[0])
    return v if src == dst else im.emit("Cast", [v], dtype=dst)


@aten("embedding")
def _embedding(im, fx):
    return im.emit("GatherV2", [im.value(fx.args[0]), im.value(fx.args[1])], axis=0)


def _flat_gather(im, x, terms):
    """``x`` gathered at a linear index: its first ``len(terms)`` axes flattened into one, each
    term an int64 index value along one of them (broadcast against the others), added up with
    its axis's stride. torch's advanced indexing and ``gather`` are both this GatherV2."""
    shape = [int(d) for d in im.val(x).shape]
    k = len(terms)
    strides = [int(np.prod(shape[i + 1:k], dtype=np.int64)) for i in range(k)]
    flat = im.emit("Reshape", [im.value(x)], shape=[int(np.prod(shape[:k], dtype=np.int64))] + shape[k:])
    index = None
    for term, stride in zip(terms, strides):
        if stride != 1:
            term = im.emit("Mul", [term, im.scalar(stride, "int64")])
        index = term if index is None else im.emit("Add", [index, term])
    return im.emit("GatherV2", [flat, index], axis=0)


@aten("index")
def _index(im, fx):
    x, indices = fx.args[:2]
    if any(i is None for i in indices):
        raise _Unsupported("an index with a slice (None) among the index tensors")
    if any(_dtype(im.val(i).dtype) not in ("int64", "int32") for i in indices):
        raise _Unsupported("a boolean mask index")
    return _flat_gather(im, x, [im.operand(i, "int64") for i in indices])


@aten("gather")
def _gather(im, fx):
    x, dim, index = fx.args[:3]
    rank = _rank(im, x)
    dim %= rank
    shape = _out_shape(im, fx)
    terms = []
    for a in range(rank):
        if a == dim:
            terms.append(im.operand(index, "int64"))
        else:                              # the position along axis a, broadcast over the others
            r = im.emit("Range", [], start=0, limit=shape[a], delta=1, dtype="int64")
            terms.append(im.emit("Reshape", [r], shape=[shape[a] if i == a else 1 for i in range(rank)]))
    if any(int(im.val(x).shape[a]) != shape[a] for a in range(rank) if a != dim):
        raise _Unsupported("an index smaller than the input along an axis other than dim")
    return _flat_gather(im, x, terms)


@aten("arange")
def _arange(im, fx):
    nums = [a for a in fx.args if not hasattr(a, "name")]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (nums[0], nums[1], nums[2] if len(nums) > 2 else 1)
    return im.emit("Range", [], start=start, limit=end, delta=step, dtype=_out_dtype(im, fx))


def _fill(im, fx, value):
    if hasattr(value, "name"):
        raise _Unsupported("a fill value computed by the graph")
    dtype = _out_dtype(im, fx)
    value = bool(value) if dtype == "bool" else float(value) if "float" in dtype else int(value)
    return im.emit("Fill", [], shape=_out_shape(im, fx), value=value, dtype=dtype)


@aten("full", "full_like", "new_full")
def _full(im, fx):
    return _fill(im, fx, fx.args[1] if _op_name(fx.target) != "new_full" else fx.args[2])


@aten("ones", "ones_like", "new_ones", "zeros", "zeros_like", "new_zeros", "scalar_tensor")
def _const_fill(im, fx):
    name = _op_name(fx.target)
    return _fill(im, fx, fx.args[0] if name == "scalar_tensor" else 1 if "ones" in name else 0)


@aten("cumsum")
def _cumsum(im, fx):
    x, dim = fx.args[:2]
    dtype = _out_dtype(im, fx)
    return im.emit("Cumsum", [im.operand(x, dtype)], axis=int(dim) % max(_rank(im, x), 1))


__all__ = ["ATEN", "IGNORED", "ALIASES", "aten"]
