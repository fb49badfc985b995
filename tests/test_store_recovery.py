"""A damaged run index never takes xc down: a truncated, garbage or foreign runs.sqlite is moved aside and rebuilt
from the run records (one line says so), a store written before records existed gets its reports back from the
objects, a run whose report object was deleted leaves the listing, and an index that cannot be opened at all makes
the store unavailable (reads find nothing, put raises StoreUnavailable) instead of raising sqlite3's errors."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from xc_core.store import INDEX_FILE, RECORDS_DIR, RunStore, StoreUnavailable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _report(name: str, key: str) -> dict:
    return {"schema_version": "1.0", "source": {"name": name, "sha256": "0" * 64, "kind": "onnx"},
            "targets": {"ort-cpu": {"status": "ok"}, "openvino-cpu": {"status": "error"}},
            "checklist": {"targets": {"ort-cpu": [{"verdict": "pass"}]}}, "run": {"key": key}}


def _store_with_runs(tmp_path, n=3) -> str:
    root = str(tmp_path / "home")
    store = RunStore(root)
    for i in range(n):
        d = tmp_path / f"run{i}"
        (d / "artifacts").mkdir(parents=True)
        (d / "artifacts" / "model.onnx").write_bytes(f"model {i}".encode())
        store.put(f"key{i}", _report(f"model{i}", f"key{i}"), str(d), origin="cli")
    store._close()       # as a process that ended
    return root


def _keys(store: RunStore) -> list[str]:
    return sorted(r["key"] for r in store.runs())


def _damage_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "run index" in line]


def _truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def _garbage(path):
    with open(path, "wb") as f:
        f.write(os.urandom(8192))


def _wrong_schema(path):
    os.remove(path)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO runs (name) VALUES ('not xc')")
    db.commit()
    db.close()


def _foreign_database(path):
    os.remove(path)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE bookmarks (url TEXT)")
    db.commit()
    db.close()


@pytest.mark.parametrize("damage", [_truncate, _garbage, _wrong_schema, _foreign_database])
def test_a_damaged_index_is_moved_aside_and_rebuilt_from_the_records(tmp_path, capfd, damage):
    root = _store_with_runs(tmp_path)
    index = os.path.join(root, INDEX_FILE)
    damage(index)
    capfd.readouterr()
    store = RunStore(root)
    lines = _damage_lines(capfd.readouterr().err)
    assert len(lines) == 1, lines
    assert lines[0].startswith("xc: the run index at ") and "was damaged" in lines[0]
    assert "moved aside to" in lines[0] and "rebuilt 3 run(s)" in lines[0]
    aside = [n for n in os.listdir(root) if n.startswith(INDEX_FILE + ".damaged-")]
    assert len(aside) == 1 and aside[0] in lines[0]
    assert store.available and _keys(store) == ["key0", "key1", "key2"]
    report = store.get("key1")
    assert report["source"]["name"] == "model1"
    assert set(store.files("key1")) == {"report.json", os.path.join("artifacts", "model.onnx")}
    row = next(r for r in store.runs() if r["key"] == "key1")
    assert row["summary"]["origin"] == "cli" and row["summary"]["ok"] == 1 and row["status"] == "error,ok"
    store.put("key3", _report("model3", "key3"))          # and it keeps working
    store._close()
    capfd.readouterr()
    again = RunStore(root)                                 # a healthy index is not rebuilt again
    assert _damage_lines(capfd.readouterr().err) == []
    assert _keys(again) == ["key0", "key1", "key2", "key3"]


def test_an_index_damaged_while_open_is_rebuilt_on_the_next_query(tmp_path, capfd):
    root = _store_with_runs(tmp_path)
    store = RunStore(root)
    store._close()
    _garbage(os.path.join(root, INDEX_FILE))
    for suffix in ("-wal", "-shm"):
        if os.path.exists(os.path.join(root, INDEX_FILE + suffix)):
            os.remove(os.path.join(root, INDEX_FILE + suffix))
    store._db = sqlite3.connect(os.path.join(root, INDEX_FILE), check_same_thread=False, isolation_level=None)
    capfd.readouterr()
    assert _keys(store) == ["key0", "key1", "key2"]
    assert len(_damage_lines(capfd.readouterr().err)) == 1


def test_a_missing_index_is_rebuilt_and_a_run_without_its_report_is_dropped(tmp_path, capfd):
    root = _store_with_runs(tmp_path)
    store = RunStore(root)
    gone = store.files("key0")["report.json"]
    store._close()
    os.remove(gone)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(os.path.join(root, INDEX_FILE + suffix)):
            os.remove(os.path.join(root, INDEX_FILE + suffix))
    capfd.readouterr()
    store = RunStore(root)
    lines = _damage_lines(capfd.readouterr().err)
    assert len(lines) == 1 and "was missing" in lines[0] and "rebuilt 2 run(s)" in lines[0]
    assert "1 dropped" in lines[0]
    assert _keys(store) == ["key1", "key2"] and store.get("key0") is None
    assert not os.path.exists(os.path.join(root, RECORDS_DIR, "key0.json"))


def test_a_run_whose_report_object_was_deleted_leaves_the_listing(tmp_path):
    root = _store_with_runs(tmp_path)
    store = RunStore(root)
    os.remove(store.files("key1")["report.json"])
    assert store.get("key1") is None
    assert not store.has("key1")
    assert _keys(store) == ["key0", "key2"]
    assert _keys(RunStore(root)) == ["key0", "key2"]
    # Deleted some other way (listing first): it leaves the listing all the same.
    os.remove(store.files("key2")["report.json"])
    assert _keys(store) == ["key0"] and store.get("key2") is None


def test_a_deleted_artifact_is_left_out_of_the_files(tmp_path):
    root = _store_with_runs(tmp_path)
    store = RunStore(root)
    os.remove(store.files("key1")[os.path.join("artifacts", "model.onnx")])
    assert set(store.files("key1")) == {"report.json"}
    assert store.get("key1")["source"]["name"] == "model1"
    out = store.materialize("key1", str(tmp_path / "back"))
    assert os.listdir(out) == ["report.json"]


def test_a_store_written_before_records_gets_its_reports_back_from_the_objects(tmp_path, capfd):
    root = _store_with_runs(tmp_path)
    shutil.rmtree(os.path.join(root, RECORDS_DIR))      # as xc wrote stores before run records existed
    _garbage(os.path.join(root, INDEX_FILE))
    capfd.readouterr()
    store = RunStore(root)
    lines = _damage_lines(capfd.readouterr().err)
    assert len(lines) == 1 and "rebuilt 3 run(s)" in lines[0]
    assert "3 of them recovered from the report alone" in lines[0]
    assert _keys(store) == ["key0", "key1", "key2"]
    assert store.get("key2")["source"]["name"] == "model2"
    assert set(store.files("key2")) == {"report.json"}     # its other files cannot be matched to it
    assert next(r for r in store.runs() if r["key"] == "key2")["summary"]["origin"] == "recovered"
    assert sorted(os.listdir(os.path.join(root, RECORDS_DIR))) == ["key0.json", "key1.json", "key2.json"]


def test_a_healthy_store_without_records_gets_them_when_it_opens(tmp_path):
    root = _store_with_runs(tmp_path)
    shutil.rmtree(os.path.join(root, RECORDS_DIR))
    RunStore(root)._close()
    assert sorted(os.listdir(os.path.join(root, RECORDS_DIR))) == ["key0.json", "key1.json", "key2.json"]
    _garbage(os.path.join(root, INDEX_FILE))
    store = RunStore(root)
    assert set(store.files("key0")) == {"report.json", os.path.join("artifacts", "model.onnx")}


def test_deleted_and_evicted_runs_take_their_records_with_them(tmp_path):
    root = _store_with_runs(tmp_path)
    store = RunStore(root)
    store.delete("key0")
    assert not os.path.exists(os.path.join(root, RECORDS_DIR, "key0.json"))
    store.max_bytes = 1
    store.evict()
    assert store.runs() == [] and os.listdir(os.path.join(root, RECORDS_DIR)) == []


def test_an_index_that_cannot_be_opened_makes_the_store_unavailable(tmp_path, capfd):
    root = tmp_path / "home"
    (root / INDEX_FILE).mkdir(parents=True)      # SQLite cannot open a folder: no repair, no crash
    store = RunStore(str(root))
    assert not store.available and "cannot be opened" in store.problem and "XC_HOME" in store.problem
    capfd.readouterr()
    assert store.runs() == [] and store.get("k") is None and not store.has("k") and store.files("k") == {}
    assert store.total_bytes() == 0
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xc: the run index at")
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        store.put("k", _report("m", "k"))
    assert os.path.isdir(root / INDEX_FILE)      # left as it was


def test_a_store_folder_that_cannot_be_created_makes_the_store_unavailable(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    store = RunStore(str(tmp_path / "file" / "home"))
    assert not store.available and "cannot be created" in store.problem
    assert store.runs() == []
    with pytest.raises(StoreUnavailable):
        store.put("k", _report("m", "k"))


_UNREADABLE = """
import os, sys
from xc_core.store import RunStore
import xc_core.report.sidecar
if os.geteuid() == 0:      # root reads any file: be nobody (after the imports, which nobody may not read)
    os.setgid(65534); os.setuid(65534)
