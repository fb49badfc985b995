"""The one façade the CLI and the dashboard call: analyze(source, targets, ...) -> Report (a plain dict)."""
from __future__ import annotations

import os
import shutil
import threading
from dataclasses import asdict
from typing import Callable

from . import inputs as inputs_mod
from .errors import XcInputError
from .limits import Limits
from .pipeline import CAPTURE_DIR, assemble_report, captured_summary, export_files, prepare, run_target
from .sources.spec import ShapeOverrides, Source
from .store import scratch_dir, write_json_atomic
from .targets import ERROR, TargetResult, make_targets, target_ids
from .targets.base import MAX_ERROR_DETAIL
from .worker import Job, Outcome, WorkerLimits, run_jobs

Progress = Callable[[dict], None]


def analyze(source: str | Source, targets: list[str] | None = None, *, inputs_npz: str | None = None,
            shapes: ShapeOverrides | None = None, dims: dict[str, int] | None = None,
            values: dict[str, float] | None = None, ranges: dict[str, tuple[float, float]] | None = None,
            out_dir: str | None = None, target_options: dict[str, dict] | None = None,
            progress: Progress | None = None, limits: Limits | None = None,
            worker_limits: WorkerLimits | None = None, jobs: int | None = None,
            cancel: threading.Event | None = None, isolate: bool = True) -> dict:
    """Load, capture, compile for every target, compare, and return the Report.

    Inputs: `inputs_npz` arrays, `shapes` (whole inputs), `dims` (named symbolic dims), `values` (every element of
    an input), `ranges` (integer inputs); every other symbolic dim is picked by name and role and probed on the
    reference (xc_core.input_shapes). Bad input raises XcInputError (one line). A target that fails — an
    exception, a crash, a hang past `worker_limits.timeout_s`, memory past `worker_limits.memory_gib` — is an
    `error` entry in the report; the others still complete.

    A source given as a path or `sample:NAME` is loaded, captured and compiled in isolated worker processes
    (xc_core.worker), up to `jobs` targets at once (default: the machine's cores). A `Source` object built in
    this process (a module you hold) runs here, one target after another; so does everything with
    `isolate=False` (a debugger, a test that patches xc).

    With `out_dir`, writes report.json, inputs.npz, capture/ and artifacts/<target>/ there; without, the run
    folder is scratch space removed when this returns. `limits` bound every file, archive and input (default:
    `Limits.from_env()`). Whatever loading unpacked is removed when this returns, also on error.
    """
    emit = progress or (lambda event: None)
    targets = list(targets) if targets else target_ids()
    target_options = target_options or {}
    limits = limits or Limits.from_env()
    worker_limits = worker_limits or WorkerLimits.from_env()
    jobs = default_jobs() if jobs is None else max(1, int(jobs))
    user_arrays = inputs_mod.read_npz(inputs_npz, limits) if inputs_npz else None
    # TorchScript records no shapes at all: its loader needs them (from --shape or the .npz) to know its inputs.
    loader_shapes = {**(inputs_mod.npz_shapes(user_arrays) if user_arrays else {}), **(shapes or {})}
    isolated = isinstance(source, str) and isolate
    owned = None
    run_dir = os.path.abspath(out_dir) if out_dir else scratch_dir("run")
    os.makedirs(run_dir, exist_ok=True)
    try:
        if isolated:
            spec = {"spec": source, "loader_shapes": loader_shapes, "shapes": shapes, "dims": dims,
                    "values": values, "ranges": ranges, "inputs_npz": inputs_npz, "limits": asdict(limits)}
            prepared = _prepare_isolated(spec, run_dir, worker_limits, emit, cancel)
            captured, feeds = captured_summary(run_dir), None
        else:
            emit({"stage": "load", "status": "running"})
            if isinstance(source, str):
                from .sources import load_source
                source = owned = load_source(source, loader_shapes, limits)
            emit({"stage": "inputs", "status": "running"})
            prepared = prepare(source, run_dir, shapes=shapes, dims=dims, values=values, ranges=ranges,
                               user_arrays=user_arrays, loader_shapes=loader_shapes, inputs_npz=inputs_npz,
                               limits=limits, stage=lambda s: emit({"stage": s, "status": "running"}))
            captured, feeds = prepared.pop("_live")
        emit({"stage": "inputs", "status": "done", "resolution": prepared["inputs_info"]["resolution"]})
        emit({"stage": "load", "status": "done", "source": prepared["source_name"]})
        # The captured graph is on disk from here on: the dashboard draws it while the targets compile.
        emit({"stage": "capture", "status": "done", "seconds": prepared["capture_seconds"],
              "captured": os.path.join(run_dir, CAPTURE_DIR, "captured.json"),
              "nodes": len(captured.before.compute_nodes()), "graph": captured.source.before_stage})

        from .analysis.layer_drift import module_boundaries
        boundaries = module_boundaries(captured.before)
        probes = [b["source_op"] for b in boundaries]
        reference_id = prepared["reference_id"]
        planned = ([reference_id] if reference_id else []) + [t for t in targets if t != reference_id]
        made = make_targets(planned, target_options)
        for target in made:
            target.limits = limits
        run_info = {"isolated": isolated, "jobs": jobs if isolated else 1, "limits": worker_limits.to_dict()}
        artifacts_dir = "artifacts" if out_dir else None     # relative to report.json
        if isolated:
            job_args = {"run_dir": run_dir, "spec": source, "loader_shapes": loader_shapes,
                        "limits": asdict(limits), "probes": probes}
            folders = _run_targets_isolated(made, job_args, run_dir, worker_limits, jobs, emit, cancel)
            report = _report_isolated(run_dir, prepared["inputs_info"], made, folders, reference_id is not None,
                                      run_info, artifacts_dir, worker_limits)
        else:
            by_id = {}
            for i, target in enumerate(made):
                emit({"stage": "target", "target": target.identity, "status": "running", "index": i,
                      "total": len(made)})
                by_id[target.identity] = run_target(target, captured, feeds, run_dir, probes)
                r = by_id[target.identity]
                emit({"stage": "target", "target": r.target, "status": r.status, "error": r.error,
                      "index": i + 1, "total": len(made)})
            reference = by_id.pop(made[0].identity) if reference_id else None
            results = [by_id[t.identity] for t in made if t.identity in by_id]
            report = assemble_report(captured, prepared["inputs_info"], reference, results, run_info,
                                     artifacts_dir, run_dir)
        if out_dir:
            if "exports" not in report:     # built in this process: export here (the worker did it otherwise)
                report["exports"] = export_files(report, run_dir)
            write_json_atomic(os.path.join(run_dir, "report.json"), report)
        emit({"stage": "report", "status": "done"})
        return report
    finally:
        if owned is not None:
            owned.close()
        shutil.rmtree(os.path.join(run_dir, "work"), ignore_errors=True)
        if not out_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def default_jobs() -> int:
    """Targets at once: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# What a worker step was doing, in the words of an error message.
_STEP_WORDS = {"load": "loading the model", "inputs": "trying input shapes on the reference",
               "capture": "capturing it (torch.export / ONNX export)"}


def _prepare_isolated(spec: dict, run_dir: str, limits: WorkerLimits, emit: Progress, cancel) -> dict:
    def on_stage(_job, step):
        emit({"stage": step, "status": "running"})
    job = Job("prepare", "xc_core.pipeline:prepare_job", {**spec, "run_dir": run_dir},
              os.path.join(run_dir, "work", "prepare"))
    out = run_jobs([job], limits, 1, on_stage, cancel=cancel)["prepare"]
    if out.ok:
        return out.value
    if out.input_error:
        e = out.input_error
        raise XcInputError(e["message"], fix=e.get("fix"), inputs=e.get("inputs"), dashboard=e.get("dashboard"))
    name = spec["spec"].split(":", 1)[1] if spec["spec"].startswith("sample:") else os.path.basename(spec["spec"])
    if out.cause == "cancelled":
        raise XcInputError(f"{name}: the analysis was cancelled")
    step = _STEP_WORDS.get(out.stage or "", "preparing the model")
    if out.cause == "exception":
        # An exception in xc's own code (not the model crashing a library): an internal error, as before.
        raise RuntimeError(f"{step}: {out.error}")
    raise XcInputError(f"{name}: {step} {out.error} — nothing was compiled", fix="limits")


def _run_targets_isolated(made: list, job_args: dict, run_dir: str, limits: WorkerLimits, jobs: int,
                          emit: Progress, cancel) -> dict:
    """One worker per target, `jobs` at once; a crash, a limit or an exception is that target's error."""
    job_list, by_job = [], {}
    for i, target in enumerate(made):
        cls = type(target)
        name = f"{i:02d}-{target.id}"
        by_job[name] = target
        job_list.append(Job(name, "xc_core.pipeline:target_job",
                            {**job_args, "target_class": f"{cls.__module__}:{cls.__qualname__}",
                             "options": dict(target.options)},
                            os.path.join(run_dir, "work", name)))
    total, finished = len(made), [0]
    started: set[str] = set()

    def on_stage(job_name, step):
        target = by_job[job_name]
        if job_name not in started:
            started.add(job_name)
            emit({"stage": "target", "target": target.identity, "status": "running", "index": finished[0],
                  "total": total})
        emit({"stage": "target", "target": target.identity, "status": "running", "step": step,
              "index": finished[0], "total": total})

    results = {}

    def on_done(out: Outcome):
        target = by_job[out.name]
        folder = os.path.join(run_dir, "work", out.name)
        worker = {"seconds": out.seconds, "peak_rss_mib": out.peak_rss_mib, "evidence": "measured"}
        if out.ok:
            status, error = out.value["status"], out.value.get("error")
        else:   # the worker left no result: write the failure where the report step reads results
            r = _failure(target, out)
            r.save(folder)
            status, error = r.status, r.error
        results[target.identity] = (folder, worker)
        finished[0] += 1
        emit({"stage": "target", "target": target.identity, "status": status, "error": error,
              "index": finished[0], "total": total})

    run_jobs(job_list, limits, jobs, on_stage, on_done, cancel)
    return results


