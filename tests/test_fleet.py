"""Fleet runs (`xc batch`) on this machine's worker pool: manifests in their three forms, the matrix and its
evidence kinds, cells cached from the run store on a second run, a batch stopped half-way resuming, shards that
cover the manifest once and merge back, and the diff and gate of two matrices. The Ray backend is in
test_fleet_ray.py."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xc_core.errors import XcInputError
from xc_core.fleet.manifest import parse_shard, read_manifest, shard

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = "ort-cpu,ort-nnapi"


def _two_output_mlp(path: str, width: int = 8, seed: int = 0) -> str:
    """A dynamic-batch MLP with two outputs (Relu and Sigmoid heads): not a model the fleet code was written for."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, width)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="add"),
             helper.make_node("Relu", ["hb"], ["relu_out"], name="relu"),
             helper.make_node("Sigmoid", ["hb"], ["sig_out"], name="sig")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("relu_out", TensorProto.FLOAT, ["batch", width]),
                               helper.make_tensor_value_info("sig_out", TensorProto.FLOAT, ["batch", width])],
                              [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _conv(path: str, seed: int = 1) -> str:
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["img", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["out"], name="pool")]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 1, 1])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _xc(*args, home, cwd=None, timeout=600):
    env = {**os.environ, "XC_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "xc_core", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


@pytest.fixture()
def fleet(tmp_path):
    """A manifest of three models: a two-output MLP, a conv, and a file whose name is markup."""
    models = tmp_path / "models"
    models.mkdir()
    _two_output_mlp(str(models / "mlp.onnx"))
    _conv(str(models / "conv.onnx"))
    _two_output_mlp(str(models / "we<b>ird|name.onnx"), width=6, seed=3)
    manifest = tmp_path / "fleet.txt"
    manifest.write_text("# the fleet\nmodels/mlp.onnx\n\nmodels/conv.onnx\nmodels/we<b>ird|name.onnx\n")
    return manifest


# ---- manifests -----------------------------------------------------------------------------------------------
def test_manifest_forms_text_folder_and_yaml(tmp_path, fleet):
    text = read_manifest(str(fleet))
    assert [m.name for m in text.models] == ["mlp", "conv", "we<b>ird|name"]
    assert all(os.path.isabs(m.source) for m in text.models)          # relative to the manifest's folder
    folder = tmp_path / "models"
    (folder / "mlp.onnx.data").write_bytes(b"")                         # external data, not a model
    (folder / "inputs.npz").write_bytes(b"")
    (folder / ".hidden.onnx").write_bytes(b"")
    assert [m.name for m in read_manifest(str(folder)).models] == ["conv", "mlp", "we<b>ird|name"]
    (tmp_path / "f.yaml").write_text(
        "targets: [ort-cpu, openvino-cpu]\nmodels:\n  - models/mlp.onnx\n  - source: models/conv.onnx\n"
        "    name: conv-640\n    dim: {batch: 2}\n    shape: {img: [1, 3, 8, 8]}\n"
        "    options: {ort-nnapi.fp16: true}\n  - sample:vision-mini\n  - models/mlp.onnx\n")
    y = read_manifest(str(tmp_path / "f.yaml"))
    assert y.targets == ["ort-cpu", "openvino-cpu"]
    assert [m.name for m in y.models] == ["mlp", "conv-640", "vision-mini", "mlp-2"]    # a clash gets -2
    conv = y.models[1]
    assert conv.dim == ("batch=2",) and conv.shape == ("img=1x3x8x8",) and conv.options == ("ort-nnapi.fp16=true",)


@pytest.mark.parametrize("content,expected", [
    ("models:\n  - source: a.onnx\n    colour: red\n", "unknown key(s) colour"),
    ("models: [a.onnx\n", "not valid YAML"),
    ("models:\n  - {name: x}\n", "expected a source string"),
    ("nothing: here\n", "expected a mapping with `models:`"),
    ("models:\n  - source: a.onnx\n    dim: 5\n", "expected a mapping NAME: VALUE"),
    ("!!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
])
def test_bad_yaml_manifests_are_one_line(tmp_path, content, expected):
    path = tmp_path / "m.yaml"
    path.write_text(content)
    with pytest.raises(XcInputError) as e:
        read_manifest(str(path))
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_shards_cover_the_manifest_once(tmp_path):
    lines = "".join(f"sample:m{i}\n" for i in range(11))
    (tmp_path / "m.txt").write_text(lines)
    models = read_manifest(str(tmp_path / "m.txt")).models
    for n in range(1, 6):
        parts = [shard(models, i, n) for i in range(1, n + 1)]
        names = [m.name for p in parts for m in p]
        assert sorted(names) == sorted(m.name for m in models) and len(names) == len(models)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    for bad in ("0/2", "3/2", "1-2", "a/b", ""):
        with pytest.raises(XcInputError):
            parse_shard(bad)


# ---- batches -------------------------------------------------------------------------------------------------
def _matrix(folder) -> dict:
    with open(os.path.join(folder, "matrix.json")) as f:
        return json.load(f)


@pytest.mark.slow
def test_batch_fills_the_matrix_then_caches_every_cell(tmp_path, fleet):
    from xc_core.store import RunStore
    home = tmp_path / "home"
    first = _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / "out1", home=home)
    assert first.returncode == 0, first.stderr
    m = _matrix(tmp_path / "out1")
    assert m["schema"] == "xc-matrix/1" and m["complete"] and m["targets"] == TARGETS.split(",")
    assert len(m["cells"]) == 6 and all(c["status"] == "ok" and not c["cached"] for c in m["cells"])
    store = RunStore(str(home))
    for row in m["models"]:
        assert row["status"] == "ok" and store.has(row["run"])
        assert os.path.isfile(tmp_path / "out1" / row["report"])
    nnapi = [c for c in m["cells"] if c["target"] == "ort-nnapi"]
    # Every figure carries its evidence kind: NNAPI's split is the partition checker's prediction, drift measured.
    assert all(c["accelerated_share"]["evidence"] == "predicted-runtime" for c in nnapi)
    assert all(c["worst_drift"]["evidence"] == "measured" and c["worst_drift"]["output"] for c in m["cells"])
    assert all(c["time_us"] is None or c["time_us"]["evidence"] == "measured" for c in m["cells"])
    assert any(c["time_us"] for c in m["cells"] if c["target"] == "ort-cpu")
    # The reviewer's files: a model's name that is markup stays text.
    md = (tmp_path / "out1" / "matrix.md").read_text()
    html = (tmp_path / "out1" / "matrix.html").read_text()
    assert "we&lt;b&gt;ird\\|name" in md and "<b>" not in md
    assert "we&lt;b&gt;ird|name" in html and "<b>ird" not in html
    assert "<script" not in html and "http" not in html.split("</style>")[1]

    second = _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / "out2", home=home)
    assert second.returncode == 0, second.stderr
    m2 = _matrix(tmp_path / "out2")
    assert all(c["cached"] for c in m2["cells"]) and "6 cached" in second.stdout
    assert [r["run"] for r in m2["models"]] == [r["run"] for r in m["models"]]
    # --no-cache compiles again: same runs (same key), no cell cached.
    third = _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / "out3", "--no-cache", "--quiet", home=home)
    assert third.returncode == 0 and not any(c["cached"] for c in _matrix(tmp_path / "out3")["cells"])
    # Fewer targets: every cell is one the store holds.
    fewer = _xc("batch", fleet, "--targets", "ort-cpu", "--out", tmp_path / "out4", "--quiet", home=home)
    assert fewer.returncode == 0, fewer.stderr
    m4 = _matrix(tmp_path / "out4")
    assert fewer.returncode == 0 and all(c["cached"] for c in m4["cells"]) and len(m4["cells"]) == 3
    assert [c["run"] for c in m4["cells"]] == [r["run"] for r in m["models"]]


