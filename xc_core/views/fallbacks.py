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

from collections.abc import Mapping

from ..analysis.boundaries import (
    DEFAULT_BANDWIDTH_GB_S,
    DEFAULT_TRANSITION_OVERHEAD_MS,
    latency_cliff,
)
from .. import evidence as ev
from ..analysis.node_time import fallback_costs
from ..report.types import Report
from .rows import not_compiled
from .target_counts import accelerator_of, cpu_kind, cpu_type_lines, split_counts
from .time_evidence import is_estimated
from .typed_report import as_report


def accelerated_targets(report: Report | Mapping) -> list[str]:
    """Accelerated targets whose compiled graph came back (the others are in not_compiled_accelerated)."""
    return [tid for tid, t in as_report(report).targets.items() if t.graph and accelerator_of(t)]


def not_compiled_accelerated(report: Report | Mapping) -> dict[str, str]:
    """not_compiled, for targets that would have an accelerator to fall back from (the Fallbacks page's)."""
    report = as_report(report)
    return {tid: why for tid, why in not_compiled(report).items() if accelerator_of(report.targets[tid])}


def split_summary(report: Report | Mapping, tid: str, bandwidth_gb_s: float | None = None,
                  transition_overhead_ms: float | None = None) -> dict:
    """How one accelerated target (one with a compiled graph) splits it, in the figures every view shows: its
    compiled ops on the accelerator and on the CPU (target_counts.split_counts), the boundaries and the
    latency-cliff estimate (recomputed for other assumptions when given), the op types left on the CPU; and, where
    ORT's partition checker decided, its partitions, its verdict and the model as shipped (the checker's own
    figures are kept as it wrote them, in the partitioning blocks' `extra`)."""
    report = as_report(report)
    t = report.targets[tid]
    info = t.info
    part = info.partitioning
    checker = part.extra
    delegates = bool(part) and checker.get("delegates") is not None
    bounds = info.boundaries
    split = split_counts(report, tid)
    assumed = ((bounds.latency_cliff or {}).get("assumptions")) or {}
    bandwidth = bandwidth_gb_s or assumed.get("bandwidth_gb_s") or DEFAULT_BANDWIDTH_GB_S
    overhead = transition_overhead_ms if transition_overhead_ms is not None else \
        assumed.get("transition_overhead_ms", DEFAULT_TRANSITION_OVERHEAD_MS)
    out = {
        "target": tid,
        "accelerator": accelerator_of(t),
        "decided_by": checker.get("decided_by", "ONNX Runtime's partition checker") if part else "xc's rule table"
        if t.evidence.get("assignment") == "predicted-rules" else "the toolchain",
        # The split as every view counts it (target_counts.split_counts): compiled ops, from xc's placement.
        "evidence": t.graph.evidence,
        "split": split,
        "nodes": split["compute"],
        "on_accelerator": split["on_accelerator"],
        "on_cpu": split["on_cpu"],
        "partitions": part.num_partitions if part else None,
        "partition_sizes": checker["partition_sizes"] if part else None,
        "verdict": checker.get("suitability") if part else None,      # ORT's own word on the model
        "ops_on_cpu": sorted(set(split["unsupported_types"]) | set(split["outside_types"])),
        # The op types on the CPU in two labelled lines: unsupported, and supported but outside the partition.
        "cpu_type_lines": cpu_type_lines(split),
        # ExecuTorch calls its partitions delegates (one executorch_call_delegate each)
        "partitions_label": "Delegates" if delegates else "Partitions",
        "boundaries": bounds.count,
        "boundary_bytes": bounds.total_bytes or 0,
        "unsized_boundaries": bounds.symbolic_count or 0,
        "boundary_evidence": bounds.evidence,
        "bandwidth_gb_s": bandwidth,
        "transition_overhead_ms": overhead,
        "cliff": latency_cliff(bounds.total_bytes or 0, bounds.count or 0, bandwidth, overhead)
        if bounds else None,
        "cliff_assumptions": assumed,
        "caveats": list(checker.get("unchecked_caveats") or []) if part else [],
        "shipped": None,
    }
    out["share"] = split["share"]
    shipped = info.partitioning_as_shipped if part else None
    if shipped:
        as_shipped = shipped.extra        # the checker's figures for the model with its dynamic dims
        sb = shipped.boundaries or {}
        out["shipped"] = {
            "evidence": as_shipped.get("evidence"), "verdict": as_shipped.get("suitability"),
            "share": as_shipped["accelerated_share_nodes"],
            "share_change_pts": 100 * (as_shipped["accelerated_share_nodes"] - checker["accelerated_share_nodes"]),
            "partitions": as_shipped.get("num_partitions"),
            "cliff": latency_cliff(sb.get("total_bytes") or 0, sb.get("count") or 0, bandwidth, overhead),
            "left_for_dynamic_shape": as_shipped.get("nodes_unsupported_due_to_dynamic_input"),
            "reasons": dict(as_shipped.get("fallbacks_by_reason") or {}),
        }
    return out


