"""The one façade the CLI and the dashboard call: analyze(source, targets, ...) -> Report (a plain dict)."""
from __future__ import annotations

import os
import shutil
import threading
from dataclasses import asdict
from typing import Callable

from . import gc_policy
from . import inputs as inputs_mod
from .errors import XcInputError
from .limits import Limits
from .pipeline import (CAPTURE_DIR, EXPORTED, assemble_report, captured_summary, export_files, prepare,
                       run_target)
from .sources.spec import ShapeOverrides, Source
from .report.sidecar import read_file as read_report
from .report.sidecar import write as write_report
from .store import scratch_dir
from .targets import ERROR, TargetResult, make_targets, target_ids
from .targets.base import MAX_ERROR_DETAIL
from .worker import Job, Outcome, WorkerLimits, confinement, run_jobs

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
        run_info = {"isolated": isolated, "jobs": jobs if isolated else 1, "limits": worker_limits.to_dict()}
        if isolated:
            run_info["confinement"] = confinement()
        artifacts_dir = "artifacts" if out_dir else None     # relative to report.json
        if isolated:
            spec = {"spec": source, "loader_shapes": loader_shapes, "shapes": shapes, "dims": dims,
                    "values": values, "ranges": ranges, "inputs_npz": inputs_npz, "limits": asdict(limits)}
            run = _IsolatedRun(spec, run_dir, targets, target_options, limits, worker_limits, jobs, emit, cancel)
            run.run()
            report = _report_isolated(run_dir, run.prepared["inputs_info"], run.made, run.folders,
                                      run.prepared["reference_id"] is not None, run_info, artifacts_dir,
                                      worker_limits, run.early_output_names, run.statuses, emit)
        else:
            with gc_policy.fewer_collections():      # one big heap in this process: see gc_policy
                emit({"stage": "load", "status": "running"})
                if isinstance(source, str):
                    from .sources import load_source
                    source = owned = load_source(source, loader_shapes, limits)
                emit({"stage": "inputs", "status": "running"})
                prepared = prepare(source, run_dir, shapes=shapes, dims=dims, values=values, ranges=ranges,
                                   user_arrays=user_arrays, loader_shapes=loader_shapes, inputs_npz=inputs_npz,
                                   limits=limits, stage=lambda s: emit({"stage": s, "status": "running"}))
                captured, feeds = prepared.pop("_live")
                _emit_captured(emit, prepared, run_dir, captured)
                probes = _probes(captured)
                reference_id = prepared["reference_id"]
                made = _plan(reference_id, targets, target_options, limits)
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
            with gc_policy.fewer_collections():
                if "exports" not in report:     # built in this process: export here (the worker did it otherwise)
                    report["exports"] = export_files(report, run_dir)
                write_report(report, run_dir)
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


def _emit_captured(emit: Progress, prepared: dict, run_dir: str, captured) -> None:
    """The load, inputs and capture steps are done: the captured graph is on disk from here on, and the dashboard
    draws it while the targets compile."""
    emit({"stage": "inputs", "status": "done", "resolution": prepared["inputs_info"]["resolution"]})
    emit({"stage": "load", "status": "done", "source": prepared["source_name"]})
    emit({"stage": "capture", "status": "done", "seconds": prepared["capture_seconds"],
          "captured": os.path.join(run_dir, CAPTURE_DIR, "captured.json"),
          "nodes": len(captured.before.compute_nodes()), "graph": captured.source.before_stage})


def _probes(captured) -> list[str]:
    """The source ops whose values per-layer drift compares: the module boundaries of the captured graph."""
    from .analysis.layer_drift import module_boundaries
    return [b["source_op"] for b in module_boundaries(captured.before)]


def _plan(reference_id: str | None, targets: list[str], target_options: dict, limits: Limits) -> list:
    """The reference first, then the targets asked for."""
    planned = ([reference_id] if reference_id else []) + [t for t in targets if t != reference_id]
    made = make_targets(planned, target_options)
    for target in made:
        target.limits = limits
    return made


# What a worker step was doing, in the words of an error message.
_STEP_WORDS = {"load": "loading the model", "inputs": "trying input shapes on the reference",
               "capture": "capturing it (torch.export / ONNX export)",
               EXPORTED: "exporting it to ONNX (torch.onnx)"}


class _AnyOf:
    """Cancelled when either event is set (the caller's cancel, or a failed prepare stopping the targets)."""

    def __init__(self, *events):
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


