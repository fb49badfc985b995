"""The steps of an analysis (pipeline/plan.py's PLAN) as functions of files in a run folder, and the worker entry
of each (`*_job`): prepare (load, inputs, capture), an ONNX source's ONNX → PyTorch route, one target, the report.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields

from ..capture import Captured, capture
from ..inputs import values as inputs_mod
from ..limits import Limits
from ..sources.spec import Source
from .assemble import LEFT_OUT_WHEN_LEAN, assemble_report
from .plan import CAPTURE_DIR, EXPORTED, INPUTS_FILE
from .run_folder import captured_summary, read_feeds, save_captured, save_route, with_live_source


@dataclass
class Prepared:
    """What `prepare` hands on to the targets and the report. The plain fields cross from the prepare worker to
    the parent as JSON (`to_dict` / `from_dict`); `captured` and `feeds` exist only in the process that prepared
    (the in-process path runs its targets on them)."""
    inputs_info: dict
    reference_id: str | None          # "torch" for a PyTorch source, "onnx-reference" for ONNX, None otherwise
    capture_seconds: float
    source_name: str
    output_names: list[str]
    onnx_error: str | None = None     # why a PyTorch source has no ONNX (its ONNX targets fail with it)
    source_kind: str | None = None
    captured: Captured | None = field(default=None, repr=False, compare=False)
    feeds: dict | None = field(default=None, repr=False, compare=False)
    dataset: object = field(default=None, repr=False, compare=False)    # inputs/dataset.Dataset (--data)

    _LIVE = ("captured", "feeds", "dataset")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self._LIVE}

    @classmethod
    def from_dict(cls, data: dict) -> "Prepared":
        return cls(**{f.name: data.get(f.name) for f in fields(cls) if f.name not in cls._LIVE})


# ------------------------------------------------------------------------------------------------- prepare ----
def prepare(src: Source, run_dir: str, *, shapes=None, dims=None, values=None, ranges=None, user_arrays=None,
            loader_shapes=None, inputs_npz: str | None = None, limits: Limits, phase=lambda s: None,
            exported=None, dataset: dict | None = None) -> Prepared:
    """Resolve the inputs, capture, and write both into run_dir. Returns what the targets and the report need,
    with the live captured model and input values for a caller in this process.

    With `exported`, a PyTorch source's ExportedProgram is written to run_dir as soon as torch.export has
    finished, with a captured.json that has no ONNX yet, and `exported(prepared)` is called with what is known
    at that point (no ONNX yet): targets that compile from the ExportedProgram start while the ONNX export runs.
    The final captured.json replaces that one when capture ends. `dataset` (--data: path, preprocess, task, metric,
    top_k) is loaded against the resolved inputs and written beside them (inputs/dataset.py)."""
    from ..inputs.probe import reference_probe
    from ..inputs.shapes import resolve_inputs
    phase("inputs")
    ts_given = set(loader_shapes or {}) if src.kind == "torchscript" else set()
    specs, resolution = resolve_inputs(
        src.inputs, shapes={k: v for k, v in (shapes or {}).items() if k not in ts_given}, dims=dims,
        values=values, ranges=ranges, arrays=user_arrays, probe=reference_probe(src, limits),
        dim_bounds=src.dim_bounds, value_hints=src.value_hints)
    src.inputs = specs
    inputs_mod.check_input_size(src.inputs, limits)
    feeds = inputs_mod.check_npz(user_arrays, src.inputs) if user_arrays is not None else \
        inputs_mod.random_inputs(src.inputs)
    inputs_info = {"origin": "npz" if user_arrays is not None else "seeded-random", "seed": inputs_mod.SEED,
                   "distribution": "float: standard normal; int: uniform in each input's [low, high)",
                   "resolution": resolution}
    if inputs_npz:
        inputs_info["file"] = os.path.basename(inputs_npz)
    os.makedirs(run_dir, exist_ok=True)
    import numpy as np
    np.savez(os.path.join(run_dir, INPUTS_FILE), **feeds)
    from ..inputs import dataset as dataset_mod
    loaded = dataset_mod.prepare(dataset, src, feeds, limits, run_dir)    # before capture: early targets read it

    phase("capture")
    t0 = time.perf_counter()
    handed_on = []

    def hand_on(partial: Captured) -> None:
        save_captured(partial, os.path.join(run_dir, CAPTURE_DIR))
        handed_on.append(True)
        exported(Prepared(inputs_info, "torch", time.perf_counter() - t0, src.name, list(partial.output_names)))
    captured = capture(src, os.path.join(run_dir, "artifacts", CAPTURE_DIR), feeds,
                       exported=hand_on if exported is not None else None)
    capture_seconds = time.perf_counter() - t0
    save_captured(captured, os.path.join(run_dir, CAPTURE_DIR), save_program=not handed_on)
    reference_id = ("torch" if src.module is not None else "onnx-reference" if captured.onnx_path else
                    "tflite-reference" if captured.tflite_path else None)
    return Prepared(inputs_info, reference_id, capture_seconds, src.name, list(captured.output_names),
                    captured.onnx_error, source_kind=src.kind, captured=captured, feeds=feeds, dataset=loaded)


def prepare_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: load the source from its spec, then `prepare`."""
    from ..sources import load_source
    limits = Limits(**args["limits"])
    user_arrays = inputs_mod.read_npz(args["inputs_npz"], limits) if args.get("inputs_npz") else None
    phase("load")
    src = load_source(args["spec"], _shapes(args.get("loader_shapes")), limits)
    try:
        out = prepare(src, args["run_dir"], shapes=_shapes(args.get("shapes")), dims=args.get("dims"),
                      values=args.get("values"), ranges=_ranges(args.get("ranges")), user_arrays=user_arrays,
                      loader_shapes=_shapes(args.get("loader_shapes")), inputs_npz=args.get("inputs_npz"),
                      limits=limits, phase=phase, exported=lambda early: phase(EXPORTED, early.to_dict()),
                      dataset=args.get("dataset"))
    finally:
        src.close()
    return out.to_dict()


