"""One self-contained HTML file of a run, for reviewers who get it as a CI artifact and open it offline.

Everything is inlined, nothing is fetched from anywhere (no font, stylesheet, script or CDN). The first screen is
text and tables and shows at once; figures cost time, so none is drawn at load. Each figure's JSON sits inert in a
`<script type="application/json">` (the plotly template they share, once), and a small script draws a figure when
it comes near the viewport (IntersectionObserver) — scrolled to, jumped to from the contents, or in a `<details>`
the reader opened. plotly.js itself is inlined once, gzip-compressed and base64-encoded (4.8 MB of JavaScript
becomes 1.9 MB), and is unpacked (the browser's DecompressionStream) and run only when the first figure is drawn.
The figures are the dashboard's own (xc_core.figures and xc_core.layout), at the pages' default settings. Every
string from the report is escaped — as HTML in the page, as JSON safe inside a <script> in the figures' data: model,
module and node names come from untrusted uploads. A block the report lacks (no reference, a failed target, no
accelerator, no captured graph) leaves its section with a sentence saying why, never an exception.
"""
from __future__ import annotations

import base64
import functools
import gzip
import html
import itertools
import json
import re

import plotly.io as pio
from plotly.offline import get_plotlyjs

from .. import evidence as ev
from ..analysis.common_cause import NOT_RUN, cause_body, cause_head
from ..analysis.drift import output_flags, passes_at
from ..analysis.drift_attribution import attribution_rows
from ..analysis.fusion_diff import not_fired_by_pattern
from ..errors import visible
from ..report.types import DriftOutput, Report
from ..views import figures, topology
from ..views import graph_layout as topo
from ..views.fallbacks import accelerated_targets, fallback_rows, split_summary
from ..views.isolation import (
    above_gate_rows,
    culprit_entries,
    isolated_targets,
    isolation_figure,
    runs_words,
    trial_rows,
)
from ..views.compute_share import WEIGHTED_COLUMN
from ..views.target_counts import SPLIT_COLUMN, count_check, count_findings
from ..views.target_groups import target_groups
from ..views.rows import (
    catalogue_rows,
    divergence_counts,
    divergence_rows,
    drift_flags,
    fmt_sci,
    layout_move_rows,
    layout_summary_rows,
    onnx_route_lines,
    onnx_route_rows,
    overview_rows,
    stage_matrix,
    stage_targets,
    time_rows,
)
from ..views.time_evidence import is_estimated, timed_targets_by_kind, vela_rows
from ..views.typed_report import as_report

SECTIONS = [("overview", "Overview"), ("heatmap", "Heat map"), ("fusion", "Fusion"), ("stages", "Stages"),
            ("drift", "Drift"), ("checklist", "Checklist"), ("fallbacks", "Fallbacks"), ("topology", "Topology")]
EVIDENCE_HELP = ev.HELP
EVIDENCE_COLORS = {ev.MEASURED: "#1a7f37", ev.REPORTED: "#0969da", ev.PREDICTED_RUNTIME: "#bc4c00",
                   ev.PREDICTED_RULES: "#8250df", ev.EMULATED: "#6e7781", ev.ESTIMATED_COMPILER: "#9a6700"}
VERDICT_LABEL = {"pass": "pass", "warn": "warn", "fail": "FAIL", "not applicable": "n/a"}
DRIFT_ATOL = DRIFT_RTOL = 1e-3          # the drift page's default tolerances
PLOT_CONFIG = {"displaylogo": False, "responsive": True}
SCROLL_ROWS = 20
# Tables with a column per target (Fusion patterns, Stages, the Checklist grid) hold at most this many targets
# each, grouped by toolchain family: 15 side by side ran thousands of pixels wide; eight fit the 1280 px page.
TARGET_COLUMNS = 8
DEFAULT_FIG_HEIGHT = 450                # plotly's, for a figure whose layout sets none
# The Overview's targets table keeps the columns every target has; the family-specific ones get a table of their own,
# with only the targets they apply to, so no table is wider than the page.
TARGET_COLS = ("target", "status", "ops", "fused groups", "precision", "worst drift (rel L2)", "evidence",
               "checklist")
FAMILY_TABLES = (("Accelerated targets: where their compiled ops run",
                  (SPLIT_COLUMN, WEIGHTED_COLUMN, "partitions", "runtime's own count", "weights on the accelerator",
                   "as shipped (dynamic dims)", "ORT verdict", "latency cliff (est.)")),
                 ("Core ML: predicted compute units", ("Core ML units", "casts", "MIL ops")))

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1f2328;
       margin: 0; background: #fff; line-height: 1.45; font-size: 14px; }
