"""The "Accuracy on <dataset>" section of the Markdown and HTML reports (task accuracy on the run's dataset, --data):
a sentence per target with its evidence, the compact table, and the first changed samples. What it says is made in
xc_core/views/accuracy.py; sample and dataset names are data, escaped by each format's own escaper."""
from __future__ import annotations

from ..views.accuracy import accuracy_lines, accuracy_rows, accuracy_targets, dataset_title, sample_rows
from ..views.typed_report import as_report

MAX_SAMPLES_SHOWN = 10


def markdown_section(report) -> str:
    from .md_text import table, text
    report = as_report(report)
    lines = accuracy_lines(report)
    if not lines:
        return ""
    rows = accuracy_rows(report)
    cols = list(dict.fromkeys(c for r in rows for c in r))
    parts = [f"#### Accuracy on {text(dataset_title(report))}", "",
             "\n".join(f"- **{text(tid)}** ({text(evidence)}): {text(sentence)}" for tid, sentence, evidence in lines),
             "", table([text(c) for c in cols], [[text(str(r.get(c, "—"))) for c in cols] for r in rows]), ""]
    for tid in accuracy_targets(report):
        changed = sample_rows(report.targets[tid].accuracy, "changed")[:MAX_SAMPLES_SHOWN]
        if changed:
            scols = list(changed[0])
            parts += [f"Samples whose class changed on {text(tid)} (first {len(changed)}):", "",
                      table([text(c) for c in scols], [[text(str(r[c])) for c in scols] for r in changed]), ""]
    return "\n".join(parts)


def html_section(report, esc, badge, render_table) -> str:
    """`esc`, `badge` and `render_table` are the HTML report's own escaper, evidence badge and table."""
    report = as_report(report)
    lines = accuracy_lines(report)
    if not lines:
        return ""
    out = [f"<h3>Accuracy on {esc(dataset_title(report))}</h3>", "<ul>"]
    out += [f"<li><code>{esc(tid)}</code> {badge(evidence)} {esc(sentence)}</li>" for tid, sentence, evidence in lines]
    out.append("</ul>")
    out.append(render_table(accuracy_rows(report)))
    for tid in accuracy_targets(report):
        changed = sample_rows(report.targets[tid].accuracy, "changed")[:MAX_SAMPLES_SHOWN]
        if changed:
            out.append(f"<p>Samples whose class changed on <code>{esc(tid)}</code> (first {len(changed)}):</p>")
            out.append(render_table(changed))
    return "".join(out)
