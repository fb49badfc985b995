"""Task accuracy on the run's dataset, as every view says it (Overview, Drift, `xc analyze`, Markdown, HTML): one
sentence per target — "top-1 97.2 % → 95.8 % (−1.4 points, 25 of 360 samples change class)" —, a compact table,
the changed and worst samples, the confusion between reference and target classes, and one sample's values (an
image-like sample as an image). No UI imports here; sample names are data, escaped by whoever renders them.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from ..report.types import Accuracy, Report
from .typed_report import as_report


def accuracy_targets(report: Report | Mapping) -> list[str]:
    """The targets with an accuracy block, in the report's order."""
    report = as_report(report)
    return [tid for tid, t in report.targets.items() if t.accuracy]


def dataset_title(report: Report | Mapping) -> str:
    """"data.npz (360 samples, labels from labels.csv)"."""
    ds = as_report(report).dataset
    if not ds:
        return ""
    labels = f", labels from {ds.labels}" if ds.labels else ", no labels"
    prep = f", {ds.preprocessing}" if ds.preprocessing else ""
    return f"{ds.name} ({ds.samples:,} samples{prep}{labels})"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def accuracy_sentence(acc: Accuracy) -> str:
    """What the target's accuracy block says, in one line."""
    if not acc:
        return ""
    ran = acc.samples_run
    tail = f" — {acc.stopped}" if acc.stopped else ""
    if acc.error:
        return f"no accuracy — {acc.error}"
    of = f"{acc.changed_count:,} of {ran:,} samples change class"
    if acc.task == "classification":
        if acc.accuracy is not None and acc.reference_accuracy is not None:
            points = 100 * (acc.accuracy - acc.reference_accuracy)
            sign = "−" if points < 0 else "+" if points > 0 else "±"
            return (f"top-1 {_pct(acc.reference_accuracy)} → {_pct(acc.accuracy)} ({sign}{abs(points):.1f} points, "
                    f"{of}){tail}")
        if acc.top1_agreement is not None:
            return (f"top-1 agreement with the reference {_pct(acc.top1_agreement)}, top-{acc.k} "
                    f"{_pct(acc.topk_agreement)} ({of}){tail}")
        return f"top-1 {_pct(acc.accuracy)} against the labels on {ran:,} samples (no reference to compare){tail}"
    if acc.metric_mean is None:
        return f"{acc.metric or 'metric'}: no value{tail}"
    return (f"{acc.metric} against the reference: mean {acc.metric_mean:.6g}, worst {acc.metric_worst:.6g} over "
            f"{ran:,} samples{tail}")


def accuracy_lines(report: Report | Mapping) -> list[tuple[str, str, str]]:
    """(target, sentence, evidence) per target with an accuracy block."""
    report = as_report(report)
    # A block without figures (not run here, no class scores …) has no evidence to state.
    return [(tid, accuracy_sentence(a), "—" if a.error else a.evidence or "—")
            for tid in accuracy_targets(report) for a in (report.targets[tid].accuracy,)]


def accuracy_rows(report: Report | Mapping) -> list[dict]:
    """The compact table: a row per target."""
    report = as_report(report)
    rows = []
    for tid in accuracy_targets(report):
        a = report.targets[tid].accuracy
        row = {"target": tid, "task": "—" if a.error else a.task, "samples run": f"{a.samples_run:,} of {a.samples:,}"}
        if a.error:
            pass        # no figure: the note says why (not run here, no class scores …)
        elif a.task == "classification":
            delta = (None if a.accuracy is None or a.reference_accuracy is None
                     else 100 * (a.accuracy - a.reference_accuracy))
            row.update({"top-1 (reference)": _pct(a.reference_accuracy), "top-1 (target)": _pct(a.accuracy),
                        "Δ points": "—" if delta is None else f"{delta:+.1f}",
                        "top-1 agreement": _pct(a.top1_agreement),
                        "top-k agreement": f"{_pct(a.topk_agreement)} (k={a.k})" if a.k else "—",
                        "changed": f"{a.changed_count:,}"})
        else:
            row.update({"metric": a.metric or "—",
                        "mean": "—" if a.metric_mean is None else f"{a.metric_mean:.4g}",
                        "worst": "—" if a.metric_worst is None else f"{a.metric_worst:.4g}"})
        row["evidence"] = "—" if a.error else a.evidence or "—"
        if a.error or a.stopped:
            row["note"] = a.error or a.stopped
        rows.append(row)
    # One set of columns for every row: a figure a row has none of reads "—", never a blank or "None".
    columns = list(dict.fromkeys(k for row in rows for k in row))
    return [{c: row.get(c, "—") for c in columns} for row in rows]


