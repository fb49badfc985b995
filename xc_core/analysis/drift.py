"""Per-output drift of a target against the reference, with the metrics Polygraphy reports.

`min_atol` is the smallest absolute tolerance that passes with rtol = 0 (the max absolute error); `min_rtol` the
smallest relative tolerance that passes with atol = 0 (the max of |target - ref| / |ref|). Where the reference is
exactly 0 and the target is not, no rtol passes alone: `min_rtol` is null and `rtol_needs_atol` is true.

A comparison is only as good as what it compares against: a reference output that is constant, all zeros or not
finite matches every target that outputs the same constant, right or wrong (`reference_check`: "not
informative"), and a target figure no precision choice can produce (non-finite, or rel L2 > 1 with the output's
scale off by orders of magnitude) is a broken run, not drift (`implausible`). Both are recorded with the check
that failed, so no view shows such a figure as a match or a plain number.
"""
from __future__ import annotations

import numpy as np

# What a target that compiles the program xc's ONNX → PyTorch route made (targets/routed.py) is compared against:
# that program's own outputs at the analysis inputs, so its drift is the compiler's; the route's own drift
# against ONNX Runtime is measured apart (capture.onnx_route.conversion_drift).
ROUTE_REFERENCE = "onnx-route program"

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
    m = _clean(m)
    bad = implausible(r, t, m)          # the float64 vectors already made: no copy
    if bad:
        m["implausible"] = bad
    return m


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
    """The output that says most about the target: an output that could not be compared first, then one whose
    figures are implausible, then the largest relative L2 error among outputs whose reference can tell (an output
    with a constant reference only when every output has one). Its `implausible` / `not_informative` reason
    comes with it."""
    items = list(outputs.items())
    if not items:
        return None
    errored = [(k, v) for k, v in items if "error" in v]
    if errored:
        return {"output": errored[0][0], "error": errored[0][1]["error"]}
    implausible = [(k, v) for k, v in items if v.get("implausible")]
    telling = [(k, v) for k, v in items if not v.get("not_informative")]
    k, v = implausible[0] if implausible else max(telling or items, key=lambda kv: (kv[1].get("rel_l2") or 0.0))
    out = {"output": k, "rel_l2": v.get("rel_l2"), "max_abs": v.get("max_abs"), "snr_db": v.get("snr_db"),
           "cosine": v.get("cosine")}
    for key in ("implausible", "not_informative"):
        if v.get(key):
            out[key] = v[key]
    return out


# xc's ONNX → PyTorch route departs from ONNX Runtime when an output's relative L2 error is above this (or its
# shape or dtype differs): float32 kernels summing in another order stay orders of magnitude below it. Here, below
# the route, because the checklist judges the route by the same test the route used to look for a departing node.
DEPARTS_ABOVE = 1e-4


def route_departing(drift: dict) -> list[str]:
    """The outputs on which the route departs from ONNX Runtime (its `conversion_drift`): a shape or dtype that
    differs, or a relative L2 error above DEPARTS_ABOVE."""
    return [name for name, m in drift.items()
            if m.get("shape_match") is False or m.get("dtype_match") is False and "note" not in m
            or (m.get("rel_l2") is not None and m["rel_l2"] > DEPARTS_ABOVE)
            or (m.get("rel_l2") is None and m.get("max_abs", 0) > 0 and "error" not in m)]


# ---- comparisons that can tell -------------------------------------------------------------------------------
# A reference output whose values span less than this share of their magnitude is "nearly constant": every target
# that outputs about that constant matches it, right or wrong.
NEARLY_CONSTANT = 1e-6
# A target output whose RMS is this many times the reference's (or this many times smaller), with rel L2 > 1, is
# not a rounding difference of any precision: a broken run or a broken read-back (litert-gpu's rel L2 1.9e30).
IMPLAUSIBLE_SCALE = 1e3


def reference_check(reference) -> str | None:
    """Why a reference output cannot tell a right target from a wrong one — all zeros, constant, nearly constant,
    or not finite — or None when it can. A single value is not "constant": a scalar output (a score, a loss) is one
    number by design."""
    a = np.asarray(reference)
    if a.size == 0:
        return "the reference output is empty"
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
        return None
    f = a.astype(np.float64).ravel()
    bad = ~np.isfinite(f)
    if bad.all():
        return "the reference output is not finite (every element NaN or ±inf)"
    if bad.any():
        return f"the reference output has {int(bad.sum()):,} non-finite element(s) of {f.size:,}"
    if not f.any():
        return "the reference output is all zeros"
    if f.size < 2:
        return None
    lo, hi = float(f.min()), float(f.max())
    if lo == hi:
        return f"the reference output is constant (every element {lo:.6g})"
    if hi - lo <= NEARLY_CONSTANT * max(abs(lo), abs(hi)):
        return f"the reference output is nearly constant (every element {lo:.6g} to {hi:.6g})"
    return None


def implausible(reference, target, metrics: dict) -> str | None:
    """Why a target's figures are beyond any plausible range, naming the check that failed, or None. A finite
    reference and a target with non-finite values, or rel L2 > 1 with the output's scale off by IMPLAUSIBLE_SCALE
    or more: no precision or fusion choice produces either."""
    if "error" in metrics:
        return None
    ref = np.asarray(reference, dtype=np.float64).ravel()
    out = np.asarray(target, dtype=np.float64).ravel()
    if not np.isfinite(ref).all():
        return None                          # the reference's own problem (reference_check says so)
    bad = ~np.isfinite(out)
    if bad.any():
        return (f"{int(bad.sum()):,} of {out.size:,} element(s) of the target's output are NaN or ±inf where the "
                "reference's are finite (check: finite output)")
    rel = metrics.get("rel_l2")
    if rel is None or rel <= 1 or not ref.size:
        return None
    ref_rms, out_rms = _norm(ref) / np.sqrt(ref.size), _norm(out) / np.sqrt(out.size)
    ratio = out_rms / ref_rms if ref_rms else np.inf
    if ratio >= IMPLAUSIBLE_SCALE or ratio <= 1 / IMPLAUSIBLE_SCALE:
        return (f"rel L2 {rel:.2e} with the output's scale {ratio:.1e}× the reference's (RMS {out_rms:.3g} vs "
                f"{ref_rms:.3g}) (check: rel L2 > 1 and scale within {IMPLAUSIBLE_SCALE:g}×)")
    return None


def judged(outputs: dict[str, dict], reference_checks: dict[str, str | None]) -> dict:
    """The drift block's verdict on its own figures: `informative` (every compared output's reference can tell),
    `not_informative` {output: why} and `implausible` {output: why}, the latter two only when not empty. Each
    output's metrics carry their own reason too."""
    not_informative, bad = {}, {}
    for name, m in outputs.items():
        if "error" in m:
            continue
        why = reference_checks.get(name)
        if why:
            m["not_informative"] = not_informative[name] = why
        if m.get("implausible"):
            bad[name] = m["implausible"]
    out: dict = {"informative": not not_informative}
    if not_informative:
        out["not_informative"] = not_informative
    if bad:
        out["implausible"] = bad
    return out


def output_flags(m: dict) -> tuple[str | None, str | None]:
    """(not informative why, implausible why) of one output's metrics, also for a report written before xc
    checked them: a non-finite target output there is implausible all the same."""
    bad = m.get("implausible")
    if bad is None and m.get("finite") is False and "error" not in m:
        bad = "the target's output has NaN or ±inf elements (check: finite output)"
    return m.get("not_informative"), bad


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
