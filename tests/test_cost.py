"""What running each target costs on this host (`targets[id].cost`): the phase memory peaks checked against a
buffer of known size and psutil, every figure of the real runtimes on a tiny model (sizes equal the files', weights
within the artifact, the .pte's memory plan as ExecuTorch's deserializer reads it), a target this host cannot run
saying why, and the table the Overview, the reports and `xc analyze` show. No assertion is on a time's value."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from xc_core.analysis.cost import cost_block
from xc_core.capture import capture
from xc_core.inputs.values import random_inputs
from xc_core.limits import Limits
from xc_core.sources.spec import InputSpec, Source
from xc_core.targets import OK, execute_target, make_target
from xc_core.targets import run_cost
from xc_core.targets.run_cost import STEADY_RUNS, PhaseMemory, resident_bytes, steady_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1024 * 1024
RUNS_HERE = ("ort-cpu", "openvino-cpu", "executorch-xnnpack", "litert-xnnpack")


class ConvHead(nn.Module):
    """Conv → ReLU → Linear: 21,416 bytes of fp32 weights."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


PARAM_BYTES = sum(p.numel() * 4 for p in ConvHead().parameters())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    src = Source(kind="sample", name="tiny", sha256="0" * 64, inputs=[InputSpec("x", [1, 3, 8, 8], "float32")],
                 module=ConvHead().eval())
    feeds = random_inputs(src.inputs)
    return capture(src, str(tmp_path_factory.mktemp("cap")), feeds), feeds


@pytest.fixture(scope="module")
def results(tiny, tmp_path_factory):
    cap, feeds = tiny
    out = {}
    for tid in RUNS_HERE:
        workdir = str(tmp_path_factory.mktemp(tid))
        out[tid] = (execute_target(make_target(tid), cap, feeds, workdir), workdir)
    return out


