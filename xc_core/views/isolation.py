"""Per-op isolation and culprit search (a target's `isolation` block, xc_core/culprit) as the Drift and Overview
pages, the Downloads page, the Markdown and HTML reports and the CLI show it: the ops whose local error is above the
gate, the two curves along depth (the error each op makes alone, the error the full run carries there), the culprit
search's trials, and one line per target naming the culprit. No UI imports here.

A non-finite value (NaN or ±inf where the reference is finite) has no figure: the block writes null with
`non_finite` true, and every view says "non-finite" — never 0, never a dash that reads as "not measured". Every
figure shown names the block's evidence kind (measured on this host, or emulated)."""
from __future__ import annotations

import io
import math
import os
import re
import zipfile
from collections.abc import Mapping

import plotly.graph_objects as go

from ..culprit.metrics import DEFAULT_GATES, GATE_SENSE, LOWER
from ..errors import XcInputError
from ..report.types import Isolation, IsolatedOp, Report
from .rows import fmt_sci, plotly_text
from .typed_report import as_report

NON_FINITE = "non-finite"
# The local figures in the order LiteRT's accuracy debugger lists them after xc's rel L2; column label of each.
LOCAL_COLUMNS = {"rel_l2": "local rel L2", "max_abs": "local max |Δ|", "mse": "local MSE",
                 "cosine": "local cosine", "snr_db": "local SNR dB", "psnr_db": "local PSNR dB",
                 "pearson": "local Pearson"}
STATUS_WORDS = {"found": "found", "not-needed": "not needed", "not-found": "not found"}
# A log axis has no zero: an exact op sits on this floor (the per-layer drift figure's), a non-finite one above
# every finite point, drawn as a cross.
_FLOOR = 1e-12
FIGURE_HEIGHT = 380


def isolated_targets(report: Report | Mapping) -> list[str]:
    """The targets whose report carries an isolation block, in report order."""
    return [tid for tid, t in as_report(report).targets.items() if t.isolation]


def isolation_of(report: Report | Mapping, tid: str) -> Isolation:
    return as_report(report).targets[tid].isolation


def figure_text(local: Mapping | None, name: str) -> str:
    """One local figure as the tables show it: "non-finite" for a value with NaN or ±inf, "—" for a figure that is
    undefined (the correlation of a constant, the decibels of an exact match)."""
    local = local or {}
    if local.get("non_finite"):
        return NON_FINITE
    value = local.get(name)
    if value is None:
        return "—"
    if name in ("rel_l2", "max_abs", "mse"):
        return fmt_sci(value)
    if name in ("cosine", "pearson"):
        return f"{value:.6f}"
    return f"{value:.1f}"


def local_words(local: Mapping | None, names=("rel_l2", "max_abs", "cosine")) -> str:
    """"rel L2 3.10e-02, max |Δ| 1.20e-01, cosine 0.998000", or "non-finite values" (the culprit's worst local
    figures in a sentence)."""
    local = local or {}
    if local.get("non_finite"):
        return "non-finite values"
    bits = [f"{LOCAL_COLUMNS[n].removeprefix('local ')} {figure_text(local, n)}" for n in names
            if local.get(n) is not None]
    return ", ".join(bits) or "no figure"


def op_row(op: IsolatedOp, evidence: str | None) -> dict:
    """One isolated op as a table row: its name, type and module, its local figures, the drift it carries in the
    full run (where per-layer drift compared it), the gates it fails, the full run's nodes computing it."""
    row = {"op": op.source_op, "type": op.op_type or "—", "module": op.module_path or "—"}
    row.update({label: figure_text(op.local, name) for name, label in LOCAL_COLUMNS.items()})
    row["carried rel L2"] = fmt_sci(op.carried_rel_l2)
    row["failed gates"] = ", ".join(op.failed_gates) or "—"
    row["nodes"] = ", ".join(op.nodes) or "—"
    row["evidence"] = evidence or "—"
    return row


def above_gate_rows(report: Report | Mapping, tid: str) -> list[dict]:
    """The ops of `tid` whose local error fails a gate, in captured order (op_row's columns)."""
    iso = isolation_of(report, tid)
    return [op_row(op, iso.evidence) for op in sorted(iso.ops, key=lambda o: o.depth) if op.above_gate]


def above_gate_count(iso: Isolation) -> int:
    return sum(op.above_gate for op in iso.ops)


