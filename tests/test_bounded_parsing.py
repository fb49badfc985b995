"""Inputs that are small on disk and large (or malformed) once parsed: a YAML manifest of nested aliases, crafted
matrix.json files and report.json files. Each is refused in one line (exit 2) wherever it is read — never an
"internal error" and never memory without bound; and the CLI's own process has a memory bound of its own."""
import copy
import json
import os
import subprocess
import sys

import pytest

from xc_core.cli import main
from xc_core.errors import XcInputError
from xc_core.fleet.manifest import read_manifest
from xc_core.fleet.matrix import parse_matrix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_refusal(code, err, what):
    lines = err.strip().splitlines()
    assert code == 2, f"{what}: exit {code}, stderr {err!r}"
    assert len(lines) == 1 and lines[0].startswith("xc: "), f"{what}: {err!r}"
    assert "internal error" not in err and "Traceback" not in err, f"{what}: {err!r}"
    return lines[0]


# ---- YAML manifests ----------------------------------------------------------------------------------------------
_LAUGHS = """models:
  - source: model.onnx
    shape: {x: *i}
"""


def _billion_laughs(levels: int = 9) -> str:
    """The review's manifest: nine anchors, each a list of nine aliases of the one before (9**9 values)."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    return "\n".join(lines) + "\n" + _LAUGHS.replace("*i", f"*{chr(ord('a') + levels - 1)}")


@pytest.mark.parametrize("content, needle", [
    (_billion_laughs(), "too many aliases"),
    # Under shape: and options:, where the flags are turned into strings (this is where memory ran away).
    ('o: &o {"a": "' + "y" * 4000 + '"}\np: &p [' + ",".join(["*o"] * 100) + "]\nq: &q [" + ",".join(["*p"] * 100)
     + "]\nmodels:\n  - source: model.onnx\n    options: {ort-cpu.level: *q}\n", "too many aliases"),
    ("a: &a [*a]\nmodels: [model.onnx]\n", "too many aliases"),            # an alias inside its own anchor
    ("models:\n  - source: model.onnx\n    shape: " + "[" * 40 + "]" * 40 + "\n", "nested deeper than"),
])
def test_yaml_alias_bombs_and_deep_nesting_are_refused_in_one_line(tmp_path, capsys, content, needle):
    manifest = tmp_path / "fleet.yaml"
    manifest.write_text(content)
    with pytest.raises(XcInputError) as e:
        read_manifest(str(manifest))
    assert needle in str(e.value) and "fleet.yaml line " in str(e.value) and "\n" not in str(e.value)
    code, _, err = _cli(capsys, ["batch", manifest, "--out", tmp_path / "out", "--targets", "ort-cpu"])
    assert needle in _one_line_refusal(code, err, needle)
    assert not (tmp_path / "out").exists()


def test_yaml_node_budget_counts_plain_values_too(tmp_path, monkeypatch):
    """Without a single alias, a manifest past the value budget is refused (the budget is lowered here: the real
    one takes a file near the 4 MiB size cap to reach)."""
    from xc_core.fleet import manifest as manifest_module
    monkeypatch.setattr(manifest_module, "MAX_YAML_NODES", 50)
    path = tmp_path / "fleet.yaml"
    path.write_text("models:\n" + "".join(f"  - m{i}.onnx\n" for i in range(60)))
    with pytest.raises(XcInputError, match="more than 50 values; at most 50 values in a manifest"):
        read_manifest(str(path))


def test_yaml_anchors_a_real_manifest_uses_still_load(tmp_path):
    """Shared flags through one anchor, as a fleet of many models with the same options would write them."""
    path = tmp_path / "fleet.yaml"
    path.write_text("common: &opts {ort-cpu.level: basic}\nshape: &shape {x: [1, 4]}\nmodels:\n"
                    + "".join(f"  - {{source: m{i}.onnx, options: *opts, shape: *shape}}\n" for i in range(200)))
    with pytest.raises(XcInputError, match="unknown key"):       # the anchors' own keys are not manifest keys…
        read_manifest(str(path))
    path.write_text("models:\n  - {source: m0.onnx, options: &opts {ort-cpu.level: basic}, shape: &shape {x: [1, 4]}}\n"
                    + "".join(f"  - {{source: m{i}.onnx, options: *opts, shape: *shape}}\n" for i in range(1, 200)))
    manifest = read_manifest(str(path))                          # …but anchors inside models: are fine
    assert len(manifest.models) == 200
    assert manifest.models[-1].options == ("ort-cpu.level=basic",) and manifest.models[-1].shape == ("x=1x4",)


def test_a_manifest_with_a_byte_order_mark_keeps_its_first_line(tmp_path):
    for name, text in (("fleet.txt", "first.onnx\nsecond.onnx\n"),
                       ("fleet.yaml", "models: [first.onnx, second.onnx]\n")):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        assert [m.name for m in read_manifest(str(path)).models] == ["first", "second"], name


# ---- crafted matrix.json ------------------------------------------------------------------------------------------
def _figure(value, evidence="measured", **extra):
    return {"value": value, "evidence": evidence, **extra}


def _valid_matrix() -> dict:
    """A matrix as xc batch writes it (two models × two targets, every figure set): the fuzz's starting point."""
    def cell(model, target, share, fb, drift, t):
        return {"model": model, "target": target, "identity": target, "family": target.split("-")[0],
                "status": "ok", "cached": False, "error": None, "advice": None, "run": "ab" * 16,
                "accelerated_share": _figure(share, "documented"), "fallbacks": _figure(fb, "documented"),
                "fusions": _figure(2, "observed"), "worst_drift": _figure(drift, "measured", output="y"),
                "time_us": _figure(t, "measured", host_cpu="cpu")}

    def row(name):
        return {"name": name, "source": f"{name}.onnx", "sha256": "0" * 64, "run": "ab" * 16, "report": None,
                "runs": {}, "status": "ok", "error": None, "cached": False, "seconds": 1.5, "node": None}
    return {"schema": "xc-matrix/1", "xc_version": "0.1.0", "created_at": "2025-01-01T00:00:00Z", "complete": True,
            "manifest": "fleet.txt", "targets": ["ort-cpu", "ort-nnapi"], "shards": [{"index": 1, "count": 2}],
            "backend": "local", "toolchains": {"onnxruntime": "1.0"}, "host": {"cpu": "cpu", "cores": 2},
            "models": [row("a"), row("b")],
            "cells": [cell("a", "ort-cpu", 1.0, 0, 1e-7, 250.0), cell("a", "ort-nnapi", 0.5, 2, 1e-3, 900.0),
                      cell("b", "ort-cpu", 1.0, 0, 0.0, 100.0),
                      {**cell("b", "ort-nnapi", 0.0, 0, 0.0, 0.0), "status": "error", "error": "boom",
                       "accelerated_share": None, "fallbacks": None, "fusions": None, "worst_drift": None,
                       "time_us": None}]}


