"""How far one value is from the reference's, in the six figures LiteRT's accuracy debugger gates each op on (max
|Δ|, MSE, cosine similarity, SNR, PSNR, Pearson correlation) plus xc's relative L2, and the gates themselves.

A gate bounds one figure: an upper bound for an error (rel_l2, max_abs, mse), a lower bound for a similarity
(cosine, snr_db, psnr_db, pearson). A value with NaN or ±inf where the reference has a finite number fails every
gate. Gates not set are not checked; `DEFAULT_GATES` is what a run uses unless told otherwise.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import XcInputError

UPPER, LOWER = "at most", "at least"
GATE_SENSE = {"rel_l2": UPPER, "max_abs": UPPER, "mse": UPPER,
              "cosine": LOWER, "snr_db": LOWER, "psnr_db": LOWER, "pearson": LOWER}
# rel L2 1e-2 is per-layer drift's divergence threshold (analysis/layer_drift.py); cosine 0.999 is where an fp16 op
# on well-scaled values still passes. The others are left for a user to set: MSE and max |Δ| depend on the scale of
# the values, SNR and PSNR say what rel L2 says in decibels.
DEFAULT_GATES = {"rel_l2": 1e-2, "cosine": 0.999}
# A target whose configuration asks for int8 (ort-cpu-int8, the Ethos-U targets, XNNPACK's int8): rounding every op's
# values to 256 levels costs about 1e-2 rel L2 by itself (tts-mini's outputs on executorch-ethos-u85: 1.9e-2), so
# the fp32/fp16 gate would flag quantization everywhere and search for a culprit in every int8 run.
INT8_GATES = {"rel_l2": 1e-1, "cosine": 0.99}
INTEGER_PRECISIONS = {"int8", "uint8", "int4", "uint4"}


def default_gates(declared_precisions) -> dict:
    """The gates a target is judged by unless the user sets them: INT8_GATES where its configuration asks for an
    integer precision, DEFAULT_GATES otherwise."""
    return dict(INT8_GATES if set(declared_precisions or ()) & INTEGER_PRECISIONS else DEFAULT_GATES)


def compare(reference: np.ndarray, value: np.ndarray) -> dict:
    """The figures of `value` against `reference` (same shape; compared in float64): rel_l2, max_abs, mse, cosine,
    snr_db, psnr_db, pearson, and `non_finite` (NaN or ±inf in the value where the reference is finite: every
    error figure is then None). A figure that is undefined (the correlation of a constant, the ratio to a zero
    reference, the decibels of an exact match) is None."""
    r = np.asarray(reference, dtype=np.float64).ravel()
    v = np.asarray(value, dtype=np.float64).ravel()
    if r.shape != v.shape:
        raise ValueError(f"shape {list(np.shape(value))} where the reference's is {list(np.shape(reference))}")
    non_finite = bool((~np.isfinite(v) & np.isfinite(r)).any())
    if non_finite or not r.size:
        # No figure measures a NaN or an infinity (and JSON holds neither): `non_finite` says it.
        zero = None if non_finite else 0.0
        return {"rel_l2": zero, "max_abs": zero, "mse": zero, "cosine": None, "snr_db": None, "psnr_db": None,
                "pearson": None, "non_finite": non_finite}
    d = v - r
    mse = float(np.mean(d * d))
    ref_norm, err_norm, val_norm = float(np.linalg.norm(r)), float(np.linalg.norm(d)), float(np.linalg.norm(v))
    data_range = float(r.max() - r.min())
    return {
        "rel_l2": err_norm / ref_norm if ref_norm else (0.0 if err_norm == 0 else None),
        "max_abs": float(np.abs(d).max()),
        "mse": mse,
        "cosine": float(np.dot(r, v) / (ref_norm * val_norm)) if ref_norm and val_norm else None,
        "snr_db": _db(ref_norm ** 2, err_norm ** 2),
        "psnr_db": _db(data_range ** 2, mse) if data_range else None,
        "pearson": _pearson(r, v),
        "non_finite": False,
    }


def _db(signal: float, noise: float) -> float | None:
    if noise == 0:
        return None         # exact: no finite number of decibels (JSON holds no infinity)
    return 10.0 * math.log10(signal / noise) if signal else None


def _pearson(r: np.ndarray, v: np.ndarray) -> float | None:
    rc, vc = r - r.mean(), v - v.mean()
    denominator = float(np.linalg.norm(rc) * np.linalg.norm(vc))
    return float(np.dot(rc, vc) / denominator) if denominator else None


def failed_gates(figures: dict, gates: dict) -> list[str]:
    """The gates `figures` fails, in GATE_SENSE order. A non-finite value fails all; an undefined figure fails
    none (a constant's correlation says nothing)."""
    if figures.get("non_finite"):
        return [g for g in GATE_SENSE if g in gates] or ["non-finite"]
    out = []
    for name, bound in gates.items():
        value = figures.get(name)
        if value is None:
            continue
        if (GATE_SENSE[name] == UPPER and value > bound) or (GATE_SENSE[name] == LOWER and value < bound):
            out.append(name)
    return out


def parse_gates(items: list[str] | None, base: dict | None = None) -> dict:
    """`--gate rel_l2=1e-3 --gate pearson=0.99` -> the gates (over `base`, DEFAULT_GATES if not given); `NAME=off`
    drops one."""
    gates = dict(DEFAULT_GATES if base is None else base)
    for item in items or []:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or name not in GATE_SENSE:
            raise XcInputError(f"--gate {item!r}: expected NAME=VALUE with NAME one of {', '.join(GATE_SENSE)}")
        if raw.strip().lower() == "off":
            gates.pop(name, None)
            continue
        try:
            value = float(raw)
        except ValueError:
            raise XcInputError(f"--gate {item!r}: {raw!r} is not a number (or 'off')") from None
        if not math.isfinite(value):
            raise XcInputError(f"--gate {item!r}: the bound must be a finite number")
        gates[name] = value
    return gates


def describe_gates(gates: dict) -> str:
    """'rel_l2 at most 0.01, cosine at least 0.999'."""
    return ", ".join(f"{k} {GATE_SENSE[k]} {v:g}" for k, v in gates.items()) or "no gate"
