"""Export a run's report to Google's Model Explorer, to look at what each compiler did as graphs side by side.

For the captured graph and every target that compiled, `write_model_explorer` writes a graph file; for every
target, node-data overlays (backend, precision, CPU fallback, per-layer drift); for every pair of graphs, a
sync-navigation mapping, so that selecting a node in one pane selects the node(s) carrying the same source ops in
the other. index.json and README.txt say which file is which and how to open them.

The export is made when it is asked for (`model_explorer_zip`: the Downloads page's button, `xc report RUN
--format model-explorer`), not with every run: it is a second copy of every graph in the report, in another
format, and a copy per pair of graphs of the mapping — at 20,000 nodes and eight targets 60 MB and a minute of the
report job that most runs never open.

The same graphs, overlays and mappings are built one at a time for the live extension (xc_core/explorer.py, the
package xc_model_explorer): `graph_document`, `project` (a target's per-node values onto any graph of the report,
through source ops), `drift_node_data`, `graph_node_data`, `sync_entries`.

The formats, as ai-edge-model-explorer 0.1.34 and its UI (github.com/google-ai-edge/model-explorer) read them:
- graph: `model_explorer.graph_builder.GraphCollection` as `dataclasses.asdict` serialises it (the form the server
  sends the UI, model_explorer/utils.py `convert_adapter_response`); the UI's built-in JSON adapter takes a
  {label, graphs} object as is (src/ui/src/common/utils.ts, `loadGraphsJson`).
- node data: `model_explorer.node_data_builder.ModelNodeData.to_json_string`, {graph id: GraphNodeData}; the UI
  looks a result key up among output `tensor_name`s first, then node ids
  (src/ui/src/components/visualizer/node_data_provider_extension_service.ts, `processNodeDataProviderDataForGraph`).
- sync navigation: `SyncNavigationData` with `mappingEntries` (src/ui/src/components/visualizer/common/
  sync_navigation.ts, read by sync_navigation_service.ts); this format exists only in the TypeScript UI.

The package itself is not imported: `import model_explorer.graph_builder` runs the package's __init__, which loads
its server, flask and torch (about 2.5 s); the dataclasses' JSON form is small and fixed, so it is written here.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tempfile
import zipfile

from ..ir import COMPUTE, CONSTANT, IO
from ..report.types import GraphBlock, LayerDrift, NodeRecord, Report, TargetBlock, TensorRecord

# The run folder's subfolder the export is written to.
MODEL_EXPLORER_DIR = "model_explorer"

CAPTURED = "captured"
# Labels the built-in adapters give the graph's input and output nodes (builtin-adapter/
# direct_flatbuffer_to_json_graph_convert.cc); the UI names a GraphInputs output by its tensor_name.
GRAPH_INPUTS, GRAPH_OUTPUTS = "GraphInputs", "GraphOutputs"
# As in xc_core.analysis.alignment: constants and graph I/O carry source ops only as bookkeeping, so they neither
# take part in sync navigation nor get a drift value.
_NOT_CARRIERS = (CONSTANT, IO)
_XC_ATTRS = ("kind", "domain", "backend", "kernel", "precision", "fallback", "fallback_reason", "source_ops",
             "fused_from", "module_path", "source_location")
_MAX_ATTR_CHARS = 2000  # a constant's values can be huge; the side panel needs a glance, not the tensor
_DEFAULT_DRIFT_THRESHOLD = 1e-2  # xc_core.analysis.layer_drift.DEFAULT_RTOL_L2, when the report does not say

# Categorical overlays carry the category itself (the UI shows string values on the node and counts them per
# layer); each result has its own colour, since thresholds and gradients only apply to numbers.
_BACKEND_COLORS = {"cpu": "#ffcc80", "nnapi": "#a5d6a7", "ane": "#90caf9", "gpu": "#ce93d8", "npu": "#80cbc4",
                   "coreml": "#ffb74d", "xnnpack": "#f8bbd0", "vulkan": "#b3e5fc", "ethos-u": "#e1bee7",
                   "unknown": "#e0e0e0",
                   "none": "#f5f5f5"}
_PRECISION_COLORS = {"fp32": "#90caf9", "fp16": "#a5d6a7", "bf16": "#c5e1a5", "int8": "#ffcc80",
                     "uint8": "#ffe0b2", "int4": "#ffab91", "mixed": "#ce93d8", "int32": "#e0e0e0",
                     "int64": "#e0e0e0", "bool": "#eeeeee", "string": "#eeeeee", "none": "#f5f5f5"}
_OTHER_COLORS = ("#fff59d", "#b0bec5", "#f48fb1", "#bcaaa4", "#80deea", "#dce775", "#b39ddb")


def write_model_explorer(report: Report | dict, out_dir: str) -> list[str]:
    """Write the Model Explorer files for `report` into `out_dir` (created) and return their paths.

    Files: <graph>.graph.json per graph ("captured" and each target with status ok and a graph);
    <target>.{backend,precision,fallback,drift}.nodedata.json; <left>.vs.<right>.sync.json per pair of graphs;
    index.json (which file is which, sync coverage) and README.txt. Names are the graph ids made file-safe.
    """
    report = Report.of(report)
    graphs = _collect_graphs(report)
    names = _safe_names([gid for gid, _, _ in graphs])
    rank = _source_op_rank(report)
    rows = report.alignment.source_ops
    source = report.source.name or ""
    os.makedirs(out_dir, exist_ok=True)
    written: list[str] = []

    def write(name: str, doc, indent: int | None = None) -> None:
        path = os.path.join(out_dir, name)
        with open(path, "w", encoding="utf-8") as f:
            # allow_nan=False: the UI parses with JSON.parse, which rejects NaN and Infinity.
            f.write(json.dumps(doc, indent=indent, ensure_ascii=False, allow_nan=False,
                               separators=(",", ": ") if indent else (",", ":")))
            f.write("\n")
        written.append(path)

    index: dict = {"source": source, "graphs": {}, "node_data": {}, "sync": [], "skipped": {}}
    for tid, t in report.targets.items():
        if t.status != "ok" or not t.graph:
            index["skipped"][tid] = f"status {t.status}" if t.status != "ok" else "no graph"
    if not report.capture.graph:
        index["skipped"][CAPTURED] = "no captured graph"

    views = {}
    for gid, graph, target in graphs:
        view = _GraphView(gid, graph, target, rows, rank)
        views[gid] = view
        name = f"{names[gid]}.graph.json"
        write(name, view.collection(source))
        index["graphs"][gid] = name
        if target is None:
            continue
        overlays = {"backend": _categorical(view, "backend", _BACKEND_COLORS),
                    "precision": _categorical(view, "precision", _PRECISION_COLORS),
                    "fallback": _fallback(view)}
        drift = _drift(view, target.layer_drift)
        if drift is not None:
            overlays["drift"] = drift
        index["node_data"][gid] = {}
        for kind, data in overlays.items():
            name = f"{names[gid]}.{kind}.nodedata.json"
            write(name, {gid: data})
            index["node_data"][gid][kind] = name

    ids = [gid for gid, _, _ in graphs]
    pairs = [(CAPTURED, b) for b in ids if CAPTURED in views and b != CAPTURED]
    targets = [gid for gid in ids if gid != CAPTURED]
    pairs += [(a, b) for i, a in enumerate(targets) for b in targets[i + 1:]]
    for left, right in pairs:
        entries = _sync_entries(views[left], views[right], rank)
        name = f"{names[left]}.vs.{names[right]}.sync.json"
        write(name, sync_document(entries))
        index["sync"].append({"left": left, "right": right, "file": name,
                              "coverage_left": _coverage(views[left], entries, "leftNodeIds"),
                              "coverage_right": _coverage(views[right], entries, "rightNodeIds"),
                              "entries": len(entries)})

    write("index.json", index, indent=2)
    with open(os.path.join(out_dir, "README.txt"), "w", encoding="utf-8") as f:
        f.write(_readme(index))
    written.append(os.path.join(out_dir, "README.txt"))
    return written


def model_explorer_zip(report: Report | dict, folder: str = MODEL_EXPLORER_DIR) -> bytes:
    """The export as one zip, every file under `folder`/. An export that fails (a bug: it reads only the report)
    gives a zip holding ERROR.txt with the one-line reason, never an exception in the page that asked."""
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory(prefix="xc-me-") as tmp, \
            zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        try:
            paths = write_model_explorer(report, tmp)
        except Exception as e:  # noqa: BLE001 — the analysis stands; say why its export is missing
            z.writestr(f"{folder}/ERROR.txt", f"The Model Explorer export failed: {type(e).__name__}: "
                                              f"{str(e).strip()[:300]}\n")
        else:
            for path in sorted(paths):
                z.write(path, f"{folder}/{os.path.basename(path)}")
    return buf.getvalue()


def export_plan(report: Report | dict) -> dict:
    """The export's index.json without building it: which graph file each graph id gets and each target's backend
    overlay — enough for `open_command`, and cheap (the names only)."""
    graphs = _collect_graphs(Report.of(report))
    names = _safe_names([gid for gid, _, _ in graphs])
    return {"graphs": {gid: f"{names[gid]}.graph.json" for gid, _, _ in graphs},
            "node_data": {gid: {"backend": f"{names[gid]}.backend.nodedata.json"}
                          for gid, _, target in graphs if target is not None}}


# --- builders for a live view (xc_model_explorer: one graph, one overlay at a time) ---------------------------

def graph_ids(report: Report | dict) -> list[str]:
    """The graphs the export shows: "captured" (when the report holds one), then each target with status ok and a
    graph, in the report's order."""
    return [gid for gid, _, _ in _collect_graphs(Report.of(report))]


