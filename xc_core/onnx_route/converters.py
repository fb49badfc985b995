"""onnx2torch, imported without torchvision, and the converters xc registers for ops it has none for.

onnx2torch imports torchvision at import time for two converters (NonMaxSuppression, RoiAlign); PyPI's torchvision
links a CUDA torch and does not load beside the CPU build, so it is imported with a stand-in `torchvision.ops`
whose functions raise — only models with those two ops fail, and they say why.

xc's converters, each a small torch module written from the op's definition in the ONNX operator docs
(onnx.ai/onnx/operators) or ONNX Runtime's contrib-op docs (github.com/microsoft/onnxruntime/blob/main/docs/
ContribOperators.md):
- GlobalMaxPool; Pad in every mode on any rank (torch's own reflect padding takes 1 to 3 trailing dims);
- LSTM (the cell unrolled over the sequence, so every target sees plain matmuls and activations);
- quantized ops, computed in float: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger,
  MatMulInteger hold their integer values in float32 (exact while sums stay below 2^24; ONNX Runtime's
  dynamic-int8 chains are made float Conv / MatMul before conversion, dequantize.py), and com.microsoft's
  DynamicQuantizeLSTM runs on its dequantized weights — so the program is a float model, which the report says;
- ai.onnx.ml's LinearClassifier, LinearRegressor, Normalizer, Scaler and ZipMap (the probabilities as a tensor,
  not a sequence of maps);
- in place of onnx2torch's, where ONNX's own node tests (bench/onnx_conformance.py) found it computing otherwise
  than the spec: IsInf, NonZero, Flatten, LayerNormalization, GatherElements, TopK, Pow, Selu, Shape, Constant,
  Unsqueeze, Resize, ScatterND's reductions, and Conv / ConvTranspose whose weights are not constants (or with
  output_shape); CumSum and Range keep their input's integer type (onnx2torch's give int64);
- LessOrEqual, GreaterOrEqual, Trilu, Hardmax, Shrink, ThresholdedRelu and the hyperbolic functions, which it has
  no converter for.

Every converter runs behind a guard: an attribute onnx2torch's converter never reads (IGNORED_ATTRIBUTES, audited
by conformance.onnx2torch_audit) set to anything but its default is refused, and a converter failing with an
exception nobody foresaw is said in one line naming the op and node (RouteError, `unexpected` set).
"""
from __future__ import annotations

import functools
import sys
import types

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger", "MatMulInteger",
                 "DynamicQuantizeLSTM"}
_registered = False
# The version requirements-nodeps.txt pins, named in the message when it is missing.
ONNX2TORCH_VERSION = "1.5.15"
OPSET = 17                # the opset graph_prep lowers to, and the highest whose converters are registered here

# Attribute defaults onnx2torch's converters read otherwise than the ONNX spec (conformance.onnx2torch_audit,
# held to it by tests/test_onnx_conformance.py): {(op, attribute): onnx2torch's value}. graph_prep writes every
# default out before onnx2torch reads a node, so none of these counts; the CumSum one changed results (the
# program was flip → cumsum → flip) and is noted where it applies. None: onnx2torch's "not given", which means
# the spec's default (broadcast 0, no clipping) for finite values.
ONNX2TORCH_DEFAULTS = {("CumSum", "reverse"): 1, ("Clip", "min"): None, ("Clip", "max"): None,
                       **{(op, "broadcast"): None for op in ("Add", "And", "Div", "Mul", "Or", "Sub", "Xor")}}

# Attributes onnx2torch's converters never read (conformance.onnx2torch_audit), for the ops whose converter xc
# keeps: set to anything but the spec's default they would be ignored, so the node is refused.
IGNORED_ATTRIBUTES = {"BatchNormalization": {"training_mode"}}
# The ops whose onnx2torch converter xc replaces outright (_register): their converters are xc's own.
REPLACED = frozenset({"IsInf", "NonZero", "Flatten", "LayerNormalization", "GatherElements", "TopK", "Pow", "Selu",
                      "Shape", "Constant", "Pad", "Unsqueeze", "Resize"})
