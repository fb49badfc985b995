"""ONNX → Core ML for the Core ML targets: coremltools no longer reads ONNX, so an ONNX source goes
ONNX → PyTorch (onnx2torch) → torch.jit.trace → coremltools' TorchScript frontend.

Why trace and not torch.export: onnx2torch's modules read shape tensors' values at run time (Reshape, Unsqueeze,
Pad, Resize …), which torch.export sees as data-dependent and refuses; tracing records them as the constants they
are at the input shapes that run. onnx2torch makes one submodule per ONNX node, named after it, and the
TorchScript frontend keeps module names in each MIL op's scope — so every Core ML op maps back to its ONNX node.

The conversion has its own error, which must never be blamed on Core ML: `convert` also runs the converted module
and measures it against ONNX Runtime (all optimizations off) on the same inputs.

Model-controlled names never reach generated code: onnx2torch names each submodule after its ONNX node and torch.fx
writes `forward` as Python source holding those names (`getattr(self, "<name>")`, unescaped), so a node name that
closes the quote would run as Python in the worker. Before onnx2torch sees the graph every node, value,
initializer and graph input/output is renamed to a plain identifier (`n0`, `v0`, …) and the mapping kept, so
provenance, reports and drift still show the model's own names (`safe_names`).

What the route needs from the graph first (each recorded in the report):
- the input shapes that run, fixed (ONNX Runtime's make_input_shape_fixed): torch.export then traces static shapes;
- opset 17 at most (onnx.version_converter): onnx2torch has no converter for ReduceMean-18 and some newer ops;
- `Reshape(allowzero=1)` with a constant shape holding no zero is the same as allowzero=0, which onnx2torch reads.

onnx2torch imports torchvision at import time for two converters (NonMaxSuppression, RoiAlign); PyPI's torchvision
links a CUDA torch and does not load beside the CPU build, so it is imported with a stand-in `torchvision.ops`
whose functions raise — only models with those two ops fail, and they say why.
"""
from __future__ import annotations

import re
import sys
import types

import numpy as np

ROUTE = "ONNX → PyTorch (onnx2torch) → torch.jit.trace → coremltools (TorchScript frontend)"
MAX_OPSET = 17
FOLD_LIMIT = 1 << 26       # elements of a constant the route folds (256 MB of fp32)


def import_onnx2torch():
    try:
        import onnx2torch
        return onnx2torch
    except ModuleNotFoundError as e:
        if e.name != "torchvision":
            raise

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


def available() -> tuple[bool, str]:
    try:
        import_onnx2torch()
    except Exception as e:  # noqa: BLE001
        return False, f"onnx2torch is not importable ({type(e).__name__}: {e})"
    return True, ""