def graph_view(report: Report | dict, gid: str) -> "_GraphView":
    """The report's graph `gid` ("captured" or a target id) in Model Explorer's terms. KeyError when the report
    has no such graph."""
    report = Report.of(report)
    for graph_id, graph, target in _collect_graphs(report):
        if graph_id == gid:
            return _GraphView(gid, graph, target, report.alignment.source_ops, _source_op_rank(report))
    raise KeyError(gid)


def graph_document(report: Report | dict, gid: str) -> dict:
    """One `graph_builder.Graph` (as `dataclasses.asdict` writes it) of the report's graph `gid`."""
    report = Report.of(report)
    return graph_view(report, gid).collection(report.source.name or "")["graphs"][0]


def project(report: Report | dict, gid: str, tid: str, values: dict[str, object]) -> dict[str, object]:
    """Per-node values of target `tid` (its node id -> value) as results on graph `gid` (result key -> value).

    On the target's own graph each node takes its own value. On another graph (the captured one, another target's)
    a node takes the value of the target's node that computes its latest source op the target has: the node the
    alignment names for that op, the one the sync mapping pairs it with. Nodes no value reaches are left out."""
    report = Report.of(report)
    shown = graph_view(report, gid)
    if gid == tid:
        return {shown.result_key[nid]: v for nid, v in values.items() if nid in shown.result_key}
    owners = graph_view(report, tid).owners
    rank = _source_op_rank(report)
    out = {}
    for n in shown.carriers:
        if n.id not in shown.result_key:
            continue
        for op in sorted(n.source_ops, key=lambda s: rank.get(s, -1), reverse=True):
            if owners.get(op) in values:
                out[shown.result_key[n.id]] = values[owners[op]]
                break
    return out


