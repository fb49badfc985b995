"""Capture: a PyTorch source is exported once with torch.export (the framework-level "before" graph) and once to
ONNX (torch.onnx, dynamo). Every ONNX node keeps a link back to the ExportedProgram node(s) it came from, so every
compiled node of every target can be traced to the user's source op, module path and file:line.

The ONNX export runs with `optimize=False` and then only constant folding: the exporter's full optimizer would fold
BatchNorm into Conv before any target compiler sees the graph, and the fold would be credited to no one. This way
each ONNX node maps to exactly one source op and every fusion is the target compiler's own decision.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .errors import XcInputError, first_line
from .ir import CONSTANT, Graph, Node
from .quiet import quiet_torch
from .readers.exported_program import (
    _FX_NAME,
    _module_path_from_scopes,
    decomposed_origin,
    exported_program_graph,
    user_output_labels,
    user_output_names,
)
from .readers.onnx import name_unnamed_nodes, onnx_ir_graph
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
    tflite_path: str | None = None    # a .tflite source's copy in the capture folder (what the LiteRT targets run)
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
    # An ONNX source's ONNX → PyTorch route (xc_core/onnx_route): the program's file, where each of its nodes came
    # from, the preparation's notes and the conversion's own drift — or the one-line error that stopped it.
    onnx_route: dict | None = None
    # A view of an ONNX capture given to a target that compiles the route's program (targets/routed.py).
    routed: bool = False
    # The captured model's weight records (analysis/model_weights.py; the report's capture.weights). None: not made
    # for this kind of source (Core ML, OpenVINO IR), or not yet (the partial capture handed on after torch.export).
    weights: list[dict] | None = None

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


def capture(source: Source, workdir: str, example_inputs: dict, exported=None, with_onnx: bool = True) -> Captured:
    """The captured model. For a PyTorch source, `exported(partial)` is called once torch.export has finished and
    before the ONNX export starts, with a Captured that has the ExportedProgram, the "before" graph and the
    output names but no ONNX yet: targets that compile from the ExportedProgram can start from it. `with_onnx`
    False stops there (culprit search compiles sub-programs for one target that may not need the ONNX)."""
    os.makedirs(workdir, exist_ok=True)
    if source.is_pytorch:
        return _capture_pytorch(source, workdir, example_inputs, exported, with_onnx)
    if source.kind == "onnx":
        return _capture_onnx(source, workdir)
    if source.kind == "coreml":
        # A compiled Core ML model is its own "before": there is no ONNX for ONNX-consuming targets.
        from .readers.mil import mil_ir_graph
        g = source.coreml_graph if source.mil_program is None else mil_ir_graph(source.mil_program, "mil")
        for n in g.nodes:
            n.source_ops = [n.id] if n.kind != CONSTANT else []
        return Captured(source, None, g, g, [o.name for o in g.outputs])
    if source.kind == "openvino-ir":
        from .readers.openvino import openvino_model_graph
        g = openvino_model_graph(source.openvino_model, "openvino-ir")
        from .sources.openvino_ir import port_name
        outputs = [port_name(o) for o in source.openvino_model.outputs]
        return Captured(source, None, g, g, outputs, ir_path=source.openvino_xml)
    if source.kind == "tflite":
        return _capture_tflite(source, workdir)
    raise XcInputError(f"source kind '{source.kind}' cannot be captured")


def _capture_tflite(source: Source, workdir: str) -> Captured:
    """A .tflite is its own "before" graph: LiteRT's targets run it as it is; nothing else has a way in."""
    import shutil

    from .readers.tflite import TfliteModel
    path = os.path.join(workdir, "model.tflite")
    shutil.copyfile(source.path, path)
    with open(path, "rb") as f:
        data = f.read()
    model = TfliteModel(data)
    g = model.graph(source.name, "tflite")
    for n in g.nodes:
        n.source_ops = [n.id]
    from .analysis.model_weights import records_from_tflite
    from .readers.tflite import TENSOR_TYPES
    notes, weights = [], None
    try:
        weights = records_from_tflite(data, TENSOR_TYPES)
    except Exception as e:  # noqa: BLE001 — a buffer the reader above did not need is damaged: the run goes on
        notes.append(f"no weight records: a constant tensor's buffer could not be read ({first_line(e)})")
    return Captured(source, None, None, g, list(source.tflite_outputs), tflite_path=path, notes=notes,
                    weights=weights)


