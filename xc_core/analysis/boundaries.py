"""Accelerator ↔ CPU boundaries of a partitioned graph, and a latency-cliff estimate.

A boundary is a tensor produced on one side and consumed on the other (counted once per tensor and direction).
Its bytes come from the tensor's shape and dtype; a symbolic or unknown shape is said so and left out of the sum.

Cost model (deliberately simple, every parameter shown next to the estimate):
    estimate_ms = Σ bytes / bandwidth + transitions × per-transition overhead
Defaults: 4 GB/s effective copy bandwidth (a phone's LPDDR4X/5 memcpy through the driver is in the low GB/s), and
0.2 ms per transition (NNAPI/Core ML dispatch + synchronisation per partition, the order of magnitude ORT's mobile
docs warn about when they advise against more than one or two partitions). Both are options.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph

DEFAULT_BANDWIDTH_GB_S = 4.0
DEFAULT_TRANSITION_OVERHEAD_MS = 0.2
CPU = "cpu"


def tensor_bytes(shape, dtype) -> int | None:
    if shape is None or dtype is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return None
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        return None
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def boundaries(graph: Graph, bandwidth_gb_s: float = DEFAULT_BANDWIDTH_GB_S,
               transition_overhead_ms: float = DEFAULT_TRANSITION_OVERHEAD_MS) -> dict:
    producer = {t.name: n for n in graph.nodes for t in n.outputs}
    crossings = {}
    for n in graph.nodes:
        if n.backend is None:
            continue
        for t in n.inputs:
            p = producer.get(t.name)
            if p is None or p.backend is None or p.backend == n.backend:
                continue
            if CPU not in (p.backend, n.backend) or "unknown" in (p.backend, n.backend):
                continue  # two accelerators, or a side nobody can predict: not a known CPU boundary
            key = (t.name, p.backend, n.backend)
            if key in crossings:
                crossings[key]["consumers"].append(n.id)
                continue
            nbytes = tensor_bytes(t.shape, t.dtype)
            crossings[key] = {"tensor": t.name, "from_node": p.id, "to_node": n.id, "consumers": [n.id],
                              "direction": f"{p.backend}→{n.backend}", "shape": t.shape, "dtype": t.dtype,
                              "bytes": nbytes, "symbolic": nbytes is None}
    items = list(crossings.values())
    known = [b["bytes"] for b in items if b["bytes"] is not None]
    total = int(sum(known))
    return {
        "count": len(items),
        "items": items,
        "total_bytes": total,
        "symbolic_count": sum(b["symbolic"] for b in items),
        "latency_cliff": latency_cliff(total, len(items), bandwidth_gb_s, transition_overhead_ms),
    }


def latency_cliff(total_bytes: int, transitions: int, bandwidth_gb_s: float = DEFAULT_BANDWIDTH_GB_S,
                  transition_overhead_ms: float = DEFAULT_TRANSITION_OVERHEAD_MS) -> dict:
    transfer_ms = total_bytes / (bandwidth_gb_s * 1e9) * 1e3
    overhead_ms = transitions * transition_overhead_ms
    return {
        "estimate_ms": round(transfer_ms + overhead_ms, 4),
        "transfer_ms": round(transfer_ms, 4),
        "overhead_ms": round(overhead_ms, 4),
        "assumptions": {"bandwidth_gb_s": bandwidth_gb_s, "transition_overhead_ms": transition_overhead_ms,
                        "formula": "Σ boundary bytes / bandwidth + transitions × overhead",
                        "excludes": "boundaries whose tensor shape is symbolic or unknown"},
    }