def drift_node_data(report: Report | dict, gid: str, tid: str, name: str | None = None) -> dict | None:
    """Target `tid`'s per-layer drift on graph `gid` (any graph: drift is measured per source op); None when the
    target has no verified drift point there."""
    report = Report.of(report)
    data = _drift(graph_view(report, gid), report.targets[tid].layer_drift)
    if data is not None and name:
        data["name"] = name
    return data


def graph_node_data(name: str, results: dict, thresholds: list | None = None, categorical: bool = False) -> dict:
    """A `node_data_builder.GraphNodeData` as `asdict` writes it, for `results` {result key: {value, bgColor?}}."""
    return _graph_node_data(name, results, thresholds, categorical)


def category_color(kind: str, value: str) -> str:
    """The colour a category gets in the export (backend and precision have fixed ones; others a stable pick)."""
    table = {"backend": _BACKEND_COLORS, "precision": _PRECISION_COLORS}.get(kind, {})
    return table.get(value) or _other_color(value)


def sync_entries(report: Report | dict, left: str, right: str) -> list[dict]:
    """The sync-navigation mapping entries between two of the report's graphs, as the export writes them."""
    report = Report.of(report)
    return _sync_entries(graph_view(report, left), graph_view(report, right), _source_op_rank(report))


def file_stems(ids: list[str]) -> dict[str, str]:
    """Graph id -> the file-name stem the export gives it ([A-Za-z0-9_-], unique also by case)."""
    return _safe_names(ids)


