"""The fleet matrix: one cell per model × target, read from that model's ordinary run (its Report).

matrix.json (schema "xc-matrix/1"):

    {"schema": "xc-matrix/1", "xc_version", "created_at", "complete": bool (false while a batch runs or after
     it was stopped), "manifest": file name, "targets": [target id…] (the columns), "shards": [{"index",
     "count"}…] (the shards merged into it; [] for a whole manifest), "backend": "local" | "ray" | "merged",
     "toolchains": {distribution: version}, "host": {"cpu", "cores"},
     "models": [{"name", "source" (a path's file name, or sample:NAME), "sha256", "run" (the run made for it, or
                 the first its cells were taken from: its id in the run store, or null), "report" (that run's
                 report.json relative to matrix.json, or null), "runs": {run id: report.json relative to
                 matrix.json} (every run its cells come from), "status": "ok" | "error" (the model itself was
                 refused: no target ran), "error", "cached": bool (every cell), "seconds", "node"}…],
     "cells": [{"model", "target" (its column: a target id), "identity" (the target with the options it ran with),
                "family", "status": "ok" | "error" | "unavailable" | "skipped" (no report: the model failed),
                "cached", "error", "advice", "run" (the run that made this cell),
                "accelerated_share", "fallbacks", "fusions", "worst_drift", "time_us":
                    each null (not applicable or not known) or {"value", "evidence"} — evidence kinds as in the
                    report; worst_drift also names its "output", time_us its "host_cpu"}…]}

A cell is `cached` when it came from a run in the run store instead of being compiled again (same source, inputs,
target and its options, limits and toolchain versions: fleet/cache.py).
"""
from __future__ import annotations

import json
import os
import time

from ..errors import XcInputError

SCHEMA = "xc-matrix/1"
MATRIX_FILE = "matrix.json"
RUNS_DIR = "runs"
METRICS = ("accelerated_share", "fallbacks", "fusions", "worst_drift", "time_us")
MAX_MATRIX_BYTES = 64 << 20


def family(target: str) -> str:
    """A target's family for filters: its id up to the first dash ('ort-cpu[level=basic]' → 'ort')."""
    return target.split("[", 1)[0].split("-", 1)[0]


def cells_from_report(model: str, report: dict, run: str | None, cached: bool, columns: dict[str, str] | None = None,
                      only: set[str] | None = None) -> list[dict]:
    """The model's cells from one report: one per target (of the columns `only`, when given). `columns` maps a
    target's identity in the report to its column, the target as --targets named it: a model's own options
    ('openvino-cpu[inference_precision=f32]') change the identity, not the column; the identity is kept beside it."""
    from ..review.diff import accelerated_share
    cells = []
    for identity, t in report.get("targets", {}).items():
        tid = (columns or {}).get(identity, identity)
        if only is not None and tid not in only:
            continue
        ev = t.get("evidence") or {}
        ok = t.get("status") == "ok"
        share = accelerated_share(t) if ok else None
        part = (t.get("info") or {}).get("partitioning") or {}
        fusions = t.get("fusions") if ok else None
        cells.append({
            "model": model, "target": tid, "identity": identity, "family": family(tid), "status": t.get("status"),
            "cached": cached,
            "error": t.get("error"), "advice": _advice(t.get("advice")), "run": run,
            "accelerated_share": _figure(share, part.get("evidence") or ev.get("assignment")),
            "fallbacks": _figure(_fallback_count(t), ev.get("assignment")) if ok and t.get("accelerated") else None,
            "fusions": _figure(fusions.get("count"), fusions.get("evidence") or ev.get("fusion"))
            if isinstance(fusions, dict) else None,
            "worst_drift": _drift(t) if ok else None,
            "time_us": _time(t) if ok else None,
        })
    return cells


def _figure(value, evidence) -> dict | None:
    return None if value is None else {"value": value, "evidence": evidence or "unknown"}


def _fallback_count(t: dict) -> int | None:
    nodes = (t.get("graph") or {}).get("nodes")
    return None if nodes is None else sum(1 for n in nodes if n.get("fallback"))


def _drift(t: dict) -> dict | None:
    worst = (t.get("drift") or {}).get("worst") or {}
    if worst.get("rel_l2") is None:
        return None
    return {"value": worst["rel_l2"], "evidence": (t.get("evidence") or {}).get("numerics") or "unknown",
            "output": worst.get("output")}


def _time(t: dict) -> dict | None:
    """The measured time of one whole run: the toolchain's own figure for the run, else the sum over its nodes
    when every compute node was timed. A partial sum (only the nodes left on this CPU) is not a model's time."""
    nt = t.get("node_times") or {}
    if nt.get("evidence") != "measured":
        return None
    value = nt.get("run_us")
    if value is None and nt.get("compute_nodes") and nt.get("compute_nodes_timed") == nt.get("compute_nodes"):
        value = nt.get("timed_us")
    if value is None:
        return None
    return {"value": round(float(value), 3), "evidence": "measured", "host_cpu": nt.get("host_cpu")}


def _advice(advice) -> str | None:
    if not advice:
        return None
    from ..analysis.advice import advice_line
    return advice_line(advice)


