"""The accelerated share of an accelerated target weighed three ways (the report's `targets[id].compute_share`):

- **by_ops**: compiled ops on the accelerator out of the compiled graph's compute ops — the count every view shows
  ("32 of 36 compiled ops (89%)", views/target_counts.split_counts; the rule is repeated in `placement` below, and
  tests/test_compute_share.py checks the two agree);
- **by_macs**: the captured graph's source ops weighted by their MACs (analysis/compute_weight.py). A source op is on
  the accelerator when the compiled nodes that carry it (their `source_ops`) are, on the CPU when any of them is
  (alignment.py's rule: a fallback anywhere is a fallback), and unplaced when none says a device;
- **by_time**: the compiled nodes' time per backend — measured by the runtime's profiler (`measured_us`, evidence
  measured), or the compiler's estimate for a device nothing here runs (Vela's `estimated_us`, evidence
  estimated-compiler) — where the target has one.

`heaviest_fallbacks` ranks what is off the accelerator by MACs, then by time: the one CPU op a count hides.
A CPU-only target has no block: nothing to accelerate.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import evidence as ev
from .compute_weight import graph_macs, run_dims_of

NO_DEVICE = (None, "unknown")
ACCELERATOR, CPU = "accelerator", "cpu"
TOP_FALLBACKS = 10
NOT_OPS = ("constant", "io")

METHOD = ("by_ops: compiled compute ops on the accelerator (xc's placement, as every view counts them); by_macs: "
          "source ops weighted by multiply-accumulates from their shapes at the run's input shapes (conv, matmul, "
          "attention as torch.utils.flop_counter counts them; one op per element for element-wise ops, two for "
          "normalisation; none for shape-only ops), placed where the compiled nodes that carry them run; by_time: "
          "compiled nodes' time by backend. covered: the share of ops whose weight (MACs, time) is known")


def placement(node: Mapping) -> str | None:
    """Where a compiled node runs, as target_counts.split_counts counts it: on the CPU when the target marks it a
    fallback or its backend is the CPU, nowhere known without a backend, else on the accelerator."""
    if node.get("fallback") or node.get("backend") == "cpu":
        return CPU
    if node.get("backend") in NO_DEVICE:
        return None
    return ACCELERATOR


def _figure(accelerated: float, total: float, unit: str, evidence: str | None, covered: float | None) -> dict:
    return {"accelerated": round(accelerated, 3), "total": round(total, 3),
            "share": round(accelerated / total, 6) if total else None, "unit": unit, "evidence": evidence,
            "covered": None if covered is None else round(covered, 4)}


def _time_us(node: Mapping) -> float | None:
    return node.get("measured_us") if node.get("measured_us") is not None else node.get("estimated_us")


def compute_share(block: Mapping, source_nodes: Sequence[Mapping], run_dims: Mapping[str, int]) -> dict | None:
    """The `compute_share` block of an accelerated target's report block (`block`, its compiled graph's nodes as
    dicts), from the captured graph's nodes (`source_nodes`) and the run's symbolic dims; None for a target with no
    accelerator or no compiled graph."""
    graph = block.get("graph") or {}
    if not block.get("accelerated") or not graph.get("nodes"):
        return None
    assignment = (block.get("evidence") or {}).get("assignment") or graph.get("evidence")
    nodes = graph["nodes"]
    compute = [n for n in nodes if n.get("kind") == "compute"]

    # by op count: the compiled compute ops
    places = [placement(n) for n in compute]
    by_ops = _figure(places.count(ACCELERATOR), len(compute), "ops", assignment, 1.0 if compute else None)

    # by MACs: each source op where its carriers run
    carriers: dict[str, list[Mapping]] = {}
    for n in nodes:
        if n.get("kind") in NOT_OPS:
            continue
        for s in n.get("source_ops") or ():
            carriers.setdefault(s, []).append(n)
    source_compute = [n for n in source_nodes if n.get("kind", "compute") == "compute"]
    macs = graph_macs(source_compute, run_dims)
    on_acc = total = 0
    known = 0
    off: list[dict] = []
    for op in source_compute:
        weight = macs.get(op["id"])
        where = _source_placement(carriers.get(op["id"], ()))
        if weight is not None and (weight == 0 or where is not None):
            known += 1      # a shape-only op weighs nothing wherever it runs
        if weight and where == ACCELERATOR:
            on_acc += weight
            total += weight
        elif where == CPU:
            total += weight or 0
            # On the CPU: ranked by its MACs, and by its carriers' time (a 0-MAC gather can still cost time).
            cpu_nodes = [c for c in carriers[op["id"]] if placement(c) == CPU]
            times = _times(cpu_nodes)
            if weight == 0 and not times:
                continue
            off.append({"source_op": op["id"], "op_type": op.get("op_type"), "module_path": op.get("module_path"),
                        "macs": weight, "nodes": [c["id"] for c in cpu_nodes],
                        "time_us": round(sum(times), 3) if times else None})
    by_macs = _figure(on_acc, total, "MACs", assignment, known / len(source_compute) if source_compute else None)

    # by time: compiled nodes that ran (or that a compiler estimated), by where they run
    # Only where the target profiled its nodes (its `node_times` block says how): an emulating target's CPU run
    # times no accelerator.
    time_evidence = (block.get("node_times") or {}).get("evidence")
    timed = [(n, placement(n)) for n in nodes if n.get("kind") not in NOT_OPS and _time_us(n) is not None] \
        if block.get("node_times") else []
    by_time = None
    placed = [(n, p) for n, p in timed if p is not None]
    # A share of time needs both sides timed: ORT's mobile EPs time only the nodes left on the CPU EP here.
    if any(p == ACCELERATOR for _, p in placed):
        time_total = sum(_time_us(n) for n, _ in placed)
        time_on_acc = sum(_time_us(n) for n, p in placed if p == ACCELERATOR)
        timed_compute = sum(1 for n in compute if _time_us(n) is not None)
        estimated = any(n.get("measured_us") is None for n, _ in timed)
        by_time = _figure(time_on_acc, time_total, "µs",
                          time_evidence or (ev.ESTIMATED_COMPILER if estimated else ev.MEASURED),
                          timed_compute / len(compute) if compute else None)
    # CPU nodes that carry no source op (a layout copy the partitioner inserted) cost time, not MACs.
    for n, p in placed:
        if p == CPU and not n.get("source_ops"):
            off.append({"source_op": None, "op_type": n.get("op_type"), "module_path": n.get("module_path"),
                        "macs": None, "nodes": [n["id"]], "time_us": round(_time_us(n), 3)})
    for f in off:
        f["time_share"] = (round(f["time_us"] / by_time["total"], 6)
                           if by_time and by_time["total"] and f["time_us"] is not None else None)
    for f in off:
        f["macs_share"] = round(f["macs"] / total, 6) if f["macs"] is not None and total else None
    off.sort(key=lambda f: (-(f["macs"] or 0), -(f["time_us"] or 0), f["source_op"] or "", f["nodes"]))
    return {"by_ops": by_ops, "by_macs": by_macs, "by_time": by_time, "heaviest_fallbacks": off[:TOP_FALLBACKS],
            "method": METHOD}


def _times(nodes: Sequence[Mapping]) -> list[float]:
    return [_time_us(n) for n in nodes if _time_us(n) is not None]


def _source_placement(carriers: Sequence[Mapping]) -> str | None:
    places = {placement(c) for c in carriers}
    if CPU in places:
        return CPU
    if ACCELERATOR in places:
        return ACCELERATOR
    return None


def share_words(share: Mapping | None) -> str:
    """The weighted shares in words, beside a count: "99.2% of MACs, 71% of measured time" ("" when neither is
    known). MACs are said where their weights cover the graph; time where the target timed its nodes."""
    if not share:
        return ""
    parts = []
    macs = share.get("by_macs") or {}
    if macs.get("share") is not None:
        covered = macs.get("covered")
        parts.append(f"{_pct(macs['share'])} of MACs"
                     + (f" (MACs known for {_pct(covered)} of source ops)" if covered is not None and covered < 0.995 else ""))
    time = share.get("by_time") or {}
    if time.get("share") is not None:
        kind = "estimated" if time.get("evidence") == ev.ESTIMATED_COMPILER else "measured"
        parts.append(f"{_pct(time['share'])} of {kind} time")
    return ", ".join(parts)


def share_sentence(share: Mapping | None) -> str:
    """The count with the weighted shares beside it: "32 of 36 compiled ops (89%), >99.9% of MACs, 99.2% of measured
    time" ("" for a target without the block)."""
    if not share or not share.get("by_ops"):
        return ""
    ops = share["by_ops"]
    count = f"{ops['accelerated']:g} of {ops['total']:g} compiled ops"
    if ops.get("share") is not None:
        count += f" ({_pct(ops['share'])})"
    weighted = share_words(share)
    return count + (f", {weighted}" if weighted else "")


