"""Per-op isolation and culprit search as users read them (xc_core/views/isolation.py): the rows of ops above the
gate, the curves along depth, the trials, the culprit lines, the Markdown and HTML sections, the checklist's
question 4 naming the ops, the dashboard's gate fields and the repro zip — on blocks shaped like the one coreai-ane
wrote for a tiny model, put into a real (older) report."""
import copy
import gzip
import io
import json
import os
import zipfile

import pytest

from xc_core.analysis.checklist import checklist
from xc_core.culprit.metrics import DEFAULT_GATES
from xc_core.culprit.search import reproduces
from xc_core.errors import XcInputError
from xc_core.review.html import report_html
from xc_core.review.markdown import report_markdown
from xc_core.views import isolation as iso_views

HERE = os.path.dirname(os.path.abspath(__file__))
OLDER_REPORT = os.path.join(HERE, "older_report_b9bc917_vision-mini.json.gz")
TARGET = "coreml-ane"
HOSTILE_MODULE = "[click](https://evil.example) @octocat <script>alert(1)</script> | cell"
SENTENCE = ("coreml-ane: the exp at gate.exp (1 op) accounts for all of the output drift (its outputs go non-finite "
            "with these ops alone on the target); in isolation it gives non-finite values")
FINITE = {"rel_l2": 4e-4, "max_abs": 3e-3, "mse": 1e-6, "cosine": 0.99999995, "snr_db": 63.0, "psnr_db": 75.4,
          "pearson": 0.9999999, "non_finite": False}
NON_FINITE = {k: None for k in FINITE} | {"non_finite": True}


def _op(name, depth, local, above=False, carried=None, **kw):
    return {"source_op": name, "op_type": kw.get("op_type"), "module_path": kw.get("module_path"), "depth": depth,
            "local": dict(local), "failed_gates": ["rel_l2", "cosine"] if above else [], "above_gate": above,
            "carried_rel_l2": carried, "nodes": kw.get("nodes", [])}


def _trial(first, last, rel_l2=None, non_finite=False, error=None):
    return {"first": first, "last": last, "ops": last - first + 1, "rel_l2": rel_l2, "non_finite": non_finite,
            "error": error, "seconds": 0.3}


def _block(**culprit_changes) -> dict:
    """The block coreai-ane wrote for a tiny gated model (the ops, the six trials), with the fields the engine adds
    (evidence, op types and modules, the sentence, the culprit's local figures, the repro entry). `mul` is a
    per-layer drift boundary of this report: its carried drift comes from there."""
    ops = [_op("linear", 5, FINITE, op_type="aten.linear.default", module_path="proj", carried=3.9e-4),
           _op("relu", 6, FINITE | {"rel_l2": 2.2e-4}, op_type="aten.relu.default", module_path="act"),
           _op("mul", 7, FINITE, op_type="aten.mul.Tensor", module_path="gate"),
           _op("exp", 8, NON_FINITE, above=True, op_type="aten.exp.default", module_path=HOSTILE_MODULE,
               nodes=["/gate/Exp"]),
           _op("sum_1", 9, NON_FINITE, above=True, op_type="aten.sum.dim_IntList", module_path="gate"),
           _op("div", 10, NON_FINITE, above=True, op_type="aten.div.Tensor", module_path="gate"),
           _op("add", 11, FINITE | {"rel_l2": 0.05, "cosine": 0.99}, above=True, op_type="aten.add.Tensor",
               module_path="residual"),
           _op("linear_1", 12, FINITE, op_type="aten.linear.default", module_path="head")]
    culprit = {"share_required": 0.9, "baseline": _trial(0, 7, non_finite=True), "status": "found", "first": 3,
               "last": 3, "ops": ["exp"], "op_types": ["aten.exp.default"], "module_paths": [HOSTILE_MODULE],
               "explained": 1.0, "runs": 6,
               "trials": [_trial(0, 7, non_finite=True), _trial(0, 3, non_finite=True), _trial(0, 1, 7e-4),
                          _trial(0, 2, 7e-4), _trial(2, 3, non_finite=True), _trial(3, 3, non_finite=True)],
               "seconds": 2.0, "sentence": SENTENCE, "local": NON_FINITE,
               "repro": {"folder": f"artifacts/{TARGET}/repro", "files": ["BUG_REPORT.md", "model.pt2", "run_repro.py"],
                         "script": "run_repro.py", "no_script": None,
                         "tracker": "coremltools: https://github.com/apple/coremltools/issues"}}
    culprit.update(culprit_changes)
    # Each trial carries the search's own verdict (culprit/search.reproduces), as the engine writes it.
    culprit["trials"] = [{**t, "reproduces": reproduces(t, culprit["baseline"], culprit["share_required"])}
                         for t in culprit["trials"]]
    return {"evidence": "emulated", "method": "each op of the captured program cut into its own island",
            "gates": dict(DEFAULT_GATES), "gates_text": "rel_l2 at most 0.01, cosine at least 0.999", "ops": ops,
            "isolated": len(ops), "above_gate": [o["source_op"] for o in ops if o["above_gate"]],
            "not_isolated": [{"source_op": "getitem", "why": "not a compute op"}], "error": None, "seconds": 0.9,
            "culprit": culprit}