def _report_isolated(run_dir: str, inputs_info: dict, made: list, folders: dict, has_reference: bool,
                     run_info: dict, artifacts_dir: str | None, limits: WorkerLimits) -> dict:
    """Build the report in a worker too: drift, alignment and schema validation are seconds of pure Python
    that would otherwise hold a dashboard server's interpreter while sessions wait for pages."""
    items = [[t.identity, *folders[t.identity]] for t in made if t.identity in folders]
    job = Job("report", "xc_core.pipeline:report_job",
              {"run_dir": run_dir, "inputs_info": inputs_info, "results": items, "has_reference": has_reference,
               "run": run_info, "artifacts_dir": artifacts_dir, "export": artifacts_dir is not None},
              os.path.join(run_dir, "work", "report"))
    out = run_jobs([job], limits, 1)["report"]
    if not out.ok:
        raise RuntimeError(f"building the report: {out.error}")
    import json
    with open(os.path.join(job.workdir, "report.json")) as f:
        return json.load(f)


def _failure(target, out: Outcome) -> TargetResult:
    r = TargetResult(target=target.identity, status=ERROR, evidence=dict(target.evidence),
                     error_stage=out.stage, error_detail=(out.detail or "")[-MAX_ERROR_DETAIL:] or None)
    if out.input_error:
        r.error = out.input_error["message"]
    elif out.cause != "exception":
        r.error = out.error          # the reason in words: "killed by SIGSEGV in compile"
    else:
        r.error = f"{out.stage or 'worker'} failed: {out.error}"
    return r


