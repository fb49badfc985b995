"""The model diff (review/model_diff.py's dict) in words: Markdown for the PR comment and the job summary, plain text
for a terminal or a CI log. One list of items feeds both, so they say the same things in the same order: whole
blocks inserted or removed, ops replaced, ops added or removed outside a block, retrained weights, attributes,
shapes and dtypes — then renames (quiet: a renumbered Sequential is no change) and what could not be compared.

Every name in a model diff comes from a model file (module paths, op and weight names): the Markdown escapes it
(md_text), the text makes it one printable line (errors.printable_line).
"""
from __future__ import annotations

from ..errors import printable_line, visible
from ..views.model_compare import plural as _plural, summary_line  # noqa: F401 — summary_line is this module's too
from ..views.text import inert
from .md_text import code, table, text

# The order changes are listed in: what a reviewer asks about first.
KIND_ORDER = ("replaced", "added", "removed", "weights", "attributes", "shapes", "dtypes")
BY_MODULE_OVER = 200        # more changes than this: a table by module instead of the list
BY_MODULE_ROWS = 40         # rows of that table; the JSON diff has the rest
RENAMES_SHOWN = 6           # renames named in the quiet line; the rest counted
TEXT_MAX_ITEMS = 200        # lines the terminal rendering lists before it counts the rest


# An item is a list of segments: ("code", value) for a name from the model, ("text", value) for xc's words.
def _items(md: dict) -> list[list[tuple[str, str]]]:
    """Every change worth a line, most telling first: blocks, then changes by KIND_ORDER (graph order within a
    kind); an op inside a listed block is that block's line, not one of its own."""
    items = []
    for b in md.get("blocks") or []:
        ops = ", ".join(f"{op} ×{n}" if n > 1 else op for op, n in (b.get("op_types") or {}).items())
        items.append([("text", f"block {b['kind']}: "), ("code", b["module_path"] or "(root)"),
                      ("text", f" — {_plural(b.get('ops', 0), 'op')}" + (f" ({ops})" if ops else ""))])
    changes = [c for c in md.get("changes") or []
               if not (c.get("block") and c["kind"] in ("added", "removed"))]
    changes.sort(key=lambda c: KIND_ORDER.index(c["kind"]) if c["kind"] in KIND_ORDER else len(KIND_ORDER))
    for c in changes:
        items.append(_change_item(c))
    return items


def _change_item(c: dict) -> list[tuple[str, str]]:
    where = [("text", " at "), ("code", c.get("module_path") or "(root)")]
    kind, detail = c["kind"], c.get("detail") or {}
    if kind == "replaced":
        return [("text", "replaced: "), ("code", c.get("base_op") or "?"), ("text", " → "), ("code", c["op_type"]),
                *where]
    if kind in ("added", "removed"):
        return [("text", f"{kind}: "), ("code", c["op_type"]), *where]
    head = [("text", f"{kind} changed: "), ("code", c["op_type"]), *where, ("text", ": ")]
    if kind == "weights":
        parts = []
        for i, w in enumerate(detail.get("tensors") or []):
            parts += [("text", "; ")] if i else []
            parts += [("code", w.get("name") or "?")]
            if w.get("base_name") and w["base_name"] != w.get("name"):
                parts += [("text", " (was "), ("code", w["base_name"]), ("text", ")")]
            parts += [("text", f" {rel_l2_words(w)}")]
        return head + (parts or [("text", "values differ")])
    parts = []
    for i, (name, pair) in enumerate(detail.items()):
        b, n = (pair if isinstance(pair, (list, tuple)) and len(pair) == 2 else (None, pair))
        parts += [("text", ", ")] if i else []
        parts += [("text", f"{name} "), ("code", _value(b)), ("text", " → "), ("code", _value(n))]
    return head + (parts or [("text", c.get("text") or "differs")])


def rel_l2_words(w: dict) -> str:
    """"rel L2 0.1 (exact)" from both tensors' values, "rel L2 ≥ 0.0953 (from the norms)" from the records alone."""
    r = w.get("rel_l2")
    if r is None:
        return "changed (rel L2 unknown)"
    if w.get("rel_l2_bound") == "exact":
        return f"rel L2 {r:.3g} (exact)"
    return f"rel L2 ≥ {r:.3g} (lower bound, from the norms)"


