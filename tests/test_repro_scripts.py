"""The repro bundle's run_repro.py per target (xc_core/culprit/repro_scripts.py), run the way a toolchain's
maintainers would: in a fresh interpreter, from another folder, with xc unimportable. Its rel L2 against the fp32
reference must be xc's own figure for the same sub-model on the same target."""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from xc_core.culprit.isolate import quiet_target, run_region
from xc_core.culprit.metrics import compare
from xc_core.culprit.regions import compute_ops, export_region, reference_values, region_program, to_numpy
from xc_core.culprit.repro_scripts import (
    bug_report,
    no_script_reason,
    project_issues_url,
    script_for,
    toolchain_versions,
    tracker_for,
)
from xc_core.errors import XcInputError
from xc_core.targets import REGISTRY

HOSTILE = "__import__('os').system('touch PWNED')"

# Runs the script as `python run_repro.py` would, with every import of xc refused: the script must not need it
# (xc is installed in this venv in editable mode, so -I alone would still find it).
_WITHOUT_XC = """
import runpy, sys
class RefuseXc:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('xc_core', 'xc'):
            raise ImportError('xc is not available to a repro script')
sys.meta_path.insert(0, RefuseXc())
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name='__main__')
"""


class LinearRelu(torch.nn.Module):
    """Two outputs, float arithmetic every target computes close to fp32."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2.0, torch.tanh(x[:, :4])


class Exp(torch.nn.Module):
    """exp of values near 20: about 5e8, past float16's 65,504."""

    def forward(self, x):
        return torch.exp(x) + 1.0


def make_bundle(folder, target_id: str, module, example, options=None):
    """A repro bundle as culprit/repro.py writes one, of the whole `module` as the sub-program, compiled and run
    by `target_id` through xc's own path (run_region). Returns xc's rel L2 per output (None: non-finite)."""
    torch.manual_seed(0)
    ep = torch.export.export(module.eval(), example, strict=False)
    values = reference_values(ep, list(example))
    region = region_program(ep, compute_ops(ep.graph_module), values, cut_every_edge=False)
    target = quiet_target(REGISTRY[target_id](**(options or {})))
    work = os.path.join(folder, "work")
    got, result, captured = run_region(target, region, values, work)
    bundle = os.path.join(folder, "repro")
    os.makedirs(bundle)
    torch.export.save(export_region(region, values), os.path.join(bundle, "model.pt2"))
    out_names = [f"out_{i}" for i in range(len(region.outputs))]
    expected = {k: to_numpy(values[v]) for k, v in zip(out_names, region.outputs)}
    observed = {k: got[v] for k, v in zip(out_names, region.outputs) if v in got}
    np.savez(os.path.join(bundle, "inputs.npz"), **region.feeds(values))
    np.savez(os.path.join(bundle, "expected.npz"), **expected)
    np.savez(os.path.join(bundle, "observed.npz"), **observed)
    onnx_outputs = None
    if captured.onnx_path:
        import onnx
        shutil.copyfile(captured.onnx_path, os.path.join(bundle, "model.onnx"))
        onnx_outputs = [o.name for o in onnx.load(captured.onnx_path).graph.output]
    shutil.copytree(os.path.join(work, "target"), os.path.join(bundle, "compiled"))
    io = {"target": target_id, "identity": target.identity, "options": dict(target.options),
          "inputs": region.input_names, "outputs": out_names, "onnx_outputs": onnx_outputs,
          "ops": [HOSTILE, *region.ops], "op_types": [HOSTILE]}
    with open(os.path.join(bundle, "io.json"), "w") as f:
        json.dump(io, f)
    script = script_for(target_id, dict(target.options))
    with open(os.path.join(bundle, "run_repro.py"), "w") as f:
        f.write(script)
    figures = [compare(expected[k], observed[k].reshape(expected[k].shape)) for k in out_names]
    return bundle, script, [None if f["non_finite"] else f["rel_l2"] for f in figures]


