"""How much compute each op of the captured graph is, in multiply-accumulates (MACs), from its tensors' shapes.

One rule per op kind, PyTorch's aten names (a PyTorch source's captured graph) and ONNX op types (an ONNX source's)
alike. A weight is a count of MACs for the ops that multiply and add (convolutions, matrix products, attention) and,
for the rest, the element-wise operations they do, counted one per multiply-accumulate; shape-only ops (views,
transposes, gathers) weigh 0. The conventions, and where each comes from:

- convolution, matrix products, attention: torch/utils/flop_counter.py (`conv_flop_count`, `mm_flop`, `bmm_flop`,
  `addmm_flop`, `sdpa_flop_count`), which counts 2 FLOPs per MAC; tests/test_compute_share.py checks these rules
  against its FlopCounterMode on the same models;
- element-wise ops and activations, one per output element; normalisation, two per element (normalise, then the
  affine scale and shift); pooling over the input: ptflops' PyTorch hooks (`relu_flops_counter_hook`,
  `bn_flops_counter_hook`, `pool_flops_counter_hook`);
- ONNX attributes (Conv's `group`, Gemm's `transA`, pooling's `kernel_shape`): the ONNX operator specs.

A dim the graph leaves symbolic ("s0", "batch", "2*s0 + 1") is evaluated at the shapes the run used (`run_dims`);
a shape that still cannot be said leaves the op's weight unknown (None), and the share says how many ops had one.
"""
from __future__ import annotations

import ast
import math
import operator
from collections.abc import Mapping, Sequence

# Normalisation ops do two operations per element: normalise, then scale and shift (ptflops' bn_flops_counter_hook
# doubles numel for an affine batch norm; its layer/group/instance norm hooks do the same).
NORM_OPS_PER_ELEMENT = 2
# Softmax exponentiates, sums and divides each element: three operations per element (xc's own count; fvcore leaves
# softmax out, ptflops counts it as one).
SOFTMAX_OPS_PER_ELEMENT = 3

CONV = {"conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv", "convinteger", "qlinearconv"}
CONV_TRANSPOSE = {"conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "convtranspose"}
# A @ B with B's last two dims (or B transposed): out elements × the contracted dim.
MATMUL = {"matmul", "mm", "bmm", "einsum_mm", "matmulinteger", "qlinearmatmul"}
ADDMM = {"addmm", "baddbmm", "addbmm"}                 # bias, a, b
LINEAR = {"linear"}                                    # x, weight [out, in], bias
GEMM = {"gemm"}                                        # ONNX: A, B, C with transA / transB
ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention", "attention"}
NORM = {"batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit", "native_batch_norm",
        "layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm", "rms_norm",
        "batchnormalization", "layernormalization", "groupnormalization", "instancenormalization",
        "rmsnormalization", "simplifiedlayernormalization", "lpnormalization", "normalize"}
SOFTMAX = {"softmax", "_softmax", "log_softmax", "_log_softmax", "logsoftmax", "hardmax", "_safe_softmax"}
POOL = {"max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "avg_pool1d", "avg_pool2d",
        "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d",
        "adaptive_max_pool1d", "adaptive_max_pool2d", "maxpool", "averagepool", "lppool",
        "globalaveragepool", "globalmaxpool", "globallppool"}
REDUCE = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "norm", "linalg_vector_norm",
          "logsumexp", "argmax", "argmin", "cumsum", "any", "all",
          "reducesum", "reducemean", "reducemax", "reducemin", "reduceprod", "reducel1", "reducel2",
          "reducelogsum", "reducelogsumexp", "reducesumsquare", "cumsum", "argmax", "argmin"}
