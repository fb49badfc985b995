"""The gate on what a change does to a release: task accuracy (against the reference, against the base run), peak
memory, artifact size, load time and the weighted accelerated share. Each rule: a head that trips it and one just
under it that passes; figures with evidence a rule does not accept are not judged; bad rules are one-line errors.

One real run of digits-mini on ort-cpu and ort-cpu-int8 (its held-out digits as the dataset) is the base; each head
is a copy with figures changed through the report dict."""
import copy
import json

import pytest

from xc_core.errors import XcInputError
from xc_core.report.types import ComputeShare, Cost, ShareFigure
from xc_core.review.diff import diff_markdown, diff_reports, diff_text
from xc_core.review.gate import GateRules, load_rules, regressions

INT8 = "ort-cpu-int8"


@pytest.fixture(scope="module")
def base():
    from xc_core.api import analyze
    report = analyze("sample:digits-mini", ["ort-cpu", INT8], isolate=False)
    for t in report["targets"].values():
        assert t["accuracy"]["samples_run"] == 360 and t["accuracy"]["evidence"] == "measured"
        # The cost and compute-share blocks as the report types make them, where this run has none of its own.
        t["cost"] = t.get("cost") or Cost(evidence="measured", host="test CPU").to_dict()
        t["cost"].update(host="test CPU", peak_rss_mb=400.0, artifact_bytes=60_000, load_s=0.02)
        t["compute_share"] = ComputeShare(
            by_macs=ShareFigure(accelerated=90, total=100, share=0.9, unit="MACs", evidence="predicted-runtime"),
            by_time=ShareFigure(accelerated=80, total=100, share=0.8, unit="µs", evidence="measured")).to_dict()
    return report


def tripped(base: dict, change, **rules) -> set[str]:
    """The rules that fail on ort-cpu-int8 when its head has `change(target dict)` applied."""
    head = copy.deepcopy(base)
    change(head["targets"][INT8])
    d = diff_reports(base, head)
    return {r["rule"] for r in regressions(d, GateRules(**rules)) if r["target"] == INT8}


def test_an_unchanged_head_passes_every_rule(base):
    assert tripped(base, lambda t: None) == set()


def _set(block: str, **values):
    return lambda t: t[block].update(values)


# rule, rules set for the case (beyond the defaults), a head that trips it, a head just under it
CASES = [
    ("max_accuracy_loss", {"max_accuracy_drop": -1}, _set("accuracy", accuracy=0.963333),
     _set("accuracy", accuracy=0.976667)),
    ("max_accuracy_loss", {"max_accuracy_drop": -1},          # no labels: the share of samples that changed class
     _set("accuracy", accuracy=None, reference_accuracy=None, top1_agreement=0.98),
     _set("accuracy", accuracy=None, reference_accuracy=None, top1_agreement=0.994444)),
    ("max_accuracy_drop", {}, _set("accuracy", accuracy=0.975), _set("accuracy", accuracy=0.980556)),
    ("max_peak_memory_mb", {"max_peak_memory_mb": 450}, _set("cost", peak_rss_mb=460.0),
     _set("cost", peak_rss_mb=440.0)),
    ("max_memory_ratio", {}, _set("cost", peak_rss_mb=520.0), _set("cost", peak_rss_mb=480.0)),
    ("max_artifact_mb", {"max_artifact_mb": 1, "max_artifact_ratio": -1}, _set("cost", artifact_bytes=1_100_000),
     _set("cost", artifact_bytes=1_000_000)),
    ("max_artifact_ratio", {}, _set("cost", artifact_bytes=78_000), _set("cost", artifact_bytes=72_000)),
    ("max_load_ratio", {"max_load_ratio": 1.5}, _set("cost", load_s=0.031), _set("cost", load_s=0.029)),
    ("min_weighted_share", {"min_weighted_share": 85},
     lambda t: t["compute_share"]["by_macs"].update(share=0.84), lambda t: None),
    ("max_weighted_share_loss", {}, lambda t: t["compute_share"]["by_macs"].update(share=0.885),
     lambda t: t["compute_share"]["by_macs"].update(share=0.895)),
    ("max_weighted_share_loss", {"share_weight": "time"},
     lambda t: t["compute_share"]["by_time"].update(share=0.78), lambda t: t["compute_share"]["by_time"].update(
         share=0.795)),
]


