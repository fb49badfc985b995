"""Fusion groups: each compiled node that absorbed two or more compute nodes of the graph its compiler was given,
with a readable pattern name (`Conv+Relu → FusedConv`)."""
from __future__ import annotations

from collections import Counter

from ..ir import COMPUTE, Graph


def fusion_groups(compiled: Graph, input_graph: Graph) -> list[dict]:
    index = input_graph.by_id()
    groups = []
    for n in compiled.compute_nodes():
        absorbed = [index[i] for i in n.fused_from if i in index and index[i].kind == COMPUTE]
        if len(absorbed) < 2:
            continue
        groups.append({
            "node": n.id,
            "op_type": n.op_type,
            "domain": n.domain,
            "pattern": pattern_name([a.op_type for a in absorbed], n.op_type),
            "absorbed": [{"id": a.id, "op_type": a.op_type, "module_path": a.module_path} for a in absorbed],
            "source_ops": list(n.source_ops),
            "module_path": n.module_path,
            # Compilers that say which pass fused it (coremltools scopes) get it named here.
            "pass": ", ".join(n.attributes.get("fused_by") or []) or None,
        })
    return groups


def pattern_name(absorbed_types: list[str], result_type: str) -> str:
    # Keep the order ops run in, collapsing repeats ("MatMul+Add+Add" stays as it is: it says what fused).
    return "+".join(absorbed_types) + " → " + result_type


def pattern_counts(groups: list[dict]) -> list[dict]:
    c = Counter(g["pattern"] for g in groups)
    return [{"pattern": p, "count": k} for p, k in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]