class _IsolatedRun:
    """Prepare and every target in worker processes, `jobs` at once. Targets that compile from the
    ExportedProgram (Core ML, Inductor, the torch reference) start as soon as the prepare worker has written it,
    while that worker goes on to the ONNX export; the others start once capture has finished. A crash, a limit
    or an exception in a target is that target's error; in prepare, it ends the analysis (nothing to compile)."""

    def __init__(self, spec: dict, run_dir: str, targets: list[str], target_options: dict, limits: Limits,
                 worker_limits: WorkerLimits, jobs: int, emit: Progress, cancel):
        self.spec, self.run_dir, self.targets, self.target_options = spec, run_dir, targets, target_options
        self.limits, self.worker_limits, self.jobs, self.emit = limits, worker_limits, jobs, emit
        self.stop = threading.Event()
        self.cancel = _AnyOf(cancel, self.stop)
        self.queue: list[Job] = []
        self.prepared: dict | None = None
        self.prepare_outcome: Outcome | None = None
        self.made: list = []
        self.queued: set[str] = set()
        self.by_job: dict[str, object] = {}
        self.folders: dict[str, tuple] = {}
        self.statuses: dict[str, tuple] = {}      # identity -> (status, error) each target finished with
        self.early_output_names: list[str] | None = None
        self.finished = 0
        self.started: set[str] = set()
        self.probes: list[str] = []

    def run(self) -> None:
        self.queue.append(Job("prepare", "xc_core.pipeline:prepare_job", {**self.spec, "run_dir": self.run_dir},
                              os.path.join(self.run_dir, "work", "prepare"), writable=(self.run_dir,)))
        run_jobs(self.queue, self.worker_limits, self.jobs, self._on_stage, self._on_done, self.cancel)
        out = self.prepare_outcome
        if out is None or not out.ok:
            self._raise_prepare_failure(out)

    # -- prepare ------------------------------------------------------------------------------------------------
    def _on_stage(self, job_name: str, step: str, data) -> None:
        if job_name != "prepare":
            self._target_stage(job_name, step)
        elif step == EXPORTED and data:
            # The ExportedProgram is on disk: start what compiles from it while the ONNX export runs.
            self._captured(data)
            self.early_output_names = data.get("output_names")
            self._queue(lambda t: t.from_exported_program)
            self.emit({"stage": "onnx", "status": "running"})
        else:
            self.emit({"stage": step, "status": "running"})

    def _captured(self, prepared: dict) -> None:
        """Capture has written captured.json (the ExportedProgram's, or the final one): the first time, announce
        it and plan the targets and their probes."""
        first = self.prepared is None
        self.prepared = prepared
        if first:
            captured = captured_summary(self.run_dir)
            _emit_captured(self.emit, prepared, self.run_dir, captured)
            self.probes = _probes(captured)
            self.made = _plan(prepared["reference_id"], self.targets, self.target_options, self.limits)

    def _queue(self, which) -> None:
        """Queue the planned targets `which` accepts that are not queued yet, costliest first (stable): with fewer
        cores than targets, the slowest one must not start last."""
        job_args = {"run_dir": self.run_dir, "spec": self.spec["spec"], "loader_shapes": self.spec["loader_shapes"],
                    "limits": self.spec["limits"], "probes": self.probes}
        new = [(i, t) for i, t in enumerate(self.made) if t.identity not in self.queued and which(t)]
        for i, target in sorted(new, key=lambda it: -it[1].relative_cost):
            cls = type(target)
            name = f"{i:02d}-{target.id}"
            self.by_job[name] = target
            self.queued.add(target.identity)
            self.queue.append(Job(name, "xc_core.pipeline:target_job",
                                  {**job_args, "target_class": f"{cls.__module__}:{cls.__qualname__}",
                                   "options": dict(target.options)},
                                  os.path.join(self.run_dir, "work", name), writable=_writable(self.run_dir, target)))

    def _on_done(self, out: Outcome) -> None:
        if out.name != "prepare":
            self._target_done(out)
            return
        self.prepare_outcome = out
        if not out.ok:
            self.stop.set()        # targets that already started from the ExportedProgram stop too
            return
        if self.prepared is not None:
            error = out.value.get("onnx_error")
            self.emit({"stage": "onnx", "status": "error" if error else "done", "error": error})
        self._captured(out.value)
        self._queue(lambda t: True)

    def _raise_prepare_failure(self, out: Outcome | None) -> None:
        spec = self.spec["spec"]
        name = spec.split(":", 1)[1] if spec.startswith("sample:") else os.path.basename(spec)
        if out is None or out.cause == "cancelled":
            raise XcInputError(f"{name}: the analysis was cancelled")
        if out.input_error:
            e = out.input_error
            raise XcInputError(e["message"], fix=e.get("fix"), inputs=e.get("inputs"), dashboard=e.get("dashboard"))
        step = _STEP_WORDS.get(out.stage or "", "preparing the model")
        if out.cause == "exception":
            # An exception in xc's own code (not the model crashing a library): an internal error, as before.
            raise RuntimeError(f"{step}: {out.error}")
        raise XcInputError(f"{name}: {step} {out.error} — nothing was compiled", fix="limits")

    # -- targets ------------------------------------------------------------------------------------------------
    def _target_stage(self, job_name: str, step: str) -> None:
        target = self.by_job[job_name]
        if job_name not in self.started:
            self.started.add(job_name)
            self.emit({"stage": "target", "target": target.identity, "status": "running", "index": self.finished,
                       "total": len(self.made)})
        self.emit({"stage": "target", "target": target.identity, "status": "running", "step": step,
                   "index": self.finished, "total": len(self.made)})

    def _target_done(self, out: Outcome) -> None:
        if self.stop.is_set():      # prepare failed: there will be no report, only prepare's error
            return
        target = self.by_job[out.name]
        folder = os.path.join(self.run_dir, "work", out.name)
        worker = {"seconds": out.seconds, "peak_rss_mib": out.peak_rss_mib, "evidence": "measured"}
        if out.ok:
            status, error = out.value["status"], out.value.get("error")
        else:   # the worker left no result: write the failure where the report step reads results
            r = _failure(target, out)
            os.makedirs(folder, exist_ok=True)     # a job cancelled before it started has no folder yet
            r.save(folder)
            status, error = r.status, r.error
        self.folders[target.identity] = (folder, worker)
        self.statuses[target.identity] = (status, error)
        self.finished += 1
        self.emit({"stage": "target", "target": target.identity, "status": status, "error": error,
                   "index": self.finished, "total": len(self.made)})


