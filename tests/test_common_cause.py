"""One cause, told once: failures of several targets whose cause lies in the model or in what xc fed it are one
finding (cause, whose, fix, the targets it stopped) in the report, the CLI, the Markdown and the HTML report — not
one toolchain blamed per target; a failed target never gets a verdict line about its fallbacks as if it had run;
the route's refusals are the route's; a pass named without its reason keeps the reason."""
import json
import traceback

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xc_core.analysis.advice import XC, advise
from xc_core.analysis.common_cause import INPUTS, NOT_RUN, ROUTE, SOURCE, about_inputs, causes, common_causes
from xc_core.errors import kept_cause, litert_said

# ONNX Runtime's own words when an index is out of range: the model's fault, whatever the inputs.
GATHER_ERROR = "indices element out of data bounds"


def _gather_past_the_end(path):
    """x[1, 4] + 1, then Gather at index 7 on axis 1: valid ONNX that no runtime can run (the reference neither)."""
    nodes = [helper.make_node("Add", ["x", "one"], ["a"], name="add"),
             helper.make_node("Gather", ["a", "idx"], ["y"], axis=1, name="pick")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
                          initializer=[numpy_helper.from_array(np.array([7], dtype=np.int64), "idx"),
                                       numpy_helper.from_array(np.ones((1, 4), dtype=np.float32), "one")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))


@pytest.fixture(scope="module")
def failed_reference(tmp_path_factory):
    """One CLI analysis of the model above on two targets: (report, CLI output, Markdown, HTML)."""
    from xc_core.cli import main
    folder = tmp_path_factory.mktemp("common-cause")
    _gather_past_the_end(folder / "gather.onnx")
    out = folder / "out"
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["analyze", str(folder / "gather.onnx"), "--targets", "ort-cpu,ort-nnapi", "--out", str(out),
                     "--md", str(folder / "report.md"), "--html", str(folder / "report.html"), "--no-store"])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    return report, buf.getvalue(), (folder / "report.md").read_text(), (folder / "report.html").read_text(), str(out)


def test_a_failed_reference_is_one_cause_in_the_report(failed_reference):
    from xc_core.report.schema import report_problem
    report, *_ = failed_reference
    assert report["reference"]["status"] == "error" and GATHER_ERROR in report["reference"]["error"]
    assert all(t["status"] == "error" for t in report["targets"].values())
    assert report_problem(report) is None                       # the field is in the schema
    [cause] = report["common_causes"]
    assert cause["reference_failed"] and cause["owner"] == SOURCE and cause["node"] == "pick"
    assert GATHER_ERROR in cause["cause"] and not cause["cause"].startswith("run failed")
    assert sorted(cause["targets"]) == ["ort-cpu", "ort-nnapi"] and cause["evidence"] == "measured"
    # Not about the inputs: the fix does not send the user to the input flags.
    assert "--shape" not in cause["fix"] and "fix the model" in cause["fix"]


def test_the_cli_says_the_cause_once_and_the_targets_not_run(failed_reference):
    _, out, *_ = failed_reference
    assert out.count(GATHER_ERROR) == 1, out
    assert "ort-cpu: not run: see above" in out and "ort-nnapi: not run: see above" in out
    assert "whose: the model" in out and "ONNX Runtime" not in out.split("whose:", 1)[1].split("\n", 1)[0]
    # The reference's failure is not about the inputs: no advice to set them.
    assert "--shape" not in out and "--inputs" not in out


def test_the_markdown_and_html_say_the_cause_once(failed_reference):
    report, _, md, html, _ = failed_reference
    assert md.count(GATHER_ERROR) == 1, md
    assert md.count(NOT_RUN) == 2 and "#### Errors" not in md
    assert html.count(GATHER_ERROR) == 1 and html.count(NOT_RUN) == 2


def test_the_overview_shows_one_error_block_naming_cause_and_fix(failed_reference):
    import os

    from streamlit.testing.v1 import AppTest

    from xc_core.store import RunStore
    report, *_, out = failed_reference
    key = "c0ffee00" * 4
    RunStore().put(key, {**report, "run": {**report.get("run", {}), "key": key}}, out, origin="cli")
    at = AppTest.from_file(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "app.py"),
                           default_timeout=300)
    at.query_params["run"] = key[:12]
    at.run()
    at.switch_page("pages/overview.py").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert sum(GATHER_ERROR in e for e in errors) == 1, errors
    [block] = [e for e in errors if GATHER_ERROR in e]
    assert "The reference failed" in block and "whose: the model" in block and "what to do:" in block
    lines = " ".join(m.value for m in at.markdown)
    assert lines.count(NOT_RUN) == 2 and "fall back" not in lines


