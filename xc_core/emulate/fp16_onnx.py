"""fp16 emulation of a mobile EP's partitions on ONNX Runtime's CPU EP, with a model that is checked before it runs.

The accelerated nodes should compute in fp16 and the CPU-EP nodes in fp32. onnxconverter-common converts exactly
that (`node_block_list`), but on real models it can write invalid graphs (initializers shared with an If's
subgraph, ops it cannot type). So the emulation is a ladder, each rung checked with `onnx.checker` (full type
check), an ORT session load and a run, and the report names the rung that ran:

1. `converted`        onnxconverter-common, accelerated nodes in fp16, `keep_io_types`;
2. `converted-partly` the same with the op types the converter mishandles kept in fp32 (`op_block_list`), named;
3. `rounded`          the fp32 model with every float tensor an accelerated node produces, and every weight only
                      accelerated nodes read, rounded to fp16 (Cast to fp16 and back): fp16 storage, fp32
                      arithmetic — always valid, and labelled as the weaker emulation it is.

If every rung fails, the error is xc's emulation failing, not the model: the caller keeps the target's partitions
and says so in its numerics block.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# Op types onnxconverter-common types wrongly inside fp16 partitions of real models (control flow whose
# subgraphs read outer-scope initializers, recurrent ops whose optional inputs it drops, normalization ops whose
# scale must match the input type, shape-producing ops), on top of its own default block list.
CONVERTER_UNSAFE_OPS = ("If", "Loop", "Scan", "LSTM", "GRU", "RNN", "LayerNormalization",
                        "SimplifiedLayerNormalization", "SkipLayerNormalization", "Range", "Resize", "TopK",
                        "NonMaxSuppression", "RoiAlign", "Einsum", "CumSum")


@dataclass
class Emulation:
    path: str
    outputs: dict
    method: str                      # converted | converted-partly | rounded
    kept_fp32_ops: list[str] = field(default_factory=list)
    attempts: list[dict] = field(default_factory=list)


class EmulationFailed(RuntimeError):
    def __init__(self, attempts: list[dict]):
        self.attempts = attempts
        super().__init__("; ".join(f"{a['method']}: {a['error']}" for a in attempts))


def emulate_fp16(model, accelerated: set[str], workdir: str, run: Callable[[str], dict]) -> Emulation:
    """`model` (the partitioned fp32 graph, named nodes), `accelerated` node names; `run(path)` runs a model file
    and returns its outputs. Returns the first rung that passes."""
    import onnx
    from ..errors import summarize_error
    cpu_nodes = [n.name for n in model.graph.node if n.name not in accelerated]
    attempts = []
    rungs = [("converted", lambda: _converted(model, cpu_nodes, accelerated, ())),
             ("converted-partly", lambda: _converted(model, cpu_nodes, accelerated, CONVERTER_UNSAFE_OPS)),
             ("rounded", lambda: _rounded(model, accelerated))]
    for method, build in rungs:
        path = os.path.join(workdir, f"model.fp16-emulation.{method}.onnx")
        try:
            m16 = build()
            onnx.checker.check_model(m16, full_check=True)
            onnx.save(m16, path)
            outputs = run(path)
        except Exception as e:  # noqa: BLE001 — the next rung is the answer
            attempts.append({"method": method, "error": summarize_error(str(e), 240) or type(e).__name__})
            if os.path.exists(path):
                os.remove(path)
            continue
        attempts.append({"method": method, "error": None})
        kept = sorted({n.op_type for n in model.graph.node if n.name in accelerated
                       and n.op_type in CONVERTER_UNSAFE_OPS}) if method == "converted-partly" else []
        return Emulation(path, outputs, method, kept, attempts)
    raise EmulationFailed(attempts)


def _converted(model, cpu_nodes: list[str], accelerated: set[str], extra_blocked: tuple[str, ...]):
    import onnx
    from onnxconverter_common import float16
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]  # stale fp32 value_info would contradict the converted nodes
    _split_shared_initializers(m, accelerated)
    blocked_ops = list(float16.DEFAULT_OP_BLOCK_LIST) + list(extra_blocked)
    m16 = float16.convert_float_to_float16(m, keep_io_types=True, node_block_list=cpu_nodes,
                                           op_block_list=blocked_ops)
    # onnxconverter-common types a converted Cast's output as fp16 but leaves its `to` at float: inside an fp16
    # partition a cast to float is a cast to float16.
    for node in m16.graph.node:
        if node.op_type == "Cast" and node.name in accelerated and node.op_type not in extra_blocked:
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                    a.i = onnx.TensorProto.FLOAT16
    return m16


def _split_shared_initializers(m, accelerated: set[str]) -> None:
    """A float weight read by accelerated and CPU nodes alike is converted to fp16 for both by the converter; the
    CPU nodes get their own fp32 copy instead."""
    from onnx import TensorProto
    inits = {i.name: i for i in m.graph.initializer if i.data_type == TensorProto.FLOAT}
    readers: dict[str, set[str]] = {}
    for n in m.graph.node:
        for t in n.input:
            if t in inits:
                readers.setdefault(t, set()).add(n.name)
    for name, who in readers.items():
        if who & accelerated and who - accelerated:
            copy = m.graph.initializer.add()
            copy.CopyFrom(inits[name])
            copy.name = f"{name}.fp32_for_cpu"
            for n in m.graph.node:
                if n.name not in accelerated:
                    for i, t in enumerate(n.input):
                        if t == name:
                            n.input[i] = copy.name


def _rounded(model, accelerated: set[str]):
    """fp32 graph; each float output of an accelerated node, and each float weight read only by accelerated
    nodes, goes through fp16."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.shape_inference import infer_shapes
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inferred = infer_shapes(m)
    float_tensors = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                     if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT}
    readers: dict[str, set[str]] = {}
    for n in m.graph.node:
        for t in n.input:
            readers.setdefault(t, set()).add(n.name)
    for init in m.graph.initializer:
        if init.data_type == TensorProto.FLOAT and readers.get(init.name) and readers[init.name] <= accelerated:
            a = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(a, init.name))
    graph_outputs = {o.name for o in m.graph.output}
    new_nodes = []
    for n in m.graph.node:
        new_nodes.append(n)
        if n.name not in accelerated:
            continue
        for i, out in enumerate(n.output):
            if out not in float_tensors:
                continue
            raw = f"{out}.fp32"
            n.output[i] = raw
            new_nodes.append(helper.make_node("Cast", [raw], [f"{out}.fp16"], to=TensorProto.FLOAT16,
                                              name=f"{n.name}.round_fp16.{i}"))
            new_nodes.append(helper.make_node("Cast", [f"{out}.fp16"], [out], to=TensorProto.FLOAT,
                                              name=f"{n.name}.back_fp32.{i}"))
    del m.graph.node[:]
    m.graph.node.extend(new_nodes)
    del m.graph.value_info[:]
    assert graph_outputs == {o.name for o in m.graph.output}
    return m
