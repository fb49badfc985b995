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

What "fp16" means here, and what keeps it true (each checked by `bench/emulator_conformance.py` against ONNX's
backend node tests):

- fp16 storage always: every float tensor an accelerated node produces holds an fp16 value. ONNX Runtime's CPU EP
  has no fp16 kernel for most ops; it computes such a node in fp32 between casts it inserts, and then folds those
  casts together with the model's own (fp32 → fp16 → fp32 becomes nothing), so the converted graph would silently
  run in fp32 with no fp16 rounding at all. Two Identities in a row after every fp16 tensor (`_guard_fp16_tensors`)
  keep each rounding (ORT has fp16 kernels for Identity; `run` must not optimize the graph, or ORT removes them). One
  is not enough: ORT also runs in fp32 an fp16 node all of whose fp16 inputs and outputs connect to nodes it casts
  to fp32 (its InsertCastTransformer's "isolated fp16 node"), so a lone Identity between two such nodes is cast
  away with the rounding; each of a pair has the other as a neighbour that stays fp16. A graph output is never
  "isolated", which is why the rounding came back only where an intermediate was added as an output — the per-layer
  values and the output figure then came from two different computations. Every rung's float outputs of
  accelerated nodes are checked to be fp16 values after the run.
- fp16 arithmetic where ORT's CPU EP has an fp16 kernel, fp32 arithmetic on the fp16 values elsewhere (`converted`)
  or everywhere (`rounded`).
- Nodes the EP does not take stay fp32, outputs keep their declared dtypes (the converter types a graph output an
  fp32 node produces as fp16: restored), and weights convert at fp16's own range (the converter's default clamps
  them to ±10,000 and raises tiny ones to 1e-7).
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

