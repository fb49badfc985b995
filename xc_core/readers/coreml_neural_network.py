"""Core ML `neuralNetwork` models (the format before ML programs: most Core ML models published before 2022) → IR:
one node per layer of the spec, read with coremltools' protobuf classes (`Model_pb2`), nothing compiled.

Each node carries the layer's type (`convolution`, `innerProduct`, `activation` …, the spec's oneof name; an
activation is named by its function, `activation.ReLU`), the blob names it reads and writes with the shapes the
spec declares (inputTensor / outputTensor, spec v4+; the model's own inputs and outputs from its description), and
its weights' storage precision: fp32 (floatValue), fp16 (float16Value) or quantized (rawValue with quantization
params) — what `quantize_weights` and the converters' fp16 option write.
"""
from __future__ import annotations

from ..ir import COMPUTE, CONSTANT, Graph, Node, TensorInfo

NN_TYPES = ("neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor")
# WeightParams fields of each layer type that hold its weights.
_WEIGHT_FIELDS = ("weights", "bias", "gamma", "beta", "mean", "variance", "scale", "alpha", "inputGateWeightMatrix",
                  "updateGateWeightMatrix", "forgetGateWeightMatrix", "outputGateWeightMatrix")
_ARRAY_DTYPES = {65568: "float32", 65552: "float16", 131104: "int32", 65600: "float64"}


def network_of(spec):
    kind = spec.WhichOneof("Type")
    return getattr(spec, kind) if kind in NN_TYPES else None


def layer_type(layer) -> str:
    kind = layer.WhichOneof("layer") or "unknown"
    if kind == "activation":
        return f"activation.{layer.activation.WhichOneof('NonlinearityType') or 'unknown'}"
    return kind


def weight_precision(params) -> str | None:
    """fp32 / fp16 / int<n> (linear or lookup-table quantized) of one WeightParams, None when empty."""
    if len(params.floatValue):
        return "fp32"
    if len(params.float16Value):
        return "fp16"
    if len(params.rawValue):
        bits = params.quantization.numberOfBits if params.HasField("quantization") else 8
        return f"int{bits}"
    return None


def layer_weights(layer) -> list[str]:
    body = getattr(layer, layer.WhichOneof("layer") or "", None)
    found = []
    for name in _WEIGHT_FIELDS:
        try:
            if body is not None and body.HasField(name):
                p = weight_precision(getattr(body, name))
                if p and p not in found:
                    found.append(p)
        except ValueError:          # a field this layer type does not have
            continue
    return found


def neural_network_graph(spec, stage: str = "coreml-nn") -> Graph:
    net = network_of(spec)
    if net is None:
        raise ValueError(f"not a neuralNetwork model ({spec.WhichOneof('Type')})")
    declared = {}
    for feature in list(spec.description.input) + list(spec.description.output):
        arr = feature.type.multiArrayType
        shape = [int(d) for d in arr.shape] or None
        if feature.type.WhichOneof("Type") == "imageType":
            img = feature.type.imageType
            shape = [1, 1 if img.colorSpace == 10 else 3, int(img.height), int(img.width)]
        declared[feature.name] = (shape, _ARRAY_DTYPES.get(arr.dataType, "float32"))

    def tensor(name: str, described=None) -> TensorInfo:
        if name in declared:
            return TensorInfo(name, declared[name][0], declared[name][1])
        dims = [int(d) for d in described.dimValue] if described is not None and len(described.dimValue) else None
        return TensorInfo(name, dims, "float32")

    g = Graph(name=spec.description.metadata.shortDescription[:80] or "neuralNetwork", stage=stage)
    g.inputs = [tensor(f.name) for f in spec.description.input]
    g.outputs = [tensor(f.name) for f in spec.description.output]
    for layer in net.layers:
        ins = [tensor(n, layer.inputTensor[k] if k < len(layer.inputTensor) else None)
               for k, n in enumerate(layer.input)]
        outs = [tensor(n, layer.outputTensor[k] if k < len(layer.outputTensor) else None)
                for k, n in enumerate(layer.output)]
        attrs: dict = {}
        weights = layer_weights(layer)
        if weights:
            attrs["weight_dtypes"] = weights
        kind = layer.WhichOneof("layer")
        if kind == "convolution":
            conv = layer.convolution
            attrs["dilations"] = [int(d) for d in conv.dilationFactor] or [1, 1]
            attrs["groups"] = int(conv.nGroups)
            attrs["kernel_size"] = [int(k) for k in conv.kernelSize]
            attrs["channels"] = [int(conv.kernelChannels), int(conv.outputChannels)]     # in (per group), out
        if kind == "innerProduct":
            attrs["channels"] = [int(layer.innerProduct.inputChannels), int(layer.innerProduct.outputChannels)]
        if kind == "pooling":
            attrs["pooling"] = {0: "MAX", 1: "AVERAGE", 2: "L2"}.get(int(layer.pooling.type), "?")
        if kind == "custom":
            attrs["custom_class"] = layer.custom.className
        precision = "fp16" if weights == ["fp16"] else weights[0] if weights and weights[0].startswith("int") else \
            "fp32"
        # A constant layer only materialises its weights (what a const is in a MIL program).
        role = CONSTANT if kind in ("loadConstant", "loadConstantND") else COMPUTE
        g.nodes.append(Node(id=layer.name, op_type=layer_type(layer), domain="coreml-nn", kind=role, inputs=ins,
                            outputs=outs, attributes=attrs, precision=precision,
                            source_ops=[layer.name] if role == COMPUTE else []))
    return g


def summary(spec) -> dict:
    """The report's facts about the model: type, spec version, layer count and types, weight precisions."""
    net = network_of(spec)
    types: dict[str, int] = {}
    precisions: dict[str, int] = {}
    for layer in net.layers:
        t = layer_type(layer)
        types[t] = types.get(t, 0) + 1
        for p in layer_weights(layer):
            precisions[p] = precisions.get(p, 0) + 1
    top = ", ".join(f"{k} ×{v}" for k, v in sorted(types.items(), key=lambda kv: -kv[1])[:8])
    weights = ", ".join(f"{k} in {v} layer(s)" for k, v in sorted(precisions.items())) or "no weights"
    out = {"coreml_type": spec.WhichOneof("Type"), "specification_version": int(spec.specificationVersion),
           "layers": len(net.layers), "layer_types": types, "weight_precisions": precisions,
           "summary": f"{len(net.layers)} layers ({top}); weights: {weights}; spec version "
                      f"{spec.specificationVersion}", "evidence": "reported"}
    if spec.WhichOneof("Type") == "neuralNetworkClassifier":      # a classifier carries its class labels
        kind = net.WhichOneof("ClassLabels")
        labels = [str(v) for v in getattr(net, kind).vector] if kind else []
        if labels:
            first = [label[:MAX_LABEL_CHARS] for label in labels[:FIRST_LABELS]]
            out["class_labels"] = {"count": len(labels), "first": first}
            more = ", …" if len(labels) > len(first) else ""
            out["summary"] += f"; {len(labels)} class labels ({', '.join(first)}{more})"
    return out


FIRST_LABELS = 5
MAX_LABEL_CHARS = 80
