"""The report's common causes as the review renderings read them: from the typed Report, handed to
analysis/common_cause.py's wording (cause_head, cause_body), which takes each cause as report.json holds it."""
from __future__ import annotations

from ..report.types import Report


def common_causes(report: Report) -> list[dict]:
    """Each common cause as a dict (as_report has computed them for a report written before they were stored)."""
    return [cause.to_dict() for cause in report.common_causes]


def covered_targets(report: Report) -> set[str]:
    """The targets a common cause covers: said once, at the top, not blamed one by one."""
    return {tid for cause in report.common_causes for tid in cause.targets}