def sync_document(entries: list[dict]) -> dict:
    """A `SyncNavigationData` (the UI's "Upload mapping from computer") holding `entries`."""
    # Without a mapping entry the UI would look for the same node id on the other side; across compilers an
    # equal id is no evidence of the same node, so that fallback is off.
    return {"type": "sync_navigation", "mappingEntries": entries, "disableMappingFallback": True}


# --- graphs --------------------------------------------------------------------------------------------------

def _collect_graphs(report: Report) -> list[tuple[str, GraphBlock, TargetBlock | None]]:
    """(graph id, xc graph, target or None) — the captured graph first, then targets in the report's order."""
    out = []
    if report.capture.graph:
        out.append((CAPTURED, report.capture.graph, None))
    for tid, t in report.targets.items():
        if t.status == "ok" and t.graph:
            out.append((tid, t.graph, t))
    return out


class _GraphView:
    """One xc graph in Model Explorer's terms: the GraphNode list plus what overlays and mappings need."""

    def __init__(self, gid: str, graph: GraphBlock, target: TargetBlock | None, rows: list | None,
                 rank: dict[str, int]):
        self.gid, self.graph, self.target = gid, graph, target
        self.nodes = [n for n in graph.nodes if n is not None]
        self.pos = {n.id: i for i, n in enumerate(self.nodes)}
        self.kind = {n.id: n.kind for n in self.nodes}
        self.me_nodes, self.inputs_id, self.outputs_id = _me_nodes(graph, self.nodes)
        self.result_key = _result_keys(self.me_nodes)
        self.carriers = [n for n in self.nodes if n.kind not in _NOT_CARRIERS and n.source_ops]
        self.owners = _owners(gid, self.carriers, rows, rank)

    def collection(self, source: str) -> dict:
        g = self.graph
        info = {"xc graph": self.gid, "source": source, "stage": g.stage, "evidence": g.evidence}
        if self.target is not None:
            info.update(target=self.target.label, status=self.target.status)
        graph = {"id": self.gid, "nodes": self.me_nodes,
                 # The "" group is the graph itself: shown in the side panel when no node is selected.
                 "groupNodeAttributes": {"": {k: _text(v) for k, v in info.items() if v not in (None, "")}},
                 "groupNodeConfigs": None, "nodeLabelsToHide": None, "tasksData": None, "layoutConfigs": None}
        label = f"{source} · {self.gid}" if source else self.gid
        return {"label": label, "graphs": [graph], "graphSorting": "node_count_desc"}


def _me_nodes(graph: GraphBlock, nodes: list[NodeRecord]) -> tuple[list[dict], str | None, str | None]:
    """GraphNode dicts with edges by tensor name, plus GraphInputs/GraphOutputs nodes where edges need them."""
    producer: dict[str, tuple[str, int]] = {}
    for n in nodes:
        for j, t in enumerate(n.outputs):
            if t.name:
                producer.setdefault(t.name, (n.id, j))
    consumed = {t.name for n in nodes for t in n.inputs}
    taken = {n.id for n in nodes}
    # Declared inputs that a node reads but none produces; without a node to start from their edges would not be
    # drawn (the UI drops edges from unknown nodes). Initializers (weights) stay in inputsMetadata only.
    graph_inputs = [t for t in graph.inputs if t.name and t.name in consumed and t.name not in producer]
    graph_outputs = [t for t in graph.outputs if t.name in producer]
    inputs_id = _unique(GRAPH_INPUTS, taken) if graph_inputs else None
    outputs_id = _unique(GRAPH_OUTPUTS, taken | {inputs_id}) if graph_outputs else None
    for k, t in enumerate(graph_inputs):
        producer[t.name] = (inputs_id, k)

    namespaces = _namespaces(nodes, producer)
    out = []
    if inputs_id:
        out.append(_me_node(inputs_id, GRAPH_INPUTS, "", [], [], [_metadata(k, t) for k, t in
                                                                  enumerate(graph_inputs)], []))
    for n in nodes:
        edges, inputs_meta = [], []
        for i, t in enumerate(n.inputs):
            inputs_meta.append(_metadata(i, t))
            src = producer.get(t.name)
            if src and src[0] != n.id:
                edges.append(_edge(src, i))
        out.append(_me_node(n.id, n.op_type or "?", namespaces[n.id], _attrs(n), edges,
                            [_metadata(j, t) for j, t in enumerate(n.outputs)], inputs_meta))
    if outputs_id:
        out.append(_me_node(outputs_id, GRAPH_OUTPUTS, "", [], [_edge(producer[t.name], k)
                                                               for k, t in enumerate(graph_outputs)],
                            [], [_metadata(k, t) for k, t in enumerate(graph_outputs)]))
    return out, inputs_id, outputs_id


