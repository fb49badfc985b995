"""The steps of an analysis as functions of files in a run folder, so each can run in an isolated worker
(xc_core.worker) or in this process, with the same results.

    run_dir/
      inputs.npz                    the inputs every target ran (written by `prepare`)
      capture/captured.json         the captured graphs, output names, inputs, timings (typed, plain JSON); the
                                    workers' hand-off, removed once report.json (which holds the graphs) is written
      capture/model.onnx            what ONNX-consuming targets compile
      capture/exported_program.pt2  the ExportedProgram (PyTorch sources), read back with xc's safe loader
      capture/onnx_route.json       an ONNX source's ONNX → PyTorch route (its program: artifacts/capture/)
      artifacts/<target>/           what each target wrote
      work/<job>/                   a worker's result.json + arrays.npz, stderr and temp folder (removed after)

A target worker rebuilds the source from its spec (a sample is rebuilt from code, a file is loaded again through
the same safe loaders), so nothing but files and JSON crosses between processes.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, fields

from .capture import Captured, capture
from .inputs import values as inputs_mod
from .ir import Graph
from .limits import Limits
from .sources.spec import InputSpec, Source

CAPTURE_DIR, INPUTS_FILE = "capture", "inputs.npz"
# In CAPTURE_DIR: the hand-off to the workers, removed once the report (which holds its graphs) is written.
CAPTURED_FILE = "captured.json"
# The prepare worker's phase once torch.export has finished and the ExportedProgram is on disk (ONNX export next).
EXPORTED = "exported"


@dataclass(frozen=True)
class PlanStep:
    """One step of an analysis: the progress step it reports as, the worker entry that runs it in isolation, and
    the step whose end it waits for (`early`: the worker phase of that step some targets may start at)."""
    name: str
    job: str
    after: str | None = None
    early: str | None = None


# The analysis, written once: prepare (load, inputs, capture), an ONNX source's ONNX → PyTorch route when a target
# compiles PyTorch programs, then every target (the reference first), then the report. scheduler.run_here walks it
# one step after another in this process; scheduler.IsolatedRun starts each step's jobs in workers as soon as what
# it waits for has finished — the targets that compile the ExportedProgram as soon as the prepare worker has
# written it (EXPORTED), while it goes on to the ONNX export; for an ONNX source, the targets that compile ONNX
# while the route runs, those that compile its program once it has.
PREPARE, ROUTE_STEP, TARGETS = "prepare", "onnx-route", "targets"
PLAN = (
    PlanStep(PREPARE, "xc_core.pipeline:prepare_job"),
    PlanStep(ROUTE_STEP, "xc_core.pipeline:route_job", after=PREPARE),
    PlanStep(TARGETS, "xc_core.pipeline:target_job", after=PREPARE, early=EXPORTED),
    PlanStep("report", "xc_core.pipeline:report_job", after=TARGETS),
)
ROUTE_FILE = "onnx_route.json"
PLAN_STEP = {step.name: step for step in PLAN}


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

    _LIVE = ("captured", "feeds")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self._LIVE}

    @classmethod
    def from_dict(cls, data: dict) -> "Prepared":
        return cls(**{f.name: data.get(f.name) for f in fields(cls) if f.name not in cls._LIVE})


# ------------------------------------------------------------------------------------------------- prepare ----
def prepare(src: Source, run_dir: str, *, shapes=None, dims=None, values=None, ranges=None, user_arrays=None,
            loader_shapes=None, inputs_npz: str | None = None, limits: Limits, phase=lambda s: None,
            exported=None) -> Prepared:
    """Resolve the inputs, capture, and write both into run_dir. Returns what the targets and the report need,
    with the live captured model and input values for a caller in this process.

    With `exported`, a PyTorch source's ExportedProgram is written to run_dir as soon as torch.export has
    finished, with a captured.json that has no ONNX yet, and `exported(prepared)` is called with what is known
    at that point (no ONNX yet): targets that compile from the ExportedProgram start while the ONNX export runs.
    The final captured.json replaces that one when capture ends."""
    from .inputs.probe import reference_probe
    from .inputs.shapes import resolve_inputs
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
                    captured.onnx_error, source_kind=src.kind, captured=captured, feeds=feeds)


def prepare_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: load the source from its spec, then `prepare`."""
    from .sources import load_source
    limits = Limits(**args["limits"])
    user_arrays = inputs_mod.read_npz(args["inputs_npz"], limits) if args.get("inputs_npz") else None
    phase("load")
    src = load_source(args["spec"], _shapes(args.get("loader_shapes")), limits)
    try:
        out = prepare(src, args["run_dir"], shapes=_shapes(args.get("shapes")), dims=args.get("dims"),
                      values=args.get("values"), ranges=_ranges(args.get("ranges")), user_arrays=user_arrays,
                      loader_shapes=_shapes(args.get("loader_shapes")), inputs_npz=args.get("inputs_npz"),
                      limits=limits, phase=phase, exported=lambda early: phase(EXPORTED, early.to_dict()))
    finally:
        src.close()
    return out.to_dict()


