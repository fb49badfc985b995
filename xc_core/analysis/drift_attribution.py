"""Decision → drift attribution: where along depth a target's per-layer drift jumps, and which compiler decision
sits at that point ("the fp16 Gemm at mix.fc (nnapi, partition 0) accounts for 94 % of the output drift").

Runs on report data only (the target's `layer_drift` points and compiled `graph` nodes, and the captured graph in
execution order), so a stored report can be attributed again without arrays.

Method (docs/targets.md says the same for reviewers):

* Verified points only. A compared boundary that failed verification (analysis/layer_drift.py: a shape or dtype
  that is not the reference's, or an error orders of magnitude above everything computed from it, the output
  included) is left out: its number may compare another tensor. The block lists it under `left_out`, with why.
* Segments. Each compared boundary (a module output, `layer_drift.points`, in execution order) closes a segment:
  the captured graph's compute ops after the previous compared boundary, up to and including this one. The first
  segment starts at the graph inputs, where the target and the reference agree exactly (drift 0).
* Growth and share. With H the running maximum ("high-water mark") of rel L2 over the earlier boundaries (0 before
  the first), a segment's growth is max(0, rel_l2 − H) and its share is growth / peak, the peak being the largest
  rel L2 along depth. Shares sum to 1. A segment where drift shrinks, or wobbles below an earlier high, gets no
  share — only drift above everything seen before counts as new. When the drift does not shrink after its peak
  and the last boundary is the graph output, the peak is the output drift and the share is its share of it.
* Jump. A segment is a jump when the peak is above the noise floor (NOISE_FLOOR: fp32-vs-fp32 differences are of
  order 1e-7..1e-6), its share is at least JUMP_SHARE, and it at least multiplies the earlier high by JUMP_RATIO
  (any growth from 0 does). Ten segments each adding a tenth are gradual accumulation, not ten jumps.
* Recovery. A segment where rel L2 falls by at least JUMP_RATIO× and by at least JUMP_SHARE of the peak.
* Decisions in a segment: the compiled nodes whose `source_ops` include any of the segment's ops, read as
  `precision` (a node in fp16/bf16/int8/... where the reference op is fp32), `backend-boundary` (a graph edge
  into or out of a segment node whose two ends run on different backends, e.g. cpu → nnapi), `fusion` (a node
  made of several source ops or fused input nodes) and `fallback` (a node sent to the CPU on an accelerated
  target). The first kind present in that order names the jump.

Limits: boundaries are module outputs only, and only those whose tensor survives compilation on the target; a
segment can therefore span several modules and decisions. A decision inside a fused node that hides its tensor
cannot be separated from the rest of that node. Growth includes earlier error amplified by the segment's ops, not
only error the segment introduces (the high-water mark keeps a re-amplified old error from counting twice).
"""
from __future__ import annotations

import re

from .. import evidence as ev
from ..ir import precision_of_dtype
from .layer_drift import unverified_points, verified_points

NOISE_FLOOR = 1e-5   # peak rel L2 below this is fp32 rounding order: nothing to attribute
JUMP_SHARE = 0.10    # a jump adds at least this share of the peak drift ...
JUMP_RATIO = 1.5     # ... and multiplies the earlier high-water mark by at least this

LOWERED = {"fp16", "bf16", "int8", "uint8", "int4", "uint4", "fp8", "float8"}
FULL = {"fp32", "fp64"}
MAX_RECOVERY_LINES = 3
KINDS = ("precision", "backend-boundary", "fusion", "fallback")   # the order that names a jump
NONE_KIND = "none recorded"

METHOD = (f"segments between consecutive verified module boundaries (captured-graph execution order); a segment's "
          f"share = max(0, rel L2 there − the highest rel L2 before it) / the peak rel L2 along depth (shares sum to "
          f"1; shrinking drift gets no share); a jump = share ≥ {JUMP_SHARE:g} and rel L2 ≥ {JUMP_RATIO:g} × the "
          f"earlier high, with the peak ≥ {NOISE_FLOOR:g}; decisions = compiled nodes whose source_ops fall in the "
          f"segment: precision (lowered vs the fp32 reference) > backend boundary > fusion > CPU fallback")


