"""Capture: a PyTorch source is exported once with torch.export (the framework-level "before" graph) and once to
ONNX (torch.onnx, dynamo). Every ONNX node keeps a link back to the ExportedProgram node(s) it came from, so every
compiled node of every target can be traced to the user's source op, module path and file:line.

The ONNX export runs with `optimize=False` and then only constant folding: the exporter's full optimizer would fold
BatchNorm into Conv before any target compiler sees the graph, and the fold would be credited to no one. This way
each ONNX node maps to exactly one source op and every fusion is the target compiler's own decision.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import time
import warnings
from dataclasses import dataclass, field

from .errors import XcInputError
from .ir import ALIAS, COMPUTE, CONSTANT, Graph, Node, TensorInfo
from .sources.spec import Source


@dataclass
class Captured:
    source: Source
    onnx_path: str | None             # the ONNX file every ONNX-consuming target compiles
    # The ONNX graph in the IR, with provenance on every node; None while the ONNX export of a PyTorch source is
    # still running (what `capture`'s `exported` hook hands on) and for sources with no ONNX (Core ML, IR).
    onnx_graph: Graph | None
    before: Graph                     # framework-level graph: ExportedProgram (PyTorch) or the ONNX itself
    output_names: list[str]
    exported_program: object = None
    timings: dict[str, float] = field(default_factory=dict)
    ir_path: str | None = None        # an OpenVINO IR source's model.xml (what openvino-cpu compiles)
    # Derived from the captured model once and shared by the targets that need it (coreml-ane and coreml-cpu
    # take the same ONNX → PyTorch conversion). Rebuilt, not shipped, wherever a target runs.
    derived: dict = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)
    # In a worker, the ExportedProgram stays on disk until a target asks for it (most never do).
    exported_program_file: str | None = None
    # Why a PyTorch source has no ONNX (torch.onnx could not export what torch.export captured): the targets that
    # compile ONNX fail with it, those that compile the ExportedProgram still run.
    onnx_error: str | None = None
    # What the report calls each output, by position (empty: output_names as they are). ONNX graphs name their
    # outputs; an ExportedProgram's user outputs are named after internal nodes ('linear_12'), so they are called
    # by the model's own keys ('logits') or by position ('output 0').
    output_labels: list[str] = field(default_factory=list)

    def output_label_map(self) -> dict[str, str]:
        """{output name: the name the report shows}."""
        if len(self.output_labels) != len(self.output_names):
            return {}
        return {n: lab for n, lab in zip(self.output_names, self.output_labels) if n != lab}

    def program(self):
        """The captured ExportedProgram (PyTorch sources), or None. A worker reads it back from the run folder
        with xc's own .pt2 loader, the same one uploads go through."""
        if self.exported_program is None and self.exported_program_file:
            from .limits import Limits
            from .sources.pt2_archive import load_pt2
            self.exported_program, _ = load_pt2(self.exported_program_file, Limits.from_env())
        return self.exported_program

    def onnx_node(self, name: str) -> Node | None:
        return self._onnx_index().get(name)

    def _onnx_index(self) -> dict[str, Node]:
        if not hasattr(self, "_idx"):
            self._idx = self.onnx_graph.by_id()
        return self._idx


def capture(source: Source, workdir: str, example_inputs: dict, exported=None) -> Captured:
    """The captured model. For a PyTorch source, `exported(partial)` is called once torch.export has finished and
    before the ONNX export starts, with a Captured that has the ExportedProgram, the "before" graph and the
    output names but no ONNX yet: targets that compile from the ExportedProgram can start from it."""
    os.makedirs(workdir, exist_ok=True)
    if source.is_pytorch:
        return _capture_pytorch(source, workdir, example_inputs, exported)
    if source.kind == "onnx":
        return _capture_onnx(source, workdir)
    if source.kind == "coreml":
        # A compiled Core ML model is its own "before": there is no ONNX for ONNX-consuming targets.
        from .targets.mil_graph import mil_ir_graph
        g = mil_ir_graph(source.mil_program, "mil")
        for n in g.nodes:
            n.source_ops = [n.id] if n.kind != CONSTANT else []
        return Captured(source, None, g, g, [o.name for o in g.outputs])
    if source.kind == "openvino-ir":
        from .targets.openvino_cpu import openvino_model_graph
        g = openvino_model_graph(source.openvino_model, "openvino-ir")
        from .sources.openvino_ir import port_name
        outputs = [port_name(o) for o in source.openvino_model.outputs]
        return Captured(source, None, g, g, outputs, ir_path=source.openvino_xml)
    raise XcInputError(f"source kind '{source.kind}' cannot be captured")