def test_a_failed_targets_verdict_line_is_its_error_never_its_fallbacks(failed_reference):
    from xc_core.views.rows import target_summary_rows, verdict_line
    report, *_ = failed_reference
    nnapi = report["targets"]["ort-nnapi"]
    assert nnapi.get("graph") and nnapi["error_stage"] == "run"     # it compiled, its graph was read, its run failed
    assert verdict_line(report, "ort-nnapi") == NOT_RUN
    # Without a common cause (a report in which it failed alone), its line is its error — not "0 ops fall back".
    alone = {**report, "common_causes": []}
    line = verdict_line(alone, "ort-nnapi")
    assert line.startswith("error: run failed") and GATHER_ERROR[:20] in line
    assert "fall" not in line and "outputs" not in line
    rows = {r["target"]: r for r in target_summary_rows(alone)}
    assert rows["ort-nnapi (error)"]["checklist"] == "failed: its error is below"


def test_an_older_report_without_the_field_computes_it(failed_reference):
    report, *_ = failed_reference
    old = {k: v for k, v in report.items() if k != "common_causes"}
    assert causes(old) == report["common_causes"]


def test_the_same_message_on_two_toolchains_is_one_cause_one_toolchain_is_not():
    def target(error):
        return {"status": "error", "error": error, "error_detail": None}
    shape_error = "Expected input at *args[0].shape[1] to be equal to 16, but got 24"
    report = {"reference": {"status": "ok"}, "inputs": {"origin": "seeded-random"},
              "targets": {"coreml-cpu": target(f"compile failed: {shape_error}"),
                          "inductor-cpu": target(f"run failed: {shape_error}"),
                          "ort-cpu": target("run failed: NOT_IMPLEMENTED : Could not find an implementation for "
                                            "IsNaN(20) node with name 'n'"),
                          "ort-nnapi": target("run failed: NOT_IMPLEMENTED : Could not find an implementation for "
                                              "IsNaN(20) node with name 'n'"),
                          "openvino-cpu": {"status": "ok", "error": None}}}
    [cause] = common_causes(report)
    assert cause["targets"] == ["coreml-cpu", "inductor-cpu"] and cause["owner"] == INPUTS
    assert not cause["reference_failed"] and "--shape" in cause["fix"]


ROUTE_REFUSALS = [
    'no PyTorch program from the ONNX: onnx2torch cannot convert the graph: "SAME_UPPER" auto_pad is not implemented',
    "no PyTorch program from the ONNX: onnx2torch could not convert the graph: ceil_mode is not implemented",
    "no PyTorch program from the ONNX: Gather 'pick' (domain ai.onnx) failed in PyTorch at the analysis shapes: "
    "IndexError: index 7 is out of bounds",
    "no PyTorch program from the ONNX: torch.export could not capture the traced program: x",
    "capture failed: no PyTorch program from the ONNX: the ONNX → PyTorch route did not run for this analysis",
]


@pytest.mark.parametrize("error", ROUTE_REFUSALS)
def test_the_routes_refusals_are_the_routes_with_what_to_do(error):
    for tid in ("coreml-cpu", "inductor-cpu", "executorch-xnnpack", "coreai-cpu", "litert-xnnpack"):
        a = advise(tid, error)
        assert a["owner"] == XC and a["who"] == "xc's ONNX → PyTorch route", (tid, a)
        assert "ONNX targets" in a["workaround"]
    if "auto_pad" in error:
        assert "explicit pads" in advise("coreml-cpu", error)["workaround"]


def test_a_refusal_on_the_routed_targets_is_one_cause_owned_by_the_route():
    error = ROUTE_REFUSALS[0]
    report = {"reference": {"status": "ok"}, "targets": {
        tid: {"status": "error", "error": error} for tid in ("coreml-cpu", "inductor-cpu", "executorch-xnnpack")}}
    [cause] = common_causes(report)
    assert cause["owner"] == ROUTE and len(cause["targets"]) == 3 and "explicit pads" in cause["fix"]


