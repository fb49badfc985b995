"""Per-op isolation: every op of the captured program compiled by the target on its own, fed the reference's values
at its inputs, its output compared with the reference's output there — the op's *local* error, beside the error it
carries in the full run (per-layer drift at the same op, where the target exposes it).

The ops are cut apart into one island program (culprit/regions.py), compiled and run by the target through
`execute_target`, the call every analysis uses, so the target compiles it exactly as it compiles a model: one
compile per CHUNK ops. Cutting ops apart also cuts the fusions that would join them; the local error is the op's
as the target compiles it alone.
"""
from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from ..targets.base import OK
from .metrics import compare, describe_gates, failed_gates
from .regions import Region, export_region, isolatable, region_program

CHUNK = 400     # ops per island program: one compile each; a compiler's time grows with its graph

METHOD = ("each op of the captured program cut into its own island (its inputs become graph inputs, fed the "
          "reference's values there), the islands compiled and run by the target as one program per "
          f"{CHUNK} ops through the same call as the analysis, each op's output compared with the reference's")


class RegionFailed(RuntimeError):
    """The target did not compile or run a sub-program: its own one-line error."""


def run_region(target, region: Region, values: dict, workdir: str) -> tuple[dict, object]:
    """Compile and run `region` on `target` (an instance with its options and limits set). Returns (captured value
    -> the target's array at it, the TargetResult). Raises RegionFailed with the target's error."""
    from ..capture import capture
    from ..sources.spec import InputSpec, Source
    from ..targets.execute import execute_target
    feeds = region.feeds(values)
    program = export_region(region, values)
    specs = [InputSpec(name, list(a.shape), str(a.dtype)) for name, a in feeds.items()]
    source = Source(kind="exported-program", name="region", sha256="", inputs=specs, module=region.module,
                    exported_program=program)
    captured = capture(source, os.path.join(workdir, "capture"), feeds, with_onnx=target.needs_onnx)
    if target.needs_onnx and captured.onnx_path is None:
        raise RegionFailed(captured.onnx_error or "the sub-program could not be exported to ONNX")
    result = execute_target(target, captured, feeds, os.path.join(workdir, "target"))
    if result.status != OK:
        raise RegionFailed(result.error or result.status)
    got = {}
    for name, value_name in zip(captured.output_names, region.outputs):
        if name in result.outputs:
            got[value_name] = np.asarray(result.outputs[name])
    return got, result, captured


def quiet_target(target):
    """The target as culprit search runs it: no profiled runs (the time per node is the analysis's)."""
    from ..limits import Limits
    target.limits = dataclasses.replace(target.limits or Limits.from_env(), profile_runs=0)
    return target


def isolate_ops(target, ep, values: dict, workdir: str, gates: dict, carried: dict | None = None,
                nodes_of: dict | None = None, op_info: dict | None = None) -> dict:
    """The isolation block of one target: per op, its local figures against the reference, whether it passes
    `gates`, the error it carries in the full run (`carried`: op -> rel L2 there) and the compiled nodes that
    compute it in the full run (`nodes_of`: op -> node ids); the ops that could not be isolated, and why."""
    from ..errors import first_line
    t0 = time.perf_counter()
    quiet_target(target)
    ops, why_not = isolatable(ep.graph_module, values)
    order = {n.name: i for i, n in enumerate(ep.graph.nodes)}
    owner = _owners(ep)
    rows, errors = [], []
    for start in range(0, len(ops), CHUNK):
        chunk = ops[start:start + CHUNK]
        region = region_program(ep, chunk, values, cut_every_edge=True)
        try:
            got, _, _ = run_region(target, region, values, os.path.join(workdir, f"islands_{start // CHUNK}"))
        except Exception as e:  # noqa: BLE001 — a chunk the target refuses is a finding, the others still count
            errors.append(f"ops {start + 1}–{start + len(chunk)}: {first_line(e, 300)}")
            why_not.update({op: f"its island program failed on the target: {first_line(e, 200)}" for op in chunk})
            continue
        by_op: dict[str, list] = {}
        for value_name in region.outputs:
            op = owner.get(value_name, value_name)
            if value_name not in got:
                continue
            reference = np.asarray(values[value_name].numpy() if hasattr(values[value_name], "numpy")
                                   else values[value_name])
            value = got[value_name]
            if value.shape != reference.shape and value.size == reference.size:
                value = value.reshape(reference.shape)
            try:
                by_op.setdefault(op, []).append(compare(reference, value))
            except ValueError as e:
                why_not[op] = f"the target's value is not the reference's tensor: {e}"
        for op in chunk:
            figures = by_op.get(op)
            if not figures:
                why_not.setdefault(op, "the target returned no value for it")
                continue
            worst = max(figures, key=lambda f: (f["non_finite"], f["rel_l2"] if f["rel_l2"] is not None else -1))
            info = (op_info or {}).get(op, {})
            failed = failed_gates(worst, gates)
            rows.append({"source_op": op, "op_type": info.get("op_type"), "module_path": info.get("module_path"),
                         "depth": order.get(op, 0), "local": worst, "failed_gates": failed,
                         "above_gate": bool(failed), "carried_rel_l2": (carried or {}).get(op),
                         "nodes": list((nodes_of or {}).get(op, []))})
    rows.sort(key=lambda r: r["depth"])
    return {"method": METHOD, "gates": dict(gates), "gates_text": describe_gates(gates), "ops": rows,
            "isolated": len(rows), "above_gate": [r["source_op"] for r in rows if r["above_gate"]],
            "not_isolated": [{"source_op": op, "why": why} for op, why in why_not.items()],
            "error": "; ".join(errors) or None, "seconds": round(time.perf_counter() - t0, 2)}


def _owners(ep) -> dict[str, str]:
    """getitem value -> the op whose tuple it unpacks (a value's op is itself otherwise)."""
    import operator
    return {n.name: n.args[0].name for n in ep.graph.nodes
            if n.op == "call_function" and n.target is operator.getitem}
