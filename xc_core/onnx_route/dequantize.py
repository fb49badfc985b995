"""ONNX Runtime's dynamic int8 (quantize_dynamic) as the float model it stands for, before onnx2torch converts it.

quantize_dynamic writes each Conv / MatMul as

    x ─DynamicQuantizeLinear─▶ (xq, x_scale, x_zero_point)
    ConvInteger(xq, wq, x_zero_point, w_zero_point) [─Add(quantized bias)] ─Cast(float)─ Mul(x_scale·w_scale)

(onnxruntime/python/tools/quantization/operators/conv.py and matmul.py). Computed in float as written, the integer
sums it holds before the last Mul reach millions, past float16's 65,504: a Core ML or Core AI program in fp16
would overflow on xc's rendering, not on anything the model does. So each such chain becomes

    Conv(DequantizeLinear(xq, x_scale, x_zero_point), (wq − w_zero_point)·w_scale) [+ Cast(bias)·scale]

— the same values up to float rounding (the activations keep their 8-bit rounding; the weights are the
dequantized constants), at the magnitudes the model's float original has. A chain of another shape is left to the
integer-in-float converters (modules.ConvInteger, MatMulInteger).

New nodes are named `<the integer node>/<part>`, so they trace to it (graph_prep.origin_of).
"""
from __future__ import annotations

import numpy as np

INTEGER_OPS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul"}
FLOAT = 1      # TensorProto.FLOAT
_CONV_ATTRIBUTES = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def dequantize_integer_ops(ir_model) -> list[str]:
    """Rewrites every ConvInteger / MatMulInteger chain of quantize_dynamic's shape in `ir_model` (onnx-ir, after
    constant folding); a note naming how many, or none."""
    done = {op: 0 for op in INTEGER_OPS}
    for node in [n for n in ir_model.graph if n.op_type in INTEGER_OPS and n.domain in ("", "ai.onnx")]:
        if _rewrite(ir_model.graph, node):
            done[node.op_type] += 1
    if not any(done.values()):
        return []
    counts = ", ".join(f"{k} {op}" for op, k in done.items() if k)
    return [f"{counts} of ONNX Runtime's dynamic int8 computed as {'/'.join(INTEGER_OPS[o] for o in done if done[o])} "
            "on dequantized values (the activation's 8-bit rounding kept, weights (w − zero point)·scale): the "
            "integer sums, in float, would overflow float16"]


def _rewrite(graph, node) -> bool:
    import onnx_ir
    chain = _chain(node)
    if chain is None:
        return False
    quantize, weight, bias_add, cast, scale_mul, scale = chain
    xq, x_scale, x_zero_point = quantize.outputs
    w_zero_point = node.inputs[3] if len(node.inputs) > 3 else None
    wq = weight.const_value.numpy().astype(np.float32)
    wz = w_zero_point.const_value.numpy().astype(np.float32) if w_zero_point is not None else np.float32(0)
    w_scale = ws = _weight_scale(scale, x_scale).astype(np.float32)
    if node.op_type == "ConvInteger":      # per output channel: [out] against [out, in, k…]
        wz, ws = (v.reshape((-1,) + (1,) * (wq.ndim - 1)) if v.size > 1 else v for v in (wz, ws))
    w_float = onnx_ir.Value(name=f"{node.name}/dequantized_weight",
                            const_value=onnx_ir.tensor((wq - wz) * ws, name=f"{node.name}/dequantized_weight"))
    graph.register_initializer(w_float)
    x_float = onnx_ir.node("DequantizeLinear", [xq, x_scale, x_zero_point], name=f"{node.name}/dequantized_input")
    attributes = {a.name: a for a in node.attributes.values() if a.name in _CONV_ATTRIBUTES}
    computed = onnx_ir.node(INTEGER_OPS[node.op_type], [x_float.outputs[0], w_float], name=f"{node.name}/float")
    for a in attributes.values():
        computed.attributes[a.name] = a
    new = [x_float, computed]
    result = computed.outputs[0]
    if bias_add is not None:
        # (sum + bias_q)·scale = sum·scale + bias_q·scale, the bias term computed at float magnitudes
        bias_q = next(v for v in bias_add.inputs if v is not node.outputs[0])
        term, made = _bias_term(graph, node.name, bias_q, scale, x_scale, w_scale)
        added = onnx_ir.node("Add", [result, term], name=f"{node.name}/bias_add")
        new += made + [added]
        result = added.outputs[0]
    graph.insert_before(node, new)
    out = scale_mul.outputs[0]
    name = out.name
    out.name = f"{name}/integer"
    result.name, result.type, result.shape = name, out.type, out.shape
    out.replace_all_uses_with(result, replace_graph_outputs=True)
    for dead in (scale_mul, cast, bias_add, node):
        if dead is not None and not any(v.uses() for v in dead.outputs):
            graph.remove(dead, safe=True)
    return True


