"""Text xc did not write (model, node, tensor and file names, manifest names, compilers' messages) in the Markdown
xc writes: report.md, the run diff, matrix.md, the fleet diff — and so the pull-request comment and the job summary
that post them. Every renderer of those calls these, so they share one rule:

- control and format characters are shown as escapes (`errors.visible`: no terminal escape, no right-to-left
  override reaches the page);
- a value is one line, HTML-escaped, with Markdown's markup characters escaped (no emphasis, link, image, heading
  or a pipe that splits a table cell);
- nothing GitHub would turn into a mention, an issue reference or a link (`views.text.inert`).
"""
from __future__ import annotations

import html

from ..errors import visible
from ..views.text import inert

_MARKUP = "\\`*_[]|#~$"


def text(value) -> str:
    """Untrusted text as inert Markdown, in a table cell or a line: no HTML, no emphasis, link or image syntax, no
    pipe that splits the cell, nothing GitHub links or notifies, no character that acts instead of showing."""
    s = html.escape(visible(" ".join(str(value).split())), quote=False)
    for ch in _MARKUP:
        s = s.replace(ch, "\\" + ch)
    return inert(s)


def code(value) -> str:
    """An identifier as a code span (backticks cannot be escaped inside one, so they become quotes; a pipe still
    splits a GFM cell). GitHub links nothing inside a code span."""
    return "`" + visible(" ".join(str(value).split())).replace("`", "'").replace("|", "\\|") + "`"


def html_text(value) -> str:
    """Untrusted text inside an HTML block of the Markdown (a <details> summary): Markdown escapes do not apply
    there, HTML escapes do (inert first: escaping writes "&#x27;", whose "#" must not be joined)."""
    return html.escape(inert(visible(" ".join(str(value).split()))))


def table(header: list[str], rows: list[list[str]]) -> str:
    """A GFM table of cells already rendered (text / code); an empty cell reads "—"."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell or "—" for cell in row) + " |" for row in rows]
    return "\n".join(lines)