def _namespaces(nodes: list[NodeRecord], producer: dict[str, tuple[str, int]]) -> dict[str, str]:
    """Layer path per node: its module path ("blocks.0.expand" -> "blocks/0/expand"; the UI splits on "/" and
    reads ";" as a separator too). A node with none (a reorder or cast the compiler inserted, a constant) goes into
    the deepest layer its producers and consumers share, so it is drawn inside that layer instead of pulling edges
    out to the top level."""
    own = {n.id: (n.module_path or "").replace(".", "/").replace(";", "_") for n in nodes}
    consumers: dict[str, list[str]] = {}
    for n in nodes:
        for t in n.inputs:
            consumers.setdefault(t.name, []).append(n.id)
    out = dict(own)
    # A chain of such nodes (a constant feeding an inserted reshape) takes a few rounds; 8 bound the cost.
    for _ in range(8):
        changed = False
        for n in nodes:
            if own[n.id] or n.kind == IO:  # graph inputs and outputs stay at the top, as GraphInputs
                continue
            near = [out.get(producer.get(t.name, ("",))[0], "") for t in n.inputs]
            near += [out[c] for t in n.outputs for c in consumers.get(t.name, [])]
            paths = [p.split("/") for p in near if p]
            shared = []
            for parts in zip(*paths) if paths else ():
                if len(set(parts)) > 1:
                    break
                shared.append(parts[0])
            if "/".join(shared) != out[n.id]:
                out[n.id], changed = "/".join(shared), True
        if not changed:
            break
    return out


def _me_node(nid, label, namespace, attrs, edges, outputs_meta, inputs_meta) -> dict:
    # Every field of graph_builder.GraphNode, in its order, as dataclasses.asdict writes it.
    return {"id": nid, "label": label, "namespace": namespace, "subgraphIds": [], "attrs": attrs,
            "incomingEdges": edges, "outputsMetadata": outputs_meta, "inputsMetadata": inputs_meta,
            "style": None, "config": None}


def _edge(src: tuple[str, int], input_index: int) -> dict:
    return {"sourceNodeId": src[0], "sourceNodeOutputId": str(src[1]), "targetNodeInputId": str(input_index)}


def _metadata(index: int, tensor: TensorRecord) -> dict:
    # Keys as the UI's own tfjs loader writes them (src/ui/src/common/tfjs.ts): tensor_name, shape, dtype.
    attrs = [{"key": "tensor_name", "value": _text(tensor.name)}] if tensor.name else []
    if tensor.shape is not None:
        dims = "x".join("?" if d is None else str(d) for d in tensor.shape)
        attrs.append({"key": "shape", "value": dims or "[]"})
    if tensor.dtype:
        attrs.append({"key": "dtype", "value": _text(tensor.dtype)})
    return {"id": str(index), "attrs": attrs}


def _attrs(node: NodeRecord) -> list[dict]:
    out = []
    for key in _XC_ATTRS:
        value = getattr(node, key)
        if value in (None, "", (), False):
            continue
        out.append({"key": key, "value": ", ".join(map(str, value)) if isinstance(value, tuple) else _text(value)})
    for key in sorted(node.attributes):
        value = node.attributes[key]
        if value is not None:
            out.append({"key": f"attr:{key}" if key in _XC_ATTRS else key, "value": _text(value)})
    return out