# ---------------------------------------------------------------------------------------------- onnx route ----
def run_route(captured: Captured, feeds: dict, run_dir: str, limits: Limits | None = None) -> dict:
    """An ONNX source's ONNX → PyTorch route (xc_core.onnx_route): the program beside the captured ONNX, the
    record in capture/onnx_route.json and on `captured`. Never raises: a failure is the record's `error`. An ONNX
    above --max-program-nodes is not converted: every target that would compile the program skips it, and the
    record's `skipped` says why."""
    from ..onnx_route import ROUTE, build
    from ..targets.base import program_too_big
    nodes = sum(n.kind == "compute" for n in captured.onnx_graph.nodes) if captured.onnx_graph is not None else 0
    skipped = program_too_big(nodes, (limits or Limits.from_env()).max_program_nodes, "the ONNX model")
    if skipped:
        record = {"route": ROUTE, "evidence": "measured", "skipped": skipped, "seconds": 0.0}
    else:
        record = build(captured.onnx_path, captured.source.inputs, feeds,
                       os.path.join(run_dir, "artifacts", CAPTURE_DIR))
    save_route(record, run_dir)
    captured.onnx_route = record
    return record


def route_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: the route, from the run folder prepare wrote."""
    phase("convert")
    limits = Limits(**args["limits"]) if args.get("limits") else None
    record = run_route(captured_summary(args["run_dir"]), read_feeds(args["run_dir"]), args["run_dir"], limits)
    return {"error": record.get("error")}


# -------------------------------------------------------------------------------------------------- target ----
def run_target(target, captured: Captured, feeds: dict, run_dir: str, probes: list[str], on_phase=None,
               dataset: dict | None = None):
    from ..targets import execute_target
    return execute_target(target, captured, feeds, os.path.join(run_dir, "artifacts", target.folder_name),
                          probes=probes, on_phase=on_phase, dataset=dataset)


def target_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: rebuild the captured model from the run folder, run one target, save its result."""
    import importlib
    module, name = args["target_class"].split(":")
    cls = getattr(importlib.import_module(module), name)
    target = cls(**args.get("options", {}))
    target.limits = Limits(**args["limits"])
    ok, why = target.available()
    if not ok:      # said before the captured graphs are read: that costs seconds at 20,000 nodes
        from ..targets import UNAVAILABLE, TargetResult
        result = TargetResult(target=target.identity, evidence=dict(target.evidence), status=UNAVAILABLE,
                              error=why)
        result.save(workdir)
        return {"status": result.status, "error": result.error}
    phase("load")
    captured = captured_summary(args["run_dir"])
    if target.needs_live_source(captured.source.kind):
        captured = with_live_source(captured, args["spec"], _shapes(args.get("loader_shapes")),
                                    Limits(**args["limits"]))
    try:
        feeds = read_feeds(args["run_dir"])
        from ..inputs.dataset import read as read_dataset
        dataset = read_dataset(args["run_dir"])      # --data: written by prepare, None without one
        result = run_target(target, captured, feeds, args["run_dir"], args.get("probes") or [], on_phase=phase,
                            dataset=dataset.arrays if dataset is not None else None)
        phase("save")
        result.save(workdir)
    finally:
        captured.source.close()
    return {"status": result.status, "error": result.error}


