"""Running an analysis's plan (plan.PLAN): in this process, one step after another (`run_here`), or in isolated
worker processes, each step's jobs started as soon as what they wait for has finished (`IsolatedRun`). Both emit
the same progress events and hand the same Report back to api.analyze.
"""
from __future__ import annotations

import os
import threading
from dataclasses import asdict

from .. import gc_policy
from ..errors import XcInputError
from ..limits import Limits
from ..progress import (
    CAPTURE,
    INPUTS,
    LOAD,
    ONNX,
    REPORT_RETRY,
    ROUTE,
    RUNNING,
    TARGET,
    Progress,
    ProgressEvent,
)
from ..report.sidecar import read_file as read_report
from ..onnx_route import ROUTE as ROUTE_WORDS
from ..targets import ERROR, TargetResult, make_targets, takes_programs
from ..targets.base import MAX_ERROR_DETAIL
from ..worker import Job, Outcome, WorkerLimits, run_jobs
from .assemble import assemble_report
from .plan import CAPTURE_DIR, CAPTURED_FILE, EXPORTED, PLAN, PLAN_STEP, PREPARE, ROUTE_STEP, TARGETS
from .run_folder import captured_summary, save_route
from .steps import Prepared, prepare, run_route, run_target


def emit_captured(emit: Progress, prepared: Prepared, run_dir: str, captured) -> None:
    """The load, inputs and capture steps are done: the captured graph is on disk from here on, and the dashboard
    draws it while the targets compile."""
    emit(ProgressEvent(INPUTS, "done", resolution=prepared.inputs_info["resolution"]))
    emit(ProgressEvent(LOAD, "done", source=prepared.source_name))
    emit(ProgressEvent(CAPTURE, "done", seconds=prepared.capture_seconds,
                       captured=os.path.join(run_dir, CAPTURE_DIR, CAPTURED_FILE),
                       nodes=len(captured.before.compute_nodes()), graph=captured.source.before_stage))


def needs_route(prepared: Prepared, targets: list[str]) -> bool:
    """An ONNX source and a target that compiles PyTorch programs: the ONNX → PyTorch route runs."""
    return prepared.source_kind == "onnx" and takes_programs(targets)


def probes_of(captured) -> list[str]:
    """The source ops whose values per-layer drift compares: the module boundaries of the captured graph."""
    from ..analysis.layer_drift import module_boundaries
    return [b["source_op"] for b in module_boundaries(captured.before)]


def plan_targets(reference_id: str | None, targets: list[str], target_options: dict, limits: Limits) -> list:
    """The reference first, then the targets asked for."""
    planned = ([reference_id] if reference_id else []) + [t for t in targets if t != reference_id]
    made = make_targets(planned, target_options)
    for target in made:
        target.limits = limits
    return made


# ------------------------------------------------------------------------------------------- in this process ----
class _Here:
    """plan.PLAN's steps in this process, on the live source: nothing is reloaded from the run folder."""

    def __init__(self, source, run_dir: str, targets: list[str], target_options: dict, limits: Limits,
                 prepare_args: dict, emit: Progress, run_info: dict, artifacts_dir: str | None):
        self.source, self.run_dir, self.targets, self.target_options = source, run_dir, targets, target_options
        self.limits, self.prepare_args, self.emit = limits, prepare_args, emit
        self.run_info, self.artifacts_dir = run_info, artifacts_dir
        self.prepared: Prepared | None = None
        self.made: list = []
        self.results: dict[str, TargetResult] = {}
        self.report: dict | None = None

    def prepare(self) -> None:
        self.prepared = prepare(self.source, self.run_dir, limits=self.limits, **self.prepare_args,
                                phase=lambda p: self.emit(ProgressEvent(p, RUNNING)))
        emit_captured(self.emit, self.prepared, self.run_dir, self.prepared.captured)

    def route(self) -> None:
        if needs_route(self.prepared, self.targets):
            self.emit(ProgressEvent(ROUTE, RUNNING))
            record = run_route(self.prepared.captured, self.prepared.feeds, self.run_dir, self.limits)
            self.emit(ProgressEvent(ROUTE, ERROR if record.get("error") else "done", error=record.get("error")))

    def run_targets(self) -> None:
        captured, feeds = self.prepared.captured, self.prepared.feeds
        probes = probes_of(captured)
        self.made = plan_targets(self.prepared.reference_id, self.targets, self.target_options, self.limits)
        for i, target in enumerate(self.made):
            self.emit(ProgressEvent(TARGET, RUNNING, target=target.identity, index=i, total=len(self.made)))
            dataset = self.prepared.dataset.arrays if self.prepared.dataset is not None else None
            r = self.results[target.identity] = run_target(target, captured, feeds, self.run_dir, probes,
                                                           dataset=dataset)
            self.emit(ProgressEvent(TARGET, r.status, target=r.target, error=r.error, index=i + 1,
                                    total=len(self.made)))

    def build_report(self) -> None:
        by_id = dict(self.results)
        reference = by_id.pop(self.made[0].identity) if self.prepared.reference_id else None
        results = [by_id[t.identity] for t in self.made if t.identity in by_id]
        self.report = assemble_report(self.prepared.captured, self.prepared.inputs_info, reference, results,
                                      self.run_info, self.artifacts_dir, self.run_dir)