ELEMENTWISE = {
    # arithmetic and comparisons
    "add", "sub", "rsub", "mul", "div", "true_divide", "floor_divide", "remainder", "fmod", "pow", "neg", "abs",
    "reciprocal", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
    "sinh", "cosh", "asin", "acos", "atan", "atan2", "erf", "erfc", "sign", "floor", "ceil", "round", "trunc",
    "clamp", "clamp_min", "clamp_max", "clip", "maximum", "minimum", "where", "masked_fill", "eq", "ne", "lt", "le",
    "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor", "bitwise_and", "bitwise_or",
    "bitwise_not", "isnan", "isinf", "nan_to_num", "lerp", "addcmul", "addcdiv", "square", "fill", "zeros_like",
    "ones_like", "full_like", "alias_copy", "dropout", "copy", "_to_copy", "to", "type_as", "bernoulli",
    "rand_like", "randn_like",
    # activations
    "relu", "relu6", "leaky_relu", "prelu", "rrelu", "elu", "selu", "celu", "gelu", "silu", "swish", "mish",
    "sigmoid", "hardsigmoid", "tanh", "hardtanh", "hardswish", "softplus", "softsign", "logsigmoid", "glu",
    "threshold", "hardshrink", "softshrink", "tanhshrink",
    # interpolation: one value computed per output element (ptflops' upsample_flops_counter_hook)
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "upsample_bilinear2d", "upsample_linear1d",
    "upsample_bicubic2d", "upsample_trilinear3d", "interpolate", "grid_sampler", "grid_sampler_2d",
    # ONNX
    "sum", "mean", "max", "min", "equal", "less", "lessorequal", "greater", "greaterorequal", "not", "and", "or",
    "xor", "isinf", "isnan", "relu", "leakyrelu", "thresholdedrelu", "hardsigmoid", "hardswish", "softplus",
    "softsign", "gelu", "fastgelu", "biasgelu", "quickgelu", "erf", "selu", "celu", "elu", "mod", "bitshift",
    "resize", "upsample", "gridsample", "quantizelinear", "dequantizelinear", "dynamicquantizelinear", "castlike",
    "trilu", "tril", "triu", "shrink", "bitwiseand", "bitwiseor", "bitwisenot", "bitwisexor", "randomnormallike",
    "randomuniformlike", "dropout",
}
# Ops that move, select or describe data without arithmetic: 0 MACs (fvcore and ptflops count none either).
# `embedding` and ONNX Gather are table look-ups (flop_counter has no entry for them).
NO_MACS = {
    "view", "_unsafe_view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "t",
    "permute", "contiguous", "clone", "expand", "expand_as", "select", "slice", "narrow", "index", "index_select",
    "gather", "scatter", "index_put", "embedding", "cat", "concat", "stack", "split", "split_with_sizes", "chunk",
    "unbind", "getitem", "detach", "alias", "lift_fresh_copy", "view_as", "repeat", "tile", "roll", "flip",
    "pad", "constant_pad_nd", "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d",
    "zeros", "ones", "full", "empty", "arange", "scalar_tensor", "sym_size", "_assert_tensor_metadata",
    "_to_dim_order_copy", "dim_order_copy", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "movedim",
    "masked_select", "nonzero", "topk", "sort", "argsort",
    # ONNX
    "reshape", "transpose", "squeeze", "unsqueeze", "flatten", "concat", "split", "slice", "gather",
    "gatherelements", "gathernd", "scatterelements", "scatternd", "shape", "size", "expand", "identity",
    "constant", "constantofshape", "tile", "pad", "range", "depthtospace", "spacetodepth", "onehot", "nonzero",
    "compress", "reversesequence", "cast", "eyelike", "splittosequence", "sequenceat", "concatfromsequence",
}


def normalized_op(op_type: str) -> str:
    """The op's name as the rules spell it: lower case, without a namespace ("aten::", "torch.ops.aten."), an
    overload ("conv2d.default") or an in-place underscore ("relu_")."""
    parts = [p for p in (op_type or "").split("::")[-1].split(".") if p not in ("torch", "ops", "aten")]
    name = (parts[0] if parts else "").lower()
    if name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    return name


# ---- symbolic dims ----------------------------------------------------------------------------------------------
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.truediv, ast.Mod: operator.mod}
_CALLS = {"floor": math.floor, "ceiling": math.ceil, "ceil": math.ceil, "Max": max, "Min": min, "max": max,
          "min": min, "FloorDiv": operator.floordiv, "CeilToInt": math.ceil, "FloorToInt": math.floor,
          "CleanDiv": operator.floordiv, "IntTrueDiv": operator.truediv, "Mod": operator.mod,
          "PythonMod": operator.mod}
