"""The Report: one plain JSON-serialisable dict every view renders from (pages, CLI, Markdown, HTML)."""
from .build import SCHEMA_VERSION, build_report, target_block
from .schema import validate_report

__all__ = ["SCHEMA_VERSION", "build_report", "target_block", "validate_report"]