def run_here(source, run_dir: str, targets: list[str], target_options: dict, limits: Limits, prepare_args: dict,
             emit: Progress, run_info: dict, artifacts_dir: str | None) -> dict:
    """The plan in this process, one step after another; returns the Report."""
    here = _Here(source, run_dir, targets, target_options, limits, prepare_args, emit, run_info, artifacts_dir)
    steps = {PREPARE: here.prepare, ROUTE_STEP: here.route, TARGETS: here.run_targets, "report": here.build_report}
    with gc_policy.fewer_collections():      # one big heap in this process: see gc_policy
        for step in PLAN:
            steps[step.name]()
    return here.report


# ------------------------------------------------------------------------------------------ isolated workers ----
# What a prepare worker's phase was doing, in the words of an error message.
_PHASE_WORDS = {LOAD: "loading the model", INPUTS: "trying input shapes on the reference",
                CAPTURE: "capturing it (torch.export / ONNX export)", EXPORTED: "exporting it to ONNX (torch.onnx)"}


class _AnyOf:
    """Cancelled when either event is set (the caller's cancel, or a failed prepare stopping the targets)."""

    def __init__(self, *events):
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


class IsolatedRun:
    """plan.PLAN in worker processes, `jobs` at once: the prepare job, then a job per target as soon as what
    the target compiles exists — the targets that compile the ExportedProgram (Core ML, Inductor, the torch
    reference) when the prepare worker has written it, while it goes on to the ONNX export; the others once
    capture has finished — then the report job. A crash, a limit or an exception in a target is that target's
    error; in prepare, it ends the analysis (nothing to compile)."""

    def __init__(self, spec: dict, run_dir: str, targets: list[str], target_options: dict, limits: Limits,
                 worker_limits: WorkerLimits, jobs: int, emit: Progress, cancel):
        self.spec, self.run_dir, self.targets, self.target_options = spec, run_dir, targets, target_options
        self.limits, self.worker_limits, self.jobs, self.emit = limits, worker_limits, jobs, emit
        self.stop = threading.Event()
        self.cancel = _AnyOf(cancel, self.stop)
        self.queue: list[Job] = []
        self.prepared: Prepared | None = None
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

    def run(self, run_info: dict, artifacts_dir: str | None) -> dict:
        """Prepare and the targets, then the report; returns the Report."""
        step = PLAN_STEP[PREPARE]
        self.queue.append(Job(PREPARE, step.job, {**self.spec, "run_dir": self.run_dir},
                              os.path.join(self.run_dir, "work", PREPARE), writable=(self.run_dir,)))
        run_jobs(self.queue, self.worker_limits, self.jobs, self._on_phase, self._on_done, self.cancel)
        out = self.prepare_outcome
        if out is None or not out.ok:
            self._raise_prepare_failure(out)
        return report_isolated(self.run_dir, self.prepared.inputs_info, self.made, self.folders,
                               self.prepared.reference_id is not None, run_info, artifacts_dir, self.worker_limits,
                               self.early_output_names, self.statuses, self.emit)

    # -- prepare ------------------------------------------------------------------------------------------------
    def _on_phase(self, job_name: str, phase: str, data) -> None:
        if job_name == ROUTE_STEP:
            return
        if job_name != PREPARE:
            self._target_phase(job_name, phase)
        elif phase == PLAN_STEP[TARGETS].early and data:
            # The ExportedProgram is on disk: start what compiles from it while the ONNX export runs.
            early = Prepared.from_dict(data)
            self._captured(early)
            self.early_output_names = early.output_names
            self._queue(lambda t: t.from_exported_program)
            self.emit(ProgressEvent(ONNX, RUNNING))
        else:
            self.emit(ProgressEvent(phase, RUNNING))

    def _captured(self, prepared: Prepared) -> None:
        """Capture has written captured.json (the ExportedProgram's, or the final one): the first time, announce
        it and plan the targets and their probes."""
        first = self.prepared is None
        self.prepared = prepared
        if first:
            captured = captured_summary(self.run_dir)
            emit_captured(self.emit, prepared, self.run_dir, captured)
            self.probes = probes_of(captured)
            self.made = plan_targets(prepared.reference_id, self.targets, self.target_options, self.limits)

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
            self.queue.append(Job(name, PLAN_STEP[TARGETS].job,
                                  {**job_args, "target_class": f"{cls.__module__}:{cls.__qualname__}",
                                   "options": dict(target.options)},
                                  os.path.join(self.run_dir, "work", name), writable=writable_folders(self.run_dir, target)))

    def _on_done(self, out: Outcome) -> None:
        if out.name == ROUTE_STEP:
            self._route_done(out)
            return
        if out.name != PREPARE:
            self._target_done(out)
            return
        self.prepare_outcome = out
        if not out.ok:
            self.stop.set()        # targets that already started from the ExportedProgram stop too
            return
        final = Prepared.from_dict(out.value)
        if self.prepared is not None:
            self.emit(ProgressEvent(ONNX, "error" if final.onnx_error else "done", error=final.onnx_error))
        self._captured(final)
        if needs_route(final, self.targets):
            # The targets that compile ONNX start now; those that compile the route's program once it is written.
            self.emit(ProgressEvent(ROUTE, RUNNING))
            # torch's tracing touches the Inductor cache folder ($XC_HOME/cache/inductor) as Inductor does.
            self.queue.append(Job(ROUTE_STEP, PLAN_STEP[ROUTE_STEP].job,
                                  {"run_dir": self.run_dir, "limits": asdict(self.limits)},
                                  os.path.join(self.run_dir, "work", ROUTE_STEP),
                                  writable=(self.run_dir, _inductor_cache())))
            self._queue(lambda t: not t.takes_program)
        else:
            self._queue(lambda t: True)

    def _route_done(self, out: Outcome) -> None:
        """The route's worker has ended: its record is on disk (a worker that died leaves xc to write why)."""
        if self.stop.is_set():
            return
        if out.ok:
            error = out.value.get("error")
        else:
            error = f"the route's worker {out.error or 'ended without a result'}"
            save_route({"route": ROUTE_WORDS, "error": error, "evidence": "measured"}, self.run_dir)
        self.emit(ProgressEvent(ROUTE, ERROR if error else "done", error=error))
        self._queue(lambda t: True)

    def _raise_prepare_failure(self, out: Outcome | None) -> None:
        spec = self.spec["spec"]
        name = spec.split(":", 1)[1] if spec.startswith("sample:") else os.path.basename(spec)
        if out is None or out.cause == "cancelled":
            raise XcInputError(f"{name}: the analysis was cancelled")
        if out.input_error:
            e = out.input_error
            raise XcInputError(e["message"], fix=e.get("fix"), inputs=e.get("inputs"), dashboard=e.get("dashboard"))
        doing = _PHASE_WORDS.get(out.phase or "", "preparing the model")
        if out.cause == "exception":
            # An exception in xc's own code (not the model crashing a library): an internal error, as before.
            raise RuntimeError(f"{doing}: {out.error}")
        raise XcInputError(f"{name}: {doing} {out.error} — nothing was compiled", fix="limits")

    # -- targets ------------------------------------------------------------------------------------------------
    def _target_phase(self, job_name: str, phase: str) -> None:
        target = self.by_job[job_name]
        if job_name not in self.started:
            self.started.add(job_name)
            self.emit(ProgressEvent(TARGET, RUNNING, target=target.identity, index=self.finished,
                                    total=len(self.made)))
        self.emit(ProgressEvent(TARGET, RUNNING, target=target.identity, phase=phase, index=self.finished,
                                total=len(self.made)))

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
        self.emit(ProgressEvent(TARGET, status, target=target.identity, error=error, index=self.finished,
                                total=len(self.made)))