_MAX_DIM_TEXT = 200


def dim_value(dim, run_dims: Mapping[str, int]) -> int | None:
    """A dim as an int: itself, a named symbolic dim the run fixed, or plain arithmetic over such names ("2*s0 + 1",
    "Max(1, s3)") — read as an AST of numbers, names and arithmetic only, never evaluated as code. None: unknown."""
    if isinstance(dim, bool):
        return None
    if isinstance(dim, int):
        return dim if dim >= 0 else None
    if not isinstance(dim, str) or not dim or len(dim) > _MAX_DIM_TEXT:
        return None
    if dim in run_dims:
        return run_dims[dim]
    try:
        value = _evaluate(ast.parse(dim, mode="eval").body, run_dims)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, KeyError, RecursionError, OverflowError):
        return None
    return int(value) if value is not None and value >= 0 and float(value).is_integer() else None


def _evaluate(node: ast.AST, run_dims: Mapping[str, int]):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return run_dims[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_evaluate(node.left, run_dims), _evaluate(node.right, run_dims))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, run_dims)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords:
        return _CALLS[node.func.id](*(_evaluate(a, run_dims) for a in node.args))
    raise ValueError("not plain arithmetic")


def run_dims_of(graph_inputs: Sequence[Mapping], run_inputs: Sequence[Mapping]) -> dict[str, int]:
    """{symbolic dim name: its value in this run}: each graph input's symbolic dims read against the shape the input
    had in the run (the report's `source.inputs`), and the names the loader gave the input's axes (`dim_names`)."""
    ran = {i.get("name"): i for i in run_inputs}
    out: dict[str, int] = {}
    for spec in run_inputs:
        shape, names = list(spec.get("shape") or []), list(spec.get("dim_names") or [])
        for name, value in zip(names, shape):
            if isinstance(name, str) and name != "?" and isinstance(value, int):
                out.setdefault(name, value)
    for g in graph_inputs:
        spec = ran.get(g.get("name"))
        shape = (spec or {}).get("shape") or []
        for dim, value in zip(g.get("shape") or [], shape):
            if isinstance(dim, str) and isinstance(value, int):
                out.setdefault(dim, value)
    return out


# ---- MACs per op ------------------------------------------------------------------------------------------------
def _shape(tensor: Mapping | None, run_dims: Mapping[str, int]) -> list[int] | None:
    if tensor is None or tensor.get("shape") is None:
        return None
    dims = [dim_value(d, run_dims) for d in tensor["shape"]]
    return None if any(d is None for d in dims) else dims


def _numel(shape: list[int] | None) -> int | None:
    return None if shape is None else math.prod(shape)


