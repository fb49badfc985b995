"""Isolation and culprit search on a finished run: one worker per target (the usual limits), each adding the
`isolation` block to its target in the report. `xc analyze --isolate` runs it before the report is written; the
Drift page's button and `xc repro` run it on a stored run (`isolate_stored`), which is put back under its key.

Which targets: those that ran numbers, a sub-set when asked. Culprit search runs for a target whose output drift
is above the gate (rel L2 gate, or non-finite outputs); isolation runs for every chosen target.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from typing import Callable

from ..errors import XcInputError, first_line
from ..pipeline.plan import CAPTURE_DIR
from .metrics import DEFAULT_GATES, default_gates

PROGRAM_FILE = "exported_program.pt2"


def candidates(report: dict) -> list[dict]:
    """The report's targets that ran and were compared (isolation needs a target that gives numbers)."""
    return [{**t, "identity": t.get("identity") or key, "_block": t}
            for key, t in (report.get("targets") or {}).items()
            if t.get("status") == "ok" and (t.get("drift") or {}).get("outputs")]


def drift_above_gate(target: dict, gates: dict) -> bool:
    """The target's output drift is above the rel L2 gate, or its outputs are non-finite."""
    outputs = ((target.get("drift") or {}).get("outputs") or {}).values()
    bound = gates.get("rel_l2", DEFAULT_GATES["rel_l2"])
    return any(o.get("finite") is False or (o.get("rel_l2") or 0.0) > bound for o in outputs)


def choose(report: dict, asked: list[str] | None) -> list[dict]:
    """The targets to isolate: `asked` (ids or identities), else every candidate. Unknown names: one line."""
    pool = candidates(report)
    if not asked:
        return pool
    by_name = {}
    for t in pool:
        by_name.setdefault(t["identity"] or t["id"], t)
        by_name.setdefault(t["id"], t)
    unknown = [a for a in asked if a not in by_name]
    if unknown:
        raise XcInputError(f"cannot isolate {', '.join(unknown)}: not a target of this run that ran numbers; "
                           f"these did: {', '.join(t['identity'] or t['id'] for t in pool) or 'none'}")
    return list({by_name[a]["identity"]: by_name[a] for a in asked}.values())


def isolate_report(report: dict, run_dir: str, targets: list[str] | None = None, gates: dict | None = None,
                   worker_limits=None, jobs: int = 1, search: bool = True,
                   say: Callable[[str], None] | None = None) -> dict:
    """Add `isolation` to the chosen targets of `report` (in place; returned too). `run_dir` holds the run's
    capture/ and inputs.npz; repro bundles go to its artifacts/<target>/repro/. `gates`: the same for every target;
    None: each target's default (int8 targets are judged by INT8_GATES)."""
    from ..limits import Limits
    from ..targets import REGISTRY, parse_target_spec
    from ..worker import Job, WorkerLimits, run_jobs
    from ..pipeline.scheduler import writable_folders as writable_for
    from .job import BLOCK_FILE, read_block
    asked_gates = gates       # None: each target's default (culprit/metrics.default_gates)
    say = say or (lambda line: None)
    program, route = _program(report, run_dir)
    chosen = choose(report, targets)
    capture_graph = ((report.get("capture") or {}).get("graph") or {}).get("nodes") or []
    op_info = {n["id"]: {"op_type": n.get("op_type"), "module_path": n.get("module_path")} for n in capture_graph}
    input_names = route["program_inputs"] if route and route.get("program_inputs") is not None else \
        [s["name"] for s in (report.get("source") or {}).get("inputs") or []]
    limits = Limits.from_env()
    jobs_list, by_job, job_gates = [], {}, {}
    for t in chosen:
        tid, options = parse_target_spec(t.get("identity") or t["id"])
        cls = REGISTRY[tid]
        target = cls(**options)
        folder_name = target.folder_name
        name = f"isolate-{folder_name}"
        gates = dict(asked_gates) if asked_gates is not None else default_gates(t.get("declared_precisions"))
        if route is not None and not cls.takes_program:
            t["_block"]["isolation"] = _refused(t, gates, (
                f"per-op isolation cuts a PyTorch program; for an ONNX source that is the ONNX → PyTorch route's "
                f"program, which {tid} does not compile (it compiles the ONNX itself); the targets that compile "
                f"the route's program can be isolated"))
            continue
        args = {"run_dir": run_dir, "target_class": f"{cls.__module__}:{cls.__qualname__}", "options": options,
                "limits": asdict(limits), "gates": gates, "input_names": input_names,
                "identity": t.get("identity") or t["id"], "folder_name": folder_name,
                "search": search and drift_above_gate(t, gates),
                "evidence": (t.get("evidence") or {}).get("numerics"),
                "declared_precisions": list(t.get("declared_precisions") or []),
                "carried": _carried(t), "nodes_of": _nodes_of(t), "op_info": op_info, "program": program,
                "origin": (route or {}).get("origin")}
        jobs_list.append(Job(name, "xc_core.culprit.job:isolate_job", args, os.path.join(run_dir, "work", name),
                             writable=writable_for(run_dir, target)))
        by_job[name] = t
        job_gates[name] = gates
    worker_limits = worker_limits or WorkerLimits.from_env()
    for job in jobs_list:
        job.args["timeout_s"] = worker_limits.timeout_s
    say(f"isolating ops on {len(jobs_list)} target(s)")
    outcomes = run_jobs(jobs_list, worker_limits, parallel=max(1, jobs))
    for name, t in by_job.items():
        out = outcomes.get(name)
        folder = os.path.join(run_dir, "work", name)
        if out is not None and out.ok:
            t["isolation"] = read_block(folder)
        elif out is not None and out.phase == "search" and os.path.isfile(os.path.join(folder, BLOCK_FILE)):
            # Killed while searching (a time or memory limit): the isolation it wrote before stands.
            t["isolation"] = read_block(folder)
            t["isolation"]["culprit"] = {"status": "not-found", "runs": 0, "trials": [],
                                         "why": f"the search was stopped: {first_line(Exception(out.error), 300)}"}
        else:
            why = (out.error if out is not None else "not run") or "failed"
            t["isolation"] = _refused(t, job_gates[name], f"isolation failed: {first_line(Exception(why), 300)}")
        culprit = (t["isolation"].get("culprit") or {})
        if culprit.get("sentence"):
            say(culprit["sentence"])
        t["_block"]["isolation"] = t["isolation"]
        shutil.rmtree(os.path.join(run_dir, "work", name), ignore_errors=True)
    # The checklist's question 4 names the ops above the gate and the culprit: made again with the blocks in.
    from ..analysis.checklist import checklist
    report["checklist"] = checklist(report, (report.get("fusion_matrix") or {}).get("not_fired", []))
    return report


