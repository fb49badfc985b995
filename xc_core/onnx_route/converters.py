"""onnx2torch, imported without torchvision, and the converters xc registers for ops it has none for.

onnx2torch imports torchvision at import time for two converters (NonMaxSuppression, RoiAlign); PyPI's torchvision
links a CUDA torch and does not load beside the CPU build, so it is imported with a stand-in `torchvision.ops`
whose functions raise — only models with those two ops fail, and they say why.

xc's converters, each a small torch module written from the op's definition in the ONNX operator docs
(onnx.ai/onnx/operators) or ONNX Runtime's contrib-op docs (github.com/microsoft/onnxruntime/blob/main/docs/
ContribOperators.md):
- GlobalMaxPool; Pad in reflect / edge mode on any rank (torch's own reflect padding takes 1 to 3 trailing dims);
- LSTM (the cell unrolled over the sequence, so every target sees plain matmuls and activations);
- quantized ops, computed in float: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, ConvInteger,
  MatMulInteger hold their integer values in float32 (exact while sums stay below 2^24; ONNX Runtime's
  dynamic-int8 chains are made float Conv / MatMul before conversion, dequantize.py), and com.microsoft's
  DynamicQuantizeLSTM runs on its dequantized weights — so the program is a float model, which the report says;
- ai.onnx.ml's LinearClassifier, LinearRegressor, Normalizer, Scaler and ZipMap (the probabilities as a tensor,
  not a sequence of maps).
"""
from __future__ import annotations

import sys
import types

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger", "MatMulInteger",
                 "DynamicQuantizeLSTM"}
_registered = False
# The version requirements-nodeps.txt pins, named in the message when it is missing.
ONNX2TORCH_VERSION = "1.5.15"


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
    from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

    from . import modules as m

    def register(op: str, versions, make, domain: str = ""):
        def convert(node, graph):
            try:
                module = make(node, graph)
            except m.Unsupported as e:      # said with the node it stopped at
                raise m.Unsupported(f"{op} '{node.name}' (domain {domain or 'ai.onnx'}): {e}") from None
            return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node))
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
    _wrap_pad(_CONVERTER_REGISTRY, OperationDescription, OperationConverterResult, onnx_mapping_from_node)
    _wrap_batch_norm(_CONVERTER_REGISTRY, OperationDescription, OperationConverterResult, onnx_mapping_from_node)
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


def _wrap_pad(registry, description, result, mapping) -> None:
    """Pad in reflect or edge mode goes to xc's any-rank module; every other Pad to onnx2torch's own."""
    from . import modules as m
    for version in (2, 11, 13, 18, 19, 21):
        key = description("", "Pad", version)
        original = registry.get(key)

        def convert(node, graph, original=original):
            mode = dict(node.attributes).get("mode", "constant")
            if mode in ("reflect", "edge"):
                return result(torch_module=m.Pad(mode, dict(node.attributes).get("pads")), onnx_mapping=mapping(node))
            if original is None:
                raise m.Unsupported(f"Pad '{node.name}' (domain ai.onnx): Pad-{version} in {mode} mode")
            return original(node, graph)
        registry[key] = convert


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
        registry[key] = convert
