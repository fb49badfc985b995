"""Timing noise is not a finding: every measured time keeps the runs behind its median, and a time is "slower" only
past the runs' spread and the shift every node of the target shared (analysis/node_time.py). Two identical runs
of one sample compare as no change in `xc diff`, its gate and History; OpenVINO's counters are read as each run's
time, not as a running mean that keeps the warm-up in it."""
import json
import os

import pytest
from streamlit.testing.v1 import AppTest

from xc_core.analysis.node_time import (
    FASTER,
    SLOWER,
    SPREAD_UNKNOWN,
    UNCHANGED,
    WITHIN_NOISE,
    figure,
    per_run_totals,
    spread,
    target_shift,
    time_change,
)
from xc_core.cli import main
from xc_core.targets.openvino_cpu import runs_from_running_means

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = "ort-cpu,openvino-cpu"


# ---- the statistics -----------------------------------------------------------------------------------------------
def test_spread_is_the_median_and_quartiles_of_the_runs():
    assert spread([10.0, 14.0, 11.0, 12.0, 13.0]) == {"median": 12.0, "q1": 11.0, "q3": 13.0, "min": 10.0,
                                                      "max": 14.0, "n": 5}
    assert spread([7.0]) == {"median": 7.0, "q1": 7.0, "q3": 7.0, "min": 7.0, "max": 7.0, "n": 1}
    assert spread([]) is None and spread(None) is None
    # The runs' totals, only where every node was timed in every run.
    assert per_run_totals({"a": [1.0, 2.0], "b": [10.0, 20.0]}) == [11.0, 22.0]
    assert per_run_totals({"a": [1.0, 2.0], "b": [10.0]}) is None


def _judge(base, new, floor=20.0, shift=None):
    return time_change(figure(None, base), figure(None, new), floor, shift)


def test_a_node_is_slower_only_past_the_spread_of_both_runs():
    steady = [100.0, 102.0, 98.0, 101.0, 99.0]
    assert _judge(steady, [300.0, 305.0, 298.0, 301.0, 299.0])["verdict"] == SLOWER
    assert _judge([300.0, 305.0, 298.0, 301.0, 299.0], steady)["verdict"] == FASTER
    # The medians 3× apart, but the base's own runs reach as far: its IQR overlaps the new one.
    noisy = [100.0, 110.0, 120.0, 400.0, 420.0]
    verdict = _judge(noisy, [300.0, 305.0, 360.0, 380.0, 390.0])
    assert verdict["verdict"] == WITHIN_NOISE and "interquartile ranges overlap" in verdict["why"]
    # Below the material ratio, or below the absolute floor where a profiler's 1 µs resolution dominates (4 → 8 µs).
    assert _judge(steady, [130.0] * 5)["verdict"] == UNCHANGED
    assert _judge([4.0] * 5, [8.0] * 5)["verdict"] == UNCHANGED


def test_a_shift_every_node_shared_is_the_host_not_a_node():
    """The XNNPACK pattern under a busier host: every operator waits ~29 µs more for its thread pool (1 → 30, 9 →
    38 µs). Beyond each node's spread, yet no node is slower than the rest; one node slowed on its own still is."""
    base = {f"n{i}": [float(b)] * 5 for i, b in enumerate((1, 1, 9, 11, 14, 6, 7, 9, 10, 8))}
    new = {k: [v[0] + 29.0] * 5 for k, v in base.items()}
    shift = target_shift([(base[k], new[k]) for k in base])
    assert shift["increase_us"] == 29.0 and shift["nodes"] == 10
    assert all(_judge(base[k], new[k], shift=shift)["verdict"] == WITHIN_NOISE for k in base)
    assert "moved together" in _judge(base["n0"], new["n0"], shift=shift)["why"]
    lone = [v + 29.0 + 300.0 for v in base["n4"]]
    assert _judge(base["n4"], lone, shift=shift)["verdict"] == SLOWER
    # A host twice as slow doubles every node: a 500 µs node at 1,000 µs is that shift, not a finding.
    twice = {k: [2 * x for x in v] for k, v in base.items()}
    doubled = target_shift([(base[k], twice[k]) for k in base])
    assert _judge([500.0] * 5, [1000.0] * 5, shift=doubled)["verdict"] == WITHIN_NOISE
    # Too few nodes to tell a shift from a change: none is assumed.
    assert target_shift([(base["n0"], new["n0"])]) is None


