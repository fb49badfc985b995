"""A run as GitHub-flavoured Markdown for a pull-request comment.

What a reviewer reads first: one headline per target, a compact table (at most 8 columns, so it fits a PR
comment's width), the checklist verdicts, then one collapsed `<details>` section per checklist question with the
evidence behind each verdict. The body is deterministic — no timestamps, no absolute paths, lists in report order
or sorted — so the comment for the same run is the same text, and it stays under GitHub's comment limit
(65,536 characters; we keep to MAX_CHARS) by listing fewer rows per section when it must.
"""
from __future__ import annotations

from .. import evidence as ev
from ..analysis.checklist import SHORT_QUESTION, VERDICT
from ..analysis.common_cause import NOT_RUN, cause_body, cause_head
from ..analysis.drift import output_flags
from ..analysis.fusion_diff import not_fired_by_pattern
from ..analysis.layer_drift import unverified_rows
from ..report.types import Report
from ..views.fallbacks import accelerated_targets, fallback_rank, fallback_rows
from ..views.isolation import above_gate_rows, culprit_entries, isolated_targets, runs_words
from ..views.compute_share import WEIGHTED_COLUMN
from ..views.target_counts import SPLIT_COLUMN, count_findings, op_counts
from ..views.rows import (
    catalogue_rows,
    default_pairs,
    divergence_counts,
    divergence_rows,
    drift_flags,
    fmt_sci,
    layout_summary_rows,
    onnx_route_lines,
    overview_rows,
    pair_sentence,
    stage_matrix,
    target_summary_rows,
    time_rows,
)
from ..views.time_evidence import is_estimated, vela_rows
from ..views.typed_report import as_report
from .md_text import code, html_text, table, text

MAX_CHARS = 60_000
# The default comment: the headline, the verdicts and the findings, the long tables left to the HTML report — a
# page a reviewer reads, well under GitHub's cap. `full=True` keeps every table (up to MAX_CHARS).
BRIEF_CHARS = 20_000


def report_markdown(report: Report | dict, *, max_chars: int | None = None, full: bool = False) -> str:
    """The whole comment; if it would pass `max_chars` (BRIEF_CHARS, or MAX_CHARS with `full`), long lists are cut
    (saying how many rows were left)."""
    report = as_report(report)
    max_chars = max_chars or (MAX_CHARS if full else BRIEF_CHARS)
    for cap in ((40, 15, 5, 2) if full else (5, 2)):
        body = _render(report, cap, full)
        if len(body) <= max_chars:
            return body
    note = "\n\n*(cut to fit a pull-request comment; the full report is in report.json / the HTML report)*\n"
    return body[:max_chars - len(note)].rsplit("\n", 1)[0] + note


