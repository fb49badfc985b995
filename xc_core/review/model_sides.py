"""One side of a model diff: the graph and weights of a run's model, in the format family both sides share.

A run's report holds its captured graph (capture.graph: aten ops for a PyTorch source, ONNX nodes for an ONNX
source) and its weight records (capture.weights: name, shape, dtype, hash, norm). That is enough to say what changed;
how much a weight changed (the relative L2 of the change) needs the values, read from the run's files when they are
at hand (a stored run, a run folder) — `values` is None when they are not (a report.json alone).
"""
from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

from ..errors import XcInputError
from ..report.types import NodeRecord, WeightRecord
from ..views.typed_report import as_report

ATEN, ONNX, TFLITE = "aten", "onnx", "tflite"


@dataclass
class ModelSide:
    """A model as the diff sees it: nodes in topological order, the weights they read, and (maybe) the values."""
    label: str                              # how to name it: the source's file name or sample
    family: str                             # ATEN | ONNX | TFLITE: what the node op types are
    graph: str                              # where the nodes come from, in words ("captured graph", "ONNX export")
    nodes: list[NodeRecord]                 # the graph's nodes, topological order (compute, alias, … as recorded)
    weights: list[WeightRecord] = field(default_factory=list)
    # Exact values by WeightRecord.name, for the names asked (missing names left out); None: no files at hand.
    values: Callable[[list[str]], dict] | None = None
    notes: list[str] = field(default_factory=list)   # what this side could not give (no weights recorded, …)


# Where a run keeps its captured model (paths in the run: review.runs.Run.files; the folder: pipeline/plan.py).
PT2_IN_RUN = "capture/exported_program.pt2"         # a PyTorch source's ExportedProgram
ONNX_IN_RUN = "artifacts/capture/model.onnx"        # an ONNX source as captured; a PyTorch source's ONNX export
TFLITE_IN_RUN = "artifacts/capture/model.tflite"    # a .tflite source's copy
NO_WEIGHT_RECORDS = "{role} run has no weight records (made by an xc before runs kept them): weights not compared"
_PYTORCH_KINDS = ("sample", "exported-program", "torchscript", "state-dict")   # sources.spec.Source.is_pytorch


def run_family(report) -> str | None:
    """What a run's captured graph is: ATEN (a PyTorch source), ONNX, TFLITE, or None (a Core ML or OpenVINO IR
    source: no family a model diff reads)."""
    r = as_report(report)
    domains = {n.domain for n in r.capture.graph.nodes}
    if "aten" in domains or r.source.kind in _PYTORCH_KINDS:
        return ATEN
    if "tflite" in domains or r.source.kind == "tflite":
        return TFLITE
    if r.source.kind == "onnx":
        return ONNX
    return None


def side_from_report(report, files: dict[str, str] | None = None, family: str | None = None, *,
                     role: str = "this", optimize_export: bool = False) -> ModelSide:
    """One side of a model diff from a run's report (and its files: path in run → file on disk, when at hand).
    The nodes and weight records are the captured graph's; `family` ONNX for a PyTorch run reads its ONNX export
    instead (from `files`: what lets a PyTorch source be compared with an ONNX one). `role` names the run in notes
    ("base", "new"); `optimize_export`: that export optimized as torch.onnx.export does by default (xc exports
    without its rewrites, so targets see the unfused graph; an ONNX file someone exported has them). Raises
    XcInputError (one line) when the side cannot be built."""
    own = run_family(report)
    family = family or own
    r = as_report(report)
    label = r.source.name or "model"
    if family == ONNX and own == ATEN:
        return _onnx_export_side(report, files or {}, label, role, optimize_export)
    if family != own or family is None:
        raise XcInputError(f"{role} run: its captured graph is {r.capture.before_stage or 'not a model graph'}, "
                           f"not {family or 'one a model diff reads'} (accepted: PyTorch, ONNX or .tflite sources)")
    # A report dict says whether capture.weights was written at all (empty: a model without weights).
    raw_capture = report.get("capture") if isinstance(report, Mapping) else None
    recorded = "weights" in raw_capture if isinstance(raw_capture, Mapping) else bool(r.capture.weights)
    notes = [] if recorded else [NO_WEIGHT_RECORDS.format(role=role)]
    values = None
    if files:
        if family == ATEN and PT2_IN_RUN in files:
            values = _pt2_values(files[PT2_IN_RUN])
        elif family == ONNX and ONNX_IN_RUN in files:
            values = _OnnxValues(files, ONNX_IN_RUN).get
        elif family == TFLITE and TFLITE_IN_RUN in files:
            values = _tflite_values(files[TFLITE_IN_RUN])
    graph = {ATEN: "captured graph (torch.export)", ONNX: "captured ONNX graph", TFLITE: "TFLite graph"}[family]
    return ModelSide(label, family, graph, list(r.capture.graph.nodes), list(r.capture.weights), values, notes)


