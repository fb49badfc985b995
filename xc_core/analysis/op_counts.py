"""Op counts before (the captured framework graph) and after (each target's compiled graph)."""
from __future__ import annotations

from collections import Counter

from ..ir import Graph


def op_counts(graph: Graph) -> dict[str, int]:
    """Compute ops by type; constants, layout reorders, casts and graph I/O are counted separately."""
    c = Counter(n.op_type for n in graph.compute_nodes())
    return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def other_counts(graph: Graph) -> dict[str, int]:
    return dict(Counter(n.kind for n in graph.nodes if n.kind != "compute"))
