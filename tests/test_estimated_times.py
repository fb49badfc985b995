"""A compiler's estimated time per node (Vela for Ethos-U; evidence estimated-compiler) is shown wherever a measured
time is, labelled as an estimate, and never ranked, summed or compared with a measured time.

The report is built in code: one small run timed by ONNX Runtime (measured), and a copy of that target turned into
an estimated one as the Ethos-U targets write it (estimated_us per node, node_times evidence estimated-compiler,
no runs, the modelled device in place of the CPU, Vela's network summary in info)."""
import copy

import pytest
import torch
from torch import nn

from xc_core import evidence as ev
from xc_core.api import analyze
from xc_core.cli import time_lines as cli_time_lines
from xc_core.fleet.matrix import _time as matrix_time
from xc_core.review.diff import change_lines, diff_markdown, diff_reports, time_notes
from xc_core.review.html import report_html
from xc_core.review.markdown import report_markdown
from xc_core.sources.spec import InputSpec, Source
from xc_core.views import figures, topology
from xc_core.views import graph_layout as layout
from xc_core.views.fallbacks import fallback_rank, fallback_rows
from xc_core.views.rows import heatmap_rows, time_rows
from xc_core.views.time_evidence import vela_rows
from xc_core.views.typed_report import as_report

EST = "executorch-ethos-u55"
DEVICE = "Ethos-U55 (ethos-u55-128, Ethos_U55_High_End_Embedded) as Vela 5.2.0 models it"


class ConvReluLinear(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.act(self.conv(x)).mean((2, 3)))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    src = Source(kind="sample", name="tiny", sha256="0" * 64, inputs=[InputSpec("x", [1, 3, 8, 8], "float32")],
                 module=ConvReluLinear().eval())
    report = analyze(src, ["ort-cpu"], isolate=False, out_dir=str(tmp_path_factory.mktemp("run")))
    assert report["targets"]["ort-cpu"]["node_times"]["timed_us"], "ort-cpu should time its nodes"
    return report


def _estimated(report: dict, scale: dict[int, float] | None = None, device: str = DEVICE) -> dict:
    """The report with a copy of ort-cpu as an estimated target, as the Ethos-U targets write one: each node's
    time moved to estimated_us (times `scale[k]` for the k-th timed node), node_times estimated-compiler."""
    out = copy.deepcopy(report)
    t = copy.deepcopy(out["targets"]["ort-cpu"])
    timed = [n for n in t["graph"]["nodes"] if n.get("measured_us") is not None]
    for k, n in enumerate(timed):
        n["estimated_us"] = n.pop("measured_us") * (scale or {}).get(k, 1.0)
        n["measured_us"] = None
    nt = t["node_times"]
    nt.update(evidence=ev.ESTIMATED_COMPILER, host_cpu=device, runs=0, samples_us={}, spread={}, run_us=None,
              cpu_wait_share=None, statistic="the compiler's estimate (one figure, no runs)",
              timed_us=round(sum(n["estimated_us"] for n in timed), 3))
    t["info"]["vela"] = {"delegates": {"lowered_module_0": {
        "accelerator_configuration": "Ethos_U55_128", "system_config": "Ethos_U55_High_End_Embedded",
        "memory_mode": "Shared_Sram", "sram_used_kib": 81.39, "off_chip_flash_used_kib": 23.2,
        "on_chip_flash_used_kib": 0.0, "inference_time_s": 0.00051, "macs": 4473120, "cycles_total": 255277,
        "npu_operators": 27, "cpu_operators": 1}}, "evidence": ev.ESTIMATED_COMPILER}
    out["targets"][EST] = t
    for row in out["alignment"]["source_ops"] or []:
        if "ort-cpu" in row["targets"]:
            row["targets"][EST] = copy.deepcopy(row["targets"]["ort-cpu"])
    out["checklist"]["targets"][EST] = copy.deepcopy(out["checklist"]["targets"]["ort-cpu"])
    return out


