"""What the ONNX graph needs before onnx2torch converts it and torch.export captures the result. Every change is
a note in the report; none changes what the graph computes for the inputs the analysis runs.

- weights a graph lists as inputs too (paddle2onnx writes them so) are taken as the constants they are, and
  weights written as Constant nodes become initializers (onnx2torch reads weights from initializers);
- the input shapes that run are fixed (ONNX Runtime's make_input_shape_fixed), so shape arithmetic (Shape →
  Gather → Concat → Reshape) and weights computed from constants fold to constants (onnxscript's constant
  folder, no fusion: every fusion stays the target compiler's decision);
- an `If` keeps the branch its condition takes: the folder inlines it when the condition is a constant, and when
  the condition depends on the inputs, ONNX Runtime evaluates it on the analysis inputs first (the program is then
  specialised to them, and the note says which branch it kept);
- ONNX Runtime's dynamic int8 (DynamicQuantizeLinear → ConvInteger / MatMulInteger → Cast → scale Mul) becomes
  Conv / MatMul on dequantized values (dequantize.py);
- every graph output gets a node of its own (onnx2torch returns a multi-output node's values together);
- ops onnx2torch has no converter for and that have a same-meaning rewrite (CastLike, Gelu) are rewritten;
- opset 17 at most (onnx.version_converter, or xc's own lowering where it has no down-adapter);
- `Reshape(allowzero=1)` with a constant shape holding no zero is the same as allowzero=0, which onnx2torch reads.

Nodes a rewrite adds are named `<the node they replace>/<part>` (the folder's inlined branches
`<the If>_<part>`), so every node of the converted program traces to a node of the model (`origin_of`).
"""
from __future__ import annotations

import re

import numpy as np

from .dequantize import dequantize_integer_ops
from .refusals import Unsupported
from .names import shown

MAX_OPSET = 17
FOLD_LIMIT = 1 << 26       # elements of a constant the route folds (256 MB of fp32)
MAX_IF_DEPTH = 8           # Ifs nested this deep are specialised (deeper ones are left to onnx2torch, which refuses)


