"""Per-node compute precision, summarised per target."""
from __future__ import annotations

from collections import Counter

from ..ir import Graph


def precision_mix(graph: Graph) -> dict[str, int]:
    c = Counter(n.precision or "unknown" for n in graph.compute_nodes())
    return dict(sorted(c.items(), key=lambda kv: -kv[1]))