def _render(report: Report, cap: int, full: bool = True) -> str:
    src = report.source
    parts = [f"### xc: {text(src.name)}",
             f"{text(src.kind)} · sha256 {code(src.sha256[:12])} · reference "
             f"{code(report.reference.id or 'none')} · xc {text(report.xc_version or '?')}",
             ""]
    from ..sources.facts import source_fact_lines
    # a .tflite's metadata and labels, a Core ML spec's facts (sources/ reads the source block as report.json has it)
    facts = source_fact_lines({"source": src.to_dict()})
    if facts:
        parts += ["\n".join(f"{'- ' if not line.startswith(' ') else '  - '}{text(line.strip())}" for line in facts),
                  ""]
    # Before any target's figure: the route's own error (xc's, said once) and what the drift figures cannot tell.
    route = onnx_route_lines(report)
    if route:
        parts += ["#### ONNX → PyTorch route (measured)", "", text(" ".join(route)), ""]
    # A cause several targets share, said once with whose it is and the fix (analysis/common_cause.py).
    found = [cause.to_dict() for cause in report.common_causes]   # as cause_head/cause_body read them
    if found:
        parts += ["\n".join(f"> ❌ **{text(cause_head(c))}**: {text(cause_body(c))}  " for c in found), ""]
    flags = drift_flags(report)
    if flags:
        parts += ["\n".join(f"> ⚠️ {text(flag)}  " for flag in flags), ""]
    parts += ["\n".join(headlines(report)), ""]
    pairs = pair_lines(report)
    if pairs:
        parts += ["#### Where the targets shipped together differ", "", "\n".join(pairs), ""]
    parts += [target_table(report), ""]
    from .accuracy_section import markdown_section
    accuracy = markdown_section(report)         # --data: task accuracy on the run's dataset
    if accuracy:
        parts += [accuracy, ""]
    from .cost_section import markdown_section as cost_section
    cost = cost_section(report)                 # memory, size, compile / load / inference time on this host
    if cost:
        parts += [cost, ""]
    vela = vela_lines(report)
    if vela:
        parts += [f"#### Vela's estimate of each Ethos-U network ({ev.ESTIMATED_COMPILER})", "", vela, ""]
    if full:
        # measured and estimated times in sections of their own: one ranking never holds both kinds
        for kind, timed in ((ev.MEASURED, time_lines(report, cap)),
                            (ev.ESTIMATED_COMPILER, time_lines(report, cap, estimated=True))):
            if timed:
                parts += [f"#### Where the time goes ({kind})", "", timed, ""]
    parts += ["#### Checklist", "", checklist_table(report), ""]
    parts += [details(report, qid, cap, full) for qid in _question_ids(report)]
    culprits = culprit_section(report, cap)
    if culprits:
        parts += [culprits, ""]
    stages = stages_details(report, cap) if full else stages_line(report)
    if stages:
        parts += [stages]
    covered = report.covered_targets()       # said once, at the top
    errors = [(tid, t) for tid, t in report.targets.items() if t.error and tid not in covered]
    if errors:
        from ..analysis.advice import advice_line
        parts += ["", "#### Errors", ""]
        for tid, t in errors:
            advice = f"  \n  ↳ {text(advice_line(t.advice.to_dict()))}" if t.advice else ""
            parts.append(f"- **{text(tid)}** ({text(t.status)}): {text(t.error)}{advice}")
    if not full:
        parts += ["", "<sub>Left to the HTML report (`xc report RUN --format html`) and report.json: the time per "
                      "node, the lowering stages, passing verdicts' evidence and the rows past the first "
                      f"{cap} of each table; `xc report RUN --format md --full` writes them all.</sub>"]
    parts += ["", "<sub>Evidence kinds: measured (ran here) · reported (the compiler said so) · predicted-runtime "
                  "(the runtime's own checker) · predicted-rules (xc's cited rule table) · emulated (xc computed "
                  "what this host cannot run) · estimated-compiler (the vendor compiler's performance model "
                  "estimated it; nothing ran) · assumed (a constant of xc's cost model).</sub>", ""]
    return "\n".join(parts)


def headlines(report: Report | dict) -> list[str]:
    """One line per target: what a reviewer needs to decide whether to open the rest."""
    report = as_report(report)
    counts = _verdict_counts(report)
    covered = report.covered_targets()
    lines = []
    for row in overview_rows(report):
        tid = row["target"]
        t = report.targets[tid]
        if tid in covered:
            lines.append(f"- **{text(tid)}** — {text(t.status)}: {NOT_RUN}")
            continue
        if t.status != "ok":
            lines.append(f"- **{text(tid)}** — {text(t.status)}: {text(t.error or '')}")
            continue
        # The counts in the dashboard's and the CLI's words (views/target_counts.py).
        bits = [text((op_counts(t) or {}).get("text", "no compiled ops")), f"{text(row['fused groups'])} fused"]
        if SPLIT_COLUMN in row:
            bits.append(text(row[SPLIT_COLUMN]))
            if WEIGHTED_COLUMN in row:      # the split weighed by MACs and by time (views/compute_share.py)
                bits.append(text(row[WEIGHTED_COLUMN]))
            if "partitions" in row:
                bits.append(f"{text(row['partitions'])} partition(s)")
        elif "Core ML units" in row:
            bits.append(f"units {text(row['Core ML units'])}")
        bits.append(f"drift {text(row['worst drift (rel L2)'])}")
        c = counts.get(tid, {})
        verdicts = ", ".join(f"{c[v]} {v}" for v in ("fail", "warn") if c.get(v)) or "all pass"
        lines.append(f"- **{text(tid)}** — " + " · ".join(bits) + f" · checklist: {verdicts}")
    return lines


