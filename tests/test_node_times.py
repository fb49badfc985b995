"""Reported, not guessed: ORT's own assignment API, the measured time of each compiled node (ORT's profile,
OpenVINO's performance counters), where the time goes, fallbacks ranked by cost, and a node that got slower as a
change the gate can hold."""
import copy

import pytest
import torch
from torch import nn

from tiny_models import ConvMeanGeluCumsum
from xc_core.analysis.node_time import fallback_costs, time_summary
from xc_core.api import analyze
from xc_core.capture import capture
from xc_core.inputs.values import random_inputs
from xc_core.ir import COMPUTE, Graph, Node
from xc_core.limits import Limits
from xc_core.review.diff import change_lines, diff_reports
from xc_core.review.gate import GateRules, regressions
from xc_core.review.html import report_html
from xc_core.review.markdown import report_markdown
from xc_core.sources.spec import InputSpec, Source
from xc_core.targets import OK, execute_target, make_target
from xc_core.targets.base import RUN_KEY, TargetResult, attach_node_times
from xc_core.targets.ort_common import times_from_profile
from xc_core.targets.ort_cpu import check_assignment
from xc_core.views.fallbacks import assignment_rows, fallback_rows


class GatedTwoHeads(nn.Module):
    """Conv → hardsigmoid gate (NNAPI's EP has no HardSigmoid: a CPU fallback) → two outputs of other shapes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.gate = nn.Hardsigmoid()
        self.a, self.b = nn.Linear(8, 5), nn.Linear(8, 3)

    def forward(self, x):
        y = self.conv(x)
        y = (y * self.gate(y)).mean((2, 3))
        return self.a(y), torch.softmax(self.b(y), -1)


def _source(model, shape, name="tiny"):
    return Source(kind="sample", name=name, sha256="0" * 64, inputs=[InputSpec("x", shape, "float32")],
                  module=model.eval())


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Conv+BN+ReLU, mean, GELU and a cumsum (an op most fusers leave alone), batch 2."""
    src = _source(ConvMeanGeluCumsum(), [2, 3, 12, 12])
    feeds = random_inputs(src.inputs)
    return capture(src, str(tmp_path_factory.mktemp("cap")), feeds), feeds


def _coverage(result: TargetResult) -> float:
    compute = [n for n in result.graph.nodes if n.kind == COMPUTE]
    return sum(n.measured_us is not None for n in compute) / len(compute)


def test_ort_cpu_assignment_from_ort_api_agrees_with_its_profile(odd, tmp_path):
    cap, feeds = odd
    r = execute_target(make_target("ort-cpu"), cap, feeds, str(tmp_path))
    assert r.status == OK, r.error
    assert r.info["assignment_source"] == "ort-api"
    assert r.info["assignment_sources_compared"] == ["ort-api", "profile"]
    assert "assignment_disagreements" not in r.info
    assert all(n.kernel == "CPUExecutionProvider" for n in r.graph.compute_nodes())


@pytest.mark.parametrize("tid", ["ort-cpu", "openvino-cpu", "ort-cpu-int8"])
def test_runtime_profilers_time_most_compute_nodes(odd, tmp_path, tid):
    cap, feeds = odd
    r = execute_target(make_target(tid), cap, feeds, str(tmp_path))
    assert r.status == OK, r.error
    nt = r.node_times
    assert nt["evidence"] == "measured" and r.evidence["time"] == "measured"
    assert nt["runs"] == Limits().profile_runs and "logical cores" in nt["host_cpu"]
    assert _coverage(r) >= 0.8, [n.id for n in r.graph.compute_nodes() if n.measured_us is None]
    assert nt["compute_nodes_timed"] == sum(n.measured_us is not None for n in r.graph.compute_nodes())
    timed = [n for n in r.graph.nodes if n.measured_us is not None]
    assert all(n.measured_us >= 0 for n in timed) and any(n.measured_us > 0 for n in timed)
    assert nt["total_us"] == pytest.approx(sum(n.measured_us for n in timed), abs=0.01)
    assert "profile" in r.timings and nt["run_us"] > 0


def test_profile_runs_zero_times_nothing(odd, tmp_path):
    cap, feeds = odd
    target = make_target("ort-cpu")
    target.limits = Limits(profile_runs=0)
    r = execute_target(target, cap, feeds, str(tmp_path))
    assert r.status == OK and r.node_times is None and "profile" not in r.timings
    assert all(n.measured_us is None for n in r.graph.nodes) and "time" not in r.evidence