def _pct(x: float) -> str:
    """71%, 99.2%, >99.9%: a decimal near 0% and 100%, where a whole percent would hide that some is left."""
    p = 100 * x
    if 99.95 <= p < 100:
        return ">99.9%"
    if 0 < p < 0.05:
        return "<0.1%"
    if p > 99 and p != 100 or 0 < p < 1:
        return f"{p:.1f}%"
    return f"{p:.0f}%"


def weighted_share(share: Mapping | None) -> tuple[float, str] | None:
    """The share a verdict is judged on, with what it is: measured (or estimated) time where the target timed most
    of its ops, else MACs where the weights cover most of the source ops; None when neither does."""
    if not share:
        return None
    time = share.get("by_time") or {}
    if time.get("share") is not None and (time.get("covered") or 0) >= COVERED_ENOUGH:
        return time["share"], "time"
    macs = share.get("by_macs") or {}
    if macs.get("share") is not None and (macs.get("covered") or 0) >= COVERED_ENOUGH:
        return macs["share"], "MACs"
    return None


# A weight that covers fewer ops than this leaves too much unweighed for a verdict to rest on it.
COVERED_ENOUGH = 0.8


def target_compute_share(block: Mapping, captured) -> dict | None:
    """`compute_share` for a target block being assembled (pipeline/assemble.py): the captured graph's ops weighed
    at the shapes the run used (the source's resolved inputs). None for a CPU-only target or one without a graph."""
    if not block.get("accelerated") or not (block.get("graph") or {}).get("nodes") or captured is None:
        return None
    # Weighed once per run: every accelerated target reads the same captured graph.
    cached = captured.derived.get("compute_share_source")
    if cached is None:
        before = captured.before
        run_inputs = [i.to_dict() for i in captured.source.inputs]
        nodes = [n.to_dict() for n in before.nodes]
        if captured.source.kind == "onnx":      # the captured graph is the ONNX itself
            _onnx_run_shapes(nodes, captured.source.onnx_model or captured.onnx_path, run_inputs)
        cached = captured.derived["compute_share_source"] = (
            nodes, run_dims_of([t.to_dict() for t in before.inputs], run_inputs))
    return compute_share(block, *cached)