def _bias_term(graph, name: str, bias_q, scale, x_scale, w_scale) -> tuple:
    """bias_q·scale as a float value, and the nodes that compute it. quantize_dynamic's bias, quantized at run time
    (bias_q = int32(floor(bias / scale)), reshaped), is the float bias it quantizes: they differ by less than one
    step of `scale`, far below the activation's 8-bit step — and bias / scale itself overflows float16. A constant
    bias_q is folded with the weight scale (bias_q·w_scale, then ·x_scale at run time)."""
    import onnx_ir
    bias = _float_bias(bias_q, scale, x_scale, w_scale)
    if bias is None and bias_q.const_value is not None:
        folded = bias_q.const_value.numpy().astype(np.float32) * w_scale
        held = onnx_ir.Value(name=f"{name}/bias_times_weight_scale", const_value=onnx_ir.tensor(
            folded.astype(np.float32), name=f"{name}/bias_times_weight_scale"))
        graph.register_initializer(held)
        scaled = onnx_ir.node("Mul", [held, x_scale], name=f"{name}/bias_scaled")
        return scaled.outputs[0], [scaled]
    if bias is not None:
        held = onnx_ir.Value(name=f"{name}/float_bias", const_value=onnx_ir.tensor(bias, name=f"{name}/float_bias"))
        graph.register_initializer(held)
        return held, []
    as_float = onnx_ir.node("Cast", [bias_q], {"to": FLOAT}, name=f"{name}/bias")
    scaled = onnx_ir.node("Mul", [as_float.outputs[0], scale], name=f"{name}/bias_scaled")
    return scaled.outputs[0], [as_float, scaled]


def _float_bias(bias_q, scale, x_scale, w_scale):
    """The constant float bias (with its Reshape applied) when bias_q = [Reshape](Cast(Floor(Div(bias, scale)))),
    `scale` being the chain's own or another Mul(x_scale, w_scale) (quantize_dynamic writes one of each), else
    None."""
    shape = None
    producer = bias_q.producer()
    if producer is not None and producer.op_type == "Reshape" and len(producer.inputs) > 1 \
            and producer.inputs[1] is not None and producer.inputs[1].const_value is not None:
        shape = [int(d) for d in producer.inputs[1].const_value.numpy().reshape(-1)]
        if 0 in shape:
            return None          # ONNX's "copy this dim" has no numpy spelling
        producer = producer.inputs[0].producer()
    steps = []
    for op in ("Cast", "Floor", "Div"):
        if producer is None or producer.op_type != op:
            return None
        steps.append(producer)
        if op != "Div":
            producer = producer.inputs[0].producer()
    divide = steps[-1]
    bias, by = divide.inputs[0], divide.inputs[1]
    if bias is None or bias.const_value is None or by is None:
        return None
    if by is not scale:
        same = _weight_scale(by, x_scale)
        if same is None or same.shape != w_scale.shape or not np.array_equal(same.astype(np.float32), w_scale):
            return None
    value = bias.const_value.numpy().astype(np.float32)
    return value.reshape(shape) if shape is not None else value


def _chain(node):
    """(DynamicQuantizeLinear, weight, bias Add or None, Cast, the scale Mul, the scale) when `node` is the head of
    quantize_dynamic's chain with constant weights, else None."""
    inputs = list(node.inputs) + [None] * (4 - len(node.inputs))
    xq, weight, x_zero_point, w_zero_point = inputs[:4]
    quantize = xq.producer() if xq is not None else None
    if quantize is None or quantize.op_type != "DynamicQuantizeLinear" or x_zero_point is not quantize.outputs[2]:
        return None
    if weight is None or weight.const_value is None or (w_zero_point is not None and w_zero_point.const_value is None):
        return None
    follower = _only_consumer(node.outputs[0])
    bias_add = None
    if follower is not None and follower.op_type == "Add":
        bias_add, follower = follower, _only_consumer(follower.outputs[0])
    if follower is None or follower.op_type != "Cast" or _cast_to(follower) != FLOAT:
        return None
    cast, scale_mul = follower, _only_consumer(follower.outputs[0])
    if scale_mul is None or scale_mul.op_type != "Mul":
        return None
    scale = next((v for v in scale_mul.inputs if v is not cast.outputs[0]), None)
    if scale is None or _weight_scale(scale, quantize.outputs[1]) is None:
        return None
    return quantize, weight, bias_add, cast, scale_mul, scale


def _weight_scale(scale, x_scale):
    """w_scale when `scale` is Mul(x_scale, w_scale) with w_scale a constant, else None."""
    producer = scale.producer()
    if producer is None or producer.op_type != "Mul" or x_scale not in producer.inputs:
        return None
    other = next((v for v in producer.inputs if v is not x_scale), None)
    return other.const_value.numpy() if other is not None and other.const_value is not None else None


def _cast_to(cast) -> int | None:
    to = cast.attributes.get("to")
    return None if to is None else int(to.value)


def _only_consumer(value):
    users = [use.node for use in value.uses()]
    if len(users) != 1 or value.is_graph_output():
        return None
    return users[0]
