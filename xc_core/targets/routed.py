"""A target that compiles PyTorch programs, given an ONNX source: it compiles the program xc's ONNX → PyTorch
route made once for the run (xc_core/onnx_route), and its result is said in the ONNX model's own nodes.

The target runs on a view of the capture in which the program is the captured ExportedProgram and its graph the
"before" graph — exactly what the target sees for a PyTorch source, so its own provenance (`from_node` chains,
debug handles, Inductor's node mappings) works unchanged. Afterwards every `source_ops` id, intermediate value
and probe is translated from the program's node names to the ONNX node each came from (the route's `origin`).

Its outputs are compared with the program's own outputs at the analysis inputs (the route writes them beside the
program; pipeline/assemble.py reads them): what the target adds is the compiler's drift, and the conversion's own
drift against ONNX Runtime is the route's, said once for the run — never the target's.
"""
from __future__ import annotations

import dataclasses

from ..ir import Graph
from .base import ERROR, UNAVAILABLE, TargetResult, check_result

ROUTE_KEYS = ("route", "preprocessing", "conversion_drift", "float_model", "program_nodes", "program_inputs",
              "seconds", "evidence")


def through_route(target, captured, inputs: dict, workdir: str, execute, **kwargs) -> TargetResult:
    """`execute(target, view, inputs, workdir, probes=…, **kwargs)` on the route's program; the result in the
    ONNX model's names."""
    route = captured.onnx_route
    ok, why = target.available()
    if ok and route is not None and route.get("skipped"):      # the ONNX is above --max-program-nodes
        result = TargetResult(target=target.identity, evidence=dict(target.evidence), status=UNAVAILABLE,
                              error=route["skipped"]["why"])
        result.info["skipped_above_size"] = route["skipped"]
        return result
    if ok and (route is None or route.get("error")):
        result = TargetResult(target=target.identity, evidence=dict(target.evidence))
        result.status, result.error_stage = ERROR, "capture"
        result.error = ("no PyTorch program from the ONNX: " + route["error"]) if route else \
            "no PyTorch program from the ONNX: the ONNX → PyTorch route did not run for this analysis"
        return result
    view, origin = program_view(captured, route) if ok else (captured, {})
    probes = kwargs.pop("probes", None) or []
    last = {}
    for name, onnx_id in origin.items():       # program order: the last node of an ONNX node carries its output
        last[onnx_id] = name
    result = execute(target, view, inputs, workdir, probes=[last[p] for p in probes if p in last], **kwargs)
    if not ok:
        return result
    _translate(result, origin, view.before)
    result.info["onnx_conversion"] = {k: route[k] for k in ROUTE_KEYS if k in route}
    result.contract = check_result(result, captured)
    return result


def program_view(captured, route: dict):
    """The capture as a target that compiles PyTorch programs sees it: the route's program is the captured
    ExportedProgram, its graph (each node with the module path and source of its ONNX node) the "before" graph.
    Returns (view, {program node: ONNX node})."""
    from ..readers.exported_program import exported_program_graph
    from ..sources.pt2_archive import load_pt2
    from ..limits import Limits
    program, _ = load_pt2(route["program_path"], Limits.from_env())
    origin = route.get("origin") or {}
    before = exported_program_graph(program, captured.source.name)
    index = captured.before.by_id()
    for n in before.nodes:
        src = index.get(origin.get(n.id))
        if src is not None:
            n.module_path, n.source_location = src.module_path, src.source_location
    source = captured.source
    if route.get("program_inputs") is not None:     # inputs the program does not read are not fed to it
        source = dataclasses.replace(source, inputs=[s for s in source.inputs if s.name in route["program_inputs"]])
    view = dataclasses.replace(captured, source=source, before=before, exported_program=program,
                               exported_program_file=None, derived={}, routed=True)
    return view, origin


def _translate(result: TargetResult, origin: dict, program_graph: Graph) -> None:
    for step in result.stages:
        if step.graph is program_graph:        # the step that shows what the toolchain imported: the program
            step.name = "the program xc's ONNX → PyTorch route made of the ONNX (onnx2torch, torch.export)"
    graphs = [result.graph, result.input_graph] + [s.graph for s in result.stages if getattr(s, "graph", None)]
    done = set()
    for g in graphs:
        if not isinstance(g, Graph) or id(g) in done:
            continue
        done.add(id(g))
        for n in g.nodes:
            if n.source_ops:
                n.source_ops = list(dict.fromkeys(origin[s] for s in n.source_ops if s in origin))
    if result.intermediates:
        result.intermediates = {origin[k]: v for k, v in result.intermediates.items() if k in origin}