def test_topology_colours_by_the_estimate_and_says_it_is_one(measured):
    report = as_report(_estimated(measured))
    t = report.targets[EST]
    tree = topology.build_tree(layout.prepare(t.graph, t.fusions))
    for expanded in (topology.auto_expand(tree), set()):         # node boxes, then collapsed groups
        v = topology.view(tree, expanded)
        timed = [b for b in v["boxes"] if b.get("us") is not None]
        assert timed and all(b["time_evidence"] == ev.ESTIMATED_COMPILER for b in timed)
        hovers = [topology.hover_text(b) for b in timed]
        assert all("estimated-compiler" in h and "measured" not in h for h in hovers), hovers
    v = topology.view(tree, topology.auto_expand(tree))
    assert "est. " in topology.to_dot(v, "time")
    assert sum(b["us"] for b in v["boxes"] if b.get("us") is not None) == pytest.approx(t.node_times.timed_us)
    # the measured target's boxes still say measured
    m = report.targets["ort-cpu"]
    mtree = topology.build_tree(layout.prepare(m.graph, m.fusions))
    mv = topology.view(mtree, topology.auto_expand(mtree))
    assert all("(measured," in topology.hover_text(b) for b in mv["boxes"] if b.get("us") is not None)
    assert "est. " not in topology.to_dot(mv, "time")


def test_heat_map_cells_read_the_estimate_and_label_it(measured):
    report = _estimated(measured)
    labels, targets, cells = heatmap_rows(report)
    col, mcol = targets.index(EST), targets.index("ort-cpu")
    est_cells = [line[col] for line in cells if line[col]["us"] is not None]
    assert est_cells and all("estimated-compiler" in c["hover"] and "measured" not in c["hover"]
                             for c in est_cells)
    assert all(", measured)" in line[mcol]["hover"] for line in cells if line[mcol]["us"] is not None)
    # the copy's estimates are ort-cpu's times: each cell reads the estimate where the other reads the measurement
    assert [line[col]["us"] for line in cells] == [line[mcol]["us"] for line in cells]
    fig = figures.heatmap_figure(report, colour="time")
    assert any(x.endswith("<br>estimated") and x.startswith(EST) for x in fig.data[0].x)
    assert "estimated" in fig.data[0].colorbar.title.text
    bars = figures.time_by_op_type_figure(report)
    assert f"{EST} (estimated)" in bars.data[0].y and "ort-cpu" in bars.data[0].y


def test_where_the_time_goes_lists_estimates_apart_and_after_the_measured(measured):
    rows = time_rows(_estimated(measured))
    assert [r["target"] for r in rows] == ["ort-cpu", EST]
    est = rows[1]
    assert est["evidence"].startswith("estimated-compiler") and DEVICE in est["evidence"]
    assert "no runs" in est["timed µs"] and "median" not in est["evidence"]
    lines = cli_time_lines(_estimated(measured))
    measured_line = next(line for line in lines.splitlines() if line.startswith("time per node (measured"))
    estimated_line = next(line for line in lines.splitlines() if line.startswith("time per node (estimated"))
    assert "Ethos" not in measured_line and DEVICE in estimated_line
    assert lines.index(estimated_line) < lines.index(f"  {EST}")        # the target under its own heading


def test_an_estimated_fallback_kernel_is_its_own_column_and_ranks_after_measured(measured):
    report = _estimated(measured)
    for tid in ("ort-cpu", EST):             # both as accelerated targets, the same node left on the CPU on both
        report["targets"][tid].update(accelerated=True, accelerator="an NPU")
        node = next(n for n in report["targets"][tid]["graph"]["nodes"]
                    if (n.get("measured_us") or n.get("estimated_us")))
        node.update(fallback=True, fallback_reason="test")
    est_rows = fallback_rows(report, EST)
    assert est_rows[0]["kernel µs"] is None and est_rows[0]["kernel µs (estimated)"] is not None
    assert est_rows[0]["time evidence"].startswith("kernel estimated-compiler")
    m_rows = fallback_rows(report, "ort-cpu")
    assert "kernel µs (estimated)" not in m_rows[0] and m_rows[0]["kernel µs"] is not None
    # even when the estimate is far larger, a measured kernel ranks first
    est_rows[0]["kernel µs (estimated)"] = 1e9
    assert [r["target"] for r in sorted(est_rows + m_rows, key=fallback_rank)] == ["ort-cpu", EST]