def _text(value) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)
    return text if len(text) <= _MAX_ATTR_CHARS else text[:_MAX_ATTR_CHARS] + "…"


def _unique(base: str, taken: set) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def _result_keys(me_nodes: list[dict]) -> dict[str, str]:
    """node id -> the key a node-data result must have to land on that node.

    The UI maps a result key through {output tensor_name: node id} (last node wins) before using it as a node id,
    so a node id that is also another node's tensor name would colour that other node; such a node is keyed by
    one of its own tensor names instead. Nodes no key reaches are left out.
    """
    by_tensor: dict[str, str] = {}
    for n in me_nodes:
        for m in n["outputsMetadata"]:
            for a in m["attrs"]:
                if a["key"] == "tensor_name":
                    by_tensor[a["value"]] = n["id"]
    keys = {}
    for n in me_nodes:
        names = [a["value"] for m in n["outputsMetadata"] for a in m["attrs"] if a["key"] == "tensor_name"]
        for key in [n["id"], *names]:
            if by_tensor.get(key, key) == n["id"]:
                keys[n["id"]] = key
                break
    return keys


def _safe_names(ids: list[str]) -> dict[str, str]:
    """Graph id -> a file-name stem of [A-Za-z0-9_-] ("ort-nnapi[fp16=True]" -> "ort-nnapi_fp16_True"); ids that
    would collide (also only by case, for case-insensitive file systems) get a hash of the id appended."""
    out, used = {}, set()
    for gid in ids:
        base = re.sub(r"[^A-Za-z0-9_-]+", "_", gid).strip("_") or "graph"
        name = base
        if name.lower() in used:
            name = f"{base}_{hashlib.sha1(gid.encode()).hexdigest()[:8]}"
        used.add(name.lower())
        out[gid] = name
    return out


# --- node data -----------------------------------------------------------------------------------------------

def _graph_node_data(name: str, results: dict, thresholds: list | None = None, categorical: bool = False) -> dict:
    # Every field of node_data_builder.GraphNodeData that is not None, in its order (ModelNodeData.to_json_string).
    return {"results": {k: results[k] for k in sorted(results)}, "name": name, "thresholds": thresholds or [],
            "gradient": [], "hideInAggregatedStatsTable": categorical, "hideInChildrenStatsTable": False,
            "showExpandedSummaryOnGroupNode": categorical,
            "showLabelCountColumnsInChildrenStatsTable": categorical}


def _categorical(view: _GraphView, field: str, colors: dict[str, str]) -> dict:
    results = {}
    for n in view.nodes:
        key = view.result_key.get(n.id)
        if key is not None:
            value = str(getattr(n, field) or "none")
            results[key] = {"value": value, "bgColor": colors.get(value) or _other_color(value)}
    return _graph_node_data(f"{view.gid} · {field}", results, categorical=True)


def _other_color(value: str) -> str:
    # Stable across runs and files: the same category always gets the same colour.
    return _OTHER_COLORS[int(hashlib.sha1(value.encode()).hexdigest(), 16) % len(_OTHER_COLORS)]


def _fallback(view: _GraphView) -> dict:
    results = {view.result_key[n.id]: {"value": 1 if n.fallback else 0}
               for n in view.nodes if n.id in view.result_key}
    thresholds = [{"value": 0, "bgColor": "#e8f5e9"}, {"value": 1, "bgColor": "#ef5350"}]
    return _graph_node_data(f"{view.gid} · CPU fallback (1 = fell back)", results, thresholds)