def run_script(bundle: str, cwd: str) -> str:
    """run_repro.py in a fresh, isolated interpreter started in another folder; its stdout."""
    os.makedirs(os.path.join(cwd, "tmp"), exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    # What a toolchain writes to the temp dir stays in the test's folder; Inductor reuses the kernels xc's run just
    # built (its cache slot) and precompiles no headers (150 MB, tens of seconds, for a kernel or two).
    env["TMPDIR"] = os.path.join(cwd, "tmp")
    env["TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"] = "0"
    from xc_core.targets import inductor_cpu
    if inductor_cpu._HELD_SLOT:
        env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cpu._HELD_SLOT[0]
    done = subprocess.run([sys.executable, "-I", "-c", _WITHOUT_XC, os.path.join(bundle, "run_repro.py")],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not os.path.exists(os.path.join(cwd, "PWNED"))
    return done.stdout


def printed_rel_l2(stdout: str) -> list:
    """The script's rel L2 vs expected per output: a float, or None for non-finite."""
    found = re.findall(r"^out_(\d+): rel L2 vs expected (\S+)", stdout, flags=re.M)
    assert found, stdout
    return [None if text == "non-finite" else float(text) for _, text in found]


def check_same_figures(stdout: str, xc_figures: list) -> None:
    printed = printed_rel_l2(stdout)
    assert len(printed) == len(xc_figures), stdout
    for mine, xc in zip(printed, xc_figures):
        if xc is None or mine is None:
            assert mine is None and xc is None, (stdout, xc_figures)
        elif not (mine < 1e-6 and xc < 1e-6):
            assert abs(mine - xc) <= 0.1 * xc, (stdout, xc_figures)
    assert re.search(r"^summary: .* (\d+) of \1 match what xc observed", stdout, flags=re.M), stdout


def repro_case(tmp_path, target_id, module, example, options=None):
    bundle, script, xc_figures = make_bundle(str(tmp_path), target_id, module, example, options)
    assert "xc_core" not in script and "import xc" not in script
    assert HOSTILE not in script
    stdout = run_script(bundle, str(tmp_path / "elsewhere"))
    check_same_figures(stdout, xc_figures)
    return stdout, xc_figures


def test_ort_cpu_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "ort-cpu", LinearRelu(), (torch.randn(2, 8),))


def test_ort_cpu_level_option_picks_the_session_level():
    assert "GraphOptimizationLevel.ORT_ENABLE_BASIC" in script_for("ort-cpu", {"level": "basic"})
    assert "GraphOptimizationLevel.ORT_ENABLE_ALL" in script_for("ort-cpu", {})
    assert "GraphOptimizationLevel.ORT_ENABLE_EXTENDED" in script_for("ort-cpu[level=extended]", {})


def test_ort_cpu_int8_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "ort-cpu-int8", LinearRelu(), (torch.randn(2, 8),))


def test_ort_coreml_repro_runs_xc_fp16_emulation(tmp_path):
    stdout, _ = repro_case(tmp_path, "ort-coreml", Exp(), (torch.randn(2, 4) + 20.0,))
    assert "non-finite" in stdout


def test_openvino_cpu_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "openvino-cpu", LinearRelu(), (torch.randn(2, 8),), {"inference_precision": "f32"})


@pytest.mark.slow
def test_inductor_cpu_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "inductor-cpu", LinearRelu(), (torch.randn(2, 8),))


@pytest.mark.slow
def test_executorch_xnnpack_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "executorch-xnnpack", LinearRelu(), (torch.randn(2, 8),))


@pytest.mark.slow
def test_litert_xnnpack_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "litert-xnnpack", LinearRelu(), (torch.randn(2, 8),))


def test_coreai_ane_repro_reports_non_finite_like_xc(tmp_path):
    stdout, xc_figures = repro_case(tmp_path, "coreai-ane", Exp(), (torch.randn(2, 4) + 20.0,))
    assert xc_figures == [None]
    assert "out_0: rel L2 vs expected non-finite" in stdout
    assert "summary: 1 output(s), 1 non-finite" in stdout