def prepare(model, specs, feeds: dict) -> tuple[object, list[str]]:
    """The ONNX graph onnx2torch and torch.export can take, and what was changed to get it. `feeds`: the analysis
    inputs (an `If` whose condition depends on them is specialised to them)."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed
    notes = []
    m = onnx.ModelProto()
    m.CopyFrom(model)
    zipped = _zipmap_outputs_as_tensors(m)
    if zipped:
        notes.append(f"{zipped} ZipMap output(s) (a sequence of maps) taken as the tensor of probabilities they zip")
    for s in specs:
        vi = next((v for v in m.graph.input if v.name == s.name), None)
        if vi is not None and vi.type.HasField("tensor_type") and any(
                not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
            make_input_shape_fixed(m.graph, s.name, list(s.shape))
            notes.append(f"input '{s.name}' fixed to {'x'.join(map(str, s.shape))}")
    m, folding = _fold(m, feeds)
    notes += folding
    notes.append("shape arithmetic and computed weights folded to constants (onnxscript fold_constants)")
    notes += _rewrite_for_onnx2torch(m)
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=MAX_OPSET)
    if opset > MAX_OPSET:
        try:
            m = onnx.version_converter.convert_version(m, MAX_OPSET)
            notes.append(f"opset {opset} → {MAX_OPSET} (onnx.version_converter)")
        except Exception as e:  # noqa: BLE001 — it has no down-adapter for some ops (Split-18): lower them here
            m, rewritten = lower_opset(m, opset, MAX_OPSET)
            why = re.search(r"No Adapter[^\n]*", str(e))
            notes.append(f"opset {opset} → {MAX_OPSET} by xc (onnx.version_converter: "
                         f"{why.group(0) if why else str(e).strip()[:80]}); "
                         + (", ".join(rewritten) if rewritten else "no op needed rewriting"))
    _check_attributes(m, opset)
    # An omitted optional output ("") gets a name: onnx2torch looks omitted inputs up among node outputs and would
    # take the node that omitted an output for their producer.
    for node in m.graph.node:
        for i, out in enumerate(node.output):
            if not out:
                node.output[i] = f"{node.name}/unused_output{i}"
    notes += spell_out_defaults(m)
    # Some onnx2torch converters read their input's rank from value_info (BatchNormalization's spatial rank).
    m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "Reshape":
            for a in node.attribute:
                if a.name == "allowzero" and a.i == 1 and len(node.input) > 1 and node.input[1] in consts \
                        and 0 not in consts[node.input[1]].tolist():
                    a.i = 0
                    notes.append(f"Reshape '{node.name}': allowzero=1 → 0 (its shape holds no zero)")
    return m, notes


def origin_of(name: str, model_nodes: set[str]) -> str | None:
    """The model's node a node of the prepared graph stands for: itself, or the node a rewrite (`<node>/<part>`)
    or an inlined `If` branch (`<node>_<part>`) replaced."""
    if name in model_nodes:
        return name
    for i in range(len(name) - 1, 0, -1):
        if name[i] in "/_" and name[:i] in model_nodes:
            return name[:i]
    return None


def _zipmap_outputs_as_tensors(m) -> int:
    """A ZipMap's output (a sequence of maps, one per row) declared as the tensor of probabilities it zips: xc's
    ZipMap module returns that tensor, and onnx-ir, which the rest of the preparation works in, has no map type.
    A proto edit for that reason. Returns how many."""
    import onnx
    zipped = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "ZipMap" and n.domain == "ai.onnx.ml"}
    for out in m.graph.output:
        if out.name in zipped:
            out.type.CopyFrom(onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None))
    return sum(1 for out in m.graph.output if out.name in zipped)


def _fold(m, feeds: dict) -> tuple[object, list[str]]:
    """Weights as initializers; constant folding; then each `If` whose condition is not a constant gets the value
    its condition has on the analysis inputs (ONNX Runtime, optimizations off) and is folded again, which inlines
    the branch taken. Last, every graph output gets a node of its own (onnx2torch returns a multi-output node's
    outputs all together)."""
    import onnx_ir
    import onnxscript.optimizer as opt
    from onnx_ir.passes.common import (LiftConstantsToInitializersPass, LiftSubgraphInitializersToMainGraphPass,
                                       RemoveInitializersFromInputsPass, TopologicalSortPass)

    def fold(ir_model):
        # onnxscript's default limits (8,192 input elements) stop short of real weights: the limit is a weight's.
        opt.fold_constants(ir_model, input_size_limit=FOLD_LIMIT, output_size_limit=FOLD_LIMIT)
        opt.remove_unused_nodes(ir_model)

    notes = []
    initializers = {i.name for i in m.graph.initializer}
    listed = sum(1 for i in m.graph.input if i.name in initializers)
    ir_model = onnx_ir.from_proto(m)
    if listed:
        # paddle2onnx lists weights as inputs too (overridable, IR < 4 style): onnx2torch would expect them fed.
        RemoveInitializersFromInputsPass()(ir_model)
        notes.append(f"{listed} weight(s) listed as graph inputs too taken as the constants they are (onnx-ir "
                     "RemoveInitializersFromInputsPass)")
    constants = sum(1 for n in ir_model.graph if n.op_type == "Constant")
    # onnx2torch's Conv, Gemm and friends read their weights as initializers; some exporters write Constant nodes.
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(ir_model)
    LiftSubgraphInitializersToMainGraphPass()(ir_model)
    lifted = constants - sum(1 for n in ir_model.graph if n.op_type == "Constant")
    if lifted:
        notes.append(f"{lifted} Constant node(s) made initializers (onnx-ir LiftConstantsToInitializersPass)")
    fold(ir_model)
    for _ in range(MAX_IF_DEPTH):      # an inlined branch may hold an If of its own: one level at a time
        branches = [n for n in ir_model.graph if n.op_type == "If" and n.domain in ("", "ai.onnx")]
        if not branches:
            break
        values = _evaluate(onnx_ir.to_proto(ir_model), [n.inputs[0].name for n in branches], feeds)
        for n in branches:
            taken = bool(np.asarray(values[n.inputs[0].name]).reshape(-1)[0])
            const = onnx_ir.Value(name=f"{n.name}/condition", const_value=onnx_ir.tensor(np.array(taken)))
            ir_model.graph.register_initializer(const)
            n.replace_input_with(0, const)
            notes.append(f"If '{shown(n.name)}': its condition is {str(taken).lower()} for the analysis inputs, so the "
                         f"program keeps the {'then' if taken else 'else'} branch only")
        fold(ir_model)
    if any(note.startswith("If '") for note in notes):
        notes.append("torch.export traces one path: inputs that take another branch need an analysis of their own")
    dequantized = dequantize_integer_ops(ir_model)
    if dequantized:
        notes += dequantized
        opt.remove_unused_nodes(ir_model)
    _own_output_nodes(ir_model)
    TopologicalSortPass()(ir_model)      # an inlined branch's nodes land where the If was; onnx2torch needs order
    return onnx_ir.to_proto(ir_model), notes


def _own_output_nodes(ir_model) -> None:
    """An Identity in front of each graph output that shares its producer with another output (or whose producer
    makes several values), named `<producer>/output<i>`, and in front of an output no node makes (a constant the
    folder made of the whole graph, or an input given straight back; onnx2torch finds no node to return), named
    `<output>/output<i>`: the program then returns one value per output, in order."""
    import onnx_ir
    seen = set()
    for i, value in enumerate(list(ir_model.graph.outputs)):
        producer = value.producer()
        if producer is not None and len(producer.outputs) == 1 and id(producer) not in seen:
            seen.add(id(producer))
            continue
        ir_model.opset_imports.setdefault("", MAX_OPSET)      # a model of ai.onnx.ml ops alone imports none
        name = value.name
        if producer is not None:
            value.name = f"{name}/value"
            node_name = f"{producer.name}/output{i}"
        else:                    # an initializer or input keeps its name; the output (read by position) is its copy
            name, node_name = f"{name}/output", f"{name}/output{i}"
        node = onnx_ir.node("Identity", [value], name=node_name)
        node.outputs[0].name, node.outputs[0].type, node.outputs[0].shape = name, value.type, value.shape
        ir_model.graph.append(node)
        ir_model.graph.outputs[i] = node.outputs[0]


def _evaluate(model, names: list[str], feeds: dict) -> dict:
    """Values of the boolean tensors `names` on `feeds`, computed by ONNX Runtime with its optimizations off."""
    import onnx
    import onnxruntime as ort
    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output}
    for name in names:
        if name not in known:
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.BOOL, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    session = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = {i.name for i in session.get_inputs()}
    out = session.run(names, {k: np.asarray(v) for k, v in feeds.items() if k in wanted})
    return dict(zip(names, out))


# Ops whose versions after 17 only widen the types they take or add attributes whose defaults keep the old
# behaviour (onnx/docs/Changelog.md): at opset 17 they mean the same for the float and integer tensors onnx2torch
# converts. The version each change came in is in the comment.
_SAME_BELOW_18 = {"Resize", "ScatterElements", "ScatterND", "LpPool",                      # 18: new attributes
                  "Cast", "CastLike", "Constant", "DequantizeLinear", "Equal", "Identity", "If", "Loop",  # 19
                  "QuantizeLinear", "Reshape", "Scan", "Shape", "Size", "AveragePool",
                  "ConstantOfShape", "IsInf", "IsNaN",                                      # 20
                  "Flatten", "Squeeze", "Unsqueeze", "Transpose", "QLinearMatMul",          # 21
                  }
# 18 turned these ops' `axes` attribute into an input.
_REDUCE_AXES_INPUT = {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                      "ReduceLogSumExp", "ReduceSumSquare"}


def lower_opset(model, opset: int, target: int) -> tuple[object, list[str]]:
    """The model at opset `target` (17), for what onnx.version_converter cannot lower: Reduce*'s axes input back to
    an attribute, Split-18's num_outputs to split sizes, Pad-18's axes to full pads; ops that changed after 17 only
    by new types or defaulted attributes kept as they are; anything else refused in one line. The conversion's
    drift against ONNX Runtime on the original (reported apart) checks the result."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inferred = onnx.shape_inference.infer_shapes(m)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
              for vi in list(inferred.graph.value_info) + list(inferred.graph.input)
              if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")}
    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    counts: dict[str, int] = {}
    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        new = onnx.defs.get_schema(n.op_type, opset, "")
        since = new.since_version
        if since <= target:
            continue
        try:
            old = onnx.defs.get_schema(n.op_type, target, "")
        except onnx.defs.SchemaError:
            raise Unsupported(f"{n.op_type} '{shown(n.name)}' is an opset-{since} op, newer than the opset {target} "
                              "onnx2torch reads") from None
        attrs = {a.name: a for a in n.attribute}
        if n.op_type in _REDUCE_AXES_INPUT and (len(n.input) < 2 or n.input[1] in consts or not n.input[1]):
            axes = consts[n.input[1]].tolist() if len(n.input) > 1 and n.input[1] else None
            del n.input[1:]
            if axes is not None:
                n.attribute.append(helper.make_attribute("axes", [int(a) for a in axes]))
        elif n.op_type == "Split" and "num_outputs" in attrs and len(n.input) == 1:
            axis = attrs["axis"].i if "axis" in attrs else 0
            dim = (shapes.get(n.input[0]) or [None])[axis] if shapes.get(n.input[0]) else None
            if not dim:
                raise Unsupported(f"Split '{shown(n.name)}' splits an axis of unknown size into num_outputs parts, "
                                  "which opset 17 cannot say")
            k = attrs["num_outputs"].i
            size = -(-dim // k)
            sizes = [size] * (dim // size) + ([dim % size] if dim % size else [])
            name = f"{n.name or n.output[0]}/split_sizes"
            m.graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), name))
            n.input.append(name)
            n.attribute.remove(attrs["num_outputs"])
        elif n.op_type == "Pad" and (len(n.input) < 4 or not n.input[3]):
            pass            # no axes input: Pad-18 reads like Pad-13
        elif n.op_type == "Pad" and n.input[3] in consts and n.input[1] in consts and shapes.get(n.input[0]):
            rank = len(shapes[n.input[0]])               # pads over the listed axes → pads over every axis
            axes = [int(a) % rank for a in consts[n.input[3]].reshape(-1)]
            given = consts[n.input[1]].reshape(-1).tolist()
            full = [0] * (2 * rank)
            for i, axis in enumerate(axes):
                full[axis], full[rank + axis] = given[i], given[len(axes) + i]
            name = f"{n.name or n.output[0]}/pads_all_axes"
            m.graph.initializer.append(numpy_helper.from_array(np.array(full, np.int64), name))
            n.input[1] = name
            del n.input[3:]
            _drop_newer_attributes(n, old, new)
        elif n.op_type == "Split" and "num_outputs" not in attrs:
            pass            # sizes as an input already: Split-13
        elif n.op_type in _SAME_BELOW_18 or _same_signature(old, new):
            _drop_newer_attributes(n, old, new)
            continue        # the same op at opset 17 for the tensors onnx2torch converts
        else:
            raise Unsupported(f"{n.op_type} '{shown(n.name)}' is opset-{since} only, and xc cannot lower it to opset "
                              f"{target} for onnx2torch")
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = target
    onnx.checker.check_model(m)
    return m, [f"{op} × {k} rewritten for opset {target}" for op, k in sorted(counts.items())]


