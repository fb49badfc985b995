"""Where the time goes: a target's measured time per compiled node (each node's `measured_us`, from its runtime's
profiler) summed per backend and per op type, its costliest nodes, and the cost of each CPU fallback.

Works on the report's plain node dicts, so the report build, the pages, Markdown/HTML and the diff read the same
figures. Times are this host's CPU (the `node_times` block names it), not a phone's: what they show is the shape of
the profile — which nodes dominate, what a fallback costs next to the rest — not the device's latency.
"""
from __future__ import annotations

from collections import defaultdict

TOP_NODES = 10


def time_summary(nodes: list[dict]) -> dict:
    """Total timed µs, the share per backend and per op type (largest first), and the TOP_NODES costliest nodes
    with their share of the total."""
    timed = [n for n in nodes if n.get("measured_us") is not None]
    total = sum(n["measured_us"] for n in timed)
    by_backend: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    for n in timed:
        by_backend[n.get("backend") or "unknown"] += n["measured_us"]
        by_op[n["op_type"]] += n["measured_us"]

    def shares(table: dict[str, float]) -> list[dict]:
        return [{"key": k, "us": round(v, 3), "share": round(v / total, 4) if total else 0.0}
                for k, v in sorted(table.items(), key=lambda kv: -kv[1])]

    top = sorted(timed, key=lambda n: -n["measured_us"])[:TOP_NODES]
    return {"timed_us": round(total, 3),
            "by_backend": shares(by_backend), "by_op_type": shares(by_op),
            "top": [{"node": n["id"], "op_type": n["op_type"], "backend": n.get("backend"),
                     "precision": n.get("precision"), "module_path": n.get("module_path"),
                     "fallback": bool(n.get("fallback")), "us": n["measured_us"],
                     "share": round(n["measured_us"] / total, 4) if total else 0.0} for n in top]}


def fallback_costs(nodes: list[dict], boundary_items: list[dict], bandwidth_gb_s: float,
                   transition_overhead_ms: float) -> dict[str, dict]:
    """Each fallback node's cost: its kernel's measured time (None when not timed) plus the estimated copies of
    the accelerator ↔ CPU boundaries it sits on (bytes / bandwidth + the overhead per transition, the Fallbacks
    page's cost model: an estimate, since this host makes no such copy). A boundary shared by two fallback
    nodes counts for each."""
    copies: dict[str, float] = defaultdict(float)
    for b in boundary_items:
        us = (b.get("bytes") or 0) / (bandwidth_gb_s * 1e9) * 1e6 + transition_overhead_ms * 1e3
        for nid in {b["from_node"], *b["consumers"]}:
            copies[nid] += us
    out = {}
    for n in nodes:
        if not n.get("fallback"):
            continue
        kernel = n.get("measured_us")
        copy = copies.get(n["id"], 0.0)
        out[n["id"]] = {"kernel_us": kernel, "copy_us_est": round(copy, 3),
                        "cost_us": round((kernel or 0.0) + copy, 3)}
    return out
