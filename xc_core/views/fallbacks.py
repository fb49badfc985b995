"""The Fallbacks view of a Report: which targets have an accelerator, how each splits the graph between it and the
CPU, every node left on the CPU with its reason, and the boundaries between the two. The dashboard's Fallbacks page,
the HTML report and the Markdown report all render from here.

Whether a target is accelerated is what its report block says (`accelerated`, `accelerator`), whichever toolchain
decided the split: ORT's partition checker for its mobile EPs, xc's rule table for Core ML's compute units. ORT's
checker adds its own figures (partitions, its verdict, the model as shipped), shown where they exist.
"""
from __future__ import annotations

from ..analysis.boundaries import (
    DEFAULT_BANDWIDTH_GB_S,
    DEFAULT_TRANSITION_OVERHEAD_MS,
    latency_cliff,
)
from ..analysis.node_time import fallback_costs
from .rows import not_compiled


def accelerator_of(t: dict, tid: str | None = None) -> str | None:
    """The accelerator a target block can fall back from, or None. A report written before blocks said so (no
    `accelerated` key) is read by what its accelerated targets always recorded: accelerator ↔ CPU boundaries, or,
    for a target that did not compile, what the registered target of that id has."""
    if "accelerated" in t:
        return (t.get("accelerator") or "an accelerator") if t["accelerated"] else None
    if (t.get("info") or {}).get("boundaries"):
        return "an accelerator"
    from ..errors import XcInputError
    from ..targets import make_target
    try:
        return make_target(t.get("identity") or tid or t.get("id") or "").accelerator
    except XcInputError:       # an imported report's target this xc does not know
        return None


def accelerated_targets(report: dict) -> list[str]:
    """Accelerated targets whose compiled graph came back (the others are in not_compiled_accelerated)."""
    return [tid for tid, t in report["targets"].items() if t.get("graph") and accelerator_of(t, tid)]


def not_compiled_accelerated(report: dict) -> dict[str, str]:
    """not_compiled, for targets that would have an accelerator to fall back from (the Fallbacks page's)."""
    return {tid: why for tid, why in not_compiled(report).items() if accelerator_of(report["targets"][tid], tid)}


def split_summary(report: dict, tid: str, bandwidth_gb_s: float | None = None,
                  transition_overhead_ms: float | None = None) -> dict:
    """How one accelerated target splits its graph, in the figures every view shows: nodes on the accelerator,
    the boundaries and the latency-cliff estimate (recomputed for other assumptions when given), the ops left on
    the CPU; and, where ORT's partition checker decided, its partitions, its verdict and the model as shipped."""
    t = report["targets"][tid]
    info = t.get("info") or {}
    part = info.get("partitioning")
    delegates = bool(part and part.get("delegates") is not None)
    bounds = info.get("boundaries") or {}
    compute = [n for n in (t.get("graph") or {}).get("nodes", []) if n.get("kind") == "compute"]
    on_cpu = [n for n in compute if n.get("fallback")]
    assumed = ((bounds.get("latency_cliff") or {}).get("assumptions")) or {}
    bandwidth = bandwidth_gb_s or assumed.get("bandwidth_gb_s") or DEFAULT_BANDWIDTH_GB_S
    overhead = transition_overhead_ms if transition_overhead_ms is not None else \
        assumed.get("transition_overhead_ms", DEFAULT_TRANSITION_OVERHEAD_MS)
    out = {
        "target": tid,
        "accelerator": accelerator_of(t, tid),
        "decided_by": part.get("decided_by", "ONNX Runtime's partition checker") if part else "xc's rule table" if
        (t.get("evidence") or {}).get("assignment") == "predicted-rules" else "the toolchain",
        "evidence": part["evidence"] if part else (t.get("graph") or {}).get("evidence"),
        "nodes": part["num_nodes"] if part else len(compute),
        "on_accelerator": part["num_supported_nodes"] if part else len(compute) - len(on_cpu),
        "partitions": part["num_partitions"] if part else None,
        "partition_sizes": part["partition_sizes"] if part else None,
        "verdict": part.get("suitability") if part else None,      # ORT's own word on the model
        # ORT names the op types it has no kernel for; elsewhere, the op types left on the CPU.
        "ops_on_cpu": list(part["unsupported_ops"]) if part else sorted({n["op_type"] for n in on_cpu}),
        "ops_on_cpu_label": ("Ops left to the CPU kernels" if delegates else "Unsupported ops") if part else
        "Ops left on the CPU",
        # ExecuTorch calls its partitions delegates (one executorch_call_delegate each)
        "partitions_label": "Delegates" if delegates else "Partitions",
        "boundaries": bounds.get("count", 0),
        "boundary_bytes": bounds.get("total_bytes") or 0,
        "unsized_boundaries": bounds.get("symbolic_count") or 0,
        "boundary_evidence": bounds.get("evidence"),
        "bandwidth_gb_s": bandwidth,
        "transition_overhead_ms": overhead,
        "cliff": latency_cliff(bounds.get("total_bytes") or 0, bounds.get("count") or 0, bandwidth, overhead)
        if bounds else None,
        "cliff_assumptions": assumed,
        "caveats": list(part.get("unchecked_caveats") or []) if part else [],
        "shipped": None,
    }
    out["share"] = out["on_accelerator"] / out["nodes"] if out["nodes"] else None
    shipped = info.get("partitioning_as_shipped") if part else None
    if shipped:
        sb = shipped.get("boundaries") or {}
        out["shipped"] = {
            "evidence": shipped.get("evidence"), "verdict": shipped.get("suitability"),
            "share": shipped["accelerated_share_nodes"],
            "share_change_pts": 100 * (shipped["accelerated_share_nodes"] - part["accelerated_share_nodes"]),
            "partitions": shipped.get("num_partitions"),
            "cliff": latency_cliff(sb.get("total_bytes") or 0, sb.get("count") or 0, bandwidth, overhead),
            "left_for_dynamic_shape": shipped.get("nodes_unsupported_due_to_dynamic_input"),
            "reasons": dict(shipped.get("fallbacks_by_reason") or {}),
        }
    return out


