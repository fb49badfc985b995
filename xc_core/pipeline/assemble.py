"""Turn capture + target results into the Report dict (`build_report`; every block of figures carries its evidence
kind), and the report step's Report as written to report.json (`assemble_report`: outputs under the report's
names, step graphs beside it, artifact paths relative to the run folder, validated against the schema)."""
from __future__ import annotations

import datetime
import os
import platform
from typing import NamedTuple

from .. import __version__
from .. import evidence as ev
from ..analysis.advice import advise
from ..analysis.alignment import coverage, source_op_table
from ..analysis.checklist import checklist, route_departure
from ..analysis.common_cause import common_causes
from ..analysis.cost import cost_block
from ..analysis.compute_share import target_compute_share
from ..analysis.drift import (ROUTE_REFERENCE, ReferenceVectors, drift_details, drift_metrics, judged,
                              reference_check, worst)
from ..analysis.fusion import fusion_groups, pattern_counts
from ..analysis.fusion_catalogue import check_catalogue
from ..analysis.fusion_diff import fusion_matrix
from ..analysis.layout_audit import LAYOUT_NODES, layout_audit
from ..analysis.node_time import time_summary
from ..analysis.op_counts import op_counts, other_counts
from ..analysis.precision import precision_mix
from ..analysis.stage_trace import GraphStore, divergence_block, stage_block
from ..capture import Captured
from ..errors import kept_cause
from ..report.types import TargetInfo
from ..targets import OK, REGISTRY

SCHEMA_VERSION = "1.0"


class Against(NamedTuple):
    """What a target's outputs are compared with: the reference's id (or ROUTE_REFERENCE), its outputs, and why
    each cannot tell a right target from a wrong one (analysis/drift.py reference_check), None where it can."""
    id: str
    outputs: dict
    checks: dict


def against(identity: str, outputs: dict) -> Against:
    """`outputs` as what targets are compared with, each checked once for every target."""
    return Against(identity, outputs, {k: reference_check(v) for k, v in outputs.items()})