def _same_signature(old, new) -> bool:
    """Whether a newer version of an op only widened the types it takes: the same inputs, outputs and attributes,
    with the same defaults (opset 22 added bfloat16 to most ops, 23 and later the 4- and 8-bit floats)."""
    def io(params):
        return [(p.name, p.option) for p in params]

    def attrs(schema):
        return {name: (a.type, a.default_value.SerializeToString()) for name, a in schema.attributes.items()}
    return io(old.inputs) == io(new.inputs) and io(old.outputs) == io(new.outputs) and attrs(old) == attrs(new)


def _drop_newer_attributes(node, old, new) -> None:
    """The attributes a lowered op has that opset 17's version lacks: dropped when they hold their default (the
    old behaviour), refused when they ask for something else."""
    from onnx import helper
    for a in list(node.attribute):
        if a.name in old.attributes:
            continue
        spec = new.attributes.get(a.name)
        default = spec.default_value if spec is not None else None
        if default is not None and default.type and helper.get_attribute_value(default) == \
                helper.get_attribute_value(a):
            node.attribute.remove(a)
            continue
        raise Unsupported(f"{node.op_type} '{shown(node.name)}' sets {a.name}, which {node.op_type}-"
                          f"{old.since_version} (the version opset {MAX_OPSET} has) lacks and xc's converters do not "
                          "compute")