# ---------------------------------------------------------------------------------------------- PyTorch ----
def _capture_pytorch(source: Source, workdir: str, example_inputs: dict, exported=None) -> Captured:
    import torch
    args = tuple(torch.from_numpy(example_inputs[s.name]) for s in source.inputs)
    timings = {}
    t0 = time.perf_counter()
    ep = source.exported_program
    notes = []
    with _quiet():
        if ep is None and source.kind == "torchscript":
            # torch.export refuses ScriptModules; its TorchScript converter is the supported bridge.
            from torch._export.converter import TS2EPConverter
            try:
                ep = TS2EPConverter(source.module, args).convert()
            except Exception as e:
                raise XcInputError(f"{source.name}: TorchScript could not be converted to an ExportedProgram "
                                   f"({type(e).__name__}: {_first_line(e)})") from None
        elif ep is None:
            try:
                ep = torch.export.export(source.module, args)
            except Exception as e:
                raise XcInputError(f"{source.name}: torch.export failed ({type(e).__name__}: "
                                   f"{_first_line(e)})") from None
    timings["torch.export"] = time.perf_counter() - t0
    before = exported_program_graph(ep, source.name)
    if exported is not None:
        exported(Captured(source, None, None, before, user_output_names(ep), ep, dict(timings), list(notes),
                          output_labels=user_output_labels(ep)))

    t0 = time.perf_counter()
    onnx_path = os.path.join(workdir, "model.onnx")
    with _quiet():
        try:
            program = torch.onnx.export(ep, args, dynamo=True, optimize=False, verbose=False,
                                        input_names=[s.name for s in source.inputs])
        except Exception as e:
            # A finding about the ONNX route, not a refusal: Core ML, Inductor and the reference compile the
            # ExportedProgram torch.export did capture.
            from .errors import summarize_error
            timings["torch.onnx.export"] = time.perf_counter() - t0
            why = f"torch.onnx.export failed ({type(e).__name__}: {summarize_error(str(e), 300) or type(e).__name__})"
            return Captured(source, None, None, before, user_output_names(ep), ep, timings,
                            notes + [f"no ONNX: {why}"], onnx_error=why, output_labels=user_output_labels(ep))
        _fold_constants(program.model)
        program.save(onnx_path)
    timings["torch.onnx.export"] = time.perf_counter() - t0
    decomposed_to_source = decomposed_origin(program.exported_program, {n.id for n in before.nodes})

    import onnx
    model = onnx.load(onnx_path)
    onnx_graph = onnx_ir_graph(model, "onnx")
    before_index = before.by_id()
    for node in onnx_graph.nodes:
        meta = node.attributes.pop("_metadata", {})
        fx = _FX_NAME.match(meta.get("pkg.torch.onnx.fx_node", "") or "")
        if fx:
            origin = decomposed_to_source.get(fx.group(1), fx.group(1))
            if origin in before_index:
                node.source_ops = [origin]
                node.module_path = before_index[origin].module_path
                node.source_location = before_index[origin].source_location
        if node.module_path is None and meta.get("pkg.torch.onnx.name_scopes"):
            node.module_path = _module_path_from_scopes(meta["pkg.torch.onnx.name_scopes"])
    return Captured(source, onnx_path, onnx_graph, before, [o.name for o in model.graph.output], ep,
                    timings, notes, output_labels=user_output_labels(ep))


def user_output_labels(ep) -> list[str]:
    """The model's own names for its outputs, by position: the keys of a dict (or a Hugging Face ModelOutput read
    as one) it returns, with indices for nested sequences ('logits', 'hidden_states[0]'); 'output <i>' where the
    model returns a plain tensor or tuple."""
    import torch.utils._pytree as pytree
    n = len(user_output_names(ep))
    try:
        spec = ep.call_spec.out_spec
        paths = [path for path, _ in pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(n)), spec))[0]]
    except Exception:  # noqa: BLE001 — no usable spec: positions
        paths = []
    if len(paths) != n:
        return [f"output {i}" for i in range(n)]
    labels = []
    for i, path in enumerate(paths):
        keys = [k for k in path if isinstance(k, (pytree.MappingKey, pytree.GetAttrKey))]
        if not keys:
            labels.append(f"output {i}")
            continue
        text = ""
        for k in path:
            if isinstance(k, pytree.MappingKey):
                text += ("." if text else "") + str(k.key)
            elif isinstance(k, pytree.GetAttrKey):
                text += ("." if text else "") + k.name
            elif isinstance(k, pytree.SequenceKey):
                text += f"[{k.idx}]"
        labels.append(text)
    seen: dict[str, int] = {}
    for i, lab in enumerate(labels):     # unique, whatever the keys were
        seen[lab] = seen.get(lab, 0) + 1
        if seen[lab] > 1:
            labels[i] = f"{lab} ({seen[lab]})"
    return labels


