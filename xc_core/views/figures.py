"""Plotly figures built from a Report, shared by the dashboard pages and the HTML report (no UI imports here), so
the figure a reviewer sees offline is the one the dashboard draws.

Each function takes the report (a Report, or its dict) and the page's parameters and returns a
`plotly.graph_objects.Figure`, or None when there is nothing to draw (the caller says why)."""
from __future__ import annotations

import math
from collections.abc import Mapping

import plotly.graph_objects as go

from ..report.types import LayerDrift, Report
from .rows import HEAT_CATEGORIES, heatmap_rows, not_compiled, plotly_text
from .time_evidence import is_estimated, time_word
from .typed_report import as_report

HEAT_COLORS = {"accelerator": "#1a9850", "accelerator (fused)": "#91cf60", "CPU": "#4575b4",
               "CPU (fused)": "#91bfdb", "CPU fallback": "#d73027", "unknown": "#fee08b", "not present": "#f0f0f0"}
MARGIN = dict(l=10, r=10, t=30, b=10)


# ---- heat map ---------------------------------------------------------------------------------------------
def heatmap_targets(report: Report | Mapping) -> list[str]:
    """Targets that produced a graph: the heat map's filled columns (the others are empty columns), whose evidence
    the page lists."""
    return [t for t, b in as_report(report).targets.items() if b.graph]


def heatmap_figure(report: Report | Mapping, *, by_module: bool = True, depth: int = 2, only_diff: bool = False,
                   only_fallbacks: bool = False, colour: str = "backend") -> go.Figure | None:
    """Rows are source modules (`depth` levels where the hierarchy branches) or source ops, columns every target,
    each cell what runs it (`colour="backend"`) or its share of the target's time, measured or a compiler's estimate
    (`colour="time"`); a
    target without a graph is an empty column labelled with its status and reason. None when no target has a
    graph or no row passes the filters."""
    report = as_report(report)
    labels, targets, cells = heatmap_rows(report, by_module=by_module, depth=depth)
    if not heatmap_targets(report):
        return None
    keep = []
    for i, line in enumerate(cells):
        cats = [c["category"] for c in line if c["category"] is not None]   # empty columns compare with nothing
        if only_diff and len(set(cats)) < 2:
            continue
        if only_fallbacks and "CPU fallback" not in cats:
            continue
        keep.append(i)
    if not keep:
        return None
    index = {c: i for i, c in enumerate(HEAT_CATEGORIES)}
    # A target without a graph is an empty column (None draws no cell) under a label that says why.
    z = [[index.get(cells[i][j]["category"]) for j in range(len(targets))] for i in keep]
    text = [[cells[i][j]["hover"] for j in range(len(targets))] for i in keep]
    missing = not_compiled(report)
    columns = [plotly_text(t) + (f"<br>{plotly_text(missing[t])}" if t in missing else "") for t in targets]
    if colour == "time":
        return _heatmap_time(report, targets, cells, keep, labels, text, columns, bool(missing))
    n = len(HEAT_CATEGORIES)
    scale = []
    for k, cat in enumerate(HEAT_CATEGORIES):  # a discrete colour scale: one flat band per category
        scale += [[k / n, HEAT_COLORS[cat]], [(k + 1) / n, HEAT_COLORS[cat]]]
    # tick labels are the model's module paths and the report's target ids: escaped (plotly renders some HTML)
    fig = go.Figure(go.Heatmap(z=z, x=columns, y=[plotly_text(labels[i]) for i in keep],
                               text=text,
                               hoverinfo="text",
                               colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=2, ygap=1,
                               colorbar=dict(tickvals=list(range(n)), ticktext=HEAT_CATEGORIES, title="runs on")))
    # The labels of empty columns take two slanted lines below the map: room for them, not rows squeezed.
    fig.update_layout(height=max(320, 22 * len(keep) + 120) + (120 if missing else 0),
                      yaxis=dict(autorange="reversed"), margin=MARGIN)
    return fig


def _heatmap_time(report: Report, targets, cells, keep, labels, text, columns, any_missing) -> go.Figure | None:
    """Each cell's share of its target's time (the column sums to the timed share of the run): where the time
    goes, comparable across targets whose CPUs and totals differ. Targets that time no node are blank. A target a
    compiler estimated (estimated-compiler) is a share of its own estimate, its column labelled "estimated"; no
    cell adds or ranks an estimate with a measurement (each column is a share of its own total)."""
    totals = [report.targets[t].node_times.timed_us or 0.0 for t in targets]
    if not any(totals):
        return None
    estimated = [is_estimated(report.targets[t].node_times) and bool(totals[j]) for j, t in enumerate(targets)]
    columns = [c + ("<br>estimated" if estimated[j] else "") for j, c in enumerate(columns)]
    z = [[(cells[i][j]["us"] / totals[j]) if totals[j] and cells[i][j].get("us") is not None else None
          for j in range(len(targets))] for i in keep]
    fig = go.Figure(go.Heatmap(z=z, x=columns, y=[plotly_text(labels[i]) for i in keep], text=text,
                               hoverinfo="text", colorscale="YlOrRd", zmin=0, zmax=max(
                                   (v for row in z for v in row if v is not None), default=1) or 1,
                               xgap=2, ygap=1, colorbar=dict(title=_share_title(report, targets, "<br>"),
                                                             tickformat=".0%")))
    fig.update_layout(height=max(320, 22 * len(keep) + 120) + (120 if any_missing else 0),
                      yaxis=dict(autorange="reversed"), margin=MARGIN)
    return fig