@pytest.fixture(scope="module")
def base_report() -> dict:
    with gzip.open(OLDER_REPORT) as f:
        return json.load(f)


def _with(base: dict, block: dict | None, target: str = TARGET) -> dict:
    report = copy.deepcopy(base)
    if block is not None:
        report["targets"][target]["isolation"] = block
    return report


@pytest.fixture(scope="module")
def report(base_report) -> dict:
    return _with(base_report, _block())


# ---- the views' functions -----------------------------------------------------------------------------------
def test_rows_list_the_ops_above_the_gate_and_say_non_finite_never_zero(report):
    rows = iso_views.above_gate_rows(report, TARGET)
    assert [r["op"] for r in rows] == ["exp", "sum_1", "div", "add"]          # captured order, only above the gate
    exp = rows[0]
    for label in iso_views.LOCAL_COLUMNS.values():
        assert exp[label] == "non-finite", label
    assert exp["type"] == "aten.exp.default" and exp["module"] == HOSTILE_MODULE and exp["nodes"] == "/gate/Exp"
    assert exp["failed gates"] == "rel_l2, cosine" and exp["evidence"] == "emulated"
    add = rows[3]
    assert (add["local rel L2"], add["local cosine"], add["local SNR dB"]) == ("5.00e-02", "0.990000", "63.0")
    assert iso_views.isolated_targets(report) == [TARGET]


def test_curve_data_keeps_every_op_and_takes_carried_drift_from_the_block_or_per_layer_drift(report):
    data = iso_views.curve_data(report, TARGET)
    assert [p["op"] for p in data["local"]] == ["linear", "relu", "mul", "exp", "sum_1", "div", "add", "linear_1"]
    assert [p["op"] for p in data["local"] if p["non_finite"]] == ["exp", "sum_1", "div"]
    assert all(p["rel_l2"] is None for p in data["local"] if p["non_finite"])
    carried = {p["op"]: p["rel_l2"] for p in data["carried"]}
    assert carried["linear"] == 3.9e-4                        # the block's own figure
    points = {p["source_op"]: p["rel_l2"] for p in report["targets"][TARGET]["layer_drift"]["points"]}
    assert carried["mul"] == points["mul"]                    # per-layer drift's point at the same op, by name
    assert "exp" not in carried                               # never compared in the full run: no point, not 0
    assert data["gate"] == DEFAULT_GATES["rel_l2"]


def test_the_figure_draws_both_curves_on_a_log_axis_with_the_gate_and_marks(report):
    fig = iso_views.isolation_figure(report, TARGET)
    names = [t.name for t in fig.data]
    assert names[:2] == ["local: each op alone (emulated)", "carried: the full run, per-layer drift (emulated)"]
    assert fig.layout.yaxis.type == "log"
    assert [s.y0 for s in fig.layout.shapes] == [DEFAULT_GATES["rel_l2"]]           # the gate, as a line
    ringed = next(t for t in fig.data if t.name == "above the gate")
    assert list(ringed.x) == [11]                                                   # `add`: finite, above
    crosses = next(t for t in fig.data if t.name.startswith("non-finite"))
    local = dict(zip(fig.data[0].x, fig.data[0].y))
    assert [local[d] for d in (8, 9, 10)] == [None] * 3                 # a gap in the line, never a 0
    assert list(crosses.x) == [8, 9, 10] and min(crosses.y) > max(y for y in local.values() if y)    # on top
    assert iso_views.isolation_figure(_with(report, _block() | {"ops": []}), TARGET) is None


def test_trial_rows_say_which_range_ran_on_the_target_and_whether_it_reproduces(report):
    rows = iso_views.trial_rows(report, TARGET)
    assert [r["ops on the target"] for r in rows] == ["1–8", "1–4", "1–2", "1–3", "3–4", "4"]
    assert [r["reproduces the drift"] for r in rows] == ["yes", "yes", "no", "no", "yes", "yes"]
    assert rows[0]["role"].startswith("whole program") and rows[-1]["role"] == "culprit"
    assert rows[0]["output rel L2"] == "non-finite" and rows[2]["output rel L2"] == "7.00e-04"
    assert {r["evidence"] for r in rows} == {"emulated"}