def build_report(source, captured, inputs_info: dict, reference, results: list, host: dict,
                 boundaries: list[dict] | None = None, stage_graphs: GraphStore | None = None,
                 lean: bool = False) -> dict:
    """The Report. `stage_graphs`, when given, is filled with every step graph by key (written beside the
    report as stages.json; the report names them by key). `lean` leaves out the optional parts that cost the
    most memory on a big model — the lowering stages and their graphs, the first divergence, per-layer drift,
    drift histograms and the layout audit — for a run whose full report could not be built; every target's
    status, graph, fusions, precision and drift are kept."""
    stage_graphs = GraphStore() if stage_graphs is None else stage_graphs
    report = {
        "schema_version": SCHEMA_VERSION,
        "xc_version": __version__,
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host,
        "source": source.to_dict(),
        "inputs": inputs_info,
        "capture": None,
        "reference": None,
        "targets": {},
    }
    if captured is not None:
        before = captured.before
        report["capture"] = {
            "before_stage": source.before_stage,
            "op_count_before": len(before.compute_nodes()),
            "op_types_before": op_counts(before),
            "onnx_node_count": len(captured.onnx_graph.compute_nodes()) if captured.onnx_graph is not None else None,
            "onnx_error": captured.onnx_error,
            "timings": {k: round(v, 4) for k, v in captured.timings.items()},
            "graph": _graph_block(before, ev.REPORTED),
            "notes": captured.notes,
            "evidence": ev.REPORTED,
        }
        if captured.weights is not None:     # none made (a Core ML or OpenVINO IR source): left out, not empty
            report["capture"]["weights"] = captured.weights
        route = _route_block(captured, results)
        if route is not None:          # an ONNX source's route to the PyTorch-side targets
            report["capture"]["onnx_route"] = route
    onnx_side = route_side = None
    if reference is not None:
        onnx_side = against(reference.target, reference.outputs)
        report["reference"] = {
            "id": reference.target, "status": reference.status,
            "error": kept_cause(reference.error, reference.error_detail, reference.traceback),
            "error_detail": reference.error_detail,
            "advice": advise(reference.target, reference.error, reference.traceback, reference.error_detail)
            if reference.status == "error" else None,
            # Each output with why it cannot tell targets apart (constant, all zeros, not finite), when it cannot.
            "outputs": {k: {"shape": list(v.shape), "dtype": str(v.dtype)}
                        | ({"not_informative": onnx_side.checks[k]} if onnx_side.checks[k] else {})
                        for k, v in reference.outputs.items()},
            "evidence": ev.MEASURED, "timings": reference.timings,
        }
        if reference.info.get("ran_with"):      # a .tflite reference that needed a delegate (targets/litert)
            report["reference"]["ran_with"] = reference.info["ran_with"]
        program = _route_program_outputs(captured)
        if program is not None and set(reference.outputs) <= set(program):
            route_side = against(ROUTE_REFERENCE, program)
    reference_values = ReferenceVectors(reference.intermediates) if reference is not None else None
    for r in results:
        report["targets"][r.target] = target_block(r, captured, reference, stage_graphs, lean,
                                                   onnx_side=onnx_side, route_side=route_side)
        _add_layer_drift(report["targets"][r.target], r, reference, reference_values, [] if lean else boundaries or [],
                         captured.before if captured is not None else None)
        _mark_shared_runtime(report["targets"][r.target], r.target, reference)
    if captured is not None:
        graphs = {r.target: r.graph for r in results if r.graph is not None}
        report["alignment"] = {
            "evidence": ev.REPORTED,
            "coverage": {tid: coverage(g) for tid, g in graphs.items()},
            "source_ops": source_op_table(captured.before, graphs),
        }
        partitioned = {r.target for r in results if r.partitioning is not None}
        matrix = fusion_matrix(captured.before, graphs, partitioned)
        matrix["evidence"] = ev.REPORTED
        report["fusion_matrix"] = matrix
        if not lean:
            report["divergence"] = divergence_block(results, captured, ev.REPORTED)
    report["checklist"] = checklist(report, (report.get("fusion_matrix") or {}).get("not_fired", []))
    # Failures with one cause in the source or xc's input handling, said once by every view (not N blames).
    report["common_causes"] = common_causes(report)
    return report


def _mark_shared_runtime(block: dict, target_id: str, reference) -> None:
    """A target run on the very runtime the reference fell back to: each of its drift figures is not informative."""
    from ..targets.litert.reference import shared_runtime_caveat
    why = shared_runtime_caveat(reference.info if reference is not None else {}, target_id)
    drift = block.get("drift") or {}
    compared = [k for k, m in (drift.get("outputs") or {}).items() if "error" not in m]
    if not why or not compared:
        return
    for k in compared:
        drift["outputs"][k]["not_informative"] = why
    drift["informative"] = False
    drift["not_informative"] = {**(drift.get("not_informative") or {}), **{k: why for k in compared}}
    if drift.get("worst"):
        drift["worst"]["not_informative"] = why


def _configured(identity: str):
    """The target as configured (its options read back from its identity), or None for one no longer registered
    (a plug-in)."""
    from ..errors import XcInputError
    from ..targets import make_target
    try:
        return make_target(identity)
    except XcInputError:
        return None