def target_table(report: Report | dict) -> str:
    """The Overview's target table; under it, each runtime's own count that xc's placement does not match, as one
    labelled finding."""
    report = as_report(report)
    rows = [[code(tid), text(t.status), text(r["ops"]), text(r["fused"]), text(r["accelerator"]),
             text(r["precision"]), text(r["worst drift (rel L2)"]), text(r["evidence"])]
            for (tid, t), r in zip(report.targets.items(), target_summary_rows(report))]
    out = table(["target", "status", "ops (source → compiled)", "fused", "accelerator (compiled ops)", "precision",
                 "worst drift (rel L2)", "evidence (assignment · numbers)"], rows)
    findings = count_findings(report)
    if findings:
        out += "\n\n" + "\n".join(f"- ⚠️ **{text(tid)}** {text(finding)}" for tid, finding in findings)
    return out


def pair_lines(report: Report | dict) -> list[str]:
    report = as_report(report)
    return [f"- {text(pair_sentence(report, a, b))}" for a, b in default_pairs(report)]


def checklist_table(report: Report | dict) -> str:
    report = as_report(report)
    ids = _question_ids(report)
    rows = []
    for tid, items in report.checklist.targets.items():
        by_id = {i.id: i for i in items}
        rows.append([code(tid)] + [VERDICT.get(by_id[q].verdict, text(by_id[q].verdict)) if q in by_id
                                   else "—" for q in ids])
    return table(["target"] + [f"({text(q)}) {SHORT_QUESTION.get(q, '')}".strip() for q in ids], rows)


