"""The accelerated share weighed by compute and by time (the report's `compute_share`, analysis/compute_share.py), in
the words every surface uses: the Overview's and the CLI's column beside the count, the Markdown and HTML reports,
and the Fallbacks page's ranking of what is off the accelerator."""
from __future__ import annotations

from collections.abc import Mapping

from ..analysis.compute_share import share_words
from ..report.types import Report, TargetBlock
from .typed_report import as_report, as_target

# Beside the split column ("32 of 36 compiled ops (89%) on …"): the same split weighed by MACs and by time.
WEIGHTED_COLUMN = "accelerated by MACs · time"


def share_of(t: TargetBlock | Mapping) -> dict | None:
    """A target's compute_share block as a dict, or None (a CPU-only target, an older report)."""
    block = as_target(t).compute_share
    return block.to_dict() if block else None


def weighted_cell(t: TargetBlock | Mapping) -> str | None:
    """">99.9% of MACs, 99.2% of measured time", or None when the target has neither figure."""
    return share_words(share_of(t)) or None


def heaviest_fallback_rows(report: Report | Mapping, tid: str) -> list[dict]:
    """The source ops a target leaves off its accelerator, heaviest first — by MACs, then by the time of the nodes
    that carry them — each with its share of the target's MACs and of its timed total (evidence in the columns)."""
    share = share_of(as_report(report).targets[tid])
    if not share:
        return []
    macs_ev = (share.get("by_macs") or {}).get("evidence")
    time_ev = (share.get("by_time") or {}).get("evidence") or "measured"
    rows = []
    for f in share.get("heaviest_fallbacks") or ():
        rows.append({
            "target": tid,
            "source op": f.get("source_op") or "— (inserted by the compiler)",
            "op_type": f.get("op_type"),
            "MACs": f.get("macs"),
            "% of MACs": None if f.get("macs_share") is None else round(100 * f["macs_share"], 2),
            "time µs": f.get("time_us"),
            "% of time": None if f.get("time_share") is None else round(100 * f["time_share"], 1),
            "module_path": f.get("module_path") or "—",
            "compiled nodes": ", ".join(f.get("nodes") or ()),
            "evidence": f"MACs from shapes, placement {macs_ev}" + (f" · time {time_ev}"
                                                                     if f.get("time_us") is not None else ""),
        })
    return rows