def _onnx_run_shapes(nodes: list[dict], model, run_inputs: list[dict]) -> None:   # model: ModelProto or path
    """An ONNX source's tensors at the shapes the run used: ONNX's shape inference leaves a dim it cannot name
    ("unk__0", after a Conv of a symbolic height) that the run's input names cannot fix, so the graph is inferred
    again with its inputs fixed to the shapes that ran (a copy; the source is left as it is). A model ONNX's
    inference refuses keeps the shapes it had."""
    import onnx
    shaped = {i["name"]: i["shape"] for i in run_inputs if i.get("shape")}
    try:
        fixed = onnx.ModelProto()
        if isinstance(model, str):      # the capture's copy: the graph only, its weights' shapes are in it
            fixed = onnx.load(model, load_external_data=False)
        elif model is not None:
            fixed.CopyFrom(model)
        else:
            return
        for value in fixed.graph.input:
            if value.name in shaped and value.type.HasField("tensor_type"):
                dims = value.type.tensor_type.shape.dim
                if len(dims) == len(shaped[value.name]):
                    for d, n in zip(dims, shaped[value.name]):
                        d.Clear()
                        d.dim_value = int(n)
        inferred = onnx.shape_inference.infer_shapes(fixed)
    except Exception:  # noqa: BLE001 — shape inference is a refinement: the graph's own shapes stay
        return
    known = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
            if all(d is not None for d in dims):
                known[value.name] = dims
    for n in nodes:
        for t in [*n["inputs"], *n["outputs"]]:
            if t["name"] in known:
                t["shape"] = known[t["name"]]