def carried_by_op(report: Report | Mapping, tid: str) -> dict[str, float]:
    """op -> the rel L2 the full run carries there: the block's own `carried_rel_l2`, else the target's verified
    per-layer drift point at the same op (matched by name: the two number depth differently)."""
    t = as_report(report).targets[tid]
    points = {p.source_op: p.rel_l2 for p in t.layer_drift.points if p.verified and p.rel_l2 is not None}
    out = {}
    for op in t.isolation.ops:
        value = op.carried_rel_l2 if op.carried_rel_l2 is not None else points.get(op.source_op)
        if value is not None:
            out[op.source_op] = value
    return out


def curve_data(report: Report | Mapping, tid: str) -> dict:
    """The figure's data: `local` — every isolated op (depth, op, rel_l2 or None, non_finite, above_gate);
    `carried` — the ops the full run's drift was compared at (depth, op, rel_l2); `gate` — the rel L2 gate, or
    None when the run gated on other figures only."""
    iso = isolation_of(report, tid)
    ops = sorted(iso.ops, key=lambda o: o.depth)
    carried = carried_by_op(report, tid)
    return {
        "local": [{"depth": op.depth, "op": op.source_op, "rel_l2": (op.local or {}).get("rel_l2"),
                   "non_finite": bool((op.local or {}).get("non_finite")), "above_gate": op.above_gate}
                  for op in ops],
        "carried": [{"depth": op.depth, "op": op.source_op, "rel_l2": carried[op.source_op]}
                    for op in ops if op.source_op in carried],
        "gate": iso.gates.get("rel_l2"),
    }


def isolation_figure(report: Report | Mapping, tid: str) -> go.Figure | None:
    """Local rel L2 of every op (alone on the target) and the rel L2 the full run carries at the compared ops,
    along depth, log y; the rel L2 gate as a dashed line; ops above the gate ringed, non-finite ones as crosses on
    top. None when no op was isolated."""
    data = curve_data(report, tid)
    if not data["local"]:
        return None
    evidence = isolation_of(report, tid).evidence or "evidence unknown"
    # The carried figures are per-layer drift's, measured or emulated as that block says.
    carried_evidence = as_report(report).targets[tid].layer_drift.evidence or evidence
    finite = [p["rel_l2"] for p in data["local"] + data["carried"] if p.get("rel_l2")]
    ceiling = max(finite + [data["gate"] or 0, _FLOOR]) * 10      # where a non-finite op is drawn
    fig = go.Figure()
    # Every op on the line; one without a figure (non-finite, undefined) leaves a gap rather than joining its
    # neighbours as if it lay between them.
    shown = data["local"]
    fig.add_trace(go.Scatter(
        x=[p["depth"] for p in shown],
        y=[None if p["non_finite"] or p["rel_l2"] is None else max(p["rel_l2"], _FLOOR) for p in shown],
        mode="lines+markers",
        name=plotly_text(f"local: each op alone ({evidence})"), text=[plotly_text(p["op"]) for p in shown],
        hovertemplate="%{text}<br>local rel L2 %{y:.2e}<extra></extra>"))
    if data["carried"]:
        fig.add_trace(go.Scatter(
            x=[p["depth"] for p in data["carried"]], y=[max(p["rel_l2"], _FLOOR) for p in data["carried"]],
            mode="lines+markers", line=dict(dash="dot"), marker=dict(symbol="square"),
            name=plotly_text(f"carried: the full run, per-layer drift ({carried_evidence})"),
            text=[plotly_text(p["op"]) for p in data["carried"]],
            hovertemplate="%{text}<br>carried rel L2 %{y:.2e}<extra></extra>"))
    above = [p for p in data["local"] if p["above_gate"] and not p["non_finite"] and p["rel_l2"] is not None]
    if above:
        fig.add_trace(go.Scatter(
            x=[p["depth"] for p in above], y=[max(p["rel_l2"], _FLOOR) for p in above], mode="markers",
            marker=dict(symbol="circle-open", size=15, color="red", line=dict(width=2)),
            name="above the gate", text=[plotly_text(p["op"]) for p in above],
            hovertemplate="%{text}: above the gate<extra></extra>"))
    broken = [p for p in data["local"] if p["non_finite"]]
    if broken:
        fig.add_trace(go.Scatter(
            x=[p["depth"] for p in broken], y=[ceiling] * len(broken), mode="markers",
            marker=dict(symbol="x", size=12, color="red"), name=f"{NON_FINITE} (NaN or ±inf, above the gate)",
            text=[plotly_text(p["op"]) for p in broken], hovertemplate="%{text}: " + NON_FINITE + "<extra></extra>"))
    if data["gate"] is not None:
        fig.add_hline(y=data["gate"], line_dash="dash", line_color="red", annotation_text=f"gate {data['gate']:g}")
    fig.update_layout(height=FIGURE_HEIGHT, yaxis_type="log", xaxis_title="depth (op index in the captured program)",
                      yaxis_title="rel L2 vs reference", margin=dict(l=10, r=10, t=30, b=10),
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0))
    return fig


