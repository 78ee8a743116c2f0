"""Pure: where the profiled step's time goes, kind of operation by kind, against this machine's roofs.

    ops = [OpEvent(...), ...]                       measure/op_events.py reads them off the profiler
    kind_of(op), min_bytes(op), output_shapes(op)   one op: its kind, its minimum traffic, its outputs
    roofline(ops, step_time_s=..., ...)             -> results.json's roofline: the table, verdict, ceiling
    kind_deltas(a, b)                               B - A per kind of two runs' rooflines (compare)

The roofline model (Williams, Waterman and Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 52(4), 2009): an op doing F FLOPs over B bytes of memory traffic has the
arithmetic intensity I = F / B; on a machine with compute roof P (FLOP/s) and memory roof M (bytes/s) it can
run at most at min(P, I x M). Below the ridge point I = P / M it is memory-bound, above it compute-bound, and
its achieved rate over that bound is the fraction of the roof it reaches: what is left to gain.

Bytes are the *minimum* traffic: every tensor input read once and every output written once, from the
shapes and dtypes the profiler recorded (weights are inputs); an op that re-reads its input (a batch norm's
two passes, a convolution's im2col) moves more. FLOPs are the validated counter's (measure/flops.py:
torch's flop_registry for convolutions, matmuls and attention, effbench's grouped-conv backward); other ops
count 0 FLOPs, so their intensity is 0 and their roof is the memory roof. No torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from effbench import schema

CONV = "convolution"
DEPTHWISE = "depthwise/grouped conv"
MATMUL = "matmul/linear"
BATCH_NORM = "batch norm"
OTHER_NORM = "layer/group norm"
ACTIVATION = "activation"
ELEMENTWISE = "elementwise"
POOLING = "pooling"
REDUCTION = "reduction/loss"
OPTIMIZER = "optimizer step"
COPY = "copies and casts"
COMMUNICATION = "communication"
FUSED = "compiled (fused)"
UNMODELLED = "not modelled"
"""Ops effbench has no FLOP or byte model for (an LSTM, an upsample, an embedding): named in the record's
unmodelled_ops, held against no roof, their work in no FLOP count beyond what their callees' formulas count."""
OTHER = "other"
"""Views, allocations and metadata: ops that move no data (_NO_TRAFFIC)."""
KINDS = (CONV, DEPTHWISE, MATMUL, BATCH_NORM, OTHER_NORM, ACTIVATION, ELEMENTWISE, POOLING, REDUCTION, OPTIMIZER,
         COPY, COMMUNICATION, FUSED, UNMODELLED, OTHER)  # fmt: skip
NO_ROOF = (COMMUNICATION, FUSED, UNMODELLED, OTHER)
"""Kinds held against no roof: network time, generated kernels whose traffic the profiler does not record,
ops with no model, and views / allocations (no traffic claimed). The ceiling keeps their measured time."""
MAX_UNMODELLED_OPS = 20
"""The record names at most this many ops not modelled, the largest; the kind's row holds all their time."""
DATA_WAIT = "data wait"
OUTSIDE_OPS = "outside ops"
"""The table's two rows that are no kind: waiting for the loader, and the step's time in no op."""

# The profiler's own dtype names (FunctionEvent.input_dtypes: c10's ScalarType as C++ spells it) -> bytes.
DTYPE_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8, "int": 4,
    "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
    "c10::complex<double>": 16, "c10::complex<c10::Half>": 4, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "unsigned short": 2, "unsigned int": 4, "unsigned long": 8,
}  # fmt: skip
TENSOR_LIST = "TensorList"
TENSOR_LIST_ELEMENT_BYTES = 4
"""A tensor list's dtype is not recorded (only "TensorList"): its tensors count as fp32, which parameters,
gradients and optimizer state are under autocast."""
# c10's ScalarType codes (c10/core/ScalarType.h, AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS order) -> bytes:
# a cast's target dtype is recorded as its code (`x.to(torch.bfloat16)` records 15).
SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 8: 4, 9: 8, 10: 16, 11: 1, 15: 2, 23: 1, 24: 1}


@dataclass(frozen=True)
class OpEvent:
    """One op the profiled steps ran at the top of an op tree (its callees are inside it), with the time
    charged to it over all the profiled steps: the device time of the kernels it and its callees launched
    (CUDA), or their self CPU time (CPU). Identical calls (same name, inputs and phase) are one event."""

    name: str
    """The profiler's name, "aten::conv2d"."""
    time_s: float
    calls: int = 1
    shapes: tuple[Any, ...] = ()
    """Each input's shape as recorded (a list of ints; a list of shapes for a tensor list; [] for a scalar)."""
    dtypes: tuple[str, ...] = ()
    """Each input's dtype as recorded ("float", "c10::BFloat16", "TensorList", "Scalar", "")."""
    args: tuple[Any, ...] = ()
    """Each input's concrete value where it is not a tensor (stride, groups, dim ...), else None."""
    flops: float = 0.0
    """FLOPs of one call (the validated counter's formulas over its callees)."""
    phase: str | None = None
    """The step's phase its call started in (measure/profiling.py PHASES), if any."""
    callees: frozenset[str] = field(default_factory=frozenset)
    """Names of the ops it called: a cast or a reshape moves data only when a copy is among them."""


def base_name(name: str) -> str:
    """ "aten::conv2d" -> "conv2d"; other namespaces keep theirs."""
    return name[len("aten::") :] if name.startswith("aten::") else name


_CONV = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "cudnn_convolution", "mkldnn_convolution",
         "thnn_conv2d", "_slow_conv2d_forward", "convolution_overrideable", "conv_transpose1d", "conv_transpose2d",
         "conv_transpose3d", "cudnn_convolution_transpose", "convolution_backward", "convolution_backward_overrideable",
         "cudnn_convolution_backward", "mkldnn_convolution_backward", "_slow_conv2d_backward", "_nnpack_spatial_convolution",
         "miopen_convolution", "_conv_depthwise2d", "conv_depthwise3d", "miopen_depthwise_convolution"}  # fmt: skip