def user_output_names(ep) -> list[str]:
    """The ExportedProgram's user outputs by name: what the dynamo ONNX exporter names the graph's outputs (the
    ONNX names are checked against these once it has run; see pipeline.rename_outputs)."""
    from torch.export.graph_signature import OutputKind
    specs = [s for s in ep.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    return [getattr(s.arg, "name", None) or f"output_{i}" for i, s in enumerate(specs)]


def _fold_constants(model) -> None:
    """Constant folding and dead-node removal only (no rewrite rules): the exported graph loses the exporter's
    scaffolding (zero-bias Expand chains, CastLike of constants) but no fusion happens before a target sees it."""
    import onnxscript.optimizer as opt
    opt.fold_constants(model)
    opt.remove_unused_nodes(model)


_FX_NAME = re.compile(r"%([\w.]+)\s*:")


def decomposed_origin(decomposed_ep, source_ids: set[str]) -> dict[str, str]:
    """The ONNX exporter decomposes the program again before translating it; `from_node` records, for each new
    node, the node it was derived from. Follow it to the node of the captured program."""
    out = {}
    for n in decomposed_ep.graph.nodes:
        chain = n.meta.get("from_node") or []
        name = None
        while chain:
            src = chain[-1]
            if src.name in source_ids:
                name = src.name
            chain = src.from_node
        if name:
            out[n.name] = name
    return out


def exported_program_graph(ep, name: str) -> Graph:
    """The ExportedProgram as the framework-level "before" graph: one node per aten call."""
    import operator
    g = Graph(name=name, stage="captured")
    for n in ep.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            for a in n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]:
                if hasattr(a, "name"):
                    g.outputs.append(TensorInfo(a.name, *_shape_dtype(a.meta.get("val"))))
            continue
        if n.op != "call_function":
            continue
        target = n.target
        kind = ALIAS if target is operator.getitem else COMPUTE
        op = getattr(target, "__name__", str(target))
        # aten overloads print as "conv2d.default": keep the op name, the overload goes to attributes.
        op_type = op.split(".")[0] if "." in op else op
        inputs = [TensorInfo(a.name, *_shape_dtype(a.meta.get("val")))
                  for a in n.all_input_nodes]
        outputs = [TensorInfo(n.name, *_shape_dtype(n.meta.get("val")))]
        g.nodes.append(Node(id=n.name, op_type=op_type, domain="aten", kind=kind, inputs=inputs, outputs=outputs,
                            attributes={"target": str(target)}, source_ops=[n.name],
                            module_path=_module_path(n.meta.get("nn_module_stack")),
                            source_location=_location(n.meta.get("stack_trace"))))
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name in set(ep.graph_signature.user_inputs):
            g.inputs.append(TensorInfo(n.name, *_shape_dtype(n.meta.get("val"))))
    return g