# Read-nothing attributes that change no value: consumed_inputs (a legacy in-place hint), and Constant's value
# attributes, which onnx2torch reads by iterating over them.
HARMLESS_ATTRIBUTES = {"consumed_inputs", "value", "sparse_value", "value_float", "value_floats", "value_int",
                       "value_ints", "value_string", "value_strings"}


def import_onnx2torch():
    """onnx2torch with xc's converters registered."""
    try:
        import onnx2torch
    except ModuleNotFoundError as e:
        if e.name == "onnx2torch":      # `pip install xc` cannot pull it (see requirements-nodeps.txt)
            from ..errors import XcInputError
            raise XcInputError(f"the ONNX → PyTorch route needs onnx2torch, installed on its own: pip install "
                               f"--no-deps onnx2torch=={ONNX2TORCH_VERSION} (with its dependencies it would pull "
                               "torchvision, and a CUDA torch with it)") from None
        if e.name != "torchvision":
            raise
        onnx2torch = _import_without_torchvision()
    _register()
    return onnx2torch


def _import_without_torchvision():
    def needs_torchvision(*args, **kwargs):
        raise RuntimeError("this op's onnx2torch converter needs torchvision, which xc does not install (PyPI's "
                           "build links a CUDA torch)")

    stub, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")
    ops.nms = ops.box_convert = ops.roi_align = needs_torchvision
    stub.ops = ops
    sys.modules["torchvision"], sys.modules["torchvision.ops"] = stub, ops
    try:
        import onnx2torch
    finally:
        # Nobody else may see the stand-in: torch.onnx, for one, checks whether torchvision is installed.
        sys.modules.pop("torchvision", None)
        sys.modules.pop("torchvision.ops", None)
    return onnx2torch