_ALWAYS_DEPTHWISE = {"_conv_depthwise2d", "conv_depthwise3d", "miopen_depthwise_convolution"}
# The `groups` argument's position in each convolution's schema (native_functions.yaml): conv2d(input, weight,
# bias, stride, padding, dilation, groups); convolution(input, weight, bias, stride, padding, dilation, transposed,
# output_padding, groups); convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
# transposed, output_padding, groups, output_mask); conv_transpose2d(input, weight, bias, stride, padding,
# output_padding, groups, dilation); mkldnn_convolution(self, weight, bias, padding, stride, dilation, groups);
# cudnn_convolution(self, weight, padding, stride, dilation, groups, ...).
_GROUPS_ARG = {"conv1d": 6, "conv2d": 6, "conv3d": 6, "convolution": 8, "_convolution": 8, "convolution_overrideable": 8,
               "convolution_backward": 9, "convolution_backward_overrideable": 9, "conv_transpose1d": 6,
               "conv_transpose2d": 6, "conv_transpose3d": 6, "mkldnn_convolution": 6, "cudnn_convolution": 5}  # fmt: skip
_MATMUL = {"linear", "addmm", "mm", "bmm", "baddbmm", "matmul", "addbmm", "addmv", "mv", "dot", "_addmm_activation",
           "einsum", "bilinear", "_scaled_mm", "mkldnn_linear", "linear_backward", "_int_mm"}  # fmt: skip
_ACTIVATION = {"relu", "silu", "gelu", "sigmoid", "hardswish", "hardsigmoid", "tanh", "leaky_relu", "elu", "selu",
               "celu", "mish", "softplus", "relu6", "hardtanh", "prelu", "_prelu_kernel", "threshold", "glu",
               "log_sigmoid", "log_sigmoid_forward", "rrelu", "softshrink", "hardshrink", "logit"}  # fmt: skip
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "norm", "linalg_vector_norm",
              "var", "std", "var_mean", "std_mean", "logsumexp", "cumsum", "all", "any", "softmax", "_softmax",
              "log_softmax", "_log_softmax", "cross_entropy_loss", "nll_loss", "nll_loss_nd", "nll_loss_forward",
              "nll_loss2d", "nll_loss2d_forward", "topk", "sort", "_softmax_backward_data",
              "_log_softmax_backward_data", "count_nonzero", "aminmax"}  # fmt: skip
_COPY = {"_to_copy", "copy_", "clone", "_copy_from", "_copy_from_and_resize", "cat", "_cat", "stack", "constant_pad_nd",
         "pad", "reflection_pad2d", "replication_pad2d", "index_select", "gather", "scatter", "flip", "roll", "repeat",
         "pin_memory", "_pin_memory", "lift_fresh_copy", "index", "index_put_", "masked_select", "narrow_copy",
         "_unsafe_index", "take"}  # fmt: skip
_MAYBE_COPY = {"to", "contiguous", "reshape", "flatten", "type_as", "_reshape_copy", "view_as_real", "unflatten"}
"""Ops that copy only when a layout or dtype change needs one: a copy among their callees says so."""
_WRITE_ONLY = {"copy_", "_copy_from", "fill_", "zero_", "uniform_", "normal_", "random_", "exponential_"}
"""In-place ops that write self without reading it."""
_COPY_CALLEES = {"aten::_to_copy", "aten::copy_", "aten::clone", "aten::_copy_from", "aten::_copy_from_and_resize"}
_ELEMENTWISE = {"add", "sub", "mul", "div", "neg", "abs", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log1p",
                "log2", "pow", "reciprocal", "addcmul", "addcdiv", "lerp", "where", "masked_fill", "fill", "zero",
                "zeros", "ones", "zeros_like", "ones_like", "full", "full_like", "eq", "ne", "lt", "le", "gt", "ge",
                "new_zeros", "new_ones", "new_full",
                "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "clip", "sign", "sgn", "floor", "ceil",
                "round", "trunc", "frac", "bernoulli", "dropout", "native_dropout", "native_dropout_backward",
                "feature_dropout", "alpha_dropout", "rand", "randn", "rand_like", "randn_like", "randint", "uniform",
                "normal", "exponential", "erf", "erfc", "erfinv", "sin", "cos", "tan", "atan", "atan2", "asin",
                "acos", "sinh", "cosh", "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and",
                "bitwise_or", "bitwise_not", "bitwise_xor", "remainder", "fmod", "rsub", "square", "nan_to_num",
                "isnan", "isinf", "isfinite", "xlogy", "scalar_tensor", "true_divide", "floor_divide", "hypot",
                "_masked_scale", "arange", "linspace", "mul_scalar", "sigmoid_backward_elementwise"}  # fmt: skip
