"""Predicted Core ML compute unit per MIL op: ANE / GPU / CPU / unknown, each with its reason and public source.

Core ML decides placement at load time and does not say why; on Linux nothing can ask it. These rules encode what
is documented publicly. First matching rule wins; an op no rule covers is `unknown` — never guessed.
Evidence: predicted-rules. On macOS 14.4+ MLComputePlan replaces this table (evidence: reported).
"""
from __future__ import annotations

from dataclasses import dataclass

ANE, GPU, CPU, UNKNOWN = "ane", "gpu", "cpu", "unknown"


@dataclass(frozen=True)
class Prediction:
    unit: str
    reason: str
    source: str


# Source: coremltools API reference, coremltools.ComputeUnit — CPU_ONLY "limit the model to only use the CPU".
# https://apple.github.io/coremltools/source/coremltools.models.html#coremltools.ComputeUnit
SRC_COMPUTE_UNIT = "coremltools ComputeUnit docs (CPU_ONLY)"

# Source: coremltools guide "Typed Execution": the Neural Engine runs float16 only; float32 ops run on GPU or CPU.
# https://apple.github.io/coremltools/docs-guides/source/typed-execution.html
SRC_TYPED = "coremltools typed-execution guide (ANE computes fp16 only)"

# Source: hollance/neural-engine, docs/unsupported-layers.md — "RNN layers such as LSTM or GRU, gather, dilated
# convolutions, broadcastable and ND layers, custom layers" do not run on the ANE; Core ML then falls back, and
# "ANE → CPU → ANE" switching is observed for isolated unsupported layers.
SRC_HOLLANCE_UNSUPPORTED = "hollance/neural-engine docs/unsupported-layers.md"

# Source: hollance/neural-engine, docs/unsupported-layers.md, "Layers that do work": upsampling and deconvolution.
SRC_HOLLANCE_WORKS = "hollance/neural-engine docs/unsupported-layers.md (layers that do work)"

# Source: apple/ml-ane-transformers — the ANE-optimised reference transformer (ane_transformers/reference/*.py) and
# the article "Deploying Transformers on the Apple Neural Engine" build everything from conv2d (1x1), layer_norm,
# softmax, matmul/einsum, elementwise add/mul, split/concat and reshape/transpose, all executed on the ANE in fp16;
# reshape/transpose are allowed but cost memory copies (its principle 3).
SRC_ANE_TRANSFORMERS = "apple/ml-ane-transformers (ops of the ANE reference transformer)"

# Source: ONNX Runtime's CoreML EP op support list for MLProgram
# (onnxruntime/tools/mobile_helpers/coreml_supported_mlprogram_ops.md) — ops Core ML ML programs run on any unit,
# used here only to name ops a CoreML EP would hand to Core ML at all.
SRC_ORT_COREML = "ONNX Runtime coreml_supported_mlprogram_ops.md"

# Ops the ANE is known to execute in fp16 (ml-ane-transformers reference model, hollance's "layers that do work").
ANE_OPS = {
    "conv": SRC_ANE_TRANSFORMERS, "linear": SRC_ANE_TRANSFORMERS, "matmul": SRC_ANE_TRANSFORMERS,
    "einsum": SRC_ANE_TRANSFORMERS, "add": SRC_ANE_TRANSFORMERS, "sub": SRC_ANE_TRANSFORMERS,
    "mul": SRC_ANE_TRANSFORMERS, "real_div": SRC_ANE_TRANSFORMERS, "layer_norm": SRC_ANE_TRANSFORMERS,
    "softmax": SRC_ANE_TRANSFORMERS, "split": SRC_ANE_TRANSFORMERS, "concat": SRC_ANE_TRANSFORMERS,
    "reshape": SRC_ANE_TRANSFORMERS, "transpose": SRC_ANE_TRANSFORMERS, "expand_dims": SRC_ANE_TRANSFORMERS,
    "squeeze": SRC_ANE_TRANSFORMERS, "gelu": SRC_ANE_TRANSFORMERS, "reduce_mean": SRC_ANE_TRANSFORMERS,
    "rsqrt": SRC_ANE_TRANSFORMERS, "batch_norm": SRC_ANE_TRANSFORMERS, "relu": SRC_ANE_TRANSFORMERS,
    "relu6": SRC_ANE_TRANSFORMERS, "sigmoid": SRC_ANE_TRANSFORMERS, "tanh": SRC_ANE_TRANSFORMERS,
    "clip": SRC_ANE_TRANSFORMERS, "sigmoid_hard": SRC_ANE_TRANSFORMERS, "silu": SRC_ANE_TRANSFORMERS,
    "avg_pool": SRC_ANE_TRANSFORMERS, "max_pool": SRC_ANE_TRANSFORMERS, "reduce_sum": SRC_ANE_TRANSFORMERS,
    "slice_by_index": SRC_ANE_TRANSFORMERS, "slice_by_size": SRC_ANE_TRANSFORMERS,
    "conv_transpose": SRC_HOLLANCE_WORKS, "upsample_nearest_neighbor": SRC_HOLLANCE_WORKS,
    "upsample_bilinear": SRC_HOLLANCE_WORKS,
}

# Ops hollance lists as not running on the ANE.
ANE_UNSUPPORTED = {"gather": "gather", "gather_nd": "gather", "gather_along_axis": "gather",
                   "lstm": "RNN layer", "gru": "RNN layer", "rnn": "RNN layer"}