# fp16's own range for the weights the converter rounds: the largest finite value, and no lower clamp (IEEE
# rounding, subnormals included)
FP16_MAX = 65504.0


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
    with graph optimizations off and returns its outputs. Returns the first rung that passes."""
    import onnx
    from onnxconverter_common import float16
    from ..errors import summarize_error
    cpu_nodes = [n.name for n in model.graph.node if n.name not in accelerated]
    attempts = []
    default_blocked = tuple(float16.DEFAULT_OP_BLOCK_LIST)
    rungs = [("converted", default_blocked, lambda: _converted(model, cpu_nodes, accelerated, default_blocked)),
             ("converted-partly", default_blocked + CONVERTER_UNSAFE_OPS,
              lambda: _converted(model, cpu_nodes, accelerated, default_blocked + CONVERTER_UNSAFE_OPS)),
             ("rounded", (), lambda: _rounded(model, accelerated))]
    for method, blocked, build in rungs:
        path = os.path.join(workdir, f"model.fp16-emulation.{method}.onnx")
        try:
            m16 = build()
            onnx.checker.check_model(m16, full_check=True)
            onnx.save(m16, path)
            outputs = run(path)
            _check_outputs(model, outputs, {n.name for n in model.graph.node
                                            if n.name in accelerated and n.op_type not in blocked})
        except Exception as e:  # noqa: BLE001 — the next rung is the answer
            attempts.append({"method": method, "error": summarize_error(str(e), 240) or type(e).__name__})
            if os.path.exists(path):
                os.remove(path)
            continue
        attempts.append({"method": method, "error": None})
        # accelerated nodes the rung left in fp32: named, so the numbers say what they are
        kept = sorted({n.op_type for n in model.graph.node if n.name in accelerated and n.op_type in blocked})
        return Emulation(path, outputs, method, kept, attempts)
    raise EmulationFailed(attempts)


def _check_outputs(model, outputs: dict, in_fp16: set[str]) -> None:
    """Each output has the dtype the model declares, and each float output a node in fp16 produces holds fp16
    values (if not, ONNX Runtime ran that part in fp32: the emulation did not happen)."""
    from onnx import helper
    produced_by = {t: n.name for n in model.graph.node for t in n.output}
    for out in model.graph.output:
        value = outputs.get(out.name)
        if value is None:
            raise RuntimeError(f"the emulation lost output {out.name!r}")
        declared = helper.tensor_dtype_to_np_dtype(out.type.tensor_type.elem_type) \
            if out.type.HasField("tensor_type") else None
        if declared is not None and np.asarray(value).dtype != declared:
            raise RuntimeError(f"output {out.name!r} came back as {np.asarray(value).dtype}, not the declared "
                               f"{np.dtype(declared)}")
        if produced_by.get(out.name) in in_fp16 and np.asarray(value).dtype == np.float32:  # doubles stay doubles
            finite = np.asarray(value)[np.isfinite(value)]
            if not np.array_equal(finite.astype(np.float16).astype(finite.dtype), finite):
                raise RuntimeError(f"output {out.name!r} holds values fp16 cannot: ONNX Runtime computed it "
                                   "without the fp16 rounding")


def _converted(model, cpu_nodes: list[str], accelerated: set[str], blocked_ops: tuple[str, ...]):
    import onnx
    from onnxconverter_common import float16
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]  # stale fp32 value_info would contradict the converted nodes
    _split_shared_initializers(m, accelerated)
    m16 = float16.convert_float_to_float16(m, keep_io_types=True, node_block_list=cpu_nodes,
                                           op_block_list=list(blocked_ops), min_positive_val=0.0,
                                           max_finite_val=FP16_MAX)
    # onnxconverter-common types a converted Cast's output as fp16 but leaves its `to` at float: inside an fp16
    # partition a cast to float is a cast to float16.
    for node in m16.graph.node:
        if node.op_type == "Cast" and node.name in accelerated and node.op_type not in blocked_ops:
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                    a.i = onnx.TensorProto.FLOAT16
    _drop_fp32_round_trips(model, m16)
    _restore_fp32_outputs(model, m16)
    _guard_fp16_tensors(m16)
    return m16


def _drop_fp32_round_trips(original, m16) -> None:
    """Between two nodes left in fp32 the converter writes Cast(fp16) → Cast(fp32) and removes the pair only when
    the first node has one reader: an fp32 value with several readers (a residual connection) is rounded to fp16
    on its way from one CPU node to the next. Readers of such a round trip read the fp32 value again; the model's
    own casts (named in the original) are left alone."""
    from onnx import TensorProto, helper
    own = {n.name for n in original.graph.node}
    graph_outputs = {o.name for o in m16.graph.output}

    def cast_to(node, dtype) -> bool:
        return node.op_type == "Cast" and node.name not in own and any(
            a.name == "to" and a.i == dtype for a in node.attribute)

    producers = {t: n for n in m16.graph.node for t in n.output}
    replaced: dict[str, str] = {}
    for node in list(m16.graph.node):
        if not cast_to(node, TensorProto.FLOAT):
            continue
        down = producers.get(node.input[0])
        if down is None or not cast_to(down, TensorProto.FLOAT16):
            continue
        if node.output[0] in graph_outputs:   # keep the name: an Identity of the fp32 value
            node.op_type = "Identity"
            del node.attribute[:]
            node.input[0] = down.input[0]
        else:
            replaced[node.output[0]] = down.input[0]
            m16.graph.node.remove(node)
    for node in m16.graph.node:
        for i, t in enumerate(node.input):
            if t in replaced:
                node.input[i] = replaced[t]
    read = {t for n in m16.graph.node for t in n.input} | graph_outputs
    for node in list(m16.graph.node):   # a Cast(fp16) nobody reads any more
        if cast_to(node, TensorProto.FLOAT16) and node.output[0] not in read:
            m16.graph.node.remove(node)


def _restore_fp32_outputs(original, m16) -> None:
    """The converter casts the output of a node it leaves in fp32 to fp16 (for fp16 readers) and, when that output
    is a graph output, leaves the graph output typed fp16 as well. Such an output gets the node's fp32 value again;
    fp16 readers inside the graph keep the cast."""
    from onnx import TensorProto, helper
    declared = {o.name: o.type.tensor_type.elem_type for o in original.graph.output}
    producers = {t: n for n in m16.graph.node for t in n.output}
    for out in m16.graph.output:
        if declared.get(out.name) != TensorProto.FLOAT or out.type.tensor_type.elem_type != TensorProto.FLOAT16:
            continue
        cast = producers.get(out.name)
        if cast is None or cast.op_type != "Cast":
            raise RuntimeError(f"the converter typed output {out.name!r} as fp16 and no cast to follow")
        internal = f"{out.name}.fp16"
        readers = 0
        for node in m16.graph.node:
            for i, t in enumerate(node.input):
                if t == out.name:
                    node.input[i] = internal
                    readers += 1
        if readers:
            cast.output[0] = internal
        else:
            m16.graph.node.remove(cast)
        # last in the graph: nothing inside reads the graph output's name any more
        m16.graph.node.append(helper.make_node("Identity", [cast.input[0]], [out.name],
                                               name=f"{out.name}.fp32_output"))
        out.type.tensor_type.elem_type = TensorProto.FLOAT


def _guard_fp16_tensors(m16) -> None:
    """Two Identities after every fp16 tensor a node produces (`<t>.unguarded` → `<t>.fp16_guard` → `<t>`), so
    that ONNX Runtime's CPU EP materializes it in fp16 instead of folding the rounding away (see the module
    docstring: a single Identity is an "isolated fp16 node" ORT runs in fp32). Consumers keep their input names."""
    from onnx import TensorProto, helper
    from onnx.shape_inference import infer_shapes
    inferred = infer_shapes(m16)
    fp16 = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT16}
    nodes = []
    for node in m16.graph.node:
        nodes.append(node)
        for i, t in enumerate(node.output):
            if t in fp16:
                raw, mid = f"{t}.unguarded", f"{t}.fp16_guard"
                node.output[i] = raw
                nodes.append(helper.make_node("Identity", [raw], [mid], name=f"{t}.fp16_guard.0"))
                nodes.append(helper.make_node("Identity", [mid], [t], name=f"{t}.fp16_guard.1"))
    del m16.graph.node[:]
    m16.graph.node.extend(nodes)


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
    """fp32 graph in which every float tensor an accelerated node reads or produces is an fp16 value: its float
    outputs, the float values it reads from outside the partition (graph inputs, CPU nodes — the boundary cast) and
    the weights only accelerated nodes read go through fp16 (explicit Cast pairs, which ONNX Runtime keeps)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.shape_inference import infer_shapes
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inferred = infer_shapes(m)
    float_tensors = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                     + list(inferred.graph.input)
                     if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.FLOAT}
    readers: dict[str, set[str]] = {}
    for n in m.graph.node:
        for t in n.input:
            readers.setdefault(t, set()).add(n.name)
    initializers = set()
    for init in m.graph.initializer:
        initializers.add(init.name)
        if init.data_type == TensorProto.FLOAT and readers.get(init.name) and readers[init.name] <= accelerated:
            a = numpy_helper.to_array(init).astype(np.float16).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(a, init.name))
    produced_inside = {t for n in m.graph.node if n.name in accelerated for t in n.output}

    def round_pair(src: str, dst: str, name: str) -> list:
        return [helper.make_node("Cast", [src], [f"{dst}.fp16"], to=TensorProto.FLOAT16, name=f"{name}.round_fp16"),
                helper.make_node("Cast", [f"{dst}.fp16"], [dst], to=TensorProto.FLOAT, name=f"{name}.back_fp32")]

    graph_outputs = {o.name for o in m.graph.output}
    entering: dict[str, str] = {}   # a float value from outside the partition → its fp16-rounded copy
    new_nodes = []
    for n in m.graph.node:
        if n.name in accelerated:
            for i, t in enumerate(n.input):
                if t and t in float_tensors and t not in produced_inside and t not in initializers:
                    if t not in entering:
                        entering[t] = f"{t}.entering_fp16"
                        new_nodes.extend(round_pair(t, entering[t], f"{t}.boundary"))
                    n.input[i] = entering[t]
        new_nodes.append(n)
        if n.name not in accelerated:
            continue
        for i, out in enumerate(n.output):
            if out not in float_tensors:
                continue
            raw = f"{out}.fp32"
            n.output[i] = raw
            new_nodes.extend(round_pair(raw, out, f"{n.name}.{i}"))
    del m.graph.node[:]
    m.graph.node.extend(new_nodes)
    del m.graph.value_info[:]
    assert graph_outputs == {o.name for o in m.graph.output}
    return m