# ---------------------------------------------------------------------------------------------- onnx route ----
def run_route(captured: Captured, feeds: dict, run_dir: str, limits: Limits | None = None) -> dict:
    """An ONNX source's ONNX → PyTorch route (xc_core.onnx_route): the program beside the captured ONNX, the
    record in capture/onnx_route.json and on `captured`. Never raises: a failure is the record's `error`. An ONNX
    above --max-program-nodes is not converted: every target that would compile the program skips it, and the
    record's `skipped` says why."""
    from .onnx_route import ROUTE, build
    from .targets.base import program_too_big
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


def save_route(record: dict, run_dir: str) -> None:
    from .paths import write_json_atomic
    write_json_atomic(os.path.join(run_dir, CAPTURE_DIR, ROUTE_FILE), record)


# -------------------------------------------------------------------------------------------------- target ----
def run_target(target, captured: Captured, feeds: dict, run_dir: str, probes: list[str], on_phase=None):
    from .targets import execute_target
    return execute_target(target, captured, feeds, os.path.join(run_dir, "artifacts", target.folder_name),
                          probes=probes, on_phase=on_phase)


def target_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: rebuild the captured model from the run folder, run one target, save its result."""
    import importlib
    module, name = args["target_class"].split(":")
    cls = getattr(importlib.import_module(module), name)
    target = cls(**args.get("options", {}))
    target.limits = Limits(**args["limits"])
    ok, why = target.available()
    if not ok:      # said before the captured graphs are read: that costs seconds at 20,000 nodes
        from .targets import UNAVAILABLE, TargetResult
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
        result = run_target(target, captured, feeds, args["run_dir"], args.get("probes") or [], on_phase=phase)
        phase("save")
        result.save(workdir)
    finally:
        captured.source.close()
    return {"status": result.status, "error": result.error}


def assemble_report(captured: Captured, inputs_info: dict, reference, results: list, run_info: dict,
                    artifacts_dir: str | None, run_dir: str | None = None, lean: bool = False) -> dict:
    """The Report from the captured model and every target's result, validated against the schema.

    Artifact paths are relative to the run folder (where report.json is written): a report then reads the same
    wherever the run was made, diffs cleanly, and its files resolve from the run store or a copied folder.
    `lean` leaves out the optional parts (see LEFT_OUT_WHEN_LEAN): the report of a run whose full report could
    not be built."""
    from .analysis.layer_drift import module_boundaries
    from .report.build import build_report, host_info
    for r in ([reference] if reference is not None else []) + list(results):
        label_outputs(r, captured.output_label_map())
    from .analysis.stage_trace import STAGES_FILE, GraphStore
    from .report.schema import validate_built_report
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
    validate_built_report(report)
    return report


def _relative(path: str, run_dir: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), run_dir)
    return path if rel.startswith("..") else rel.replace(os.sep, "/")


# What a lean report leaves out (xc_core.report.build, lean=True), in words for run.report_error.
LEFT_OUT_WHEN_LEAN = ["the lowering stages and their step graphs",
                      "where the targets first part ways", "per-layer drift", "drift histograms and scatter",
                      "the layout audit"]


def report_job(args: dict, workdir: str, phase) -> dict:
    """Worker entry: read every target's result from its folder and write the Report to workdir/report.json.
    With args["lean"] (why the full report failed), the report leaves out its optional parts and says so in
    run.report_error: every target's result is kept."""
    from .report.sidecar import write as write_report
    from .targets import TargetResult
    lean = args.get("lean")
    phase("report")
    captured = captured_summary(args["run_dir"])
    if lean:        # what the failed attempt may have half-written
        from .analysis.stage_trace import STAGES_FILE
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


