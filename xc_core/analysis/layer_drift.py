"""Per-layer drift: at module boundaries, each target's intermediate value against the reference's, along the
depth of the network, and the first boundary where a target exceeds tolerance.

A boundary is the last source op of a module whose value leaves the module (the module's output). Targets obtain
their intermediates without changing their compiled graphs (see each target's `intermediates_method`); a boundary
whose tensor does not survive compilation on a target (fused into a larger node) is simply missing for it.
"""
from __future__ import annotations

from ..ir import Graph
from .drift import ReferenceVectors, agreement

DEFAULT_RTOL_L2 = 1e-2  # a boundary diverges when its relative L2 error exceeds this


def module_boundaries(before: Graph) -> list[dict]:
    """Ordered module outputs: for each module path, the last compute op inside it whose output is used outside
    it (or is a graph output). Depth = position in execution order."""
    nodes = before.compute_nodes()
    consumers: dict[str, list] = {}
    for n in before.nodes:
        for t in n.inputs:
            consumers.setdefault(t.name, []).append(n)
    graph_outputs = {t.name for t in before.outputs}
    out, seen = [], set()
    for i, n in enumerate(nodes):
        path = n.module_path
        if path is None or path == "":
            continue
        escapes = any(not _inside(c.module_path, path) for t in n.outputs for c in consumers.get(t.name, [])) \
            or any(t.name in graph_outputs for t in n.outputs)
        if escapes and (path, n.id) not in seen:
            seen.add((path, n.id))
            out.append({"source_op": n.id, "module_path": path, "op_type": n.op_type, "depth": i})
    return out


def _inside(child: str | None, parent: str) -> bool:
    return child is not None and (child == parent or child.startswith(parent + "."))


def layer_drift(reference: dict | ReferenceVectors, target: dict, boundaries: list[dict],
                threshold: float = DEFAULT_RTOL_L2) -> dict:
    """reference/target: source op id -> numpy array (the reference may come as ReferenceVectors, shared across
    targets). Returns points along depth and the first divergence."""
    if not isinstance(reference, ReferenceVectors):
        reference = ReferenceVectors(reference)
    points = []
    for b in boundaries:
        op = b["source_op"]
        if op not in reference or op not in target:
            continue
        m = agreement(reference, op, target[op])
        if "error" in m:
            continue
        points.append({**b, "rel_l2": m["rel_l2"], "max_abs": m["max_abs"], "cosine": m["cosine"],
                       "snr_db": m["snr_db"]})
    first = next((p for p in points if (p["rel_l2"] or 0) > threshold), None)
    return {"points": points, "threshold_rel_l2": threshold,
            "first_divergence": ({"module_path": first["module_path"], "source_op": first["source_op"],
                                  "rel_l2": first["rel_l2"]} if first else None),
            "covered": len(points), "boundaries": len(boundaries)}