@pytest.mark.parametrize("rule, rules, fails, passes", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_trips_above_its_threshold_and_not_below(base, rule, rules, fails, passes):
    assert rule in tripped(base, fails, **rules)
    assert tripped(base, passes, **rules) == set()


def test_a_loss_against_the_reference_the_base_already_had_is_not_this_change_s(base):
    """max_accuracy_loss judges changes: a target already 2 points under the reference in base passes while it
    stays there, and fails once it loses more."""
    lossy = copy.deepcopy(base)
    lossy["targets"][INT8]["accuracy"]["accuracy"] = 0.963333
    same = copy.deepcopy(lossy)
    worse = copy.deepcopy(lossy)
    worse["targets"][INT8]["accuracy"]["accuracy"] = 0.955556

    def rules_tripped(head):
        d = diff_reports(lossy, head)
        return {r["rule"] for r in regressions(d, GateRules(max_accuracy_drop=-1)) if r["target"] == INT8}
    assert rules_tripped(same) == set()
    assert rules_tripped(worse) == {"max_accuracy_loss"}


def test_rules_off_by_default_stay_off(base):
    """Absolute memory and size, load time and the minimum share depend on the model and the host: off unless the
    repository sets them."""
    def heavy(t):
        t["cost"].update(peak_rss_mb=10_000.0, artifact_bytes=60_000, load_s=0.5)
        t["compute_share"]["by_macs"]["share"] = 0.9
    assert tripped(base, heavy, max_memory_ratio=-1) == set()


def test_accuracy_of_an_evidence_kind_the_rules_do_not_accept_is_not_judged(base):
    def predicted(t):
        t["accuracy"].update(accuracy=0.5, evidence="predicted-rules")
    assert tripped(base, predicted) == set()
    assert tripped(base, predicted, accuracy_evidence=("predicted-rules",)) == {"max_accuracy_loss",
                                                                               "max_accuracy_drop"}


def test_memory_and_size_are_judged_on_measured_figures_only(base):
    def estimated(t):
        t["cost"].update(evidence="estimated-compiler", peak_rss_mb=4000.0, artifact_bytes=6_000_000)
    assert tripped(base, estimated) == set()


def test_load_times_of_two_hosts_are_not_compared(base):
    assert tripped(base, _set("cost", load_s=0.2, host="another CPU"), max_load_ratio=1.5) == set()


def test_share_by_time_needs_measured_times(base):
    def reported(t):
        t["compute_share"]["by_time"].update(share=0.1, evidence="reported")
    assert tripped(base, reported, share_weight="time") == set()


def test_share_lost_with_ops_the_fallback_rules_named_is_not_counted_twice():
    from xc_core.review.gate import matters_regressions
    t = {"compute_share": {"base": {"by_macs": {"share": 0.9, "evidence": "reported"}},
                           "new": {"by_macs": {"share": 0.6, "evidence": "reported"}}}}
    for named, expected in ((False, ["max_weighted_share_loss", "min_weighted_share"]), (True, ["min_weighted_share"])):
        found = []
        matters_regressions(t, GateRules(min_weighted_share=70), lambda rule, what: found.append(rule), named)
        assert sorted(found) == expected


def test_the_diff_and_its_renderings_name_the_rule_and_the_figures(base):
    head = copy.deepcopy(base)
    head["targets"][INT8]["accuracy"]["accuracy"] = 0.95
    head["targets"][INT8]["cost"]["artifact_bytes"] = 90_000
    d = diff_reports(base, head)
    t = d["targets"][INT8]
    assert t["accuracy"]["new"]["accuracy"] == 0.95 and t["cost"]["base"]["artifact_bytes"] == 60_000
    assert t["compute_share"]["new"]["by_macs"]["share"] == 0.9 and t["changed"]
    regs = regressions(d, GateRules())
    assert {r["rule"] for r in regs} == {"max_accuracy_loss", "max_accuracy_drop", "max_artifact_ratio"}
    text = diff_text(d, regs)
    assert "top-1 accuracy 98.3% → 95.0% (measured)" in text and "artifact size 58.6 kB → 87.9 kB" in text
    assert f"REGRESSION {INT8} [max_accuracy_drop]: top-1 accuracy 98.3% → 95.0%: −3.3 points" in text
    md = diff_markdown(d, regs)
    assert "(`max_artifact_ratio`) artifact 58.6 kB → 87.9 kB on disk, 1.50×" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| `{INT8}`") and "MB" in line)
    assert "98.3% → 95.0% · ref 98.3%" in row and "400 MB" in row and "90.0% |" in row
    # The sticky comment is the same Markdown: the rule and its figures reach the pull request as they are.
    from xc_core.review.github import comment_body
    assert "(`max_accuracy_loss`) top-1 accuracy 95.0% vs the reference's 98.3%" in comment_body(md)[0]
    json.dumps(d)                                       # plain data: `xc diff --format json` writes it


def test_the_real_int8_run_stays_under_the_default_loss(base):
    """The real run: int8 moves a few of the 360 digits off the reference's class, within the default rule."""
    acc = base["targets"][INT8]["accuracy"]
    lost = 100 * (1 - acc["top1_agreement"])
    assert acc["changed_count"] == round(lost * 3.6) and lost < GateRules().max_accuracy_loss


@pytest.mark.parametrize("toml, message", [
    ("max_accuracy_los = 1", "unknown gate rule 'max_accuracy_los' (known: "),
    ("max_accuracy_drop = 'half'", "max_accuracy_drop must be float, not 'half'"),
    ("max_memory_ratio = true", "max_memory_ratio must be float, not True"),
    ("accuracy_evidence = ['measured', 'guessed']", "accuracy_evidence must be a list of evidence kinds"),
    ("share_weight = 'flops'", "share_weight must be one of macs, time, not 'flops'"),
    ("[target.\"ort-cpu-int8\"]\nmin_weighted_share = '80%'", "min_weighted_share must be float"),
])
def test_bad_rules_are_one_line_errors(tmp_path, toml, message):
    path = tmp_path / ".xc-gate.toml"
    path.write_text(toml + "\n")
    with pytest.raises(XcInputError) as e:
        load_rules(str(path))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_rules_from_a_file_and_per_target(tmp_path):
    (tmp_path / ".xc-gate.toml").write_text('max_accuracy_drop = 2\naccuracy_evidence = ["emulated"]\n'
                                            'share_weight = "time"\n[target."ort-cpu-int8"]\nmax_artifact_mb = 5\n')
    rules, per_target = load_rules(search_dir=str(tmp_path))
    assert rules.max_accuracy_drop == 2 and rules.accuracy_evidence == ("emulated",) and rules.share_weight == "time"
    assert per_target[INT8].max_artifact_mb == 5 and per_target[INT8].max_accuracy_drop == 2


def test_cli_gate_with_a_bad_rule_exits_2_in_one_line(base, tmp_path, capsys):
    from xc_core.cli import main
    for name in ("base", "head"):
        (tmp_path / f"{name}.json").write_text(json.dumps(base))
    (tmp_path / "gate.toml").write_text("max_peak_memory_mb = [1]\n")
    code = main(["diff", str(tmp_path / "base.json"), str(tmp_path / "head.json"), "--gate", "--config",
                 str(tmp_path / "gate.toml")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("xc: ") and "max_peak_memory_mb must be float" in err
    assert len(err.strip().splitlines()) == 1


# ---- the fleet matrix: the same figures per cell, gated by the same rules -----------------------------------------
def _matrix(report: dict) -> dict:
    from xc_core.fleet.matrix import cells_from_report, new_matrix
    m = new_matrix("fleet.txt", ["ort-cpu", INT8], "local", None)
    m["complete"] = True
    m["models"] = [{"name": "digits", "source": "sample:digits-mini", "sha256": report["source"]["sha256"],
                    "run": None, "report": None, "runs": {}, "status": "ok", "error": None, "cached": False}]
    m["cells"] = cells_from_report("digits", report, None, False)
    return m


def test_matrix_cells_carry_accuracy_memory_and_size(base):
    from xc_core.fleet.matrix import parse_matrix
    from xc_core.fleet.render import cell_label, matrix_markdown
    m = parse_matrix(json.dumps(_matrix(base)).encode(), "matrix.json")      # as written, it reads back
    cell = next(c for c in m["cells"] if c["target"] == INT8)
    assert cell["accuracy"] == {"value": 0.983333, "evidence": "measured", "of": "top-1", "reference": 0.983333,
                                "samples": 360}
    assert cell["peak_memory_mb"]["value"] == 400.0 and cell["artifact_bytes"]["value"] == 60_000
    assert cell_label(cell).endswith("top-1 98.3% · 400 MB · 58.6 kB")
    assert "top-1 98.3% · 400 MB · 58.6 kB" in matrix_markdown(m)


@pytest.mark.parametrize("figure, value, message", [
    ("accuracy", {"value": 1.5, "evidence": "measured", "of": "top-1"}, "accuracy value 1.5 is out of range"),
    ("accuracy", {"value": 0.9, "evidence": "measured", "of": "guess"}, "accuracy's of guess"),
    ("artifact_bytes", {"value": 1.5, "evidence": "measured"}, "artifact_bytes value 1.5 is not a count"),
])
def test_a_crafted_matrix_figure_is_refused_in_one_line(base, figure, value, message):
    from xc_core.fleet.matrix import parse_matrix
    m = _matrix(base)
    m["cells"][0][figure] = value
    with pytest.raises(XcInputError, match=message):
        parse_matrix(json.dumps(m).encode(), "matrix.json")


def test_fleet_diff_gates_the_cells_accuracy_memory_and_size_by_the_same_rules(base, tmp_path):
    from xc_core.fleet.diff import diff_matrices, diff_text, fleet_regressions
    b = _matrix(base)
    n = copy.deepcopy(b)
    cell = next(c for c in n["cells"] if c["target"] == INT8)
    cell["accuracy"]["value"] = 0.97                # −1.3 points against base and against the reference
    cell["peak_memory_mb"]["value"] = 600.0
    cell["artifact_bytes"]["value"] = 61_000        # within the ratio
    d = diff_matrices((b, str(tmp_path)), (n, str(tmp_path)))
    regs = fleet_regressions(d, *load_rules(search_dir=str(tmp_path)))
    assert {(r["target"], r["rule"]) for r in regs} == {(INT8, "max_accuracy_drop"), (INT8, "max_accuracy_loss"),
                                                        (INT8, "max_memory_ratio")}
    text = diff_text(d, regs)
    assert "digits × ort-cpu-int8: top-1 accuracy 98.3% → 97.0% (measured); artifact 58.6 kB → 59.6 kB" in text
    assert "[max_memory_ratio] peak memory 400 MB → 600 MB, 1.50×" in text
    (tmp_path / ".xc-gate.toml").write_text("max_accuracy_drop = 2\nmax_accuracy_loss = 2\nmax_memory_ratio = -1\n")
    assert fleet_regressions(d, *load_rules(search_dir=str(tmp_path))) == []