def time_targets(report: Report | Mapping) -> list[str]:
    """Targets whose compiled nodes have times: measured by their runtime, or estimated by their compiler."""
    return [t for t, b in as_report(report).targets.items() if b.node_times.timed_us]


def _share_title(report: Report, targets: list[str], gap: str = " ") -> str:
    """"share of the measured time", "… estimated time" (a compiler's performance model), or both words when the
    figure holds targets of each kind (each its own share: never one scale of time)."""
    kinds = {time_word(report.targets[t].node_times) for t in targets if report.targets[t].node_times.timed_us}
    if kinds == {"estimated"}:
        return f"share of the{gap}estimated time"
    if kinds == {"measured", "estimated"}:
        return f"share of its own time{gap}(measured, or estimated where marked)"
    return f"share of the{gap}measured time"


def time_by_op_type_figure(report: Report | Mapping, top: int = 6) -> go.Figure | None:
    """Per target, a bar of its time split by op type (the `top` largest, the rest as "other"), as shares: where
    the time goes, side by side. A target whose times a compiler estimated is labelled "(estimated)" on its bar.
    None when no target timed its nodes."""
    report = as_report(report)
    targets = time_targets(report)
    if not targets:
        return None
    shares: dict[str, list[float]] = {}
    for j, t in enumerate(targets):
        rows = report.targets[t].node_times.by_op_type
        for r in rows[:top]:
            shares.setdefault(r["key"], [0.0] * len(targets))[j] += r["share"]
        rest = sum(r["share"] for r in rows[top:])
        if rest:
            shares.setdefault("other", [0.0] * len(targets))[j] += rest
    order = sorted(shares, key=lambda k: (k == "other", -sum(shares[k])))
    # One colour per op type from a 24-colour qualitative palette (plotly's default repeats after 10), grey for
    # the rest, so one op type reads the same on every target's bar.
    from plotly.colors import qualitative
    palette = qualitative.Dark24
    colours = {k: "#bdbdbd" if k == "other" else palette[i % len(palette)] for i, k in enumerate(order)}
    bars = [plotly_text(t) + (" (estimated)" if is_estimated(report.targets[t].node_times) else "")
            for t in targets]
    fig = go.Figure([go.Bar(name=plotly_text(k), y=bars, x=shares[k], orientation="h",
                            marker_color=colours[k],
                            hovertemplate="%{y}: " + plotly_text(k) + " %{x:.1%}<extra></extra>") for k in order])
    fig.update_layout(barmode="stack", height=150 + 34 * len(targets), margin=MARGIN,
                      xaxis=dict(title=_share_title(report, targets), tickformat=".0%", range=[0, 1]),
                      yaxis=dict(autorange="reversed"), legend=dict(orientation="h", y=-0.45, traceorder="normal"))
    return fig


# ---- fusion -----------------------------------------------------------------------------------------------
def fusion_targets(report: Report | Mapping) -> list[str]:
    """Targets whose compiled graph was counted."""
    return [t for t, b in as_report(report).targets.items() if b.op_counts]


def fusion_counts_figure(report: Report | Mapping, targets: list[str] | None = None) -> go.Figure | None:
    """Compute ops before (captured graph) and after (each compiled graph), grouped per target. None when no
    target was counted."""
    report = as_report(report)
    targets = fusion_targets(report) if targets is None else targets
    if not targets:
        return None
    before = report.capture.op_count_before if report.capture else None
    fig = go.Figure([
        go.Bar(name="before (captured)", x=[plotly_text(t) for t in targets], y=[before] * len(targets),
               marker_color="#bbbbbb"),
        go.Bar(name="after (compiled)", x=[plotly_text(t) for t in targets],
               y=[report.targets[t].op_count_after for t in targets],
               marker_color="#1f77b4"),
    ])
    fig.update_layout(barmode="group", height=360, margin=MARGIN, yaxis_title="compute ops")
    return fig


# ---- drift ------------------------------------------------------------------------------------------------
def _drift_details(report: Report, tid: str, output: str) -> dict | None:
    m = report.targets[tid].drift.outputs.get(output)
    return m.details if m else None


def drift_histogram_figure(report: Report | Mapping, tid: str, output: str, atol: float = 1e-3) -> go.Figure | None:
    """Histogram of log10 |target − reference| for one output, with the atol line. None without a histogram
    (an output that failed, or every element exactly equal)."""
    report = as_report(report)
    details = _drift_details(report, tid, output)
    h = (details or {}).get("histogram") or {}
    if not h.get("counts"):
        return None
    centers = [(a + b) / 2 for a, b in zip(h["log10_edges"][:-1], h["log10_edges"][1:])]
    fig = go.Figure(go.Bar(x=centers, y=h["counts"], marker_color="#1f77b4"))
    fig.add_vline(x=math.log10(atol) if atol > 0 else min(centers), line_dash="dash", line_color="red",
                  annotation_text="atol")
    # |target − what it was compared with|: the reference, or the route's program for a target that compiled it.
    against = report.targets[tid].drift.reference or "reference"
    fig.update_layout(height=320, xaxis_title=plotly_text(f"log10 |{tid} − {against}|"), yaxis_title="elements",
                      margin=MARGIN)
    return fig