def trial_rows(report: Report | Mapping, tid: str) -> list[dict]:
    """Each compile culprit search made, in order: the range of ops (positions in captured order, from 1) the
    target compiled while the reference computed the rest, the output drift that gave, and whether it reproduces
    the whole program's drift."""
    iso = isolation_of(report, tid)
    c = iso.culprit
    rows = []
    for i, trial in enumerate(c.trials, start=1):
        if trial.error:
            drift = "—"
        elif trial.non_finite:
            drift = NON_FINITE
        else:
            drift = fmt_sci(trial.rel_l2)
        role = ("whole program (the baseline)" if trial.ops and (trial.first, trial.last) == (c.baseline.first,
                                                                                            c.baseline.last)
                else "culprit" if c.status == "found" and (trial.first, trial.last) == (c.first, c.last) else "")
        span = f"{trial.first + 1}" if trial.first == trial.last else f"{trial.first + 1}–{trial.last + 1}"
        rows.append({"trial": i, "ops on the target": span, "op count": trial.ops,
                     "output rel L2": drift,
                     "reproduces the drift": {True: "yes", False: "no"}.get(trial.reproduces, "—"),
                     "role": role or "—", "error": trial.error or "—",
                     "seconds": "—" if trial.seconds is None else f"{trial.seconds:.2f}",
                     "evidence": iso.evidence or "—"})
    return rows


def share_text(iso: Isolation) -> str:
    """The culprit's share of the output drift ("100 %"), "—" without one."""
    explained = iso.culprit.explained
    return "—" if explained is None else f"{round(100 * explained)} %"


def culprit_sentence(tid: str, iso: Isolation) -> str | None:
    """The culprit in one line: the engine's sentence, or one made from the block when it wrote none (an older
    block). None without a culprit search."""
    c = iso.culprit
    if not c:
        return None
    if c.sentence:
        return c.sentence
    if c.status == "found":
        n = len(c.ops) or ((c.last or 0) - (c.first or 0) + 1)
        names = ", ".join(c.ops[:3]) + (f" and {len(c.ops) - 3} more" if len(c.ops) > 3 else "")
        drift = "non-finite outputs" if c.baseline.non_finite else f"rel L2 {fmt_sci(c.baseline.rel_l2)}"
        return (f"{tid}: {names} ({n} op{'s' if n != 1 else ''}) account{'s' if n == 1 else ''} for "
                f"{share_text(iso)} of the output drift ({drift})")
    words = {"not-needed": "no culprit search needed", "not-found": "no culprit found"}.get(
        c.status, f"culprit search {c.status or 'did not finish'}")
    return f"{tid}: {words}" + (f" — {c.why}" if c.why else "")


def culprit_entries(report: Report | Mapping) -> list[dict]:
    """Per target with a culprit search: target, status, sentence, evidence, share, runs (trial compiles), seconds,
    local (the culprit ops' worst local figures, in words), repro folder, script, why no script, tracker."""
    report = as_report(report)
    out = []
    for tid in isolated_targets(report):
        iso = report.targets[tid].isolation
        c = iso.culprit
        if not c:
            continue
        repro = c.repro
        out.append({"target": tid, "status": c.status, "sentence": culprit_sentence(tid, iso),
                    "evidence": iso.evidence, "share": share_text(iso), "runs": c.runs, "seconds": c.seconds,
                    "local": local_words(c.local) if c.local else None,
                    "folder": repro.folder or None, "script": repro.script, "no_script": repro.no_script,
                    "tracker": repro.tracker, "files": list(repro.files)})
    return out


def runs_words(runs: int) -> str:
    return f"{runs} trial compile{'s' if runs != 1 else ''}"


def culprit_lines(report: Report | Mapping) -> list[str]:
    """One line per target with a culprit search, its evidence and what it cost:
    "coreai-ane: the exp at gate.exp (1 op) accounts for 100 % … (measured; 6 trial compiles)"."""
    return [f"{e['sentence']} ({e['evidence'] or 'evidence unknown'}; {runs_words(e['runs'])})"
            for e in culprit_entries(report)]