def _check_attributes(m, original: int) -> None:
    """Every attribute a default-domain node holds exists in its op at the graph's opset: one a newer version added
    (onnx.version_converter keeps some, AveragePool-19's dilations) is dropped when it holds the default it had
    there and refused otherwise, so no converter silently ignores it."""
    import onnx
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=MAX_OPSET)
    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = onnx.defs.get_schema(n.op_type, opset, "")
        except onnx.defs.SchemaError:
            continue
        if all(a.name in schema.attributes for a in n.attribute):
            continue
        try:
            newer = onnx.defs.get_schema(n.op_type, max(original, opset), "")
        except onnx.defs.SchemaError:
            newer = schema
        _drop_newer_attributes(n, schema, newer)


def spell_out_defaults(m) -> list[str]:
    """Every attribute a node leaves out that the ONNX spec gives a default is written out with that default, so no
    converter's own idea of it counts (onnx2torch reads a missing CumSum `reverse` as 1 where the spec says 0; see
    conformance.onnx2torch_audit). Returns a note for each node whose converter would have read it otherwise."""
    import onnx
    from onnx import helper

    from .converters import ONNX2TORCH_DEFAULTS
    opsets = {o.domain or "": o.version for o in m.opset_import}
    notes = []
    for n in m.graph.node:
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        if domain not in opsets:
            continue
        try:
            schema = onnx.defs.get_schema(n.op_type, opsets[domain], domain)
        except onnx.defs.SchemaError:
            continue          # an op outside onnx's schemas (com.microsoft): its converter is xc's own
        given = {a.name for a in n.attribute}
        for name, spec in sorted(schema.attributes.items()):
            if name in given or not spec.default_value.type:
                continue
            a = onnx.AttributeProto()
            a.CopyFrom(spec.default_value)
            a.name = name
            n.attribute.append(a)
            theirs = ONNX2TORCH_DEFAULTS.get((n.op_type, name))
            if theirs is not None:
                notes.append(f"{n.op_type} '{shown(n.name)}': {name} left out, which the ONNX spec defaults to "
                             f"{helper.get_attribute_value(a)!r} and onnx2torch reads as {theirs!r}: written out")
    return notes