def target_block(r, captured, reference, stage_graphs: GraphStore | None = None, lean: bool = False, *,
                 onnx_side: Against | None = None, route_side: Against | None = None) -> dict:
    """A target's block. Its drift is against the reference (`onnx_side`, made from `reference` when not given),
    or, for a target that compiled the program xc's ONNX → PyTorch route made, against that program's own outputs
    (`route_side`): the compiler's drift, apart from the conversion's."""
    tid = r.target.split("[", 1)[0]
    cls = REGISTRY.get(tid)
    configured = _configured(r.target)
    block = {
        "id": tid,
        "identity": r.target,
        "label": configured.display_label if configured else getattr(cls, "label", tid),
        "description": getattr(cls, "description", ""),
        "status": r.status,
        # Whether an op can leave the CPU on this target, and for what: the Fallbacks page and the checklist's
        # CPU-fallback question read these, whichever toolchain decided the split.
        "accelerated": bool(configured and configured.accelerated),
        "accelerator": configured.accelerator if configured else None,
        "declared_precisions": list(r.declared_precisions),
        # A message that names a pass without its reason gets the reason's first line (from the chained exception).
        "error": kept_cause(r.error, r.error_detail, r.traceback),
        "error_detail": r.error_detail,
        "error_stage": r.error_stage,
        "evidence": dict(r.evidence),
        "op_count_before": None,
        "op_count_after": None,
        "op_counts": None,
        "fusions": None,
        "precision": None,
        "graph": None,
        "drift": None,
        "info": _info(r),
        "notes": list(r.notes),
        # The time per compiled node (each graph node's measured_us): how, on which CPU, over how many runs.
        "node_times": r.node_times,
        "timings": dict(r.timings),
        "artifacts": list(r.artifacts),
    }
    if r.status == "error" and r.traceback:
        block["traceback"] = r.traceback
    if r.status == "error":
        block["advice"] = advise(tid, block["error"], r.traceback, r.error_detail)
    # What running it cost on this host: memory, size on disk, compile / load / inference time (analysis/cost.py).
    block["cost"] = cost_block(r)
    if r.graph is not None and captured is not None:
        g = r.graph
        before = captured.before
        fusion_ev = r.evidence.get("fusion", r.evidence.get("assignment", ev.REPORTED))
        block["op_count_before"] = len(before.compute_nodes())
        block["op_count_after"] = len(g.compute_nodes())
        block["op_counts"] = {"before": op_counts(before), "after": op_counts(g), "other_after": other_counts(g),
                              "evidence": fusion_ev}
        groups = fusion_groups(g, input_graph_for(r, captured))
        block["fusions"] = {"groups": groups, "patterns": pattern_counts(groups), "count": len(groups),
                            "evidence": fusion_ev}
        catalogue = configured.fusion_catalogue if configured else None
        if catalogue:
            block["fusions"]["catalogue"] = check_catalogue(g, input_graph_for(r, captured), catalogue)
        block["precision"] = {"mix": precision_mix(g), "evidence": r.evidence.get("precision", ev.REPORTED)}
        block["graph"] = _graph_block(g, r.evidence.get("assignment", ev.REPORTED))
        if r.node_times:
            block["node_times"] = {**r.node_times, **time_summary(block["graph"]["nodes"])}
        # The accelerated share by op count, by MACs and by time (analysis/compute_share.py); None when CPU-only.
        block["compute_share"] = target_compute_share(block, captured)
        if not lean:
            block["stages"] = stage_block(r, captured, {"steps": fusion_ev,
                                                        "assignment": r.evidence.get("assignment", ev.REPORTED)},
                                          GraphStore() if stage_graphs is None else stage_graphs)
            block["layout"] = {**layout_audit(g, getattr(cls, "layout_moves", LAYOUT_NODES)),
                               "evidence": r.evidence.get("assignment", ev.REPORTED)}
    if r.outputs:
        block["outputs"] = {"evidence": r.evidence.get("numerics", ev.MEASURED),
                            "values": {k: _summary(v) for k, v in r.outputs.items()}}
    if r.status == OK and reference is not None and reference.status == OK and r.outputs:
        side = route_side if route_side is not None and "onnx_conversion" in r.info else \
            onnx_side or against(reference.target, reference.outputs)
        outs = {}
        for name in reference.outputs:      # the reference's outputs, in its order, whatever they are compared with
            ref = side.outputs[name]
            if name in r.outputs:
                outs[name] = drift_metrics(ref, r.outputs[name])
                if "error" not in outs[name] and not lean:
                    outs[name]["details"] = drift_details(ref, r.outputs[name])
            else:
                outs[name] = {"error": f"the target produced no output '{name}' (it has {sorted(r.outputs)})"}
        checked = judged(outs, side.checks)      # before `worst`, which reads the outputs' reasons
        block["drift"] = {"reference": side.id, "outputs": outs, **checked, "worst": worst(outs),
                          "evidence": r.evidence.get("numerics", ev.MEASURED),
                          "assumption": r.numerics_assumption}
        skipped = r.info.get("outputs_not_compared") or {}
        if skipped:
            block["drift"]["not_compared"] = skipped
    elif r.status == OK and r.numerics_failed:
        # xc could not emulate this target's numbers: say so where the numbers would be, as xc's failure.
        block["drift"] = {"reference": reference.target if reference is not None else None, "outputs": {},
                          "worst": None, "evidence": r.evidence.get("numerics", ev.EMULATED),
                          "assumption": None, "failed": r.numerics_failed["why"]}
    return block