def details(report: Report | dict, qid: int, cap: int, full: bool = True) -> str:
    """A collapsed section per question: each target's verdict with its evidence, then the rows behind it. Without
    `full`, only the verdicts that fail or warn (the passing ones are counted in the summary)."""
    report = as_report(report)
    items = [(tid, i) for tid, its in report.checklist.targets.items() for i in its if i.id == qid]
    if not items:
        return ""
    shown = items if full else [(tid, i) for tid, i in items if i.verdict in ("fail", "warn")]
    question = items[0][1].question
    worst = [v for v in ("fail", "warn") if any(i.verdict == v for _, i in items)]
    tally = ", ".join(f"{sum(i.verdict == v for _, i in items)} {v}" for v in worst) or "all pass"
    # An HTML block: Markdown escapes do not apply there, HTML escapes do.
    lines = [f"<details><summary><b>({html_text(qid)}) {html_text(question)}</b> — {tally}</summary>", ""]
    for tid, i in shown:
        lines.append(f"- {code(tid)} {VERDICT.get(i.verdict, text(i.verdict))} ({text(i.evidence)}): "
                     f"{text(i.detail)}")
    evidence = {2: _fallback_evidence, 3: _fusion_evidence, 4: _drift_evidence, 5: _precision_evidence}.get(qid)
    if evidence:
        extra = evidence(report, cap)
        if extra:
            lines += ["", extra]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def culprit_section(report: Report | dict, cap: int) -> str:
    """Per-op isolation and culprit search (opt-in: `xc analyze --isolate`, the Drift page's button): per target the
    culprit sentence with its evidence, the culprit ops' local figures, the trial compiles it took, the repro folder
    and where the toolchain takes bug reports; then the ops whose local error is above the gate (the first `cap`).
    "" when no target was isolated."""
    report = as_report(report)
    targets = isolated_targets(report)
    if not targets:
        return ""
    lines = ["#### Culprit search", ""]
    entries = {e["target"]: e for e in culprit_entries(report)}
    for tid in targets:
        iso = report.targets[tid].isolation
        evidence = text(iso.evidence or "evidence unknown")
        e = entries.get(tid)
        if e is None:
            why = f": {text(iso.error)}" if iso.error else ""
            lines.append(f"- {code(tid)} ({evidence}): {iso.isolated} op(s) isolated, no culprit search{why}")
            continue
        bits = [runs_words(e["runs"])]
        if e["local"]:
            bits.append(f"the culprit alone: {text(e['local'])}")
        if e["folder"]:
            script = (f"script {code(e['script'])}" if e["script"] else
                      f"no script: {text(e['no_script'])}" if e["no_script"] else "")
            bits.append(f"repro {code(e['folder'])}" + (f" ({script})" if script else ""))
        if e["tracker"]:
            bits.append(f"report to {text(e['tracker'])}")
        # The sentence names its target first ("coreai-ane: the exp at gate.exp …").
        lines.append(f"- **{text(e['sentence'])}** ({evidence}) — " + " · ".join(bits))
        if iso.gates_text:
            lines.append(f"  - gates: {text(iso.gates_text)}; {iso.isolated} op(s) isolated, "
                         f"{len(iso.not_isolated)} not")
    rows = [(tid, r) for tid in targets for r in above_gate_rows(report, tid)]
    if rows:
        lines += ["", "Ops whose local error (the op alone on the target, fed the reference's inputs) is above the "
                      "gate, beside the drift the full run carries there:", "",
                  table(["target", "op", "type", "module", "local rel L2", "local cosine", "carried rel L2",
                         "failed gates", "evidence"],
                        [[code(tid), code(r["op"]), text(r["type"]), text(r["module"]), text(r["local rel L2"]),
                          text(r["local cosine"]), text(r["carried rel L2"]), text(r["failed gates"]),
                          text(r["evidence"])] for tid, r in rows[:cap]])
                  + (f"\n\n… and {len(rows) - cap} more op(s) above the gate (the Drift page and report.json "
                     "list them all)" if len(rows) > cap else "")]
    return "\n".join(lines)


def time_lines(report: Report | dict, cap: int, *, estimated: bool = False) -> str:
    """Per target that timed its nodes: the three costliest and the share per backend, as a table; its evidence
    and the CPU under it. The targets whose times were measured, or (`estimated`) those a compiler estimated for
    its device — never both in one table."""
    report = as_report(report)
    rows = [r for r in time_rows(report) if is_estimated(report.targets[r["target"]].node_times) == estimated]
    if not rows:
        return ""
    body = [[code(r["target"]), text(r["nodes timed"]), text(r["timed µs"]), text(r["costliest nodes"]),
             text(r["per backend"])] for r in rows[:cap]]
    out = table(["target", "nodes timed", f"{'estimated' if estimated else 'timed'} µs", "costliest nodes",
                 "per backend"], body)
    devices = sorted({report.targets[r["target"]].node_times.host_cpu for r in rows}
                     - {"", None})
    if estimated:
        return out + (f"\n\n<sub>{ev.ESTIMATED_COMPILER}: each node's time as its compiler's performance model "
                      f"estimates it for {text('; '.join(devices))} — nothing ran, so no runs and no spread; not "
                      "comparable with a measured time.</sub>")
    return out + (f"\n\n<sub>Median of each node's time over the profiled runs, by its runtime's profiler on "
                  f"{text(', '.join(devices))} — this host's CPU, not the device's.</sub>")


def vela_lines(report: Report | dict) -> str:
    """Vela's summary of each Ethos-U network it compiled (SRAM and flash used, cycles, MACs, the operators on the
    NPU and on the CPU): its performance model's figures, evidence estimated-compiler. "" without an Ethos-U
    target."""
    rows = vela_rows(report)
    if not rows:
        return ""
    cols = ["target", "delegate", "configuration", "SRAM used KiB", "flash used KiB", "cycles", "estimated µs",
            "operators NPU / CPU"]
    return (table(cols, [[code(r["target"]), code(r["delegate"])] + [text(r[c]) for c in cols[2:]] for r in rows])
            + f"\n\n<sub>{ev.ESTIMATED_COMPILER}: Vela's own summary of the command stream it built — nothing ran "
              "on an NPU here.</sub>")