s = RunStore(sys.argv[1])
print(s.available, s.runs() == [])
"""


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX permissions")
def test_an_index_another_user_owns_makes_the_store_unavailable(tmp_path):
    import tempfile
    root = tempfile.mkdtemp(prefix="xc-perm-")
    try:
        os.chmod(root, 0o777)
        RunStore(root).put("k", _report("m", "k"))
        for name in os.listdir(root):
            path = os.path.join(root, name)
            os.chmod(path, 0o777 if os.path.isdir(path) else 0o666)
        os.chmod(os.path.join(root, INDEX_FILE), 0o600 if os.geteuid() == 0 else 0)
        r = subprocess.run([sys.executable, "-c", _UNREADABLE, root], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["False", "True"]
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "cannot be opened" in lines[0], r.stderr
        assert os.path.exists(os.path.join(root, INDEX_FILE))        # not moved aside: it is not damaged
        assert not [n for n in os.listdir(root) if ".damaged-" in n]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_cli_works_on_a_damaged_index(tmp_path):
    root = _store_with_runs(tmp_path)
    _truncate(os.path.join(root, INDEX_FILE))
    env = {**os.environ, "XC_HOME": root}
    r = subprocess.run([sys.executable, "-m", "xc_core", "runs"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr and len(_damage_lines(r.stderr)) == 1
    assert r.stdout.count("model") == 3
    r = subprocess.run([sys.executable, "-m", "xc_core", "report", "key1", "--format", "json"], capture_output=True,
                       text=True, env=env, cwd=ROOT)
    assert r.returncode == 2 and "not a run id" in r.stderr     # too short an id is still bad input, not a crash
    r = subprocess.run([sys.executable, "-m", "xc_core", "runs"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0 and _damage_lines(r.stderr) == []


def test_the_cli_analyzes_with_a_garbage_index_and_records_the_run(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / INDEX_FILE).write_bytes(os.urandom(4096))
    env = {**os.environ, "XC_HOME": str(home)}
    r = subprocess.run([sys.executable, "-m", "xc_core", "analyze", "sample:vision-mini", "--targets", "ort-cpu",
                        "--out", str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, env=env,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert len(_damage_lines(r.stderr)) == 1 and "internal error" not in r.stderr
    key = json.load(open(tmp_path / "out" / "report.json"))["run"]["key"]
    assert RunStore(str(home)).get(key)["source"]["name"] == "vision-mini"


def test_the_dashboard_service_works_on_a_garbage_index(tmp_path):
    """What every dashboard page goes through: the service's store. With a garbage index it opens, and a stored
    run is found again."""
    from xc_core.service import AnalysisService
    root = _store_with_runs(tmp_path)
    _garbage(os.path.join(root, INDEX_FILE))
    svc = AnalysisService(RunStore(root))
    assert svc.get("key1").report["source"]["name"] == "model1"
    assert svc.get("nope") is None


def test_the_dashboard_service_keeps_finished_reports_in_memory_when_the_store_is_unavailable(tmp_path, monkeypatch,
                                                                                            capfd):
    """No history then, but an analysis is not lost, and opening it again does not analyse it again."""
    import xc_core.api
    from xc_core.service import DONE, AnalysisService
    calls = []

    def fake_analyze(spec, out_dir=None, progress=None, **kwargs):
        calls.append(spec)
        return _report("sample", "")
    monkeypatch.setattr(xc_core.api, "analyze", fake_analyze)
    root = tmp_path / "home"
    (root / INDEX_FILE).mkdir(parents=True)
    monkeypatch.setenv("XC_HOME", str(root))
    capfd.readouterr()
    svc = AnalysisService(RunStore(str(root)))
    a = svc.submit("k1", "sample:vision-mini")
    assert a.finished.wait(60)
    assert a.state == DONE and a.report["source"]["name"] == "sample"
    again = svc.get("k1")
    assert again is a and calls == ["sample:vision-mini"]
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "cannot be opened" in err[0], err


def test_a_stale_report_object_is_not_brought_back_as_a_run(tmp_path, capsys):
    """A report object no record names, in a store that has records, is an old copy waiting to be collected (the
    same run stored again), not a run to recover."""
    root = _store_with_runs(tmp_path, n=2)
    store = RunStore(root)
    store._add_bytes(json.dumps(_report("model0", "key0") | {"note": "an earlier copy"}).encode())
    store._close()
    _truncate(os.path.join(root, INDEX_FILE))
    assert _keys(RunStore(root)) == ["key0", "key1"]
    assert "recovered" not in capsys.readouterr().err