@pytest.mark.slow
def test_a_target_added_to_the_fleet_compiles_only_that_target(tmp_path, fleet):
    """Cells are reused per target: the added target is compiled in a run of its own, the others are taken from
    the runs that made them, and the output diffs run by run across both."""
    from xc_core.store import RunStore
    home = tmp_path / "home"
    assert _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / "two", "--quiet", home=home).returncode == 0
    more = TARGETS + ",openvino-cpu"
    r = _xc("batch", fleet, "--targets", more, "--option", "openvino-cpu.inference_precision=f32", "--out",
            tmp_path / "three", home=home)
    assert r.returncode == 0, r.stderr
    assert "2 cached" in r.stderr          # each model's progress line says how many of its cells were reused
    two, three = _matrix(tmp_path / "two"), _matrix(tmp_path / "three")
    assert three["targets"] == more.split(",") and len(three["cells"]) == 9
    store = RunStore(str(home))
    for row_two, row in zip(two["models"], three["models"]):
        cells = {c["target"]: c for c in three["cells"] if c["model"] == row["name"]}
        assert [c["target"] for c in three["cells"] if c["model"] == row["name"]] == more.split(",")
        assert cells["ort-cpu"]["cached"] and cells["ort-cpu"]["run"] == row_two["run"]
        assert not cells["openvino-cpu"]["cached"] and cells["openvino-cpu"]["run"] == row["run"] != row_two["run"]
        assert cells["openvino-cpu"]["identity"] == "openvino-cpu[inference_precision=f32]"
        assert cells["openvino-cpu"]["status"] == "ok" and cells["openvino-cpu"]["worst_drift"]
        # The new run compiled only what was missing; both runs' reports are in the output.
        assert list(store.get(row["run"])["targets"]) == ["openvino-cpu[inference_precision=f32]"]
        assert set(row["runs"]) == {row["run"], row_two["run"]} and not row["cached"]
        assert all(os.path.isfile(tmp_path / "three" / rel) for rel in row["runs"].values())
    # Again: every cell is cached, from the two runs of each model; the two outputs diff run by run and clean.
    again = _xc("batch", fleet, "--targets", more, "--option", "openvino-cpu.inference_precision=f32", "--out",
                tmp_path / "again", "--quiet", home=home)
    m = _matrix(tmp_path / "again")
    assert again.returncode == 0 and all(c["cached"] for c in m["cells"])
    assert {(c["model"], c["target"], c["run"]) for c in m["cells"]} == {
        (c["model"], c["target"], c["run"]) for c in three["cells"]}
    d = _xc("diff", tmp_path / "three", tmp_path / "again", "--gate", "--format", "json", home=tmp_path / "empty")
    assert d.returncode == 0, d.stderr
    pairs = json.loads(d.stdout)["run_diffs"]
    assert sorted(len(p) for p in pairs.values()) == [2, 2, 2]         # without the store: from the folders
    assert sorted(t for p in pairs["mlp"] for t in p["targets"]) == sorted(more.split(","))
    # Another option for the added target is another cell: compiled again, the rest still reused.
    other = _xc("batch", fleet, "--targets", more, "--out", tmp_path / "other", "--quiet", home=home)
    cells = _matrix(tmp_path / "other")["cells"]
    assert other.returncode == 0 and [c["cached"] for c in cells if c["model"] == "mlp"] == [True, True, False]