def _module_path(stack) -> str | None:
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    # torch.export writes paths like "blocks.0.expand" or, for nested calls, "L['self'].blocks[0]"
    path = re.sub(r"L\['self'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    return path.strip(".")


def _module_path_from_scopes(text: str) -> str | None:
    """torch.onnx writes a node's module scopes as a Python list literal: read it as data, never evaluated, and
    only if it is a short list of strings (the metadata is the model's own text)."""
    if not isinstance(text, str) or len(text) > 10_000:
        return None
    try:
        import ast
        scopes = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        return None
    # torch 2.13's exporter writes each scope as the full path ('m', 'm.vit', 'm.vit.layers.0'); older ones wrote
    # each module's own name ('m', 'vit', 'layers.0'). The last entry is the op itself.
    path = ""
    for scope in scopes[:-1]:
        if scope:
            path = scope if not path or scope.startswith(path + ".") else f"{path}.{scope}"
    return path


def _location(stack_trace: str | None) -> str | None:
    if not stack_trace:
        return None
    hits = re.findall(r'File "([^"]+)", line (\d+)', stack_trace)
    if not hits:
        return None
    # Innermost user frame: torch's own frames (nn.Module internals) say nothing about the user's model.
    user = [h for h in hits if f"{os.sep}torch{os.sep}" not in h[0]]
    path, line = (user or hits)[-1]
    return f"{os.path.basename(path)}:{line}"


def _shape_dtype(val):
    import torch
    if isinstance(val, torch.Tensor):
        return [d if isinstance(d, int) else str(d) for d in val.shape], str(val.dtype).replace("torch.", "")
    return None, None


# ------------------------------------------------------------------------------------------------- ONNX ----
def _capture_onnx(source: Source, workdir: str) -> Captured:
    import onnx
    model = onnx.ModelProto()
    model.CopyFrom(source.onnx_model)
    name_unnamed_nodes(model)
    onnx_path = os.path.join(workdir, "model.onnx")
    onnx.save(model, onnx_path)
    g = onnx_ir_graph(model, "onnx")
    for node in g.nodes:
        meta = node.attributes.pop("_metadata", {})
        node.source_ops = [node.id]
        if meta.get("pkg.torch.onnx.name_scopes"):
            node.module_path = _module_path_from_scopes(meta["pkg.torch.onnx.name_scopes"])
        elif node.id.startswith("/") and "/" in node.id[1:]:
            # torch.onnx (TorchScript exporter) names nodes "/encoder/layer.0/attention/MatMul"
            node.module_path = ".".join(p for p in node.id.strip("/").split("/")[:-1])
    before = Graph(name=source.name, stage="captured", nodes=g.nodes, inputs=g.inputs, outputs=g.outputs)
    return Captured(source, onnx_path, g, before, [o.name for o in model.graph.output])


def name_unnamed_nodes(model) -> None:
    """Targets identify nodes by name: give unnamed (or duplicate) nodes stable, unique names, in place."""
    seen = {n.name for n in model.graph.node if n.name}
    used = set()
    for i, n in enumerate(model.graph.node):
        if not n.name or n.name in used:
            name = f"{n.op_type}_{i}"
            while name in seen:
                name += "_"
            n.name = name
        used.add(n.name)
        seen.add(n.name)


def onnx_ir_graph(model, stage: str) -> Graph:
    """An ONNX ModelProto in the IR. Shapes and dtypes come from ONNX shape inference where it succeeds."""
    import onnx
    from onnx import helper
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:
        inferred = model
    types = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        types[vi.name] = _vi_shape_dtype(vi)
    for init in model.graph.initializer:
        types[init.name] = (list(init.dims), helper.tensor_dtype_to_np_dtype(init.data_type).name)
    initializers = {i.name for i in model.graph.initializer}

    def tensor(name):
        shape, dtype = types.get(name, (None, None))
        return TensorInfo(name, shape, dtype)

    g = Graph(name=model.graph.name or "onnx", stage=stage)
    g.inputs = [tensor(i.name) for i in model.graph.input if i.name not in initializers]
    g.outputs = [tensor(o.name) for o in model.graph.output]
    for i, n in enumerate(model.graph.node):
        attrs = {}
        for a in n.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS, onnx.AttributeProto.TENSOR):
                attrs[a.name] = f"<{onnx.AttributeProto.AttributeType.Name(a.type).lower()}>"
            else:
                v = helper.get_attribute_value(a)
                attrs[a.name] = v.decode() if isinstance(v, bytes) else (list(v) if isinstance(v, (list, tuple)) else v)
                if isinstance(attrs[a.name], list):
                    attrs[a.name] = [x.decode() if isinstance(x, bytes) else x for x in attrs[a.name]]
        attrs["_metadata"] = {p.key: p.value for p in n.metadata_props}
        kind = CONSTANT if n.op_type == "Constant" else COMPUTE
        g.nodes.append(Node(id=n.name or f"{n.op_type}_{i}", op_type=n.op_type, domain=n.domain, kind=kind,
                            inputs=[tensor(x) for x in n.input if x], outputs=[tensor(x) for x in n.output if x],
                            attributes=attrs))
    return g


def _vi_shape_dtype(vi):
    from onnx import helper
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        return None, None
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else None
    if not tt.HasField("shape"):
        return None, dtype
    shape = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
    return shape, dtype


@contextlib.contextmanager
def _quiet():
    """torch.export and torch.onnx print progress and warnings to stdout/stderr; keep the CLI output clean."""
    logging.getLogger("torch").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