def fallback_rows(report: Report | Mapping, tid: str, bandwidth_gb_s: float | None = None,
                  transition_overhead_ms: float | None = None) -> list[dict]:
    """Every CPU-fallback node of a target with its reason, provenance, neighbours, boundary bytes and its two
    costs in columns of their own (analysis/node_time.fallback_costs): the kernel's time, measured by the runtime's
    profiler, and the copies at its boundaries, assumed by the cost model (its parameters, or those given;
    evidence `assumed`). A kernel time a compiler estimated (evidence estimated-compiler) is in "kernel µs
    (estimated)" instead. Ranked by `fallback_rank`: measured time first, then estimated, never the assumed
    copies."""
    report = as_report(report)
    t = report.targets[tid]
    s = split_summary(report, tid, bandwidth_gb_s, transition_overhead_ms)
    nodes = t.graph.nodes
    boundary_items = t.info.boundaries.items
    # fallback_costs reads node dicts and costs the fallback nodes only: those few are encoded back.
    costs = fallback_costs([n.to_dict() for n in nodes if n.fallback], list(boundary_items),
                           s["bandwidth_gb_s"], s["transition_overhead_ms"])
    time_ev = t.node_times.evidence
    # A compiler's estimate of the kernel (evidence estimated-compiler) goes in a column of its own: it is never
    # listed, summed or ranked as a measured kernel time.
    estimated = is_estimated(t.node_times)
    assumed = f"copies {ev.ASSUMED} ({s['bandwidth_gb_s']:g} GB/s, {s['transition_overhead_ms']:g} ms per transition)"
    producer = {o.name: n for n in nodes for o in n.outputs}
    consumers: dict[str, list] = {}
    for n in nodes:
        for i in n.inputs:
            consumers.setdefault(i.name, []).append(n)
    crossing_bytes: dict[str, int] = {}
    for b in boundary_items:
        for nid in [b["from_node"], *b["consumers"]]:
            crossing_bytes[nid] = crossing_bytes.get(nid, 0) + (b["bytes"] or 0)
    rows = []
    for n in nodes:
        if not n.fallback:
            continue
        before = [producer[i.name] for i in n.inputs if i.name in producer]
        after = [c for o in n.outputs for c in consumers.get(o.name, [])]
        cost = costs[n.id]
        rows.append({
            "target": tid,
            "node": n.id,
            "op_type": n.op_type,
            "kernel µs": None if estimated else cost["kernel_us"],
            **({"kernel µs (estimated)": cost["kernel_us"]} if estimated else {}),
            "copies µs (assumed)": cost["copies_us_assumed"],
            "on the CPU as": cpu_kind(n),
            "reason": n.fallback_reason or "—",
            "module_path": n.module_path or "—",
            "source ops": ", ".join(n.source_ops),
            "inputs from": ", ".join(f"{p.id} ({p.backend})" for p in before) or "graph input",
            "outputs to": ", ".join(f"{c.id} ({c.backend})" for c in after) or "graph output",
            "boundary bytes": crossing_bytes.get(n.id, 0),
            "time evidence": (f"kernel {time_ev}" if cost["kernel_us"] is not None else "kernel not timed")
            + f" · {assumed}",
        })
    rows.sort(key=fallback_rank)
    return rows


def fallback_rank(row: dict) -> tuple:
    """The order fallback rows are listed in, on every page and report: by the kernel's measured time, largest
    first; then the nodes a compiler's performance model estimated, by that estimate, apart (an estimate never
    ranks among measurements); nodes with no time after them, by the bytes that cross their boundaries (the
    graph's shapes). The assumed copies never rank: with one constant per transition they would order nodes by how
    many boundaries they touch, and put a 5 µs Gather above a whole model."""
    kernel, estimate = row.get("kernel µs"), row.get("kernel µs (estimated)")
    return (kernel is None, -(kernel or 0.0), estimate is None, -(estimate or 0.0),
            -(row.get("boundary bytes") or 0), row["target"], row["node"])


def boundary_rows(report: Report | Mapping, targets: list[str]) -> list[dict]:
    """Every accelerator ↔ CPU boundary of the targets: the tensor, its direction, its ends and its size."""
    report = as_report(report)
    rows = []
    for tid in targets:
        for b in report.targets[tid].info.boundaries.items:
            rows.append({"target": tid, "tensor": b["tensor"], "direction": b["direction"], "from": b["from_node"],
                         "to": ", ".join(b["consumers"]), "shape": str(b["shape"]), "dtype": b["dtype"],
                         "bytes": b["bytes"] if b["bytes"] is not None else "symbolic"})
    return rows


def assignment_rows(report: Report | Mapping) -> list[dict]:
    """Per target whose backend assignment came from ONNX Runtime: where it came from (its assignment API, its
    profile, its partition checker), which sources were compared and where they disagree — ONNX Runtime's facts,
    kept in the target's free `info`."""
    rows = []
    for tid, t in as_report(report).targets.items():
        ort_facts = t.info.extra
        source = ort_facts.get("assignment_source")
        if not source:
            continue
        disagree = ort_facts.get("assignment_disagreements") or []
        compared = ort_facts.get("assignment_sources_compared") or []
        if disagree:
            verdict = f"{len(disagree)} node(s) disagree: " + ", ".join(
                f"{d['node']} ({d['op_type']}: API {d['ort_api']}, profile {d['profile']})" for d in disagree[:5])
        elif compared:
            verdict = f"{' and '.join(compared)} agree on every node both name"
        else:
            verdict = ort_facts.get("assignment_unconfirmed") or "one source only"
        rows.append({"target": tid, "assignment from": source, "compared with": ", ".join(compared[1:]) or "—",
                     "result": verdict, "evidence": t.graph.evidence or "—"})
    return rows
