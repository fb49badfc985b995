"""`xc batch`: every model of a manifest analysed for every target, as one matrix.

Each model is one ordinary analysis (api.analyze), recorded in the run store like any other run, so every page and
export works on a matrix's cell. A cell whose run is already in the store — same source content, inputs, target and
its options, limits, xc and toolchain versions: the keys of xc_core/run_keys.py, which `xc analyze` and the dashboard
use too, so a cell any of them stored counts) — is not compiled again: it is marked `cached` and
names the run that made it. A model with every cell stored is not run at all; one with some compiles only the
others, in a run of its own. matrix.json is rewritten after every model, so a batch that is killed leaves the
models it finished both in the store and in the matrix (`complete: false`), and running it again resumes with the
rest.

Backends (`run_local`, fleet/ray_backend.py) only run analyses (fleet/model_run.py) and hand back each model's
Report; recording, the matrix and the files are done here, in one process, whichever ran them.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

from ..errors import XcInputError
from ..limits import Limits
from ..store import REPORT_FILE
from ..worker import WorkerLimits
from .cache import cell_keys, model_key, model_parts, source_sha256, target_identities, toolchain_versions
from .manifest import FleetModel, Manifest, folder_name
from .matrix import (
    RUNS_DIR,
    cells_from_report,
    new_matrix,
    skipped_cells,
    write_matrix,
)
from .model_run import ModelOutcome, Planned, analyze_model
from .ray_backend import run_ray

BACKENDS = ("local", "ray")
# What a run folder in the batch's output keeps once the run store holds the whole run: the report (and its
# sidecar and stage graphs), enough for `xc diff`, `xc batch merge` and History's import. Artifacts stay in the store.
_KEPT_WHEN_STORED = ("artifacts", "capture", "inputs.npz")


@dataclass
class BatchSettings:
    targets: list[str]
    out_dir: str
    options: list[str] = field(default_factory=list)     # --option flags, for every model (a model's own win)
    backend: str = "local"
    jobs: int | None = None                              # local: worker processes at once, across models
    limits: Limits = field(default_factory=Limits.from_env)
    worker_limits: WorkerLimits = field(default_factory=WorkerLimits.from_env)
    reuse: bool = True                                   # take matching runs from the store
    record: bool = True                                  # keep every run in the store
    ray_address: str | None = None                       # None: a local Ray started for this batch
    ray_cpus: float = 1.0                                # per model's task: its CPU request, and its worker jobs
    ray_memory_gib: float = 2.0                          # per model's task: its memory request (scheduling)
    store_root: str | None = None                        # the run store's folder (default: $XC_HOME)


def plan(models: list[FleetModel], settings: BatchSettings, toolchains: dict | None = None) -> list[Planned]:
    """Every model's analysis arguments and keys. A model that cannot be planned (its file is missing, a flag
    does not parse) gets its error here and is not run; the others are."""
    from ..inputs.values import parse_dim_flags, parse_range_flags, parse_shape_flags, parse_value_flags
    from ..targets import parse_target_options
    toolchains = toolchain_versions() if toolchains is None else toolchains
    out = []
    for i, m in enumerate(models):
        p = Planned(i, m, folder_name(m.name))
        try:
            options = parse_target_options(list(settings.options) + list(m.options), settings.targets)
            p.kwargs = {"inputs_npz": m.inputs, "shapes": parse_shape_flags(list(m.shape)),
                        "dims": parse_dim_flags(list(m.dim)), "values": parse_value_flags(list(m.value)),
                        "ranges": parse_range_flags(list(m.range)), "target_options": options,
                        "limits": settings.limits, "worker_limits": settings.worker_limits}
            p.sha256 = source_sha256(m.source)
            p.targets = list(settings.targets)
            identities = target_identities(p.targets, options)
            p.columns = {identity: column for column, identity in identities.items()}
            p.identities = identities
            p.cell_keys = cell_keys(model_parts(m, p.sha256, p.kwargs, settings.limits, toolchains), identities)
            p.key = model_key(p.cell_keys, p.targets, settings.worker_limits)
        except XcInputError as e:
            p.error = e.for_cli()
        out.append(p)
    return out


def run_batch(manifest: Manifest, models: list[FleetModel], settings: BatchSettings,
              shard: tuple[int, int] | None = None, on_model: Callable[[dict, list[dict]], None] | None = None,
              cancel=None) -> dict:
    """Analyse `models` (the manifest's, or a shard of them) and return the matrix, written to
    settings.out_dir as it fills. `on_model(row, cells)` is called as each model finishes (cached ones first)."""
    import threading

    from ..store import RunStore
    if settings.backend not in BACKENDS:
        raise XcInputError(f"--backend {settings.backend}: accepted {', '.join(BACKENDS)}")
    os.makedirs(os.path.join(settings.out_dir, RUNS_DIR), exist_ok=True)
    cancel = cancel or threading.Event()
    store = RunStore(settings.store_root)
    if not store.available and (settings.reuse or settings.record):
        from ..store import say_once
        say_once(f"the run store is not available ({store.problem}); the batch runs without reusing or keeping "
                 "runs, and every run folder keeps its files")
    matrix = new_matrix(manifest.path, settings.targets, settings.backend, shard)
    rows: dict[int, dict] = {}
    cells: dict[int, list[dict]] = {}

    def save(complete: bool = False) -> None:
        matrix["models"] = [rows[i] for i in sorted(rows)]
        matrix["cells"] = [c for i in sorted(cells) for c in cells[i]]
        matrix["complete"] = complete
        write_matrix(matrix, settings.out_dir)
        if store.available:
            try:
                store.put_fleet(matrix, settings.out_dir)     # the dashboard's Fleet page lists it
            except OSError:
                pass        # the matrix is in --out; only the page's list misses it

    def finish(outcome: ModelOutcome) -> None:
        p = outcome.planned
        run_dir = os.path.join(settings.out_dir, RUNS_DIR, p.folder)
        run_id, reports, row_cells = None, {}, []
        if outcome.report is not None:
            run_id = _keep(outcome, run_dir, store, settings)
            reports[run_id] = f"{RUNS_DIR}/{p.folder}/{REPORT_FILE}"
            row_cells = cells_from_report(p.model.name, outcome.report, run_id, outcome.cached, p.columns)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)      # what an earlier batch into this folder left
            if p.targets or not p.reused:
                row_cells = skipped_cells(p.model.name, p.targets or settings.targets, outcome.error or "not run")
        reused_cells, reused_reports = _reused_cells(p, run_dir, store, first=run_id is None)
        reports.update(reused_reports)
        order = {t: i for i, t in enumerate(settings.targets)}
        cells[p.index] = sorted(row_cells + reused_cells, key=lambda c: order.get(c["target"], len(order)))
        rows[p.index] = _row(p, outcome, reports, cells[p.index])
        save()
        if on_model:
            on_model(rows[p.index], cells[p.index])

    toolchains = toolchain_versions()
    planned = plan(models, settings, toolchains)
    reusable = _reusable_cells(store) if settings.reuse and store.available else {}
    pending = []
    for p in planned:
        if p.error:
            finish(ModelOutcome(p, error=p.error))
        elif settings.reuse and store.available and store.has(p.key) and (report := store.get(p.key)) is not None:
            finish(ModelOutcome(p, report=report, cached=True))
        elif _take_reused(p, reusable, settings):
            finish(ModelOutcome(p, cached=True))           # every cell is in the store, from several runs
        else:
            pending.append(p)
    save()
    if pending:
        if settings.backend == "ray":
            run_ray(pending, settings, finish, cancel)
        else:
            run_local(pending, settings, finish, cancel)
    save(complete=not cancel.is_set() and len(rows) == len(planned))
    return matrix


def run_local(pending: list[Planned], settings: BatchSettings, finish: Callable[[ModelOutcome], None],
              cancel) -> None:
    """This machine's worker pool across models: up to `jobs` worker processes at once. With at least as many
    models as jobs, each model's targets run one after another and `jobs` models run side by side (a model's
    load and capture, which its targets wait for, then overlap another model's targets); with fewer models each
    gets a share of the jobs."""
    from ..api import default_jobs
    jobs = settings.jobs or default_jobs()
    at_once = max(1, min(jobs, len(pending)))
    per_model = max(1, jobs // at_once)
    with ThreadPoolExecutor(at_once, thread_name_prefix="xc-batch") as pool:
        futures = [pool.submit(analyze_model, p, p.targets,
                               os.path.join(settings.out_dir, RUNS_DIR, p.folder), per_model, cancel)
                   for p in pending]
        try:
            for f in as_completed(futures):
                finish(f.result())
        except BaseException:
            cancel.set()            # Ctrl-C, SIGTERM: the running analyses stop their workers and return
            for f in futures:
                f.cancel()
            raise


def _reusable_cells(store) -> dict[str, str]:
    """cell key → the newest stored run that holds that cell (from the store's run list, no report opened)."""
    out: dict[str, str] = {}
    for r in store.runs():                   # newest first
        for key in ((r.get("summary") or {}).get("cell_keys") or {}).values():
            out.setdefault(key, r["key"])
    return out


def _take_reused(p: Planned, reusable: dict[str, str], settings: BatchSettings) -> bool:
    """Take the cells of `p` that stored runs hold (p.reused); p.targets and p.key are left for the rest. True
    when nothing is left to compile."""
    for t in p.targets:
        run = reusable.get(p.cell_keys.get(t))
        if run is not None:         # listed by store.runs(), so whole; one evicted since is said in its cells
            p.reused[t] = run
    if not p.reused:
        return False
    p.targets = [t for t in p.targets if t not in p.reused]
    p.key = model_key(p.cell_keys, p.targets, settings.worker_limits)
    return not p.targets


def _reused_cells(p: Planned, run_dir: str, store, first: bool) -> tuple[list[dict], dict[str, str]]:
    """The cells `p` takes from stored runs, and those runs' reports written into its folder of the output (the
    first at its top when the batch made no run for it, the others in a folder named by run id), so the output
    diffs run by run without the store: (cells, run id → report path relative to matrix.json)."""
    from ..report.sidecar import write as write_report
    by_run: dict[str, set[str]] = {}
    for t, run in p.reused.items():
        by_run.setdefault(run, set()).add(t)
    cells, paths = [], {}
    for run, targets in by_run.items():
        report = store.get(run)
        if report is None:      # evicted since the batch looked: say so in the cells, the next batch compiles them
            cells += skipped_cells(p.model.name, sorted(targets), f"its stored run {run[:12]} left the run store "
                                                                  "while the batch ran; run the batch again")
            continue
        sub = "" if first else run[:12]
        first = False
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
        write_report(report, os.path.join(run_dir, sub))
        paths[run] = "/".join(x for x in (RUNS_DIR, p.folder, sub, REPORT_FILE) if x)
        cells += cells_from_report(p.model.name, report, run, True, p.columns, only=targets)
    return cells, paths


def _keep(outcome: ModelOutcome, run_dir: str, store, settings: BatchSettings) -> str | None:
    """The run's report in its folder of the output, and the whole run in the store; its run id, or None when
    the store did not keep it (then the folder keeps every file)."""
    from ..report.sidecar import write as write_report
    p, report = outcome.planned, outcome.report
    if outcome.cached:
        shutil.rmtree(run_dir, ignore_errors=True)      # what an earlier batch into this folder left
        os.makedirs(run_dir, exist_ok=True)
        write_report(report, run_dir)
        return p.key
    os.makedirs(run_dir, exist_ok=True)
    report.setdefault("run", {})["key"] = p.key
    # Each target's cell key, by the identity the report names it by (xc_core/run_keys.py): a later batch with
    # other targets, or `xc analyze --reuse`, reuses this run's cells.
    report["run"]["cell_keys"] = {p.identities[t]: p.cell_keys[t] for t in p.targets if t in p.cell_keys}
    write_report(report, run_dir)
    if not (settings.record and store.available):
        return None
    try:
        store.put(p.key, report, run_dir, origin="batch")
    except OSError as e:
        from ..store import say_once
        say_once(f"warning: a run was not recorded in the store ({e}); its folder keeps every file")
        return None
    for name in _KEPT_WHEN_STORED:
        path = os.path.join(run_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.remove(path)
    return p.key


def _row(p: Planned, outcome: ModelOutcome, reports: dict[str | None, str], cells: list[dict]) -> dict:
    """The model's row: its run (the one made for it, or the first it takes cells from) and every run its cells
    come from, each with its report beside matrix.json."""
    source = p.model.source if p.model.source.startswith("sample:") else os.path.basename(p.model.source)
    ran = bool(reports)
    run, report = next(iter(reports.items()), (None, None))
    return {"name": p.model.name, "source": source, "sha256": p.sha256, "run": run, "report": report,
            "runs": {k: v for k, v in reports.items() if k}, "status": "ok" if ran else "error",
            "error": None if ran else outcome.error, "cached": bool(cells) and all(c["cached"] for c in cells),
            "seconds": round(outcome.seconds, 2), "node": outcome.node}