def _fallback_evidence(report: Report, cap: int) -> str:
    # Ranked by the measured kernel time; the copies the cost model assumes in a column of their own, never summed.
    # A kernel time a compiler estimated has its own column too, ranked after every measured one.
    rows = sorted((r for tid in accelerated_targets(report) for r in fallback_rows(report, tid)), key=fallback_rank)
    if not rows:
        return ""
    estimates = any(r.get("kernel µs (estimated)") is not None for r in rows)
    body = [[code(r["target"]), code(r["node"]), text(r["op_type"]), text(r["module_path"]), text(r["reason"]),
             text(r["boundary bytes"]), _us(r["kernel µs"])]
            + ([_us(r.get("kernel µs (estimated)"))] if estimates else []) + [_us(r["copies µs (assumed)"])]
            for r in rows[:cap]]
    return (table(["target", "node", "op", "module", "reason", "boundary bytes", "kernel µs (measured)"]
                  + ([f"kernel µs ({ev.ESTIMATED_COMPILER})"] if estimates else []) + ["copies µs (assumed)"], body)
            + _more(len(rows), cap, "fallback node"))


def _us(value) -> str:
    return "—" if value is None else f"{value:,.1f}"


def _fusion_evidence(report: Report, cap: int) -> str:
    failed = catalogue_rows(report, only_failed=True)
    out = ""
    if failed:
        body = [[code(r["target"]), text(r["fusion"]), text(r["outcome"]), text(r["ops"]), code(r["first node"]),
                 text(r["reason"])] for r in failed[:cap]]
        out += (table(["target", "fusion (its compiler's)", "outcome", "ops", "at", "reason"], body)
                + _more(len(failed), cap, "opportunity"))
    missed = not_fired_by_pattern(report.fusion_matrix.to_dict())
    if missed:
        out += ("\n\nFused on one target, not on another (information: compilers fuse differently):\n\n"
                + table(["pattern (source ops)", "not fused on", "fused on", "instances"],
                        [[text(m["pattern"]), code(m["missing_on"]), text(", ".join(m["fired_on"])),
                          text(m["instances"])] for m in missed[:cap]])
                + _more(len(missed), cap, "pattern"))
    return out


def _drift_evidence(report: Report, cap: int) -> str:
    body = []
    for tid, t in report.targets.items():
        d = t.drift
        for name, m in sorted(d.outputs.items()):
            if m.error is not None:
                body.append([code(tid), code(name), text(d.reference or "—"), "—", "—", "—",
                             text(m.error), text(_evidence(d))])
            else:
                not_informative, bad = output_flags(m.to_dict())     # analysis/ reads the output as stored
                flag = " (implausible)" if bad else " (not informative)" if not_informative else ""
                body.append([code(tid), code(name), text(d.reference or "—"),
                             fmt_sci(m.rel_l2) + flag, fmt_sci(m.max_abs),
                             f"{m.cosine:.6f}" if m.cosine is not None else "—",
                             fmt_sci(m.min_atol), text(_evidence(d))])
    if not body:
        return ""
    return (table(["target", "output", "against", "rel L2", "max abs", "cosine", "min atol", "evidence"], body[:cap])
            + _more(len(body), cap, "output") + _attribution_evidence(report, cap))