@pytest.mark.slow
def test_a_model_that_fails_is_a_row_of_errors_not_the_end(tmp_path, fleet):
    (tmp_path / "models" / "broken.onnx").write_bytes(b"\x08\x07not a model")
    with open(fleet, "a") as f:
        f.write("models/broken.onnx\nmodels/gone.onnx\n")
    r = _xc("batch", fleet, "--targets", "ort-cpu", "--out", tmp_path / "out", "--quiet", home=tmp_path / "home")
    assert r.returncode == 0, r.stderr
    m = _matrix(tmp_path / "out")
    rows = {row["name"]: row for row in m["models"]}
    assert rows["mlp"]["status"] == "ok" and rows["broken"]["status"] == "error"
    assert "gone.onnx: no such file" in rows["gone"]["error"] and str(tmp_path) not in json.dumps(m["cells"])
    assert {c["status"] for c in m["cells"] if c["model"] in ("broken", "gone")} == {"skipped"}


@pytest.mark.slow
def test_a_stopped_batch_resumes_where_it_stopped(tmp_path, fleet):
    home = tmp_path / "home"
    out = tmp_path / "out"
    env = {**os.environ, "XC_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "xc_core", "batch", str(fleet), "--targets", TARGETS,
                             "--out", str(out), "--jobs", "1", "--quiet"], env=env, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    done = []
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.isfile(out / "matrix.json"):
            try:
                done = [r for r in _matrix(out)["models"] if r["status"] == "ok"]
            except ValueError:
                done = []
            if done:
                break
        time.sleep(0.05)
    assert done, "no model finished"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.skip("the batch finished before it could be stopped")
    assert proc.returncode == 128 + signal.SIGTERM and "run the same command again" in err
    stopped = _matrix(out)
    assert not stopped["complete"] and 1 <= len([r for r in stopped["models"] if r["status"] == "ok"]) < 3
    again = _xc("batch", fleet, "--targets", TARGETS, "--out", out, "--quiet", home=home)
    assert again.returncode == 0, again.stderr
    resumed = _matrix(out)
    assert resumed["complete"] and len(resumed["cells"]) == 6
    finished_before = {r["name"] for r in stopped["models"] if r["status"] == "ok"}
    assert {r["name"] for r in resumed["models"] if r["cached"]} == finished_before
    assert all(r["status"] == "ok" for r in resumed["models"])


