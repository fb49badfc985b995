"""Model Explorer export: every file loads the way ai-edge-model-explorer 0.1.34 loads it, mappings are exact on a
hand-built report and cover the compute nodes of a real run.

What "loads" means per file, as the package reads it:
- graph: the Python side builds graphs from JSON with dacite into `graph_builder` dataclasses (ndp_runner.py) and
  serialises them with `utils.convert_adapter_response`; the UI's JSON adapter takes a {label, graphs} object as
  is (src/ui/src/common/utils.ts, `loadGraphsJson`, ported below).
- node data: `node_data_builder.ModelNodeData` must write the file back unchanged; the UI resolves result keys
  through output tensor names, then node ids (src/ui/src/components/visualizer/
  node_data_provider_extension_service.ts, `getNodeDataProviderData` and `processNodeDataProviderDataForGraph`,
  ported below).
- sync navigation: only the TypeScript UI reads it, so it is checked against `SyncNavigationData` /
  `SyncNavigationMappingEntry` in src/ui/src/components/visualizer/common/sync_navigation.ts and processed as
  sync_navigation_service.ts `updateSyncNavigationData` does.
"""
import dataclasses
import json
import math
import os
import re

import pytest

dacite = pytest.importorskip("dacite")
gb = pytest.importorskip("model_explorer.graph_builder")
ndb = pytest.importorskip("model_explorer.node_data_builder")
from model_explorer.utils import convert_adapter_response  # noqa: E402

from xc_core.export.model_explorer import write_model_explorer  # noqa: E402

SAFE_FILE = re.compile(r"^[A-Za-z0-9_.-]+$")
# Fields of SyncNavigationData (sync_navigation.ts) and of TaskData.type.
SYNC_FIELDS = {"type", "mapping", "mappingEntries", "disableMappingFallback", "relatedNodesBorderColor",
               "relatedNodesBorderWidth", "showDiffHighlights", "deletedNodesBorderColor",
               "deletedNodesBorderWidth", "newNodesBorderColor", "newNodesBorderWidth"}


# --- the package's loaders ------------------------------------------------------------------------------------

def load_graph(path: str) -> dict:
    """The graph as the UI's model (one Graph of the collection), after the package's own loading checks."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    # utils.ts loadGraphsJson: an object with label and graphs is used as a GraphCollection directly.
    assert data.get("label") is not None and data.get("graphs") is not None, "not a GraphCollection"
    collection = dacite.from_dict(gb.GraphCollection, data, config=dacite.Config(strict=True))
    assert dataclasses.asdict(collection) == data
    assert convert_adapter_response({"graphCollections": [collection]}) == {"graphCollections": [data]}
    assert len(data["graphs"]) == 1
    graph = data["graphs"][0]
    ids = [n["id"] for n in graph["nodes"]]
    assert len(ids) == len(set(ids)), "node ids must be unique within a graph"
    for n in graph["nodes"]:
        for e in n["incomingEdges"]:
            # graph_processor.ts processEdgeRelationships drops edges from unknown nodes: none may be lost.
            assert e["sourceNodeId"] in ids, (n["id"], e)
    return graph


def load_node_data(path: str, graph: dict) -> dict[str, object]:
    """node id -> value, as the UI attributes the file's results to the nodes of `graph`."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    data = json.loads(text)
    numeric = all(isinstance(r["value"], (int, float)) for g in data.values() for r in g["results"].values())
    # node_data_builder types values as numbers; the UI (value: any) also takes strings, which dacite's type check
    # would refuse, so categorical files are checked for structure and exact re-serialisation only.
    graphs = {gid: dacite.from_dict(ndb.GraphNodeData, g, config=dacite.Config(strict=True, check_types=numeric))
              for gid, g in data.items()}
    assert json.loads(ndb.ModelNodeData(graphsData=graphs).to_json_string()) == data

    # getNodeDataProviderData: a file keyed by graph id (no top-level "results").
    assert "results" not in data
    graph_data = data.get(graph["id"])
    assert graph_data is not None, f"no data for graph {graph['id']}"
    for t in graph_data.get("thresholds", []):
        assert isinstance(t["value"], (int, float)) and isinstance(t["bgColor"], str)
    # genOutputTensorIdToNodeIdMap, then results keyed by `outputTensorIdToNodeId[id] ?? id`.
    by_tensor = {}
    for n in graph["nodes"]:
        for m in n["outputsMetadata"]:
            for a in m["attrs"]:
                if a["key"] == "tensor_name":
                    by_tensor[a["value"]] = n["id"]
    values = {}
    for key, result in graph_data["results"].items():
        node_id = by_tensor.get(key, key)
        assert node_id not in values, f"two results land on {node_id}"
        value = result["value"]
        assert isinstance(value, str) and result.get("bgColor") or \
            isinstance(value, (int, float)) and math.isfinite(value), result
        values[node_id] = value
    return values