def above_gate_words(iso: Isolation, most: int = 3) -> str:
    """"exp (non-finite), sum_1 (rel L2 2.10e-01) and 4 more": the first ops above the gate, in captured order."""
    ops = [op for op in sorted(iso.ops, key=lambda o: o.depth) if op.above_gate]
    named = [f"{op.source_op} ({local_words(op.local, ('rel_l2',))})" for op in ops[:most]]
    return ", ".join(named) + (f" and {len(ops) - most} more" if len(ops) > most else "")


# ---- the opt-in: which targets, which gates ------------------------------------------------------------------------
def numeric_targets(report: Report | Mapping) -> list[str]:
    """Targets that ran and whose outputs were compared: the ones isolation can run (culprit/run.candidates)."""
    return [tid for tid, t in as_report(report).targets.items() if t.status == "ok" and t.drift.outputs]


def drifting_targets(report: Report | Mapping, gates: Mapping[str, float] | None = None) -> list[str]:
    """Of numeric_targets, those whose output drift is above the rel L2 gate (each target's default unless given) or
    non-finite: the ones culprit search runs for (culprit/run.drift_above_gate), picked by default."""
    from ..culprit.metrics import default_gates
    from ..culprit.run import drift_above_gate
    report = as_report(report)
    return [tid for tid in numeric_targets(report)
            if drift_above_gate({"drift": report.targets[tid].drift.to_dict()},
                                dict(gates) if gates is not None else
                                default_gates(report.targets[tid].declared_precisions))]


def gate_fields() -> dict[str, str]:
    """Each gate's starting text for the dashboard's fields: the default bound, or "off"."""
    return {name: (f"{DEFAULT_GATES[name]:g}" if name in DEFAULT_GATES else "off") for name in GATE_SENSE}


def gate_label(name: str) -> str:
    """"rel_l2 (at most)" — which side of the bound passes."""
    return f"{name} ({GATE_SENSE[name]})"


def gates_from_fields(fields: Mapping[str, str]) -> dict[str, float]:
    """The gates the dashboard's fields ask for (metric -> bound; "off" or empty leaves one out). Raises
    XcInputError naming the field and what it accepts."""
    gates = {}
    for name, raw in fields.items():
        if name not in GATE_SENSE:
            raise XcInputError(f"gate {name!r}: unknown; the gates are {', '.join(GATE_SENSE)}")
        text = str(raw).strip()
        if text.lower() in ("", "off"):
            continue
        try:
            value = float(text)
        except ValueError:
            raise XcInputError(f"gate {name}: {text!r} is not a number — enter a bound, or 'off' to leave it "
                               "out") from None
        if not math.isfinite(value):
            raise XcInputError(f"gate {name}: the bound must be a finite number, or 'off'")
        gates[name] = value
    if not gates:
        raise XcInputError("no gate set: give at least one bound (rel_l2 at most 0.01 is the default)")
    return gates


def gates_sense_text() -> str:
    """What the gate fields mean, for a caption."""
    upper = [n for n, s in GATE_SENSE.items() if s != LOWER]
    lower = [n for n, s in GATE_SENSE.items() if s == LOWER]
    return (f"An op passes when {', '.join(upper)} are at most their bound and {', '.join(lower)} at least theirs; "
            "'off' leaves a gate out. A non-finite value fails every gate.")


# ---- the repro bundle ------------------------------------------------------------------------------------------
def repro_files(report: Report | Mapping, tid: str, files: Mapping[str, str]) -> dict[str, str]:
    """The run's files (path in the run -> file on disk) under `tid`'s repro folder; {} when it has none here."""
    folder = isolation_of(report, tid).culprit.repro.folder.strip("/")
    if not folder:
        return {}
    return {rel: path for rel, path in sorted(files.items()) if rel.startswith(folder + "/")}


def repro_zip_name(tid: str) -> str:
    """The bundle's download name: the target id kept to characters a file name holds everywhere."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", tid).strip("._") or "target"
    return f"{safe}-repro.zip"


def repro_zip(report: Report | Mapping, tid: str, files: Mapping[str, str]) -> bytes:
    """`tid`'s repro folder as one zip, its files under one folder named after the zip."""
    folder = isolation_of(report, tid).culprit.repro.folder.strip("/")
    top = repro_zip_name(tid).removesuffix(".zip")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for rel, path in repro_files(report, tid, files).items():
            z.write(path, f"{top}/{os.path.relpath(rel, folder)}")
    return buf.getvalue()
