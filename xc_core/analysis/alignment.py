"""Alignment: every compiled node of every target traced back to the source ops it carries, and so, across
targets, source op → the node that carries it on each target (fused into what, on which backend, at which
precision). Provenance comes from capture (ONNX metadata, torch from_node), fusion regions, MIL scopes and names,
and OpenVINO's originalLayersNames — computed, never supplied by the user.

Coverage counts compute nodes (nodes that execute the model's math). Nodes a compiler inserts — layout reorders,
casts, inserted transposes — carry no source op by construction; they are listed with their kind.
"""
from __future__ import annotations

from ..ir import COMPUTE, CONSTANT, IO, Graph


def coverage(graph: Graph) -> dict:
    compute = [n for n in graph.nodes if n.kind == COMPUTE]
    mapped = [n for n in compute if n.source_ops]
    inserted = [n for n in graph.nodes if n.kind not in (COMPUTE, CONSTANT, IO) and not n.source_ops]
    return {
        "compute_nodes": len(compute),
        "mapped": len(mapped),
        "ratio": round(len(mapped) / len(compute), 4) if compute else 1.0,
        "unmapped": [{"id": n.id, "op_type": n.op_type, "kind": n.kind} for n in compute if not n.source_ops],
        "inserted": [{"id": n.id, "op_type": n.op_type, "kind": n.kind} for n in inserted],
    }


def source_op_table(before: Graph, graphs: dict[str, Graph]) -> list[dict]:
    """One row per source compute op: for each target, the node(s) carrying it and how."""
    carriers: dict[str, dict[str, list]] = {tid: {} for tid in graphs}
    for tid, g in graphs.items():
        for n in g.nodes:
            if n.kind in (CONSTANT, IO):
                continue
            for s in n.source_ops:
                carriers[tid].setdefault(s, []).append(n)
    rows = []
    for op in before.compute_nodes():
        per_target = {}
        for tid in graphs:
            nodes = carriers[tid].get(op.id, [])
            if not nodes:
                per_target[tid] = {"status": "absent", "nodes": []}
                continue
            main = max(nodes, key=lambda n: len(n.source_ops))
            fused = len(main.source_ops) > 1
            per_target[tid] = {
                "status": ("fallback" if any(n.fallback for n in nodes) else "fused" if fused else "present"),
                "nodes": [n.id for n in nodes],
                "node": main.id,
                "op_type": main.op_type,
                "backend": main.backend,
                "precision": main.precision,
                "fused_with": [s for s in main.source_ops if s != op.id],
                "fallback_reason": next((n.fallback_reason for n in nodes if n.fallback), None),
            }
        rows.append({"source_op": op.id, "op_type": op.op_type, "module_path": op.module_path,
                     "location": op.source_location, "targets": per_target})
    return rows