def _register() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter
    from onnx2torch.utils.common import OnnxMapping, OperationConverterResult, onnx_mapping_from_node

    import torch

    from . import modules as m

    def register(op: str, versions, make, domain: str = ""):
        def convert(node, graph):
            try:
                module = make(node, graph)
            except m.Unsupported as e:      # said with the node it stopped at
                raise m.Unsupported(f"{op} '{node.name}' (domain {domain or 'ai.onnx'}): {e}") from None
            mapping = onnx_mapping_from_node(node)
            if isinstance(module, tuple):   # (module, how many of the node's outputs it gives)
                module, outputs = module
                mapping = OnnxMapping(inputs=mapping.inputs, outputs=mapping.outputs[:outputs])
            return OperationConverterResult(torch_module=module, onnx_mapping=mapping)
        for v in versions:
            if OperationDescription(domain, op, v) not in _CONVERTER_REGISTRY:
                add_converter(op, v, domain)(convert)

    attrs = lambda node: dict(node.attributes)   # noqa: E731
    register("GlobalMaxPool", [1], lambda node, graph: m.GlobalMaxPool())
    register("LSTM", [7, 14], lambda node, graph: m.LSTM.from_attributes(attrs(node), len(node.output_values)))
    register("DynamicQuantizeLSTM", [1], lambda node, graph: m.LSTM.from_attributes(
        attrs(node), len(node.output_values), quantized=True), domain="com.microsoft")
    register("QuantizeLinear", [10, 13, 19, 21], lambda node, graph: m.QuantizeLinear(
        attrs(node).get("axis", 1), _zero_point_range(node, graph)))
    register("DequantizeLinear", [10, 13, 19, 21], lambda node, graph: m.DequantizeLinear(attrs(node).get("axis", 1)))
    register("DynamicQuantizeLinear", [11], lambda node, graph: m.DynamicQuantizeLinear())
    register("ConvInteger", [10], lambda node, graph: m.ConvInteger.from_attributes(attrs(node)))
    register("MatMulInteger", [10], lambda node, graph: m.MatMulInteger())
    register("LinearClassifier", [1], lambda node, graph: m.LinearClassifier(attrs(node), len(node.output_values)),
             domain="ai.onnx.ml")
    register("LinearRegressor", [1], lambda node, graph: m.LinearRegressor(attrs(node)), domain="ai.onnx.ml")
    register("Normalizer", [1], lambda node, graph: m.Normalizer(attrs(node).get("norm", "MAX")), domain="ai.onnx.ml")
    register("Scaler", [1], lambda node, graph: m.Scaler(attrs(node)), domain="ai.onnx.ml")
    register("ZipMap", [1], lambda node, graph: m.ZipMap(), domain="ai.onnx.ml")
    _wrap_batch_norm(_CONVERTER_REGISTRY, OperationDescription, OperationConverterResult, onnx_mapping_from_node)

    # In place of onnx2torch's: the spec's behaviour, found missing by ONNX's node tests.
    def replace(op: str, make):
        assert op in REPLACED, op
        for v in _since_versions(op):
            _CONVERTER_REGISTRY.pop(OperationDescription("", op, v), None)
        register(op, _since_versions(op), make)

    replace("IsInf", lambda node, graph: m.IsInf(attrs(node).get("detect_positive", 1),
                                                 attrs(node).get("detect_negative", 1)))
    replace("NonZero", lambda node, graph: m.NonZero())
    replace("Flatten", lambda node, graph: m.Flatten(int(attrs(node).get("axis", 1))))
    replace("LayerNormalization", lambda node, graph: (m.LayerNormalization(
        int(attrs(node).get("axis", -1)), float(attrs(node).get("epsilon", 1e-5)),
        int(attrs(node).get("stash_type", 1)), _outputs(node, graph)), _outputs(node, graph)))
    replace("GatherElements", lambda node, graph: m.GatherElements(int(attrs(node).get("axis", 0))))
    replace("TopK", lambda node, graph: m.TopK(
        int(attrs(node).get("axis", -1)), int(attrs(node).get("largest", 1)), int(attrs(node).get("sorted", 1)),
        _is_read(node.output_values[1], graph), attrs(node).get("k")))
    replace("Pow", lambda node, graph: _pow(node, graph))
    replace("Selu", lambda node, graph: m.Selu(float(attrs(node).get("alpha", 1.67326319217681884765625)),
                                               float(attrs(node).get("gamma", 1.05070102214813232421875))))
    replace("Shape", lambda node, graph: m.Shape(int(attrs(node).get("start", 0)), attrs(node).get("end")))
    replace("Constant", lambda node, graph: m.Constant(_constant_value(node)))
    replace("Pad", lambda node, graph: m.Pad(attrs(node).get("mode", "constant"), attrs(node).get("pads"),
                                             float(attrs(node).get("value", 0.0))))
    replace("Unsqueeze", lambda node, graph: m.Unsqueeze(attrs(node).get("axes")))
    for v in _since_versions("Resize"):        # the plan depends on the version (Resize-10 has no roi, sizes)
        _CONVERTER_REGISTRY.pop(OperationDescription("", "Resize", v), None)
        register("Resize", [v], lambda node, graph, v=v: m.Resize(dict(node.attributes), v,
                                                                  _resize_plan(node, graph, v)))
    # Ops onnx2torch has no converter for, common in exported transformers and detectors.
    elementwise = {"LessOrEqual": torch.le, "GreaterOrEqual": torch.ge, "Sinh": torch.sinh, "Cosh": torch.cosh,
                   "Asinh": torch.asinh, "Acosh": torch.acosh, "Atanh": torch.atanh}
    for op, fn in elementwise.items():
        register(op, _since_versions(op), lambda node, graph, fn=fn: m.Elementwise(fn))
    register("ThresholdedRelu", _since_versions("ThresholdedRelu"), lambda node, graph: m.Elementwise(
        functools.partial(_thresholded_relu, alpha=float(attrs(node).get("alpha", 1.0)))))
    register("Trilu", _since_versions("Trilu"), lambda node, graph: m.Trilu(int(attrs(node).get("upper", 1))))
    for v in _since_versions("Hardmax"):
        register("Hardmax", [v], lambda node, graph, v=v: m.Hardmax(int(attrs(node).get("axis", -1 if v >= 13 else 1)),
                                                                    flattened=v < 13))
    register("Shrink", _since_versions("Shrink"), lambda node, graph: m.Shrink(
        float(attrs(node).get("bias", 0.0)), float(attrs(node).get("lambd", 0.5))))
    _wrap_for_inputs("Conv", _CONVERTER_REGISTRY, OperationDescription, OperationConverterResult,
                     onnx_mapping_from_node, lambda node: m.Conv(attrs(node)))
    _wrap_for_inputs("ConvTranspose", _CONVERTER_REGISTRY, OperationDescription, OperationConverterResult,
                     onnx_mapping_from_node, lambda node: m.ConvTranspose(attrs(node)),
                     also=lambda node: bool(attrs(node).get("output_shape")) or attrs(node).get(
                         "auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") or _asymmetric(attrs(node)),
                     takes={"output_shape"})
    _wrap_scatter_nd(_CONVERTER_REGISTRY, OperationDescription, OperationConverterResult, onnx_mapping_from_node)
    for op in ("CumSum", "Range"):           # the output in its first input's type, as ONNX says
        _keep_dtype(op, 0, _CONVERTER_REGISTRY, OperationDescription, OperationConverterResult)
    _refuse_forms(_CONVERTER_REGISTRY, OperationDescription)
    for key, converter in list(_CONVERTER_REGISTRY.items()):
        _CONVERTER_REGISTRY[key] = _guarded(key.operation_type, key.domain, converter)

    # onnx2torch names a submodule "<domain>/<node name>", and torch refuses a module name holding a dot
    # ("com.microsoft/…"): every op outside the default domain would fail. xc's node names are unique plain
    # identifiers (names.safe_names), so the node name alone is the module's name.
    from onnx2torch.onnx_graph import OnnxGraph
    OnnxGraph.generate_node_name = staticmethod(lambda node: node.name or node.op_type)


