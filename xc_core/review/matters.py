"""The figures that say whether a change matters to a release, read from a target's report blocks (report/types.py
`Accuracy`, `Cost`, `ComputeShare`) into plain data: task accuracy on the run's dataset, what running the target
costs on this host, and its accelerated share weighed by compute and by measured time.

The run diff (review/diff.py) carries them per target, base and new; the gate (review/gate.py) judges them; the
fleet matrix (fleet/matrix.py) keeps one figure of each per cell. Accuracy and agreement are fractions (0–1) as the
report holds them; every loss the gate names is in percentage points.
"""
from __future__ import annotations

from ..report.types import TargetBlock

MB = 1 << 20


def accuracy_figures(t: TargetBlock) -> dict | None:
    """The target's task accuracy (None: the run had no dataset, or the target never ran it)."""
    a = t.accuracy
    if not a:
        return None
    return {"evidence": a.evidence, "task": a.task, "samples": a.samples, "samples_run": a.samples_run,
            "accuracy": a.accuracy, "reference_accuracy": a.reference_accuracy,
            "top1_agreement": a.top1_agreement, "changed_count": a.changed_count, "metric": a.metric,
            "metric_mean": a.metric_mean, "error": a.error}


def headline(f: dict | None, labelled: bool | None = None) -> tuple[float | None, str]:
    """(value, what) of the figure two runs are compared by: top-1 accuracy against the labels where the dataset
    has them, else top-1 agreement with the reference. `labelled` forces one (both runs must be read alike)."""
    if not f or f.get("error"):
        return None, ""
    use_labels = f.get("accuracy") is not None if labelled is None else labelled
    if use_labels:
        return f.get("accuracy"), "top-1 accuracy"
    return f.get("top1_agreement"), "top-1 agreement with the reference"


def loss_vs_reference(f: dict | None) -> tuple[float, str] | None:
    """(points lost against the reference, in words) in one run: with labels the reference's accuracy minus the
    target's; without, the share of samples whose class changed (an upper bound on the accuracy it could cost).
    None for a run without a classification result."""
    if not f or f.get("error") or f.get("task") != "classification":
        return None
    acc, ref = f.get("accuracy"), f.get("reference_accuracy")
    if acc is not None and ref is not None:
        return 100 * (ref - acc), f"top-1 accuracy {pct(acc)} vs the reference's {pct(ref)}"
    agree = f.get("top1_agreement")
    if agree is None:
        return None
    return 100 * (1 - agree), (f"top-1 agreement with the reference {pct(agree)} "
                               f"({f.get('changed_count', 0)} of {f.get('samples_run', 0)} samples changed class)")


def cost_figures(t: TargetBlock) -> dict | None:
    """The cost figures the diff compares (None: the run measured none)."""
    c = t.cost
    if not c:
        return None
    return {"evidence": c.evidence, "host": c.host, "peak_rss_mb": c.peak_rss_mb,
            "artifact_bytes": c.artifact_bytes, "load_s": c.load_s, "steady_inference_ms": c.steady_inference_ms}


def share_figures(t: TargetBlock) -> dict | None:
    """The accelerated share by op count, MACs and measured time: {way: {share, evidence, covered}} for each way
    the report weighs it (None: no compute_share block)."""
    cs = t.compute_share
    if not cs:
        return None
    out = {}
    for way in ("by_ops", "by_macs", "by_time"):
        f = getattr(cs, way)
        if f and f.share is not None:
            out[way] = {"share": f.share, "evidence": f.evidence, "covered": f.covered}
    return out or None


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def mb(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f} MB" if x >= 10 else f"{x:.1f} MB"


def size(n: int | None) -> str:
    if n is None:
        return "—"
    if n >= MB:
        return f"{n / MB:.1f} MB"
    return f"{n / 1024:.1f} kB" if n >= 1024 else f"{n} B"


def seconds(x: float | None) -> str:
    return "—" if x is None else f"{1000 * x:,.0f} ms" if x >= 0.01 else f"{1000 * x:.1f} ms"