def predict(op_type: str, output_dtype: str | None, compute_units: str, attributes: dict | None = None) -> Prediction:
    attributes = attributes or {}
    if compute_units == "CPU_ONLY":
        return Prediction(CPU, "compute units CPU_ONLY", SRC_COMPUTE_UNIT)
    if op_type in ANE_UNSUPPORTED:
        return Prediction(CPU, f"{ANE_UNSUPPORTED[op_type]} does not run on the ANE; isolated unsupported layers "
                               "fall back to the CPU", SRC_HOLLANCE_UNSUPPORTED)
    if op_type == "conv" and any(d != 1 for d in attributes.get("dilations") or []):
        return Prediction(CPU, "dilated convolution does not run on the ANE", SRC_HOLLANCE_UNSUPPORTED)
    if output_dtype in ("int32", "int16", "int8", "uint8", "bool") and op_type not in ("cast", "const"):
        return Prediction(CPU, f"{output_dtype} computation: the ANE computes fp16 only", SRC_TYPED)
    if output_dtype == "fp32" and op_type in ANE_OPS:
        if compute_units == "CPU_AND_NE":
            return Prediction(CPU, "fp32 op: excluded from the ANE, and the GPU is not allowed", SRC_TYPED)
        return Prediction(GPU, "fp32 op: the ANE runs fp16 only; the GPU executes fp32", SRC_TYPED)
    if output_dtype == "fp16" and op_type in ANE_OPS:
        if compute_units == "CPU_AND_GPU":
            return Prediction(GPU, "fp16 op; the Neural Engine is not allowed by compute units", SRC_COMPUTE_UNIT)
        reason = "fp16 op the ANE executes"
        if op_type in ("reshape", "transpose"):
            reason += " (costs a memory copy on the ANE)"
        return Prediction(ANE, reason, ANE_OPS[op_type])
    return Prediction(UNKNOWN, f"no rule covers {op_type} ({output_dtype or 'untyped'})", "")


# -- neuralNetwork models (the format before ML programs) --------------------------------------------------------
# Source: coremltools guide "Typed Execution" — for a neuralNetwork model the precision is not in the model: Core ML
# computes in float32 on the CPU and in float16 on the GPU and the Neural Engine, whatever the weights' storage type.
# https://apple.github.io/coremltools/docs-guides/source/typed-execution.html
SRC_NN_TYPED = "coremltools typed-execution guide (neuralNetwork: fp16 on GPU/ANE, fp32 on CPU)"

# A neuralNetwork layer type (NeuralNetwork.proto's oneof name; activations by function) → the MIL op the rules
# above know it as. The ML program ops are the same computations (coremltools' own NN → MIL mapping of these layers,
# coremltools/converters/mil/backend/nn/op_mapping.py, maps each MIL op back onto these layers). A layer not listed
# is `unknown`.
NN_LAYER_AS_MIL = {
    "convolution": "conv", "innerProduct": "linear", "batchedMatmul": "matmul", "add": "add", "addBroadcastable": "add",
    "multiply": "mul", "multiplyBroadcastable": "mul", "subtractBroadcastable": "sub",
    "divideBroadcastable": "real_div",
    "batchnorm": "batch_norm", "layerNormalization": "layer_norm", "softmax": "softmax", "softmaxND": "softmax",
    "concat": "concat", "concatND": "concat", "split": "split", "splitND": "split", "reshape": "reshape",
    "reshapeStatic": "reshape", "flatten": "reshape", "flattenTo2D": "reshape", "permute": "transpose",
    "transpose": "transpose", "squeeze": "squeeze", "expandDims": "expand_dims", "reduceMean": "reduce_mean",
    "reduceSum": "reduce_sum", "upsample": "upsample_nearest_neighbor", "sliceStatic": "slice_by_index",
    "slice": "slice_by_index", "clip": "clip", "gelu": "gelu", "gather": "gather", "gatherND": "gather_nd",
    "gatherAlongAxis": "gather_along_axis", "uniDirectionalLSTM": "lstm", "biDirectionalLSTM": "lstm", "gru": "gru",
    "simpleRecurrent": "rnn", "activation.ReLU": "relu", "activation.sigmoid": "sigmoid", "activation.tanh": "tanh",
    "activation.sigmoidHard": "sigmoid_hard",
}


def predict_neural_network_layer(layer_type: str, compute_units: str, attributes: dict | None = None) -> Prediction:
    """A neuralNetwork layer's unit: its MIL twin's rule at the precision Core ML computes it in (fp16 off the CPU)."""
    attributes = attributes or {}
    if layer_type == "custom":
        return Prediction(CPU, "custom layer: runs the app's own CPU code, never on the ANE", SRC_HOLLANCE_UNSUPPORTED)
    if layer_type == "pooling":
        op = "max_pool" if attributes.get("pooling") == "MAX" else "avg_pool"
    else:
        op = NN_LAYER_AS_MIL.get(layer_type)
    if op is None:
        return Prediction(UNKNOWN, f"no rule covers the neuralNetwork layer {layer_type}", "")
    p = predict(op, "fp32" if compute_units == "CPU_ONLY" else "fp16", compute_units, attributes)
    if p.unit == ANE:
        return Prediction(ANE, f"{p.reason}; a neuralNetwork layer computes in fp16 off the CPU ({SRC_NN_TYPED})",
                          p.source)
    return p