def _zero_point_range(node, graph) -> tuple[int, int]:
    """The saturation range of QuantizeLinear's output: its zero point's type (uint8 when it has none)."""
    zp = node.input_values[2] if len(node.input_values) > 2 else ""
    tensor = graph.initializers.get(zp) if zp else None
    dtype = str(tensor.to_torch().dtype) if tensor is not None else "torch.uint8"
    return {"torch.int8": (-128, 127), "torch.uint16": (0, 65535), "torch.int16": (-32768, 32767)}.get(
        dtype, (0, 255))


def _wrap_batch_norm(registry, description, result, mapping) -> None:
    """BatchNormalization whose input rank shape inference could not find: onnx2torch picks its module by rank and
    refuses; xc's module works at any rank."""
    from . import modules as m
    for version in (1, 6, 7, 9, 14, 15):
        key = description("", "BatchNormalization", version)
        original = registry.get(key)
        if original is None:
            continue

        def convert(node, graph, original=original):
            info = graph.value_info.get(node.input_values[0])
            if info is None or len(info.type.tensor_type.shape.dim) < 2:
                return result(torch_module=m.BatchNorm(dict(node.attributes).get("epsilon", 1e-5)),
                              onnx_mapping=mapping(node))
            return original(node, graph)
        convert.wrapped = original        # what conformance.onnx2torch_audit reads
        registry[key] = convert


def _thresholded_relu(x, alpha: float):
    import torch
    return torch.where(x > alpha, x, torch.zeros_like(x))


def _since_versions(op: str, domain: str = "") -> list[int]:
    """The versions of `op` up to opset 17 (onnx2torch looks a node's converter up by the version its opset
    selects)."""
    import onnx
    found = set()
    for opset in range(1, OPSET + 1):
        try:
            found.add(onnx.defs.get_schema(op, opset, domain).since_version)
        except onnx.defs.SchemaError:
            continue
    return sorted(found)


def _outputs(node, graph) -> int:
    """How many of a node's outputs count: up to the last one a node or the graph reads (at least one)."""
    values = list(node.output_values)
    while len(values) > 1 and not _is_read(values[-1], graph):
        values.pop()
    return len(values)


def _is_read(value: str, graph) -> bool:
    """Whether any node or graph output reads `value`."""
    if not value:
        return False
    return value in set(graph.output_values) or any(value in n.input_values for n in graph.nodes.values())


