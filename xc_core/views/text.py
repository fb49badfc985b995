"""Untrusted text made safe to show in Markdown (the functions live in xc_core/md_escape.py, below every layer that
writes Markdown, so the culprit's bug report uses the same escaping as the views)."""
from __future__ import annotations

from ..md_escape import inert, markdown_plain

__all__ = ["inert", "markdown_plain"]
