"""Comparisons that can tell (issue 50, item 5): a reference output that is constant, all zeros or not finite makes
every target's agreement with it say nothing — "drift is not informative", never a perfect match — and a target
figure no precision choice can produce (NaN, or rel L2 > 1 with the output's scale off by orders of magnitude) is
"implausible", with the check that failed, on every surface: the report, checklist question 4, the CLI table,
Markdown, HTML, the Overview and Drift pages, `xc diff` and the gate."""
import copy
import os

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from xc_core.analysis.checklist import checklist
from xc_core.analysis.drift import implausible, reference_check
from xc_core.api import analyze
from xc_core.cli import summary_table
from xc_core.pipeline.assemble import target_block
from xc_core.review.diff import diff_reports, diff_text
from xc_core.review.gate import GateRules, regressions
from xc_core.review.html import report_html
from xc_core.review.markdown import report_markdown
from xc_core.targets import TargetResult
from xc_core.views.rows import drift_flags, drift_output_rows, overview_rows, verdict_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the checks, on arrays ------------------------------------------------------------------------------------
def test_reference_check_names_what_cannot_tell_targets_apart():
    rng = np.random.default_rng(0)
    assert reference_check(np.zeros((2, 4), np.float32)) == "the reference output is all zeros"
    assert reference_check(np.full((3, 3), 0.5, np.float32)) == "the reference output is constant (every element 0.5)"
    assert reference_check(np.ones((2, 2), bool)).startswith("the reference output is constant")
    nearly = np.full(100, 3.0) + rng.standard_normal(100) * 1e-9
    assert reference_check(nearly).startswith("the reference output is nearly constant")
    some_nan = rng.standard_normal(10)
    some_nan[3] = np.nan
    assert reference_check(some_nan) == "the reference output has 1 non-finite element(s) of 10"
    assert reference_check(np.full(4, np.inf)).startswith("the reference output is not finite")
    # What can tell: varied values, a sparse ReLU output, and a scalar (one number by design, not "constant").
    assert reference_check(rng.standard_normal((2, 8))) is None
    assert reference_check(np.maximum(rng.standard_normal(1000), 2.5)) is None
    assert reference_check(np.array([0.0] * 999 + [1.0])) is None
    assert reference_check(np.array(3.0)) is None
    assert reference_check(np.array([7], np.int64)) is None


def test_implausible_names_the_check_that_failed():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((4, 8)).astype(np.float32)
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert "check: finite output" in implausible(ref, nan, {"rel_l2": None})
    huge = ref * 1.9e30
    why = implausible(ref, huge, {"rel_l2": 1.9e30})
    assert "check: rel L2 > 1 and scale within 1000×" in why and "1.9e+30× the reference's" in why
    assert "check" in implausible(ref, ref * 1e-6, {"rel_l2": 1.0000001})     # collapsed to nearly nothing
    # A wrong answer at the right scale is a real mismatch, not an impossible figure: drift says it as it is.
    assert implausible(ref, -ref, {"rel_l2": 2.0}) is None
    assert implausible(ref, ref + 1e-3, {"rel_l2": 1e-3}) is None
    assert implausible(np.full(4, np.nan), np.zeros(4), {"rel_l2": None}) is None     # the reference's problem


