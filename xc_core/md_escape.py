"""Untrusted text (names from a model file, a compiler's messages, an imported report) made safe to show in
Markdown: the dashboard renders it, GitHub renders the PR comment."""
from __future__ import annotations

import re

# U+2060 WORD JOINER: invisible and not a space, so a name reads (and copies) as it is, but it is neither a letter
# nor a digit, and GitHub links an @mention, an #issue reference, an e-mail address or a bare URL only when one
# follows "@", "#", "://" or "www." directly. A backslash escape would not do: GitHub finds mentions and references
# in the rendered text, after escapes are gone; a code span would, but reads as code.
_WJ = "\u2060"
_LINKING = re.compile(r"(@|#|:(?=//)|\b[wW]{3}(?=\.))")


def inert(s: str) -> str:
    """Already escaped text with nothing GitHub would turn into a link or a notification: no live @mention (a PR
    comment would ping that user or team), #123 reference, e-mail address or bare URL."""
    return _LINKING.sub(lambda m: m.group(0) + _WJ, s)


def markdown_plain(value) -> str:
    """Text shown as is in Markdown: every character Markdown would read as markup escaped (`__import__` would
    turn into bold "import", "https://…" or "www.…" into a link), and nothing left that links or notifies."""
    return inert(re.sub(r"([\\`*_{}\[\]()#+\-!|~<>$])", r"\\\1", str(value)))