def _drift(view: _GraphView, layer_drift: LayerDrift) -> dict | None:
    """rel L2 against the reference per node: a node takes the measured point of its deepest source op (its
    output is that op's tensor; earlier ones were fused away inside it). Points that failed verification
    (analysis/layer_drift.py: they may compare another tensor) are not shown. None when there are no points."""
    points = [p for p in layer_drift.points if p is not None and p.verified]
    if not points:
        return None
    by_op: dict[str, tuple[float, float]] = {}
    for p in points:
        rel = p.rel_l2
        if p.source_op and isinstance(rel, (int, float)) and math.isfinite(rel):
            by_op.setdefault(p.source_op, (p.depth if isinstance(p.depth, (int, float)) else -1, float(rel)))
    results = {}
    for n in view.carriers:
        measured = [by_op[s] for s in n.source_ops if s in by_op]
        if measured and n.id in view.result_key:
            results[view.result_key[n.id]] = {"value": max(measured)[1]}
    if not results:
        return None
    t = layer_drift.threshold_rel_l2 or _DEFAULT_DRIFT_THRESHOLD
    top = max([10 * t] + [r["value"] for r in results.values()])
    # Orders of magnitude below the threshold matter more than a linear gradient would show.
    thresholds = [{"value": t / 100, "bgColor": "#c8e6c9"}, {"value": t / 10, "bgColor": "#fff9c4"},
                  {"value": t, "bgColor": "#ffcc80"}, {"value": top, "bgColor": "#ef5350"}]
    return _graph_node_data(f"{view.gid} · rel L2 vs reference (> {t:g} diverges)", results, thresholds)


# --- sync navigation -----------------------------------------------------------------------------------------

def _source_op_rank(report: Report) -> dict[str, int]:
    """Source op -> execution order (the alignment lists source ops in the captured graph's order)."""
    # The alignment's rows are kept as read (report/types.py Alignment): dicts.
    order = [r.get("source_op") for r in report.alignment.source_ops or []]
    order += [n.id for n in report.capture.graph.nodes if n is not None]
    rank: dict[str, int] = {}
    for s in order:
        if s is not None and s not in rank:
            rank[s] = len(rank)
    return rank


def _owners(gid: str, carriers: list[NodeRecord], rows: list | None, rank: dict[str, int]) -> dict[str, str]:
    """Source op -> the one node of this graph that stands for it.

    Candidates are the alignment's carriers of the op (its "node" first, then its "nodes"); without an alignment
    (the captured graph), the carriers themselves, the node named after the op first, then those with the most
    source ops, as the alignment orders them. Of the candidates, the first that computes the op's value wins: the
    one whose latest source op it is. The alignment's own pick, the carrier with the most source ops, is often
    the next layer (Core ML's conv carries the activation before it), and owning the previous op there would
    chain neighbouring layers into one mapping entry.
    """
    by_id = {n.id: n for n in carriers}
    candidates: dict[str, list[str]] = {}
    if gid != CAPTURED and any(gid in (row.get("targets") or {}) for row in rows or []):
        for row in rows:
            entry = (row.get("targets") or {}).get(gid) or {}
            listed = [entry.get("node"), *(entry.get("nodes") or [])]
            ids = [i for k, i in enumerate(listed) if i in by_id and i not in listed[:k]]
            if row.get("source_op") and ids:
                candidates[row["source_op"]] = ids
    else:
        for n in carriers:
            for op in n.source_ops:
                candidates.setdefault(op, []).append(n.id)
        for op, ids in candidates.items():
            ids.sort(key=lambda i: (i != op, -len(by_id[i].source_ops)))
    owners = {}
    for op, ids in candidates.items():
        computing = [i for i in ids if max(by_id[i].source_ops, key=lambda o: rank.get(o, -1)) == op]
        owners[op] = (computing or ids)[0]
    return owners


def _sync_entries(left: _GraphView, right: _GraphView, rank: dict[str, int]) -> list[dict]:
    """Mapping entries {leftNodeIds, rightNodeIds}: the UI expects each node in at most one entry, so entries are
    the connected groups of nodes linked through shared source ops.

    A source op links its owner on the left with its owner on the right. Linking every carrier instead would chain
    the whole graph into one group: compilers attribute boundary ops to both neighbours (Core ML's conv carries
    the previous block's activation). A carrier that owns no linked op joins the group of the owner of its latest
    source op that both sides have, so every node carrying a source op is mapped.
    """
    parent: dict[tuple, tuple] = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    shared = set(left.owners) & set(right.owners)
    principal = set()
    for s in shared:
        a, b = (0, left.owners[s]), (1, right.owners[s])
        union(a, b)
        principal |= {a, b}
    members = set(principal)
    for side, view in ((0, left), (1, right)):
        for n in view.carriers:
            key = (side, n.id)
            if key in members:
                continue
            for s in sorted(n.source_ops, key=lambda s: rank.get(s, -1), reverse=True):
                if s in shared:
                    union(key, (side, view.owners[s]))
                    members.add(key)
                    break
    groups: dict[tuple, list] = {}
    for key in members:
        groups.setdefault(find(key), []).append(key)

    def ordered(view, side, keys):
        # Owners first: with several mapped nodes the UI reveals the first one.
        return [k[1] for k in sorted((k for k in keys if k[0] == side),
                                     key=lambda k: (k not in principal, view.pos[k[1]]))]

    entries = [{"leftNodeIds": ordered(left, 0, keys), "rightNodeIds": ordered(right, 1, keys)}
               for keys in groups.values()]
    entries.sort(key=lambda e: min(left.pos[i] for i in e["leftNodeIds"]))
    for attr in ("inputs_id", "outputs_id"):
        a, b = getattr(left, attr), getattr(right, attr)
        if a and b:
            entries.append({"leftNodeIds": [a], "rightNodeIds": [b]})
    return entries