# ---- a model whose output is all zeros, analysed -------------------------------------------------------------
class _Zeros(torch.nn.Module):
    """What a transformers build gone wrong looks like from the outside: the right shapes, every value 0."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 0.0


class _Varied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.tanh(self.fc(x))


def _analysed(tmp_path_factory, model, name):
    folder = tmp_path_factory.mktemp(name)
    path = str(folder / f"{name}.onnx")
    torch.onnx.export(model.eval(), (torch.randn(2, 8),), path, dynamo=True)
    return analyze(path, ["ort-cpu", "openvino-cpu"], isolate=False)


@pytest.fixture(scope="module")
def zeros(tmp_path_factory):
    return _analysed(tmp_path_factory, _Zeros(), "zeros")


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    return _analysed(tmp_path_factory, _Varied(), "varied")


def test_an_all_zero_reference_is_not_informative_in_the_report_and_the_checklist(zeros):
    (name, out), = zeros["reference"]["outputs"].items()
    assert out["not_informative"] == "the reference output is all zeros"
    for tid in ("ort-cpu", "openvino-cpu"):
        t = zeros["targets"][tid]
        assert t["status"] == "ok", t["error"]
        d = t["drift"]
        # Every target agrees exactly — the figure that used to read as a perfect match.
        assert d["outputs"][name]["rel_l2"] == 0 and d["outputs"][name]["cosine"] == 1.0
        assert d["informative"] is False and d["not_informative"] == {name: "the reference output is all zeros"}
        assert d["worst"]["not_informative"] == "the reference output is all zeros"
        q4 = zeros["checklist"]["targets"][tid][3]
        # warn, not pass (it proves nothing) and not fail (nothing shows the compiler wrong either)
        assert q4["verdict"] == "warn" and q4["evidence"] == t["evidence"]["numerics"]
        assert q4["detail"].startswith("drift is not informative: the reference output is all zeros")


def test_an_all_zero_reference_is_not_informative_on_every_surface(zeros):
    flags = drift_flags(zeros)
    assert len(flags) == 1 and flags[0].startswith("Drift is not informative: the reference output is all zeros")
    for row in overview_rows(zeros):
        assert row["worst drift (rel L2)"].startswith("not informative (")
        assert "reference all zeros" in row["worst drift (rel L2)"]
    assert drift_output_rows(zeros["targets"]["ort-cpu"])[0]["check"].startswith("not informative: ")
    assert "drift not informative: reference all zeros" in verdict_line(zeros, "ort-cpu")
    # The CLI says it before the table; Markdown and HTML before any target's figure.
    table = summary_table(zeros).splitlines()
    assert table[0].startswith("warning: Drift is not informative") and table[1].startswith("target ")
    md = report_markdown(zeros)
    assert "⚠️ Drift is not informative: the reference output is all zeros" in md
    assert md.index("Drift is not informative") < md.index("- **ort-cpu**")
    assert "(not informative)" in md                                 # question 4's evidence table
    html = report_html(zeros)
    assert html.index("Drift is not informative") < html.index("<h3>Targets</h3>")
    assert "warn</span> not informative" in html                      # the drift table's pass column


@pytest.mark.parametrize("page", ["overview", "drift"])
def test_the_overview_and_drift_pages_say_it_first(zeros, page):
    at = AppTest.from_file(os.path.join(ROOT, "pages", f"{page}.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    at.session_state["report"] = zeros
    at.run()
    assert not at.exception, at.exception
    assert at.warning and "Drift is not informative: the reference output is all zeros" in at.warning[0].value
    if page == "drift":
        table = at.dataframe[0].value
        assert set(table["pass"]) == {"pass — not informative"} and set(table["against"]) == {"onnx-reference"}


# ---- an implausible figure, on a real report ------------------------------------------------------------------
def _with_target_outputs(report: dict, tid: str, scale: float, nan: bool = False) -> dict:
    """`report` with `tid`'s outputs replaced by the reference's × `scale` (and a NaN), its drift and checklist
    made again as the report builder makes them."""
    out = copy.deepcopy(report)
    name = next(iter(report["reference"]["outputs"]))
    rng = np.random.default_rng(2)
    ref = rng.standard_normal(report["reference"]["outputs"][name]["shape"]).astype(np.float32)
    got = ref * np.float32(scale)
    if nan:
        got.flat[0] = np.nan
    reference = TargetResult("onnx-reference", outputs={name: ref})
    result = TargetResult(tid, outputs={name: got}, evidence=dict(report["targets"][tid]["evidence"]))
    out["targets"][tid]["drift"] = target_block(result, None, reference)["drift"]
    out["checklist"] = checklist(out, (out.get("fusion_matrix") or {}).get("not_fired", []))
    return out


def test_a_figure_beyond_any_plausible_range_is_flagged_with_its_check(varied):
    assert varied["targets"]["ort-cpu"]["drift"]["informative"] is True and not drift_flags(varied)
    bad = _with_target_outputs(varied, "openvino-cpu", 1.9e30)
    d = bad["targets"]["openvino-cpu"]["drift"]
    (name, why), = d["implausible"].items()
    assert "check: rel L2 > 1 and scale within 1000×" in why and d["worst"]["implausible"] == why
    q4 = bad["checklist"]["targets"]["openvino-cpu"][3]
    assert q4["verdict"] == "fail" and q4["detail"].startswith(f"implausible figure on output '{name}'")
    row = next(r for r in overview_rows(bad) if r["target"] == "openvino-cpu")
    assert row["worst drift (rel L2)"].endswith("— implausible")        # never a quiet number beside "ok"
    assert "openvino-cpu's drift" in drift_flags(bad)[0] and "implausible" in drift_flags(bad)[0]
    assert summary_table(bad).splitlines()[0].startswith("warning: openvino-cpu's drift")
    assert "is implausible" in report_markdown(bad) and "FAIL</span> implausible" in report_html(bad)


def test_the_gate_fails_a_figure_that_became_implausible_even_without_a_ratio(varied):
    """A NaN in the output leaves no rel L2 to take a ratio of: the gate still fails it, naming the check."""
    nan = _with_target_outputs(varied, "openvino-cpu", 1.0, nan=True)
    assert nan["targets"]["openvino-cpu"]["drift"]["worst"]["rel_l2"] is None
    d = diff_reports(varied, nan)
    found = [r for r in regressions(d, GateRules()) if r["target"] == "openvino-cpu" and r["rule"] == "max_drift_ratio"]
    assert len(found) == 1 and "became implausible" in found[0]["what"] and "check: finite output" in found[0]["what"]
    assert "openvino-cpu" in diff_text(d)
    # The way back, and a run against itself, are no regression.
    assert not [r for r in regressions(diff_reports(nan, varied), GateRules()) if r["rule"] == "max_drift_ratio"]
    assert not regressions(diff_reports(varied, varied), GateRules())


def test_a_report_from_before_the_checks_still_renders(zeros):
    """report.json written by an older xc: no `not_informative`, `implausible` or `informative` anywhere."""
    old = copy.deepcopy(zeros)
    for o in old["reference"]["outputs"].values():
        o.pop("not_informative", None)
    for t in old["targets"].values():
        d = t["drift"]
        for key in ("informative", "not_informative", "implausible"):
            d.pop(key, None)
        d["worst"].pop("not_informative", None)
        for m in d["outputs"].values():
            m.pop("not_informative", None)
    assert drift_flags(old) == []
    assert overview_rows(old)[0]["worst drift (rel L2)"] == "0 (mul)"
    summary_table(old), report_markdown(old), report_html(old)
    # A non-finite target output there is still not shown as a number. The changed report is a new dict: the
    # views read a report dict once (views/typed_report.as_report keeps what it read).
    old = copy.deepcopy(old)
    old["targets"]["ort-cpu"]["drift"]["outputs"]["mul"]["finite"] = False
    assert "implausible" in drift_flags(old)[0]
