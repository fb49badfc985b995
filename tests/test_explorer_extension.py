"""xc's live Model Explorer extension (xc_model_explorer, xc_core/explorer.py), driven the way Model Explorer's
server drives it: `ExtensionManager.run_cmd` with the commands its UI sends (adapter `convert`, node-data provider
`get_config_editors` and `run`), on tiny models built here."""
import json
import os
import shutil

import pytest

pytest.importorskip("model_explorer")
onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from model_explorer.extension_manager import ExtensionManager  # noqa: E402

from xc_core import explorer  # noqa: E402
from xc_core.cli import main  # noqa: E402
from xc_core.targets import REGISTRY, target_ids  # noqa: E402
from xc_core.views.fallbacks import fallback_rows  # noqa: E402


def tiny_onnx(path: str) -> str:
    """MatMul -> HardSigmoid -> Relu: NNAPI's partition checker takes no HardSigmoid, so it falls back."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.random.RandomState(0).randn(8, 4).astype("float32"), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("HardSigmoid", ["h"], ["hs"], name="hsig"),
             helper.make_node("Relu", ["hs"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def tiny_pt2(path: str) -> str:
    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.nn.functional.hardsigmoid(self.fc(x)).relu()
    torch.manual_seed(0)
    torch.export.save(torch.export.export(Tiny().eval(), (torch.randn(1, 8),)), path)
    return path


@pytest.fixture(scope="module")
def manager():
    m = ExtensionManager(["xc_model_explorer"])
    m.load_extensions()
    return m


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("explorer-models")
    return {"onnx": tiny_onnx(str(folder / "tiny.onnx")), "pt2": tiny_pt2(str(folder / "tiny.pt2"))}


def convert(manager, path):
    return manager.run_cmd({"extensionId": explorer.ADAPTER_ID, "cmdId": "convert", "modelPath": path,
                            "settings": {}, "deleteAfterConversion": False})


def overlay(manager, path, graph_id, target, kind):
    return manager.run_cmd({"extensionId": explorer.PROVIDER_ID, "cmdId": "run", "modelPath": path,
                            "graphId": graph_id, "configValues": {"target": target, "overlay": kind}})


def node_ids(graph: dict) -> set[str]:
    return {n["id"] for n in graph["nodes"]} - {"GraphInputs", "GraphOutputs"}


@pytest.mark.parametrize("kind", ["onnx", "pt2"])
def test_adapter_shows_the_captured_graph(manager, models, kind):
    out = convert(manager, models[kind])
    assert set(out) == {"graphs"} and len(out["graphs"]) == 1
    graph = out["graphs"][0]
    captured = explorer.captured_report(models[kind])["capture"]["graph"]
    assert graph["id"] == "captured"
    assert node_ids(graph) == {n["id"] for n in captured["nodes"]}
    labels = {n["id"]: n["label"] for n in graph["nodes"]}
    assert all(labels[n["id"]] == n["op_type"] for n in captured["nodes"])
    assert any("sigmoid" in n["op_type"].lower() for n in captured["nodes"])


def test_second_open_reads_the_store(manager, models, monkeypatch):
    convert(manager, models["onnx"])
    explorer._cache.clear()     # a new server process: only the store remembers
    monkeypatch.setattr("xc_core.api.analyze", lambda *a, **k: pytest.fail("analysed again"))
    assert node_ids(convert(manager, models["onnx"])["graphs"][0])


def test_config_editors_list_targets_and_overlays(manager):
    out = manager.run_cmd({"extensionId": explorer.PROVIDER_ID, "cmdId": "get_config_editors"})
    assert not out["error"]
    editors = {e["id"]: e for e in out["configEditors"]}
    assert [o["value"] for o in editors["target"]["options"]] == target_ids()
    for o in editors["target"]["options"]:
        runnable = REGISTRY[o["value"]].available()[0]
        assert ("not runnable here" in o["label"]) == (not runnable)
    assert [o["value"] for o in editors["overlay"]["options"]] == ["backend", "fallback", "precision", "time",
                                                                  "drift"]


def test_fallback_overlay_holds_the_reasons_of_the_report(manager, models):
    path = models["onnx"]
    out = overlay(manager, path, "captured", "ort-nnapi", "fallback")
    assert not out["error"], out["error"]
    report = explorer.report_for(path, "ort-nnapi")
    target = report["targets"]["ort-nnapi"]
    rows = fallback_rows(report, "ort-nnapi")
    assert rows, "the tiny model must fall back on NNAPI"
    assert out["result"]["name"] == f"ort-nnapi fallback ({target['evidence']['assignment']})"
    results = out["result"]["results"]
    # Each fallen-back node's captured op shows the Fallbacks page's reason for it; the others where they run.
    by_id = {n["id"]: n for n in target["graph"]["nodes"]}
    for row in rows:
        for op in by_id[row["node"]]["source_ops"]:
            assert results[op]["value"] == row["reason"]
    fell = {op for row in rows for op in by_id[row["node"]]["source_ops"]}
    assert fell and all(r["value"].startswith("on ") for key, r in results.items() if key not in fell)


def test_backend_overlay_on_a_stored_runs_target_graph(manager, models, tmp_path, capsys):
    from xc_core.api import analyze
    run_dir = tmp_path / "run"
    report = analyze(models["onnx"], ["ort-cpu", "ort-nnapi"], out_dir=str(run_dir))
    pointer, syncs = explorer.resolve(str(run_dir))
    out = convert(manager, pointer)
    # The captured graph in a collection of its own, first (the one Model Explorer opens), then the targets'.
    assert [[g["id"] for g in c["graphs"]] for c in out["graphCollections"]] == [["captured"], ["ort-cpu", "ort-nnapi"]]
    nnapi = report["targets"]["ort-nnapi"]["graph"]["nodes"]
    got = overlay(manager, pointer, "ort-nnapi", "ort-nnapi", "backend")["result"]["results"]
    assert {k: r["value"] for k, r in got.items()} == {n["id"]: n["backend"] for n in nnapi}
    # The mapping files beside the pointer pair the captured HardSigmoid with NNAPI's node that carries it.
    assert [(left, right) for left, right, _ in syncs] == [("captured", "ort-cpu"), ("captured", "ort-nnapi")]
    with open(syncs[1][2], encoding="utf-8") as f:
        entries = json.load(f)["mappingEntries"]
    hsig = next(n for n in nnapi if n["op_type"] == "HardSigmoid")
    assert {"leftNodeIds": hsig["source_ops"], "rightNodeIds": [hsig["id"]]} in entries


def test_errors_are_one_line(manager, models, tmp_path):
    path = models["onnx"]
    unknown = overlay(manager, path, "captured", "no-such-target", "fallback")
    assert unknown["result"] is None and "unknown target 'no-such-target'" in unknown["error"]
    not_accelerated = overlay(manager, path, "captured", "ort-cpu", "fallback")
    assert "no accelerator" in not_accelerated["error"]
    # A target that failed: its run says so, and the overlay is that error, not a graph.
    from xc_core.api import analyze
    run_dir = tmp_path / "failed"
    analyze(path, ["ort-cpu"], out_dir=str(run_dir))
    report_path = run_dir / "report.json"
    report = json.loads(report_path.read_text())
    report["targets"]["ort-cpu"].update(status="error", error="compile failed: boom\nsecond line", graph=None)
    report_path.write_text(json.dumps(report))
    pointer, _ = explorer.resolve(str(run_dir))
    failed = overlay(manager, pointer, "captured", "ort-cpu", "backend")
    assert failed["result"] is None and failed["error"] == "ort-cpu error: compile failed: boom second line"
    shutil.rmtree(run_dir)


@pytest.mark.parametrize("argv, says", [
    (["explorer", "missing.onnx"], "missing.onnx"),
    (["explorer", "notes.txt"], "not a model xc explorer opens"),
    (["explorer", "abcdef123456"], "no such run"),
    (["explorer", "sample:nope"], "no such sample"),
])
def test_cli_bad_input(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not os.path.exists(os.path.join(explorer.pointer_dir(), "sample-nope.xcrun"))


@pytest.mark.parametrize("content, says", [
    ("not json", "not JSON"),
    ('{"run": 3}', "names no run"),
    ('{"source": "/etc/passwd"}', "neither a sample nor a model file"),
])
def test_a_bad_pointer_is_one_line(manager, tmp_path, content, says):
    from xc_core.errors import XcInputError
    pointer = tmp_path / "bad.xcrun"
    pointer.write_text(content)
    # The server answers {"error": "<type>: <message>"} for an adapter's exception: the message is one line.
    with pytest.raises(XcInputError, match=says) as caught:
        convert(manager, str(pointer))
    assert "\n" not in str(caught.value)
