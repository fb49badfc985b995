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
                "accelerated_share", "fallbacks", "fusions", "worst_drift", "time_us", "accuracy",
                "peak_memory_mb", "artifact_bytes":
                    each null (not applicable or not known) or {"value", "evidence"} — evidence kinds as in the
                    report; worst_drift also names its "output", time_us its "host_cpu"; accuracy (where the run
                    had a dataset) is top-1 against the labels ("of": "top-1", with the reference's as
                    "reference") or, without labels, top-1 agreement with the reference ("of": "agreement");
                    peak_memory_mb and artifact_bytes are the run's measured cost on its host}…]}

A cell is `cached` when it came from a run in the run store instead of being compiled again (same source, inputs,
target and its options, limits and toolchain versions: fleet/cache.py).
"""
from __future__ import annotations

import json
import os
import re
import time

from ..errors import XcInputError
from ..report.types import Report, TargetBlock

SCHEMA = "xc-matrix/1"
MATRIX_FILE = "matrix.json"
RUNS_DIR = "runs"
METRICS = ("accelerated_share", "fallbacks", "fusions", "worst_drift", "time_us", "accuracy", "peak_memory_mb",
           "artifact_bytes")
ACCURACY_OF = ("top-1", "agreement")
MAX_MATRIX_BYTES = 64 << 20


def family(target: str) -> str:
    """A target's family for filters: its id up to the first dash ('ort-cpu[level=basic]' → 'ort')."""
    return target.split("[", 1)[0].split("-", 1)[0]


def cells_from_report(model: str, report: Report | dict, run: str | None, cached: bool,
                      columns: dict[str, str] | None = None, only: set[str] | None = None) -> list[dict]:
    """The model's cells from one report (a Report or its dict): one per target (of the columns `only`, when given).
    `columns` maps a target's identity in the report to its column, the target as --targets named it: a model's own
    options ('openvino-cpu[inference_precision=f32]') change the identity, not the column; the identity is kept
    beside it."""
    from ..review.diff import accelerated_share
    from ..views.typed_report import as_report
    # review.diff.accelerated_share reads a target's dict: the one the report was read from, when it was one.
    raw_targets = report.get("targets") or {} if isinstance(report, dict) else None
    report = as_report(report)
    cells = []
    for identity, t in report.targets.items():
        tid = (columns or {}).get(identity, identity)
        if only is not None and tid not in only:
            continue
        ev = t.evidence
        ok = t.status == "ok"
        share = accelerated_share(raw_targets[identity] if raw_targets is not None else t.to_dict()) if ok else None
        fusions = t.fusions if ok else None
        cells.append({
            "model": model, "target": tid, "identity": identity, "family": family(tid), "status": t.status,
            "cached": cached,
            "error": t.error, "advice": _advice(t.advice.to_dict() if t.advice else None), "run": run,
            "accelerated_share": _figure(share, t.info.partitioning.evidence or ev.get("assignment")),
            "fallbacks": _figure(_fallback_count(t), ev.get("assignment")) if ok and t.accelerated else None,
            # A fusions block written without its count (none xc wrote) has no figure, as before it was typed.
            "fusions": _figure(fusions.count if "count" in (fusions.key_order or ()) else None,
                               fusions.evidence or ev.get("fusion")) if fusions else None,
            "worst_drift": _drift(t) if ok else None,
            "time_us": _time(t) if ok else None,
            **(_matters(t) if ok else {"accuracy": None, "peak_memory_mb": None, "artifact_bytes": None}),
        })
    return cells


def _figure(value, evidence) -> dict | None:
    return None if value is None else {"value": value, "evidence": evidence or "unknown"}


def _fallback_count(t: TargetBlock) -> int | None:
    return sum(1 for n in t.graph.nodes if n.fallback) if t.graph else None


def _drift(t: TargetBlock) -> dict | None:
    worst = t.drift.worst or {}
    if worst.get("rel_l2") is None:
        return None
    return {"value": worst["rel_l2"], "evidence": t.evidence.get("numerics") or "unknown",
            "output": worst.get("output")}