def prepare(model, specs) -> tuple[object, list[str]]:
    """The ONNX graph onnx2torch and torch.export can take, and what was changed to get it."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed
    notes = []
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for s in specs:
        vi = next((v for v in m.graph.input if v.name == s.name), None)
        if vi is not None and vi.type.HasField("tensor_type") and any(
                not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim):
            make_input_shape_fixed(m.graph, s.name, list(s.shape))
            notes.append(f"input '{s.name}' fixed to {'x'.join(map(str, s.shape))}")
    if True:
        # With the inputs fixed, shape arithmetic (Shape → Gather → Concat → Reshape) folds to constants, which
        # torch.export needs: onnx2torch reads shape tensors' values, a data-dependent guard otherwise. Only
        # constant folding (onnxscript), no fusion: every fusion stays Core ML's decision.
        import onnx_ir
        import onnxscript.optimizer as opt
        ir_model = onnx_ir.from_proto(m)
        # Weights the graph computes from constants (weight_norm's g·v/‖v‖, a transposed initializer) fold too:
        # onnx2torch's Conv and Gemm read their weights as initializers. onnxscript's default limits (8,192
        # input elements) stop short of real weights, so the limit is a weight's size.
        opt.fold_constants(ir_model, input_size_limit=FOLD_LIMIT, output_size_limit=FOLD_LIMIT)
        opt.remove_unused_nodes(ir_model)
        m = onnx_ir.to_proto(ir_model)
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
    consts = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    for node in m.graph.node:
        if node.op_type == "Reshape":
            for a in node.attribute:
                if a.name == "allowzero" and a.i == 1 and len(node.input) > 1 and node.input[1] in consts \
                        and 0 not in consts[node.input[1]].tolist():
                    a.i = 0
                    notes.append(f"Reshape '{node.name}': allowzero=1 → 0 (its shape holds no zero)")
    return m, notes


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
        since = onnx.defs.get_schema(n.op_type, opset, "").since_version
        if since <= target or n.op_type in _SAME_BELOW_18:
            continue
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
                raise RuntimeError(f"Split '{n.name}' splits an axis of unknown size into num_outputs parts, which "
                                   "opset 17 cannot say")
            k = attrs["num_outputs"].i
            size = -(-dim // k)
            sizes = [size] * (dim // size) + ([dim % size] if dim % size else [])
            name = f"{n.name or n.output[0]}/split_sizes"
            m.graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), name))
            n.input.append(name)
            n.attribute.remove(attrs["num_outputs"])
        elif n.op_type == "Pad" and (len(n.input) < 4 or not n.input[3]):
            pass            # no axes input: Pad-18 reads like Pad-13
        elif n.op_type == "Split" and "num_outputs" not in attrs:
            pass            # sizes as an input already: Split-13
        else:
            raise RuntimeError(f"{n.op_type} '{n.name}' is opset-{since} only, and xc cannot lower it to opset "
                               f"{target} for onnx2torch")
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = target
    onnx.checker.check_model(m)
    return m, [f"{op} × {k} rewritten for opset {target}" for op, k in sorted(counts.items())]


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


def convert(onnx_path: str, specs):
    """(traced TorchScript module, the converted nn.Module, {"route", "preprocessing"}) for an ONNX model, traced at
    the input shapes that run (example values from the seeded inputs: only their shapes and dtypes matter)."""
    import onnx
    import torch

    from ..inputs.values import random_inputs
    onnx2torch = import_onnx2torch()
    source = onnx.load(onnx_path)
    check_domains(source)
    model, notes = prepare(source, specs)
    model, names = safe_names(model)
    module_names = checked_module_names(model, names)
    try:
        module = onnx2torch.convert(model).eval()
    except NotImplementedError as e:
        raise RuntimeError(f"onnx2torch cannot convert this graph: {in_model_names(_unconverted(e), names)}") \
            from None
    except Exception as e:  # noqa: BLE001 — said in the model's names, as onnx2torch's failure
        raise RuntimeError(f"onnx2torch could not convert this graph ({_in_model_terms(e, names)})") from None
    feeds = random_inputs(specs)
    args = tuple(torch.from_numpy(np.asarray(feeds[s.name], order="C")) for s in specs)
    try:
        with torch.no_grad():
            traced = torch.jit.trace(module, args, check_trace=False, strict=False)
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(f"the module onnx2torch made could not be traced ({_in_model_terms(e, names)})") \
            from None
    return traced, module, {"route": ROUTE, "preprocessing": notes, "module_names": module_names,
                            "evidence": "measured"}


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def safe_names(model) -> tuple[object, dict[str, str]]:
    """A copy of `model` whose names are all plain identifiers, and {new name: the model's name} for its nodes and
    values.

    Every node becomes `n<i>` and every value (graph inputs and outputs, initializers, value_info, node inputs and
    outputs, in subgraphs too) `v<i>`: one consistent renaming, so the graph computes the same. The default domain
    spelled "ai.onnx" becomes "" (onnx2torch puts the domain in the module name)."""
    import onnx
    m = onnx.ModelProto()
    m.CopyFrom(model)
    values: dict[str, str] = {}
    nodes: dict[str, str] = {}

    def value(name: str) -> str:
        if not name:            # an omitted optional input or output stays omitted
            return name
        if name not in values:
            values[name] = f"v{len(values)}"
        return values[name]

    def graph(g) -> None:
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            vi.name = value(vi.name)
        for t in g.initializer:
            t.name = value(t.name)
        for st in g.sparse_initializer:
            st.values.name = value(st.values.name)
            st.indices.name = value(st.indices.name)
        for n in g.node:
            new = f"n{len(nodes)}"
            nodes[new] = n.name
            n.name = new
            if n.domain == "ai.onnx":
                n.domain = ""
            n.input[:] = [value(x) for x in n.input]
            n.output[:] = [value(x) for x in n.output]
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)
        g.name = "g"

    graph(m.graph)
    return m, {**nodes, **{new: old for old, new in values.items()}}


def in_model_names(text: str, names: dict[str, str]) -> str:
    """An error message about the renamed graph, in the model's own names."""
    return re.sub(r"\b[nv]\d+\b", lambda m: repr(names[m.group(0)])[1:-1] if m.group(0) in names else m.group(0),
                  text)


def checked_module_names(model, node_names: dict[str, str]) -> dict[str, str]:
    """{onnx2torch submodule name: the model's node name}, after refusing any submodule name that is not a plain
    identifier: it would be written into the Python source torch.fx generates."""
    import_onnx2torch()
    from onnx2torch.onnx_graph import OnnxGraph
    out = {}
    for node in model.graph.node:
        module = OnnxGraph.generate_node_name(node)
        if not IDENTIFIER.match(module):
            raise RuntimeError(f"refused: onnx2torch would name a module {module[:40]!r}, not a plain identifier "
                               "(xc never lets a model's names into generated code)")
        out[module] = node_names.get(node.name, node.name)
    return out


def check_domains(model) -> None:
    """onnx2torch converts the default ONNX domain only: say which ops are outside it before it fails obscurely."""
    others = sorted({f"{n.domain}:{n.op_type}" for n in model.graph.node if n.domain not in ("", "ai.onnx")})
    if others:
        raise RuntimeError("onnx2torch converts only the default ONNX domain; this graph uses "
                           + ", ".join(others[:6]))


def convert_once(captured):
    """`convert` for this capture, done once however many Core ML targets ask."""
    key = ("onnx2torch", captured.onnx_path)
    if key not in captured.derived:
        captured.derived[key] = convert(captured.onnx_path, captured.source.inputs)
    return captured.derived[key]


def conversion_drift_once(captured, module, feeds: dict) -> dict:
    key = ("onnx2torch-drift", captured.onnx_path)
    if key not in captured.derived:
        captured.derived[key] = conversion_drift(captured.onnx_path, module, captured.source.inputs, feeds)
    return captured.derived[key]


def conversion_drift(onnx_path: str, module, specs, feeds: dict) -> dict:
    """The converted module against ONNX Runtime (all optimizations off) on the analysis inputs, per output: the
    conversion's own error, reported apart from Core ML's."""
    import torch
    args = tuple(torch.from_numpy(np.asarray(feeds[s.name], order="C")) for s in specs)
    with torch.no_grad():
        converted = module(*args)
    leaves = [t.detach().numpy() for t in torch.utils._pytree.tree_leaves(converted) if isinstance(t, torch.Tensor)]
    return _conversion_drift(onnx_path, feeds, leaves)


def _conversion_drift(onnx_path: str, feeds: dict, converted: list) -> dict:
    """The converted module's outputs against ONNX Runtime's (all optimizations off), output by output."""
    from ..analysis.drift import drift_metrics
    from .ort_common import make_session, run_session
    ref = run_session(make_session(onnx_path, "ORT_DISABLE_ALL"), feeds)
    out = {}
    for (name, r), c in zip(ref.items(), converted):
        out[name] = drift_metrics(np.asarray(r), np.asarray(c)) if np.shape(r) == np.shape(c) else \
            {"error": f"shape {list(np.shape(c))} from the conversion, {list(np.shape(r))} from ONNX Runtime"}
    return out


def _in_model_terms(e: Exception, names: dict[str, str]) -> str:
    """'<type>: <first line>' of an exception about the renamed graph, in the model's own names."""
    text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    line = (str(text).strip().splitlines() or [""])[0][:300]
    return f"{type(e).__name__}: {in_model_names(line, names)}"


def _unconverted(e: Exception) -> str:
    text = str(e)
    import re
    m = re.search(r"operation_type='([^']+)', version=(\d+)", text)
    if m:
        return f"no converter for {m.group(1)}-{m.group(2)}"
    return text.splitlines()[0][:200] if text else type(e).__name__