REPORT_JOB = "xc_core.pipeline:report_job"


def _report_isolated(run_dir: str, inputs_info: dict, made: list, folders: dict, has_reference: bool,
                     run_info: dict, artifacts_dir: str | None, limits: WorkerLimits,
                     early_output_names: list[str] | None = None, statuses: dict | None = None,
                     emit: Progress | None = None) -> dict:
    """Build the report in a worker too: drift, alignment and schema validation are seconds of pure Python
    that would otherwise hold a dashboard server's interpreter while sessions wait for pages.

    Every target has finished by now, so a failure here (a memory limit on a big model, a crash, a bug in an
    analysis) must not lose them: the report is built again without its optional parts (pipeline.report_job,
    lean), and if even that fails, a report of the targets' statuses is made here; either way run.report_error
    says what happened."""
    emit = emit or (lambda event: None)
    items = [[t.identity, *folders[t.identity]] for t in made if t.identity in folders]
    args = {"run_dir": run_dir, "inputs_info": inputs_info, "results": items, "has_reference": has_reference,
            "run": run_info, "artifacts_dir": artifacts_dir, "export": artifacts_dir is not None,
            "early_output_names": early_output_names}
    job = Job("report", REPORT_JOB, args, os.path.join(run_dir, "work", "report"), writable=(run_dir,))
    out = run_jobs([job], limits, 1)["report"]
    if out.ok:
        return read_report(os.path.join(job.workdir, "report.json"))
    failed = {"error": _report_failure(out), "detail": (out.detail or "")[-MAX_ERROR_DETAIL:] or None}
    # Its own stage name: a "report" event means the report is done to the dashboard's progress lines.
    emit({"stage": "report-retry", "status": "running", "step": "again without its optional parts",
          "error": failed["error"]})
    lean = Job("report-lean", REPORT_JOB, {**args, "lean": failed}, os.path.join(run_dir, "work", "report-lean"),
               writable=(run_dir,))
    again = run_jobs([lean], limits, 1)["report-lean"]
    if again.ok:
        return read_report(os.path.join(lean.workdir, "report.json"))
    return _statuses_report(run_dir, inputs_info, made[1:] if has_reference else made, statuses or {}, run_info,
                            artifacts_dir, {**failed, "again": _report_failure(again)})


def _report_failure(out: Outcome) -> str:
    """A failed report job in words: 'exceeded the 4 GiB memory limit in report (resident 4.0 GiB)'."""
    return out.error if out.cause != "exception" else f"failed: {out.error}"


def _statuses_report(run_dir: str, inputs_info: dict, targets: list, statuses: dict, run_info: dict,
                     artifacts_dir: str | None, failed: dict) -> dict:
    """The last resort when no report could be built from the targets' results: each target with the status it
    finished with, its result left out (its artifacts stay in the run folder), and why."""
    captured = captured_summary(run_dir)
    results = []
    for t in targets:
        status, error = statuses.get(t.identity, (ERROR, "did not finish"))
        why = (f"finished {status}{' (' + error + ')' if error else ''}, but its result is not in this report: "
               f"building the report {failed['error']}, and again without its optional parts {failed['again']}")
        results.append(TargetResult(target=t.identity, status=ERROR, evidence=dict(t.evidence), error=why,
                                    error_stage="report"))
    report = assemble_report(captured, inputs_info, None, results, {**run_info}, artifacts_dir, run_dir, lean=True)
    report["run"]["report_error"] = {**failed, "left_out": ["every target's result (their artifacts are kept)"]}
    if artifacts_dir is not None:
        report["exports"] = {"model_explorer": {"error": f"left out: building the report {failed['error']}"}}
    return report


# Targets that compile with TorchInductor, whose kernel cache is shared between analyses ($XC_HOME/cache/inductor;
# a cold cache costs ≈20 s of C++ compiling): their workers may write there too.
_INDUCTOR_CACHE_USERS = {"inductor-cpu"}


def _writable(run_dir: str, target) -> tuple[str, ...]:
    """Where a target's worker may write (where Landlock confines it): its analysis' run folder (its artifacts,
    the probe models written beside the captured ONNX), and the Inductor cache for the targets that use it."""
    if target.id in _INDUCTOR_CACHE_USERS:
        from .store import home
        return run_dir, os.path.join(home(), "cache", "inductor")
    return (run_dir,)


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