@pytest.mark.slow
def test_shards_merge_into_the_whole_matrix_and_diff_clean(tmp_path, fleet):
    home = tmp_path / "home"
    whole = _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / "whole", "--quiet", home=home)
    assert whole.returncode == 0, whole.stderr
    for i in (1, 2):
        r = _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / f"s{i}", "--shard", f"{i}/2", "--quiet",
                home=home)
        assert r.returncode == 0, r.stderr
    s1, s2 = _matrix(tmp_path / "s1"), _matrix(tmp_path / "s2")
    names1, names2 = {r["name"] for r in s1["models"]}, {r["name"] for r in s2["models"]}
    assert not names1 & names2 and len(names1 | names2) == 3
    merged = _xc("batch", "merge", tmp_path / "s1", tmp_path / "s2", "--out", tmp_path / "merged", home=home)
    assert merged.returncode == 0, merged.stderr
    m = _matrix(tmp_path / "merged")
    assert m["backend"] == "merged" and m["shards"] == [{"index": 1, "count": 2}, {"index": 2, "count": 2}]
    assert sorted((c["model"], c["target"]) for c in m["cells"]) == sorted(
        (c["model"], c["target"]) for c in _matrix(tmp_path / "whole")["cells"])
    assert all(os.path.isfile(tmp_path / "merged" / r["report"]) for r in m["models"])
    gate = _xc("diff", tmp_path / "whole", tmp_path / "merged", "--gate", home=home)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "3 model(s) compared run by run" in gate.stdout and "nothing regressed" in gate.stdout
    mixed = _xc("diff", tmp_path / "whole", tmp_path / "whole" / m["models"][0]["report"], home=home)
    assert mixed.returncode == 2 and "is a fleet matrix and the other is a run" in mixed.stderr


@pytest.mark.slow
def test_a_variant_and_its_plain_target_are_two_filled_columns(tmp_path, fleet):
    """`--targets ort-cpu,ort-cpu[level=basic]`: the columns are the targets as named, each cell under its own,
    and a second batch takes both from the store."""
    home = tmp_path / "home"
    (tmp_path / "one.txt").write_text("models/mlp.onnx\n")
    targets = "ort-cpu,ort-cpu[level=basic]"
    for out in ("a", "b"):
        r = _xc("batch", tmp_path / "one.txt", "--targets", targets, "--out", tmp_path / out, "--quiet", home=home)
        assert r.returncode == 0, r.stderr
    a, b = _matrix(tmp_path / "a"), _matrix(tmp_path / "b")
    assert a["targets"] == targets.split(",")
    assert [(c["target"], c["identity"], c["status"]) for c in a["cells"]] == [
        ("ort-cpu", "ort-cpu", "ok"), ("ort-cpu[level=basic]", "ort-cpu[level=basic]", "ok")]
    assert all(c["cached"] for c in b["cells"]) and len(b["cells"]) == 2
    assert "| — |" not in (tmp_path / "a" / "matrix.md").read_text()


@pytest.mark.slow
def test_names_with_newlines_escapes_and_quotes_stay_one_line_each(tmp_path, fleet):
    """A YAML name may hold a newline, a terminal escape or code-like quotes: every log line, diff line and
    folder stays one printable line of text; the name itself is kept whole in matrix.json."""
    home = tmp_path / "home"
    hostile = 'two\nlines \x1b[31mred\x1b[0m");__import__("os").system("touch PWNED")#'
    (tmp_path / "fleet.yaml").write_text(json.dumps({"models": [{"source": "models/mlp.onnx", "name": hostile}]}))
    r = _xc("batch", tmp_path / "fleet.yaml", "--targets", "ort-cpu", "--out", tmp_path / "new", home=home,
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("[")]
    assert len(progress) == 1 and "two lines \\x1b[31mred\\x1b[0m" in progress[0] and "\x1b" not in r.stderr
    m = _matrix(tmp_path / "new")
    assert m["models"][0]["name"] == hostile
    assert re.fullmatch(r"runs/[A-Za-z0-9._-]+/report\.json", m["models"][0]["report"])
    assert _xc("batch", fleet, "--targets", "ort-cpu", "--out", tmp_path / "base", "--quiet",
               home=home).returncode == 0
    d = _xc("diff", tmp_path / "base", tmp_path / "new", home=home)
    assert d.returncode == 0, d.stderr
    assert "  model added: two lines \\x1b[31mred\\x1b[0m\");__import__" in d.stdout and "\x1b" not in d.stdout
    assert not list(tmp_path.rglob("PWNED"))
    # A mistyped folder against a matrix names the missing folder, not the kinds of the two.
    typo = _xc("diff", tmp_path / "base", tmp_path / "nwe", home=home)
    assert typo.returncode == 2 and "nwe: no such batch folder or matrix.json" in typo.stderr