def _time(t: TargetBlock) -> dict | None:
    """The measured time of one whole run: the toolchain's own figure for the run, else the sum over its nodes
    when every compute node was timed. A partial sum (only the nodes left on this CPU) is not a model's time.
    A compiler's estimate (estimated-compiler: Vela for Ethos-U) is no cell's time: the fleet's time column is one
    run measured on this host, ranked and bucketed across models, and an estimate must not rank among those."""
    nt = t.node_times
    if nt.evidence != "measured":
        return None
    value = nt.run_us
    if value is None and nt.compute_nodes and nt.compute_nodes_timed == nt.compute_nodes:
        value = nt.timed_us
    if value is None:
        return None
    out = {"value": round(float(value), 3), "evidence": "measured", "host_cpu": nt.host_cpu}
    # The run-to-run spread of that figure (analysis/node_time.py): what the fleet diff tells noise from a change by.
    spread = nt.spread.get("run_us" if nt.run_us is not None else "total_us")
    if spread:
        out["spread"] = {k: spread[k] for k in ("q1", "q3", "n")}
    if nt.cpu_wait_share is not None:
        out["cpu_wait_share"] = nt.cpu_wait_share       # a busy host's times are not compared
    return out


def _matters(t: TargetBlock) -> dict:
    """The cell's task accuracy (its run's dataset) and measured cost: peak memory and artifact size."""
    out = {"accuracy": None, "peak_memory_mb": None, "artifact_bytes": None}
    a = t.accuracy
    if a and not a.error and a.task == "classification":
        if a.accuracy is not None:
            out["accuracy"] = {"value": a.accuracy, "evidence": a.evidence or "unknown", "of": "top-1",
                               "reference": a.reference_accuracy, "samples": a.samples_run}
        elif a.top1_agreement is not None:
            out["accuracy"] = {"value": a.top1_agreement, "evidence": a.evidence or "unknown", "of": "agreement",
                               "reference": None, "samples": a.samples_run}
    c = t.cost
    if c and c.evidence == "measured":          # a runtime's or compiler's own memory figure is no cell's
        out["peak_memory_mb"] = _figure(c.peak_rss_mb, c.evidence)
        out["artifact_bytes"] = _figure(c.artifact_bytes, c.evidence)
    return out


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
    """(matrix, its folder) from a batch's folder or its matrix.json; bad input raises XcInputError. The file is
    read only if it is a regular file inside the folder it is in (safe_files)."""
    from ..safe_files import read_regular
    path = os.path.join(ref, MATRIX_FILE) if os.path.isdir(ref) else ref
    if not os.path.lexists(path):
        raise XcInputError(f"{ref}: no {MATRIX_FILE} there (accepted: a folder written by xc batch --out, or its "
                           f"{MATRIX_FILE})")
    folder = os.path.dirname(os.path.abspath(path))
    data = read_regular(path, root=folder, max_bytes=MAX_MATRIX_BYTES, shown=path,
                        too_big=lambda size: XcInputError(f"{os.path.basename(path)}: bigger than "
                                                          f"{MAX_MATRIX_BYTES >> 20} MiB; not a matrix xc batch "
                                                          "writes"))
    return parse_matrix(data, os.path.basename(path)), folder


# What a matrix holds, checked field by field when it is read: every reader (the fleet diff and gate, the merge,
# matrix.md/html, the Fleet page) can then take each field as the type it is written as.
STATUSES = ("ok", "error", "unavailable", "skipped")
ROW_STATUSES = ("ok", "error")
MAX_DEPTH = 16                  # xc writes 5 levels; more is a crafted file (and Python's recursion needs a bound)
MAX_FIGURE = 1e300              # a figure past this overflows the views' arithmetic (log scales, ratios)
_RUN_ID = re.compile(r"[0-9a-f]{6,64}")
# A report beside the matrix: runs/MODEL/report.json, or runs/MODEL/RUN/report.json for a run its cells were taken
# from (fleet/batch.py); each part as folder_name() makes it, so no part is "." or "..".
_REPORT_PATH = re.compile(r"runs/[A-Za-z0-9][A-Za-z0-9._-]{0,80}(/[A-Za-z0-9][A-Za-z0-9._-]{0,80})?/report\.json")
_FIGURE_EXTRAS = {"worst_drift": "output", "time_us": "host_cpu", "accuracy": "of"}