def report_isolated(run_dir: str, inputs_info: dict, made: list, folders: dict, has_reference: bool,
                    run_info: dict, artifacts_dir: str | None, limits: WorkerLimits,
                    early_output_names: list[str] | None = None, statuses: dict | None = None,
                    emit: Progress | None = None) -> dict:
    """Build the report in a worker too: drift, alignment and schema validation are seconds of pure Python
    that would otherwise hold a dashboard server's interpreter while sessions wait for pages.

    Every target has finished by now, so a failure here (a memory limit on a big model, a crash, a bug in an
    analysis) must not lose them: the report is built again without its optional parts (steps.report_job,
    lean), and if even that fails, a report of the targets' statuses is made here; either way run.report_error
    says what happened."""
    emit = emit or (lambda event: None)
    report_job = PLAN[-1].job
    items = [[t.identity, *folders[t.identity]] for t in made if t.identity in folders]
    args = {"run_dir": run_dir, "inputs_info": inputs_info, "results": items, "has_reference": has_reference,
            "run": run_info, "artifacts_dir": artifacts_dir,
            "early_output_names": early_output_names}
    job = Job("report", report_job, args, os.path.join(run_dir, "work", "report"), writable=(run_dir,))
    out = run_jobs([job], limits, 1)["report"]
    if out.ok:
        return read_report(os.path.join(job.workdir, "report.json"))
    failed = {"error": _report_failure(out), "detail": (out.detail or "")[-MAX_ERROR_DETAIL:] or None}
    # Its own step: a "report" event means the report is done to the dashboard's progress lines.
    emit(ProgressEvent(REPORT_RETRY, RUNNING, note="again without its optional parts", error=failed["error"]))
    lean = Job("report-lean", report_job, {**args, "lean": failed}, os.path.join(run_dir, "work", "report-lean"),
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
    return report


# Targets that compile with TorchInductor, whose kernel cache is shared between analyses ($XC_HOME/cache/inductor;
# a cold cache costs ≈20 s of C++ compiling): their workers may write there too.
_INDUCTOR_CACHE_USERS = {"inductor-cpu"}


def writable_folders(run_dir: str, target) -> tuple[str, ...]:
    """Where a target's worker may write (where Landlock confines it): its analysis' run folder (its artifacts,
    the probe models written beside the captured ONNX), and the Inductor cache for the targets that use it."""
    if target.id in _INDUCTOR_CACHE_USERS:
        return run_dir, _inductor_cache()
    return (run_dir,)


def _inductor_cache() -> str:
    from ..paths import home
    return os.path.join(home(), "cache", "inductor")


def _failure(target, out: Outcome) -> TargetResult:
    r = TargetResult(target=target.identity, status=ERROR, evidence=dict(target.evidence),
                     error_stage=out.phase, error_detail=(out.detail or "")[-MAX_ERROR_DETAIL:] or None)
    if out.input_error:
        r.error = out.input_error["message"]
    elif out.cause != "exception":
        r.error = out.error          # the reason in words: "killed by SIGSEGV in compile"
    else:
        r.error = f"{out.phase or 'worker'} failed: {out.error}"
    return r
