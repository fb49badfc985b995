"""The Report: one plain JSON-serialisable dict every view renders from (pages, CLI, Markdown, HTML)."""
from .schema import validate_report

__all__ = ["validate_report"]