def parse_matrix(data: bytes, name: str) -> dict:
    """A matrix from bytes (a file, an upload), checked field by field (see `_check_matrix`); anything else raises
    XcInputError naming the first problem in one line."""
    from ..review.runs import deeper_than, lone_surrogate_in
    try:
        # Decoded strictly here: json.loads would guess UTF-16/32 from bytes and take invalid UTF-8 as it comes.
        m = json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        raise XcInputError(f"{name}: nested deeper than an xc matrix (at most {MAX_DEPTH} levels); accepted: a "
                           f"{MATRIX_FILE} written by xc batch") from None
    except (ValueError, UnicodeDecodeError):
        raise XcInputError(f"{name}: not JSON (accepted: a {MATRIX_FILE} written by xc batch)") from None
    if not isinstance(m, dict) or m.get("schema") != SCHEMA:
        raise XcInputError(f"{name}: not an xc matrix (schema {SCHEMA}); a report.json opens on History")
    if deeper_than(m, MAX_DEPTH):
        raise XcInputError(f"{name}: nested deeper than an xc matrix (at most {MAX_DEPTH} levels); accepted: a "
                           f"{MATRIX_FILE} written by xc batch")
    if lone_surrogate_in(m, data):
        raise XcInputError(f"{name}: holds a string that is not Unicode text (a lone surrogate, \\ud800-\\udfff); "
                           f"accepted: a {MATRIX_FILE} written by xc batch")
    problem = _check_matrix(m)
    if problem:
        raise XcInputError(f"{name}: not a matrix xc batch writes: {problem} (accepted: a {MATRIX_FILE} written "
                           "by xc batch, unedited)")
    return m


def matrix_problem(m) -> str | None:
    """What makes `m` (already parsed: a matrix the run store kept) not a matrix xc batch writes, or None."""
    if not isinstance(m, dict) or m.get("schema") != SCHEMA:
        return f"not an xc matrix (schema {SCHEMA})"
    return _check_matrix(m)


def _shown(value) -> str:
    from ..errors import printable_line
    text = value if isinstance(value, str) else json.dumps(value)[:60]
    return printable_line(text)[:60]


def _check_matrix(m: dict) -> str | None:
    """The first thing in `m` that is not as xc batch writes it, in words; None when every field is."""
    if not isinstance(m.get("models"), list) or not isinstance(m.get("cells"), list):
        return "no models or cells list"
    for key in ("xc_version", "created_at", "manifest", "backend"):
        if not _str_or_none(m.get(key)):
            return f"{key} is not a string"
    if "complete" in m and not isinstance(m["complete"], bool):
        return "complete is not true or false"
    targets = m.get("targets")
    if targets is not None:
        if not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
            return "targets is not a list of target ids"
        if len(set(targets)) != len(targets):
            return "a target listed twice"
    shards = m.get("shards")
    if shards is not None and not (isinstance(shards, list) and all(
            isinstance(s, dict) and _int(s.get("index")) and _int(s.get("count")) for s in shards)):
        return "shards is not a list of {index, count}"
    host = m.get("host")
    if host is not None and not (isinstance(host, dict) and _str_or_none(host.get("cpu"))
                                 and (host.get("cores") is None or _int(host.get("cores")))):
        return "host is not {cpu, cores}"
    if m.get("toolchains") is not None and not (isinstance(m["toolchains"], dict) and all(
            _str_or_none(v) for v in m["toolchains"].values())):
        return "toolchains is not {distribution: version}"
    names = set()
    for i, row in enumerate(m["models"]):
        problem = _check_row(row)
        if problem:
            return f"models[{i}]: {problem}"
        if row["name"] in names:
            return f"model {_shown(row['name'])} listed twice"
        names.add(row["name"])
    keys = set()
    for i, cell in enumerate(m["cells"]):
        problem = _check_cell(cell)
        if problem:
            return f"cells[{i}]: {problem}"
        if cell["model"] not in names:
            return f"cells[{i}]: model {_shown(cell['model'])} has no row in models"
        if (cell["model"], cell["target"]) in keys:
            return f"two cells for {_shown(cell['model'])} × {_shown(cell['target'])}"
        keys.add((cell["model"], cell["target"]))
    return None