# ---- the numbers: shares, jumps, recoveries along depth --------------------------------------------------------
def segment_shares(rel_l2: list[float | None], noise_floor: float = NOISE_FLOOR, jump_share: float = JUMP_SHARE,
                   jump_ratio: float = JUMP_RATIO) -> dict:
    """rel L2 at each compared boundary, in execution order -> per segment: the earlier high-water mark, growth,
    share, ratio, and whether it is a jump or a recovery; plus the peak."""
    values = [float(v or 0.0) for v in rel_l2]
    peak = max(values, default=0.0)
    high, prev, segs = 0.0, 0.0, []
    for r in values:
        growth = max(0.0, r - high)
        share = growth / peak if peak > 0 else 0.0
        ratio = r / high if high > 0 else None     # None: growth from an exact match
        jump = peak >= noise_floor and share >= jump_share and (ratio is None or ratio >= jump_ratio)
        drop = prev - r
        recovery = peak >= noise_floor and r * jump_ratio <= prev and drop >= jump_share * peak
        segs.append({"rel_l2_before": prev, "high_before": high, "rel_l2": r, "growth": growth, "share": share,
                     "ratio": ratio, "jump": jump, "recovery": recovery,
                     "drop_share": drop / peak if recovery else 0.0})
        high, prev = max(high, r), r
    return {"segments": segs, "peak": peak, "below_noise_floor": peak < noise_floor}


# ---- the decisions in a segment -------------------------------------------------------------------------------
def _get(x, key):
    return x.get(key) if isinstance(x, dict) else getattr(x, key, None)


def _capture_order(capture) -> list[dict]:
    """The captured graph's compute ops in execution order (what boundary depths index): id, module path and the
    reference's precision (from the op's output dtype). `capture` is a Graph or its dict (report capture graph)."""
    out = []
    for n in (_get(capture, "nodes") or []):
        if _get(n, "kind") != "compute":
            continue
        outs = _get(n, "outputs") or []
        dtype = _get(outs[0], "dtype") if outs else None
        out.append({"id": _get(n, "id"), "module_path": _get(n, "module_path"),
                    "precision": _get(n, "precision") or precision_of_dtype(dtype)})
    return out


def _graph_output_ops(capture) -> set[str]:
    outs = {_get(t, "name") for t in (_get(capture, "outputs") or [])}
    return {_get(n, "id") for n in (_get(capture, "nodes") or [])
            if any(_get(t, "name") in outs for t in (_get(n, "outputs") or []))}


def _decisions(seg_ops: set[str], boundary_op: str, nodes: list[dict], producer: dict, ref_prec: dict) -> list[dict]:
    """The compiler decisions among the compiled nodes that compute any of `seg_ops`, by kind (KINDS order)."""
    mine = [n for n in nodes if n.get("kind") in ("compute", "cast") and seg_ops & set(n.get("source_ops") or [])]
    ids = {n["id"] for n in mine}
    out = []

    lowered = [n for n in mine if (n.get("precision") or "") in LOWERED
               and any(ref_prec.get(s) in FULL or ref_prec.get(s) is None for s in n["source_ops"] if s in seg_ops)]
    if lowered:
        # The node that produces the boundary's value first (the last in graph order of those computing the
        # boundary op: a quantize or cast node in front of it comes earlier): its rounding is what is measured.
        # An op that only moves data (a reshape, a transpose) rounds nothing new: the arithmetic before it is the
        # decision to name, so those come last.
        index = {n["id"]: i for i, n in enumerate(nodes)}
        lowered.sort(key=lambda n: (_moves_data(n["op_type"]), boundary_op not in n["source_ops"], -index[n["id"]]))
        lead = lowered[0]
        precs = sorted({n["precision"] for n in lowered})
        out.append({"kind": "precision", "nodes": [n["id"] for n in lowered],
                    "detail": f"{'/'.join(precs)} × {len(lowered)} node(s) where the reference is fp32",
                    "subject": _precision_subject(lead, lowered)})

    edges, seen = [], set()
    consumers: dict[str, list[dict]] = {}
    for n in nodes:
        for t in n.get("inputs") or []:
            consumers.setdefault(t["name"], []).append(n)
    for n in mine:   # edges into segment nodes, and out of them (an emulated handoff rounds the producer's tensor)
        pairs = [(producer.get(t["name"]), n) for t in n.get("inputs") or []]
        pairs += [(n, c) for t in n.get("outputs") or [] for c in consumers.get(t["name"], [])]
        for a, b in pairs:
            if a is None or b is None or (a["id"], b["id"]) in seen:
                continue
            ba, bb = a.get("backend"), b.get("backend")
            if ba and bb and "unknown" not in (ba, bb) and ba != bb:
                seen.add((a["id"], b["id"]))
                edges.append((a, b))
    if edges:
        a, b = edges[0]
        out.append({"kind": "backend-boundary", "nodes": list(dict.fromkeys(x["id"] for e in edges for x in e)),
                    "detail": "; ".join(f"{x['backend']}→{y['backend']} ({x['id']} → {y['id']})" for x, y in edges),
                    "subject": f"the {a['backend']}→{b['backend']} boundary {a['op_type']} → {b['op_type']}"
                               + _where(b if b["id"] in ids else a)})

    fused = [n for n in mine if len(n.get("fused_from") or []) > 1 or len(n.get("source_ops") or []) > 1]
    if fused:
        lead = fused[0]
        out.append({"kind": "fusion", "nodes": [n["id"] for n in fused],
                    "detail": "; ".join(f"{n['op_type']} from {'+'.join(n['source_ops'])}" for n in fused),
                    "subject": f"the fused {lead['op_type']} ({'+'.join(lead['source_ops'])}){_where(lead)}"
                               + (f" on {lead['backend']}" if lead.get("backend") else "")})

    fallbacks = [n for n in mine if n.get("fallback")]
    if fallbacks:
        lead = fallbacks[0]
        out.append({"kind": "fallback", "nodes": [n["id"] for n in fallbacks],
                    "detail": "; ".join(f"{n['op_type']} ({n.get('fallback_reason') or 'no reason given'})"
                                        for n in fallbacks),
                    "subject": f"the CPU fallback of {lead['op_type']}{_where(lead)}"})
    return out


