"""Fusion patterns across targets, and "expected fusion did not fire": a group of source ops one target fused
into a single node while another target keeps them in separate nodes.

Patterns are compared in source-op terms (the captured graph's op types, e.g. `conv2d+batch_norm+relu`), since
each compiler names its fused op differently (FusedConv, Convolution, conv).
"""
from __future__ import annotations

from collections import defaultdict

from ..ir import COMPUTE, Graph


def source_pattern(source_ops: list[str], before_index: dict) -> str:
    types = [before_index[s].op_type for s in source_ops if s in before_index and before_index[s].kind == COMPUTE]
    return "+".join(types)


def fusion_matrix(before: Graph, graphs: dict[str, Graph], partitioned: set[str] | None = None) -> dict:
    """patterns: [{pattern, targets: {tid: count}}]; not_fired: [{pattern, fired_on, missing_on, source_ops,
    carried_by, reason}]. `partitioned`: targets whose accelerator compiles its partitions itself (fusions inside
    them are invisible here), so a miss there is reported with that caveat."""
    partitioned = partitioned or set()
    index = before.by_id()
    order = {n.id: i for i, n in enumerate(before.nodes)}
    carriers = {tid: _carriers(g) for tid, g in graphs.items()}
    fired: dict[str, dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for tid, g in graphs.items():
        for n in g.compute_nodes():
            ops = tuple(sorted((s for s in n.source_ops if s in index and index[s].kind == COMPUTE),
                               key=order.get))
            if len(ops) >= 2:
                fired[source_pattern(list(ops), index)][tid].append(ops)
    patterns = [{"pattern": p, "targets": {tid: len(v) for tid, v in per.items()}}
                for p, per in sorted(fired.items(), key=lambda kv: -sum(len(v) for v in kv[1].values()))]
    not_fired = []
    seen = set()
    for p, per in fired.items():
        for tid_fired, groups in per.items():
            for ops in groups:
                for tid, nodes_by_op in carriers.items():
                    if tid == tid_fired or (p, tid, ops) in seen:
                        continue
                    holders = [nodes_by_op.get(o) for o in ops]
                    if any(h is None for h in holders):
                        continue  # an op is absent there (folded / eliminated): not a missed fusion
                    distinct = {h.id for h in holders}
                    if len(distinct) < 2:
                        continue
                    # Some of them may still be fused together with each other partially; it is a miss when the
                    # full group is split.
                    seen.add((p, tid, ops))
                    not_fired.append({"pattern": p, "fired_on": tid_fired, "missing_on": tid,
                                      "source_ops": list(ops), "carried_by": sorted(distinct),
                                      "module_path": index[ops[0]].module_path,
                                      "reason": _reason(holders) or (
                                          "the EP compiles its partitions itself: fusions inside a partition are "
                                          "not visible to ORT's checker" if tid in partitioned else None)})
    # The rows by pattern (not_fired_by_pattern) are derived where they are shown, not stored twice.
    return {"patterns": patterns, "not_fired": not_fired}


def not_fired_by_pattern(matrix: dict | None) -> list[dict]:
    """The report's fusion_matrix as one row per (pattern, target where it did not fire): instance count and
    where it did fire (reports of earlier stops stored these rows)."""
    matrix = matrix or {}
    if "not_fired_by_pattern" in matrix:
        return matrix["not_fired_by_pattern"] or []
    return _by_pattern(matrix.get("not_fired") or [])


def _by_pattern(not_fired: list[dict]) -> list[dict]:
    """One row per (pattern, target where it did not fire): instance count and where it did fire."""
    rows: dict[tuple, dict] = {}
    for m in not_fired:
        key = (m["pattern"], m["missing_on"])
        row = rows.setdefault(key, {"pattern": m["pattern"], "missing_on": m["missing_on"], "instances": 0,
                                    "fired_on": set(), "reason": m["reason"], "example": m["source_ops"]})
        row["instances"] += 1
        row["fired_on"].add(m["fired_on"])
    return [{**r, "fired_on": sorted(r["fired_on"])} for r in sorted(rows.values(),
                                                                     key=lambda r: (-r["instances"], r["pattern"]))]


def _carriers(g: Graph) -> dict:
    """source op -> the compute node carrying it (the one absorbing most source ops, if several)."""
    out = {}
    for n in g.compute_nodes():
        for s in n.source_ops:
            if s not in out or len(n.source_ops) > len(out[s].source_ops):
                out[s] = n
    return out


def _reason(holders) -> str | None:
    """The compiler's own reason where it gives one: a fallback splits a group across devices."""
    for h in holders:
        if h.fallback and h.fallback_reason:
            return f"{h.op_type} falls back to the CPU ({h.fallback_reason})"
    backends = {h.backend for h in holders}
    if len(backends) > 1:
        return "the ops run on different devices (" + ", ".join(sorted(b or "?" for b in backends)) + ")"
    return None