def _attribution_evidence(report: Report, cap: int) -> str:
    """Where each target's drift jumps and the compiler decision there (analysis/drift_attribution.py)."""
    body = []
    for tid, t in report.targets.items():
        att = t.layer_drift.attribution
        for j in att.jumps:
            body.append([code(tid), code(j.module_path), f"{round(100 * j.share)} %", text(j.kind),
                         text(j.sentence), text(_evidence(att))])
    out = ("\n\nWhere the drift jumps, and the compiler decision there (share of the drift each jump explains):\n\n"
           + table(["target", "boundary", "share", "decision", "finding", "evidence"], body[:cap])
           + _more(len(body), cap, "jump")) if body else ""
    # Per-layer points that failed verification (analysis/layer_drift.py): apart, with why — not findings.
    apart = unverified_rows({tid: t.layer_drift.to_dict() for tid, t in report.targets.items() if t.layer_drift})
    if apart:
        out += ("\n\nPer-layer points left out as unverified (not drawn, not attributed):\n\n"
                + table(["target", "boundary", "rel L2", "check", "why", "evidence"],
                        [[code(r["target"]), code(r["boundary"]), text(r["rel L2"]), text(r["check"]), text(r["why"]),
                          text(r["evidence"] or "")] for r in apart[:cap]])
                + _more(len(apart), cap, "point"))
    return out


def _precision_evidence(report: Report, cap: int) -> str:
    body = []
    for tid, t in report.targets.items():
        mix = t.precision.mix
        if mix:
            body.append([code(tid), text(", ".join(f"{k} × {v}" for k, v in mix.items())),
                         text(_evidence(t.precision))])
    return table(["target", "ops by precision", "evidence"], body[:cap]) + _more(len(body), cap, "target") \
        if body else ""


def stages_details(report: Report | dict, cap: int) -> str:
    """The lowering stages per target, where the targets first part ways, and the layout moves, collapsed."""
    report = as_report(report)
    matrix = stage_matrix(report)
    if not matrix:
        return ""
    targets = [k for k in matrix[0] if k != "stage"]
    body = [[code(t)] + [text(row[t]) for row in matrix] for t in targets]
    out = ["<details><summary>Lowering stages: what each toolchain did, and where the targets part ways</summary>",
           "", table(["target"] + [text(row["stage"]) for row in matrix], body), ""]
    counts = divergence_counts(report)
    if any(counts.values()):
        out += ["Source ops by the first stage at which the targets diverge: "
                + ", ".join(f"{text(k)} {v}" for k, v in counts.items() if v) + ".", ""]
        rows = divergence_rows(report)
        if rows:
            out += [table(["source op", "first diverges at", "how the targets split there"],
                          [[code(r["source op"]), text(r["first diverges at"]), text(r["how the targets split there"])]
                           for r in rows[:cap]]) + _more(len(rows), cap, "source op"), ""]
    layout = [r for r in layout_summary_rows(report) if r["reorders / transposes"]]
    if layout:
        out += ["Layout moves the compilers inserted:", "",
                table(["target", "node layouts", "reorders / transposes", "bytes moved", "transitions"],
                      [[code(r["target"]), text(r["node layouts"]), text(r["reorders / transposes"]),
                        text(r["bytes moved"]), text(r["transitions"])] for r in layout]), ""]
    out += ["</details>", ""]
    return "\n".join(out)


def stages_line(report: Report | dict) -> str:
    """The lowering stages in one line: how many source ops first diverge at which stage (the matrix is in the HTML
    report)."""
    report = as_report(report)
    counts = divergence_counts(report) if stage_matrix(report) else {}
    if not any(counts.values()):
        return ""
    return ("Lowering stages — source ops by the first stage at which the targets diverge: "
            + ", ".join(f"{text(k)} {v}" for k, v in counts.items() if v) + ".\n")


def _more(total: int, cap: int, what: str) -> str:
    return f"\n\n… and {total - cap} more {what}(s) (in report.json)" if total > cap else ""


def _question_ids(report: Report) -> list[int]:
    return sorted({i.id for items in report.checklist.targets.values() for i in items})


def _verdict_counts(report: Report) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tid, items in report.checklist.targets.items():
        for i in items:
            out.setdefault(tid, {}).setdefault(i.verdict, 0)
            out[tid][i.verdict] += 1
    return out


def _evidence(block) -> str:
    """A block's evidence for a table cell ("" where it names none)."""
    return block.evidence or ""
