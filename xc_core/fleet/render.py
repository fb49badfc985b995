"""The matrix as text: one short label per cell (the Fleet page, matrix.md and matrix.html share it), Markdown for a
pull-request comment or a job summary, and one self-contained HTML file (no script, no request to any host)."""
from __future__ import annotations

import html

from ..errors import visible
from ..review.md_text import code, text
from .matrix import counts, grid

# Markdown only (GitHub draws the emoji), and always beside the status word: where no emoji font is installed they
# are empty boxes, alike for an ok and an error cell.
STATUS_MARK = {"ok": "✅", "error": "❌", "unavailable": "➖", "skipped": "⏭"}


def fmt_share(cell: dict) -> str | None:
    f = cell.get("accelerated_share")
    return None if f is None else f"{100 * f['value']:.0f}% acc"


def fmt_drift(cell: dict) -> str | None:
    f = cell.get("worst_drift")
    return None if f is None else f"drift {f['value']:.1e}"


def fmt_time(cell: dict) -> str | None:
    f = cell.get("time_us")
    if f is None:
        return None
    v = f["value"]
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def fmt_accuracy(cell: dict) -> str | None:
    """'top-1 98.3%' (against the labels) or 'agree 99.4%' (with the reference, a dataset without labels)."""
    f = cell.get("accuracy")
    if f is None:
        return None
    return f"{'top-1' if f.get('of') == 'top-1' else 'agree'} {100 * f['value']:.1f}%"


def fmt_cost(cell: dict) -> str | None:
    """'412 MB · 58.6 kB': peak memory, then the artifact's size (each where measured)."""
    from ..review.matters import mb, size
    parts = [mb(cell["peak_memory_mb"]["value"]) if cell.get("peak_memory_mb") else None,
             size(cell["artifact_bytes"]["value"]) if cell.get("artifact_bytes") else None]
    return " · ".join(p for p in parts if p) or None


def cell_label(cell: dict | None, marks: bool = False) -> str:
    """'ok 94% acc · 2 fb · drift 2.2e-07 · 0.25 ms · top-1 98.3% · 412 MB · 58.6 kB' — the figures a cell has, in
    a fixed order; with `marks`
    an emoji leads the status word (Markdown, where GitHub draws them; a canvas grid without an emoji font would
    not, and the word still tells)."""
    if cell is None:
        return "—"
    status = cell["status"]
    parts = [f"{STATUS_MARK[status]} {status}" if marks and status in STATUS_MARK else status]
    if status != "ok":
        return parts[0]
    share, drift, t = fmt_share(cell), fmt_drift(cell), fmt_time(cell)
    if share:
        parts.append(share)
    if cell.get("fallbacks") is not None:
        parts.append(f"{cell['fallbacks']['value']} fb")
    if drift:
        parts.append(drift)
    if t:
        parts.append(t)
    parts += [x for x in (fmt_accuracy(cell), fmt_cost(cell)) if x]
    return " ".join(parts[:1]) + (" " + " · ".join(parts[1:]) if len(parts) > 1 else "") + \
        (" (cached)" if cell.get("cached") else "")


def cell_evidence(cell: dict) -> str:
    """Each figure's evidence kind, for a tooltip or a caption."""
    from .matrix import METRICS
    return ", ".join(f"{m.replace('_', ' ')}: {cell[m]['evidence']}" for m in METRICS if cell.get(m))


def summary_line(matrix: dict) -> str:
    c = counts(matrix)
    statuses = ", ".join(f"{c[s]} {s}" for s in ("ok", "error", "unavailable", "skipped") if c.get(s))
    shards = matrix.get("shards") or []
    shard = (" · shards " + ", ".join(f"{s['index']}/{s['count']}" for s in shards)) if shards else ""
    return (f"{len(matrix['models'])} model(s) × {len(matrix.get('targets') or [])} target(s): {c['cells']} cells, "
            f"{statuses or 'none yet'}; {c['cached']} cached{shard}"
            + ("" if matrix.get("complete") else " · INCOMPLETE (a batch still running, or stopped)"))


def matrix_markdown(matrix: dict) -> str:
    """matrix.md (and the job summary, the PR comment): every model name, target, error and advice from the
    manifest, the models or matrix.json as inert text (review/md_text.py) — no markup, mention, link or escape."""
    models, targets, cells = grid(matrix)
    out = [f"## xc fleet matrix — {text(matrix.get('manifest') or '')}", "", summary_line(matrix), "",
           "| model | " + " | ".join(code(t) for t in targets) + " |",
           "|---|" + "---|" * len(targets)]
    for m in models:
        out.append(f"| {text(m)} | " + " | ".join(text(cell_label(cells.get((m, t)), marks=True)) for t in targets)
                   + " |")
    out += ["", "acc: the share of compute nodes on the accelerator · fb: CPU fallbacks · drift: the worst output's "
                "relative L2 against the reference · time: one run measured on this host's CPU · top-1: accuracy "
                "on the run's dataset against its labels (agree: agreement with the reference, no labels) · MB, "
                "kB: peak memory and artifact size, measured on this host. Evidence kinds per figure are in "
                "matrix.json."]
    problems = [c for c in matrix["cells"] if c.get("error")]
    if problems:
        out += ["", "<details><summary>Errors</summary>", ""]
        for c in problems:
            out.append(f"- **{text(c['model'])} × {code(c['target'])}**: {text(c['error'])}"
                       + (f" — {text(c['advice'])}" if c.get("advice") else ""))
        out += ["", "</details>"]
    return "\n".join(out) + "\n"


_CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#1b1f24}table{border-collapse:collapse}
th,td{border:1px solid #d0d7de;padding:6px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
td.ok{background:#e6f4ea}td.error,td.skipped{background:#fde7e9}td.unavailable{background:#f2f2f2}
td small{color:#57606a;display:block}.summary{margin:8px 0 16px}code{font-size:12px}"""


def matrix_html(matrix: dict) -> str:
    models, targets, cells = grid(matrix)

    def e(value) -> str:      # model names, targets, errors: escaped, and shown as text (errors.visible)
        return html.escape(visible(value))
    head = "".join(f"<th><code>{e(t)}</code></th>" for t in targets)
    body = []
    for m in models:
        tds = []
        for t in targets:
            c = cells.get((m, t))
            if c is None:
                tds.append("<td>—</td>")
                continue
            detail = c.get("error") or cell_evidence(c)
            if c.get("identity") and c["identity"] != t:       # the options this model's target ran with
                detail = f"{c['identity']}: {detail}"
            run = f"<small>run {e(c['run'][:12])}</small>" if c.get("run") else ""
            tds.append(f"<td class=\"{e(c['status'])}\" title=\"{e(detail)}\">{e(cell_label(c))}{run}</td>")
        body.append(f"<tr><th>{e(m)}</th>{''.join(tds)}</tr>")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>xc fleet matrix</title>"
            f"<style>{_CSS}</style></head><body><h1>xc fleet matrix — {e(matrix.get('manifest') or '')}</h1>"
            f"<p class=\"summary\">{e(summary_line(matrix))}</p>"
            f"<table><tr><th>model</th>{head}</tr>{''.join(body)}</table>"
            "<p>acc: share of compute nodes on the accelerator · fb: CPU fallbacks · drift: worst output's relative "
            "L2 against the reference · time: one run measured on this host's CPU · top-1: accuracy on the run's "
            "dataset (agree: agreement with the reference, no labels) · MB, kB: peak memory and artifact size on this "
            "host. Hover a cell for each figure's "
            "evidence kind, or the error. Open a run: <code>xc report RUN</code>, or the dashboard's "
            "<code>?run=RUN</code>.</p></body></html>\n")


# ---- the Fleet page's grid ---------------------------------------------------------------------------------
COLOUR_BY = {"status": "status", "accelerated share": "accelerated_share", "fallbacks": "fallbacks",
             "worst drift": "worst_drift", "time": "time_us"}
_STATUS_COLOUR = {"ok": "#d7f0dd", "error": "#f9d0d4", "skipped": "#f9d0d4", "unavailable": "#ececec"}
_GOOD, _BAD, _NONE = (215, 240, 221), (249, 208, 212), "#ffffff"


def families(matrix: dict) -> list[str]:
    from .matrix import family
    return list(dict.fromkeys(family(t) for t in matrix.get("targets") or []))


def grid_table(matrix: dict, keep_families: list[str] | None = None) -> tuple[list[str], list[str], list[list[str]]]:
    """(model names, target columns, cell labels by row) for the targets of the families kept."""
    from .matrix import family
    models, targets, cells = grid(matrix)
    if keep_families is not None:
        targets = [t for t in targets if family(t) in keep_families]
    return models, targets, [[cell_label(cells.get((m, t))) for t in targets] for m in models]


def cell_colours(matrix: dict, targets: list[str], colour_by: str) -> list[list[str]]:
    """A background colour per grid cell: by status, or green (good) to red (bad) along the chosen figure — share
    (more is better), fallbacks, worst drift (on a log scale, 1e-7 to 1e-1) and time (within its target's column:
    the fastest model green)."""
    import math
    models, _all, cells = grid(matrix)
    metric = COLOUR_BY[colour_by]

    def mix(bad_share: float) -> str:
        b = min(1.0, max(0.0, bad_share))
        return "#%02x%02x%02x" % tuple(round(g + (r - g) * b) for g, r in zip(_GOOD, _BAD))
    column_range = {}
    if metric == "time_us":
        for t in targets:
            values = [c["time_us"]["value"] for m in models if (c := cells.get((m, t))) and c.get("time_us")]
            column_range[t] = (min(values), max(values)) if values else None
    out = []
    for m in models:
        row = []
        for t in targets:
            c = cells.get((m, t))
            if c is None:
                row.append(_NONE)
            elif metric == "status" or c["status"] != "ok":
                row.append(_STATUS_COLOUR.get(c["status"], _NONE))
            elif c.get(metric) is None:
                row.append(_NONE)
            else:
                v = c[metric]["value"]
                if metric == "accelerated_share":
                    row.append(mix(1 - v))
                elif metric == "fallbacks":
                    row.append(mix(math.log1p(v) / math.log1p(20)))
                elif metric == "worst_drift":
                    row.append(mix((math.log10(max(v, 1e-7)) + 7) / 6))
                else:
                    lo, hi = column_range.get(t) or (v, v)
                    row.append(mix(0 if hi <= lo else (v - lo) / (hi - lo)))
        out.append(row)
    return out
