"""A report dict read as a `Report` once, upgraded with what only the floors above the report's types know.

Every view, review, page and fleet module takes a `Report` (xc_core/report/types.py) and reads attributes; those
that are also handed a dict (report.json just loaded, a test's fixture) call `as_report` first. Converting costs
0.2–0.5 s on a sample report, so the last few conversions are kept: the same dict object comes back as the same
Report. A report dict is not changed after it was read (the views never write to it), so the kept Report stays
true to it.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from ..report.types import Report, TargetBlock

_KEPT = 8
_kept: OrderedDict[int, tuple[Mapping, Report]] = OrderedDict()
_lock = threading.Lock()


def _accelerator_for(identity: str) -> str | None:
    """The accelerator of the registered target of this identity (None: CPU-only, or a target this xc does not
    know — an imported report's)."""
    from ..errors import XcInputError
    from ..targets import make_target
    try:
        return make_target(identity).accelerator
    except XcInputError:
        return None


def _common_causes_of(report: dict) -> list:
    from ..analysis.common_cause import common_causes
    return common_causes(report)


def as_report(report: Report | Mapping | None) -> Report:
    """`report` as a Report (a Report comes back as it is; None reads as an empty one)."""
    if isinstance(report, Report):
        return report
    if report is None:
        return Report(null=True)
    key = id(report)
    with _lock:
        kept = _kept.get(key)
        if kept is not None and kept[0] is report:
            _kept.move_to_end(key)
            return kept[1]
    typed = Report.from_dict(report, accelerator_for=_accelerator_for, common_causes_of=_common_causes_of)
    with _lock:
        _kept[key] = (report, typed)        # the dict is held too, so its id cannot be reused while kept
        while len(_kept) > _KEPT:
            _kept.popitem(last=False)
    return typed


def as_target(block: TargetBlock | Mapping | None) -> TargetBlock:
    """One target block as a TargetBlock, for a helper handed a single block (a test's, or an older caller's)."""
    if isinstance(block, TargetBlock):
        return block
    return TargetBlock.from_dict(block)