# ---- the memory measure, against references xc did not write --------------------------------------------------
def test_a_phase_peak_grows_by_a_buffer_allocated_inside_it_and_matches_psutil():
    psutil = pytest.importorskip("psutil")
    assert abs(resident_bytes() - psutil.Process().memory_info().rss) < 4 * MB
    memory = PhaseMemory()
    memory.start("run")
    buffer = np.ones(64 * MB // 8)          # 64 MB, every page touched
    del buffer
    memory.stop("run")
    assert memory.method == "vmhwm"
    phase = memory.phases["run"]
    assert 60 * MB <= phase["peak"] - phase["before"] <= 80 * MB
    memory.start("compile")                 # the reset: the next phase does not inherit the last one's peak
    memory.stop("compile")
    assert memory.phases["compile"]["peak"] - memory.phases["compile"]["before"] < 16 * MB


def test_where_the_kernel_peak_cannot_be_reset_a_sampler_still_sees_a_held_buffer(monkeypatch):
    monkeypatch.setattr(run_cost, "reset_peak", lambda: "/proc/self/clear_refs refused (Permission denied)")
    memory = PhaseMemory()
    memory.start("run")
    buffer = np.ones(64 * MB // 8)
    import time
    time.sleep(0.05)                        # held long enough for the 2 ms sampler
    del buffer
    memory.stop("run")
    assert memory.method == "sampled" and "refused" in memory.describe()
    phase = memory.phases["run"]
    assert 60 * MB <= phase["peak"] - phase["before"] <= 80 * MB


def test_a_confined_worker_keeps_the_exact_peak():
    """Landlock refuses /proc/self/clear_refs once a worker is confined: the descriptor opened before still
    resets the peak, and nothing else became writable."""
    from xc_core.worker import landlock_status
    if not landlock_status()["abi"]:
        pytest.skip("no Landlock on this kernel")
    code = ("import os, sys, tempfile; from xc_core.worker import _landlock, landlock_status;"
            "from xc_core.peak_memory import keep_reset_open, reset_peak;"
            "keep_reset_open(); _landlock((tempfile.mkdtemp(),), landlock_status()['abi']);"
            "print(reset_peak());\n"
            "try:\n    open('/proc/self/clear_refs', 'w'); print('opened')\n"
            "except PermissionError:\n    print('refused')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "refused"]


def test_steady_runs_stop_at_the_count_or_the_budget():
    calls = []
    assert len(steady_runs(lambda: calls.append(1))) == STEADY_RUNS
    assert len(calls) == STEADY_RUNS + 1            # one warm-up
    assert steady_runs(lambda: __import__("time").sleep(0.02), budget_s=0.01) == []


# ---- real runtimes on a tiny model ----------------------------------------------------------------------------
@pytest.mark.parametrize("tid", RUNS_HERE)
def test_every_figure_of_a_runtime_that_runs_here(results, tid):
    r, workdir = results[tid]
    assert r.status == OK, r.error
    c = r.cost
    assert c["evidence"] == "measured" and "Linux" in c["host"]
    assert c["memory_method"].startswith("the kernel's peak") and "child processes" in c["memory_method"]
    assert c["compile_s"] is not None and c["compile_peak_rss_mb"] > 0
    assert c["peak_rss_mb"] > 0 and c["run_rss_growth_mb"] >= 0
    assert c["first_inference_s"] is not None and c["steady_inference_ms"] is not None
    assert 1 <= c["steady_runs"] <= max(STEADY_RUNS, Limits().profile_runs)
    assert c["steady_spread_ms"]["n"] == c["steady_runs"]
    for f in c["artifact_files"]:
        assert f["bytes"] == os.path.getsize(os.path.join(workdir, f["path"]))
    assert c["artifact_bytes"] == sum(f["bytes"] for f in c["artifact_files"])
    assert PARAM_BYTES <= c["weights_bytes"] <= c["artifact_bytes"]
    assert c["weights_bytes"] < 2 * PARAM_BYTES
    for figure in ("peak_rss_mb", "first_inference_s", "steady_inference_ms", "artifact_bytes", "weights_bytes"):
        assert figure not in c["not_measured"]
    # where a figure is missing, the block says why; where load is inside another phase, it says which
    if "load_s" in c["not_measured"]:
        assert "inside compile_s" in c["not_measured"]["load_s"]
    else:
        assert c["load_s"] is not None
    if not c["runtime_memory"]:
        assert c["not_measured"]["runtime_memory"]


def test_the_pte_memory_plan_is_what_executorchs_deserializer_reads(results):
    from executorch.exir._serialize._program import deserialize_pte_binary
    r, workdir = results["executorch-xnnpack"]
    with open(os.path.join(workdir, "model.pte"), "rb") as f:
        plan = deserialize_pte_binary(f.read()).program.execution_plan[0]
    planned = [m for m in r.cost["runtime_memory"] if m["name"].startswith("memory-planned")]
    assert [m["bytes"] for m in planned] == [int(n) for n in plan.non_const_buffer_sizes[1:]]
    assert all(m["evidence"] == "reported" and "ExecuTorch" in m["by"] for m in planned)


def test_the_shipped_artifact_only(results):
    """ORT's optimized model, OpenVINO's loadable IR (not the runtime-model diagram), the one .pte and .tflite."""
    names = {tid: sorted(f["path"] for f in results[tid][0].cost["artifact_files"]) for tid in RUNS_HERE}
    assert names == {"ort-cpu": ["model.optimized.onnx"], "openvino-cpu": ["model.bin", "model.xml"],
                     "executorch-xnnpack": ["model.pte"], "litert-xnnpack": ["model.tflite"]}


def test_a_target_this_host_cannot_run_has_size_and_compile_and_says_why_not_the_rest(tiny, tmp_path):
    pytest.importorskip("coremltools")
    cap, feeds = tiny
    r = execute_target(make_target("coreml-cpu"), cap, feeds, str(tmp_path))
    assert r.status == OK, r.error
    c = r.cost
    assert c["compile_s"] is not None and c["artifact_bytes"] > 0
    assert c["artifact_files"] and not any(f["path"].endswith(".zip") for f in c["artifact_files"])
    for figure in ("peak_rss_mb", "first_inference_s", "steady_inference_ms", "load_s"):
        assert c.get(figure) is None
        assert "emulated" in c["not_measured"][figure]


def test_no_timed_runs_when_the_run_asks_for_none(tiny, tmp_path):
    cap, feeds = tiny
    target = make_target("ort-cpu")
    target.limits = Limits(profile_runs=0)          # what culprit search sets
    c = execute_target(target, cap, feeds, str(tmp_path)).cost
    assert c.get("steady_inference_ms") is None and c.get("load_s") is None
    assert "--profile-runs 0" in c["not_measured"]["steady_inference_ms"]
    assert c["artifact_bytes"] > 0 and c["peak_rss_mb"] > 0


# ---- the block and what shows it --------------------------------------------------------------------------------
def _report(results):
    return {"targets": {tid: {"id": tid, "identity": tid, "status": "ok", "cost": cost_block(r)}
                        for tid, (r, _) in results.items()}}


def test_the_block_validates_against_the_schema(results):
    import json

    import jsonschema
    with open(os.path.join(ROOT, "xc_core", "report", "report.schema.json")) as f:
        schema = json.load(f)
    sub = {"$defs": schema["$defs"], **schema["$defs"]["target"]["properties"]["cost"]}
    for r, _ in results.values():
        jsonschema.validate(cost_block(r), sub)


def test_the_cost_table_rows_and_lines(results):
    from xc_core.review.cost_section import html_section, markdown_section
    from xc_core.views.cost import cost_rows, cost_text, runtime_memory_rows
    report = _report(results)
    rows = {r["target"]: r for r in cost_rows(report)}
    assert list(rows) == list(RUNS_HERE)
    assert all(r["evidence"] == "measured" and r["peak memory MB"] != "—" for r in rows.values())
    assert rows["openvino-cpu"]["load ms"] == "—" and "inside compile_s" in rows["openvino-cpu"]["not measured"]
    kb = results["ort-cpu"][0].cost["artifact_bytes"] / 1024
    assert rows["ort-cpu"]["size KB (weights)"].startswith(f"{kb:,.1f} (")
    assert [m["target"] for m in runtime_memory_rows(report)] == ["executorch-xnnpack"]
    text = cost_text(report)
    assert "not the device's" in text and all(tid in text for tid in RUNS_HERE)
    md = markdown_section(report)
    assert md.startswith("#### Cost on this host (measured: ") and "not the phone's" in md
    html = html_section(report, lambda s: str(s), lambda k: f"[{k}]", lambda rows: f"<table>{len(rows)}</table>")
    assert "<h3>Cost on this host [measured]</h3>" in html and "<table>4</table>" in html


def test_a_report_without_cost_blocks_shows_no_section():
    from xc_core.review.cost_section import markdown_section
    from xc_core.views.cost import cost_rows, cost_text
    report = {"targets": {"ort-cpu": {"id": "ort-cpu", "identity": "ort-cpu", "status": "ok"}}}
    assert cost_rows(report) == [] and cost_text(report) == "" and markdown_section(report) == ""


def test_core_ai_on_this_cpu_is_loaded_and_timed_apart(tiny, tmp_path):
    """Core AI's runtime is async: the model is loaded and its function run on one event loop of its own."""
    cap, feeds = tiny
    r = execute_target(make_target("coreai-cpu"), cap, feeds, str(tmp_path))
    assert r.status == OK, r.error
    c = r.cost
    assert c["load_s"] is not None and c["first_inference_s"] is not None and c["steady_runs"] >= 1
    assert not {"load_s", "first_inference_s", "steady_inference_ms"} & set(c["not_measured"])
    assert any("AIModel.load" in n for n in c["notes"])


def test_a_dataset_run_adds_no_artifact_and_ort_coreml_ships_only_its_partitioned_model(tiny, tmp_path):
    """ort-coreml's fp16 emulation is xc's, not what ships; running dataset samples after the analysis adds no file
    to the size (each sample once listed the emulation model again: 360 copies on digits-mini)."""
    import numpy as np
    cap, feeds = tiny
    samples = {"x": np.stack([feeds["x"]] * 4)}
    r = execute_target(make_target("ort-coreml"), cap, feeds, str(tmp_path), dataset=samples)
    assert r.status == OK, r.error
    assert r.dataset_run["samples_run"] == 4
    assert [f["path"] for f in r.cost["artifact_files"]] == ["model.basic.onnx"]
    assert len(r.artifacts) == len(set(r.artifacts))