def reference_probe(src: Source, limits: Limits):
    """A function that runs the source's reference on candidate input specs: None if it runs, else why not (one
    line). None when there is nothing to probe with (a compiled Core ML model)."""
    from .errors import summarize_error
    if src.kind == "onnx" and src.path:
        session = {}

        def probe(specs):
            if inputs_mod.input_bytes(specs) > limits.bytes("max_input_mb"):
                return "the inputs would exceed the input-size limit"
            try:
                from .targets.ort_common import make_session, run_session
                if "s" not in session:
                    session["s"] = make_session(src.path, "ORT_DISABLE_ALL")
                run_session(session["s"], inputs_mod.random_inputs(specs))
                return None
            except Exception as e:  # noqa: BLE001 — a failure here is the answer to the probe
                return summarize_error(str(e), 240) or type(e).__name__
        return probe
    if src.module is not None and src.kind != "torchscript":
        def probe(specs):
            import torch
            if inputs_mod.input_bytes(specs) > limits.bytes("max_input_mb"):
                return "the inputs would exceed the input-size limit"
            feeds = inputs_mod.random_inputs(specs)
            try:
                with torch.no_grad():
                    src.module(*[torch.from_numpy(feeds[s.name]) for s in specs])
                return None
            except Exception as e:  # noqa: BLE001
                return summarize_error(str(e), 240) or type(e).__name__
        return probe
    return None


def failed_targets(report: dict) -> list[str]:
    return [t for t, b in report["targets"].items() if b["status"] == ERROR]


__all__ = ["analyze", "failed_targets", "XcInputError"]
