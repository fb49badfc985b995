"""The Fallbacks view of a Report: which targets have an accelerator, how each splits the graph between it and the
CPU, every node left on the CPU with its reason, and the boundaries between the two. The dashboard's Fallbacks page,
the HTML report and the Markdown report all render from here.

Whether a target is accelerated is what its report block says (`accelerated`, `accelerator`), whichever toolchain
decided the split: ORT's partition checker for its mobile EPs, xc's rule table for Core ML's compute units. The split
itself — compiled ops on the accelerator and on the CPU, unsupported or outside the delegated partition — is counted
in target_counts.py, as every other view counts it. ORT's checker adds its own figures (partitions, its verdict, the
model as shipped), shown where they exist.
"""
from __future__ import annotations

from ..analysis.boundaries import (
    DEFAULT_BANDWIDTH_GB_S,
    DEFAULT_TRANSITION_OVERHEAD_MS,
    latency_cliff,
)
from .. import evidence as ev
from ..analysis.node_time import fallback_costs
from .rows import not_compiled
from .target_counts import accelerator_of, cpu_kind, cpu_type_lines, split_counts


def accelerated_targets(report: dict) -> list[str]:
    """Accelerated targets whose compiled graph came back (the others are in not_compiled_accelerated)."""
    return [tid for tid, t in report["targets"].items() if t.get("graph") and accelerator_of(t, tid)]


def not_compiled_accelerated(report: dict) -> dict[str, str]:
    """not_compiled, for targets that would have an accelerator to fall back from (the Fallbacks page's)."""
    return {tid: why for tid, why in not_compiled(report).items() if accelerator_of(report["targets"][tid], tid)}


def split_summary(report: dict, tid: str, bandwidth_gb_s: float | None = None,
                  transition_overhead_ms: float | None = None) -> dict:
    """How one accelerated target (one with a compiled graph) splits it, in the figures every view shows: its
    compiled ops on the accelerator and on the CPU (target_counts.split_counts), the boundaries and the
    latency-cliff estimate (recomputed for other assumptions when given), the op types left on the CPU; and, where
    ORT's partition checker decided, its partitions, its verdict and the model as shipped."""
    t = report["targets"][tid]
    info = t.get("info") or {}
    part = info.get("partitioning")
    delegates = bool(part and part.get("delegates") is not None)
    bounds = info.get("boundaries") or {}
    split = split_counts(report, tid)
    assumed = ((bounds.get("latency_cliff") or {}).get("assumptions")) or {}
    bandwidth = bandwidth_gb_s or assumed.get("bandwidth_gb_s") or DEFAULT_BANDWIDTH_GB_S
    overhead = transition_overhead_ms if transition_overhead_ms is not None else \
        assumed.get("transition_overhead_ms", DEFAULT_TRANSITION_OVERHEAD_MS)
    out = {
        "target": tid,
        "accelerator": accelerator_of(t, tid),
        "decided_by": part.get("decided_by", "ONNX Runtime's partition checker") if part else "xc's rule table" if
        (t.get("evidence") or {}).get("assignment") == "predicted-rules" else "the toolchain",
        # The split as every view counts it (target_counts.split_counts): compiled ops, from xc's placement.
        "evidence": (t.get("graph") or {}).get("evidence"),
        "split": split,
        "nodes": split["compute"],
        "on_accelerator": split["on_accelerator"],
        "on_cpu": split["on_cpu"],
        "partitions": part["num_partitions"] if part else None,
        "partition_sizes": part["partition_sizes"] if part else None,
        "verdict": part.get("suitability") if part else None,      # ORT's own word on the model
        "ops_on_cpu": sorted(set(split["unsupported_types"]) | set(split["outside_types"])),
        # The op types on the CPU in two labelled lines: unsupported, and supported but outside the partition.
        "cpu_type_lines": cpu_type_lines(split),
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
    out["share"] = split["share"]
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
    """Every CPU-fallback node of a target with its reason, provenance, neighbours, boundary bytes and its two
    costs in columns of their own (analysis/node_time.fallback_costs): the kernel's time, measured by the runtime's
    profiler, and the copies at its boundaries, assumed by the cost model (its parameters, or those given;
    evidence `assumed`). Ranked by `fallback_rank`: measured time first, never the assumed copies."""
    t = report["targets"][tid]
    s = split_summary(report, tid, bandwidth_gb_s, transition_overhead_ms)
    costs = fallback_costs((t.get("graph") or {}).get("nodes", []),
                           ((t.get("info") or {}).get("boundaries") or {}).get("items", []),
                           s["bandwidth_gb_s"], s["transition_overhead_ms"])
    time_ev = (t.get("node_times") or {}).get("evidence")
    assumed = f"copies {ev.ASSUMED} ({s['bandwidth_gb_s']:g} GB/s, {s['transition_overhead_ms']:g} ms per transition)"
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
            "kernel µs": cost["kernel_us"],
            "copies µs (assumed)": cost["copies_us_assumed"],
            "on the CPU as": cpu_kind(n),
            "reason": n.get("fallback_reason") or "—",
            "module_path": n.get("module_path") or "—",
            "source ops": ", ".join(n.get("source_ops") or []),
            "inputs from": ", ".join(f"{p['id']} ({p['backend']})" for p in before) or "graph input",
            "outputs to": ", ".join(f"{c['id']} ({c['backend']})" for c in after) or "graph output",
            "boundary bytes": crossing_bytes.get(n["id"], 0),
            "time evidence": (f"kernel {time_ev}" if cost["kernel_us"] is not None else "kernel not timed")
            + f" · {assumed}",
        })
    rows.sort(key=fallback_rank)
    return rows


def fallback_rank(row: dict) -> tuple:
    """The order fallback rows are listed in, on every page and report: by the kernel's measured time, largest
    first; nodes no profiler timed after them, by the bytes that cross their boundaries (the graph's shapes). The
    assumed copies never rank: with one constant per transition they would order nodes by how many boundaries
    they touch, and put a 5 µs Gather above a whole model."""
    kernel = row.get("kernel µs")
    return (kernel is None, -(kernel or 0.0), -(row.get("boundary bytes") or 0), row["target"], row["node"])


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