def load_sync(path: str, left: dict, right: dict) -> tuple[dict, dict]:
    """(left id -> right ids, right id -> left ids), as sync_navigation_service.ts builds them."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert set(data) <= SYNC_FIELDS
    assert data["type"] == "sync_navigation"
    assert isinstance(data["mappingEntries"], list)
    left_ids = {n["id"] for n in left["nodes"]}
    right_ids = {n["id"] for n in right["nodes"]}
    l2r, r2l = {}, {}
    for entry in data["mappingEntries"]:
        assert set(entry) == {"leftNodeIds", "rightNodeIds"}
        assert entry["leftNodeIds"] and entry["rightNodeIds"]
        assert all(isinstance(i, str) for i in entry["leftNodeIds"] + entry["rightNodeIds"])
        for i in entry["leftNodeIds"]:
            # "Model Explorer assumes that a node id from either side will only appear in one entry".
            assert i in left_ids and i not in l2r, i
            l2r[i] = entry["rightNodeIds"]
        for i in entry["rightNodeIds"]:
            assert i in right_ids and i not in r2l, i
            r2l[i] = entry["leftNodeIds"]
    return l2r, r2l


def compute_coverage(xc_graph: dict, mapped: dict) -> float:
    compute = [n["id"] for n in xc_graph["nodes"] if n["kind"] == "compute"]
    return sum(i in mapped for i in compute) / len(compute) if compute else 1.0


# --- a hand-built report: exact entries -----------------------------------------------------------------------

def _t(name, shape=(1, 4)):
    return {"name": name, "shape": list(shape), "dtype": "float32"}


def _n(nid, op, kind, inputs, outputs, source_ops, backend=None, precision=None, fallback=False, module=None):
    return {"id": nid, "op_type": op, "domain": "", "kind": kind, "inputs": [_t(i) for i in inputs],
            "outputs": [_t(o) for o in outputs], "attributes": {}, "backend": backend, "kernel": None,
            "precision": precision, "source_ops": source_ops, "module_path": module, "source_location": None,
            "fused_from": [], "fallback": fallback, "fallback_reason": "unsupported" if fallback else None}


def _row(op, cpu, npu):
    return {"source_op": op, "op_type": op, "module_path": "block", "targets": {
        "cpu": {"status": "present", "node": cpu[0], "nodes": cpu},
        "npu[fp16=True]": {"status": "present", "node": npu[0], "nodes": npu}}}


def tiny_report():
    graph_io = {"inputs": [_t("x")], "outputs": [_t("y")]}
    captured = {**graph_io, "name": "tiny", "nodes": [
        _n("conv", "conv2d", "compute", ["x", "w"], ["conv"], ["conv"], module="block.conv"),
        _n("bn", "batch_norm", "compute", ["conv"], ["bn"], ["bn"], module="block.bn"),
        _n("relu", "relu", "compute", ["bn"], ["y"], ["relu"], module="block.act")]}
    # cpu: conv+bn fused; the relu's output tensor is named like the cast node, so the cast's node data must be
    # keyed by its own tensor ("y"), not its id; the cast carries relu without being the alignment's node for it.
    cpu = {**graph_io, "name": "cpu", "nodes": [
        _n("cpu_conv", "Conv", "compute", ["x", "w_fused"], ["t0"], ["conv", "bn"], "cpu", "fp32", module="block"),
        _n("cpu_relu", "Relu", "compute", ["t0"], ["cpu_cast"], ["relu"], "cpu", "fp32", module="block.act"),
        _n("cpu_cast", "Cast", "cast", ["cpu_cast"], ["y"], ["relu"], "cpu", "fp16")]}
    # npu: the activation node also carries bn (a boundary op) and, carrying as many source ops as the conv, is
    # the alignment's node for bn; owning bn there would merge the two groups. The constant carries conv but is
    # no carrier for navigation.
    npu = {**graph_io, "name": "npu", "nodes": [
        _n("npu_w", "const", "constant", [], ["w"], ["conv"]),
        _n("npu_conv", "conv", "compute", ["x", "w"], ["u0"], ["conv", "bn"], "npu", "fp16", module="block"),
        _n("npu_relu", "relu", "compute", ["u0"], ["y"], ["bn", "relu"], "cpu", "fp32", True, "block.act")]}
    rows = [_row("conv", ["cpu_conv"], ["npu_conv"]),
            _row("bn", ["cpu_conv"], ["npu_relu", "npu_conv"]),
            _row("relu", ["cpu_relu", "cpu_cast"], ["npu_relu"])]
    drift = {"threshold_rel_l2": 0.01, "points": [
        {"source_op": "bn", "module_path": "block.bn", "op_type": "batch_norm", "depth": 1, "rel_l2": 1e-3},
        {"source_op": "relu", "module_path": "block.act", "op_type": "relu", "depth": 2, "rel_l2": 0.02},
        {"source_op": "conv", "module_path": "block.conv", "op_type": "conv2d", "depth": 0,
         "rel_l2": float("nan")}]}
    return {"source": {"name": "tiny"}, "capture": {"graph": captured},
            "targets": {"cpu": {"status": "ok", "label": "CPU", "graph": cpu, "layer_drift": None},
                        "npu[fp16=True]": {"status": "ok", "label": "NPU", "graph": npu, "layer_drift": drift},
                        "broken": {"status": "error", "graph": None}},
            "alignment": {"source_ops": rows}}


def test_tiny_report_exact(tmp_path):
    out = str(tmp_path / "me")
    paths = write_model_explorer(tiny_report(), out)
    names = sorted(os.path.basename(p) for p in paths)
    assert names == sorted([
        "captured.graph.json", "cpu.graph.json", "npu_fp16_True.graph.json",
        "cpu.backend.nodedata.json", "cpu.precision.nodedata.json", "cpu.fallback.nodedata.json",
        "npu_fp16_True.backend.nodedata.json", "npu_fp16_True.precision.nodedata.json",
        "npu_fp16_True.fallback.nodedata.json", "npu_fp16_True.drift.nodedata.json",
        "captured.vs.cpu.sync.json", "captured.vs.npu_fp16_True.sync.json", "cpu.vs.npu_fp16_True.sync.json",
        "index.json", "README.txt"])
    index = json.load(open(os.path.join(out, "index.json")))
    assert index["skipped"] == {"broken": "status error"}

    def entries(name):
        return json.load(open(os.path.join(out, name)))["mappingEntries"]

    assert entries("cpu.vs.npu_fp16_True.sync.json") == [
        {"leftNodeIds": ["cpu_conv"], "rightNodeIds": ["npu_conv"]},
        {"leftNodeIds": ["cpu_relu", "cpu_cast"], "rightNodeIds": ["npu_relu"]},
        {"leftNodeIds": ["GraphInputs"], "rightNodeIds": ["GraphInputs"]},
        {"leftNodeIds": ["GraphOutputs"], "rightNodeIds": ["GraphOutputs"]}]
    assert entries("captured.vs.cpu.sync.json")[:2] == [
        {"leftNodeIds": ["conv", "bn"], "rightNodeIds": ["cpu_conv"]},
        {"leftNodeIds": ["relu"], "rightNodeIds": ["cpu_relu", "cpu_cast"]}]
    assert entries("captured.vs.npu_fp16_True.sync.json")[:2] == [
        {"leftNodeIds": ["conv", "bn"], "rightNodeIds": ["npu_conv"]},
        {"leftNodeIds": ["relu"], "rightNodeIds": ["npu_relu"]}]
    pair = next(s for s in index["sync"] if s["left"] == "cpu")
    assert pair == {"left": "cpu", "right": "npu[fp16=True]", "file": "cpu.vs.npu_fp16_True.sync.json",
                    "coverage_left": 1.0, "coverage_right": 1.0, "entries": 4}

    cpu = load_graph(os.path.join(out, "cpu.graph.json"))
    by_id = {n["id"]: n for n in cpu["nodes"]}
    assert [n["id"] for n in cpu["nodes"]] == ["GraphInputs", "cpu_conv", "cpu_relu", "cpu_cast", "GraphOutputs"]
    assert by_id["cpu_relu"]["namespace"] == "block/act" and by_id["cpu_relu"]["label"] == "Relu"
    assert by_id["cpu_cast"]["namespace"] == "block/act"  # no module path: the layer of its neighbours
    assert by_id["GraphInputs"]["namespace"] == "" and by_id["GraphInputs"]["label"] == "GraphInputs"
    assert by_id["cpu_conv"]["incomingEdges"] == [
        {"sourceNodeId": "GraphInputs", "sourceNodeOutputId": "0", "targetNodeInputId": "0"}]
    assert {"key": "source_ops", "value": "conv, bn"} in by_id["cpu_conv"]["attrs"]
    assert by_id["cpu_conv"]["outputsMetadata"] == [{"id": "0", "attrs": [
        {"key": "tensor_name", "value": "t0"}, {"key": "shape", "value": "1x4"}, {"key": "dtype",
                                                                                "value": "float32"}]}]
    raw = json.load(open(os.path.join(out, "cpu.precision.nodedata.json")))["cpu"]["results"]
    assert set(raw) == {"cpu_conv", "cpu_relu", "y"}  # the cast is reached through its tensor
    assert load_node_data(os.path.join(out, "cpu.precision.nodedata.json"), cpu) == {
        "cpu_conv": "fp32", "cpu_relu": "fp32", "cpu_cast": "fp16"}

    npu = load_graph(os.path.join(out, "npu_fp16_True.graph.json"))
    assert npu["id"] == "npu[fp16=True]"
    assert load_node_data(os.path.join(out, "npu_fp16_True.fallback.nodedata.json"), npu) == {
        "npu_w": 0, "npu_conv": 0, "npu_relu": 1}
    assert load_node_data(os.path.join(out, "npu_fp16_True.backend.nodedata.json"), npu) == {
        "npu_w": "none", "npu_conv": "npu", "npu_relu": "cpu"}
    # Each node takes its deepest measured source op; the NaN point is dropped, the constant gets none.
    assert load_node_data(os.path.join(out, "npu_fp16_True.drift.nodedata.json"), npu) == {
        "npu_conv": 1e-3, "npu_relu": 0.02}


# --- a real run ------------------------------------------------------------------------------------------------

NNAPI = "ort-nnapi[fp16=True]"  # an option makes the target id carry brackets


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from xc_core.api import analyze
    run = str(tmp_path_factory.mktemp("me-run"))
    report = analyze("sample:vision-mini", ["ort-cpu", "ort-nnapi", "openvino-cpu"], out_dir=run,
                     target_options={"ort-nnapi": {"fp16": True}})
    out = str(tmp_path_factory.mktemp("me-export"))
    return report, out, write_model_explorer(report, out)


def test_real_run_loads_and_maps(exported):
    report, out, paths = exported
    assert all(p.startswith(out) and os.path.isfile(p) for p in paths)
    index = json.load(open(os.path.join(out, "index.json")))
    assert set(index["graphs"]) == {"captured", "ort-cpu", NNAPI, "openvino-cpu"}
    assert index["graphs"][NNAPI] == "ort-nnapi_fp16_True.graph.json"
    assert all(SAFE_FILE.match(os.path.basename(p)) for p in paths)

    xc_graphs = {"captured": report["capture"]["graph"],
                 **{tid: t["graph"] for tid, t in report["targets"].items()}}
    graphs = {gid: load_graph(os.path.join(out, name)) for gid, name in index["graphs"].items()}
    for gid, graph in graphs.items():
        assert graph["id"] == gid
        assert {n["id"] for n in xc_graphs[gid]["nodes"]} <= {n["id"] for n in graph["nodes"]}

    for tid, files in index["node_data"].items():
        assert {"backend", "precision", "fallback"} <= set(files)
        every = {n["id"] for n in xc_graphs[tid]["nodes"]}
        for kind, name in files.items():
            values = load_node_data(os.path.join(out, name), graphs[tid])
            if kind == "drift":
                assert values and set(values) <= every
            else:
                assert set(values) == every, (tid, kind, every - set(values))
        fallback = load_node_data(os.path.join(out, files["fallback"]), graphs[tid])
        assert fallback == {n["id"]: int(bool(n["fallback"])) for n in xc_graphs[tid]["nodes"]}
    assert "drift" in index["node_data"][NNAPI]

    assert len(index["sync"]) == 6  # captured with each of 3 targets, and the 3 target pairs
    for s in index["sync"]:
        l2r, r2l = load_sync(os.path.join(out, s["file"]), graphs[s["left"]], graphs[s["right"]])
        assert s["coverage_left"] == round(compute_coverage(xc_graphs[s["left"]], l2r), 4)
        assert s["coverage_right"] == round(compute_coverage(xc_graphs[s["right"]], r2l), 4)
        if s["left"] != "captured":
            # The requirement: between two compiled targets, nearly every compute node has a counterpart.
            assert s["coverage_left"] >= 0.95 and s["coverage_right"] >= 0.95, s
    pair = next(s for s in index["sync"] if {s["left"], s["right"]} == {"ort-cpu", NNAPI})
    l2r, r2l = load_sync(os.path.join(out, pair["file"]), graphs[pair["left"]], graphs[pair["right"]])
    from_cpu = l2r if pair["left"] == "ort-cpu" else r2l
    # A fused node maps to all the nodes that carry its source ops on the other side.
    cpu_nodes = {n["id"]: n for n in xc_graphs["ort-cpu"]["nodes"]}
    nnapi_nodes = {n["id"]: n for n in xc_graphs[NNAPI]["nodes"]}
    fused = next(i for i, n in cpu_nodes.items() if len(n["source_ops"]) > 1 and i in from_cpu)
    carried = {s for i in from_cpu[fused] for s in nnapi_nodes[i]["source_ops"]}
    assert set(cpu_nodes[fused]["source_ops"]) <= carried


def test_real_run_deterministic_and_relative(exported, tmp_path):
    report, out, paths = exported
    again = str(tmp_path / "again")
    paths2 = write_model_explorer(json.loads(json.dumps(report)), again)
    assert [os.path.basename(p) for p in paths] == [os.path.basename(p) for p in paths2]
    for p, q in zip(paths, paths2):
        a, b = open(p, "rb").read(), open(q, "rb").read()
        assert a == b, os.path.basename(p)
        assert out.encode() not in a and report["artifacts_dir"].encode() not in a