def report_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: read every target's result from its folder and write the Report to workdir/report.json.
    With args["lean"] (why the full report failed), the report leaves out its optional parts and says so in
    run.report_error: every target's result is kept."""
    from ..report.sidecar import write as write_report
    from ..targets import TargetResult
    lean = args.get("lean")
    phase("report")
    captured = captured_summary(args["run_dir"])
    if lean:        # what the failed attempt may have half-written
        from ..analysis.stage_trace import STAGES_FILE
        if os.path.exists(os.path.join(args["run_dir"], STAGES_FILE)):
            os.remove(os.path.join(args["run_dir"], STAGES_FILE))
    loaded = []
    for identity, folder, worker in args["results"]:
        r = TargetResult.load(folder)
        r.info["worker"] = worker
        if lean:
            r.intermediates = {}      # per-layer values: the bulk of a result's arrays
            r.stages = []
        rename_outputs(r, args.get("early_output_names"), captured.output_names)
        loaded.append(r)
    reference = loaded.pop(0) if args["has_reference"] and loaded else None
    report = assemble_report(captured, args["inputs_info"], reference, loaded, args["run"], args["artifacts_dir"],
                             args["run_dir"], lean=bool(lean))
    if lean:
        report["run"]["report_error"] = {**lean, "left_out": LEFT_OUT_WHEN_LEAN}
    write_report(report, workdir)
    return {"targets": len(loaded)}


def rename_outputs(result, early: list[str] | None, final: list[str]) -> None:
    """A target that started from the ExportedProgram named its outputs as torch.export does; the ONNX export
    names the same outputs, in the same order, and normally alike. Where it did not, the early names are mapped
    to the ONNX ones by position, so every target's outputs compare under one name."""
    if not early or list(early) == list(final) or len(early) != len(final):
        return
    mapping = dict(zip(early, final))
    if result.outputs and set(result.outputs) <= set(mapping) and not set(result.outputs) & (set(final) - set(early)):
        result.outputs = {mapping[k]: v for k, v in result.outputs.items()}


def _shapes(d):
    """ShapeOverrides after a JSON round trip (tuples became lists)."""
    return {k: (list(v[0]), v[1]) for k, v in d.items()} if d else None


def _ranges(d):
    return {k: tuple(v) for k, v in d.items()} if d else None