# Op types (lower case, letters only, any toolchain's spelling) that copy or re-index values without arithmetic.
_DATA_MOVES = ("reshape", "view", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "expand", "concat",
               "split", "slice", "gather", "select", "identity", "copy", "clone", "reorder", "pad", "tile")


def _moves_data(op_type: str) -> bool:
    name = re.sub(r"[^a-z]", "", (op_type or "").lower())
    return any(name.startswith(m) or name.endswith(m) for m in _DATA_MOVES)


def _where(n: dict) -> str:
    return f" at {n['module_path']}" if n.get("module_path") else ""


def _precision_subject(lead: dict, lowered: list[dict]) -> str:
    where = []
    if lead.get("backend"):
        where.append(lead["backend"])
    if (lead.get("attributes") or {}).get("partition") is not None:
        where.append(f"partition {lead['attributes']['partition']}")
    if len(lead.get("source_ops") or []) > 1:
        where.append(f"fused from {'+'.join(lead['source_ops'])}")
    more = len(lowered) - 1
    return (f"the {lead['precision']} {lead['op_type']}{_where(lead)}" + (f" ({', '.join(where)})" if where else "")
            + (f" with {more} more lowered node(s)" if more else ""))


# ---- the attribution block ------------------------------------------------------------------------------------
def drift_attribution(target_block: dict, capture) -> dict | None:
    """The `layer_drift["attribution"]` block of a target: its jumps (largest share first), recoveries, and a
    summary sentence. `capture` is the captured graph (Graph or report["capture"]["graph"]). None without
    compared boundaries."""
    ld = target_block.get("layer_drift") or {}
    compared = ld.get("points") or []
    if not compared:
        return None
    evidence = ld.get("evidence") or ev.MEASURED
    points = verified_points(compared)
    left_out = [{"module_path": p["module_path"], "source_op": p["source_op"], "depth": p["depth"],
                 "rel_l2": p.get("rel_l2"), "check": p.get("check"), "reason": p.get("unverified_reason")}
                for p in unverified_points(compared)]
    block = {"method": METHOD, "evidence": evidence,
             "thresholds": {"noise_floor_rel_l2": NOISE_FLOOR, "jump_share": JUMP_SHARE, "jump_ratio": JUMP_RATIO},
             "jumps": [], "recoveries": [], "attributed_share": 0.0, "left_out": left_out}
    if not points:
        block.update(peak_rel_l2=None, final_rel_l2=None, basis=None,
                     summary=f"not attributed: none of the {len(compared)} compared boundaries passed "
                             f"verification{_left_out_clause(left_out)}")
        return block
    order = _capture_order(capture) if capture is not None else []
    if not all(0 <= p["depth"] < len(order) and order[p["depth"]]["id"] == p["source_op"] for p in points):
        # The depths index another graph than this one: attributing would name the wrong ops.
        block.update(peak_rel_l2=None, final_rel_l2=None, basis=None,
                     summary="not attributed: the captured graph's op order does not match the boundaries' depths")
        return block
    nums = segment_shares([p["rel_l2"] for p in points])
    peak, final = nums["peak"], float(points[-1]["rel_l2"] or 0.0)
    at_output = points[-1]["source_op"] in _graph_output_ops(capture)
    basis = "output drift" if at_output and final >= (1 - JUMP_SHARE) * peak else "peak per-layer drift"
    output = ((target_block.get("drift") or {}).get("worst") or {}).get("rel_l2")
    block.update(peak_rel_l2=peak, final_rel_l2=final, final_module_path=points[-1]["module_path"],
                 output_rel_l2=output, basis=basis)

    nodes = (target_block.get("graph") or {}).get("nodes") or []
    producer = {t["name"]: n for n in nodes for t in n.get("outputs") or []}
    ref_prec = {o["id"]: o["precision"] for o in order}
    prev_depth = -1
    for p, s in zip(points, nums["segments"]):
        seg_ops = {o["id"] for o in order[prev_depth + 1:p["depth"] + 1]}
        from_path = next((q["module_path"] for q in points if q["depth"] == prev_depth), None)
        prev_depth = p["depth"]
        if s["recovery"]:
            block["recoveries"].append({"module_path": p["module_path"], "source_op": p["source_op"],
                                        "depth": p["depth"], "rel_l2_before": s["rel_l2_before"],
                                        "rel_l2": s["rel_l2"], "drop_share": round(s["drop_share"], 4)})
        if not s["jump"]:
            continue
        decisions = _decisions(seg_ops, p["source_op"], nodes, producer, ref_prec)
        lead = decisions[0] if decisions else None
        subject = lead["subject"] if lead else (f"the ops up to {p['module_path']} (no compiler decision recorded "
                                                f"there: earlier error amplified, or a decision xc cannot see)")
        block["jumps"].append({
            "module_path": p["module_path"], "source_op": p["source_op"], "depth": p["depth"],
            "from_module_path": from_path, "segment_ops": len(seg_ops),
            "rel_l2_before": s["rel_l2_before"], "high_before": s["high_before"], "rel_l2": s["rel_l2"],
            "growth": s["growth"],
            "share": round(s["share"], 4), "ratio": s["ratio"],
            "kind": lead["kind"] if lead else NONE_KIND, "nodes": lead["nodes"] if lead else [],
            "decisions": [{k: d[k] for k in ("kind", "nodes", "detail")} for d in decisions],
            "sentence": _sentence(subject, s, basis, evidence, p["module_path"]),
        })
    block["jumps"].sort(key=lambda j: -j["share"])
    block["attributed_share"] = round(sum(j["share"] for j in block["jumps"]), 4)
    block["summary"] = _summary(block, nums, nodes) + _left_out_clause(left_out)
    return block


