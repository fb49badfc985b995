"""report.json stays small: per-node lists too big for it go beside it (report.nodes.json) and come back on reading;
a report.json without its sidecar is refused in one line, never shown with empty lists."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xc_core.report import sidecar

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_big_lists_leave_report_json_and_come_back_whole(sample_report, monkeypatch):
    from xc_core.errors import XcInputError
    from xc_core.review.runs import parse_report
    report, _ = sample_report("vision-mini")
    whole = json.dumps(report, separators=(",", ":"))
    text, side = sidecar.dumps(report)
    assert side is None and text == whole          # a bundled sample's report is self-contained

    monkeypatch.setattr(sidecar, "DETACH_BYTES", 20_000)   # as if its graphs were many thousand nodes
    monkeypatch.setattr(sidecar, "_MEASURE_FROM", 100)
    text, side = sidecar.dumps(report)
    small = json.loads(text)
    pointers = small["detached"]["pointers"]
    assert "/targets/coreml-ane/graph/nodes" in pointers and len(text) < len(whole) * 0.6
    assert small["targets"]["coreml-ane"]["graph"]["nodes"] == {"$detached": "/targets/coreml-ane/graph/nodes"}
    assert json.dumps(report, separators=(",", ":")) == whole      # dumps left the report itself alone
    assert sidecar.attach(small, lambda: side) == report

    # Imported with its sidecar, it validates; without, it is refused in one line naming the file.
    assert parse_report(text.encode(), "report.json", side.encode())["targets"].keys() == report["targets"].keys()
    with pytest.raises(XcInputError) as err:
        parse_report(text.encode(), "report.json")
    assert "report.nodes.json" in str(err.value) and "\n" not in str(err.value)
    other = json.loads(side)
    del other["values"][pointers[0]]
    with pytest.raises(XcInputError, match="does not hold"):
        parse_report(text.encode(), "report.json", json.dumps(other).encode())


def test_the_run_store_keeps_the_sidecar_with_its_report(sample_report, monkeypatch, tmp_path):
    from xc_core.store import RunStore
    report, _ = sample_report("tts-mini")
    monkeypatch.setattr(sidecar, "DETACH_BYTES", 20_000)
    monkeypatch.setattr(sidecar, "_MEASURE_FROM", 100)
    store = RunStore(str(tmp_path / "store"))
    store.put("k1", report)
    assert set(store.files("k1")) == {"report.json", sidecar.SIDECAR_FILE}
    assert RunStore(str(tmp_path / "store")).get("k1") == report


def _chain_onnx(path, nodes: int) -> str:
    """A flat chain of Add/Relu nodes: graphs of `nodes` ops with no module paths, as a big ONNX upload."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])
    one = numpy_helper.from_array(np.full((1, 8), 0.5, np.float32), "one")
    ops, prev = [], "x"
    for i in range(nodes):
        kind = "Add" if i % 2 == 0 else "Relu"
        ins = [prev, "one"] if kind == "Add" else [prev]
        ops.append(helper.make_node(kind, ins, [f"t{i}"], name=f"{kind.lower()}_{i}"))
        prev = f"t{i}"
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8])
    m = helper.make_model(helper.make_graph(ops, "chain", [x], [y], [one]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return str(path)


def test_a_big_graph_goes_beside_report_json_through_the_cli(tmp_path):
    """4,000 nodes: the compiled and captured graphs are written beside report.json; `report` reads the two
    together; report.json copied alone is refused in one line that names the sidecar."""
    model = _chain_onnx(tmp_path / "chain.onnx", 4000)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": ROOT}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "xc_core", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=900, env=env)
    r = cli("analyze", model, "--targets", "ort-cpu", "--out", str(out), "--no-store")
    assert r.returncode == 0, r.stderr
    small = json.loads((out / "report.json").read_text())
    assert "/targets/ort-cpu/graph/nodes" in small["detached"]["pointers"]
    assert "/capture/graph/nodes" in small["detached"]["pointers"]
    side = out / sidecar.SIDECAR_FILE
    assert side.exists() and (out / "report.json").stat().st_size < side.stat().st_size / 2
    whole = sidecar.read_file(str(out / "report.json"))
    assert len(whole["targets"]["ort-cpu"]["graph"]["nodes"]) >= 4000
    r = cli("report", str(out), "--format", "md")
    assert r.returncode == 0, r.stderr
    assert "ort-cpu" in r.stdout

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "report.json", alone / "report.json")
    r = cli("report", str(alone / "report.json"), "--format", "md")
    assert r.returncode == 2 and sidecar.SIDECAR_FILE in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