def test_coreai_cpu_repro_matches_xc(tmp_path):
    repro_case(tmp_path, "coreai-cpu", LinearRelu(), (torch.randn(2, 8),))


@pytest.mark.slow
def test_coreml_repro_converts_and_says_prediction_needs_macos(tmp_path):
    bundle, script, _ = make_bundle(str(tmp_path), "coreml-ane", LinearRelu(), (torch.randn(2, 8),))
    assert "compute_precision=ct.precision.FLOAT16" in script
    stdout = run_script(bundle, str(tmp_path / "elsewhere"))
    if sys.platform != "darwin":
        assert "Core ML prediction needs macOS" in stdout
    else:
        printed_rel_l2(stdout)


def test_model_controlled_names_never_reach_the_script_and_are_escaped_in_the_report():
    for target_id in ("ort-cpu", "openvino-cpu", "inductor-cpu", "executorch-xnnpack", "litert-xnnpack",
                      "coreai-ane", "coreml-cpu", "executorch-coreml", "ort-nnapi", "ort-cpu-int8"):
        script = script_for(target_id, {})
        assert HOSTILE not in script and "__import__" not in script and "xc_core" not in script
        compile(script, "run_repro.py", "exec")      # valid Python as written
    io = {"target": "coreai-ane", "options": {}, "inputs": ["in_0"], "outputs": ["out_0"], "onnx_outputs": None,
          "ops": [HOSTILE, "[x](https://evil.example) @team #12"], "op_types": [HOSTILE]}
    report = bug_report(io, {"local": {"rel_l2": None, "max_abs": None, "non_finite": True},
                             "window": {"rel_l2": 0.5, "non_finite": False}, "explained": 1.0},
                        toolchain_versions("coreai-ane"), tracker_for("coreai-ane"),
                        f"coreai-ane: the exp at {HOSTILE} (1 op) accounts for 100 % of the output drift\n# heading")
    assert HOSTILE not in report and "__import__" not in report
    assert r"\_\_import\_\_" in report
    assert "[x](https" not in report and "@team" not in report and "#12" not in report
    assert "\n# heading" not in report
    assert "| the culprit ops alone on the target (their inputs from the reference) | non-finite |" in report
    assert "<https://github.com/apple/coreai-torch/issues>" in report
    assert "python run_repro.py" in report and "pip install coreai-core==" in report
    assert r"| coreai\-core | " in report and "| python | " in report


def test_targets_without_a_standalone_run_say_why():
    for target_id in ("litert-gpu", "executorch-ethos-u55", "executorch-ethos-u85", "executorch-vulkan"):
        assert script_for(target_id, {}) is None
        reason = no_script_reason(target_id)
        assert reason and "\n" not in reason
    assert no_script_reason("ort-cpu") is None
    report = bug_report({"target": "litert-gpu", "ops": ["add"]}, {}, {}, tracker_for("litert-gpu"), "")
    assert "No standalone script: LiteRT" in report and "python run_repro.py" not in report


def test_trackers_are_the_toolchains_own():
    assert tracker_for("ort-cpu[level=basic]")[1] == "https://github.com/microsoft/onnxruntime/issues"
    assert "oncall: pt2" in tracker_for("inductor-cpu")[0]
    # Core AI's tracker is the one coreai-torch's wheel names
    assert tracker_for("coreai-cpu")[1] == project_issues_url("coreai-torch")
    assert tracker_for("executorch-xnnpack")[1] == project_issues_url("executorch")
    with pytest.raises(XcInputError, match="no bug tracker known"):
        tracker_for("no-such-target")


def test_bad_target_or_option_is_one_clear_line():
    with pytest.raises(XcInputError, match="unknown target 'nope'"):
        script_for("nope", {})
    with pytest.raises(XcInputError) as e:
        script_for("ort-cpu", {"level": "fastest"})
    assert "\n" not in str(e.value) and "basic" in str(e.value)


def test_versions_name_the_toolchain_python_and_platform():
    v = toolchain_versions("executorch-xnnpack")
    assert v["executorch"] and v["torch"] and v["python"] and v["platform"]
    assert "onnxruntime" not in v