# ---------------------------------------------------------------------------------------------- PyTorch ----
def _capture_pytorch(source: Source, workdir: str, example_inputs: dict, exported=None,
                     with_onnx: bool = True) -> Captured:
    import torch
    args = tuple(torch.from_numpy(example_inputs[s.name]) for s in source.inputs)
    timings = {}
    t0 = time.perf_counter()
    ep = source.exported_program
    notes = []
    with quiet_torch():
        if ep is None and source.kind == "torchscript":
            # torch.export refuses ScriptModules; its TorchScript converter is the supported bridge.
            from torch._export.converter import TS2EPConverter
            try:
                ep = TS2EPConverter(source.module, args).convert()
            except Exception as e:
                raise XcInputError(f"{source.name}: TorchScript could not be converted to an ExportedProgram "
                                   f"({type(e).__name__}: {first_line(e)})") from None
        elif ep is None:
            try:
                ep = torch.export.export(source.module, args)
            except Exception as e:
                raise XcInputError(f"{source.name}: torch.export failed ({type(e).__name__}: "
                                   f"{first_line(e)})") from None
    timings["torch.export"] = time.perf_counter() - t0
    before = exported_program_graph(ep, source.name, arguments=True)
    if exported is not None:
        exported(Captured(source, None, None, before, user_output_names(ep), ep, dict(timings), list(notes),
                          output_labels=user_output_labels(ep)))
    if not with_onnx:
        return Captured(source, None, None, before, user_output_names(ep), ep, timings, notes,
                        output_labels=user_output_labels(ep))
    # After the hand-on above: the targets that start from the ExportedProgram do not wait for the hashing.
    from .analysis.model_weights import records_from_program
    t0 = time.perf_counter()
    weights = records_from_program(ep, before)
    timings["weight records"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    onnx_path = os.path.join(workdir, "model.onnx")
    with quiet_torch():
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
                            notes + [f"no ONNX: {why}"], onnx_error=why, output_labels=user_output_labels(ep),
                            weights=weights)
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
                    timings, notes, output_labels=user_output_labels(ep), weights=weights)


def _fold_constants(model) -> None:
    """Constant folding and dead-node removal only (no rewrite rules): the exported graph loses the exporter's
    scaffolding (zero-bias Expand chains, CastLike of constants) but no fusion happens before a target sees it."""
    import onnxscript.optimizer as opt
    opt.fold_constants(model)
    opt.remove_unused_nodes(model)


# ------------------------------------------------------------------------------------------------- ONNX ----
def _capture_onnx(source: Source, workdir: str) -> Captured:
    import onnx
    model = onnx.ModelProto()
    model.CopyFrom(source.onnx_model)
    name_unnamed_nodes(model)
    onnx_path = os.path.join(workdir, "model.onnx")
    onnx.save(model, onnx_path)
    g = onnx_ir_graph(model, "onnx")
    restore_onnx_module_paths(g)
    for node in g.nodes:
        node.source_ops = [node.id]
    before = Graph(name=source.name, stage="captured", nodes=g.nodes, inputs=g.inputs, outputs=g.outputs)
    from .analysis.model_weights import records_from_onnx
    t0 = time.perf_counter()
    weights = records_from_onnx(model, g)
    return Captured(source, onnx_path, g, before, [o.name for o in model.graph.output],
                    timings={"weight records": time.perf_counter() - t0}, weights=weights)


def restore_onnx_module_paths(g: Graph) -> None:
    """Each node's module path from what its exporter wrote, in place: torch.onnx's name scopes metadata (dynamo),
    else a TorchScript-exporter node name ("/encoder/layer.0/attention/MatMul"). The metadata leaves the attributes
    (read by onnx_ir_graph as `_metadata`)."""
    for node in g.nodes:
        meta = node.attributes.pop("_metadata", {})
        if meta.get("pkg.torch.onnx.name_scopes"):
            node.module_path = _module_path_from_scopes(meta["pkg.torch.onnx.name_scopes"])
        elif node.id.startswith("/") and "/" in node.id[1:]:
            node.module_path = ".".join(p for p in node.id.strip("/").split("/")[:-1])


