"""Per-output drift of a target against the reference, with the metrics Polygraphy reports.

`min_atol` is the smallest absolute tolerance that passes with rtol = 0 (the max absolute error); `min_rtol` the
smallest relative tolerance that passes with atol = 0 (the max of |target - ref| / |ref|). Where the reference is
exactly 0 and the target is not, no rtol passes alone: `min_rtol` is null and `rtol_needs_atol` is true.
"""
from __future__ import annotations

import numpy as np

METRICS = ("max_abs", "mean_abs", "rel_l2", "cosine", "snr_db", "min_atol", "min_rtol")


def drift_metrics(reference: np.ndarray, target: np.ndarray) -> dict:
    ref = np.asarray(reference)
    out = np.asarray(target)
    if ref.shape != out.shape:
        return {"error": f"shape mismatch: reference {list(ref.shape)}, target {list(out.shape)}",
                "shape": list(out.shape), "reference_shape": list(ref.shape)}
    r = ref.astype(np.float64).ravel()
    t = out.astype(np.float64).ravel()
    finite = np.isfinite(t).all()
    d = t - r
    diff = np.abs(d)
    ref_norm = _norm(r)
    err_norm, cosine, snr = _agreement(r, ref_norm, t, d)
    nonzero = np.abs(r) > 0
    zero_ref_mismatch = bool(np.any(diff[~nonzero] > 0))
    min_rtol = float(np.max(diff[nonzero] / np.abs(r[nonzero]))) if nonzero.any() else 0.0
    m = {
        "shape": list(out.shape),
        "dtype": str(out.dtype),
        "max_abs": float(diff.max()) if diff.size else 0.0,
        "mean_abs": float(diff.mean()) if diff.size else 0.0,
        "rel_l2": float(err_norm / ref_norm) if ref_norm else (0.0 if err_norm == 0 else None),
        "cosine": cosine,
        "snr_db": snr,
        "exact": bool(err_norm == 0),
        "min_atol": float(diff.max()) if diff.size else 0.0,
        "min_rtol": None if zero_ref_mismatch else min_rtol,
        "rtol_needs_atol": zero_ref_mismatch,
        "finite": bool(finite),
    }
    return _clean(m)


def _norm(x: np.ndarray) -> float:
    return float(np.sqrt(np.dot(x, x)))     # np.linalg.norm's own formula for a 1-D float64 array


def _agreement(r: np.ndarray, ref_norm: float, t: np.ndarray, d: np.ndarray) -> tuple[float, float, float | None]:
    """(|t - r|, cosine, SNR in dB) of float64 vectors with d = t - r; SNR is None when it is infinite (identical,
    written as null with exact=true) or undefined (a zero reference)."""
    err_norm, t_norm = _norm(d), _norm(t)
    if ref_norm == 0 and t_norm == 0:
        cosine = 1.0
    elif ref_norm == 0 or t_norm == 0:
        cosine = 0.0
    else:
        cosine = float(np.dot(r, t) / (ref_norm * t_norm))
    snr = float(20 * np.log10(ref_norm / err_norm)) if err_norm and ref_norm else None
    return err_norm, cosine, snr


class ReferenceVectors:
    """The reference's values as float64 vectors with their norms, made once and shared by every target's
    comparison (per-layer drift compares each target against the same reference values at every probe)."""

    def __init__(self, values: dict):
        self._values, self._made = values, {}

    def __contains__(self, key) -> bool:
        return key in self._values

    def get(self, key) -> tuple[np.ndarray, tuple, float]:
        if key not in self._made:
            a = np.asarray(self._values[key])
            r = a.astype(np.float64).ravel()
            self._made[key] = (r, a.shape, _norm(r))
        return self._made[key]


def agreement(ref: ReferenceVectors, key, target: np.ndarray) -> dict:
    """rel_l2, max_abs, cosine and snr_db of one target value against the reference's at `key` (the figures
    per-layer drift plots), or {"error": ...} when the shapes differ."""
    r, shape, ref_norm = ref.get(key)
    out = np.asarray(target)
    if out.shape != shape:
        return {"error": f"shape mismatch: reference {list(shape)}, target {list(out.shape)}"}
    t = out.astype(np.float64).ravel()
    d = t - r
    err_norm, cosine, snr = _agreement(r, ref_norm, t, d)
    return _clean({"rel_l2": float(err_norm / ref_norm) if ref_norm else (0.0 if err_norm == 0 else None),
                   "max_abs": float(np.abs(d).max()) if d.size else 0.0, "cosine": cosine, "snr_db": snr})


