"""Accelerator ↔ CPU boundaries of a partitioned graph, and a latency-cliff estimate.

A boundary is a tensor produced on one side and consumed on the other (counted once per tensor and direction).
Its bytes come from the tensor's shape and dtype at the input shapes that run; where the graph cannot say (a
data-dependent shape), from the tensor measured in a run. Every boundary counts as a transition.

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
               transition_overhead_ms: float = DEFAULT_TRANSITION_OVERHEAD_MS,
               sizes: dict[str, tuple[list, str]] | None = None) -> dict:
    """`sizes` (tensor -> (shape, dtype)) sizes tensors whose shape is symbolic in `graph`: the as-shipped graph's
    boundaries at the shapes that run."""
    sizes = sizes or {}
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
            sized_from = "graph"
            if nbytes is None and t.name in sizes:
                nbytes, sized_from = tensor_bytes(*sizes[t.name]), "resolved input shapes"
            crossings[key] = {"tensor": t.name, "from_node": p.id, "to_node": n.id, "consumers": [n.id],
                              "direction": f"{p.backend}→{n.backend}", "shape": t.shape, "dtype": t.dtype,
                              "bytes": nbytes, "symbolic": nbytes is None,
                              "sized_from": sized_from if nbytes is not None else None}
    return summarize(list(crossings.values()), bandwidth_gb_s, transition_overhead_ms)


def summarize(items: list[dict], bandwidth_gb_s: float, transition_overhead_ms: float) -> dict:
    known = [b["bytes"] for b in items if b["bytes"] is not None]
    total = int(sum(known))
    return {
        "count": len(items),
        "items": items,
        "total_bytes": total,
        "symbolic_count": sum(b["bytes"] is None for b in items),
        "latency_cliff": latency_cliff(total, len(items), bandwidth_gb_s, transition_overhead_ms,
                                       unsized=sum(b["bytes"] is None for b in items)),
    }


def fill_measured(b: dict, measured: dict[str, "np.ndarray"], bandwidth_gb_s: float,
                  transition_overhead_ms: float) -> dict:
    """Size the boundaries no shape could size (data-dependent shapes) from the tensors of a real run."""
    for item in b["items"]:
        if item["bytes"] is None and item["tensor"] in measured:
            v = measured[item["tensor"]]
            item["bytes"], item["symbolic"], item["sized_from"] = int(v.nbytes), False, "measured in a run"
            item["shape"] = list(v.shape)
    out = summarize(b["items"], bandwidth_gb_s, transition_overhead_ms)
    return {**b, **out}


def latency_cliff(total_bytes: int, transitions: int, bandwidth_gb_s: float = DEFAULT_BANDWIDTH_GB_S,
                  transition_overhead_ms: float = DEFAULT_TRANSITION_OVERHEAD_MS, unsized: int = 0) -> dict:
    transfer_ms = total_bytes / (bandwidth_gb_s * 1e9) * 1e3
    overhead_ms = transitions * transition_overhead_ms
    return {
        "estimate_ms": round(transfer_ms + overhead_ms, 4),
        "transfer_ms": round(transfer_ms, 4),
        "overhead_ms": round(overhead_ms, 4),
        "assumptions": {"bandwidth_gb_s": bandwidth_gb_s, "transition_overhead_ms": transition_overhead_ms,
                        "formula": "Σ boundary bytes / bandwidth + transitions × overhead",
                        "unsized_boundaries": unsized,
                        "excludes": ("nothing: every boundary is sized" if not unsized else
                                     f"the bytes of {unsized} boundary tensor(s) no shape or run could size "
                                     "(their transitions are counted)")},
    }