def _set(path, value):
    def apply(m):
        *parents, last = path
        node = m
        for p in parents:
            node = node[p]
        node[last] = value
    return apply


def _drop(path):
    def apply(m):
        *parents, last = path
        node = m
        for p in parents:
            node = node[p]
        del node[last]
    return apply


_DEEP = 100_000
# Each: (what it is, bytes of a matrix.json). Every field every reader uses gets a wrong type somewhere here.
_RAW = [
    ("empty file", b""),
    ("not UTF-8", b'{"schema": "xc-matrix/1", "models": [], "cells": [], "manifest": "\xff\xfe"}'),
    ("UTF-16", json.dumps(_valid_matrix()).encode("utf-16")),
    ("100,000-deep nesting", b'{"schema": "xc-matrix/1", "models": ' + b"[" * _DEEP + b"]" * _DEEP + b', "cells": []}'),
    ("nesting past the bound", json.dumps({**_valid_matrix(), "extra": json.loads("[" * 20 + "]" * 20)}
                                          ).encode()),
    ("a list", b"[1, 2, 3]"),
    ("another schema", json.dumps({**_valid_matrix(), "schema": "xc-matrix/0"}).encode()),
    ("NaN figure", json.dumps(_valid_matrix()).replace("250.0", "NaN").encode()),
    ("Infinity figure", json.dumps(_valid_matrix()).replace("900.0", "Infinity").encode()),
    ("1e999 figure", json.dumps(_valid_matrix()).replace("900.0", "1e999").encode()),
    ("a 4000-digit count", json.dumps(_valid_matrix()).replace('"fallbacks": {"value": 2', '"fallbacks": {"value": '
                                                                + "9" * 4000).encode()),
    ("a lone surrogate", json.dumps(_valid_matrix()).replace('"manifest": "fleet.txt"',
                                                              '"manifest": "\\ud800"').encode()),
]
_MUTATIONS = [
    ("models not a list", _set(["models"], {"a": 1})),
    ("no cells", _drop(["cells"])),
    ("a row that is not an object", _set(["models", 0], "a")),
    ("a row without a name", _drop(["models", 0, "name"])),
    ("a row named by a number", _set(["models", 0, "name"], 7)),
    ("report: 5", _set(["models", 0, "report"], 5)),
    ("report out of the folder", _set(["models", 0, "report"], "../../etc/passwd")),
    ("report an absolute path", _set(["models", 0, "report"], "/proc/self/environ")),
    ("report through ..", _set(["models", 0, "report"], "runs/../../x/report.json")),
    ("runs a list", _set(["models", 0, "runs"], ["runs/a/report.json"])),
    ("runs keyed by a path", _set(["models", 0, "runs"], {"../x": "runs/a/report.json"})),
    ("run not a run id", _set(["models", 0, "run"], "/proc/self/environ")),
    ("row status unknown", _set(["models", 0, "status"], "maybe")),
    ("seconds a string", _set(["models", 0, "seconds"], "fast")),
    ("a model listed twice", _set(["models", 1, "name"], "a")),
    ("a cell that is not an object", _set(["cells", 0], 5)),
    ("a cell without status", _drop(["cells", 0, "status"])),
    ("a status unknown", _set(["cells", 0, "status"], "exploded")),
    ("a status that is a list", _set(["cells", 0, "status"], ["ok"])),
    ("a cell's model a number", _set(["cells", 0, "model"], 7)),
    ("a cell without target", _set(["cells", 0, "target"], None)),
    ("a cell of a model with no row", _set(["cells", 0, "model"], "zzz")),
    ("two cells for one model × target", _set(["cells", 1, "target"], "ort-cpu")),
    ("error a number", _set(["cells", 0, "error"], 5)),
    ("identity an object", _set(["cells", 0, "identity"], {})),
    ("a cell's run a number", _set(["cells", 0, "run"], 12)),
    ("a figure that is a bare number", _set(["cells", 0, "accelerated_share"], 0.5)),
    ("a share above 1", _set(["cells", 0, "accelerated_share", "value"], 2.0)),
    ("fallbacks negative", _set(["cells", 0, "fallbacks", "value"], -1)),
    ("fallbacks not a count", _set(["cells", 0, "fallbacks", "value"], 1.5)),
    ("fallbacks true", _set(["cells", 0, "fallbacks", "value"], True)),
    ("a figure without evidence", _drop(["cells", 0, "worst_drift", "evidence"])),
    ("host_cpu a number", _set(["cells", 0, "time_us", "host_cpu"], 5)),
    ("a time that is a string", _set(["cells", 0, "time_us", "value"], "10")),
    ("targets a string", _set(["targets"], "ort-cpu")),
    ("targets of numbers", _set(["targets"], [1, 2])),
    ("a target listed twice", _set(["targets"], ["ort-cpu", "ort-cpu"])),
    ("shards of strings", _set(["shards"], [{"index": "1", "count": 2}])),
    ("host a string", _set(["host"], "cpu")),
    ("complete a string", _set(["complete"], "yes")),
    ("manifest a number", _set(["manifest"], 5)),
    ("toolchains a list", _set(["toolchains"], ["onnxruntime"])),
]