def test_markdown_and_html_name_the_evidence_and_vela_s_figures(measured):
    report = _estimated(measured)
    md = report_markdown(report, full=True)
    measured_part = md.split("#### Where the time goes (measured)")[1].split("####")[0]
    estimated_part = md.split("#### Where the time goes (estimated-compiler)")[1].split("####")[0]
    assert "`ort-cpu`" in measured_part and EST not in measured_part and "Ethos" not in measured_part
    assert f"`{EST}`" in estimated_part and "nothing ran" in estimated_part
    assert "estimated-compiler (the vendor compiler's performance model" in md        # the evidence legend
    vela = md.split("#### Vela's estimate of each Ethos-U network (estimated-compiler)")[1].split("####")[0]
    assert "81.4" in vela and "23.2" in vela and "255,277" in vela and "27 / 1" in vela
    assert "#### Vela's estimate" in report_markdown(report)           # the brief comment keeps it too
    assert vela_rows(report)[0]["evidence"] == ev.ESTIMATED_COMPILER
    page = report_html(report)
    assert ">estimated-compiler</span>" in page.split("Where the time goes")[1].split("</h3>")[0]
    assert "Vela&#x27;s estimate of each Ethos-U network" in page or "Vela's estimate of each Ethos-U network" in page
    assert "Share of each target&#x27;s time" in page or "Share of each target's time" in page


def test_two_estimates_compare_exactly_2x_is_slower_half_a_percent_is_unchanged(measured):
    base = _estimated(measured)
    new = _estimated(measured, scale={0: 2.0, 1: 1.005})
    t = diff_reports(base, new)["targets"][EST]["time"]
    assert t["compared"] and t["evidence"] == ev.ESTIMATED_COMPILER
    assert [x["ratio"] for x in t["slower"]] == [2.0] and t["faster"] == []
    assert t["slower"][0]["evidence"] == ev.ESTIMATED_COMPILER
    lines = [line for tid, line in change_lines(diff_reports(base, new)) if tid == EST]
    assert any(line.startswith("slower: ") and "2.00×" in line and "estimated-compiler" in line
               and "measured" not in line for line in lines), lines
    faster = diff_reports(base, _estimated(measured, scale={0: 0.5}))["targets"][EST]["time"]
    assert [x["ratio"] for x in faster["faster"]] == [0.5] and faster["slower"] == []
    same = diff_reports(base, _estimated(measured, scale={0: 1.005}))
    assert same["targets"][EST]["time"]["slower"] == [] and same["targets"][EST]["time"]["faster"] == []
    assert "exactly" in diff_markdown(same)


def test_an_estimate_and_a_measurement_are_never_compared(measured):
    base = _estimated(measured)
    new = copy.deepcopy(base)
    new["targets"][EST] = copy.deepcopy(measured["targets"]["ort-cpu"])     # the same id, now measured
    d = diff_reports(base, new)
    t = d["targets"][EST]["time"]
    assert not t["compared"] and t["slower"] == []
    assert "measured" in t["why_not"] and "estimate" in t["why_not"]
    assert any(tid == EST and "not compared" in line for tid, line in time_notes(d))
    other_device = diff_reports(base, _estimated(measured, scale={0: 2.0}, device="Ethos-U85 (…)"))
    assert not other_device["targets"][EST]["time"]["compared"]
    assert "different devices" in other_device["targets"][EST]["time"]["why_not"]


def test_the_fleet_matrix_keeps_no_estimate_in_its_measured_time_column(measured):
    report = as_report(_estimated(measured))
    assert matrix_time(report.targets[EST]) is None
    assert matrix_time(report.targets["ort-cpu"])["evidence"] == ev.MEASURED