def _left_out_clause(left_out: list[dict]) -> str:
    """"; 1 boundary left out, unverified: encoder.norm2 (consistency)" — or nothing."""
    if not left_out:
        return ""
    named = ", ".join(f"{p['module_path']} ({p['check']})" for p in left_out[:MAX_RECOVERY_LINES])
    more = f" and {len(left_out) - MAX_RECOVERY_LINES} more" if len(left_out) > MAX_RECOVERY_LINES else ""
    return f"; {len(left_out)} boundar{'y' if len(left_out) == 1 else 'ies'} left out, unverified: {named}{more}"


def _sentence(subject: str, s: dict, basis: str, evidence: str, boundary: str) -> str:
    # The share is measured from the earlier high, so the sentence quotes that (not a dip just before).
    rise = (f"{_e(s['high_before'])} → {_e(s['rel_l2'])}" if s["high_before"] == s["rel_l2_before"]
            else f"{_e(s['rel_l2'])}, above the earlier high {_e(s['high_before'])},")
    return (f"{subject} accounts for {round(100 * s['share'])} % of the {basis} "
            f"(rel L2 {rise} at the output of {boundary}; {evidence})")


def _e(x: float) -> str:
    return f"{x:.1e}" if x else "0"


def _summary(block: dict, nums: dict, nodes: list[dict]) -> str:
    if nums["below_noise_floor"]:
        return (f"no jump: the peak per-layer drift (rel L2 {nums['peak']:.1e}) is below the noise floor "
                f"{NOISE_FLOOR:g} — fp32 rounding order")
    if not block["jumps"]:
        return (f"no jump: the drift (peak rel L2 {nums['peak']:.1e}) builds up gradually; no segment adds "
                f"≥ {round(100 * JUMP_SHARE)} % of it while multiplying it by ≥ {JUMP_RATIO:g}")
    text = block["jumps"][0]["sentence"]
    rest = 1 - block["attributed_share"]
    if rest >= JUMP_SHARE:
        text += f"; {round(100 * rest)} % builds up gradually elsewhere"
    # Lowered precision almost everywhere: the first layers set the drift level and the later ones hold it, so the
    # first jump stands for the whole graph's precision choice.
    floats = [n for n in nodes if n.get("kind") == "compute" and (n.get("precision") or "") in LOWERED | FULL]
    lowered = [n for n in floats if n["precision"] in LOWERED]
    if floats and len(lowered) >= 0.9 * len(floats) and block["jumps"][0]["kind"] == "precision":
        text += (f"; {'/'.join(sorted({n['precision'] for n in lowered}))} runs throughout this graph, so where the "
                 f"drift first appears stands for the whole graph's precision")
    return text