def _constant(graph, name: str):
    """An initializer's value as a numpy array, or None (not given, or not a constant)."""
    if not name or name not in graph.initializers:
        return None
    return graph.initializers[name].to_numpy()


def _pow(node, graph):
    from . import modules as m
    return m.Pow()


def _asymmetric(attrs: dict) -> bool:
    pads = list(attrs.get("pads") or [])
    half = len(pads) // 2
    return pads[:half] != pads[half:] or any(p < 0 for p in pads)


def _wrap_for_inputs(op, registry, description, result, mapping, make, also=lambda node: False,
                     takes=()) -> None:
    """Conv / ConvTranspose: onnx2torch's (constant weights held as the module's parameters) when its weight and
    bias are initializers, xc's functional module (weights as inputs) otherwise or when `also(node)` (`takes`: the
    attributes that send a node to xc's module whenever they are set)."""
    for version in _since_versions(op):
        key = description("", op, version)
        original = registry.get(key)

        def convert(node, graph, original=original):
            weights = [v for v in node.input_values[1:] if v]
            if original is None or also(node) or any(v not in graph.initializers for v in weights):
                return result(torch_module=make(node), onnx_mapping=mapping(node))
            return original(node, graph)
        convert.wrapped, convert.takes = original, set(takes)     # what conformance.onnx2torch_audit reads
        registry[key] = convert


def _wrap_scatter_nd(registry, description, result, mapping) -> None:
    """ScatterND with a reduction goes to xc's module; `none` to onnx2torch's."""
    from . import modules as m
    for version in _since_versions("ScatterND"):
        key = description("", "ScatterND", version)
        original = registry.get(key)

        def convert(node, graph, original=original):
            reduction = dict(node.attributes).get("reduction", "none")
            if reduction != "none" or original is None:
                return result(torch_module=m.ScatterND(reduction), onnx_mapping=mapping(node))
            return original(node, graph)
        convert.wrapped = original        # what conformance.onnx2torch_audit reads
        registry[key] = convert


def _keep_dtype(op: str, like: int, registry, description, result) -> None:
    """onnx2torch's converter for `op`, its module's result cast to the type of input `like` (modules.DtypeOf)."""
    from . import modules as m
    for version in _since_versions(op):
        key = description("", op, version)
        original = registry.get(key)
        if original is None:
            continue

        def convert(node, graph, original=original):
            made = original(node, graph)
            return result(torch_module=m.DtypeOf(made.torch_module, like), onnx_mapping=made.onnx_mapping)
        convert.wrapped = original        # what conformance.onnx2torch_audit reads
        registry[key] = convert