def _program(report: dict, run_dir: str) -> tuple[str, dict | None]:
    """The PyTorch program isolation cuts (relative to the run folder) and, for an ONNX source, the route record
    whose program it is. One line when there is none."""
    from ..pipeline.plan import ROUTE_FILE
    captured = os.path.join(CAPTURE_DIR, PROGRAM_FILE)
    if os.path.isfile(os.path.join(run_dir, captured)):
        return captured, None
    route_file = os.path.join(run_dir, CAPTURE_DIR, ROUTE_FILE)
    if os.path.isfile(route_file):
        import json
        with open(route_file) as f:
            route = json.load(f)
        # The route's program is in the run folder's artifacts/capture/ (its recorded path is where it was made).
        program = os.path.join("artifacts", "capture", os.path.basename(route.get("program_path") or ""))
        if route.get("program_path") and os.path.isfile(os.path.join(run_dir, program)):
            return program, route
    kind = (report.get("source") or {}).get("kind", "this")
    raise XcInputError(f"per-op isolation cuts a PyTorch program into sub-programs; this {kind} source has none "
                       f"(accepted: a PyTorch source — a sample, .pt2, TorchScript or state dict — or an ONNX "
                       f"source whose ONNX → PyTorch route ran, for the targets that compile its program)")


def _refused(t: dict, gates: dict, why: str) -> dict:
    return {"evidence": (t.get("evidence") or {}).get("numerics"), "method": "", "gates": gates, "ops": [],
            "isolated": 0, "above_gate": [], "not_isolated": [], "error": why}


def _carried(t: dict) -> dict:
    points = ((t.get("layer_drift") or {}).get("points")) or []
    return {p["source_op"]: p.get("rel_l2") for p in points if p.get("verified", True) and p.get("rel_l2") is not None}


def _nodes_of(t: dict) -> dict:
    out: dict[str, list] = {}
    for n in ((t.get("graph") or {}).get("nodes")) or []:
        if n.get("kind") in ("compute", "cast"):
            for s in n.get("source_ops") or []:
                out.setdefault(s, []).append(n["id"])
    return out


def isolate_stored(run_key: str, targets: list[str] | None = None, gates: dict | None = None,
                   say: Callable[[str], None] | None = None, store=None) -> dict:
    """Isolation on a run in the store: its files copied back to a scratch folder, the blocks added, the run put
    back under the same key (its repro bundles with it). Returns the updated report; one line when it cannot."""
    from ..paths import scratch_dir
    from ..store import RunStore
    store = store or RunStore()
    # One extension of a run at a time: a second session's isolation starts from the run the first put back.
    with store.updating(run_key):
        report = store.get(run_key)
        if report is None:
            raise XcInputError(f"no run {run_key!r} in the run store; `xc runs` lists them")
        folder = scratch_dir("isolate")
        try:
            store.materialize(run_key, folder)
            isolate_report(report, folder, targets, gates, say=say)
            # Put back as it was listed: who started it and from where (the dashboard, the CLI) stay.
            row = next((r for r in store.runs() if r["key"] == run_key), {})
            store.put(run_key, report, run_dir=folder, origin=(row.get("summary") or {}).get("origin") or "cli",
                      user=row.get("user"))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return report