def _crafted():
    for what, data in _RAW:
        yield what, data
    for what, mutate in _MUTATIONS:
        m = copy.deepcopy(_valid_matrix())
        mutate(m)
        yield what, json.dumps(m).encode()


def _batch_folder(folder, data: bytes) -> str:
    folder.mkdir(parents=True)
    (folder / "matrix.json").write_bytes(data)
    return str(folder)


def test_the_fuzz_base_is_a_matrix_every_command_reads(tmp_path, capsys):
    """The starting point passes: so each variant below is refused for what was changed in it."""
    good = _batch_folder(tmp_path / "good", json.dumps(_valid_matrix()).encode())
    same = _batch_folder(tmp_path / "same", json.dumps(_valid_matrix()).encode())
    code, out, err = _cli(capsys, ["diff", good, same])
    assert code == 0 and "no change in any cell" in out, err
    code, _, err = _cli(capsys, ["diff", good, same, "--gate"])
    assert code == 0, err
    code, _, err = _cli(capsys, ["batch", "merge", good, "--out", tmp_path / "merged"])
    assert code == 0, err
    # With a BOM, as an editor on Windows saves it.
    bom = _batch_folder(tmp_path / "bom", b"\xef\xbb\xbf" + json.dumps(_valid_matrix()).encode())
    assert _cli(capsys, ["diff", bom, good])[0] == 0