# ---- views ----------------------------------------------------------------------------------------------------
def attribution_rows(target_block: dict) -> list[dict]:
    """One row per attributed jump (largest share first), for the Drift page's table."""
    att = (target_block.get("layer_drift") or {}).get("attribution") or {}
    def nodes(ids):
        return ", ".join(ids[:4]) + (f" (+{len(ids) - 4})" if len(ids) > 4 else "")
    return [{"boundary": j["module_path"], "share": f"{round(100 * j['share'])} %",
             "rel L2": f"{j['rel_l2_before']:.2e} → {j['rel_l2']:.2e}", "decision": j["kind"],
             "compiled nodes": nodes(j["nodes"]), "sentence": j["sentence"], "evidence": att.get("evidence")}
            for j in att.get("jumps") or []]


def attribution_lines(target_block: dict) -> list[str]:
    """Markdown bullet lines for one target: its jumps, recoveries and the summary (empty without attribution)."""
    att = (target_block.get("layer_drift") or {}).get("attribution")
    if not att:
        return []
    lines = [f"- **Drift attribution** ({att['evidence']}): {_md(att['summary'])}"]
    for j in att["jumps"]:
        decisions = "; ".join(f"{d['kind']}: {d['detail']}" for d in j["decisions"]) or NONE_KIND
        lines.append(f"  - `{_md(j['module_path'])}` — {round(100 * j['share'])} % "
                     f"(rel L2 {j['rel_l2_before']:.2e} → {j['rel_l2']:.2e}); {_md(decisions)}")
    # Recoveries are context, not findings: the largest few.
    recoveries = sorted(att["recoveries"], key=lambda r: -r["drop_share"])
    for r in recoveries[:MAX_RECOVERY_LINES]:
        lines.append(f"  - `{_md(r['module_path'])}` — drift shrinks (rel L2 {r['rel_l2_before']:.2e} → "
                     f"{r['rel_l2']:.2e})")
    if len(recoveries) > MAX_RECOVERY_LINES:
        lines.append(f"  - {len(recoveries) - MAX_RECOVERY_LINES} more boundaries where the drift shrinks")
    # Points that failed verification are not findings: listed apart, with the check that failed.
    for p in att.get("left_out") or []:
        rel = f"rel L2 {p['rel_l2']:.2e}, " if p.get("rel_l2") is not None else ""
        lines.append(f"  - `{_md(p['module_path'])}` — left out, unverified ({rel}{p['check']} check): "
                     f"{_md(p['reason'])}")
    return lines


def _md(text: str) -> str:
    # Module paths and op names come from the user's model: keep them from opening Markdown markup.
    return str(text).replace("`", "'").replace("|", "\\|")