_NO_TRAFFIC = {
    # views: every aten op whose schema returns only aliases of its inputs, read off torch 2.14's schemas
    "__getitem__", "_autocast_to_full_precision", "_autocast_to_reduced_precision", "_conj", "_fw_primal",
    "_grad_sum_to_size", "_indices", "_make_dual", "_ncf_unsqueeze", "_ncf_view", "_neg_view", "_nested_get_values",
    "_nested_view_from_buffer", "_nested_view_from_jagged", "_reshape_alias", "_sparse_broadcast_to",
    "_unwrap_optional", "_values", "adjoint", "alias", "as_strided", "as_tensor", "broadcast_to", "ccol_indices",
    "chunk", "coalesce", "col_indices", "conj", "contiguous", "cpu", "crow_indices", "cuda", "detach", "diagonal",
    "dsplit", "expand", "expand_as", "flatten", "get", "hsplit", "imag", "indices", "keys", "lift_fresh",
    "linalg_diagonal", "local_value", "mH", "mT", "matrix_H", "moveaxis", "movedim", "narrow", "numpy_T", "permute",
    "pop", "positive", "ravel", "real", "reshape", "reshape_as", "resolve_conj", "resolve_neg", "row_indices",
    "select", "setdefault", "slice", "slice_inverse", "split", "split_with_sizes", "squeeze", "swapaxes", "swapdims",
    "t", "tensor_split", "to", "to_here", "transpose", "unbind", "unflatten", "unfold", "unsqueeze", "values", "view",
    "view_as", "view_as_complex", "view_as_real", "vsplit",
    # views whose schema says a new tensor, and in-place views (metadata only)
    "_unsafe_view", "broadcast_tensors", "meshgrid", "atleast_1d", "atleast_2d", "atleast_3d", "lift", "unsafe_split",
    "unsafe_chunk", "unsafe_split_with_sizes", "as_strided_", "detach_", "squeeze_", "unsqueeze_", "transpose_", "t_",
    # allocations (no data written) and metadata
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "resize_as_", "set_",
    "_empty_affine_quantized", "size", "stride", "numel", "dim", "sym_size", "sym_stride", "sym_numel",
    "is_contiguous", "is_same_size", "result_type", "item", "_local_scalar_dense", "is_nonzero", "requires_grad_",
    "retain_grad", "output_nr", "_version", "record_stream", "_has_compatible_shallow_copy_type", "_assert_async",
}  # fmt: skip
"""Ops that move no data: views, allocations, metadata (the "other" kind); any op in no kind and not here is not
modelled (UNMODELLED)."""
_COMM_WORDS = ("allreduce", "all_reduce", "broadcast", "all_gather", "allgather", "reduce_scatter", "reducescatter",
               "all_to_all", "alltoall", "record_param_comms", "barrier")  # fmt: skip
_COMM_PREFIXES = ("c10d::", "_c10d_functional::", "c10d_functional::", "nccl:", "gloo:", "ProcessGroup")
FUSED_MARKERS = ("Torch-Compiled Region", "CompiledFunction", "CompiledFxGraph", "triton_", "inductor")
"""Names of the ranges torch.compile's generated code runs under: time there in no aten op is its fused kernels'."""


def _stem(base: str) -> str:
    """The op's family: "relu_" -> "relu", "silu_backward" -> "silu", "_log_softmax_backward_data" stays."""
    for suffix in ("_backward", "_forward"):
        if base.endswith(suffix) and base[: -len(suffix)]:
            return base[: -len(suffix)].rstrip("_")
    return base.rstrip("_") if not base.startswith("__") else base


def is_communication(name: str) -> bool:
    """c10d's ops and the backends' collectives ("nccl:all_reduce", "gloo:all_reduce"); no aten op is one
    (aten::broadcast_tensors is not a collective)."""
    if name.startswith(_COMM_PREFIXES):
        return True
    return not name.startswith("aten::") and any(w in name.lower() for w in _COMM_WORDS)


def is_fused(name: str) -> bool:
    return any(m in name for m in FUSED_MARKERS)