def test_crafted_matrices_are_refused_in_one_line_by_diff_gate_and_merge(tmp_path, capsys):
    good = _batch_folder(tmp_path / "good", json.dumps(_valid_matrix()).encode())
    count = 0
    for i, (what, data) in enumerate(_crafted()):
        crafted = _batch_folder(tmp_path / f"crafted{i}", data)
        for argv in (["diff", crafted, good], ["diff", good, crafted, "--gate"],
                     ["batch", "merge", good, crafted, "--out", tmp_path / f"merged{i}"]):
            code, _, err = _cli(capsys, argv)
            line = _one_line_refusal(code, err, f"{what} ({argv[0]})")
            assert "matrix.json" in line, f"{what}: {line}"
        assert not (tmp_path / f"merged{i}").exists(), what
        with pytest.raises(XcInputError):        # the Fleet page's upload reads it the same way
            parse_matrix(data, "matrix.json")
        count += 1
    assert count >= 50


# ---- crafted report.json -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    """One real run folder: a tiny ONNX model on ort-cpu, by the CLI."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_fleet import _two_output_mlp
    folder = tmp_path_factory.mktemp("real")
    model = _two_output_mlp(str(folder / "tiny.onnx"))
    assert main(["analyze", model, "--targets", "ort-cpu", "--out", str(folder / "run"), "--quiet",
                 "--no-store"]) == 0
    return folder / "run"


def _report_mutations(base: dict):
    def mut(what, change):
        r = copy.deepcopy(base)
        change(r)
        return what, json.dumps(r).encode()
    target = next(iter(base["targets"]))
    yield "not JSON", b"{"
    yield "not UTF-8", b'{"source": "\xff"}'
    yield "100,000-deep nesting", b"[" * _DEEP + b"]" * _DEEP
    yield "deep nesting inside a report", (b'{"source": {}, "targets": {}, "x": ' + b"[" * _DEEP + b"]" * _DEEP
                                           + b"}")
    yield "a list", b"[1, 2]"
    yield mut("no source", lambda r: r.pop("source"))
    yield mut("targets a list", lambda r: r.__setitem__("targets", []))
    yield mut("a target that is a string", lambda r: r["targets"].__setitem__(target, "x"))
    yield mut("another schema version", lambda r: r.__setitem__("schema_version", "9"))
    yield mut("a lone surrogate", lambda r: r["source"].__setitem__("name", "\ud800"))
    yield mut("a sidecar that is not there", lambda r: r.__setitem__("detached", {"file": "x", "pointers": ["/a"]}))
    yield mut("a detached index that is not one", lambda r: r.__setitem__("detached", [1]))
    yield mut("a status unknown", lambda r: r["targets"][target].__setitem__("status", "weird"))
    yield mut("graph nodes a number", lambda r: r["targets"][target].setdefault("graph", {}).__setitem__("nodes", 5))
    yield mut("a source name that is a number", lambda r: r["source"].__setitem__("name", 5))
    yield mut("run_us a string", lambda r: r["targets"][target].__setitem__(
        "node_times", {"evidence": "measured", "run_us": "x"}))
    yield mut("inputs a string", lambda r: r.__setitem__("inputs", "x"))
    yield mut("capture nodes of numbers", lambda r: r.__setitem__("capture", {"graph": {"nodes": [1, 2]}}))