def _check_row(row) -> str | None:
    if not isinstance(row, dict):
        return "not an object"
    if not isinstance(row.get("name"), str) or not row["name"]:
        return "no name"
    for key in ("source", "sha256", "error", "node"):
        if not _str_or_none(row.get(key)):
            return f"{key} is not a string"
    if not _run_or_none(row.get("run")):
        return "run is not a run id"
    if row.get("report") is not None and not _report_path(row["report"]):
        return f"report {_shown(row['report'])} is not a runs/MODEL/report.json path"
    runs = row.get("runs")
    if runs is not None:
        if not isinstance(runs, dict):
            return "runs is not {run id: report path}"
        for run, path in runs.items():
            if not _RUN_ID.fullmatch(run) or not _report_path(path):
                return f"runs has {_shown(run)}: {_shown(path)}, not a run id and its runs/…/report.json path"
    if "status" in row and row["status"] not in ROW_STATUSES:
        return f"status {_shown(row['status'])} (accepted: {', '.join(ROW_STATUSES)})"
    if "cached" in row and not isinstance(row["cached"], bool):
        return "cached is not true or false"
    if row.get("seconds") is not None and _figure_problem(row["seconds"]):
        return f"seconds {_figure_problem(row['seconds'])}"
    return None


def _check_cell(cell) -> str | None:
    if not isinstance(cell, dict):
        return "not an object"
    for key in ("model", "target"):
        if not isinstance(cell.get(key), str) or not cell[key]:
            return f"no {key} name"
    if cell.get("status") not in STATUSES:
        return f"status {_shown(cell.get('status'))} (accepted: {', '.join(STATUSES)})"
    for key in ("identity", "family", "error", "advice"):
        if not _str_or_none(cell.get(key)):
            return f"{key} is not a string"
    if not _run_or_none(cell.get("run")):
        return "run is not a run id"
    if "cached" in cell and not isinstance(cell["cached"], bool):
        return "cached is not true or false"
    for metric in METRICS:
        f = cell.get(metric)
        if f is None:
            continue
        if not isinstance(f, dict) or not isinstance(f.get("evidence"), str):
            return f"{metric} is not a figure {{value, evidence}}"
        problem = _figure_problem(f.get("value"), whole=metric in ("fallbacks", "fusions", "artifact_bytes"),
                                  at_most=1.0 if metric in ("accelerated_share", "accuracy") else MAX_FIGURE)
        if problem:
            return f"{metric} {problem}"
        extra = _FIGURE_EXTRAS.get(metric)
        if extra and not _str_or_none(f.get(extra)):
            return f"{metric}'s {extra} is not a string"
        if metric == "accuracy":
            if f.get("of") not in ACCURACY_OF:
                return f"accuracy's of {_shown(f.get('of'))} (accepted: {', '.join(ACCURACY_OF)})"
            if f.get("reference") is not None and _figure_problem(f["reference"], at_most=1.0):
                return f"accuracy's reference {_figure_problem(f['reference'], at_most=1.0)}"
            if f.get("samples") is not None and _figure_problem(f["samples"], whole=True):
                return f"accuracy's samples {_figure_problem(f['samples'], whole=True)}"
    return None


def _str_or_none(value) -> bool:
    return value is None or isinstance(value, str)


def _int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 31


def _run_or_none(value) -> bool:
    return value is None or (isinstance(value, str) and _RUN_ID.fullmatch(value) is not None)


def _report_path(value) -> bool:
    return isinstance(value, str) and _REPORT_PATH.fullmatch(value) is not None


def _figure_problem(value, whole: bool = False, at_most: float = MAX_FIGURE) -> str | None:
    """Why `value` is not a figure a view can draw (a finite number from 0 to `at_most`; a count when `whole`)."""
    import math
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        return f"value {_shown(value)} is not a {'count' if whole else 'number'}"
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or not 0 <= number <= at_most:
        return f"value {_shown(value)} is out of range (0 to {at_most:g})"
    return None


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