def test_a_finite_baseline_reproduces_only_from_the_share_up(base_report):
    block = _block(baseline=_trial(0, 7, 0.1), trials=[_trial(0, 7, 0.1), _trial(0, 3, 0.095), _trial(0, 1, 0.05),
                                                        _trial(2, 3, error="refused")])
    rows = iso_views.trial_rows(_with(base_report, block), TARGET)
    assert [r["reproduces the drift"] for r in rows] == ["yes", "yes", "no", "no"]
    assert rows[3]["error"] == "refused" and rows[3]["output rel L2"] == "—"


def test_culprit_lines_carry_the_evidence_and_the_compiles(report):
    assert iso_views.culprit_lines(report) == [f"{SENTENCE} (emulated; 6 trial compiles)"]
    entry = iso_views.culprit_entries(report)[0]
    assert entry["local"] == "non-finite values" and entry["share"] == "100 %"
    assert entry["folder"] == f"artifacts/{TARGET}/repro" and entry["tracker"].startswith("coremltools")


def test_a_block_without_a_sentence_still_reads_as_one(base_report):
    found = _with(base_report, _block(sentence=None, ops=["exp", "sum_1"], explained=0.93,
                                      baseline=_trial(0, 7, 0.2)))
    line = iso_views.culprit_lines(found)[0]
    assert line.startswith(f"{TARGET}: exp, sum_1 (2 ops) account for 93 % of the output drift (rel L2 2.00e-01)")
    not_found = _with(base_report, _block(status="not-found", sentence=None, why="no range smaller than the whole "
                                          "program reproduces the drift"))
    assert iso_views.culprit_lines(not_found)[0].startswith(
        f"{TARGET}: no culprit found — no range smaller than the whole program reproduces the drift (emulated;")


def test_gate_fields_read_bounds_and_off_and_refuse_anything_else():
    assert iso_views.gates_from_fields(iso_views.gate_fields()) == DEFAULT_GATES
    fields = iso_views.gate_fields() | {"cosine": "off", "pearson": " 0.99 ", "mse": ""}
    assert iso_views.gates_from_fields(fields) == {"rel_l2": DEFAULT_GATES["rel_l2"], "pearson": 0.99}
    with pytest.raises(XcInputError, match=r"^gate snr_db: 'lots' is not a number — enter a bound, or 'off'"):
        iso_views.gates_from_fields(iso_views.gate_fields() | {"snr_db": "lots"})
    with pytest.raises(XcInputError, match="finite"):
        iso_views.gates_from_fields({"rel_l2": "inf"})
    with pytest.raises(XcInputError, match="no gate set"):
        iso_views.gates_from_fields({name: "off" for name in iso_views.gate_fields()})
    assert iso_views.gate_label("cosine") == "cosine (at least)"


def test_the_targets_offered_are_those_that_ran_numbers_and_the_drifting_ones_are_picked(base_report):
    assert iso_views.drifting_targets(base_report) == []              # every target of this run matches
    report = copy.deepcopy(base_report)       # changed before it is first read (as_report keeps what it read)
    ane = report["targets"][TARGET]["drift"]["outputs"]
    next(iter(ane.values()))["rel_l2"] = 0.5
    assert iso_views.numeric_targets(report) == list(report["targets"])
    assert iso_views.drifting_targets(report) == [TARGET]


def test_the_repro_zip_holds_the_repro_folder_only(report, tmp_path):
    files = {}
    for rel in (f"artifacts/{TARGET}/repro/run_repro.py", f"artifacts/{TARGET}/repro/compiled/model.mlpackage",
                f"artifacts/{TARGET}/model.mlpackage", "report.json"):
        path = tmp_path / rel.replace("/", "_")
        path.write_text(rel)
        files[rel] = str(path)
    assert list(iso_views.repro_files(report, TARGET, files)) == [f"artifacts/{TARGET}/repro/compiled/model.mlpackage",
                                                                  f"artifacts/{TARGET}/repro/run_repro.py"]
    assert iso_views.repro_zip_name("ort-cpu[level=basic]") == "ort-cpu_level_basic-repro.zip"
    with zipfile.ZipFile(io.BytesIO(iso_views.repro_zip(report, TARGET, files))) as z:
        assert sorted(z.namelist()) == [f"{TARGET}-repro/compiled/model.mlpackage", f"{TARGET}-repro/run_repro.py"]
        assert z.read(f"{TARGET}-repro/run_repro.py").decode() == f"artifacts/{TARGET}/repro/run_repro.py"


