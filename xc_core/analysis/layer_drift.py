"""Per-layer drift: at module boundaries, each target's intermediate value against the reference's, along the
depth of the network, and the first boundary where a target exceeds tolerance.

A boundary is the last source op of a module whose value leaves the module (the module's output). Targets obtain
their intermediates without changing their compiled graphs (see each target's `intermediates_method`); a boundary
whose tensor does not survive compilation on a target (fused into a larger node) is simply missing for it.

Every compared point is verified before it is shown (`verify_points`): a value a target maps to a source op can be
another tensor (a toolchain's op-id mix-up, a fused op that computes a later op's value), and an error measured
against the wrong tensor looks like a finding. A point is `verified: false`, with its `check` and the reason, when

* shape: its shape is not the reference's, up to size-1 axes. The one layout change a target is known to make to
  the value it reports is adding or dropping size-1 axes (Core AI lowers a matmul on [N, K] as a batch matmul on
  [N, 1, K]); that keeps every element in its place, so such a value is compared reshaped to the reference's shape
  (the point keeps `target_shape`). Any other difference (a transpose, another size) is another tensor;
* dtype: its values are not of the reference's kind (floating point vs integer/bool). Precision may differ —
  fp16 against fp32 is what per-layer drift measures — the kind may not;
* consistency: its rel L2 is at least CONSISTENCY_NOISE_FLOOR and more than CONSISTENCY_FACTOR times every
  verified point downstream of it on the same path (the captured graph's consumers, transitively) and the target's
  output drift. Error propagates: each op downstream computes from the erroneous value, so its own error is of
  the same order unless an op discards what was wrong. A point 100× worse than everything that computes from it,
  outputs included, either compares another tensor than the source op's, or holds an error that no longer
  reaches anything the model returns: either way it is not the cause of any drift that is measured, so it is
  not drawn as a jump and not attributed. Below the noise floor (fp32 rounding order) nothing is attributed
  anyway, and a ratio of roundings says nothing.

Unverified points stay in `points` (with the figures measured, where there are any) for the views to show apart;
`first_divergence`, the figure's line and the attribution use verified points only.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..ir import Graph
from .drift import ReferenceVectors, agreement

DEFAULT_RTOL_L2 = 1e-2  # a boundary diverges when its relative L2 error exceeds this
CONSISTENCY_FACTOR = 100.0        # two orders of magnitude above everything downstream (and the output): unverified
CONSISTENCY_NOISE_FLOOR = 1e-5    # below this rel L2 the consistency check does not apply (fp32 rounding order)

SHAPE, DTYPE, CONSISTENCY = "shape", "dtype", "consistency"
VERIFICATION = (f"a point is verified when its shape equals the reference's (size-1 axes aside), its values are "
                f"of the reference's kind (floating point vs integer), and — when its rel L2 is ≥ "
                f"{CONSISTENCY_NOISE_FLOOR:g} — it is at most {CONSISTENCY_FACTOR:g}× the largest rel L2 of the "
                f"verified points downstream of it on the same path and of the target's output drift (error "
                f"propagates: a point far above everything computed from it compares another tensor, or holds an "
                f"error no output sees)")


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
                threshold: float = DEFAULT_RTOL_L2, graph: Graph | None = None,
                output_rel_l2: float | None = None) -> dict:
    """reference/target: source op id -> numpy array (the reference may come as ReferenceVectors, shared across
    targets). `graph` (the captured graph the boundaries come from) says what is downstream of what, and
    `output_rel_l2` is the target's output drift against the same reference: both feed the consistency check
    (without a graph, every later boundary counts as downstream). Returns the points along depth, each verified or
    not, and the first divergence among the verified ones."""
    if not isinstance(reference, ReferenceVectors):
        reference = ReferenceVectors(reference)
    points = []
    for b in boundaries:
        op = b["source_op"]
        if op not in reference or op not in target:
            continue
        value = np.asarray(target[op])
        mismatch = _mapping_mismatch(reference, op, value)
        if mismatch:
            points.append({**b, "rel_l2": None, "max_abs": None, "cosine": None, "snr_db": None,
                           "verified": False, "check": mismatch[0], "unverified_reason": mismatch[1]})
            continue
        _, shape, _ = reference.get(op)
        relaid = value.shape != shape           # only size-1 axes differ (_mapping_mismatch): same element order
        m = agreement(reference, op, value.reshape(shape) if relaid else value)
        if "error" in m:
            continue
        points.append({**b, "rel_l2": m["rel_l2"], "max_abs": m["max_abs"], "cosine": m["cosine"],
                       "snr_db": m["snr_db"], "verified": True, "check": None, "unverified_reason": None,
                       **({"target_shape": list(value.shape)} if relaid else {})})
    verify_points(points, downstream_points(graph, [p["source_op"] for p in points]) if graph is not None else None,
                  output_rel_l2)
    verified = verified_points(points)
    first = next((p for p in verified if (p["rel_l2"] or 0) > threshold), None)
    return {"points": points, "threshold_rel_l2": threshold,
            "first_divergence": ({"module_path": first["module_path"], "source_op": first["source_op"],
                                  "rel_l2": first["rel_l2"]} if first else None),
            "covered": len(verified), "unverified": len(points) - len(verified), "boundaries": len(boundaries),
            "verification": {"method": VERIFICATION, "consistency_factor": CONSISTENCY_FACTOR,
                             "noise_floor_rel_l2": CONSISTENCY_NOISE_FLOOR, "output_rel_l2": output_rel_l2}}


def _mapping_mismatch(reference: ReferenceVectors, op: str, value: np.ndarray) -> tuple[str, str] | None:
    """(check, reason) when the target's value cannot be the reference's tensor at `op`: another shape, or another
    kind of value (floating point vs integer/bool)."""
    _, shape, _ = reference.get(op)
    if _without_unit_axes(value.shape) != _without_unit_axes(shape):
        return SHAPE, f"shape {list(value.shape)} where the reference's is {list(shape)}"
    ref_dtype = _reference_dtype(reference, op)
    ref_kind, kind = _kind(ref_dtype), _kind(value.dtype)
    if ref_kind != kind:
        return DTYPE, f"{kind} values ({value.dtype}) where the reference's are {ref_kind} ({ref_dtype})"
    return None


def _reference_dtype(reference: ReferenceVectors, op: str) -> np.dtype:
    # ReferenceVectors keeps the arrays as recorded next to their float64 vectors; the dtype is the recorded one's.
    return np.asarray(reference._values[op]).dtype


def _without_unit_axes(shape) -> tuple:
    return tuple(d for d in shape if d != 1)


def _kind(dtype) -> str:
    return "floating-point" if np.issubdtype(np.dtype(dtype), np.inexact) else "integer"


def downstream_points(graph: Graph, ops: list[str]) -> dict[str, "Reach"]:
    """For each of `ops` (source op ids of `graph`), the others among them that compute from its value,
    transitively, as a set-like `Reach` (`q in reach`). Ops not in the graph are left out (verify_points then takes
    every later point)."""
    index = {op: i for i, op in enumerate(dict.fromkeys(ops))}
    consumers: dict[str, list] = {}
    for n in graph.nodes:
        for t in n.inputs:
            consumers.setdefault(t.name, []).append(n)
    # Reverse execution order: a node's reach (a bit per op in `ops`) is the union of its consumers' reach and
    # bits. Graph nodes are in execution order, so every consumer comes later and is done first.
    reach: dict[str, int] = {}
    for n in reversed(graph.nodes):
        bits = 0
        for t in n.outputs:
            for c in consumers.get(t.name, []):
                bits |= reach.get(c.id, 0) | (1 << index[c.id] if c.id in index else 0)
        reach[n.id] = bits
    return {op: Reach(reach[op], index) for op in index if op in reach}


class Reach:
    """The ops downstream of one op, as a bitset over the compared ops (a set of names would cost the square of
    their number to build: 2,000 boundaries of a 20,000-op graph took seconds)."""
    __slots__ = ("bits", "index")

    def __init__(self, bits: int, index: dict[str, int]):
        self.bits, self.index = bits, index

    def __contains__(self, op) -> bool:
        i = self.index.get(op)
        return i is not None and bool(self.bits >> i & 1)

    def __iter__(self):
        return (op for op, i in self.index.items() if self.bits >> i & 1)


def verify_points(points: list[dict], downstream: dict | None, output_rel_l2: float | None) -> None:
    """The consistency check (module docstring), in place: from the deepest point up, a verified point whose rel
    L2 is ≥ CONSISTENCY_NOISE_FLOOR and more than CONSISTENCY_FACTOR × the largest of the verified points
    downstream of it and `output_rel_l2` becomes unverified. A point with nothing downstream to compare (no later
    point, no output drift) keeps its verdict. `downstream`: source op -> the points' source ops computed from it
    (a set or a Reach; None, or an op missing from it: every later point by depth)."""
    ranked: list[tuple[float, str]] = []    # deeper verified points judged so far, largest rel L2 first
    for p in sorted(points, key=lambda q: q["depth"], reverse=True):
        if p.get("verified", True) and (p.get("rel_l2") or 0) >= CONSISTENCY_NOISE_FLOOR:
            after = downstream.get(p["source_op"]) if downstream is not None else None
            # The largest downstream figure is usually among the first few in rank order.
            below = next((rel for rel, op in ranked if after is None or op in after), None)
            bound = max((b for b in (below, output_rel_l2) if b is not None), default=None)
            if bound is not None and p["rel_l2"] > CONSISTENCY_FACTOR * bound:
                p.update(verified=False, check=CONSISTENCY, unverified_reason=(
                    f"rel L2 {p['rel_l2']:.1e} is {_times(p['rel_l2'], bound)} the largest downstream of it "
                    f"({bound:.1e}, the output drift included): a value that compares another tensor, or an error "
                    f"nothing computed from it shows"))
        if p.get("verified", True):
            bisect.insort(ranked, (p.get("rel_l2") or 0.0, p["source_op"]), key=lambda r: -r[0])


def _times(value: float, bound: float) -> str:
    return f"{value / bound:,.0f}×" if bound else "infinitely above"


def verified_points(points: list[dict]) -> list[dict]:
    """The points that passed verification, in order (a report written before xc verified points: all of them)."""
    return [p for p in points if p.get("verified", True)]


def unverified_points(points: list[dict]) -> list[dict]:
    return [p for p in points if not p.get("verified", True)]


def unverified_rows(layer: dict[str, dict]) -> list[dict]:
    """One row per point left out of the figure and the attribution, for every target (`layer`: target -> its
    layer_drift block): where, the rel L2 measured there (— when the shapes or kinds differ), the check it failed
    and why."""
    return [{"target": t, "boundary": p["module_path"], "source op": p["source_op"],
             "rel L2": f"{p['rel_l2']:.2e}" if p.get("rel_l2") is not None else "—", "check": p.get("check") or "—",
             "why": p.get("unverified_reason") or "—", "evidence": ld.get("evidence")}
            for t, ld in layer.items() for p in unverified_points((ld or {}).get("points") or [])]