def conv_groups(op: OpEvent) -> int | None:
    """A convolution's groups: its argument where the schema has one, else from the shapes (input channels
    over the weight's second dimension, for a forward or a backward that names both)."""
    base = base_name(op.name)
    i = _GROUPS_ARG.get(base)
    if i is not None and i < len(op.args) and isinstance(op.args[i], int) and not isinstance(op.args[i], bool):
        return int(op.args[i])
    x_i, w_i = (1, 2) if base.startswith("convolution_backward") else (0, 1)
    x, w = _shape(op, x_i), _shape(op, w_i)
    if x and w and len(x) >= 2 and len(w) >= 2 and w[1] > 0 and not _transposed(op):
        return max(1, x[1] // w[1])
    return None


def kind_of(op: OpEvent) -> str:
    """The op's kind (KINDS): by its name and, for a convolution, its groups; an op of the optimizer phase is
    the optimizer step and one of the host-to-device phase a copy, whatever its name. An op of no kind is other
    when it moves no data (a view, an allocation: _NO_TRAFFIC), else not modelled (UNMODELLED)."""
    name = op.name
    base = base_name(name)
    if is_communication(name):
        return COMMUNICATION
    if is_fused(name):
        return FUSED
    if op.phase == "optimizer" or base.startswith(("_foreach_", "_fused_", "_amp_")):
        return OPTIMIZER
    if op.phase == "h2d_copy":
        return COPY
    stem = _stem(base)
    if base in _CONV or stem in _CONV:
        groups = conv_groups(op)
        return DEPTHWISE if base in _ALWAYS_DEPTHWISE or (groups is not None and groups > 1) else CONV
    if base in _MATMUL or stem in _MATMUL or "attention" in base:
        return MATMUL
    if "batch_norm" in base:
        return BATCH_NORM
    if any(n in base for n in ("layer_norm", "group_norm", "instance_norm", "rms_norm")):
        return OTHER_NORM
    if stem in _ACTIVATION or base == "threshold_backward":
        return ACTIVATION
    if "pool" in base:
        return POOLING
    if base in _REDUCTION or stem in _REDUCTION or "loss" in base:
        return REDUCTION
    return _data_kind(op, base, stem)


def _data_kind(op: OpEvent, base: str, stem: str) -> str:
    """An op of no compute kind: a copy, an element-wise op, one that moves no data (other), else not modelled."""
    if base in _COPY:
        return COPY
    if base in _MAYBE_COPY:
        return COPY if op.callees & _COPY_CALLEES else OTHER
    if stem in _ELEMENTWISE:
        return ELEMENTWISE
    if base in _NO_TRAFFIC or (base.endswith("_") and base[:-1] in _NO_TRAFFIC):
        return OTHER
    return UNMODELLED


# --------------------------------------------------------------------------------------------------
# Shapes and bytes
# --------------------------------------------------------------------------------------------------
def _is_shape(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in x)


def _shape(op: OpEvent, i: int) -> list[int] | None:
    """Input i's shape when it is a tensor."""
    if i >= len(op.shapes) or i >= len(op.dtypes) or op.dtypes[i] not in DTYPE_BYTES:
        return None
    s = op.shapes[i]
    return [int(d) for d in s] if _is_shape(s) else None


def _itemsize(op: OpEvent, i: int) -> int:
    return DTYPE_BYTES.get(op.dtypes[i], 4) if i < len(op.dtypes) else 4


def _arg(op: OpEvent, i: int, default: Any = None) -> Any:
    return op.args[i] if i < len(op.args) and op.args[i] is not None else default


def _tensor_inputs(op: OpEvent) -> list[tuple[list[int], int]]:
    """(shape, bytes per element) of every tensor input; a tensor list's tensors each."""
    out: list[tuple[list[int], int]] = []
    for i, (shape, dtype) in enumerate(zip(op.shapes, op.dtypes, strict=False)):
        if dtype == TENSOR_LIST and isinstance(shape, (list, tuple)):
            out += [([int(d) for d in s], TENSOR_LIST_ELEMENT_BYTES) for s in shape if _is_shape(s)]
        elif dtype in DTYPE_BYTES and _is_shape(shape):
            out.append(([int(d) for d in shape], _itemsize(op, i)))
    return out


def _nbytes(shape: Sequence[int], itemsize: int) -> int:
    return prod(shape) * itemsize


def _pair(v: Any, n: int, default: int) -> list[int]:
    if v is None:
        return [default] * n
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n
    vals = [int(x) for x in v]
    return vals * n if len(vals) == 1 else vals


def _transposed(op: OpEvent) -> bool:
    base = base_name(op.name)
    if base.startswith("conv_transpose") or base == "cudnn_convolution_transpose":
        return True
    if base in ("convolution", "_convolution", "convolution_overrideable"):
        return bool(_arg(op, 6, False))
    return False


def conv_output_shape(op: OpEvent) -> list[int] | None:
    """A forward convolution's output shape from its input, weight, stride, padding, dilation (and output
    padding, groups when transposed), by the shape formula of torch.nn.Conv2d / ConvTranspose2d's docs."""
    base = base_name(op.name)
    x, w = _shape(op, 0), _shape(op, 1)
    if not x or not w or len(x) < 3:
        return None
    n = len(x) - 2
    k = w[2:]
    if base in ("conv1d", "conv2d", "conv3d"):
        stride, padding, dilation = _arg(op, 3, 1), _arg(op, 4, 0), _arg(op, 5, 1)
        transposed, out_pad, groups = False, 0, 1
    elif base.startswith("conv_transpose"):  # (input, weight, bias, stride, padding, output_padding, groups, dilation)
        stride, padding, out_pad, groups, dilation = (_arg(op, 3, 1), _arg(op, 4, 0), _arg(op, 5, 0),
                                                      _arg(op, 6, 1), _arg(op, 7, 1))  # fmt: skip
        transposed = True
    elif base in ("convolution", "_convolution", "convolution_overrideable"):
        stride, padding, dilation = _arg(op, 3, 1), _arg(op, 4, 0), _arg(op, 5, 1)
        transposed, out_pad, groups = bool(_arg(op, 6, False)), _arg(op, 7, 0), _arg(op, 8, 1)
    else:
        return None
    s, d = _pair(stride, n, 1), _pair(dilation, n, 1)
    if isinstance(padding, str):  # conv2d's padding="same" | "valid"
        if padding == "same":
            return [x[0], w[0], *x[2:]]
        padding = 0
    p, op_ = _pair(padding, n, 0), _pair(out_pad, n, 0)
    if transposed:
        spatial = [(x[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op_[i] + 1 for i in range(n)]
        return [x[0], w[1] * int(groups), *spatial]
    spatial = [(x[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(n)]
    return [x[0], w[0], *spatial]


def _pool_output_shape(op: OpEvent) -> list[int] | None:
    base = base_name(op.name)
    x = _shape(op, 0)
    if not x or len(x) < 3:
        return None
    if base.startswith(("adaptive_", "_adaptive_")):
        size = _arg(op, 1)
        if size is None:
            return None
        n = len(x) - 2
        return [*x[:2], *_pair(size, n, 1)]
    n = 2 if "2d" in base else 3 if "3d" in base else 1 if "1d" in base else len(x) - 2
    kernel = _arg(op, 1)
    if kernel is None:
        return None
    k = _pair(kernel, n, 1)
    stride = _arg(op, 2)
    s = _pair(stride, n, 1) if stride not in (None, []) else k  # stride defaults to the kernel size
    p = _pair(_arg(op, 3, 0), n, 0)
    dil = _pair(_arg(op, 4, 1), n, 1) if base.startswith("max_pool") else [1] * n
    ceil_mode = bool(_arg(op, 5 if base.startswith("max_pool") else 4, False))
    spatial = []
    for i in range(n):
        size = x[-n + i] + 2 * p[i] - dil[i] * (k[i] - 1) - 1
        out = -(-size // s[i]) + 1 if ceil_mode else size // s[i] + 1
        if ceil_mode and (out - 1) * s[i] >= x[-n + i] + p[i]:
            out -= 1  # the last window must start inside the input (torch's pooling_output_shape)
        spatial.append(out)
    return [*x[: len(x) - n], *spatial]


def _reduced_shape(x: list[int], dims: Any, keepdim: bool) -> list[int]:
    if dims is None or dims == []:
        return [1] * len(x) if keepdim else []
    dims = [dims] if isinstance(dims, int) else list(dims)
    axes = {d % len(x) for d in dims} if x else set()
    return [1 if i in axes else s for i, s in enumerate(x) if keepdim or i not in axes]


def _broadcast(shapes: Iterable[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for s in shapes:
        s = list(s)
        if len(s) > len(out):
            out = [1] * (len(s) - len(out)) + out
        s = [1] * (len(out) - len(s)) + s
        out = [max(a, b) for a, b in zip(out, s, strict=True)]
    return out


def _matmul_shape(a: list[int], b: list[int]) -> list[int]:
    if len(a) == 1 and len(b) == 1:
        return []
    if len(b) == 1:
        return a[:-1]
    if len(a) == 1:
        return [*b[:-2], b[-1]]
    return [*_broadcast([a[:-2], b[:-2]]), a[-2], b[-1]]


Outputs = list[tuple[list[int], int]]
Tensors = list[tuple[list[int], int]]


def output_shapes(op: OpEvent) -> Outputs | None:
    """(shape, bytes per element) of each tensor the op writes, by its schema; None for an op that claims no
    traffic (a view, an allocation, communication, an unknown kind)."""
    kind = kind_of(op)
    if kind in NO_ROOF:
        return None
    tensors = _tensor_inputs(op)
    if not tensors:
        return []
    for rule in (_copy_outputs, _conv_outputs, _matmul_outputs, _norm_outputs, _pool_outputs, _list_outputs):
        out = rule(op, kind, tensors)
        if out is not None:
            return out
    if kind == REDUCTION:
        return _reduction_outputs(op, tensors)
    return _elementwise_outputs(op, tensors)


def _largest(tensors: Tensors) -> tuple[list[int], int]:
    return max(tensors, key=lambda t: prod(t[0]))


def _copy_outputs(op: OpEvent, kind: str, tensors: Tensors) -> Outputs | None:
    base = base_name(op.name)
    if base in ("copy_", "_copy_from"):  # copy_(self, src): src read, self written
        return [tensors[0]]
    if base in ("to", "_to_copy", "type_as"):  # to(self, dtype, ...): the target dtype is recorded by its code
        code = next((a for a in op.args[1:3] if isinstance(a, int) and not isinstance(a, bool)), None)
        shape, size = tensors[0]
        return [(shape, SCALAR_TYPE_BYTES.get(code, size) if code is not None else size)]
    if base in ("cat", "_cat", "stack"):
        return [([sum(prod(s) for s, _ in tensors)], tensors[0][1])]
    return None


def _conv_outputs(op: OpEvent, kind: str, tensors: Tensors) -> Outputs | None:
    if kind not in (CONV, DEPTHWISE):
        return None
    base = base_name(op.name)
    if base.startswith("convolution_backward"):  # grad_input, grad_weight, grad_bias as output_mask asks
        mask = _arg(op, 10, [True, True, True])
        outs = [(s, _itemsize(op, i)) for m, i in zip(mask[:2], (1, 2), strict=False) if m and (s := _shape(op, i))]
        bias = _arg(op, 3)
        if len(mask) > 2 and mask[2] and bias:
            outs.append(([int(v) for v in bias], _itemsize(op, 2)))
        return outs
    out = conv_output_shape(op)
    return [(out, tensors[0][1])] if out is not None else [_largest(tensors)]


def _matmul_outputs(op: OpEvent, kind: str, tensors: Tensors) -> Outputs | None:
    base = base_name(op.name)
    if base == "linear":  # (input, weight (out, in), bias)
        w = _shape(op, 1)
        shape, size = tensors[0]
        return [([*shape[:-1], w[0]] if w else shape, size)]
    operands = {"addmm": 1, "baddbmm": 1, "addbmm": 1, "_addmm_activation": 1, "mm": 0, "bmm": 0, "matmul": 0,
                "mv": 0, "dot": 0, "_int_mm": 0, "_scaled_mm": 0}.get(base)  # fmt: skip
    if operands is None:
        return None
    a, b = _shape(op, operands), _shape(op, operands + 1)
    return [(_matmul_shape(a, b), _itemsize(op, operands))] if a and b else [_largest(tensors)]


def _norm_outputs(op: OpEvent, kind: str, tensors: Tensors) -> Outputs | None:
    if kind == BATCH_NORM:
        return _batch_norm_outputs(op)
    if kind == OTHER_NORM:  # y, or the input gradient (their small per-channel outputs left out)
        return [_largest(tensors)]
    return None


def _pool_outputs(op: OpEvent, kind: str, tensors: Tensors) -> Outputs | None:
    if kind != POOLING:
        return None
    base = base_name(op.name)
    if base.endswith("_backward"):  # (grad_out, self, ...): the input gradient, self's shape
        x = _shape(op, 1)
        return [(x, _itemsize(op, 1))] if x else [_largest(tensors)]
    out = _pool_output_shape(op)
    if out is None:
        return [_largest(tensors)]
    # max_pool2d writes int64 indices where it runs max_pool2d_with_indices (the CPU's; mkldnn's does not)
    indices = "with_indices" in base or base.startswith("adaptive_max") or any("with_indices" in c for c in op.callees)
    return [(out, tensors[0][1])] + ([(out, 8)] if indices else [])


def _list_outputs(op: OpEvent, kind: str, tensors: Tensors) -> Outputs | None:
    """The multi-tensor optimizer kernels: a _foreach_ op writes its first list; _fused_sgd_(params, grads,
    momenta, ...) params and momenta; _fused_adam(w)_(params, grads, exp_avgs, exp_avg_sqs, ...) those three."""
    base = base_name(op.name)
    if not base.startswith(("_foreach_", "_fused_")):
        return None
    lists = [s for s, d in zip(op.shapes, op.dtypes, strict=False) if d == TENSOR_LIST]
    written = [0] if base.startswith("_foreach_") else [0, 2] if "sgd" in base else [0, 2, 3]
    return [([int(v) for v in s], TENSOR_LIST_ELEMENT_BYTES) for i in written if i < len(lists)
            for s in lists[i] if _is_shape(s)]  # fmt: skip


def _elementwise_outputs(op: OpEvent, tensors: Tensors) -> Outputs:
    """An in-place op writes its first input; a backward its largest input's shape (the input gradient); any
    other op the broadcast of its inputs, in the first input's dtype."""
    base = base_name(op.name)
    if base.endswith("_") and not base.endswith("__"):
        return [tensors[0]]
    if base.endswith("_backward") or base.endswith("_backward_data"):
        return [_largest(tensors)]
    return [(_broadcast(s for s, _ in tensors), tensors[0][1])]


def _batch_norm_outputs(op: OpEvent) -> list[tuple[list[int], int]]:
    """A batch norm writes y (x's shape) and, in training, its batch mean and inverse std (C each, fp32) and the
    updated running statistics; its backward writes the input gradient and, as its output mask asks, the weight
    and bias gradients (the weight's shape). Positions by schema: batch_norm, native_batch_norm, cudnn_batch_norm
    (input, weight, bias, running_mean, running_var, training, ...); native_batch_norm_backward (grad_out, input,
    weight, ...), cudnn_batch_norm_backward (input, grad_output, weight, ...)."""
    base = base_name(op.name)
    weight = [(w, _itemsize(op, 2))] if (w := _shape(op, 2)) else []
    if "backward" in base:
        grads = [t for t in ((_shape(op, 0), _itemsize(op, 0)), (_shape(op, 1), _itemsize(op, 1))) if t[0]]
        x = max(grads, key=lambda t: prod(t[0] or [0]))
        mask = next(
            (a for a in op.args if isinstance(a, (list, tuple)) and a and all(isinstance(m, bool) for m in a)), None
        )
        mask = mask if mask is not None else [True, True, True]
        outs = [(list(x[0] or []), x[1])] if mask[0] else []
        return outs + [t for i, t in enumerate(weight * 2) if len(mask) > i + 1 and mask[i + 1]]
    x_shape = _shape(op, 0) or []
    channels = x_shape[1] if len(x_shape) > 1 else 1
    training = next((a for a in op.args[5:6] if isinstance(a, bool)), True)
    running = [(s, _itemsize(op, i)) for i in (3, 4) if (s := _shape(op, i))]
    outs = [(x_shape, _itemsize(op, 0))]
    if training:
        outs += [([channels], 4), ([channels], 4), *running]
    return outs


def _reduction_outputs(op: OpEvent, tensors: Tensors) -> Outputs:
    base = base_name(op.name)
    first_shape, first_size = tensors[0]
    if base in ("softmax", "_softmax", "log_softmax", "_log_softmax", "cumsum", "sort"):
        return [(first_shape, first_size)]
    if base.endswith("_backward") or base.endswith("_backward_data"):
        return [_largest(tensors)]
    if base == "cross_entropy_loss" or base.startswith(("nll_loss", "mse_loss", "l1_loss", "binary_cross")):
        reduction = next((a for a in op.args[2:5] if isinstance(a, int) and not isinstance(a, bool)), 1)
        return [(first_shape[:1], first_size)] if reduction == 0 else [([], first_size)]
    if base in ("sum", "mean", "amax", "amin", "prod", "argmax", "argmin", "norm", "linalg_vector_norm", "var",
                "std", "logsumexp", "any", "all", "count_nonzero"):  # fmt: skip
        dims_i = 2 if base in ("norm", "linalg_vector_norm") else 1
        dims = _arg(op, dims_i)
        keep = _arg(op, dims_i + 1, False)
        if not isinstance(dims, (list, tuple, int)) or isinstance(dims, bool):
            dims = None
        out = _reduced_shape(first_shape, dims, bool(keep) if isinstance(keep, bool) else False)
        return [(out, 8 if base.startswith("arg") else first_size)]
    return [([], first_size)]


def min_bytes(op: OpEvent) -> float | None:
    """Minimum bytes one call moves: each tensor input read once, each output written once (an in-place op's
    first input is read and written); None for a kind that claims no traffic (NO_ROOF)."""
    outs = output_shapes(op)
    if outs is None:
        return None
    base = base_name(op.name)
    if base in _MAYBE_COPY and not op.callees & _COPY_CALLEES:  # a cast to its own dtype, a view: no copy
        return 0.0
    tensors = _tensor_inputs(op)
    reads = sum(_nbytes(s, b) for s, b in tensors)
    if base in _WRITE_ONLY and tensors:  # self is written, not read
        reads -= _nbytes(*tensors[0])
    return float(reads + sum(_nbytes(s, b) for s, b in outs))


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------
@dataclass
class _Totals:
    calls: int = 0
    time_s: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%" if abs(x) < 0.1 else f"{100 * x:.0f}%"


def roofline(
    ops: Sequence[OpEvent],
    *,
    steps: int,
    step_time_s: float,
    data_wait_s: float,
    time_basis: str,
    compute_roof_tflops: float | None,
    memory_roof_gb_s: float | None,
    compute_roof_precision: str | None = None,
    matmul_roof_tflops: float | None = None,
    profiled_step_time_s: float | None = None,
    exposed_s: Mapping[str, float] | None = None,
) -> schema.Roofline:
    """The profiled step's time per kind against the roofs: `ops` over `steps` profiled steps, held against a step
    of `step_time_s` (mean, data wait included: the timed loop's where the run has one, `profiled_step_time_s`
    being the pass's own) of which `data_wait_s` waited for the loader. The matmul kind
    is held against `matmul_roof_tflops` when given (fp32 matmuls without TF32), the rest against
    `compute_roof_tflops`; without the roofs the table has times, FLOPs and bytes but no bound. `exposed_s`: per
    step, the part of a no-roof kind's time no other kind's kernel overlapped (CUDA's concurrent streams,
    op_events.exposed_by_kind): the ceiling adds that part alone."""
    from effbench import schema

    steps = max(int(steps), 1)
    totals: dict[str, _Totals] = {}
    unmodelled: dict[str, _Totals] = {}
    for op in ops:
        kind = kind_of(op)
        groups = [totals.setdefault(kind, _Totals())]
        if kind == UNMODELLED:  # also by name, for the record's unmodelled_ops
            groups.append(unmodelled.setdefault(op.name, _Totals()))
        b = min_bytes(op)
        for t in groups:
            t.calls += op.calls
            t.time_s += op.time_s
            t.flops += op.flops * op.calls
            t.bytes += (b or 0.0) * op.calls
    mem = memory_roof_gb_s * 1e9 if memory_roof_gb_s else None
    rows: list[schema.KindRow] = []
    for kind, t in totals.items():
        time_s, flops, nbytes = t.time_s / steps, t.flops / steps, t.bytes / steps
        roof_tflops = matmul_roof_tflops if kind == MATMUL and matmul_roof_tflops else compute_roof_tflops
        row = schema.KindRow(kind=kind, calls=t.calls / steps, time_s=time_s, flops=flops)
        if step_time_s > 0:
            row.share_of_step = time_s / step_time_s
        if kind in NO_ROOF:
            if exposed_s is not None and kind in exposed_s:
                row.exposed_time_s = min(time_s, exposed_s[kind])
            rows.append(row)
            continue
        row.min_bytes = nbytes
        if nbytes > 0:
            row.intensity_flop_per_byte = flops / nbytes
        if time_s > 0:
            row.achieved_tflops = flops / time_s / 1e12
            row.achieved_gb_s = nbytes / time_s / 1e9
        if roof_tflops and mem and (flops > 0 or nbytes > 0):
            peak = roof_tflops * 1e12
            row.compute_roof_tflops = roof_tflops
            compute_bound = nbytes == 0 or flops / nbytes >= peak / mem
            row.bound = "compute" if compute_bound else "memory"
            row.roof_time_s = max(flops / peak, nbytes / mem)
            if time_s > 0:
                row.roof_fraction = row.roof_time_s / time_s
        rows.append(row)
    rows.sort(key=lambda r: -(r.time_s or 0.0))
    ops_s = sum(r.time_s or 0.0 for r in rows)
    out = schema.Roofline(
        time_basis=time_basis,
        steps=steps,
        step_time_s=step_time_s,
        profiled_step_time_s=profiled_step_time_s,
        data_wait_s=data_wait_s,
        ops_time_s=ops_s,
        unattributed_s=step_time_s - data_wait_s - ops_s,
        kinds=rows,
        unmodelled_ops=[
            schema.UnmodelledOp(
                name=name,
                calls=t.calls / steps,
                time_s=t.time_s / steps,
                flops=t.flops / steps,
                share_of_step=t.time_s / steps / step_time_s if step_time_s > 0 else None,
            )
            for name, t in sorted(unmodelled.items(), key=lambda kv: (-kv[1].time_s, kv[0]))[:MAX_UNMODELLED_OPS]
        ],  # fmt: skip
    )
    if compute_roof_tflops and mem:
        out.compute_roof_tflops = compute_roof_tflops
        out.compute_roof_precision = compute_roof_precision
        if matmul_roof_tflops and matmul_roof_tflops != compute_roof_tflops:
            out.matmul_roof_tflops = matmul_roof_tflops
        out.memory_roof_gb_s = memory_roof_gb_s
        out.ridge_flop_per_byte = compute_roof_tflops * 1e12 / mem
        # a kind faster than its roof (its data fit in cache) keeps its own time: the ceiling never slows one down;
        # a kind with no roof adds what it ran alone (an all-reduce hidden behind backward adds nothing)
        ceiling = sum(
            min(r.roof_time_s, r.time_s or 0.0)
            if r.roof_time_s is not None
            else (r.exposed_time_s if r.exposed_time_s is not None else (r.time_s or 0.0))
            for r in rows
        )
        if ceiling > 0:
            out.ceiling_time_s = ceiling
            out.ceiling_speedup = step_time_s / ceiling
        out.verdict = verdict(out)
    return out


def verdict(r: schema.Roofline) -> str | None:
    """The kind with the most time above its roof: "depthwise/grouped conv: 38% of the step at 11% of the memory
    roof: memory-bound". Time in no op wins when it is larger than any kind's
    loss (the step is overhead-bound, not roof-bound); the ops not modelled win, named, when their time is larger
    than any kind's loss and the time in no op: the roofline cannot say how far from a roof the most time it might
    lose runs."""
    lost = [(r_.time_s - r_.roof_time_s, r_) for r_ in r.kinds if r_.roof_time_s is not None and r_.time_s]
    outside = r.unattributed_s or 0.0
    best = max(lost, key=lambda t: t[0], default=None)
    unknown = row_of(r, UNMODELLED)
    unknown_s = (unknown.time_s or 0.0) if unknown is not None else 0.0
    if unknown_s > 0 and unknown_s >= outside and (best is None or unknown_s > best[0]) and r.step_time_s:
        largest = all(unknown_s > (k.time_s or 0.0) for k in r.kinds if k.kind != UNMODELLED)
        lead = "the largest part of the step is not modelled" if largest else "not modelled"
        more = "" if largest else ", more time than any kind loses to its roof"
        return (
            f"{lead}: {unmodelled_names(r)}{more}: no FLOP or byte model for these ops, so no roof to hold them against"
        )
    if outside > 0 and (best is None or outside > best[0]) and r.step_time_s:
        where = (
            "the device ran no kernel for"
            if (r.time_basis or "").startswith("device")
            else "no op ran (Python, autograd, the profiler's ranges) for"
        )
        return f"{where} {_pct(outside / r.step_time_s)} of the step: more time than any kind loses to its roof"
    if best is None or best[0] <= 0:
        return None
    row = best[1]
    return (
        f"{row.kind}: {_pct(row.share_of_step or 0.0)} of the step at {_pct(row.roof_fraction or 0.0)} of the "
        f"{row.bound} roof: {row.bound}-bound"
    )


def unmodelled_names(r: schema.Roofline, top: int = 3) -> str:
    """ "aten::lstm 41%, aten::mkldnn_rnn_layer_backward 30% (71% of the step in all)": the largest ops not modelled
    with their shares of the step, then the kind's whole share where it holds more than those named."""
    ops = r.unmodelled_ops
    if not ops:
        return ""
    parts = [f"{o.name} {_pct(o.share_of_step)}" if o.share_of_step is not None else o.name for o in ops[:top]]
    if len(r.unmodelled_ops) > top:
        parts.append(f"{len(ops) - top}{'+' if len(ops) >= MAX_UNMODELLED_OPS else ''} more")
    row = row_of(r, UNMODELLED)
    whole = row.share_of_step if row is not None else None
    tail = f" ({_pct(whole)} of the step in all)" if whole is not None and len(ops) > 1 else " of the step"
    return ", ".join(parts) + tail


def uncounted_ops(r: schema.Roofline | None) -> list[str]:
    """The ops not modelled whose work no FLOP formula counted (none of their callees has one): what the FLOP
    counts (the roofline's, flops_per_image, MFU) leave out."""
    return [o.name for o in r.unmodelled_ops if not o.flops] if r is not None else []


def unmodelled_line(r: schema.Roofline) -> str | None:
    """ "not modelled: aten::lstm 41%, ... : no FLOP or byte formula for these ops: ..."; None when every op is."""
    if not r.unmodelled_ops:
        return None
    uncounted = uncounted_ops(r)
    if len(uncounted) == len(r.unmodelled_ops):
        flops = "the FLOP counts (this table's, FLOPs per image, MFU) leave their work out"
    elif uncounted:
        flops = f"the FLOP counts (this table's, FLOPs per image, MFU) leave out the work of {', '.join(uncounted)}"
    else:
        flops = "the FLOP counts hold only what their callees' formulas counted"
    return (
        f"not modelled: {unmodelled_names(r)}: effbench has no FLOP or byte formula for these ops, so their time "
        f"(the '{UNMODELLED}' row) is held against no roof and kept as measured in the ceiling, and {flops}"
    )


def step_label(r: schema.Roofline) -> str:
    """The table's 100% row: the timed step, or the profiled one in a record that has no timed step."""
    return "timed step" if r.profiled_step_time_s is not None else "profiled step"


def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.3g}"


def ceiling_line(r: schema.Roofline) -> str | None:
    """ "ceiling: 12.3 ms per step with every kind at its roof (of 50.1 ms measured): this step could be at most
    4.1x faster on this hardware"."""
    if r.ceiling_time_s is None or r.ceiling_speedup is None:
        return None
    unknown = row_of(r, UNMODELLED)
    kept = (
        f"; the {_pct(unknown.share_of_step)} not modelled kept as measured"
        if unknown is not None and unknown.share_of_step
        else ""
    )
    return (
        f"ceiling: {_ms(r.ceiling_time_s)} ms per step with every kind at its roof (of {_ms(r.step_time_s or 0.0)} "
        f"ms measured{kept}): this step could be at most {r.ceiling_speedup:,.1f}x faster on this hardware"
    )


# --------------------------------------------------------------------------------------------------
# Across runs
# --------------------------------------------------------------------------------------------------
def kinds_in(roofs: Sequence[schema.Roofline | None]) -> list[str]:
    """Every kind any of them has, in KINDS' order (unknown names after, sorted)."""
    seen = {k.kind for r in roofs if r is not None for k in r.kinds}
    return [k for k in KINDS if k in seen] + sorted(seen - set(KINDS))


def row_of(r: schema.Roofline | None, kind: str) -> schema.KindRow | None:
    return next((k for k in r.kinds if k.kind == kind), None) if r is not None else None


@dataclass(frozen=True)
class KindDelta:
    """One kind's time per step in A and B (None where a run has none) and its fraction of the roof in each."""

    kind: str
    a_s: float | None
    b_s: float | None
    a_roof: float | None = None
    b_roof: float | None = None

    @property
    def delta_s(self) -> float | None:
        return self.b_s - self.a_s if self.a_s is not None and self.b_s is not None else None


def kind_deltas(a: schema.Roofline | None, b: schema.Roofline | None) -> list[KindDelta]:
    """B - A per kind, then the time outside ops and the profiled step; [] unless both runs have a roofline."""
    if a is None or b is None:
        return []
    out = []
    for kind in kinds_in([a, b]):
        ka, kb = row_of(a, kind), row_of(b, kind)
        out.append(KindDelta(kind, ka.time_s if ka else None, kb.time_s if kb else None,
                             ka.roof_fraction if ka else None, kb.roof_fraction if kb else None))  # fmt: skip
    out.append(KindDelta(OUTSIDE_OPS, a.unattributed_s, b.unattributed_s))
    out.append(KindDelta(step_label(b), a.step_time_s, b.step_time_s))
    return out