def test_a_big_graph_gets_fewer_profiled_runs_never_fewer_than_two():
    """The profiler's cost grows with runs × nodes: past PROFILED_NODE_RUNS a graph gets fewer runs, at least
    two; what the user asked for stands below that (and when they asked for two or fewer)."""
    from xc_core.targets.base import MIN_PROFILE_RUNS, PROFILED_NODE_RUNS, profile_runs
    target = make_target("ort-cpu")
    target.limits = Limits(profile_runs=5)
    assert profile_runs(target, 100) == 5 and profile_runs(target, PROFILED_NODE_RUNS // 5) == 5
    assert profile_runs(target, PROFILED_NODE_RUNS // 4) == 4
    assert profile_runs(target, 20_000) == MIN_PROFILE_RUNS == 2
    assert profile_runs(target, 10**6) == MIN_PROFILE_RUNS
    target.limits = Limits(profile_runs=1)
    assert profile_runs(target, 10**6) == 1


def test_ort_nnapi_times_only_the_nodes_it_leaves_on_the_cpu(tmp_path):
    src = _source(GatedTwoHeads(), [1, 3, 10, 10])
    feeds = random_inputs(src.inputs)
    cap = capture(src, str(tmp_path / "cap"), feeds)
    r = execute_target(make_target("ort-nnapi"), cap, feeds, str(tmp_path / "t"))
    assert r.status == OK, r.error
    assert r.info["assignment_source"] == "ort-checker" and "not in this onnxruntime build" in \
        r.info["assignment_unconfirmed"]
    fallbacks = [n for n in r.graph.compute_nodes() if n.fallback]
    assert [n.op_type for n in fallbacks] == ["HardSigmoid"]
    assert all(n.measured_us is not None for n in fallbacks)
    assert all(n.measured_us is None for n in r.graph.compute_nodes() if not n.fallback)


def test_times_from_profile_splits_runs_and_leaves_out_the_warm_up():
    def run(ts, dur):
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}

    def kernel(name, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
                "args": {"provider": "CPUExecutionProvider"}}
    events = [run(0, 100), kernel("conv", 10, 90), run(200, 50), kernel("conv", 210, 20), kernel("conv", 235, 5),
              kernel("relu", 240, 4), run(300, 40), kernel("conv", 305, 30)]
    times = times_from_profile(events)
    assert times["conv"] == [25, 30]          # both events of the second run summed; the first run left out
    assert times["relu"] == [4, 0.0]          # absent from the third run: 0 there
    assert times[RUN_KEY] == [50, 40]


def test_disagreeing_sources_are_a_finding():
    g = Graph("g", "optimized", [Node("a", "Conv", kernel="CPUExecutionProvider", backend="cpu"),
                                 Node("b", "Relu", kernel="CPUExecutionProvider", backend="cpu")])
    r = TargetResult(target="ort-cpu", graph=g)
    check_assignment(r, {"a": "CPUExecutionProvider", "b": "XnnpackExecutionProvider"})
    assert r.info["assignment_disagreements"] == [{"node": "b", "op_type": "Relu", "ort_api": "CPUExecutionProvider",
                                                   "profile": "XnnpackExecutionProvider"}]
    assert "disagree on 1 node(s): b" in r.notes[-1]
    rows = assignment_rows({"targets": {"ort-cpu": {"info": {**r.info, "assignment_source": "ort-api"},
                                                   "graph": {"evidence": "reported"}}}})
    assert "1 node(s) disagree: b (Relu: API CPUExecutionProvider, profile XnnpackExecutionProvider)" \
        == rows[0]["result"]


def test_node_times_of_unknown_ids_are_unattributed_not_lost():
    g = Graph("g", "runtime", [Node("a", "Conv"), Node("b", "Relu")])
    r = TargetResult(target="t", graph=g)
    attach_node_times(r, {"a": [3.0, 5.0, 4.0], "glue": [2.0, 2.0, 2.0], RUN_KEY: [10.0, 12.0, 11.0]}, "m", 3)
    assert g.nodes[0].measured_us == 4.0 and g.nodes[1].measured_us is None
    assert r.node_times["unattributed_us"] == 2.0 and r.node_times["run_us"] == 11.0
    assert r.node_times["compute_nodes_timed"] == 1 and r.node_times["compute_nodes"] == 2
    # Every median keeps the runs behind it, and the run and the timed total their spread.
    assert r.node_times["samples_us"] == {"nodes": {"a": [3.0, 5.0, 4.0]}, "run": [10.0, 12.0, 11.0],
                                          "total": [3.0, 5.0, 4.0]}
    assert r.node_times["spread"]["run_us"] == {"median": 11.0, "q1": 10.5, "q3": 11.5, "min": 10.0, "max": 12.0,
                                                "n": 3}


def test_fallback_costs_keep_the_measured_kernel_and_the_assumed_copies_apart():
    nodes = [{"id": "cheap", "op_type": "Relu", "fallback": True, "measured_us": 5.0},
             {"id": "dear", "op_type": "TopK", "fallback": True, "measured_us": 400.0},
             {"id": "untimed", "op_type": "Erf", "fallback": True, "measured_us": None},
             {"id": "fast", "op_type": "Conv", "fallback": False, "measured_us": 900.0}]
    items = [{"from_node": "cheap", "consumers": ["fast"], "bytes": 4_000_000, "tensor": "t", "direction": "x"}]
    costs = fallback_costs(nodes, items, bandwidth_gb_s=4.0, transition_overhead_ms=0.2)
    assert set(costs) == {"cheap", "dear", "untimed"}
    # 4 MB at 4 GB/s = 1000 µs, + 200 µs for its one transition: assumed, and never added to the kernel's 5 µs.
    assert costs["cheap"] == {"kernel_us": 5.0, "copies_us_assumed": pytest.approx(1200.0), "transitions": 1}
    assert costs["untimed"] == {"kernel_us": None, "copies_us_assumed": 0.0, "transitions": 0}
    summary = time_summary(nodes)
    assert summary["top"][0]["node"] == "fast" and summary["by_op_type"][0] == {"key": "Conv", "us": 1305.0 - 405.0,
                                                                                 "share": 0.6897}


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    src = _source(GatedTwoHeads(), [1, 3, 10, 10], name="gated")
    return analyze(src, ["ort-cpu", "openvino-cpu", "ort-nnapi"], isolate=False,
                   out_dir=str(tmp_path_factory.mktemp("run")))


def test_report_carries_where_the_time_goes_and_views_render_it(analysed):
    t = analysed["targets"]["ort-cpu"]
    nt = t["node_times"]
    assert nt["timed_us"] > 0 and nt["by_backend"][0]["key"] == "cpu" and nt["top"]
    assert sum(x["share"] for x in nt["by_op_type"]) == pytest.approx(1.0, abs=1e-3)
    rows = fallback_rows(analysed, "ort-nnapi")
    assert rows and rows[0]["kernel µs"] is not None and "cost µs" not in rows[0]
    # Ranked by the measured kernel, the assumed copies in their own column with their own evidence.
    assert [r["kernel µs"] for r in rows] == sorted((r["kernel µs"] for r in rows), reverse=True)
    assert all("copies assumed (4 GB/s, 0.2 ms per transition)" in r["time evidence"] for r in rows)
    md = report_markdown(analysed, full=True)      # the time table: in the full text (the HTML by default)
    assert "#### Where the time goes (measured)" in md and "`openvino-cpu`" in md.split("Where the time goes")[1]
    assert "kernel µs (measured)" in md and "copies µs (assumed)" in md
    page = report_html(analysed)
    assert "-time-by-op\"" in page and "-heatmap-time\"" in page and "Where the time goes" in page


def test_a_node_slower_by_half_is_a_change_and_gateable(analysed):
    # Copies, changed before they are read: a report is read as a Report once per dict (views/typed_report.py).
    base, new = copy.deepcopy(analysed), copy.deepcopy(analysed)
    nodes = new["targets"]["ort-cpu"]["graph"]["nodes"]
    total = new["targets"]["ort-cpu"]["node_times"]["timed_us"]
    victim = max((n for n in nodes if n.get("measured_us")), key=lambda n: n["measured_us"])
    victim["measured_us"] = victim["measured_us"] * 3 + max(100.0, total)
    samples = new["targets"]["ort-cpu"]["node_times"]["samples_us"]["nodes"]
    samples[victim["id"]] = [v * 3 + max(100.0, total) for v in samples[victim["id"]]]     # every run slower
    for report in (base, new):      # profiled on a quiet host (this test's own may be busy: see below)
        report["targets"]["ort-cpu"]["node_times"]["cpu_wait_share"] = 0.01
    d = diff_reports(base, new)
    slower = d["targets"]["ort-cpu"]["time"]["slower"]
    assert [x["node"] for x in slower] == [victim["id"]] and d["targets"]["ort-cpu"]["changed"]
    assert any(line.startswith("slower: ") for tid, line in change_lines(d) if tid == "ort-cpu")
    assert regressions(d, GateRules()) == []                       # off by default: CI machines are noisy
    hits = regressions(d, GateRules(max_slower_nodes=0))
    assert [h["rule"] for h in hits] == ["max_slower_nodes"] and victim["op_type"] in hits[0]["what"]
    # The same, profiled while the host was busy: not judged, and said.
    busy = copy.deepcopy(new)
    busy["targets"]["ort-cpu"]["node_times"]["cpu_wait_share"] = 0.6
    d_busy = diff_reports(base, busy)
    assert not d_busy["targets"]["ort-cpu"]["time"]["slower"] and "host was busy" in \
        d_busy["targets"]["ort-cpu"]["time"]["host_busy"]
    assert regressions(d_busy, GateRules(max_slower_nodes=0)) == []
    # A base from an older xc (no per-run samples): spread unknown — said, never a regression on time alone.
    old = copy.deepcopy(base)
    del old["targets"]["ort-cpu"]["node_times"]["samples_us"]
    unknown = diff_reports(old, new)["targets"]["ort-cpu"]["time"]
    assert not unknown["slower"] and [x["node"] for x in unknown["spread_unknown"]] == [victim["id"]]
    assert regressions(diff_reports(old, new), GateRules(max_slower_nodes=0)) == []
    new = copy.deepcopy(new)
    new["targets"]["ort-cpu"]["node_times"]["host_cpu"] = "another CPU"
    other = diff_reports(base, new)["targets"]["ort-cpu"]["time"]
    assert not other["compared"] and "different CPUs" in other["why_not"] and not other["slower"]
