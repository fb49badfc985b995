"""The one façade the CLI and the dashboard call: analyze(source, targets, ...) -> Report (a plain dict)."""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
from dataclasses import asdict

from . import gc_policy
from .errors import XcInputError
from .inputs.values import npz_shapes, read_npz
from .limits import Limits
from .paths import WORK_DIR, claim_work_dir, scratch_dir
from .pipeline import CAPTURE_DIR, CAPTURED_FILE, IsolatedRun, run_here
from .progress import LOAD, REPORT, RUNNING, Progress, ProgressEvent, ignore
from .report.sidecar import write as write_report
from .sources.spec import ShapeOverrides, Source
from .targets import ERROR, default_target_ids
from .worker import WorkerLimits, confinement


def analyze(source: str | Source, targets: list[str] | None = None, *, inputs_npz: str | None = None,
            shapes: ShapeOverrides | None = None, dims: dict[str, int] | None = None,
            values: dict[str, float] | None = None, ranges: dict[str, tuple[float, float]] | None = None,
            out_dir: str | None = None, target_options: dict[str, dict] | None = None,
            progress: Progress | None = None, limits: Limits | None = None,
            worker_limits: WorkerLimits | None = None, jobs: int | None = None,
            cancel: threading.Event | None = None, isolate: bool = True, culprits: dict | None = None,
            data: str | None = None, preprocess: str | None = None, task: str | None = None,
            metric: str | None = None, top_k: int | None = None) -> dict:
    """Load, capture, compile for each target (default: `default_target_ids()`), compare, and return the Report.

    Inputs: `inputs_npz` arrays, `shapes` (whole inputs), `dims` (named symbolic dims), `values` (every element of
    an input), `ranges` (integer inputs); every other symbolic dim is picked by name and role and probed on the
    reference (xc_core.inputs.shapes). Bad input raises XcInputError (one line). A target that fails — an
    exception, a crash, a hang past `worker_limits.timeout_s`, memory past `worker_limits.memory_gib` — is an
    `error` entry in the report; the others still complete.

    A source given as a path or `sample:NAME` is loaded, captured and compiled in isolated worker processes
    (xc_core.worker), up to `jobs` targets at once (default: the machine's cores). A `Source` object built in
    this process (a module you hold) runs here, one target after another; so does everything with
    `isolate=False` (a debugger, a test that patches xc).

    With `out_dir`, writes report.json, inputs.npz, capture/ and artifacts/<target>/ there; without, the run
    folder is scratch space removed when this returns.

    `data` (an .npz, a folder or a .zip of samples, xc_core/inputs/dataset.py) runs every sample on every target
    for task accuracy (each target's `accuracy`, the report's `dataset`), with the named `preprocess` for images
    and audio, the `task` (auto | classification | per-sample), the per-sample `metric` and `top_k`; a bundled
    sample with a dataset of its own runs that one when no `data` is given. `limits` bound every file, archive and input (default:
    `Limits.from_env()`). Whatever loading unpacked is removed when this returns, also on error.
    """
    emit = progress or ignore
    targets = list(targets) if targets else default_target_ids()
    target_options = target_options or {}
    limits = limits or Limits.from_env()
    worker_limits = worker_limits or WorkerLimits.from_env()
    jobs = default_jobs() if jobs is None else max(1, int(jobs))
    user_arrays = read_npz(inputs_npz, limits) if inputs_npz else None
    dataset = dataset_request(data, preprocess, task, metric, top_k)
    # TorchScript records no shapes at all: its loader needs them (from --shape or the .npz) to know its inputs.
    loader_shapes = {**(npz_shapes(user_arrays) if user_arrays else {}), **(shapes or {})}
    isolated = isinstance(source, str) and isolate
    owned = None
    run_dir = os.path.abspath(out_dir) if out_dir else scratch_dir("run")
    os.makedirs(run_dir, exist_ok=True)
    # The workers' job folders: removed when this returns, however; a killed run's are removed here, at the next
    # run into the same folder.
    claim_work_dir(run_dir)
    try:
        run_info = {"isolated": isolated, "jobs": jobs if isolated else 1, "limits": worker_limits.to_dict()}
        if isolated:
            run_info["confinement"] = confinement()
        artifacts_dir = "artifacts" if out_dir else None     # relative to report.json
        if isolated:
            spec = {"spec": source, "loader_shapes": loader_shapes, "shapes": shapes, "dims": dims,
                    "values": values, "ranges": ranges, "inputs_npz": inputs_npz, "limits": asdict(limits),
                    "dataset": dataset}
            run = IsolatedRun(spec, run_dir, targets, target_options, limits, worker_limits, jobs, emit, cancel)
            report = run.run(run_info, artifacts_dir)
        else:
            emit(ProgressEvent(LOAD, RUNNING))
            if isinstance(source, str):
                from .sources import load_source
                with gc_policy.fewer_collections():
                    source = owned = load_source(source, loader_shapes, limits)
            prepare_args = {"shapes": shapes, "dims": dims, "values": values, "ranges": ranges,
                            "user_arrays": user_arrays, "loader_shapes": loader_shapes, "inputs_npz": inputs_npz,
                            "dataset": dataset}
            report = run_here(source, run_dir, targets, target_options, limits, prepare_args, emit, run_info,
                              artifacts_dir)
        if culprits is not None:
            from .culprit.run import isolate_report
            emit(ProgressEvent(REPORT, RUNNING))
            try:
                isolate_report(report, run_dir, culprits.get("targets"), culprits.get("gates"), worker_limits, jobs)
            except XcInputError as e:       # the analysis stands; why there is no isolation goes with it
                report.setdefault("run", {})["isolation_error"] = str(e)
        if out_dir:
            with gc_policy.fewer_collections():
                write_report(report, run_dir)
            # capture/captured.json was the workers' hand-off; the report holds those graphs now, and a second copy
            # is kept nowhere (18 MB at 20,000 nodes).
            with contextlib.suppress(OSError):
                os.remove(os.path.join(run_dir, CAPTURE_DIR, CAPTURED_FILE))
        emit(ProgressEvent(REPORT, "done"))
        return report
    finally:
        if owned is not None:
            owned.close()
        shutil.rmtree(os.path.join(run_dir, WORK_DIR), ignore_errors=True)
        if not out_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def dataset_request(data: str | None, preprocess: str | None = None, task: str | None = None,
                    metric: str | None = None, top_k: int | None = None) -> dict | None:
    """What prepare loads the dataset with (inputs/dataset.py), its options checked before anything runs."""
    from .inputs.dataset import check_options
    check_options(preprocess, task, metric, top_k)
    if data and not os.path.exists(data):
        raise XcInputError(f"--data {os.path.basename(data.rstrip('/')) or data}: no such file or folder (accepted: "
                           "an .npz, a folder or a .zip of samples)")
    options = {"preprocess": preprocess, "task": task, "metric": metric,
               "top_k": int(top_k) if top_k is not None else None}
    if not data and not any(options.values()):
        return None
    return {"path": os.path.abspath(data) if data else None, **options}


def default_jobs() -> int:
    """Targets at once: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def failed_targets(report: dict) -> list[str]:
    return [t for t, b in report["targets"].items() if b["status"] == ERROR]


__all__ = ["analyze", "failed_targets", "XcInputError"]