def _coverage(view: _GraphView, entries: list[dict], side: str) -> float:
    """Share of the graph's compute nodes that have a mapping entry."""
    compute = [nid for nid, kind in view.kind.items() if kind == COMPUTE]
    if not compute:
        return 1.0
    mapped = {nid for e in entries for nid in e[side]}
    return round(sum(nid in mapped for nid in compute) / len(compute), 4)


# --- index ---------------------------------------------------------------------------------------------------

def open_command(index: dict, graph_ids: list[str], folder: str = "") -> str:
    """The `model-explorer` command that opens the graphs `graph_ids` (ids of index["graphs"]; unknown ids are
    left out) from `folder`, the first with its backend overlay: its CLI applies a --node_data_paths file to the
    first model it is given. File names are quoted for a POSIX shell."""
    import shlex

    def path(name: str) -> str:
        return shlex.quote(f"{folder}/{name}" if folder else name)

    ids = [g for g in dict.fromkeys(graph_ids) if g in index.get("graphs", {})]
    if not ids:
        return ""
    cmd = "model-explorer " + ",".join(path(index["graphs"][g]) for g in ids)
    overlay = (index.get("node_data") or {}).get(ids[0], {}).get("backend")
    return cmd + (f" --node_data_paths={path(overlay)}" if overlay else "")



def _readme(index: dict) -> str:
    lines = [f"Model Explorer files for {index['source'] or 'an xc run'}, written by xc.", "",
             "Open with Google's Model Explorer (pip install ai-edge-model-explorer):", "",
             "  model-explorer <graph>.graph.json [--node_data_paths=<graph>.backend.nodedata.json,...]", "",
             "Node data: with a graph open, 'Add per-node data' (top bar) > 'Load json data file' > Upload, and "
             "pick a <graph>.*.nodedata.json (each applies to the graph of the same name).",
             "Sync navigation: load two graphs (model-explorer a.graph.json,b.graph.json), open the second from the "
             "graph selector with 'Open in split pane', then 'Sync' between the panes > 'Upload mapping from "
             "computer' > Upload, and pick <left>.vs.<right>.sync.json (the left pane's graph first).",
             "index.json lists the same in machine-readable form, with each mapping's coverage of compute nodes.",
             ""]
    targets = [g for g in index["graphs"] if g != CAPTURED]
    if targets:      # a command to paste: the first target beside the captured graph, with its backends coloured
        lines += ["For example, from this folder:", "", "  " + open_command(index, [targets[0], CAPTURED]), ""]
    lines += ["Graphs:"]
    lines += [f"  {gid}: {name}" for gid, name in index["graphs"].items()]
    lines += ["", "Node data (backend, precision: category per node; fallback: 1 = the node fell back to CPU; "
              "drift: rel L2 against the reference at the node's deepest measured source op):"]
    for gid, files in index["node_data"].items():
        lines += [f"  {gid} {kind}: {name}" for kind, name in files.items()]
    lines += ["", "Sync navigation (left | right: file, share of compute nodes mapped on each side):"]
    lines += [f"  {s['left']} | {s['right']}: {s['file']} ({s['coverage_left']:.0%} | {s['coverage_right']:.0%})"
              for s in index["sync"]]
    if index["skipped"]:
        lines += ["", "Not exported:"] + [f"  {gid}: {why}" for gid, why in index["skipped"].items()]
    return "\n".join(lines) + "\n"
