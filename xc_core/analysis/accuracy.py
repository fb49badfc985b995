"""Task accuracy on the run's dataset (--data): each target's outputs for every sample against the reference's.

Classification (an output of shape (samples, C) or (samples, 1, C), C ≥ 2, chosen automatically unless the task
says otherwise): top-1 and top-k agreement with the reference, accuracy against the labels for the reference and
the target, every sample whose class changed (counted; the first MAX_LISTED listed), the worst samples by the
cosine of the two outputs, and the confusion between reference and target classes.

Per-sample tasks: one metric per sample against the reference — cosine, rel_l2, iou (boxes: an output of shape
(samples, [1,] boxes, ≥ 5) with rows [x1, y1, x2, y2, score, …]; boxes scoring at least BOX_SCORE are kept and each
one is matched to its best overlap in the other set) or token_match (integer outputs: the share of equal
elements) — with its mean, its worst and the worst samples.

The block's evidence is the evidence of the target's numerics (measured, or emulated where xc emulated the
runtime). Everything here is numpy on arrays the targets already produced.
"""
from __future__ import annotations

import numpy as np

from .. import evidence as ev

MAX_LISTED = 50          # changed samples listed (all are counted)
MAX_WORST = 10
MAX_CONFUSION_CLASSES = 30
BOX_SCORE = 0.5
# Metrics where higher is better; rel_l2 is an error (lower is better).
HIGHER_IS_BETTER = {"cosine": True, "rel_l2": False, "iou": True, "token_match": True}


def add_accuracy(report: dict, reference, results: list, captured, dataset, dataset_block: dict) -> None:
    """The report's `dataset` block and each target's `accuracy`, for a run with a dataset (the pipeline reads it
    from the run folder: inputs/dataset.py)."""
    report["dataset"] = dataset_block
    labels = captured.output_label_map() if captured is not None else {}
    for r in results:
        target = report["targets"].get(r.target)
        if target is not None:
            target["accuracy"] = accuracy_block(r, reference, dataset, labels)


def classification_output(outputs: dict, order: list[str]) -> str | None:
    """The first output shaped like class scores for every sample: (samples, C) or (samples, 1, C), C ≥ 2."""
    for name in order:
        a = outputs.get(name)
        if a is not None and a.dtype.kind == "f" and _scores(a) is not None:
            return name
    return None


def _scores(a: np.ndarray) -> np.ndarray | None:
    if a.ndim == 2 and a.shape[1] >= 2:
        return a
    if a.ndim == 3 and a.shape[1] == 1 and a.shape[2] >= 2:
        return a[:, 0]
    return None


def accuracy_block(r, reference, dataset, output_labels: dict | None = None) -> dict | None:
    """A target's `accuracy` (report/types.py Accuracy), None when the target never got to the dataset (it failed
    or was unavailable before running)."""
    run = r.dataset_run
    if run is None:
        return None
    output_labels = output_labels or {}
    block = {"evidence": r.evidence.get("numerics", ev.MEASURED), "task": "per-sample", "samples": len(dataset),
             "samples_run": int(run.get("samples_run") or 0), "stopped": run.get("stopped"), "error": None}
    mine = r.dataset_outputs or {}
    theirs = (reference.dataset_outputs or {}) if reference is not None else {}
    if not mine:
        block["error"] = run.get("stopped") or "the target produced no outputs for the dataset"
        return block
    order = [k for k in theirs if k in mine] or list(mine)
    task = dataset.task if dataset.task in ("classification", "per-sample") else (
        "classification" if classification_output(mine, order) else "per-sample")
    block["task"] = task
    n = min([block["samples_run"]] + [len(v) for v in mine.values()]
            + ([len(v) for k, v in theirs.items() if k in mine] if theirs else []))
    if task == "classification":
        name = classification_output(mine, order)
        if name is None:
            block["error"] = ("no output has class scores per sample (samples, C) or (samples, 1, C) with C ≥ 2 "
                              f"(outputs: {', '.join(f'{k} {list(v.shape[1:])}' for k, v in mine.items())}); "
                              "pick --task per-sample")
            return block
        block["output"] = output_labels.get(name, name)
        ref = _scores(theirs[name])[:n] if name in theirs else None
        block.update(classify(_scores(mine[name])[:n], ref, _labels(dataset, n), dataset.top_k,
                              dataset.sample_names, dataset.classes))
        return block
    name = order[0]
    block["output"] = output_labels.get(name, name)
    if name not in theirs:
        block["error"] = "the reference has no dataset outputs to compare with"
        return block
    metric = dataset.metric or ("token_match" if mine[name].dtype.kind in "iub" else "cosine")
    try:
        block.update(per_sample(mine[name][:n], theirs[name][:n], metric, dataset.sample_names))
    except ValueError as e:          # an output the metric cannot read (iou on something that is not boxes)
        block["error"] = str(e)
    return block


def _labels(dataset, n: int):
    return None if dataset.labels is None else np.asarray(dataset.labels)[:n]