def sample_rows(acc: Accuracy, which: str = "changed") -> list[dict]:
    """The changed (or worst) samples as table rows."""
    items = acc.changed if which == "changed" else acc.worst
    rows = []
    for c in items:
        row = {"sample": c.sample, "name": c.name}
        if acc.task == "classification":
            row.update({"label": "—" if c.label is None else str(c.label), "reference": str(c.reference),
                        "target": str(c.target)})
        # Bounded similarities as fixed decimals (0.999932, not "1"); an error figure in significant digits.
        bounded = acc.metric in ("cosine", "iou", "token_match")
        row[acc.metric or "metric"] = "—" if c.metric is None else f"{c.metric:.6f}" if bounded else f"{c.metric:.4g}"
        rows.append(row)
    return rows


def changed_sample_rows(report: Report | Mapping, limit: int = 50) -> list[dict]:
    """Every target's samples whose class changed, one table (target first), at most `limit` rows: the Overview's
    list; the Drift page opens each."""
    report = as_report(report)
    rows = []
    for tid in accuracy_targets(report):
        for row in sample_rows(report.targets[tid].accuracy, "changed"):
            # the classes under their own names: "target" is the target's id in this table
            classes = {"reference class": row.pop("reference", None), "target class": row.pop("target", None)}
            label = row.pop("label", None)
            rows.append({"target": tid, **row, "label": label, **classes})
    return rows[:limit]


def confusion_table(acc: Accuracy) -> tuple[list[str], list[list[int]]]:
    """(class names, matrix[reference][target]) of the confusion block; empty without one."""
    conf = acc.confusion or {}
    classes = [str(c) for c in conf.get("classes") or []]
    return classes, [list(r) for r in conf.get("matrix") or []]


def sample_values(dataset_npz: str | None, index: int) -> dict | None:
    """One dataset sample from a run's dataset.npz (the run folder's, or the run store's copy): {input: array};
    None without the file."""
    if not dataset_npz or not os.path.isfile(dataset_npz):
        return None
    with np.load(dataset_npz, allow_pickle=False) as z:
        out = {}
        for k in z.files:
            if k.startswith("input:"):
                arr = z[k]
                if 0 <= index < len(arr):
                    out[k.split(":", 1)[1]] = arr[index]
        return out or None


def as_image(arr: np.ndarray) -> np.ndarray | None:
    """An image-like sample (H×W grey, or 1 / 3 channels first or last, batch axes of 1) as uint8 H×W or H×W×3
    scaled to its own range; None for anything else."""
    a = np.asarray(arr, dtype=np.float64)
    while a.ndim > 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim == 3 and a.shape[0] in (1, 3) and a.shape[-1] not in (1, 3):
        a = np.moveaxis(a, 0, -1)
    if a.ndim == 3 and a.shape[-1] == 1:
        a = a[..., 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[-1] == 3)) or min(a.shape[:2]) < 4 or not np.isfinite(a).all():
        return None
    lo, hi = float(a.min()), float(a.max())
    scaled = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    image = (scaled * 255).round().astype(np.uint8)
    # A small image (digits' 8×8) blown up by whole pixels: a browser's smoothing would blur what the model saw.
    factor = max(1, 160 // max(image.shape[:2]))
    return image.repeat(factor, axis=0).repeat(factor, axis=1) if factor > 1 else image