main { max-width: 1280px; margin: 0 auto; padding: 16px 28px 64px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 20px; margin: 40px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #d0d7de; }
h3 { font-size: 16px; margin: 22px 0 6px; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px;
       background: #f3f4f6; padding: 1px 4px; border-radius: 4px; }
nav.toc { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 8px 14px; margin: 12px 0; }
nav.toc a { margin-right: 16px; color: #0969da; text-decoration: none; }
nav.toc a:hover { text-decoration: underline; }
.meta { color: #59636e; }
.caption { color: #59636e; font-size: 12.5px; margin: 4px 0 12px; }
.empty { background: #fff8c5; border: 1px solid #d4a72c66; border-radius: 6px; padding: 8px 12px; }
.error { background: #ffebe9; border: 1px solid #ff818266; border-radius: 6px; padding: 8px 12px; }
.scroll { overflow-x: auto; margin: 6px 0; }
table { border-collapse: collapse; font-size: 12.5px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
/* A long node name, path or target variant ("lowered_module_2/dim_order_ops__clone_dim_order_default") may break
   anywhere rather than widen its table past the page. */
th, td { overflow-wrap: anywhere; }
th { background: #f6f8fa; position: sticky; top: 0; }
tr:nth-child(even) td { background: #fafbfc; }
table.fit { width: 100%; }
.num, .tid { white-space: nowrap; }
.xc-fig { width: 100%; position: relative; }
.xc-fig .wait { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center;
                color: #59636e; background: #f6f8fa; border: 1px dashed #d0d7de; border-radius: 6px;
                font-size: 12.5px; }
details.fig { border: 1px solid #d0d7de; border-radius: 6px; padding: 4px 10px; margin: 6px 0; }
details.fig > summary { cursor: pointer; }
.badge { display: inline-block; color: #fff; border-radius: 10px; padding: 0 8px; font-size: 11.5px;
         white-space: nowrap; }
.v-pass { color: #1a7f37; font-weight: 600; } .v-warn { color: #bc4c00; font-weight: 600; }
.v-fail { color: #cf222e; font-weight: 700; } .v-na { color: #6e7781; }
.nowrap { white-space: nowrap; display: inline-block; margin-right: 6px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.grid2 > div { min-width: 0; }
.graph { overflow: auto; max-height: 900px; border: 1px solid #d0d7de; border-radius: 6px; }
.graph svg { display: block; }
.scroll.tall { max-height: 520px; overflow-y: auto; width: fit-content; max-width: 100%;
               border-bottom: 1px solid #d0d7de; }
dl.legend dt { float: left; clear: left; width: 150px; } dl.legend dd { margin: 0 0 4px 160px; }
"""


def _e(x) -> str:
    """Escaped text of a report value (None shows as a dash); characters that would act rather than show (a
    right-to-left override, a terminal escape) are written as escapes (errors.visible)."""
    return "—" if x is None else html.escape(visible(x), quote=True)


def _badge(kind: str | None) -> str:
    if not kind:
        return ""
    return (f'<span class="badge" style="background:{EVIDENCE_COLORS.get(kind, "#6e7781")}" '
            f'title="{_e(EVIDENCE_HELP.get(kind, ""))}">{_e(kind)}</span>')


def _verdict(v: str | None) -> str:
    cls = {"pass": "v-pass", "warn": "v-warn", "fail": "v-fail"}.get(v or "", "v-na")
    return f'<span class="{cls}">{_e(VERDICT_LABEL.get(v, v))}</span>'


def _note(text: str, cls: str = "empty") -> str:
    return f'<p class="{cls}">{text}</p>'


def _caption(text: str) -> str:
    return f'<p class="caption">{text}</p>'


def _table(rows: list[dict], html_cols: tuple[str, ...] = (), scroll_over: int = SCROLL_ROWS, cls: str = "") -> str:
    """A table of dict rows (columns: the union of keys in first-seen order). Cells are escaped, except the
    columns in html_cols, which the caller built from escaped parts. Over `scroll_over` rows it scrolls in a box
    of its own (header kept in view), so one long table does not push the next sections pages down."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{r.get(c, '—') if c in html_cols else _e(r.get(c, '—'))}</td>"
                                    for c in cols) + "</tr>" for r in rows)
    tall = len(rows) > scroll_over
    klass = f' class="{cls}"' if cls else ""
    return (f'<div class="scroll{" tall" if tall else ""}"><table{klass}><thead><tr>{head}</tr></thead><tbody>{body}'
            "</tbody></table></div>" + (_caption(f"{len(rows)} rows: scroll the table.") if tall else ""))


def _target_evidence(report: Report, block: str) -> str:
    """ "tid badge · tid badge" for a per-target block's evidence key (graph, op_counts, drift...)."""
    parts = [f"<code>{_e(t)}</code> {_badge(getattr(b, block).evidence)}"
             for t, b in report.targets.items() if getattr(b, block).evidence]
    return " · ".join(parts)


class _Figures:
    """Figure → an empty div (plotly draws into it once it scrolls into view) and its inert JSON, with ids numbered
    in document order so the output is deterministic. The plotly template the figures share is kept once
    (`templates`) instead of in every figure."""

    def __init__(self):
        self.count = 0
        self.templates: dict[str, str] = {}      # template JSON → its element id
        self.data: list[str] = []                # each figure's <script type="application/json">

    def div(self, fig, name: str) -> str:
        self.count += 1
        # The id lands in attributes and a selector: keep only safe characters of a name that may carry a target id.
        fid = f"fig-{self.count}-{re.sub(r'[^A-Za-z0-9_-]', '_', name)}"
        # plotly's encoder (numpy arrays, dates); a NaN or infinity it lets through becomes null, as JSON.parse wants.
        spec = _visible_strings(json.loads(pio.to_json(fig, validate=False), parse_constant=lambda _: None))
        layout = spec.get("layout") or {}
        template = layout.pop("template", None)
        out = {"data": spec.get("data") or [], "layout": layout, "config": PLOT_CONFIG}
        if template is not None:
            key = json.dumps(template, sort_keys=True, separators=(",", ":"))
            out["template"] = self.templates.setdefault(key, f"xc-template-{len(self.templates) + 1}")
        height = layout.get("height") or DEFAULT_FIG_HEIGHT
        self.data.append(f'<script type="application/json" id="{fid}-json">{_inert_json(out)}</script>')
        return (f'<div id="{fid}" class="xc-fig" data-state="waiting" style="height:{int(height)}px">'
                '<span class="wait">figure: drawn when it comes into view</span></div>')

    def data_scripts(self) -> str:
        """Every figure's JSON and the templates, for the end of the body (after the text the reader sees first)."""
        return "".join(self.data) + "".join(
            f'<script type="application/json" id="{tid}">{_inert_json(json.loads(key))}</script>'
            for key, tid in self.templates.items())


def _visible_strings(value):
    """A figure's data with every string as the page shows text (errors.visible): hover labels, axis categories and
    annotations carry model names, and a right-to-left override there would reorder them as on the page."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, list):
        return [_visible_strings(v) for v in value]
    if isinstance(value, dict):
        return {k: _visible_strings(v) for k, v in value.items()}
    return value


def _inert_json(value) -> str:
    """JSON safe inside a <script> element: "<", ">" and "&" only occur in JSON strings, where their \\u escapes
    mean the same, so no `</script>` or `<!--` in a name from the upload can end the element early."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@functools.lru_cache(maxsize=1)
def _plotly_packed() -> str:
    """plotly.js, gzip (mtime 0, so the output is deterministic) and base64: 1.9 MB instead of 4.8 MB."""
    return base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")


# Draws each figure when it nears the viewport. A figure in a closed <details> has no box, so it is drawn when the
# details is opened; one far down the page, when the reader gets there. plotly.js is unpacked and run once, for the
# first figure drawn.
LOADER_JS = """
(function () {
  var figs = document.querySelectorAll('.xc-fig[data-state="waiting"]');
  var plotly = null;
  function loadPlotly() {
    if (plotly) return plotly;
    var packed = document.getElementById('xc-plotly-js').textContent.trim();
    if (typeof DecompressionStream === 'undefined') {
      plotly = Promise.reject(new Error('this browser cannot unpack the figures (it has no DecompressionStream)'));
      return plotly;
    }
    var bin = atob(packed), bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    plotly = new Response(stream).text().then(function (code) {
      var s = document.createElement('script');
      s.textContent = code;
      document.head.appendChild(s);
      return window.Plotly;
    });
    return plotly;
  }
  function fail(div, e) {
    div.dataset.state = 'error';
    var note = div.querySelector('.wait') || div.appendChild(document.createElement('span'));
    note.className = 'wait';
    note.textContent = 'figure not drawn: ' + (e && e.message || e);
  }
  function draw(div) {
    div.dataset.state = 'drawing';
    div.querySelector('.wait').textContent = 'drawing…';
    loadPlotly().then(function (Plotly) {
      var spec = JSON.parse(document.getElementById(div.id + '-json').textContent);
      if (spec.template) spec.layout.template = JSON.parse(document.getElementById(spec.template).textContent);
      div.textContent = '';
      return Plotly.newPlot(div, spec.data, spec.layout, spec.config);
    }).then(function () { div.dataset.state = 'drawn'; }, function (e) { fail(div, e); });
  }
  if (!('IntersectionObserver' in window)) { figs.forEach(draw); return; }
  var seen = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting) { seen.unobserve(e.target); draw(e.target); }
    });
  }, {rootMargin: '300px 0px'});
  figs.forEach(function (d) { seen.observe(d); });
})();
"""


def _tid(tid: str) -> str:
    """An escaped target id that wraps only after "[" and "," (a variant's options), never at a hyphen of the id
    itself: a long variant does not widen a table, `openvino-cpu` does not break in two."""
    return "<wbr>".join(f'<span class="tid">{_e(part)}</span>' for part in re.split(r"(?<=[\[,])", tid) if part)


# ---- sections -------------------------------------------------------------------------------------------------
def _overview(report: Report, figs: _Figures) -> str:
    src, ref = report.source, report.reference
    # No reference (a compiled artifact): its id shows as a dash, and no status.
    ref_id, ref_status = (ref.id, ref.status) if ref else (None, None)
    out = [f'<p class="meta">Source <b>{_e(src.name)}</b> · {_e(src.kind)} · sha256 '
           f'<code>{_e(src.sha256[:12])}</code> · reference <code>{_e(ref_id)}</code>'
           + (f" ({_e(ref_status)})" if ref_status not in (None, "ok") else "")
           + f' · xc {_e(report.xc_version)} · created {_e(report.created_at)}</p>']
    if not ref:
        out.append(_note("No reference run: the source is a compiled artifact, so there are no drift figures."))
    elif ref.status == "error" and not any(c.reference_failed for c in report.common_causes):
        out.append(_note(f"The reference failed: {_e(ref.error)}", "error"))
    # A cause several targets share, said once (analysis/common_cause.py); the targets it stopped are not blamed.
    for cause in report.common_causes:
        stored = cause.to_dict()        # the wording (analysis/) reads a cause as report.json holds it
        out.append(_note(f"<b>{_e(cause_head(stored))}</b> {_badge(cause.evidence)}: {_e(cause_body(stored))}",
                         "error"))
    # Before any target's figure: the route's own error (xc's, said once) and what the drift figures cannot tell.
    route = onnx_route_lines(report)
    if route:
        out.append(f"<h3>ONNX → PyTorch route {_badge('measured')}</h3>"
                   + "".join(_caption(_e(line)) for line in route))
        rows = onnx_route_rows(report)
        if rows:
            out.append(_table(rows, cls="fit"))
    for flag in drift_flags(report):
        out.append(_note(_e(flag), "error"))
    out.append("<h3>Evidence kinds</h3>")
    out.append('<dl class="legend">' + "".join(f"<dt>{_badge(k)}</dt><dd>{_e(EVIDENCE_HELP[k])}</dd>"
                                                 for k in ev.ALL) + "</dl>")
    out.append("<h3>Targets</h3>")
    if not report.targets:
        out.append(_note("The report has no target."))
        return "".join(out)
    checks = report.checklist.targets
    rows = overview_rows(report)
    main = []
    for row in rows:
        items = checks.get(row["target"]) or []
        counts = {v: sum(i.verdict == v for i in items) for v in VERDICT_LABEL}
        evidence = report.targets[row["target"]].evidence.items()
        cells = {c: _e(row.get(c, "—")) for c in TARGET_COLS}
        cells.update(target=_tid(row["target"]),
                     ops=f'<span class="num">{_e(row.get("ops"))}</span>',
                     evidence=" ".join(f'<span class="nowrap">{_e(k)} {_badge(v)}</span>'
                                       for k, v in evidence) or "—",
                     checklist=" · ".join(f"{n} {_verdict(v)}" for v, n in counts.items() if n)     # word + colour
                     or "no checklist")
        main.append(cells)
    out.append(_table(main, html_cols=TARGET_COLS, cls="fit"))
    out.append(_caption("One row per target. Ops: compute ops of the captured (source) graph → of the target's "
                        "compiled graph. The evidence column says how each block was obtained; the checklist column "
                        "counts the verdicts of the Checklist section."))
    for tid, finding in count_findings(report):     # a runtime's own count xc's placement does not match
        out.append(_note(f"<code>{_e(tid)}</code> {_e(finding)}", "error"))
    for title, cols in FAMILY_TABLES:
        family = [{"target": _tid(r["target"]), **{c: _e(r.get(c, "—")) for c in cols}}
                  for r in rows if any(c in r for c in cols)]
        if family:
            out.append(f"<h3>{_e(title)}</h3>" + _table(family, html_cols=("target", *cols), cls="fit"))
    timed = time_rows(report)
    if timed:
        # Measured and estimated times in tables of their own: one table never ranks an estimate among measurements.
        measured = [r for r in timed if not is_estimated(report.targets[r["target"]].node_times)]
        estimated = [r for r in timed if is_estimated(report.targets[r["target"]].node_times)]
        kinds = ([ev.MEASURED] if measured else []) + ([ev.ESTIMATED_COMPILER] if estimated else [])
        out.append(f"<h3>Where the time goes {' '.join(_badge(k) for k in kinds)}</h3>")
        fig = figures.time_by_op_type_figure(report)
        if fig is not None:
            out.append(figs.div(fig, "time-by-op"))
        if measured:
            out.append(_table(measured, cls="fit"))
            out.append(_caption("Each compiled node's median time over the profiled runs, as its runtime's profiler "
                                "measured it on this host's CPU (not the device's): which ops dominate on which "
                                "target, not the device's latency."))
        if estimated:
            out.append(_table(estimated, cls="fit"))
            out.append(_caption(f"{_badge(ev.ESTIMATED_COMPILER)} Each compiled node's time as its compiler's "
                                "performance model estimates it for the device it targets (Vela for Ethos-U): "
                                "nothing ran, so no runs and no spread — not comparable with a measured time."))
    vela = vela_rows(report)
    if vela:
        out.append(f"<h3>Vela's estimate of each Ethos-U network {_badge(ev.ESTIMATED_COMPILER)}</h3>")
        out.append(_table(vela, cls="fit"))
        out.append(_caption("Vela's own summary of the command stream it built per delegate: the SRAM and flash it "
                            "uses, its cycles and MACs, the time they take at the modelled clock, and the operators "
                            "it put on the NPU and left on the CPU. Its performance model's figures: no NPU ran."))
    from .accuracy_section import html_section
    out.append(html_section(report, _e, _badge, _table))     # --data: task accuracy on the run's dataset
    from .cost_section import html_section as cost_section
    out.append(cost_section(report, _e, _badge, _table))     # memory, size, load / inference time on this host
    failed = [(t, b) for t, b in report.targets.items() if b.status != "ok"]
    covered = report.covered_targets()
    for tid, b in failed:
        if tid in covered:
            out.append(_caption(f"<code>{_e(tid)}</code> {_e(b.status)}: {NOT_RUN}"))
            continue
        out.append(_note(f"<code>{_e(tid)}</code> {_e(b.status)}"
                         + (f" at {_e(b.error_stage)}" if b.error_stage else "")
                         + f": {_e(b.error or 'no error text')}", "error"))
    return "".join(out)


def _heatmap(report: Report, figs: _Figures) -> str:
    targets = figures.heatmap_targets(report)
    if not targets:
        return _note("No target produced a graph, so there is nothing to map.")
    fig = figures.heatmap_figure(report)
    if fig is None:
        return _note("No source-op alignment in this report (no captured framework graph to align the compiled "
                     "graphs to, as for a compiled artifact).")
    return (_caption("Rows: source modules two levels down where the module tree branches (a wrapper with one "
                     "child is no level of its own); columns: targets; each cell what runs it (a module shows its "
                     "worst op: a CPU fallback anywhere in it shows). Hover a cell for the ops and the fallback "
                     "reason.")
            + figs.div(fig, "heatmap")
            + _caption("Evidence per target: " + _target_evidence(report, "graph"))
            + _heatmap_time(report, figs))


def _heatmap_time(report: Report, figs: _Figures) -> str:
    fig = figures.heatmap_figure(report, colour="time")
    if fig is None:
        return ""
    measured, estimated = timed_targets_by_kind(report)
    if not estimated:
        return (f"<h3>Share of the measured time {_badge('measured')}</h3>"
                + _caption("The same rows, each cell its share of the target's measured time (the runtime's profiler "
                           "on this host's CPU); a compiled node counts in the first row that carries it.")
                + figs.div(fig, "heatmap-time"))
    kinds = ([ev.MEASURED] if measured else []) + [ev.ESTIMATED_COMPILER]
    return (f"<h3>Share of each target's time {' '.join(_badge(k) for k in kinds)}</h3>"
            + _caption("The same rows, each cell its share of its own target's time: measured by the runtime's "
                       "profiler on this host's CPU, or, in a column marked estimated ("
                       + ", ".join(f"<code>{_e(t)}</code>" for t in estimated)
                       + "), the compiler's estimate for its device, nothing ran. A compiled node counts in the first "
                       "row that carries it.")
            + figs.div(fig, "heatmap-time"))


def _fusion(report: Report, figs: _Figures) -> str:
    targets = figures.fusion_targets(report)
    out = []
    if not targets:
        out.append(_note("No target produced a graph, so no op counts."))
    else:
        out.append(figs.div(figures.fusion_counts_figure(report, targets), "fusion-counts"))
        out.append(_caption("Before: compute ops of the captured framework graph"
                            + ("" if report.capture else " (none captured: no bar)")
                            + ". After: compute ops of each compiled graph (layout reorders, casts and constants "
                            "are counted apart). Evidence: " + _target_evidence(report, "op_counts")))
    matrix = report.fusion_matrix
    out.append("<h3>Fusion patterns (in source ops) and where they fired</h3>")
    if not matrix:
        out.append(_note("No fusion matrix: the report has no captured graph to compare the targets' fusions on."))
        return "".join(out)
    if matrix.patterns:
        cols = list(dict.fromkeys(targets + [t for p in matrix.patterns for t in p["targets"]]))
        groups = target_groups(cols, TARGET_COLUMNS)
        for title, members in groups:
            out.append((f"<h3>{_e(title)}</h3>" if len(groups) > 1 else "")
                       + _table([{"pattern": p["pattern"], **{t: p["targets"].get(t, 0) for t in members}}
                                 for p in matrix.patterns]))
        out.append(_caption("Instances of each fused source-op pattern per target. Evidence: "
                            + _badge(matrix.evidence)))
    else:
        out.append(_note("No fusions on any target."))
    out.append("<h3>Fusions each compiler implements that did not fire</h3>")
    failed = catalogue_rows(report, only_failed=True)
    if failed:
        out.append(_table(failed))
        out.append(_caption("Places where a fusion from the target's own compiler catalogue could apply and did "
                            "not: blocked (an intermediate tensor has a second consumer or is a model output) or "
                            "missed. Evidence: " + _target_evidence(report, "fusions")))
    else:
        out.append(_note("Every catalogued fusion that was possible fired on every target."))
    out.append("<h3>Fused on one target, not on another (information)</h3>")
    missed = not_fired_by_pattern(matrix.to_dict())     # analysis/ reads the matrix as report.json holds it
    if missed:
        # One row per pattern and reason, listing the targets it missed on: the report has one per target.
        grouped: dict[tuple, dict] = {}
        for m in missed:
            key = (m["pattern"], tuple(m["fired_on"]), m["instances"], m.get("reason"), tuple(m["example"]))
            grouped.setdefault(key, {"pattern": m["pattern"], "did not fire on": [], "fired on": ", ".join(
                m["fired_on"]), "instances": m["instances"], "reason": m.get("reason") or "—",
                "example source ops": ", ".join(m["example"])})["did not fire on"].append(m["missing_on"])
        rows = [{**g, "did not fire on": ", ".join(g["did not fire on"])} for g in grouped.values()]
        out.append(_table(rows))
        out.append(_caption("Compilers implement different fusions: a group of source ops one target fused into "
                            "one node, kept in separate nodes on another — with the compiler's reason where it gives one (targets with the same reason "
                            "share a row). Evidence: " + _badge(matrix.evidence)))
    else:
        out.append(_note("Every fusion that fired on one target fired on the others."))
    return "".join(out)


PASS_COL = f"pass @ atol=rtol={DRIFT_ATOL:g}"


def _metric_row(tid: str, name: str, m: DriftOutput, evidence: str | None, against: str | None = None) -> dict:
    """One row of the drift table, as the drift page builds it at its default tolerances (cells are HTML): a pass
    against a constant reference is "not informative", a figure beyond any plausible range "implausible"."""
    if m.error is not None:
        return {"target": _e(tid), "output": _e(name), "against": _e(against), PASS_COL: _verdict("fail"),
                "error": _e(m.error), "evidence": _badge(evidence)}
    ok = passes_at(m.details, DRIFT_ATOL, DRIFT_RTOL) if m.details else False
    not_informative, bad = output_flags(m.to_dict())     # analysis/ reads the output as report.json holds it
    row = {"target": tid, "output": name, "against": against or "—",
           "max abs": fmt_sci(m.max_abs), "mean abs": fmt_sci(m.mean_abs),
           "rel L2": fmt_sci(m.rel_l2), "cosine": f"{m.cosine:.6f}" if m.cosine is not None else "—",
           "SNR dB": f"{m.snr_db:.1f}" if m.snr_db is not None else "—" if not_informative else "∞",
           "min atol": fmt_sci(m.min_atol), "min rtol": fmt_sci(m.min_rtol),
           "check": f"implausible: {bad}" if bad else f"not informative: {not_informative}" if not_informative else ""}
    if bad:
        verdict = _verdict("fail") + " implausible"
    elif not_informative and ok:
        verdict = _verdict("warn") + " not informative"
    else:
        verdict = _verdict("pass" if ok else "fail")
    cells = {k: _e(v) for k, v in row.items()}
    return {**{k: cells.pop(k) for k in ("target", "output", "against")}, PASS_COL: verdict, **cells,
            "evidence": _badge(evidence)}


def _drift(report: Report, figs: _Figures) -> str:
    drift = {t: b.drift for t, b in report.targets.items() if b.drift}
    targets = list(drift)
    if not targets:
        return _note("No drift figures: " + ("this source has no reference (a compiled artifact)."
                                             if not report.reference else "no target ran."))
    out = [_note(_e(flag), "error") for flag in drift_flags(report)]      # what the figures below cannot tell
    rows = [_metric_row(tid, name, m, drift[tid].evidence, drift[tid].reference)
            for tid in targets for name, m in drift[tid].outputs.items()]
    if rows:
        out.append(_table(rows, html_cols=tuple(dict.fromkeys(k for r in rows for k in r))))
    else:
        out.append(_note("No output was compared."))
    assumptions = [f"<code>{_e(t)}</code> {_e(drift[t].assumption)}" for t in targets if drift[t].assumption]
    out.append(_caption(f"Pass: |target − reference| ≤ atol + rtol·|reference| everywhere (np.isclose), at the "
                        f"dashboard's default atol = rtol = {DRIFT_ATOL:g}. min atol / min rtol: the smallest "
                        "tolerance that passes with the other at 0 (as Polygraphy reports them)."
                        + (" Assumptions: " + " · ".join(assumptions) if assumptions else "")))

    out.append("<h3>Error distribution of each target's worst output</h3>")
    out.append(_caption("Open a target to draw its histogram and scatter."))
    for tid in targets:
        d = drift[tid]
        name = (d.worst or {}).get("output")
        m = d.outputs.get(name) or DriftOutput(null=True)
        head = f"<p><b>{_e(tid)}</b> · output <code>{_e(name)}</code> {_badge(d.evidence)}</p>"
        summary = (f"<summary><b>{_e(tid)}</b> · output <code>{_e(name)}</code> {_badge(d.evidence)} · "
                   f"rel L2 {_e(fmt_sci(m.rel_l2))}</summary>")
        if d.failed:
            out.append(head + _note("Emulation failed (xc's), no figures.", "error"))
            continue
        if name is None or not m.details:
            why = m.error or ("no output was compared" if name is None else "no element-wise details")
            out.append(head + _note(f"No distribution: {_e(why)}."))
            continue
        hist = figures.drift_histogram_figure(report, tid, name, DRIFT_ATOL)
        scatter = figures.drift_scatter_figure(report, tid, name, webgl=False)
        h, sc = m.details["histogram"], m.details["scatter"]
        left = (figs.div(hist, f"drift-hist-{tid}") if hist is not None
                else _note("Every element equals the reference exactly: no error to plot."))
        right = figs.div(scatter, f"drift-scatter-{tid}") if scatter is not None else _note("No sampled element.")
        # Closed: two figures per target would make the page screens long; the table above has the numbers.
        out.append('<details class="fig">' + summary + f'<div class="grid2"><div>{left}'
                   + _caption(f"{_e(h.get('exact'))} element(s) exactly equal to the reference; dashed line: "
                              f"atol {DRIFT_ATOL:g}.")
                   + f"</div><div>{right}"
                   + _caption(f"{sc.get('sampled', 0):,} of {sc.get('total', 0):,} elements (seeded sample), "
                              "reference vs target, y = x dotted.") + "</div></div></details>")

    out.append("<h3>Per-layer drift</h3>")
    layer = figures.layer_drift_series(report)
    if not layer:
        out.append(_note("No target exposed intermediate values for this model."))
        return "".join(out)
    out.append(figs.div(figures.layer_drift_figure(report), "drift-layers"))
    rows = []
    for t in layer:
        ld = report.targets[t].layer_drift
        first = ld.first_divergence
        rows.append({"target": t, "first boundary over tolerance": first["module_path"] if first else "none",
                     "rel L2 there": fmt_sci(first["rel_l2"]) if first else "—",
                     "boundaries compared": f"{ld.covered} / {ld.boundaries}",
                     "how intermediates were obtained": ld.method or "—",
                     "evidence": _badge(ld.evidence)})
    out.append(_table(rows, html_cols=("evidence",)))
    out.append(_caption("Boundaries are module outputs of the captured graph; a boundary whose tensor does not "
                        "survive compilation on a target (fused into a larger node) is skipped for that target."))
    jumps = [{"target": t, **{k: v for k, v in row.items() if k != "evidence"},
              "evidence": _badge(row["evidence"])}
             # attribution_rows (analysis/) reads a target's layer_drift block as report.json holds it (`layer`'s)
             for t in layer for row in attribution_rows({"layer_drift": layer[t]})]
    if jumps:
        out.append("<h3>Where the drift jumps, and the decision there</h3>")
        out.append(_table(jumps, html_cols=("evidence",)))
        method = next((report.targets[t].layer_drift.attribution.method for t in layer
                       if report.targets[t].layer_drift.attribution), "")
        out.append(_caption("Share: of the drift each jump explains. Method: " + _e(method)))
    return "".join(out)


CULPRIT_ROWS = 40      # ops above the gate listed per target; the rest are counted (report.json has them all)


def _drift_and_culprits(report: Report, figs: _Figures) -> str:
    return _drift(report, figs) + _culprit_search(report, figs)


def _culprit_search(report: Report, figs: _Figures) -> str:
    """Per-op isolation and culprit search, per target that has it (opt-in): the culprit sentence with its
    evidence, its local figures, the trial compiles, the repro folder and tracker; the two curves along depth; the
    ops above the gate (the first CULPRIT_ROWS); the trials, closed."""
    targets = isolated_targets(report)
    if not targets:
        return ""
    entries = {e["target"]: e for e in culprit_entries(report)}
    out = ['<h3 id="culprit-search">Culprit search</h3>',
           _caption("Each op compiled by the target on its own, fed the reference's inputs: its <i>local</i> error, "
                    "beside the error the full run <i>carries</i> there. The culprit: the smallest run of "
                    "consecutive ops that, on the target while the fp32 reference computes the rest, reproduces the "
                    "output drift.")]
    for tid in targets:
        iso = report.targets[tid].isolation
        out.append(f"<h3><code>{_e(tid)}</code> {_badge(iso.evidence)}</h3>")
        e = entries.get(tid)
        if e is not None:
            facts = [runs_words(e["runs"]) + (f" in {e['seconds']:.1f} s" if e["seconds"] is not None else "")]
            if e["local"]:
                facts.append(f"the culprit alone: {_e(e['local'])}")
            if e["folder"]:
                script = (f"script <code>{_e(e['script'])}</code>" if e["script"] else
                          f"no script: {_e(e['no_script'])}" if e["no_script"] else "")
                facts.append(f"repro <code>{_e(e['folder'])}</code>" + (f" ({script})" if script else ""))
            if e["tracker"]:
                facts.append(f"report to {_e(e['tracker'])}")
            out.append(f"<p><b>{_e(e['sentence'])}</b></p>" + _caption(" · ".join(facts)))
        if iso.error:
            out.append(_note(f"Isolation could not run every op: {_e(iso.error)}", "error"))
        fig = isolation_figure(report, tid)
        if fig is not None:
            out.append(figs.div(fig, f"isolation-{tid}"))
        out.append(_caption(f"Gates: {_e(iso.gates_text or '—')}. {iso.isolated} op(s) isolated, "
                            f"{len(iso.not_isolated)} not. Method: {_e(iso.method)}"))
        rows = above_gate_rows(report, tid)
        if rows:
            shown = [{**{k: _e(v) for k, v in r.items() if k != "evidence"}, "evidence": _badge(r["evidence"])}
                     for r in rows[:CULPRIT_ROWS]]
            out.append(_table(shown, html_cols=tuple(shown[0])))
            if len(rows) > CULPRIT_ROWS:
                out.append(_caption(f"The first {CULPRIT_ROWS} of {len(rows)} ops above the gate; report.json lists "
                                    "them all."))
        elif iso.ops:
            out.append(_note("No op's local error is above the gate."))
        trials = trial_rows(report, tid)
        if trials:
            out.append(f'<details class="fig"><summary>The {len(trials)} trial compile(s) of the culprit search'
                       f"</summary>{_table(trials)}</details>")
    return "".join(out)


def _checklist(report: Report, figs: _Figures) -> str:
    check = report.checklist
    per_target = check.targets
    if not per_target:
        return _note("The report has no checklist (no target to answer it for).")
    targets = list(per_target)
    questions = [(i.id, i.question) for i in per_target[targets[0]]]
    out = []
    groups = target_groups(targets, TARGET_COLUMNS)
    for title, members in groups:
        grid = []
        for k, (qid, question) in enumerate(questions):
            row = {"#": _e(qid), "question": _e(question)}
            for tid in members:
                items = per_target[tid]
                row[tid] = _verdict(items[k].verdict) if k < len(items) else "—"
            grid.append(row)
        out.append((f"<h3>{_e(title)}</h3>" if len(groups) > 1 else "")
                   + _table(grid, html_cols=("#", "question", *members)))
    th = check.thresholds
    if th:
        out.append(_caption(f"Outputs match when rel L2 ≤ {th['match_rel_l2']:g} and cosine ≥ "
                            f"{th['match_cosine']}; warn up to rel L2 {th['warn_rel_l2']:g}. Every verdict names "
                            "the evidence it rests on."))
    for k, (qid, question) in enumerate(questions):
        out.append(f"<h3>{_e(qid)}. {_e(question)}</h3><ul>")
        for tid in targets:
            items = per_target[tid]
            if k >= len(items):
                continue
            item = items[k]
            out.append(f"<li><b>{_e(tid)}</b> {_verdict(item.verdict)} {_badge(item.evidence)} — "
                       f"{_e(item.detail)}</li>")
        out.append("</ul>")
    return "".join(out)


def _fallbacks(report: Report, figs: _Figures) -> str:
    targets = accelerated_targets(report)
    if not targets:
        return _note("None of the targets has an accelerator to fall back from (ort-nnapi, ort-coreml and coreml-ane "
                     "do).")
    out = []
    for tid in targets:
        s = split_summary(report, tid)
        judged = (f"ORT verdict: <b>{_e(s['verdict'])}</b>" if s["verdict"] else
                  f"split decided by {_e(s['decided_by'])}")
        parts = (f" · {_e(s['partitions'])} {_e(s['partitions_label'].lower())}, sizes {_e(s['partition_sizes'])}"
                 if s["partitions"] is not None else "")
        out.append(f"<h3>{_e(tid)}</h3><p>{_badge(s['evidence'])} {judged} · {_e(s['split']['text'])}{parts} · "
                   f"{_e(s['boundaries'])} boundary(ies), {s['boundary_bytes']:,} bytes cross</p>")
        check = count_check(report, tid)
        if check:
            out.append(_caption(_e(check["text"])) if check["agree"] else _note(_e(check["text"]), "error"))
        cliff, a = s["cliff"], s["cliff_assumptions"]
        if cliff and a:
            out.append(f"<p>Latency cliff (est.): <b>{cliff['estimate_ms']:.2f} ms</b> = "
                       f"{cliff['transfer_ms']:.3f} ms transfer + {cliff['overhead_ms']:.2f} ms overhead "
                       # the boundaries are the toolchain's; the cost of crossing them is the model's assumption
                       f"{_badge(ev.ASSUMED)} (boundaries {_badge(s['boundary_evidence'])})</p>"
                       + _caption(f"{_e(a.get('formula'))}, at {_e(a.get('bandwidth_gb_s'))} GB/s and "
                                  f"{_e(a.get('transition_overhead_ms'))} ms per transition; excludes "
                                  f"{_e(a.get('excludes'))}. The dashboard's Fallbacks page recomputes it for "
                                  "other assumptions."))
        else:
            out.append(_note("No latency-cliff estimate in this report."))
        for line in s["cpu_type_lines"]:
            out.append(_caption(_e(line)))
        shipped = s["shipped"]
        if shipped:
            out.append(f"<p><b>As shipped, with its dynamic dims</b> {_badge(shipped.get('evidence'))} ORT verdict: "
                       f"<b>{_e(shipped.get('verdict'))}</b> · accelerated "
                       f"{100 * shipped['share']:.0f}% of nodes (vs "
                       f"{100 * s['share']:.0f}% at the shapes that ran) · {_e(shipped.get('partitions'))} "
                       "partition(s) · "
                       f"{_e(shipped.get('left_for_dynamic_shape'))} node(s) left on the CPU for a "
                       "dynamic input shape</p>")
    out.append("<h3>Fallback nodes</h3>")
    rows = [r for tid in targets for r in fallback_rows(report, tid)]
    if rows:
        out.append(_table(rows))
        out.append(_caption("Every node an accelerated target leaves on the CPU, why, where it came from and the "
                            "bytes that cross its accelerator ↔ CPU boundaries. Evidence: "
                            + " · ".join(f"<code>{_e(t)}</code> "
                                         f"{_badge(report.targets[t].graph.evidence)}"
                                         for t in targets)))
    else:
        out.append(_note("No fallback nodes: every node runs on the accelerator."))
    return "".join(out)


def _topology_pair(report: Report) -> list[str]:
    """The two targets whose graphs differ most in the node count the topology draws (constants and graph
    inputs/outputs left out; compiled targets first), or the only one."""
    cands = [t for t, b in report.targets.items() if b.graph.nodes]
    ok = [t for t in cands if report.targets[t].status == "ok"]
    cands = ok if len(ok) >= 2 else cands
    if len(cands) < 2:
        return cands
    size = {t: sum(n.kind not in topo.DROP_KINDS for n in report.targets[t].graph.nodes) for t in cands}
    # max() keeps the first of equal pairs, so equal graphs give the first two targets.
    return list(max(itertools.combinations(cands, 2), key=lambda p: abs(size[p[0]] - size[p[1]])))


def _topology(report: Report, figs: _Figures) -> str:
    picked = _topology_pair(report)
    if not picked:
        return _note("No target produced a compiled graph to draw.")
    trees = {tid: topology.build_tree(topo.prepare(report.targets[tid].graph, report.targets[tid].fusions))
             for tid in picked}
    largest = max(trees.values(), key=lambda tr: len(tr.prep.ids))
    expanded = topology.auto_expand(largest)
    aidx = topo.index_alignment(topo.alignment_rows(report))
    out = [_caption("The two compiled graphs whose node counts differ most, drawn by Graphviz at the Topology "
                    f"page's default (the most detail that keeps the larger one at {topology.DEFAULT_BUDGET} boxes). "
                    "Fill = backend · red border = falls back to the CPU · ◆ fused (what it absorbed) · dashed "
                    "magenta border = no counterpart on the other target (or no source op: inserted by the "
                    "compiler) · ▸ collapsed group with its counts · edges carry the tensor shape. Hover a box for "
                    "its details.")]
    if len(picked) == 1:
        out.append(_note("Only one target produced a graph: nothing to compare it with."))
    panes = []
    for tid in picked:
        t, tr = report.targets[tid], trees[tid]
        v = topology.view(tr, expanded)
        gaps = topo.counterpart_gaps(tr.prep, tid, aidx, picked) if len(picked) > 1 else {}
        try:
            svg = topology.mark(topology.render_svg(v), {"gap": [k for k, b in enumerate(v["boxes"])
                                                                 if b["kind"] == "node" and b["id"] in gaps]})
        except topology.GraphvizMissing as e:
            svg = _note(str(e), "error")
        n_fused = sum(1 for i in range(len(tr.prep.ids)) if tr.prep.is_fused(i))
        evid = t.graph.evidence
        panes.append(f"<div><h3>{_e(tid)}</h3><p>{_badge(evid)} assignment evidence: <b>{_e(evid or 'unknown')}"
                     "</b>" + ("" if t.status == "ok" else f" · status <b>{_e(t.status)}</b>") + "</p>"
                     + f'<div class="graph">{svg}</div>'
                     + _caption(_e(topology.count_caption(t, v)) + f", {len(v['clusters'])} groups open · "
                                f"{_e(topology.fallback_caption(t, tr.prep.nodes))} · {n_fused} fused · "
                                f"{len(gaps)} without counterpart")
                     + "</div>")
    out.append(f'<div class="grid2">{"".join(panes)}</div>' if len(panes) == 2 else panes[0])
    return "".join(out)


def _stages(report: Report, figs: _Figures) -> str:
    matrix = stage_matrix(report)
    if not matrix:
        return _note("No target recorded its lowering steps.")
    groups = target_groups(stage_targets(report), TARGET_COLUMNS)
    parts = [(f"<h3>{_e(title)}</h3>" if len(groups) > 1 else "")
             + _table([{"stage": row["stage"], **{tid: row[tid] for tid in members}} for row in matrix])
             for title, members in groups]
    parts += [_caption("Each cell: what the target's toolchain did in that stage (compute ops; casts, reorders and "
                       "constants counted apart; fused nodes carry two or more source ops). Evidence: "
                       + _e(" · ".join(f"{t} {report.targets[t].stages.evidence.get('steps')}"
                                       for t in stage_targets(report))))]
    rows = divergence_rows(report)
    parts.append("<h3>Where targets first part ways, per source op</h3>")
    parts.append(_table([divergence_counts(report)]))
    if rows:
        parts.append(_table(rows))
    else:
        parts.append(_note("No source op parts ways between the targets."))
    parts.append("<h3>Layout audit</h3>")
    summary = layout_summary_rows(report)
    parts.append(_table(summary) if summary else _note("No compiled graph."))
    for r in summary:
        if r["reorders / transposes"]:
            parts.append(f"<h3>Reorders and transposes: <code>{_e(r['target'])}</code></h3>")
            parts.append(_table(layout_move_rows(report, r["target"])))
    return "".join(parts)


BUILDERS = {"overview": _overview, "heatmap": _heatmap, "fusion": _fusion, "stages": _stages,
            "drift": _drift_and_culprits,
            "checklist": _checklist, "fallbacks": _fallbacks, "topology": _topology}


def report_html(report: Report | dict) -> str:
    """The whole run as one HTML document: every section with an id and an h2, then the figures' data, plotly.js
    (once, packed) and the script that draws a figure when it comes into view."""
    report = as_report(report)
    figs = _Figures()
    body = []
    for sid, title in SECTIONS:
        try:
            content = BUILDERS[sid](report, figs)
        except Exception as e:  # noqa: BLE001 — one odd block must not cost the reviewer the whole file
            content = _note(f"This section could not be rendered from this report: {_e(type(e).__name__)}: "
                            f"{_e(e)}", "error")
        body.append(f'<section id="{sid}"><h2>{_e(title)}</h2>{content}</section>')
    src = report.source
    toc = "".join(f'<a href="#{sid}">{_e(title)}</a>' for sid, title in SECTIONS)
    # The figures' data and plotly.js come after the content, so the parser reaches (and paints) the text first.
    tail = ""
    if figs.count:
        tail = (figs.data_scripts()
                + f'<script type="application/octet-stream" id="xc-plotly-js" data-encoding="gzip+base64">'
                  f"{_plotly_packed()}</script><script>{LOADER_JS}</script>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>xc report — {_e(src.name)}</title><style>{CSS}{topology.MARK_CSS}</style></head>"
            f"<body><main><h1>xc report — {_e(src.name)}</h1>"
            f'<p class="meta">What each target\'s compiler did with one model, read back from the compilers. '
            f"Rendered from report.json; open the dashboard for the interactive views.</p>"
            f'<nav class="toc">{toc}</nav>{"".join(body)}</main>{tail}</body></html>\n')