# ---- the reports -----------------------------------------------------------------------------------------------
def test_markdown_has_a_culprit_search_section_with_the_ops_table(report):
    md = report_markdown(report)
    section = md[md.index("#### Culprit search"):]
    first = section.splitlines()[2]
    assert first.startswith("- **coreml-ane: the exp at gate.exp (1 op) accounts for all of the output drift")
    assert "(emulated) — 6 trial compiles · the culprit alone: non-finite values" in first
    assert f"repro `artifacts/{TARGET}/repro` (script `run_repro.py`)" in first
    assert "report to coremltools: https:\u2060//github.com/apple/coremltools/issues" in first   # text, not a link
    rows = [line for line in section.splitlines() if line.startswith(f"| `{TARGET}` |")]
    assert [r.split(" | ")[1] for r in rows] == ["`exp`", "`sum_1`", "`div`", "`add`"]
    assert "| non-finite | non-finite | — | rel\\_l2, cosine | emulated |" in rows[0]
    # The module path is the model's text: no link, no mention, no tag, no cell split.
    assert "<script>" not in md
    assert "\\[click\\](https:\u2060//evil.example) @\u2060octocat &lt;script&gt;alert(1)&lt;/script&gt; \\| cell" \
        in rows[0]


def test_markdown_caps_the_ops_table_and_says_how_many_are_left(base_report):
    block = _block()
    block["ops"] = [_op(f"op_{i}", i, NON_FINITE, above=True) for i in range(9)]
    md = report_markdown(_with(base_report, block))             # the default comment: 5 rows per table
    assert md.count(f"| `{TARGET}` | `op_") == 5
    assert "… and 4 more op(s) above the gate (the Drift page and report.json list them all)" in md


def test_reports_without_isolation_have_no_culprit_section(base_report):
    assert "Culprit search" not in report_markdown(base_report)
    assert 'id="culprit-search"' not in report_html(base_report)


def test_a_failed_isolation_is_said_in_one_line(base_report):
    failed = {"evidence": "measured", "method": "", "gates": dict(DEFAULT_GATES), "ops": [], "isolated": 0,
              "above_gate": [], "not_isolated": [], "error": "isolation failed: worker ran out of memory"}
    report = _with(base_report, failed, "ort-cpu")
    md = report_markdown(report)
    assert ("- `ort-cpu` (measured): 0 op(s) isolated, no culprit search: isolation failed: worker ran out of "
            "memory") in md
    html = report_html(report)
    assert "Isolation could not run every op: isolation failed: worker ran out of memory" in html


def test_html_has_the_culprit_search_with_its_figure_table_and_trials(report):
    html = report_html(report)
    assert "could not be rendered" not in html
    part = html[html.index('id="culprit-search"'):]
    assert "<b>coreml-ane: the exp at gate.exp (1 op) accounts for all of the output drift" in part
    assert 'title="computed by emulating a runtime this host cannot run">emulated</span>' in part     # its badge
    assert 'id="fig-' in part and "-isolation-coreml-ane" in part                   # the two curves, drawn lazily
    assert "The 6 trial compile(s) of the culprit search" in part
    assert part.count("<td>non-finite</td>") >= 21                                  # 3 ops × 7 local figures
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in part


# ---- the checklist ---------------------------------------------------------------------------------------------
def test_checklist_question_4_names_the_ops_above_the_gate_and_the_culprit(base_report, report):
    def q4(r, tid=TARGET):
        return next(i for i in checklist(r, [])["targets"][tid] if i["id"] == 4)
    plain, named = q4(base_report), q4(report)
    assert named["verdict"] == plain["verdict"] and named["evidence"] == plain["evidence"]     # the verdict stays
    assert named["detail"] == (
        plain["detail"] + "; per-op isolation (emulated): local error above the gate (rel_l2 at most 0.01, cosine "
        "at least 0.999) at exp (non-finite), sum_1 (non-finite), div (non-finite) and 1 more; culprit: " + SENTENCE)
    assert q4(report, "ort-cpu") == q4(base_report, "ort-cpu")                  # a target not isolated: unchanged


def test_checklist_question_4_says_when_no_op_is_above_the_gate(base_report):
    block = _block(status="not-needed", sentence=None, why="the output drift (3.86e-04 rel L2) is within the gate")
    for op in block["ops"]:
        op.update(local=FINITE, above_gate=False, failed_gates=[])
    item = next(i for i in checklist(_with(base_report, block), [])["targets"][TARGET] if i["id"] == 4)
    assert item["detail"].endswith("; per-op isolation (emulated): no op's local error is above the gate (8 "
                                   "isolated); no culprit (not-needed): the output drift (3.86e-04 rel L2) is "
                                   "within the gate")