def _info(r) -> dict:
    """A target's `info`: its toolchain's free facts, then the typed facts TargetInfo names (report/types.py), each
    under TargetInfo's key where the result has it."""
    info = dict(r.info)
    for key, attr in TargetInfo.result_fields().items():
        value = getattr(r, attr)
        if isinstance(value, (list, tuple)):
            if value:           # an empty list (nothing found wrong) is not written
                info[key] = list(value)
        elif value is not None:
            info[key] = value
    return info


def _route_block(captured, results: list) -> dict | None:
    """An ONNX source's ONNX → PyTorch route, once for the report: what was done to the graph, the conversion's
    own drift against ONNX Runtime (measured), or the line that stopped it; and which targets compiled it."""
    route = captured.onnx_route
    if not route:
        return None
    block = {k: route[k] for k in ("route", "preprocessing", "conversion_drift", "first_departure", "float_model",
                                   "program_inputs", "program_nodes", "seconds", "error", "skipped") if k in route}
    block["targets"] = [r.target for r in results if "onnx_conversion" in r.info
                        or (r.error or "").startswith("no PyTorch program from the ONNX")
                        or (route.get("skipped") and r.info.get("skipped_above_size") == route["skipped"])]
    # Where the conversion departs from ONNX Runtime, by the route's own test (None: it does not): said first,
    # once, by every view, as xc's error — never a target's.
    block["departure"] = route_departure(block)
    block["evidence"] = ev.MEASURED
    return block


def _route_program_outputs(captured) -> dict | None:
    """The outputs of the program xc's ONNX → PyTorch route made, at the analysis inputs (written by the route,
    keyed by ONNX output name), under the names the report shows; None when there are none to read (no route, a
    route from before they were written, or a file that cannot be read — drift then stays against the
    reference)."""
    import zipfile

    import numpy as np
    path = ((captured.onnx_route or {}) if captured is not None else {}).get("program_outputs_path")
    if not path or not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            values = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile):
        return None
    labels = captured.output_label_map()
    return {labels.get(k, k): v for k, v in values.items()}


def _add_layer_drift(block: dict, r, reference, reference_values, boundaries: list[dict], before=None) -> None:
    from ..analysis.drift_attribution import drift_attribution
    from ..analysis.layer_drift import layer_drift
    mine = r.intermediates
    if reference is None or not reference.intermediates or not mine:
        block["layer_drift"] = None
        return
    # The points are verified against what is downstream of them and against the output drift (layer_drift.py):
    # the output drift only when it is measured against the same reference as the points (not a route program's).
    drift = block.get("drift") or {}
    same_reference = drift.get("reference") == reference.target
    output_rel_l2 = max((m["rel_l2"] for m in (drift.get("outputs") or {}).values()
                         if "error" not in m and m.get("rel_l2") is not None), default=None) if same_reference else None
    ld = layer_drift(reference_values, mine, boundaries, graph=before, output_rel_l2=output_rel_l2)
    ld["method"] = r.intermediates_method
    ld["reference_method"] = reference.intermediates_method
    ld["evidence"] = r.evidence.get("numerics", ev.MEASURED)
    block["layer_drift"] = ld
    # The captured graph in execution order, which the boundaries' depths index; the attribution checks that before
    # it names any op.
    ld["attribution"] = drift_attribution(block, before if before is not None else reference.graph)


