"""`xc analyze --isolate` and `xc repro` as a user runs them: a model whose exp overflows float16, its culprit named
in the report and on the terminal, its bundle copied out and run standalone; an ONNX source through the route."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from tiny_models import ExpOverflow

from xc_core.cli import main


@pytest.fixture
def overflow_model(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(2, 8) * 3
    path = tmp_path / "overflow.pt2"
    torch.export.save(torch.export.export(ExpOverflow().eval(), (x,)), str(path))
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=x.numpy())
    return str(path), str(inputs)


def test_gate_flags_need_isolate(capsys, overflow_model, tmp_path):
    model, inputs = overflow_model
    assert main(["analyze", model, "--inputs", inputs, "--targets", "ort-cpu", "--gate", "rel_l2=1e-3",
                 "--out", str(tmp_path / "out"), "--no-store", "--quiet"]) == 2
    assert "--gate go with --isolate" in capsys.readouterr().err
    assert main(["analyze", model, "--inputs", inputs, "--targets", "ort-cpu", "--isolate", "--gate", "speed=1",
                 "--out", str(tmp_path / "out"), "--no-store", "--quiet"]) == 2
    assert "--gate 'speed=1'" in capsys.readouterr().err


@pytest.mark.slow
def test_isolate_names_the_culprit_and_repro_runs_without_xc(capsys, overflow_model, tmp_path):
    model, inputs = overflow_model
    out = tmp_path / "run"
    assert main(["analyze", model, "--inputs", inputs, "--targets", "ort-cpu,coreai-ane", "--isolate",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "culprit: coreai-ane: the exp (1 op) accounts for all of the output drift" in printed
    report = json.loads((out / "report.json").read_text())
    ane = report["targets"]["coreai-ane"]["isolation"]
    assert ane["evidence"] == "emulated" and "exp" in ane["above_gate"]
    assert ane["culprit"]["status"] == "found" and ane["culprit"]["ops"] == ["exp"]
    cpu = report["targets"]["ort-cpu"]["isolation"]
    assert "culprit" not in cpu          # within the gate: no search
    assert not cpu["above_gate"] and cpu["evidence"] == "measured"
    q4 = next(item for item in report["checklist"]["targets"]["coreai-ane"] if item["id"] == 4)
    assert "culprit: coreai-ane: the exp" in q4["detail"] and "exp (non-finite)" in q4["detail"]
    # The bundle, copied out of the run folder, runs on the plain toolchain and reproduces what xc saw.
    bug = tmp_path / "bug"
    assert main(["repro", str(out), "--target", "coreai-ane", "--out", str(bug)]) == 0
    said = capsys.readouterr().out
    assert "wrote" in said and "coreai-torch" in said
    assert {"model.pt2", "inputs.npz", "expected.npz", "observed.npz", "run_repro.py", "BUG_REPORT.md",
            "io.json"} <= set(os.listdir(bug))
    assert "Evidence: emulated" in (bug / "BUG_REPORT.md").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    ran = subprocess.run([sys.executable, "-I", "run_repro.py"], cwd=bug, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "non-finite" in ran.stdout and "1 of 1 match what xc observed" in ran.stdout
    # The stored run: `xc repro` by run id finds the same culprit (isolation already in the stored report).
    key = _stored_key(str(out))
    assert main(["repro", key[:12], "--target", "coreai-ane", "--out", str(tmp_path / "bug2")]) == 0
    assert os.path.isfile(tmp_path / "bug2" / "run_repro.py")


def _stored_key(run_dir: str) -> str:
    from xc_core.store import RunStore
    runs = RunStore().runs()
    return max(runs, key=lambda r: r.get("created", 0))["key"]


@pytest.mark.slow
def test_an_onnx_source_isolates_the_route_program_in_onnx_names(overflow_model, tmp_path, capsys):
    torch.manual_seed(0)
    onnx_path = tmp_path / "overflow.onnx"
    torch.onnx.export(ExpOverflow().eval(), (torch.randn(2, 8),), str(onnx_path), dynamo=True, input_names=["x"])
    _, inputs = overflow_model
    out = tmp_path / "run"
    assert main(["analyze", str(onnx_path), "--inputs", inputs, "--targets", "ort-cpu,coreml-ane", "--isolate",
                 "--out", str(out), "--no-store", "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    ort = report["targets"]["ort-cpu"]["isolation"]
    assert "compiles the ONNX itself" in ort["error"]
    ane = report["targets"]["coreml-ane"]["isolation"]
    onnx_ids = {n["id"] for n in report["capture"]["graph"]["nodes"]}
    assert ane["isolated"] and all(r["source_op"] in onnx_ids for r in ane["ops"])
    assert all(r["program_node"] for r in ane["ops"])
    culprit = ane["culprit"]
    assert culprit["status"] == "found" and set(culprit["ops"]) <= onnx_ids
    assert any("Exp" in (t or "") for t in culprit["op_types"])


@pytest.mark.slow
def test_two_sessions_extending_one_run_keep_both_blocks(overflow_model, tmp_path):
    """Two dashboard sessions press the button on the same stored run at once, for different targets: whoever
    comes second starts from the run the first put back, so both targets keep their isolation."""
    import threading

    from xc_core.culprit.run import isolate_stored
    from xc_core.store import RunStore
    model, inputs = overflow_model
    assert main(["analyze", model, "--inputs", inputs, "--targets", "ort-cpu,coreml-cpu", "--out",
                 str(tmp_path / "run"), "--quiet"]) == 0
    key = _stored_key(str(tmp_path / "run"))
    errors = []

    def press(target):
        try:
            isolate_stored(key, [target], None, store=RunStore())
        except Exception as e:  # noqa: BLE001 — collected: the assertion below says which failed
            errors.append(e)
    threads = [threading.Thread(target=press, args=(t,)) for t in ("ort-cpu", "coreml-cpu")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    report = RunStore().get(key)
    assert report["targets"]["ort-cpu"]["isolation"]["isolated"]
    assert report["targets"]["coreml-cpu"]["isolation"]["isolated"]


@pytest.mark.slow
def test_hostile_names_stay_data_through_isolation_and_the_repro(tmp_path, capsys):
    """An ONNX model whose every name is a payload (quotes, newlines, ")", Markdown, HTML): through the route's
    isolation, the culprit search, the sentence, the bundle and its script, nothing runs and every text is escaped."""
    from hostile_names import hostile_onnx
    canary = str(tmp_path / "CANARY")
    model = hostile_onnx(str(tmp_path / "hostile.onnx"), canary)
    out = tmp_path / "run"
    assert main(["analyze", model, "--targets", "coreai-ane", "--isolate", "--gate", "rel_l2=1e-6", "--out",
                 str(out), "--no-store"]) == 0
    printed = capsys.readouterr().out
    culprit_line = next(line for line in printed.splitlines() if line.startswith("culprit: coreai-ane"))
    assert "\n" not in culprit_line and "\x1b" not in culprit_line
    report = json.loads((out / "report.json").read_text())
    culprit = report["targets"]["coreai-ane"]["isolation"]["culprit"]
    assert culprit["status"] == "found"
    bundle = out / "artifacts" / "coreai-ane" / "repro"
    script = (bundle / "run_repro.py").read_text()
    assert "__import__" not in script and "evil" not in script and "CANARY" not in script
    bug = (bundle / "BUG_REPORT.md").read_text()
    assert "[click](https://evil.example)" not in bug and "<img src=x" not in bug
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    ran = subprocess.run([sys.executable, "-I", "run_repro.py"], cwd=bundle, env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "1 of 1 match what xc observed" in ran.stdout
    assert not os.path.exists(canary)
