"""The "Cost on this host" section of the Markdown and HTML reports: the side-by-side table of peak memory, size on
disk, compile, load and inference time per target (xc_core/views/cost.py), the runtimes' own memory figures, and
the caveat that these are the Linux CPU's figures, not the device's. "" for a report without cost blocks."""
from __future__ import annotations

from ..views.cost import COST_CAVEAT, cost_host, cost_rows, runtime_memory_rows
from ..views.typed_report import as_report

_MD_COLUMNS = ("peak memory MB", "size KB (weights)", "compile s", "load ms", "first inference ms",
               "steady inference ms")


def markdown_section(report) -> str:
    from .md_text import code, table, text
    report = as_report(report)
    rows = cost_rows(report)
    if not rows:
        return ""
    parts = [f"#### Cost on this host ({text(rows[0]['evidence'])}: {text(cost_host(report))})", "",
             table(["target", *_MD_COLUMNS], [[code(r["target"])] + [text(r[c]) for c in _MD_COLUMNS]
                                               for r in rows]), ""]
    missing = [f"- {code(r['target'])}: {text(r['not measured'])}" for r in rows if r["not measured"]]
    if missing:
        parts += ["Not measured:", "", "\n".join(missing), ""]
    own = runtime_memory_rows(report)
    if own:
        parts += ["The runtimes' own memory figures:", "",
                  table(["target", "figure", "KB", "by", "evidence"],
                        [[code(m["target"]), text(m["figure"]), text(m["KB"]), text(m["by"]), text(m["evidence"])]
                         for m in own]), ""]
    parts.append(f"<sub>{text(COST_CAVEAT)} Peak memory: in brackets, its growth over the resident size before the "
                 "run; steady inference: the median of the runs counted after ×.</sub>")
    return "\n".join(parts)


def html_section(report, esc, badge, render_table) -> str:
    """`esc`, `badge` and `render_table` are the HTML report's own escaper, evidence badge and table."""
    report = as_report(report)
    rows = cost_rows(report)
    if not rows:
        return ""
    out = [f"<h3>Cost on this host {badge(rows[0]['evidence'])}</h3>",
           f'<p class="caption">{esc(cost_host(report))}</p>', render_table(rows)]
    own = runtime_memory_rows(report)
    if own:
        out.append("<p>The runtimes' own memory figures:</p>")
        out.append(render_table(own))
    out.append(f'<p class="caption">{esc(COST_CAVEAT)} Peak memory: in brackets, its growth over the resident size '
               "before the run; steady inference: the median of the runs counted after ×.</p>")
    return "".join(out)