def mixed_families(base, new) -> bool:
    """Whether one run is a PyTorch source and the other an ONNX source (they compare through the ONNX export)."""
    return {run_family(base.report), run_family(new.report)} == {ATEN, ONNX}


def model_sides(base, new, optimize_export: bool = False) -> tuple[ModelSide, ModelSide] | str:
    """Both runs (review.runs.Run) as sides of one model diff, in the family they share, or one line saying why
    they cannot be compared as models. Two PyTorch runs compare their aten graphs, two ONNX runs their ONNX graphs;
    a PyTorch run against an ONNX one compares in ONNX, through the PyTorch run's ONNX export."""
    families = {"base": run_family(base.report), "new": run_family(new.report)}
    for role, fam in families.items():
        if fam is None:
            kind = as_report((base if role == "base" else new).report).source.kind or "unknown"
            return (f"{role} is a {kind} model: a model diff compares PyTorch, ONNX or .tflite sources' captured "
                    "graphs")
    if TFLITE in families.values() and families["base"] != families["new"]:
        other = next(f for f in families.values() if f != TFLITE)
        return (f"base is {_WORDS[families['base']]} and new {_WORDS[families['new']]}: a .tflite compares only "
                f"with another .tflite (its ops are not {_WORDS[other]}'s)")
    family = families["base"] if families["base"] == families["new"] else ONNX
    sides = []
    for role, run in (("base", base), ("new", new)):
        if family == ONNX and families[role] == ATEN:
            why = _no_onnx_export(run, role)
            if why:
                return why
        try:
            side = side_from_report(run.report, run.files, family, role=role, optimize_export=optimize_export)
        except XcInputError as e:
            return str(e)
        side.label = run.label or side.label
        sides.append(side)
    return sides[0], sides[1]


_WORDS = {ATEN: "a PyTorch model", ONNX: "an ONNX model", TFLITE: "a .tflite"}


def _no_onnx_export(run, role: str) -> str | None:
    """Why a PyTorch run's ONNX export cannot stand in for it, or None."""
    r = as_report(run.report)
    if r.capture.onnx_error:
        return f"{role} is a PyTorch model whose ONNX export failed ({r.capture.onnx_error}): it cannot be " \
               "compared with an ONNX model"
    if ONNX_IN_RUN not in (run.files or {}):
        return (f"{role} is a PyTorch model and the other an ONNX model: they compare through {role}'s ONNX export "
                f"({ONNX_IN_RUN}), which needs the run's files — give a stored run or a run folder, not a "
                "report.json alone")
    return None


# ---------------------------------------------------------------------------------------------- ONNX export ----
def _onnx_export_side(report, files: dict, label: str, role: str, optimize: bool = False) -> ModelSide:
    """A PyTorch run as an ONNX model: its ONNX export read into the IR, module paths from the exporter's
    metadata (as capture does), weight records made from the file."""
    from ..analysis.model_weights import records_from_onnx
    from ..capture import restore_onnx_module_paths
    from ..readers.onnx import name_unnamed_nodes, onnx_ir_graph
    if ONNX_IN_RUN not in files:
        raise XcInputError(f"{role} run: its ONNX export ({ONNX_IN_RUN}) is not among its files; accepted: a "
                           "stored run or a run folder")
    reader = _OnnxValues(files, ONNX_IN_RUN)
    model = reader.model(with_data=True)
    if optimize:
        import onnxscript.optimizer
        model = onnxscript.optimizer.optimize(model)
        reader.use(model)       # folded constants are new tensors: values come from the optimized model
    name_unnamed_nodes(model)
    graph = onnx_ir_graph(model, "onnx")
    restore_onnx_module_paths(graph)
    nodes = [NodeRecord.from_dict(n.to_dict()) for n in graph.nodes]
    weights = [WeightRecord.from_dict(w) for w in records_from_onnx(model, graph)]
    how = "ONNX export (torch.onnx, optimized as its default)" if optimize else "ONNX export (torch.onnx)"
    return ModelSide(label, ONNX, how, nodes, weights, reader.get, [])