def classify(target: np.ndarray, reference: np.ndarray | None, labels: np.ndarray | None, k: int,
             names: list[str], classes: list[str]) -> dict:
    """The classification figures of one target (scores (n, C)) against the reference's scores and the labels."""
    target = np.asarray(target, dtype=np.float64)
    k = max(1, min(int(k), target.shape[1]))
    tgt_top1 = target.argmax(axis=1)
    out = {"k": k, "accuracy": _share(tgt_top1 == labels) if labels is not None else None,
           "top1_agreement": None, "topk_agreement": None, "reference_accuracy": None, "changed_count": 0,
           "changed": [], "worst": [], "metric": "cosine", "metric_mean": None, "metric_worst": None,
           "confusion": {}}
    if reference is None:
        return out
    reference = np.asarray(reference, dtype=np.float64)
    ref_top1 = reference.argmax(axis=1)
    topk = np.argsort(-target, axis=1, kind="stable")[:, :k]
    cos = _cosine(target, reference)
    changed = np.flatnonzero(ref_top1 != tgt_top1)

    def sample(i: int) -> dict:
        return {"sample": int(i), "name": names[i] if i < len(names) else f"[{i}]",
                "label": _class(labels[i], classes) if labels is not None else None,
                "reference": _class(ref_top1[i], classes), "target": _class(tgt_top1[i], classes),
                "metric": _round(cos[i])}
    out.update({
        "top1_agreement": _share(ref_top1 == tgt_top1),
        "topk_agreement": _share((topk == ref_top1[:, None]).any(axis=1)),
        "reference_accuracy": _share(ref_top1 == labels) if labels is not None else None,
        "changed_count": int(len(changed)),
        "changed": [sample(i) for i in changed[:MAX_LISTED]],
        "worst": [sample(i) for i in np.argsort(cos, kind="stable")[:MAX_WORST]],
        "metric_mean": _round(float(np.mean(cos))) if len(cos) else None,
        "metric_worst": _round(float(np.min(cos))) if len(cos) else None,
        "confusion": confusion(ref_top1, tgt_top1, classes),
    })
    return out


def confusion(ref_top1: np.ndarray, tgt_top1: np.ndarray, classes: list[str]) -> dict:
    """matrix[reference class][target class] over the classes either predicted (the MAX_CONFUSION_CLASSES most
    frequent when there are more; `left_out` counts the samples outside them)."""
    ids, counts = np.unique(np.concatenate([ref_top1, tgt_top1]), return_counts=True)
    kept = sorted(int(c) for c in ids[np.argsort(-counts, kind="stable")][:MAX_CONFUSION_CLASSES])
    index = {c: i for i, c in enumerate(kept)}
    matrix = [[0] * len(kept) for _ in kept]
    left_out = 0
    for a, b in zip(ref_top1.tolist(), tgt_top1.tolist()):
        if a in index and b in index:
            matrix[index[a]][index[b]] += 1
        else:
            left_out += 1
    return {"classes": [_class(c, classes) for c in kept], "matrix": matrix, "left_out": left_out}


def per_sample(target: np.ndarray, reference: np.ndarray, metric: str, names: list[str]) -> dict:
    """One metric per sample against the reference, its mean and worst, and the worst samples."""
    if metric == "iou":
        values = _box_iou(target, reference)
    elif metric == "token_match":
        values = (np.asarray(target).reshape(len(target), -1) == np.asarray(reference).reshape(len(reference), -1)
                  ).mean(axis=1)
    elif metric == "rel_l2":
        t = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
        ref = np.asarray(reference, dtype=np.float64).reshape(len(reference), -1)
        values = np.linalg.norm(t - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-12)
    else:
        values = _cosine(target, reference)
    higher = HIGHER_IS_BETTER[metric]
    finite = np.where(np.isfinite(values), values, -np.inf if higher else np.inf)
    order = np.argsort(finite if higher else -finite, kind="stable")[:MAX_WORST]
    return {"metric": metric, "metric_mean": _round(float(np.nanmean(values))) if len(values) else None,
            "metric_worst": _round(float(finite[order[0]])) if len(values) else None,
            "worst": [{"sample": int(i), "name": names[i] if i < len(names) else f"[{i}]",
                       "metric": _round(float(values[i]))} for i in order],
            "changed_count": 0, "changed": []}


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64).reshape(len(a), -1)
    b = np.asarray(b, dtype=np.float64).reshape(len(b), -1)
    num = (a * b).sum(axis=1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    same = np.all(a == b, axis=1)           # two zero vectors agree
    return np.where(same, 1.0, num / np.maximum(den, 1e-300))


def _box_iou(target: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per sample: the mean best IoU of each kept box with the other set's, over both sets (1 when neither keeps a
    box, 0 when only one does)."""
    def boxes(a):
        a = np.asarray(a, dtype=np.float64)
        if a.ndim == 4 and a.shape[1] == 1:
            a = a[:, 0]
        if a.ndim != 3 or a.shape[2] < 5:
            raise ValueError(f"iou takes boxes (samples, [1,] boxes, ≥5: x1 y1 x2 y2 score …); this output is "
                             f"{list(a.shape)}")
        return a
    t, r = boxes(target), boxes(reference)
    out = np.zeros(len(t))
    for i in range(len(t)):
        tb, rb = t[i][t[i][:, 4] >= BOX_SCORE, :4], r[i][r[i][:, 4] >= BOX_SCORE, :4]
        if not len(tb) and not len(rb):
            out[i] = 1.0
        elif len(tb) and len(rb):
            m = _pairwise_iou(tb, rb)
            out[i] = (m.max(axis=1).sum() + m.max(axis=0).sum()) / (len(tb) + len(rb))
    return out


def _pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area = lambda z: np.clip(z[:, 2] - z[:, 0], 0, None) * np.clip(z[:, 3] - z[:, 1], 0, None)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-300), 0.0)


def _class(c, classes: list[str]):
    c = int(c)
    return classes[c] if 0 <= c < len(classes) else c


def _share(mask) -> float | None:
    mask = np.asarray(mask)
    return _round(float(mask.mean())) if mask.size else None


def _round(x: float | None) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), 6)