def test_a_run_profiled_on_a_busy_host_is_not_judged():
    """tts-mini's Inductor kernels, profiled twice while other work held the cores: ~1 ms a run, then 330 ms a run
    in every run — IQRs apart, yet no compiler's doing. The kernel's schedstat says the profile waited for a CPU."""
    from xc_core.analysis.node_time import HOST_BUSY_SHARE, host_busy
    from xc_core.targets.base import cpu_wait_share, cpu_wait_snapshot
    assert host_busy(0.05, 0.1) is None and host_busy(None, None) is None
    why = host_busy(0.21, 0.62)
    assert why == ("the host was busy while profiling the new run (its threads waited for a CPU 62% of their "
                   f"runnable time, over {HOST_BUSY_SHARE:.0%})")
    verdict = time_change(figure(None, [1000.0, 1010.0, 990.0]), figure(None, [330e3, 331e3, 332e3]), 20.0, busy=why)
    assert verdict["verdict"] == WITHIN_NOISE and verdict["why"] == why
    # This process's own figure: a share of its runnable time, or None where the kernel keeps no schedstat.
    share = cpu_wait_share(cpu_wait_snapshot())
    assert share is None or 0.0 <= share <= 1.0


def test_a_run_without_per_run_samples_has_its_spread_unknown():
    verdict = time_change(figure(100.0, None), figure(None, [300.0] * 5), 20.0)
    assert verdict["verdict"] == SPREAD_UNKNOWN and "base run kept no per-run samples" in verdict["why"]
    assert time_change(figure(100.0, None), figure(101.0, None), 20.0)["verdict"] == UNCHANGED


def test_openvino_counters_are_running_means_read_back_as_each_runs_time():
    """intel_cpu's PerfCount::avg is total / n since the compile, in whole µs: the n-th run took n·mean_n −
    (n−1)·mean_{n−1}; a truncation dip below zero reads as 0."""
    assert runs_from_running_means([[242.0, 10.0], [144.0, 10.0], [97.0, 10.0], [73.0, 9.0]]) == \
        [[242.0, 10.0], [46.0, 10.0], [3.0, 10.0], [1.0, 6.0]]
    assert runs_from_running_means([[5.0], [2.0]]) == [[5.0], [0.0]]


# ---- two identical runs ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def twin_runs(tmp_path_factory):
    """sample:vision-mini analysed twice, the same way, by the CLI (kept in the session's run store)."""
    folder = tmp_path_factory.mktemp("twins")
    outs = [str(folder / name) for name in ("first", "second")]
    for out in outs:
        assert main(["analyze", "sample:vision-mini", "--targets", TARGETS, "--out", out, "--quiet"]) == 0
    return outs


def test_every_time_keeps_its_runs(twin_runs):
    report = json.load(open(os.path.join(twin_runs[0], "report.json")))
    for tid in TARGETS.split(","):
        nt = report["targets"][tid]["node_times"]
        assert nt["cpu_wait_share"] is None or 0.0 <= nt["cpu_wait_share"] <= 1.0
        timed = [n for n in report["targets"][tid]["graph"]["nodes"] if n.get("measured_us") is not None]
        assert {n["id"] for n in timed} == set(nt["samples_us"]["nodes"])
        assert all(len(v) == nt["runs"] for v in nt["samples_us"]["nodes"].values())
        assert nt["spread"]["total_us"]["n"] == nt["runs"] and nt["spread"]["run_us"]["q1"] <= \
            nt["spread"]["run_us"]["q3"]
    # The table every view shows (Overview, Markdown, HTML, the CLI) gives the runs' spread beside the total.
    from xc_core.cli import time_lines
    from xc_core.views.rows import time_rows
    assert all("the runs' totals: median" in r["timed µs"] and ", IQR " in r["timed µs"] for r in time_rows(report))
    assert "the runs' totals: median" in time_lines(report)


