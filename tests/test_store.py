"""The run store: a run's report and files survive a new process, the store stays within its bound by evicting the
least recently used runs, an interrupted commit leaves no record, and a dead process's scratch folders are swept."""
import json
import os
import subprocess
import sys
import time

from xc_core.store import RunStore, run_key
from xc_core.paths import scratch_dir, sweep_scratch


def _run_dir(tmp_path, name, size=1000):
    d = tmp_path / name
    (d / "artifacts" / "ort-cpu").mkdir(parents=True)
    (d / "artifacts" / "ort-cpu" / "model.onnx").write_bytes(os.urandom(size))
    (d / "inputs.npz").write_bytes(b"npz" * 10)
    (d / "work").mkdir()
    (d / "work" / "scratch.log").write_text("never stored")
    return str(d)


def _report(name):
    return {"source": {"name": name, "sha256": "0" * 64}, "targets": {"ort-cpu": {"status": "ok"}}}


def test_a_run_and_its_files_survive_a_new_store_instance(tmp_path):
    root = tmp_path / "home"
    store = RunStore(str(root))
    store.put("k1", _report("a"), _run_dir(tmp_path, "a"))
    again = RunStore(str(root))    # a restarted server
    assert again.get("k1")["source"]["name"] == "a"
    files = again.files("k1")
    assert set(files) == {"report.json", "inputs.npz", os.path.join("artifacts", "ort-cpu", "model.onnx")}
    out = again.materialize("k1", str(tmp_path / "back"))
    assert open(os.path.join(out, "inputs.npz"), "rb").read() == b"npz" * 10
    assert again.runs()[0]["source_name"] == "a" and again.runs()[0]["status"] == "ok"
    assert again.get("missing") is None


def test_identical_files_are_stored_once(tmp_path):
    store = RunStore(str(tmp_path / "home"))
    d = _run_dir(tmp_path, "a")
    store.put("k1", _report("a"), d)
    store.put("k2", _report("a"), d)
    objects = [f for sub in os.listdir(tmp_path / "home" / "objects")
               for f in os.listdir(tmp_path / "home" / "objects" / sub)]
    assert len(objects) == 3   # model, inputs, one report: shared by both runs


def test_least_recently_used_runs_are_evicted_beyond_the_bound(tmp_path):
    store = RunStore(str(tmp_path / "home"), max_mb=0.25)   # room for about two 100 kB runs
    for i in range(3):
        store.put(f"k{i}", _report(f"m{i}"), _run_dir(tmp_path, f"m{i}", size=100_000))
        time.sleep(0.01)
        if i == 1:
            assert store.get("k0") is not None   # k0 used: k1 is now the least recently used
    assert store.has("k0") and store.has("k2") and not store.has("k1")
    assert store.total_bytes() <= 0.25 * (1 << 20)


def test_an_interrupted_commit_leaves_no_record(tmp_path):
    """Objects are written before the run's row; a crash in between leaves objects no run refers to, which the
    next collection removes, and no run."""
    store = RunStore(str(tmp_path / "home"))
    store._add_file(_run_dir(tmp_path, "a") + "/inputs.npz")   # written, never committed
    assert store.runs() == [] and store.get("k") is None
    orphan = next((tmp_path / "home" / "objects").rglob("*"))
    while orphan.is_dir():
        orphan = next(orphan.iterdir())
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    store._collect()
    assert not orphan.exists()


def test_scratch_folders_of_a_dead_process_are_swept(tmp_path, monkeypatch):
    monkeypatch.setenv("XC_HOME", str(tmp_path / "home"))
    mine = scratch_dir("run")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    theirs = os.path.join(str(tmp_path / "home" / "work"), f"run-{dead}-abcdef")
    os.makedirs(theirs)
    assert sweep_scratch() == 1
    assert os.path.isdir(mine) and not os.path.exists(theirs)


def test_the_run_key_names_everything_that_changes_a_result():
    base = dict(source="s", targets=["ort-cpu"], options={}, edits={})
    assert run_key(**base) == run_key(**base)
    assert run_key(**base) != run_key(**{**base, "targets": ["ort-cpu", "openvino-cpu"]})
    assert run_key(**base) != run_key(**{**base, "edits": {"dims": {"height": 640}}})


def test_the_cli_records_its_run(tmp_path, monkeypatch):
    from xc_core.cli import main
    monkeypatch.setenv("XC_HOME", str(tmp_path / "home"))
    assert main(["analyze", "sample:vision-mini", "--targets", "ort-cpu", "--out", str(tmp_path / "out"),
                 "--quiet"]) == 0
    runs = RunStore(str(tmp_path / "home")).runs()
    assert len(runs) == 1 and runs[0]["source_name"] == "vision-mini" and runs[0]["targets"] == "ort-cpu"
    stored = RunStore(str(tmp_path / "home")).get(runs[0]["key"])
    assert stored == json.load(open(tmp_path / "out" / "report.json"))
    assert main(["analyze", "sample:vision-mini", "--targets", "ort-cpu", "--out", str(tmp_path / "out2"),
                 "--quiet", "--no-store"]) == 0
    assert len(RunStore(str(tmp_path / "home")).runs()) == 1