def test_crafted_reports_are_refused_in_one_line_by_report_and_diff(real_report, tmp_path, capsys):
    base = json.loads((real_report / "report.json").read_text())
    code, _, err = _cli(capsys, ["report", real_report])
    assert code == 0, err
    for i, (what, data) in enumerate(_report_mutations(base)):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        (folder / "report.json").write_bytes(data)
        for argv in (["report", folder], ["diff", folder, real_report], ["diff", real_report, folder, "--gate"],
                     ["comment", folder, "--pr", "1"]):
            code, _, err = _cli(capsys, argv)
            _one_line_refusal(code, err, f"{what} ({argv[0]})")


def test_a_crafted_sidecar_is_refused_in_one_line(real_report, tmp_path, capsys):
    base = json.loads((real_report / "report.json").read_text())
    base["targets"][next(iter(base["targets"]))]["graph"]["nodes"] = {"$detached": "/targets/x/graph/nodes"}
    base["detached"] = {"file": "report.nodes.json", "pointers": ["/targets/x/graph/nodes"]}
    for what, side in (("not JSON", b"{"), ("deep", b"[" * _DEEP + b"]" * _DEEP), ("no values", b'{"format": 1}'),
                       ("not gzip", b"\x1f\x8b" + b"\x00" * 40), ("pointer elsewhere", b'{"values": {"/a": []}}')):
        folder = tmp_path / what.replace(" ", "-")
        folder.mkdir()
        (folder / "report.json").write_text(json.dumps(base))
        (folder / "report.nodes.json").write_bytes(side)
        code, _, err = _cli(capsys, ["report", folder])
        _one_line_refusal(code, err, f"sidecar {what}")


# ---- the main process's memory bound -------------------------------------------------------------------------------
def _python(code: str, **env):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_the_cli_process_stops_at_its_memory_bound_in_one_line():
    """A process that grows past XC_MAIN_MEMORY_GIB is stopped by the watchdog: one line naming the bound and how
    to raise it, exit 2, no traceback."""
    grow = ("import time\nfrom xc_core.memory_guard import install\ninstall()\nheld = []\n"
            "for _ in range(2000):\n    held.append(b'x' * 10**7)\n    time.sleep(0.005)\nprint('never stopped')\n")
    r = _python(grow, XC_MAIN_MEMORY_GIB="0.3")
    assert r.returncode == 2, (r.returncode, r.stdout[-300:], r.stderr[-500:])
    assert "never stopped" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "memory bound of 0.3 GiB" in lines[0] and "XC_MAIN_MEMORY_GIB" in lines[0], r.stderr


@pytest.mark.slow
def test_the_memory_bound_is_started_by_main_and_a_bad_value_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "xc_core", "samples"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={**os.environ, "XC_MAIN_MEMORY_GIB": "lots"})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "xc: XC_MAIN_MEMORY_GIB=lots: expected the CLI process's memory bound in GiB, a number above 0 (default 8)"]
    # The default never fires on a normal command, and main() starts the watchdog once however often it runs.
    r = _python("import threading\nfrom xc_core.cli import main\n"
                "for _ in range(3):\n    assert main(['samples']) == 0\n"
                "print(sum(t.name == 'xc-memory-guard' for t in threading.enumerate()))\n")
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "1", r.stderr