def skipped_cells(model: str, targets: list[str], error: str) -> list[dict]:
    """A model refused before any target ran (a file that is not a model, bad inputs): a row saying so."""
    return [{"model": model, "target": t, "identity": t, "family": family(t), "status": "skipped", "cached": False,
             "error": error, "advice": None, "run": None, **{m: None for m in METRICS}} for t in targets]


def new_matrix(manifest: str, targets: list[str], backend: str, shard: tuple[int, int] | None) -> dict:
    from .. import __version__
    from .cache import toolchain_versions
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return {"schema": SCHEMA, "xc_version": __version__, "created_at": _now(), "complete": False,
            "manifest": os.path.basename(manifest.rstrip("/\\")) or manifest, "targets": list(targets),
            "shards": [{"index": shard[0], "count": shard[1]}] if shard else [], "backend": backend,
            "toolchains": toolchain_versions(), "host": {"cpu": _cpu_name(), "cores": cores},
            "models": [], "cells": []}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _cpu_name() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def write_matrix(matrix: dict, out_dir: str) -> str:
    from ..paths import write_text_atomic
    path = os.path.join(out_dir, MATRIX_FILE)
    write_text_atomic(path, json.dumps(matrix, indent=1) + "\n")     # indented: read and diffed in CI artifacts
    return path


def read_matrix(ref: str) -> tuple[dict, str]:
    """(matrix, its folder) from a batch's folder or its matrix.json; bad input raises XcInputError."""
    path = os.path.join(ref, MATRIX_FILE) if os.path.isdir(ref) else ref
    if not os.path.isfile(path):
        raise XcInputError(f"{ref}: no {MATRIX_FILE} there (accepted: a folder written by xc batch --out, or its "
                           f"{MATRIX_FILE})")
    if os.path.getsize(path) > MAX_MATRIX_BYTES:
        raise XcInputError(f"{os.path.basename(path)}: bigger than {MAX_MATRIX_BYTES >> 20} MiB; not a matrix "
                           "xc batch writes")
    try:
        with open(path, "rb") as f:
            return parse_matrix(f.read(), os.path.basename(path)), os.path.dirname(os.path.abspath(path))
    except OSError as e:
        raise XcInputError(f"{path}: cannot read ({e.strerror})") from None


def parse_matrix(data: bytes, name: str) -> dict:
    """A matrix from bytes (a file, an upload); checked enough that every view can read it."""
    try:
        m = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise XcInputError(f"{name}: not JSON (accepted: a {MATRIX_FILE} written by xc batch)") from None
    if not isinstance(m, dict) or m.get("schema") != SCHEMA:
        raise XcInputError(f"{name}: not an xc matrix (schema {SCHEMA}); a report.json opens on History")
    if not isinstance(m.get("models"), list) or not isinstance(m.get("cells"), list):
        raise XcInputError(f"{name}: an xc matrix without its models or cells lists")
    for c in m["cells"]:
        if not isinstance(c, dict) or not isinstance(c.get("model"), str) or not isinstance(c.get("target"), str):
            raise XcInputError(f"{name}: a cell without its model and target names")
        for k in METRICS:
            f = c.get(k)
            if f is not None and (not isinstance(f, dict) or not isinstance(f.get("value"), (int, float))
                                  or isinstance(f.get("value"), bool)):
                raise XcInputError(f"{name}: cell {c['model']} × {c['target']}: {k} is not a figure")
    return m


def merge(matrices: list[tuple[dict, str]]) -> dict:
    """One matrix from several (CI shards): models in the order met, a model in two inputs taken from the later
    one. Targets are the union in order; shards listed."""
    if not matrices:
        raise XcInputError("merge: give at least one batch folder")
    first = matrices[0][0]
    out = {**first, "created_at": _now(), "backend": "merged", "targets": [], "shards": [], "models": [],
           "cells": []}
    models: dict[str, dict] = {}
    cells: dict[tuple[str, str], dict] = {}
    for m, _folder in matrices:
        for t in m.get("targets", []):
            if t not in out["targets"]:
                out["targets"].append(t)
        out["shards"] += m.get("shards") or []
        for row in m["models"]:
            models.pop(row["name"], None)
            models[row["name"]] = row
            for key in [k for k in cells if k[0] == row["name"]]:
                del cells[key]
        for c in m["cells"]:
            cells[(c["model"], c["target"])] = c
    out["models"] = list(models.values())
    out["cells"] = list(cells.values())
    out["complete"] = all(m.get("complete") for m, _ in matrices)
    return out


def grid(matrix: dict) -> tuple[list[str], list[str], dict[tuple[str, str], dict]]:
    """(model names, targets, (model, target) → cell): the matrix as rows and columns."""
    models = [r["name"] for r in matrix["models"]]
    targets = list(matrix.get("targets") or dict.fromkeys(c["target"] for c in matrix["cells"]))
    return models, targets, {(c["model"], c["target"]): c for c in matrix["cells"]}


def counts(matrix: dict) -> dict:
    """Cells by status, and how many were cached."""
    out = {"cells": len(matrix["cells"]), "cached": sum(1 for c in matrix["cells"] if c.get("cached"))}
    for c in matrix["cells"]:
        out[c["status"]] = out.get(c["status"], 0) + 1
    return out