def drift_scatter_figure(report: Report | Mapping, tid: str, output: str, *, webgl: bool = True) -> go.Figure | None:
    """Reference (what the target was compared with) vs target values of a seeded sample of one output's elements,
    with y = x. webgl=False draws SVG (at most drift.SCATTER_POINTS points), for a file opened where WebGL may be
    off. None without a sample."""
    report = as_report(report)
    sc = (_drift_details(report, tid, output) or {}).get("scatter") or {}
    if not sc.get("reference"):
        return None
    trace = go.Scattergl if webgl else go.Scatter
    fig = go.Figure(trace(x=sc["reference"], y=sc["target"], mode="markers", marker=dict(size=3, color="#ff7f0e")))
    lo, hi = min(sc["reference"]), max(sc["reference"])
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", line=dict(color="gray", dash="dot"),
                             name="y = x"))
    # What the target was compared with: the reference, or the route's program for a target that compiled it.
    against = report.targets[tid].drift.reference or "reference"
    fig.update_layout(height=320, xaxis_title=plotly_text(against), yaxis_title=plotly_text(tid), showlegend=False,
                      margin=MARGIN)
    return fig


def layer_drift_series(report: Report | Mapping) -> dict[str, dict]:
    """Targets whose intermediate values were compared, with their layer_drift block as report.json holds it."""
    return {t: ld.to_dict() for t, ld in _layer_drift_blocks(as_report(report)).items()}


def _layer_drift_blocks(report: Report) -> dict[str, LayerDrift]:
    return {t: b.layer_drift for t, b in report.targets.items() if b.layer_drift.points}


def layer_drift_figure(report: Report | Mapping) -> go.Figure | None:
    """rel L2 vs the reference at each module boundary along the depth of the captured graph, one line per
    target through its verified points, with the divergence threshold. Points that failed verification
    (analysis/layer_drift.py) are not on the line: grey crosses, the failed check on hover. None when no target
    exposed intermediate values."""
    layer = _layer_drift_blocks(as_report(report))
    if not layer:
        return None
    fig = go.Figure()
    for t, ld in layer.items():
        # A point verified (analysis/layer_drift.py) is on the line; an older report's points read as verified.
        pts = [p for p in ld.points if p.verified]
        fig.add_trace(go.Scatter(x=[p.depth for p in pts], y=[max(p.rel_l2 or 0, 1e-12) for p in pts],
                                 mode="lines+markers", name=plotly_text(t),
                                 text=[plotly_text(p.module_path) for p in pts],
                                 hovertemplate="%{text}<br>rel L2 %{y:.2e}<extra>" + plotly_text(t) + "</extra>"))
        apart = [p for p in ld.points if not p.verified and p.rel_l2 is not None]
        if apart:
            fig.add_trace(go.Scatter(
                x=[p.depth for p in apart], y=[max(p.rel_l2, 1e-12) for p in apart], mode="markers",
                marker=dict(symbol="x", size=9, color="gray"), name=plotly_text(f"{t}: unverified, not a finding"),
                text=[plotly_text(f"{p.module_path} — {p.check} check: {p.unverified_reason}") for p in apart],
                hovertemplate="%{text}<br>rel L2 %{y:.2e}<extra></extra>"))
    threshold = next(iter(layer.values())).threshold_rel_l2
    fig.add_hline(y=threshold, line_dash="dash", line_color="red", annotation_text="divergence threshold")
    fig.update_layout(height=380, yaxis_type="log", xaxis_title="depth (op index in the captured graph)",
                      yaxis_title="rel L2 vs reference", margin=MARGIN)
    return fig


def layer_drift_attribution_marks(fig: go.Figure, report: Report | Mapping) -> go.Figure:
    """Marks on `layer_drift_figure`'s lines where an attributed drift jump ends (analysis/drift_attribution.py):
    one marker per jump, its share and sentence on hover, the evidence kind in the legend. Returns `fig`."""
    for t, ld in _layer_drift_blocks(as_report(report)).items():
        att = ld.attribution
        jumps = att.jumps
        if not jumps:
            continue
        fig.add_trace(go.Scatter(
            x=[j.depth for j in jumps], y=[max(j.rel_l2 or 0, 1e-12) for j in jumps], mode="markers",
            marker=dict(symbol="star", size=14, line=dict(width=1, color="black")),
            name=plotly_text(f"{t}: attributed jump ({att.evidence})"),
            text=[plotly_text(f"{round(100 * j.share)} % · {j.kind} · {j.sentence}") for j in jumps],
            hovertemplate="%{text}<extra></extra>"))
    return fig