def test_a_pass_named_without_its_reason_keeps_the_reason():
    import torch
    from torch.fx.passes.infra.pass_manager import PassManager

    def FuseBatchNormPass(gm):          # a pass that fails the way ExecuTorch's did on a T5 encoder
        raise RuntimeError("fake mode mismatch: the tensor was made under another FakeTensorMode")
    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    try:
        PassManager([FuseBatchNormPass])(gm)
    except Exception as e:  # noqa: BLE001 — the PassManager's own exception, as a target records it
        error, detail, tb = f"compile failed: {e}", str(e), traceback.format_exc(limit=6)
    assert "after the following passes" in error and "mismatch" not in error
    kept = kept_cause(error, detail, tb)
    assert kept.startswith(error) and kept.endswith("RuntimeError: fake mode mismatch: the tensor was made under "
                                                    "another FakeTensorMode")
    assert kept_cause("run failed: something else", detail, tb) == "run failed: something else"


def test_litert_location_lines_keep_the_line_that_says_what_failed():
    log = ("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"
           "ERROR: [./litert/cc/litert_compiled_model.h:1961]\nFailed to modify graph with delegate\n"
           "ERROR: Encountered unresolved custom op: Convolution2DTransposeBias.\n")
    assert litert_said(log) == [
        "ERROR: [./litert/cc/litert_compiled_model.h:1961] Failed to modify graph with delegate",
        "ERROR: Encountered unresolved custom op: Convolution2DTransposeBias."]


def test_set_the_inputs_only_when_the_failure_is_about_them():
    from xc_core.cli import inputs_table
    assert about_inputs("run failed: Expected input at *args[0].shape[1] to be equal to 16, but got 24")
    assert about_inputs("run failed: The size of tensor a (24) must match the size of tensor b (16) at non-singleton "
                        "dimension 1")
    assert not about_inputs("run failed: Encountered unresolved custom op: Convolution2DTransposeBias")
    assert not about_inputs(f"run failed: InvalidArgument: Gather node 'pick': {GATHER_ERROR}, idx=7")
    report = {"source": {"inputs": []}, "inputs": {}, "targets": {},
              "reference": {"status": "error",
                            "error": "run failed: Encountered unresolved custom op: Convolution2DTransposeBias"}}
    assert "--shape" not in inputs_table(report)
    report["reference"]["error"] = "run failed: Expected input at *args[0].shape[1] to be equal to 16, but got 24"
    assert "--shape" in inputs_table(report)


def _reference_failing(error: str, shape_from: str) -> dict:
    return {"reference": {"id": "torch", "status": "error", "error": error},
            "inputs": {"origin": "seeded-random", "resolution": {"inputs": {"tokens": {"shape_from": shape_from}}}},
            "targets": {"coreml-cpu": {"status": "error", "error": "compile failed: Placeholder val must be a tensor"},
                        "inductor-cpu": {"status": "error", "error": "exceeded 300 s in run"},
                        "ort-cpu": {"status": "ok"}}}


@pytest.mark.parametrize("error,shape_from,owner,set_inputs", [
    # a dim xc picked does not fit: the inputs are xc's to set
    ("run failed: The size of tensor a (24) must match the size of tensor b (16) at non-singleton dimension 1",
     "default", INPUTS, True),
    # the same with a shape the model declares whole: the model's
    ("run failed: The size of tensor a (24) must match the size of tensor b (16) at non-singleton dimension 1",
     "declared", SOURCE, False),
    # an argument xc did not feed: xc's, whatever the shapes
    ("run failed: forward() missing 1 required keyword argument: 'use_cache'", "declared", INPUTS, True),
    # a model that does not load: no input was fed yet
    ("compile failed: Load model from model.onnx failed: [ShapeInferenceError] Can't merge shape info", "default",
     SOURCE, False),
])
def test_whose_a_failed_reference_is(error, shape_from, owner, set_inputs):
    from xc_core.analysis.common_cause import set_inputs_advised
    report = _reference_failing(error, shape_from)
    [cause] = common_causes(report)
    assert (cause["owner"], cause["set_inputs"], set_inputs_advised(report)) == (owner, set_inputs, set_inputs)
    assert ("--shape" in cause["fix"]) == set_inputs
    # every failure follows from the reference's, except a limit of this run, said on its own
    assert cause["targets"] == ["coreml-cpu"]