def test_two_identical_runs_are_no_change_in_diff_and_gate(twin_runs, capsys):
    first, second = twin_runs
    assert main(["diff", first, second, "--gate", "--max-slower-nodes", "0"]) == 0
    out = capsys.readouterr().out
    assert "no change in any compiler decision" in out and "slower:" not in out
    assert out.rstrip().splitlines()[-1] == "Verdict: no regressions"
    assert main(["diff", first, second, "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert not d["changed"] and all(not t["time"]["slower"] and t["time"]["compared"] for t in d["targets"].values())
    assert all(t["time"]["test"].startswith("a time is called slower") for t in d["targets"].values())
    # Without --gate the Markdown still ends with a verdict, under the default rules, and says so.
    assert main(["diff", first, second, "--format", "md"]) == 0
    md = capsys.readouterr().out.rstrip()
    assert md.splitlines()[-1] == "**Verdict (the default gate rules; not gated): no regressions**"


def test_two_identical_runs_are_no_change_in_history(twin_runs):
    """The twins kept as two runs of the store (the CLI gives an identical analysis one key: the second replaces
    the first), compared on History."""
    from xc_core.store import RunStore
    store = RunStore()
    keys = ["7e57" * 16, "7e58" * 16]
    for key, out in zip(keys, twin_runs):
        report = json.load(open(os.path.join(out, "report.json")))
        store.put(key, {**report, "run": {**report.get("run", {}), "key": key}}, None, origin="imported")
    try:
        at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=300)
        at.run()
        at.session_state["history_base"], at.session_state["history_new"] = keys
        at.switch_page("pages/history.py").run()
        assert not at.exception, at.exception
        assert any("No regression under the default gate rules" in s.value for s in at.success)
        assert any("No change in any compiler decision" in i.value for i in at.info)
        assert not any("slower" in str(df.value) for df in at.dataframe)
        shown = [m.value.replace("\\", "") for m in at.markdown]      # the page escapes Markdown in the line
        assert "**Verdict (the default gate rules; not gated): no regressions**" in shown
    finally:
        for key in keys:
            store.delete(key)


def test_a_whole_run_slower_past_its_spread_is_a_change_and_one_within_it_a_note(twin_runs):
    """The whole run's time is judged like a node's: openvino-cpu's 1.1 / 2.3 / 3.2 ms for one model would be a
    finding only if the runs' own spread did not reach that far."""
    import copy

    from xc_core.review.diff import change_lines, diff_reports, time_notes, whole_run_time
    base = json.load(open(os.path.join(twin_runs[0], "report.json")))
    for t in base["targets"].values():
        t["node_times"]["cpu_wait_share"] = 0.01        # profiled on a quiet host (this test's own may not be)
    slow = copy.deepcopy(base)
    nt = slow["targets"]["openvino-cpu"]["node_times"]
    nt["samples_us"]["run"] = [3 * v + 1000.0 for v in nt["samples_us"]["run"]]
    nt["run_us"] = 3 * nt["run_us"] + 1000.0
    d = diff_reports(base, slow)
    whole = whole_run_time(d["targets"]["openvino-cpu"]["time"])
    assert whole["what"] == "whole run" and whole["verdict"] == "slower" and d["targets"]["openvino-cpu"]["changed"]
    assert any(tid == "openvino-cpu" and line.startswith("slower: whole run") for tid, line in change_lines(d))
    # The same medians, but the base's own runs reach as far: within noise, said as a note and never a change.
    noisy = copy.deepcopy(base)
    b_nt = noisy["targets"]["openvino-cpu"]["node_times"]
    b_nt["samples_us"]["run"] = [b_nt["run_us"]] * 3 + [2 * max(nt["samples_us"]["run"])] * 2
    d = diff_reports(noisy, slow)
    assert whole_run_time(d["targets"]["openvino-cpu"]["time"])["verdict"] == "within noise"
    assert not any(line.startswith("slower: whole run") for _, line in change_lines(d))
    assert any(tid == "openvino-cpu" and "whole run" in line and "within noise" in line for tid, line in time_notes(d))
