"""What a runtime returned, made comparable: every target's outputs go through `normalize_outputs`.

- Names: runtimes report outputs under their own tensor names (OpenVINO renames, a TorchScript module returns a
  tuple). One matcher maps them onto the captured graph's output names: by name, else by position when the counts
  agree — and says which it did.
- Types: tensors stay arrays. A sequence of maps (ai.onnx.ml ZipMap: [{class: probability}, …]) becomes an array
  [N, classes] in key order, which is what it means; a sequence of tensors of one shape is stacked. Anything else is
  listed as "not compared" with its type, never a crash.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def normalize_outputs(raw: dict[str, Any], expected: list[str]) -> tuple[dict[str, np.ndarray], dict, dict]:
    """-> (comparable arrays by expected name, {name: why not compared}, {"matched_by": …, "renamed": {…}})."""
    named = _match_names(raw, expected)
    arrays, skipped = {}, {}
    for name, value in named["values"].items():
        arr, why = as_array(value)
        if arr is None:
            skipped[name] = why
        else:
            arrays[name] = arr
            if why:
                skipped.setdefault("_converted", {})[name] = why
    converted = skipped.pop("_converted", {})
    return arrays, skipped, {"matched_by": named["matched_by"], "renamed": named["renamed"], "converted": converted}


def _match_names(raw: dict[str, Any], expected: list[str]) -> dict:
    keys = list(raw)
    if not expected or all(k in expected for k in keys):
        return {"values": dict(raw), "matched_by": "name", "renamed": {}}
    if len(keys) == len(expected):
        renamed = {k: e for k, e in zip(keys, expected) if k != e}
        return {"values": {e: raw[k] for k, e in zip(keys, expected)}, "matched_by": "position",
                "renamed": renamed}
    # Counts differ: keep what matches by name, the rest under the runtime's own names.
    return {"values": dict(raw), "matched_by": "name (partial)", "renamed": {}}


def as_array(value: Any) -> tuple[np.ndarray | None, str]:
    """(array, note) when the value can be compared numerically, else (None, what it is)."""
    if isinstance(value, np.ndarray) and value.dtype != object:
        return value, ""
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor
        return value.detach().cpu().numpy(), ""
    if isinstance(value, (int, float, bool, np.number, np.bool_)):
        return np.asarray(value), ""
    seq = list(value) if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1) \
        else None
    if seq is not None and seq and all(isinstance(m, dict) for m in seq):
        keys = list(seq[0])
        if all(list(m) == keys for m in seq) and all(_is_number(v) for m in seq for v in m.values()):
            order = sorted(keys, key=_sort_key)
            arr = np.array([[float(m[k]) for k in order] for m in seq], dtype=np.float32)
            return arr, f"a sequence of {len(seq)} maps compared as an array [N, {len(order)}] in key order " \
                        f"{order[:8]}{'…' if len(order) > 8 else ''}"
        return None, "a sequence of maps with differing keys or non-numeric values"
    if seq is not None and seq and all(isinstance(t, np.ndarray) and t.dtype != object for t in seq):
        if len({t.shape for t in seq}) == 1:
            return np.stack(seq), f"a sequence of {len(seq)} tensors compared stacked"
        return None, f"a sequence of {len(seq)} tensors of different shapes"
    if seq is not None and not seq:
        return None, "an empty sequence"
    if isinstance(value, dict):
        return None, f"a map of {len(value)} entries"
    return None, f"a value of type {type(value).__name__}"


def _is_number(v) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, bool)


def _sort_key(k):
    return (0, k, "") if isinstance(k, (int, float, np.number)) else (1, 0, str(k))
