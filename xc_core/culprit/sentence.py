"""The culprit said as one sentence: which ops, how much of the drift, and what they do alone."""
from __future__ import annotations

import numpy as np

FP16_MAX = 65504.0     # the largest finite float16 (IEEE 754 binary16)
LOWER_PRECISIONS = {"fp16", "bf16"}


def culprit_sentence(identity: str, culprit: dict, isolation: dict, values: dict,
                     declared_precisions: list[str]) -> str:
    """"coreai-ane: the exp at gate (1 op) accounts for 100 % of the output drift (non-finite outputs); in
    isolation it gives non-finite values — its values reach 2.1e+08, past float16's 65,504"."""
    ops = list(culprit["ops"])
    types = [_short(t) for t in culprit.get("op_types") or ops]
    kinds = list(dict.fromkeys(types))
    paths = list(culprit.get("module_paths") or [])
    where = f" at {paths[0]}" if len(paths) == 1 else f" from {paths[0]} to {paths[-1]}" if paths else ""
    count = f"{len(ops)} op{'s' if len(ops) != 1 else ''}"
    if len(kinds) <= 3:
        what = f"the {' → '.join(kinds)}{where} ({count})"
    else:       # a long window: its ends, not every kind of op in it
        what = f"the {count} from {types[0]} to {types[-1]}{where}"
    baseline = culprit["baseline"]
    if baseline["non_finite"]:
        share = "all of the output drift (its outputs go non-finite with these ops alone on the target)"
    else:
        share = (f"{culprit['explained'] * 100:.0f} % of the output drift ({baseline['rel_l2']:.2e} rel L2)")
    head = f"{identity}: {what} accounts for {share}"
    return head + "; " + _alone(culprit, isolation, values, declared_precisions)


def _alone(culprit: dict, isolation: dict, values: dict, declared: list[str]) -> str:
    # Rows are keyed by the program's node names (an ONNX source's rows also carry their ONNX node's id).
    rows = {r.get("program_node") or r["source_op"]: r for r in isolation.get("ops") or []}
    mine = [rows[o] for o in culprit["ops"] if o in rows]
    if not mine:
        return "its ops could not be isolated one by one"
    above = [r for r in mine if r["above_gate"]]
    text = ""
    if any(r["local"]["non_finite"] for r in mine):
        text = "in isolation it gives non-finite values"
    elif above:
        worst = max(above, key=lambda r: r["local"]["rel_l2"] or 0.0)
        text = (f"in isolation its {_short(worst.get('op_type') or worst['source_op'])} has a local rel L2 of "
                f"{worst['local']['rel_l2']:.2e}, above the gate ({isolation.get('gates_text') or 'gates'})")
    else:
        text = ("in isolation each of its ops is within the gate: the error builds up across them, or comes from "
                "how the target compiles them together")
    peak = _largest_value(culprit["ops"], values)
    if set(declared) & LOWER_PRECISIONS and peak is not None and peak > FP16_MAX:
        text += f" — its values reach {peak:.2g}, past float16's {FP16_MAX:,.0f}"
    return text


def _largest_value(ops: list[str], values: dict) -> float | None:
    """The largest |value| the reference computes at the ops' outputs."""
    import torch
    peaks = []
    for op in ops:
        v = values.get(op)
        for t in (v if isinstance(v, (tuple, list)) else [v]):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
                peaks.append(float(np.nanmax(np.abs(t.detach().float().numpy()))))
    return max(peaks) if peaks else None


def _short(op_type: str) -> str:
    """aten.hardswish.default -> hardswish."""
    parts = str(op_type).split(".")
    if len(parts) >= 2 and parts[0] == "aten":
        return parts[1]
    return parts[0] if len(parts) > 1 and parts[-1] in ("default", "Tensor", "Scalar", "dim") else str(op_type)