def _refuse_forms(registry, description) -> None:
    """Forms onnx2torch's converters take and then compute wrongly or fail on, refused before they are tried."""
    from . import modules as m

    def pool(op, version, original):
        def convert(node, graph):
            attrs = dict(node.attributes)
            if op == "MaxPool" and _outputs(node, graph) > 1:
                raise m.Unsupported("MaxPool with its Indices output (xc converts the pooled values only)")
            if attrs.get("auto_pad", "NOTSET") == "NOTSET":
                kernel, pads = list(attrs.get("kernel_shape") or []), list(attrs.get("pads") or [])
                dilations = list(attrs.get("dilations") or [1] * len(kernel))
                half = [((k - 1) * d + 1) // 2 for k, d in zip(kernel, dilations)]
                if any(p > h for p, h in zip(pads, half + half)):
                    raise m.Unsupported(f"{op} with pads {pads} larger than half its kernel {kernel} (PyTorch's "
                                        "pooling pads at most half the kernel)")
            return original(node, graph)
        convert.wrapped = original
        return convert

    for op in ("MaxPool", "AveragePool"):
        for version in _since_versions(op):
            key = description("", op, version)
            if key in registry:
                registry[key] = pool(op, version, registry[key])
    for op in ("NonMaxSuppression", "RoiAlign"):
        for version in _since_versions(op):
            def refuse(node, graph, op=op):
                raise m.Unsupported(f"{op}: its onnx2torch converter needs torchvision, which xc cannot install "
                                    "beside the CPU torch")
            registry[description("", op, version)] = refuse


def _guarded(op: str, domain: str, converter):
    """`converter` behind xc's guard: a node setting an attribute onnx2torch never reads is refused, and a failure
    nobody foresaw is said in one line naming the op and node (RouteError with `unexpected` set) — never a bare
    KeyError or IndexError."""
    from . import modules as m
    from .refusals import RouteError
    ignored = IGNORED_ATTRIBUTES.get(op, set()) if not domain else set()

    def convert(node, graph):
        where = f"{op} '{node.name}' (domain {domain or 'ai.onnx'})"
        for name in ignored & set(node.attributes):
            if not _is_default(op, name, node.attributes[name]):
                raise m.Unsupported(f"{where}: {name}={node.attributes[name]!r}, which onnx2torch's converter does "
                                    "not read (xc converts its default only)")
        from ..errors import first_line
        try:
            return converter(node, graph)
        except m.Unsupported:          # xc's converters say it with the node already
            raise
        except RouteError:
            raise
        except NotImplementedError as e:   # onnx2torch's own refusal of a form: said with the node
            from .refusals import DEFAULT_ADVICE
            raise RouteError(f"{where}: onnx2torch's converter does not compute this form ({first_line(e, 200)}) — "
                             f"{DEFAULT_ADVICE}") from None
        except Exception as e:  # noqa: BLE001 — a converter's bug, said as the node it stopped at
            raise RouteError(f"{where}: its converter failed ({type(e).__name__}: {first_line(e, 200)})",
                             unexpected=e) from None
    convert.wrapped = converter
    return convert


def _is_default(op: str, name: str, value) -> bool:
    import onnx
    from onnx import helper
    try:
        spec = onnx.defs.get_schema(op, OPSET, "").attributes.get(name)
    except onnx.defs.SchemaError:
        return False
    if spec is None or not spec.default_value.type:
        return False
    default = helper.get_attribute_value(spec.default_value)
    return (default.decode() if isinstance(default, bytes) else default) == value


def _resize_plan(node, graph, version: int) -> dict | None:
    """modules.Resize's plan for this node from the model's constants (its input shape from shape inference, its
    scales / sizes / roi initializers), or None when one is not a constant: then the module makes it from the values
    it is traced with."""
    inputs = list(node.input_values) + [""] * 4
    info = graph.value_info.get(inputs[0])
    dims = info.type.tensor_type.shape.dim if info is not None and info.type.HasField("tensor_type") else []
    shape = [d.dim_value if d.HasField("dim_value") else None for d in dims]
    wanted = inputs[1:2] if version == 10 else inputs[1:4]
    values = [_constant(graph, name) for name in wanted]
    if not shape or None in shape or any(v is None for v, name in zip(values, wanted) if name):
        return None
    from .modules import resize_plan
    return resize_plan(dict(node.attributes), version, shape, *values)


def _constant_value(node):
    """A Constant node's value as a tensor, from whichever value attribute it has (onnx2torch's converter reads an
    empty list attribute as the attribute itself, and an empty int list as float)."""
    import numpy as np
    import torch
    from onnx import AttributeProto, helper, numpy_helper

    from . import modules as m
    attribute = node.proto.attribute[0]
    if attribute.type == AttributeProto.TENSOR:
        value = numpy_helper.to_array(attribute.t)
    elif attribute.type in (AttributeProto.INT, AttributeProto.INTS):
        value = np.array(helper.get_attribute_value(attribute), np.int64)
    elif attribute.type in (AttributeProto.FLOAT, AttributeProto.FLOATS):
        value = np.array(helper.get_attribute_value(attribute), np.float32)
    else:
        raise m.Unsupported(f"Constant of {AttributeProto.AttributeType.Name(attribute.type).lower()} (a torch "
                            "program holds tensors of numbers)")
    if value.dtype == object or value.dtype.name == "bfloat16":
        raise m.Unsupported(f"Constant of type {value.dtype}")
    return torch.from_numpy(np.array(value))