def node_macs(node: Mapping, run_dims: Mapping[str, int] | None = None) -> int | None:
    """The MACs of one graph node (a report node dict: op_type, inputs/outputs with shapes, attributes), or None
    when its kind has no rule or a shape it needs is unknown."""
    run_dims = run_dims or {}
    attrs = node.get("attributes") or {}
    op = normalized_op(node.get("op_type", ""))
    ins = [_shape(t, run_dims) for t in node.get("inputs") or []]
    outs = [_shape(t, run_dims) for t in node.get("outputs") or []]
    out = outs[0] if outs else None

    def arg(i: int) -> list[int] | None:
        return ins[i] if i < len(ins) else None

    if op in NO_MACS:
        return 0
    if op in CONV or op in CONV_TRANSPOSE:
        # flop_counter.conv_flop_count: 2 × batch × prod(weight shape) × prod(spatial dims), the output's spatial
        # dims for a convolution, the input's for a transposed one (each input element is scattered through the
        # kernel). The weight [C_out, C_in/groups, k…] (ONNX ConvTranspose: [C_in, C_out/groups, k…]) already
        # carries the groups. MACs are half the FLOPs.
        x, w = arg(0), arg(3 if op == "qlinearconv" else 1)     # QLinearConv: x, x_scale, x_zero_point, w …
        if x is None or w is None or out is None or len(w) < 3:
            return None
        transposed = op in CONV_TRANSPOSE or bool(attrs.get("transposed"))
        spatial = len(w) - 2
        batch = math.prod(out[:-(spatial + 1)])       # 1 for an unbatched input
        conv_shape = (x if transposed else out)[-spatial:]
        return batch * math.prod(w) * math.prod(conv_shape)
    if op in LINEAR:
        # flop_counter counts linear as the addmm / mm it lowers to: out elements × in_features (weight [out, in]).
        w = arg(1)
        return None if w is None or out is None else _numel(out) * w[-1]
    if op in MATMUL:
        # flop_counter.mm_flop / bmm_flop: m × n × k (× batch) MACs; broadcast matmul: out elements × k.
        a = arg(0)
        if a is None or out is None:
            return None
        return _numel(out) * a[-1]
    if op in ADDMM:
        # flop_counter.addmm_flop / baddbmm_flop: the product's m × n × k (× batch); the bias add is not counted.
        a = arg(1)
        return None if a is None or out is None else _numel(out) * a[-1]
    if op in GEMM:
        # ONNX Gemm: Y = alpha·A'·B' + beta·C, A' = transpose(A) if transA: K is A's dim 0 when transposed.
        a = arg(0)
        if a is None or out is None or len(a) != 2:
            return None
        k = a[0] if attrs.get("transA") else a[1]
        return _numel(out) * k
    if op in ATTENTION:
        # flop_counter.sdpa_flop_count: Q·Kᵀ is b·h·s_q·s_k·d_q MACs and attn·V b·h·s_q·s_k·d_v (softmax not
        # counted). q [..., s_q, d_q], k [..., s_k, d_q], v [..., s_k, d_v]; the heads are q's (grouped-query
        # attention shares k/v across them).
        q, k, v = arg(0), arg(1), arg(2)
        if q is None or k is None or v is None or len(q) < 3 or len(k) < 2 or len(v) < 2:
            return None
        return math.prod(q[:-2]) * q[-2] * k[-2] * (q[-1] + v[-1])
    if op in NORM:
        x = arg(0)
        return None if x is None else NORM_OPS_PER_ELEMENT * _numel(x)
    if op in SOFTMAX:
        x = arg(0)
        return None if x is None else SOFTMAX_OPS_PER_ELEMENT * _numel(x)
    if op in POOL:
        # ONNX pooling names its kernel: kernel size per output element. aten's captured call keeps no arguments,
        # and the global / adaptive pools cover the input: count the input's elements (ptflops'
        # pool_flops_counter_hook), which is the same whenever the stride is the kernel.
        kernel = attrs.get("kernel_shape")
        if isinstance(kernel, (list, tuple)) and kernel and all(isinstance(d, int) for d in kernel) and out:
            return _numel(out) * math.prod(kernel)
        x = arg(0)
        return None if x is None else _numel(x)
    if op in REDUCE:
        x = arg(0)
        return None if x is None else _numel(x)
    if op in ELEMENTWISE:
        return None if out is None else _numel(out)
    return None


def graph_macs(nodes: Sequence[Mapping], run_dims: Mapping[str, int] | None = None) -> dict[str, int | None]:
    """{node id: its MACs or None} for the compute nodes of a graph (report node dicts)."""
    return {n["id"]: node_macs(n, run_dims) for n in nodes if n.get("kind", "compute") == "compute"}


def macs_by_kind(nodes: Sequence[Mapping], run_dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """MACs summed per rule family (conv, matmul — linear, mm, bmm, addmm, gemm —, attention …): what
    tests compare with torch's FlopCounterMode, which counts by the same families."""
    families = (("conv", CONV | CONV_TRANSPOSE), ("matmul", MATMUL | ADDMM | LINEAR | GEMM), ("attention", ATTENTION))
    out: dict[str, int] = {}
    for n in nodes:
        op = normalized_op(n.get("op_type", ""))
        fam = next((name for name, ops in families if op in ops), None)
        macs = node_macs(n, run_dims)
        if fam and macs is not None:
            out[fam] = out.get(fam, 0) + macs
    return out

