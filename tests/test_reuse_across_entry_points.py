"""A stored run is found by whoever asks for the same work: `xc analyze --reuse`, `xc batch` and the dashboard key
runs by one recipe (xc_core/run_keys.py), per target, so a batch cell is found inside a multi-target CLI run and the
CLI finds a run the dashboard made. Real analyses of a tiny ONNX model on the fast ORT targets."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

TARGETS = ["ort-cpu", "ort-cpu-int8"]


def _two_head_mlp(path, seed: int = 0) -> str:
    """A dynamic-batch MLP with two outputs: not a model the reuse code was written for."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["relu_out"], name="relu"),
             helper.make_node("Sigmoid", ["h"], ["sig_out"], name="sig")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("relu_out", TensorProto.FLOAT, ["batch", 8]),
                               helper.make_tensor_value_info("sig_out", TensorProto.FLOAT, ["batch", 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def _xc(*args, home):
    env = {**os.environ, "XC_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "xc_core", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


def test_batch_after_identical_cli_runs_takes_every_cell(tmp_path):
    home = tmp_path / "home"
    model = _two_head_mlp(tmp_path / "mlp.onnx")
    first = _xc("analyze", model, "--targets", ",".join(TARGETS), "--out", tmp_path / "a", "--quiet", home=home)
    assert first.returncode == 0, first.stderr
    again = _xc("analyze", model, "--targets", ",".join(TARGETS), "--out", tmp_path / "b", "--reuse", home=home)
    assert again.returncode == 0, again.stderr
    assert "reused run" in again.stderr and "nothing compiled" in again.stderr
    (tmp_path / "fleet.txt").write_text("mlp.onnx\n")
    # The same targets (the CLI's whole run), and one of them alone (a cell inside the multi-target run).
    for targets, out in ((",".join(TARGETS), "whole"), ("ort-cpu-int8", "one")):
        r = _xc("batch", tmp_path / "fleet.txt", "--targets", targets, "--out", tmp_path / out, "--quiet", home=home)
        assert r.returncode == 0, r.stderr
        matrix = json.loads((tmp_path / out / "matrix.json").read_text())
        assert matrix["cells"] and all(c["cached"] for c in matrix["cells"]), matrix["cells"]
        assert {c["status"] for c in matrix["cells"]} == {"ok"}


def test_cli_reuse_finds_the_run_the_dashboard_made(tmp_path):
    from pages._ui import request_key, session_limits
    from xc_core.paths import home
    from xc_core.service import DONE, AnalysisService, take_upload
    from xc_core.worker import WorkerLimits
    model = _two_head_mlp(tmp_path / "uploaded.onnx", seed=5)
    with open(model, "rb") as f:
        taken = take_upload([("uploaded.onnx", f.read())])
    # As pages/_ui.py asks for an upload without an inputs file, with the sidebar's default limits.
    import hashlib
    source_key = taken.digest + "|" + hashlib.sha256(b"").hexdigest()
    base = WorkerLimits.from_env()
    limits = session_limits(base.timeout_s, base.memory_gib)
    key = request_key(source_key, TARGETS, {}, {}, limits)
    svc = AnalysisService()
    a = svc.submit(key, None, dict(taken.files), targets=TARGETS, target_options={}, worker_limits=limits,
                   model_file=taken.model_file)
    assert a.finished.wait(300) and a.state == DONE, a.error
    r = _xc("analyze", model, "--targets", ",".join(TARGETS), "--out", tmp_path / "cli", "--reuse", home=home())
    assert r.returncode == 0, r.stderr
    assert f"reused run {key[:12]}" in r.stderr
    assert json.loads((tmp_path / "cli" / "report.json").read_text())["run"]["key"] == key


def _parts(**edits):
    from xc_core.run_keys import request_parts
    return request_parts("ab" * 32, edits.pop("inputs", None), **edits)


def test_the_same_request_written_differently_has_the_same_cells():
    from xc_core.run_keys import cell_keys
    plain = cell_keys(_parts(), ["ort-cpu"], {})
    # Empty edits as the CLI leaves them (None) or the dashboard's panel ({}); numbers of either type; options given
    # per id or inside the variant.
    assert cell_keys(_parts(shapes={}, dims=None, values={}, ranges={}), ["ort-cpu"], None) == plain
    assert (cell_keys(_parts(values={"x": 1}, ranges={"x": (0, 5)}), ["ort-cpu"], {})
            == cell_keys(_parts(values={"x": 1.0}, ranges={"x": (0.0, 5.0)}), ["ort-cpu"], {}))
    assert (cell_keys(_parts(), ["ort-cpu"], {"ort-cpu": {"level": "basic"}})
            == cell_keys(_parts(), ["ort-cpu[level=basic]"], {}))
    # A target's cell is the same whatever else runs beside it.
    assert cell_keys(_parts(), ["ort-cpu-int8", "ort-cpu"], {})["ort-cpu"] == plain["ort-cpu"]


@pytest.mark.parametrize("changed", [
    {"options": {"ort-cpu": {"level": "basic"}}},
    {"edits": {"dims": {"batch": 2}}},
    {"edits": {"shapes": {"x": ([2, 4], None)}}},
    {"edits": {"inputs": "cd" * 32}},
    {"target": "openvino-cpu"},
])
def test_a_changed_option_input_or_target_is_another_cell(changed):
    from xc_core.run_keys import cell_keys, run_key_of
    from xc_core.worker import WorkerLimits
    base = cell_keys(_parts(), ["ort-cpu"], {})
    other = cell_keys(_parts(**changed.get("edits", {})), [changed.get("target", "ort-cpu")],
                      changed.get("options", {}))
    assert set(base.values()).isdisjoint(other.values())
    assert run_key_of(base, WorkerLimits(300, 4)) != run_key_of(other, WorkerLimits(300, 4))


def test_a_cell_a_worker_limit_stopped_is_not_offered():
    """Under a longer timeout it may finish: the run keeps its key, but its stopped cell is not listed for others."""
    from xc_core.store import run_summary
    report = {"source": {"kind": "onnx"}, "checklist": {},
              "run": {"cell_keys": {"ort-cpu": "k1", "inductor-cpu": "k2", "coreml-cpu": "k3"}},
              "targets": {"ort-cpu": {"status": "ok"},
                          "inductor-cpu": {"status": "error", "error": "exceeded 300 s in compile"},
                          "coreml-cpu": {"status": "error", "error": "compile failed: ValueError: bad"}}}
    assert run_summary(report, "cli")["cell_keys"] == {"ort-cpu": "k1", "coreml-cpu": "k3"}
    # A report from before cell keys lists none (and is never matched).
    assert "cell_keys" not in run_summary({"source": {}, "targets": {}, "checklist": {}}, "cli")


def test_an_onnx_models_data_file_is_part_of_its_source(tmp_path):
    """A changed external-data file is another model; an upload of the same files has the CLI's digest."""
    from onnx.external_data_helper import convert_model_to_external_data

    from xc_core.run_keys import source_digest, upload_digest
    model = onnx.load(_two_head_mlp(tmp_path / "m.onnx"))
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="m.onnx.data", size_threshold=0)
    onnx.save(model, str(tmp_path / "m.onnx"))
    before = source_digest(str(tmp_path / "m.onnx"))
    files = {n: (tmp_path / n).read_bytes() for n in ("m.onnx", "m.onnx.data")}
    assert upload_digest("m.onnx", files) == before
    data = bytearray(files["m.onnx.data"])
    data[0] ^= 1
    (tmp_path / "m.onnx.data").write_bytes(bytes(data))
    assert source_digest(str(tmp_path / "m.onnx")) != before


def test_two_compiling_processes_never_share_an_inductor_cache_slot(tmp_path):
    """Each holder gets a free slot (another process's flock is another open file here too); a freed slot is the
    next one taken, so a lone worker keeps compiling into the same warm folder."""
    from xc_core.targets.inductor_cpu import take_free_slot
    root = str(tmp_path / "inductor")
    first, fd1 = take_free_slot(root)
    second, fd2 = take_free_slot(root)
    assert first != second and os.path.basename(first) == "slot-0"
    os.close(fd1)
    again, fd3 = take_free_slot(root)
    assert again == first
    for fd in (fd2, fd3):
        os.close(fd)