def label_outputs(result, labels: dict[str, str]) -> None:
    """Every output under the name the report shows (the model's own key, or 'output <i>'), once all targets
    compare under one name."""
    if not labels:
        return
    result.outputs = {labels.get(k, k): v for k, v in (result.outputs or {}).items()}
    for key in ("outputs_not_compared",):
        if isinstance(result.info.get(key), dict):
            result.info[key] = {labels.get(k, k): v for k, v in result.info[key].items()}


def read_feeds(run_dir: str) -> dict:
    import numpy as np
    with np.load(os.path.join(run_dir, INPUTS_FILE), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------------------------ captured, as files ----
def save_captured(captured: Captured, folder: str, save_program: bool = True) -> None:
    """captured.json (and the ExportedProgram beside it, unless `save_program` is False: it is on disk already)."""
    os.makedirs(folder, exist_ok=True)
    ep_file = None
    if captured.exported_program is not None:
        ep_file = "exported_program.pt2"
        if save_program:
            import torch
            torch.export.save(captured.exported_program, os.path.join(folder, ep_file))
    data = {
        "source": {**captured.source.to_dict(), "inputs": [asdict(s) for s in captured.source.inputs],
                   "module": captured.source.module is not None},
        "onnx_path": captured.onnx_path,
        "onnx_graph": captured.onnx_graph.to_dict() if captured.onnx_graph is not None else None,
        "before": None if captured.before is captured.onnx_graph else captured.before.to_dict(),
        "output_names": list(captured.output_names),
        "output_labels": list(captured.output_labels),
        "timings": dict(captured.timings),
        "notes": list(captured.notes),
        "onnx_error": captured.onnx_error,
        "tflite_path": captured.tflite_path,
        "exported_program": ep_file,
    }
    tmp = os.path.join(folder, CAPTURED_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, os.path.join(folder, CAPTURED_FILE))


def _read(run_dir: str) -> dict:
    with open(os.path.join(run_dir, CAPTURE_DIR, CAPTURED_FILE)) as f:
        return json.load(f)


def captured_summary(run_dir: str) -> Captured:
    """The captured model from the run folder: graphs, names, inputs, the ONNX and ExportedProgram files —
    everything but a live source (no module, Core ML program or OpenVINO model)."""
    data = _read(run_dir)
    s = data["source"]
    src = Source(kind=s["kind"], name=s["name"], sha256=s["sha256"], inputs=_specs(s["inputs"]),
                 notes=list(s["notes"]), metadata=s.get("metadata") or {},
                 constant_inputs=s.get("constant_inputs") or {})
    cap = _captured(src, data, run_dir)
    if data["exported_program"]:
        cap.exported_program_file = os.path.join(run_dir, CAPTURE_DIR, data["exported_program"])
    return cap


def with_live_source(cap: Captured, spec: str, loader_shapes, limits: Limits) -> Captured:
    """The same captured model with its source loaded again from its spec (through the same safe loaders),
    with the inputs `prepare` resolved."""
    from .sources import load_source
    src = load_source(spec, loader_shapes, limits)
    src.inputs = list(cap.source.inputs)
    cap.source = src
    if src.kind == "openvino-ir":
        cap.ir_path = src.openvino_xml
    return cap


def _captured(src: Source, data: dict, run_dir: str) -> Captured:
    onnx_graph = Graph.from_dict(data["onnx_graph"]) if data["onnx_graph"] is not None else None
    before = Graph.from_dict(data["before"]) if data["before"] is not None else onnx_graph
    return Captured(src, data["onnx_path"], onnx_graph, before, data["output_names"],
                    timings=data["timings"], notes=data["notes"], onnx_error=data.get("onnx_error"),
                    output_labels=data.get("output_labels") or [], onnx_route=_read_route(run_dir),
                    tflite_path=data.get("tflite_path"))


def _read_route(run_dir: str) -> dict | None:
    path = os.path.join(run_dir, CAPTURE_DIR, ROUTE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _specs(items: list[dict]) -> list[InputSpec]:
    return [InputSpec(**{**d, "shape": list(d["shape"]), "dim_names": tuple(d.get("dim_names") or ())})
            for d in items]


def _shapes(d):
    """ShapeOverrides after a JSON round trip (tuples became lists)."""
    return {k: (list(v[0]), v[1]) for k, v in d.items()} if d else None


def _ranges(d):
    return {k: tuple(v) for k, v in d.items()} if d else None
