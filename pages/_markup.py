"""Untrusted text made safe for Streamlit's Markdown, and the evidence badge: small helpers every page and the
sidebar's panels use. Kept apart from _ui.py (which imports those panels) so the panels need not import _ui back."""
from __future__ import annotations

from xc_core.views.text import markdown_plain


def plain(text: str) -> str:
    """Text from a file or a compiler, shown as is: Markdown would turn `__import__` into bold "import", and
    "https://…" or "www.…" into a link (a word joiner after "://", "www" and "@" keeps them text)."""
    return markdown_plain(text)


def code(text) -> str:
    """Untrusted text as a Markdown code span: shown literally; a backtick would end the span, a newline the line."""
    return "`" + " ".join(str(text).split()).replace("`", "'") + "`"


def evidence_badge(kind: str | None) -> str:
    if not kind:
        return ""
    colors = {"measured": "green", "reported": "blue", "predicted-runtime": "orange",
              "predicted-rules": "violet", "emulated": "gray"}
    return f":{colors.get(kind, 'gray')}-badge[{kind}]"