@pytest.mark.slow
def test_fleet_gate_on_the_cells_figures(tmp_path, fleet):
    """Without the models' reports, the gate judges each cell's own figures, with the same rules file."""
    home = tmp_path / "home"
    assert _xc("batch", fleet, "--targets", TARGETS, "--out", tmp_path / "base", "--quiet", home=home).returncode == 0
    base = _matrix(tmp_path / "base")
    worse = json.loads(json.dumps(base))
    for row in base["models"] + worse["models"]:
        row["report"], row["run"], row["runs"] = None, None, {}
    for c in base["cells"] + worse["cells"]:
        c["run"] = None
    cell = next(c for c in worse["cells"] if c["model"] == "mlp" and c["target"] == "ort-nnapi")
    cell["fallbacks"]["value"] += 2
    cell["accelerated_share"]["value"] -= 0.25
    cell["worst_drift"]["value"] = 1e-4          # 100× the base's: within this file's ort-nnapi allowance
    next(c for c in base["cells"] if c["model"] == "mlp" and c["target"] == "ort-nnapi")["worst_drift"]["value"] = 1e-6
    slow = next(c for c in worse["cells"] if c["model"] == "conv" and c["target"] == "ort-cpu")
    # Times with the runs' spread (as xc writes them since issue 50): 3× and the IQRs apart — beyond noise.
    slow["time_us"] = {"value": 3000.0, "evidence": "measured", "host_cpu": "X",
                       "spread": {"q1": 2900.0, "q3": 3100.0, "n": 5}}
    fast = next(c for c in base["cells"] if c["model"] == "conv" and c["target"] == "ort-cpu")
    fast["time_us"] = {"value": 1000.0, "evidence": "measured", "host_cpu": "X",
                       "spread": {"q1": 900.0, "q3": 1100.0, "n": 5}}
    (tmp_path / "b.json").write_text(json.dumps(base))
    (tmp_path / "n.json").write_text(json.dumps(worse))
    (tmp_path / ".xc-gate.toml").write_text("max_time_ratio = 2.5\n[target.\"ort-nnapi\"]\nmax_drift_ratio = 1000\n")
    r = _xc("diff", tmp_path / "b.json", tmp_path / "n.json", "--gate", "--format", "json", home=home, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    regs = {(x["model"], x["target"], x["rule"]) for x in json.loads(r.stdout)["regressions"]}
    assert regs == {("mlp", "ort-nnapi", "max_new_fallbacks"), ("mlp", "ort-nnapi", "max_share_loss"),
                    ("conv", "ort-cpu", "max_time_ratio")}
    d = json.loads(r.stdout)
    timed = next(c for c in d["cells"] if c["model"] == "conv" and c["target"] == "ort-cpu")
    assert timed["time_us"]["bucket"] == "2–5× slower"
    text = _xc("diff", tmp_path / "b.json", tmp_path / "n.json", home=home, cwd=tmp_path)
    assert text.returncode == 0 and "mlp × ort-nnapi: fallbacks" in text.stdout


def test_time_buckets_are_ai_hubs():
    from xc_core.fleet.diff import time_bucket
    assert [time_bucket(r) for r in (1.0, 1.05, 1.15, 1.3, 1.7, 3, 9, 0.4)] == [
        "<1.1×", "<1.1×", "1.1–1.2× slower", "1.2–1.5× slower", "1.5–2× slower", "2–5× slower", "≥5× slower",
        "2–5× faster"]
    assert time_bucket(None) is None and time_bucket(0) is None


@pytest.mark.parametrize("args,expected", [
    (["batch", "nowhere.txt", "--out", "o"], "nowhere.txt: no such file or folder"),
    (["batch", "{manifest}", "--out", "o", "--shard", "3/2"], "--shard 3/2: expected I/N"),
    (["batch", "{manifest}", "--out", "o", "--targets", "nope"], "nope"),
    (["batch", "{manifest}", "--out", "o", "--ray-address", "127.0.0.1:1"], "--ray-address is for --backend ray"),
    (["batch", "{binary}", "--out", "o"], "not UTF-8 text"),
    (["batch", "merge", "{manifest}", "--out", "o"], "fleet.txt: not JSON"),
    (["batch", "merge", "nowhere", "--out", "o"], "nowhere: no matrix.json there"),
])
def test_bad_batch_input_is_one_line(tmp_path, fleet, args, expected):
    binary = tmp_path / "model.bin.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01" * 10)
    args = [a.format(manifest=fleet, binary=binary) for a in args]
    r = _xc(*args, home=tmp_path / "home", cwd=tmp_path)
    assert r.returncode == 2 and expected in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