class _OnnxValues:
    """An ONNX file of a run, read on first use: its initializers' and Constant nodes' values by name. External
    data is read only from the run's own files (the map of path in run → file), never from a path the model
    names."""

    def __init__(self, files: dict, rel: str):
        self.files, self.rel = files, rel
        self._model = None
        self._tensors = None

    def model(self, with_data: bool = False):
        if self._model is None:
            import onnx

            from ..limits import MIB, Limits, exceeded
            path = self.files[self.rel]
            limits = Limits.from_env()
            if os.path.getsize(path) > limits.max_file_mb * MIB:
                raise exceeded("max_file_mb", f"{self.rel}: the file is", os.path.getsize(path), limits)
            try:
                self._model = onnx.load(path, load_external_data=False)
            except Exception as e:  # noqa: BLE001 — protobuf's DecodeError and its kin
                raise XcInputError(f"{self.rel}: not a valid ONNX protobuf ({type(e).__name__})") from None
        if with_data:
            for t in self._index().values():
                self._load_external(t)
        return self._model

    def use(self, model) -> None:
        """Read values from `model` (the file's model transformed in memory, its data already loaded)."""
        self._model, self._tensors = model, None

    def _index(self) -> dict:
        if self._tensors is None:
            from onnx import AttributeProto
            graph = self.model().graph
            self._tensors = {t.name: t for t in graph.initializer}
            for node in graph.node:
                if node.op_type == "Constant" and node.output:
                    for a in node.attribute:
                        if a.name == "value" and a.type == AttributeProto.TENSOR:
                            self._tensors.setdefault(node.output[0], a.t)
        return self._tensors

    def get(self, names) -> dict:
        from onnx import numpy_helper
        index = self._index()
        out = {}
        for name in names:
            t = index.get(name)
            if t is None:
                continue
            self._load_external(t)
            out[name] = _as_float_if_exotic(numpy_helper.to_array(t))
        return out

    def _load_external(self, tensor) -> None:
        from onnx import TensorProto
        if tensor.data_location != TensorProto.EXTERNAL:
            return
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        folder = posixpath.dirname(self.rel)
        rel = posixpath.normpath(posixpath.join(folder, location.replace("\\", "/")))
        if not location or location.startswith("/") or rel.startswith("../") or rel not in self.files:
            raise XcInputError(f"{self.rel}: initializer {tensor.name[:80]!r} keeps its data in {location[:80]!r}, "
                               "which is not a file of the run")
        offset, length = int(info.get("offset") or 0), info.get("length")
        size = os.path.getsize(self.files[rel])
        length = size - offset if length is None else int(length)
        if offset < 0 or length < 0 or offset + length > size:
            raise XcInputError(f"{self.rel}: initializer {tensor.name[:80]!r} points past the end of {location[:80]!r}")
        with open(self.files[rel], "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT


def _pt2_values(path: str):
    """The values of a run's ExportedProgram's weights by state-dict / constants key, read from the archive
    through xc's safe loader, only those asked."""
    def values(names) -> dict:
        from ..limits import Limits
        from ..sources.pt2_archive import load_pt2_tensors
        tensors = load_pt2_tensors(path, Limits.from_env(), list(names))
        return {k: _torch_to_numpy(t) for k, t in tensors.items()}
    return values


def _tflite_values(path: str):
    """A .tflite's constant tensors' values by tensor name (the file read once, on first use)."""
    cache = {}

    def values(names) -> dict:
        import numpy as np
        if "tensors" not in cache:
            from ai_edge_litert import schema_py_generated as schema

            from ..readers.tflite import _DTYPES
            with open(path, "rb") as f:
                data = f.read()
            model = schema.Model.GetRootAs(data, 0)
            sg = model.Subgraphs(0)
            found = {}
            for t in range(sg.TensorsLength()):
                tensor = sg.Tensors(t)
                if tensor.Buffer() >= model.BuffersLength():
                    continue
                buf = model.Buffers(tensor.Buffer())
                name = (tensor.Name() or b"").decode("utf-8", "replace") or f"t{t}"
                dtype = _DTYPES[tensor.Type()] if tensor.Type() < len(_DTYPES) else None
                if buf.DataLength() and dtype:
                    found[name] = (buf, dtype, [int(tensor.Shape(k)) for k in range(tensor.ShapeLength())])
            cache["tensors"] = found
        out = {}
        for name in names:
            if name in cache["tensors"]:
                buf, dtype, shape = cache["tensors"][name]
                try:
                    out[name] = buf.DataAsNumpy().view(np.dtype(dtype)).reshape(shape)
                except (TypeError, ValueError):
                    continue
        return out
    return values


def _torch_to_numpy(t):
    import torch
    t = t.detach()
    if t.dtype == torch.bfloat16 or (t.dtype.is_floating_point and t.element_size() == 1):
        t = t.to(torch.float32)           # bf16 / float8: numpy has no such dtype
    return t.contiguous().numpy()


def _as_float_if_exotic(a):
    """bf16 / float8 arrays (ml_dtypes) as float32: what the diff's arithmetic takes."""
    import numpy as np
    return a.astype(np.float32) if a.dtype.kind == "V" or a.dtype.name in ("bfloat16",) or \
        a.dtype.name.startswith("float8") else a