def _value(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return "—" if v is None else str(v)


def _plain(item: list[tuple[str, str]]) -> str:
    return printable_line("".join(v for _, v in item))


def _markdown(item: list[tuple[str, str]]) -> str:
    def segment(how: str, v: str) -> str:
        # text() and code() make a value one trimmed line: the spaces between segments are kept here
        lead, trail = (" " if v[:1].isspace() else ""), (" " if v[-1:].isspace() else "")
        return lead + (_name(v) if how == "code" else text(v)) + trail
    return "".join(segment(how, v) for how, v in item)


def _name(value: str) -> str:
    """A name from the model as a code span when it shows as itself; one with a control character, or with what
    GitHub would turn into a mention, reference or link, as escaped inert text instead (a code span keeps "@" and
    "://" as they are)."""
    one_line = " ".join(str(value).split())
    return code(value) if visible(one_line) == one_line == inert(one_line) else text(value)


def rename_items(md: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """(why, item) per kind of rename: "renumbered" (an insertion or removal shifted the indices) and "renamed"."""
    out = []
    renames = md.get("renamed_modules") or []
    for why, words in (("renumbered", "renumbered by the insertion or removal, not changed: "),
                       ("renamed", "renamed, not changed: ")):
        mine = [r for r in renames if r.get("why") == why]
        if not mine:
            continue
        item = [("text", words)]
        for i, r in enumerate(mine[:RENAMES_SHOWN]):
            item += ([("text", ", ")] if i else []) + [("code", r["base"]), ("text", " → "), ("code", r["new"])]
        if len(mine) > RENAMES_SHOWN:
            item.append(("text", f" and {len(mine) - RENAMES_SHOWN} more"))
        out.append((why, item))
    return out


def model_change_lines(md: dict) -> list[str]:
    """Every listed change as one plain line (no Markdown), in the rendering order."""
    return [_plain(item) for item in _items(md)] if md.get("comparable", True) else []


def model_changes_text(md: dict, indent: str = "  ") -> str:
    """The model diff for a terminal: "Model changes: <counts>", then a line per change (a table by module beyond
    BY_MODULE_OVER), the renames and the notes — or the one line for models that cannot be lined up."""
    out = [printable_line(f"Model changes: {summary_line(md)}")]
    if not md.get("comparable", True):
        return out[0] + "\n"
    items = _items(md)
    if len(items) > BY_MODULE_OVER and md.get("by_module"):
        out.append(f"{indent}by module ({len(items)} changes; the JSON diff lists each):")
        rows = md["by_module"]
        for r in rows[:BY_MODULE_ROWS]:
            out.append(f"{indent}  {printable_line(r['module_path'] or '(root)')}: " + _module_counts(r))
        if len(rows) > BY_MODULE_ROWS:
            out.append(f"{indent}  … and {len(rows) - BY_MODULE_ROWS} more modules")
    else:
        out += [indent + _plain(item) for item in items[:TEXT_MAX_ITEMS]]
        if len(items) > TEXT_MAX_ITEMS:
            out.append(f"{indent}… and {len(items) - TEXT_MAX_ITEMS} more (in the JSON diff)")
    out += [indent + _plain(item) for _, item in rename_items(md)]
    out += [indent + printable_line(f"note: {n}") for n in md.get("notes") or []]
    return "\n".join(out) + "\n"


def _module_counts(r: dict) -> str:
    return ", ".join(f"{r.get(k, 0)} {k}" for k in ("added", "removed", "replaced", "changed") if r.get(k))


def model_changes_markdown(md: dict, max_lines: int = 8) -> str:
    """The "Model changes" section: a line of counts, the first `max_lines` changes, the rest inside <details>
    (beyond BY_MODULE_OVER changes a table by module instead of the list), renames and notes as quiet lines.
    Models that cannot be lined up: the one line only."""
    head = f"**Model changes:** {text(summary_line(md))}"
    if not md.get("comparable", True):
        return head + "\n"
    out = [head, ""]
    items = _items(md)
    if len(items) > BY_MODULE_OVER and md.get("by_module"):
        rows = md["by_module"]
        out += [f"{len(items)} changes, by module (the JSON diff lists each):", ""]
        out += [table(["module", "added", "removed", "replaced", "changed"],
                      [[code(r["module_path"] or "(root)"), str(r.get("added", 0)), str(r.get("removed", 0)),
                        str(r.get("replaced", 0)), str(r.get("changed", 0))] for r in rows[:BY_MODULE_ROWS]]), ""]
        if len(rows) > BY_MODULE_ROWS:
            out += [f"… and {len(rows) - BY_MODULE_ROWS} more modules (in the JSON diff)", ""]
    elif items:
        out += [f"- {_markdown(item)}" for item in items[:max_lines]]
        if len(items) > max_lines:
            out += ["", f"<details><summary>{len(items) - max_lines} more model changes</summary>", ""]
            out += [f"- {_markdown(item)}" for item in items[max_lines:]]
            out += ["", "</details>"]
        out.append("")
    quiet = [_markdown(item) for _, item in rename_items(md)] + [text(f"note: {n}") for n in md.get("notes") or []]
    if quiet:
        out += ["<sub>" + " · ".join(quiet) + "</sub>", ""]
    return "\n".join(out).rstrip("\n") + "\n"