def passes(metrics: dict, atol: float, rtol: float, reference: np.ndarray | None = None,
           target: np.ndarray | None = None) -> bool:
    """np.isclose semantics when the arrays are at hand; otherwise the conservative bound from the metrics."""
    if "error" in metrics:
        return False
    if reference is not None and target is not None:
        return bool(np.allclose(target, reference, atol=atol, rtol=rtol))
    return metrics["max_abs"] <= atol or (metrics["min_rtol"] is not None and metrics["min_rtol"] <= rtol)


def worst(outputs: dict[str, dict]) -> dict | None:
    """The output with the largest relative L2 error (errors first)."""
    items = list(outputs.items())
    if not items:
        return None
    errored = [(k, v) for k, v in items if "error" in v]
    if errored:
        return {"output": errored[0][0], "error": errored[0][1]["error"]}
    k, v = max(items, key=lambda kv: (kv[1].get("rel_l2") or 0.0))
    return {"output": k, "rel_l2": v.get("rel_l2"), "max_abs": v.get("max_abs"), "snr_db": v.get("snr_db"),
            "cosine": v.get("cosine")}


def _clean(d: dict) -> dict:
    """NaN is not JSON: write it as null."""
    return {k: (None if isinstance(v, float) and (np.isnan(v) or np.isinf(v)) else v) for k, v in d.items()}


# rtol grid for the tolerance curve: the page answers "pass at (atol, rtol)?" from it without the arrays.
RTOL_GRID = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
# 500 points show a scatter's shape; at 7 significant digits (fp32's resolution) a sample costs ~11 KB per output
# and target in report.json, instead of ~60 KB for 2,000 points in full float64 repr.
SCATTER_POINTS = 500
SCATTER_DIGITS = 7
HIST_BINS = 40


def drift_details(reference: np.ndarray, target: np.ndarray, seed: int = 0) -> dict | None:
    """Serialisable material for the drift page: the smallest atol that passes at each rtol of RTOL_GRID
    (np.isclose: |t - r| <= atol + rtol·|r|), a histogram of log10 |error|, and a seeded sample of
    (reference, target) pairs for a scatter plot."""
    ref = np.asarray(reference, dtype=np.float64).ravel()
    out = np.asarray(target, dtype=np.float64).ravel()
    if ref.shape != out.shape or ref.size == 0 or not np.isfinite(out).all():
        return None
    err = np.abs(out - ref)
    curve = [{"rtol": r, "min_atol": float(max(0.0, np.max(err - r * np.abs(ref))))} for r in RTOL_GRID]
    nz = err[err > 0]
    if nz.size:
        logs = np.log10(nz)
        counts, edges = np.histogram(logs, bins=HIST_BINS)
        hist = {"log10_edges": [float(e) for e in edges], "counts": [int(c) for c in counts],
                "exact": int(err.size - nz.size)}
    else:
        hist = {"log10_edges": [], "counts": [], "exact": int(err.size)}
    idx = np.arange(ref.size)
    if ref.size > SCATTER_POINTS:
        idx = np.sort(np.random.default_rng(seed).choice(ref.size, SCATTER_POINTS, replace=False))
    return {"tolerance_curve": curve, "histogram": hist,
            "scatter": {"reference": _rounded(ref[idx]), "target": _rounded(out[idx]),
                        "sampled": int(idx.size), "total": int(ref.size)}}


def _rounded(values: np.ndarray) -> list[float]:
    return [float(f"{x:.{SCATTER_DIGITS}g}") for x in values.tolist()]


def passes_at(details: dict, atol: float, rtol: float) -> bool:
    """Conservative pass/fail from the tolerance curve: use the largest grid rtol not above the asked rtol."""
    usable = [p for p in details["tolerance_curve"] if p["rtol"] <= rtol]
    point = usable[-1] if usable else details["tolerance_curve"][0]
    return atol >= point["min_atol"]