def fallback_rows(report: dict, tid: str, bandwidth_gb_s: float | None = None,
                  transition_overhead_ms: float | None = None) -> list[dict]:
    """Every CPU-fallback node of a target with its reason, provenance, neighbours, boundary bytes and cost: its
    kernel's measured time plus the estimated copies at its boundaries (analysis/node_time.fallback_costs, at the
    cost model's assumptions, or those given); costliest first."""
    t = report["targets"][tid]
    s = split_summary(report, tid, bandwidth_gb_s, transition_overhead_ms)
    costs = fallback_costs((t.get("graph") or {}).get("nodes", []),
                           ((t.get("info") or {}).get("boundaries") or {}).get("items", []),
                           s["bandwidth_gb_s"], s["transition_overhead_ms"])
    time_ev = (t.get("node_times") or {}).get("evidence")
    nodes = (t.get("graph") or {}).get("nodes", [])
    producer = {o["name"]: n for n in nodes for o in n["outputs"]}
    consumers: dict[str, list[dict]] = {}
    for n in nodes:
        for i in n["inputs"]:
            consumers.setdefault(i["name"], []).append(n)
    crossing_bytes: dict[str, int] = {}
    for b in (t.get("info") or {}).get("boundaries", {}).get("items", []):
        for nid in [b["from_node"], *b["consumers"]]:
            crossing_bytes[nid] = crossing_bytes.get(nid, 0) + (b["bytes"] or 0)
    rows = []
    for n in nodes:
        if not n.get("fallback"):
            continue
        before = [producer[i["name"]] for i in n["inputs"] if i["name"] in producer]
        after = [c for o in n["outputs"] for c in consumers.get(o["name"], [])]
        cost = costs[n["id"]]
        rows.append({
            "target": tid,
            "node": n["id"],
            "op_type": n["op_type"],
            "cost µs": cost["cost_us"],
            "kernel µs": cost["kernel_us"],
            "copies µs (est.)": cost["copy_us_est"],
            "reason": n.get("fallback_reason") or "—",
            "module_path": n.get("module_path") or "—",
            "source ops": ", ".join(n.get("source_ops") or []),
            "inputs from": ", ".join(f"{p['id']} ({p['backend']})" for p in before) or "graph input",
            "outputs to": ", ".join(f"{c['id']} ({c['backend']})" for c in after) or "graph output",
            "boundary bytes": crossing_bytes.get(n["id"], 0),
            "time evidence": f"kernel {time_ev}, copies predicted" if cost["kernel_us"] is not None
            else "kernel not timed, copies predicted",
        })
    # Costliest first: a timed kernel's measured cost plus its copies; untimed ones by their copies alone.
    rows.sort(key=lambda r: -r["cost µs"])
    return rows


def boundary_rows(report: dict, targets: list[str]) -> list[dict]:
    """Every accelerator ↔ CPU boundary of the targets: the tensor, its direction, its ends and its size."""
    rows = []
    for tid in targets:
        for b in ((report["targets"][tid].get("info") or {}).get("boundaries") or {}).get("items", []):
            rows.append({"target": tid, "tensor": b["tensor"], "direction": b["direction"], "from": b["from_node"],
                         "to": ", ".join(b["consumers"]), "shape": str(b["shape"]), "dtype": b["dtype"],
                         "bytes": b["bytes"] if b["bytes"] is not None else "symbolic"})
    return rows


def assignment_rows(report: dict) -> list[dict]:
    """Per target whose backend assignment came from ONNX Runtime: where it came from (its assignment API, its
    profile, its partition checker), which sources were compared and where they disagree."""
    rows = []
    for tid, t in report["targets"].items():
        info = t.get("info") or {}
        source = info.get("assignment_source")
        if not source:
            continue
        disagree = info.get("assignment_disagreements") or []
        compared = info.get("assignment_sources_compared") or []
        if disagree:
            verdict = f"{len(disagree)} node(s) disagree: " + ", ".join(
                f"{d['node']} ({d['op_type']}: API {d['ort_api']}, profile {d['profile']})" for d in disagree[:5])
        elif compared:
            verdict = f"{' and '.join(compared)} agree on every node both name"
        else:
            verdict = info.get("assignment_unconfirmed") or "one source only"
        rows.append({"target": tid, "assignment from": source, "compared with": ", ".join(compared[1:]) or "—",
                     "result": verdict, "evidence": (t.get("graph") or {}).get("evidence") or "—"})
    return rows
