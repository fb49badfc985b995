"""`xc diff --format html`: the diff of two runs as one self-contained page — what changed in the model first (the
model diff: review/model_diff.py), then the decision diff's table per target, every change line with its cause,
the time notes and the verdict. Styles and escaping are the HTML report's (review/html.py); every value from a
report or a model (module paths, op and weight names, messages) is escaped there (`_e`).
"""
from __future__ import annotations

from .diff import change_lines, different_models, time_notes, verdict_line
from .html import CSS, _caption, _e, _note, _table
from .model_diff_text import (
    BY_MODULE_OVER,
    BY_MODULE_ROWS,
    KIND_ORDER,
    rename_items,
    rel_l2_words,
    summary_line,
)

_EXTRA_CSS = """
.k-added { color: #1a7f37; font-weight: 600; } .k-removed { color: #cf222e; font-weight: 600; }
.k-replaced, .k-weights, .k-attributes, .k-shapes, .k-dtypes { color: #9a6700; font-weight: 600; }
"""


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e(title)}</title><style>{CSS}{_EXTRA_CSS}</style></head>"
            f"<body><main><h1>{_e(title)}</h1>{body}</main></body></html>\n")


def _kind(kind: str) -> str:
    return f'<span class="k-{_e(kind)}">{_e(kind)}</span>'


def _detail(c: dict) -> str:
    """A change's detail in words (escaped): the op it replaced, the weights' rel L2, attributes' values."""
    detail = c.get("detail") or {}
    if c["kind"] == "replaced":
        return f"{_e(c.get('base_op'))} → {_e(c.get('op_type'))}"
    if c["kind"] == "weights":
        return "<br>".join(f"<code>{_e(w.get('name'))}</code> {_e(rel_l2_words(w))}"
                           for w in detail.get("tensors") or []) or "values differ"
    if c["kind"] in ("attributes", "shapes", "dtypes"):
        return "<br>".join(f"{_e(k)}: <code>{_e(_pair(v)[0])}</code> → <code>{_e(_pair(v)[1])}</code>"
                           for k, v in detail.items())
    return _e(f"in the block {c['block']}") if c.get("block") else ""


def _pair(v):
    return tuple(v) if isinstance(v, (list, tuple)) and len(v) == 2 else (None, v)


def model_section(md: dict) -> str:
    """The model diff as HTML: the counts, inserted / removed blocks, every other change in a table (by module
    beyond BY_MODULE_OVER), renames and notes as captions; two models that cannot be lined up: the one line."""
    out = [f"<p><b>{_e(summary_line(md))}</b></p>"]
    if not md.get("comparable", True):
        return "".join(out)
    blocks = md.get("blocks") or []
    if blocks:
        out.append(_table([{"block": _kind(b["kind"]), "module": f"<code>{_e(b['module_path'] or '(root)')}</code>",
                            "ops": _e(b.get("ops")),
                            "op types": _e(", ".join(f"{op} ×{n}" for op, n in (b.get("op_types") or {}).items()))}
                           for b in blocks], html_cols=("block", "module", "ops", "op types")))
    changes = [c for c in md.get("changes") or [] if not (c.get("block") and c["kind"] in ("added", "removed"))]
    changes.sort(key=lambda c: KIND_ORDER.index(c["kind"]) if c["kind"] in KIND_ORDER else len(KIND_ORDER))
    if len(changes) > BY_MODULE_OVER and md.get("by_module"):
        rows = md["by_module"]
        out.append(_caption(_e(f"{len(changes)} changes, by module (the JSON diff lists each)")))
        out.append(_table([{"module": r["module_path"] or "(root)", "added": r.get("added", 0),
                            "removed": r.get("removed", 0), "replaced": r.get("replaced", 0),
                            "changed": r.get("changed", 0)} for r in rows[:BY_MODULE_ROWS]]))
    elif changes:
        out.append(_table([{"change": _kind(c["kind"]),
                            "module": f"<code>{_e(c.get('module_path') or '(root)')}</code>",
                            "op": f"<code>{_e(c.get('op_type'))}</code>", "detail": _detail(c)} for c in changes],
                          html_cols=("change", "module", "op", "detail")))
    for _, item in rename_items(md):
        out.append(_caption("".join(f"<code>{_e(v)}</code>" if how == "code" else _e(v) for how, v in item)))
    for note in md.get("notes") or []:
        out.append(_caption(_e(f"note: {note}")))
    return "".join(out)


def model_diff_html(md: dict, base_label: str, new_label: str) -> str:
    """`xc diff --model-only --format html`: the model diff alone, as a page."""
    head = f'<p class="meta">base: {_e(base_label)}<br>new: {_e(new_label)}</p>'
    return _page("xc model diff", head + f'<section id="model"><h2>Model changes</h2>{model_section(md)}</section>')


def diff_html(d: dict, regressions: list[dict] | None = None) -> str:
    """The whole diff of two runs as one page: model changes first, then the decisions."""
    base, new = d["base"], d["new"]
    body = [f'<p class="meta">base: {_e(base.get("label") or base["name"])} (sha256 {_e(base["sha256"][:12])})<br>'
            f'new: {_e(new.get("label") or new["name"])} (sha256 {_e(new["sha256"][:12])})</p>']
    if different_models(d):
        body.append(_note(_e(different_models(d))))
    if d.get("model") is not None:
        body.append(f'<section id="model"><h2>Model changes</h2>{model_section(d["model"])}</section>')
    if regressions is not None:
        inner = (_table([{"target": r["target"], "rule": r["rule"], "what": r["what"]} for r in regressions])
                 if regressions else "<p>No regression.</p>")
        body.append(f'<section id="gate"><h2>Gate: {len(regressions)} regression(s)</h2>{inner}</section>')
    rows = []
    for tid, t in d["targets"].items():
        rows.append({"target": tid, "status": _arrow(t["status"]), "compiled ops": _arrow(t["op_count"]),
                     "CPU fallbacks": _arrow(t["fallbacks"]["count"]),
                     "fusions": f"+{len(t['fusions']['gained'])} / −{len(t['fusions']['lost'])}",
                     "backend changes": len(t["backend_changes"]),
                     "verdicts changed": sum(c["base"] != c["new"] for c in t["checklist"])})
    decisions = [_table(rows)] if rows else []
    lines = change_lines(d)
    decisions.append(_table([{"target": tid, "change": line} for tid, line in lines]) if lines
                     else "<p>No change in any compiler decision.</p>")
    notes = time_notes(d)
    if notes:
        decisions.append(_table([{"target": tid, "time note": line} for tid, line in notes]))
    body.append(f'<section id="decisions"><h2>Compiler decisions</h2>{"".join(decisions)}</section>')
    body.append(f"<p><b>{_e(verdict_line(d, regressions))}</b></p>")
    return _page(f"xc diff — {base['name']} → {new['name']}", "".join(body))


def _arrow(pair: dict) -> str:
    b, n = pair.get("base"), pair.get("new")
    return str(n) if b == n else f"{b} → {n}"