def _summary(a) -> dict:
    import numpy as np
    a = np.asarray(a)
    f = a.astype(np.float64) if a.size else np.zeros(1)
    finite = bool(np.isfinite(f).all())
    return {"shape": list(a.shape), "dtype": str(a.dtype), "finite": finite,
            "min": float(np.nanmin(f)) if finite else None, "max": float(np.nanmax(f)) if finite else None,
            "mean": float(np.mean(f)) if finite else None, "std": float(np.std(f)) if finite else None}


def input_graph_for(r, captured):
    """The graph a target's compiler was given: what `fused_from` ids refer to."""
    return r.input_graph or captured.onnx_graph


def _graph_block(g, evidence: str) -> dict:
    d = g.to_dict()
    d["evidence"] = evidence
    return d


def host_info() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    versions = {}
    # Installed distribution versions, read without importing (coremltools prints warnings on import).
    for dist in ("torch", "onnx", "onnxruntime", "openvino", "coremltools", "numpy"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    return {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "versions": versions}


# ------------------------------------------------------------------------------------------ the report step ----
def assemble_report(captured: Captured, inputs_info: dict, reference, results: list, run_info: dict,
                    artifacts_dir: str | None, run_dir: str | None = None, lean: bool = False) -> dict:
    """The Report from the captured model and every target's result, validated against the schema.

    Artifact paths are relative to the run folder (where report.json is written): a report then reads the same
    wherever the run was made, diffs cleanly, and its files resolve from the run store or a copied folder.
    `lean` leaves out the optional parts (see LEFT_OUT_WHEN_LEAN): the report of a run whose full report could
    not be built."""
    from ..analysis.layer_drift import module_boundaries
    for r in ([reference] if reference is not None else []) + list(results):
        label_outputs(r, captured.output_label_map())
    from ..analysis.stage_trace import STAGES_FILE
    from ..report.schema import validate_built_report
    stage_graphs = GraphStore()
    report = build_report(captured.source, captured, inputs_info, reference, results, host_info(),
                          module_boundaries(captured.before), stage_graphs, lean=lean)
    report["run"] = run_info
    report["artifacts_dir"] = artifacts_dir
    # Step graphs go beside report.json, once each; without a kept run folder they are not kept.
    report["stage_graphs"] = {"file": None, "count": len(stage_graphs)}
    if run_dir and artifacts_dir and len(stage_graphs):
        stage_graphs.write(os.path.join(run_dir, STAGES_FILE))
        report["stage_graphs"]["file"] = STAGES_FILE
    if run_dir:
        for block in report["targets"].values():
            block["artifacts"] = [_relative(p, run_dir) for p in block.get("artifacts") or []]
    from ..inputs.dataset import block as dataset_block, read as read_dataset
    dataset = read_dataset(run_dir) if run_dir else None
    if dataset is not None:     # --data (or a sample's own): the `dataset` block and each target's accuracy
        from ..analysis.accuracy import add_accuracy
        add_accuracy(report, reference, results, captured, dataset, dataset_block(dataset))
    validate_built_report(report)
    return report


def _relative(path: str, run_dir: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), run_dir)
    return path if rel.startswith("..") else rel.replace(os.sep, "/")


# What a lean report leaves out (build_report, lean=True), in words for run.report_error.
LEFT_OUT_WHEN_LEAN = ["the lowering stages and their step graphs",
                      "where the targets first part ways", "per-layer drift", "drift histograms and scatter",
                      "the layout audit"]


def label_outputs(result, labels: dict[str, str]) -> None:
    """Every output under the name the report shows (the model's own key, or 'output <i>'), once all targets
    compare under one name."""
    if not labels:
        return
    result.outputs = {labels.get(k, k): v for k, v in (result.outputs or {}).items()}
    for key in ("outputs_not_compared",):
        if isinstance(result.info.get(key), dict):
            result.info[key] = {labels.get(k, k): v for k, v in result.info[key].items()}