def _rewrite_for_onnx2torch(m) -> list[str]:
    """Same-meaning rewrites of ops onnx2torch has no converter for (and the version converter cannot lower):
    CastLike → Cast to the target's type; Gelu → its erf / tanh formula."""
    import onnx
    from onnx import helper
    inferred = onnx.shape_inference.infer_shapes(m)
    elem = {vi.name: vi.type.tensor_type.elem_type for vi in list(inferred.graph.value_info)
            + list(inferred.graph.input) + list(inferred.graph.output) if vi.type.HasField("tensor_type")}
    elem.update({i.name: i.data_type for i in m.graph.initializer})
    notes, nodes, counts = [], [], {"CastLike": 0, "Gelu": 0}
    for n in m.graph.node:
        if n.op_type == "CastLike" and n.domain in ("", "ai.onnx") and elem.get(n.input[1]):
            nodes.append(helper.make_node("Cast", [n.input[0]], list(n.output), name=n.name, to=elem[n.input[1]]))
            counts["CastLike"] += 1
        elif n.op_type == "Gelu" and n.domain in ("", "ai.onnx"):
            approx = next((a.s.decode() for a in n.attribute if a.name == "approximate"), "none")
            nodes += _gelu(n, approx)
            counts["Gelu"] += 1
        else:
            nodes.append(n)
    if any(counts.values()):
        del m.graph.node[:]
        m.graph.node.extend(nodes)
        notes += [f"{k} × {v} rewritten ({'Cast to the target type' if k == 'CastLike' else 'erf / tanh formula'})"
                  for k, v in counts.items() if v]
    return notes


def _gelu(n, approx: str) -> list:
    """Gelu as elementwise ONNX ops, named after the Gelu so provenance still points at it."""
    from onnx import TensorProto, helper
    x, y, p = n.input[0], n.output[0], n.name or n.output[0]

    def c(name, value):
        return helper.make_node("Constant", [], [f"{p}/{name}"], name=f"{p}/{name}",
                                value=helper.make_tensor(f"{p}/{name}_v", TensorProto.FLOAT, [], [value]))

    def op(kind, ins, out):
        return helper.make_node(kind, ins, [f"{p}/{out}"], name=f"{p}/{out}")

    if approx == "tanh":   # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        nodes = [c("k", 0.7978845608028654), c("a", 0.044715), c("half", 0.5), c("one", 1.0),
                 op("Mul", [x, x], "x2"), op("Mul", [f"{p}/x2", x], "x3"), op("Mul", [f"{p}/x3", f"{p}/a"], "ax3"),
                 op("Add", [x, f"{p}/ax3"], "inner"), op("Mul", [f"{p}/inner", f"{p}/k"], "scaled"),
                 op("Tanh", [f"{p}/scaled"], "t"), op("Add", [f"{p}/t", f"{p}/one"], "onep")]
    else:                  # 0.5·x·(1 + erf(x/√2))
        nodes = [c("rs2", 0.7071067811865476), c("half", 0.5), c("one", 1.0),
                 op("Mul", [x, f"{p}/rs2"], "xs"), op("Erf", [f"{p}/xs"], "t"), op("Add", [f"{p}/t", f"{p}/one"], "onep")]
    nodes += [op("Mul", [x, f"{p}/half"], "hx"),
              helper.make_node("Mul", [f"{p}/hx", f"{p}/onep"], [y], name=p)]
    return nodes


