"""`xc diff` of two fleet matrices: per cell what changed, and with `--gate` what regressed.

Where both matrices carry the model's report (their runs/ folders, or the run store by run id), a cell is judged
by the same run diff and rules as `xc diff` of two runs (review/diff.py, review/gate.py: new fallbacks, ops
leaving the accelerator, drift, checklist verdicts, a target that stopped compiling). Two rules only a matrix has:
`max_share_loss` (percentage points of accelerated share a cell may lose) and `max_time_ratio` (its measured time,
new / base, on the same CPU; off by default, since a shared CI machine's times are noisy). Where a report is
missing, the cell's own figures are compared with the same thresholds — task accuracy, peak memory and artifact
size too, by the run diff's own rules (review/gate.py `matters_regressions`: `max_accuracy_drop`,
`max_accuracy_loss`, `max_memory_ratio` …).

Time ratios fall in buckets as Qualcomm AI Hub's scorecards bin them: under 1.1×, 1.1–1.2×, 1.2–1.5×, 1.5–2×,
2–5×, 5× and over — slower or faster. A ratio is a change only when it is beyond the runs' noise (the test of
analysis/node_time.time_change: the runs' interquartile ranges apart, and more than the shift every node of the
target shared, which the run diff measures where the reports are there); a cell whose runs kept no spread (a
matrix of an older xc) has its time "spread unknown", never a regression on its own.
"""
from __future__ import annotations

import math
import os

from ..analysis.node_time import FASTER, SLOWER, SLOWER_MIN_US, SPREAD_UNKNOWN, host_busy, time_change
from ..errors import XcInputError, printable_line
from ..review.diff import whole_run_time
from ..review.gate import OFF, GateRules
from .matrix import MATRIX_FILE, SCHEMA, grid

TIME_BUCKETS = (1.1, 1.2, 1.5, 2.0, 5.0)


def looks_like_matrix(ref: str) -> bool:
    """A batch folder, or a file that opens with the matrix schema (matrix.json, or a copy under another name).
    Only a regular file is opened (a FIFO would block, /dev/zero never end): anything else is not a matrix, and
    reading it as a run refuses it in one line."""
    from ..safe_files import read_regular
    if os.path.isdir(ref):
        return os.path.lexists(os.path.join(ref, MATRIX_FILE))
    if not os.path.isfile(ref):
        return False
    try:
        head = read_regular(ref, root=os.path.dirname(os.path.abspath(ref)), head=256)
    except XcInputError:
        return False
    return f'"schema": "{SCHEMA}"'.encode() in head or f'"schema":"{SCHEMA}"'.encode() in head


def time_bucket(ratio: float | None) -> str | None:
    """'1.2–1.5× slower', '<1.1×' (within noise), '2–5× faster'…"""
    if ratio is None or ratio <= 0 or math.isinf(ratio):
        return None
    r, way = (ratio, "slower") if ratio >= 1 else (1 / ratio, "faster")
    if r < TIME_BUCKETS[0]:
        return f"<{TIME_BUCKETS[0]:g}×"
    for low, high in zip(TIME_BUCKETS, TIME_BUCKETS[1:]):
        if r < high:
            return f"{low:g}–{high:g}× {way}"
    return f"≥{TIME_BUCKETS[-1]:g}× {way}"


def diff_matrices(base: tuple[dict, str], new: tuple[dict, str]) -> dict:
    """Per cell in both: status, fallbacks, accelerated share, worst drift and time, base → new; cells and models
    in only one of them. `run_diffs` holds, per model, the run diffs of its cells whose two runs' reports could be
    read: [{"targets": [column…], "columns": {identity: column}, "diff": the two runs' diff}…], one entry per
    pair of runs (a model's cells may come from several runs, fleet/batch.py)."""
    (bm, bdir), (nm, ndir) = base, new
    b_models, _b_targets, b_cells = grid(bm)
    n_models, _n_targets, n_cells = grid(nm)
    d = {"base": _label(bm, bdir), "new": _label(nm, ndir),
         "models_added": [m for m in n_models if m not in b_models],
         "models_removed": [m for m in b_models if m not in n_models],
         "cells_added": [list(k) for k in n_cells if k not in b_cells and k[0] in b_models],
         "cells_removed": [list(k) for k in b_cells if k not in n_cells and k[0] in n_models],
         "cells": [], "run_diffs": {}}
    for key, nc in n_cells.items():
        bc = b_cells.get(key)
        if bc is not None:
            d["cells"].append(_cell_diff(bc, nc))
    b_rows, n_rows = {r["name"]: r for r in bm["models"]}, {r["name"]: r for r in nm["models"]}
    for name in [m for m in n_models if m in b_models]:
        pairs = _run_diffs(name, (b_rows[name], bdir, b_cells), (n_rows[name], ndir, n_cells))
        if pairs:
            d["run_diffs"][name] = pairs
    _time_verdicts_from_run_diffs(d)
    return d


def _label(m: dict, folder: str) -> dict:
    return {"manifest": m.get("manifest"), "created_at": m.get("created_at"), "folder": folder,
            "complete": m.get("complete"), "host_cpu": (m.get("host") or {}).get("cpu")}


def _value(cell: dict, metric: str):
    f = cell.get(metric)
    return None if f is None else f["value"]


def _cell_diff(bc: dict, nc: dict) -> dict:
    out = {"model": nc["model"], "target": nc["target"], "status": {"base": bc["status"], "new": nc["status"]},
           "error": nc.get("error")}
    for metric in ("fallbacks", "accelerated_share", "fusions"):
        out[metric] = {"base": _value(bc, metric), "new": _value(nc, metric)}
    bd, nd = _value(bc, "worst_drift"), _value(nc, "worst_drift")
    out["worst_drift"] = {"base": bd, "new": nd, "ratio": _ratio(bd, nd),
                          "evidence": (nc.get("worst_drift") or {}).get("evidence")}
    bt, nt = bc.get("time_us"), nc.get("time_us")
    # compared only when both are the same kind of figure on the same CPU: a measurement never against an estimate
    same_cpu = bool(bt and nt and bt.get("host_cpu") == nt.get("host_cpu")
                    and (bt.get("evidence") or "measured") == (nt.get("evidence") or "measured"))
    ratio = _ratio(_value(bc, "time_us"), _value(nc, "time_us")) if same_cpu else None
    out["time_us"] = {"base": _value(bc, "time_us"), "new": _value(nc, "time_us"), "ratio": ratio,
                      "bucket": time_bucket(ratio), "same_cpu": same_cpu, "verdict": None, "why": None}
    if same_cpu:
        # The cells' own spread (the run's IQR the matrix kept); the run diff refines it where reports are there.
        judged = time_change(_time_figure(bt), _time_figure(nt), SLOWER_MIN_US, min_ratio=TIME_BUCKETS[0],
                             busy=host_busy(_wait(bt), _wait(nt)))
        out["time_us"]["verdict"], out["time_us"]["why"] = judged["verdict"], judged["why"]
    for metric in ("accuracy", "peak_memory_mb", "artifact_bytes"):
        out[metric] = {"base": bc.get(metric), "new": nc.get(metric)}     # the figures, evidence and all
    out["changed"] = any(out[k]["base"] != out[k]["new"] for k in ("status", "fallbacks", "accelerated_share",
                                                                   "fusions", "worst_drift")) \
        or _value(bc, "artifact_bytes") != _value(nc, "artifact_bytes") \
        or _accuracy_moved(out["accuracy"])
    return out


def _accuracy_moved(acc: dict) -> bool:
    b, n = acc.get("base"), acc.get("new")
    return bool(b and n and b.get("of") == n.get("of") and round(b["value"], 6) != round(n["value"], 6))


def _as_run_diff(c: dict, host: tuple[str | None, str | None]) -> dict:
    """A cell diff's accuracy and cost in the shape of a run diff's target (review/diff.py, review/matters.py), so
    the gate's own rules judge a cell whose reports are not there."""
    def accuracy(f):
        if not f:
            return None
        top1 = f.get("of") == "top-1"
        return {"evidence": f["evidence"], "task": "classification", "samples": f.get("samples"),
                "samples_run": f.get("samples"), "accuracy": f["value"] if top1 else None,
                "reference_accuracy": f.get("reference") if top1 else None,
                "top1_agreement": None if top1 else f["value"], "changed_count": None if top1 else
                round((1 - f["value"]) * (f.get("samples") or 0))}

    def cost(side, cpu):
        mem, art = c.get("peak_memory_mb", {}).get(side), c.get("artifact_bytes", {}).get(side)
        if not mem and not art:
            return None
        return {"evidence": (mem or art)["evidence"], "host": cpu, "peak_rss_mb": (mem or {}).get("value"),
                "artifact_bytes": (art or {}).get("value"), "load_s": None}
    acc = c.get("accuracy") or {}
    return {"accuracy": {"base": accuracy(acc.get("base")), "new": accuracy(acc.get("new"))},
            "cost": {"base": cost("base", host[0]), "new": cost("new", host[1])}}


def _time_figure(f: dict) -> dict:
    """A cell's time as time_change takes it: its value, with the run's quartiles where the matrix kept them as
    xc writes them (finite numbers, q1 ≤ q3; anything else is read as no spread)."""
    out = {"median": f["value"]}
    sp = f.get("spread")
    if isinstance(sp, dict) and all(isinstance(sp.get(k), (int, float)) and not isinstance(sp.get(k), bool)
                                    and math.isfinite(sp[k]) for k in ("q1", "q3")) and sp["q1"] <= sp["q3"]:
        out.update(q1=float(sp["q1"]), q3=float(sp["q3"]))
    return out


def _wait(f: dict) -> float | None:
    w = f.get("cpu_wait_share")
    return float(w) if isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) else None


def _judge_time_by_run_diff(cell: dict, t: dict) -> None:
    """A cell's time verdict from its run diff's (the same figure — the whole run, else the timed nodes' sum —
    judged with the shift every node of the target shared, which a cell alone cannot see)."""
    time = cell["time_us"]
    if not time["same_cpu"] or not (t.get("time") or {}).get("compared"):
        return
    # The figure a cell holds (fleet/matrix.py _time): the toolchain's whole run where it timed one, else the sum.
    judged = whole_run_time(t["time"])
    if judged:
        time["verdict"], time["why"] = judged["verdict"], judged["why"]


def _ratio(b, n) -> float | None:
    if b is None or n is None:
        return None
    if b == 0:
        return None if n == 0 else math.inf
    return n / b


def _run_diffs(model: str, base: tuple[dict, str, dict], new: tuple[dict, str, dict]) -> list[dict]:
    """The model's cells in both matrices, grouped by their (base run, new run), each pair's reports diffed."""
    from ..review.diff import diff_reports
    (b_row, bdir, b_cells), (n_row, ndir, n_cells) = base, new
    pairs: dict[tuple, list[str]] = {}
    for (m, target), nc in n_cells.items():
        bc = b_cells.get((m, target))
        if m == model and bc is not None:
            pairs.setdefault((bc.get("run") or b_row.get("run"), nc.get("run") or n_row.get("run")), []).append(target)
    reports: dict[tuple, dict | None] = {}
    out = []
    for (b_run, n_run), targets in pairs.items():
        for side, run, row, folder in (("b", b_run, b_row, bdir), ("n", n_run, n_row, ndir)):
            if (side, run) not in reports:
                reports[(side, run)] = _report(run, row, folder)
        b_report, n_report = reports[("b", b_run)], reports[("n", n_run)]
        if b_report is not None and n_report is not None:
            # The run diff names targets by identity: each cell's, on either side, back to its column.
            columns = {c.get("identity") or t: t for cells in (b_cells, n_cells) for (m, t), c in cells.items()
                       if m == model and t in targets}
            out.append({"targets": targets, "columns": columns, "diff": diff_reports(b_report, n_report)})
    return out


def _time_verdicts_from_run_diffs(d: dict) -> None:
    cells = {(c["model"], c["target"]): c for c in d["cells"]}
    for model, pairs in d["run_diffs"].items():
        for pair in pairs:
            for identity, t in pair["diff"]["targets"].items():
                cell = cells.get((model, pair["columns"].get(identity)))
                if cell is not None and cell["target"] in pair["targets"]:
                    _judge_time_by_run_diff(cell, t)


def _report(run: str | None, row: dict, folder: str) -> dict | None:
    """One of a model's runs' report: from the runs/ folder beside the matrix (the row names each run's report
    there), else from the run store by its id; None if neither has it. A report that is there is read as any
    report.json is (review/runs.py: bad input refused in one line), and only from inside the matrix's folder."""
    from ..review.runs import from_store, load_run
    from ..safe_files import is_inside
    from ..store import RunStore
    paths = dict(row.get("runs") or {})
    if row.get("report") and (run is None or run == row.get("run")):
        paths.setdefault(run, row["report"])
    rel = paths.get(run)
    if rel:
        path = os.path.join(folder, *rel.split("/"))      # parse_matrix checked it: runs/…/report.json
        if os.path.lexists(path):
            if not is_inside(folder, path):
                raise XcInputError(f"{printable_line(rel)}: a symlink out of the batch folder {printable_line(folder)}"
                                   " — not read (xc batch never writes one)")
            return load_run(path).report
    if run:
        try:
            return from_store(run, RunStore()).report
        except XcInputError:
            return None
    return None


def fleet_regressions(d: dict, rules: GateRules, per_target: dict[str, GateRules] | None = None) -> list[dict]:
    """Every regression: {model, target, rule, what}."""
    from ..review.gate import matters_regressions, regressions
    out = []
    judged = set()
    hosts = (d["base"].get("host_cpu"), d["new"].get("host_cpu"))
    for model, pairs in d["run_diffs"].items():
        for pair in pairs:
            # A pair's diff covers every target its two runs share; it judges only the cells taken from them.
            for r in regressions(pair["diff"], rules, per_target):
                column = pair["columns"].get(r["target"])
                if column is not None:
                    out.append({"model": model, **r, "target": column})
            judged |= {(model, t) for t in pair["targets"]}
    for c in d["cells"]:
        r = (per_target or {}).get(c["target"], rules)
        if r.targets and c["target"] not in r.targets:
            continue
        key = (c["model"], c["target"])

        def add(rule, what, cell=c):
            out.append({"model": cell["model"], "target": cell["target"], "rule": rule, "what": what})
        if key not in judged:       # no run diff for this model: the cell's own figures
            _cell_rules(c, r, add)
            matters_regressions(_as_run_diff(c, hosts), r, add)
        share = c["accelerated_share"]
        moved = any(x["model"] == c["model"] and x["target"] == c["target"] and x["rule"] == "max_to_cpu"
                    for x in out)
        if (r.max_share_loss != OFF and share["base"] is not None and share["new"] is not None and not moved
                and 100 * (share["base"] - share["new"]) > r.max_share_loss + 1e-9):
            add("max_share_loss", f"accelerated share {100 * share['base']:.0f}% → {100 * share['new']:.0f}% "
                                  f"(allowed −{r.max_share_loss:g} points)")
        # Slower beyond the runs' noise only: within noise, or spread unknown (no per-run figures), is no
        # regression on time alone.
        t = c["time_us"]
        if (r.max_time_ratio != OFF and t["ratio"] is not None and t["ratio"] > r.max_time_ratio
                and t.get("verdict") == SLOWER):
            add("max_time_ratio", f"measured time {t['base']:,.0f} → {t['new']:,.0f} µs, {t['bucket']} beyond the "
                                  f"runs' noise (allowed {r.max_time_ratio:g}×, same CPU)")
    order = {(c["model"], c["target"]): i for i, c in enumerate(d["cells"])}
    return sorted(out, key=lambda x: order.get((x["model"], x["target"]), len(order)))


def _cell_rules(c: dict, r: GateRules, add) -> None:
    if r.status_worse and c["status"]["base"] == "ok" and c["status"]["new"] != "ok":
        add("status_worse", f"{c['status']['base']} → {c['status']['new']}"
                            + (f": {c['error']}" if c.get("error") else ""))
    fb = c["fallbacks"]
    if (r.max_new_fallbacks != OFF and fb["base"] is not None and fb["new"] is not None
            and fb["new"] - fb["base"] > r.max_new_fallbacks):
        add("max_new_fallbacks", f"CPU fallbacks {fb['base']} → {fb['new']} (allowed +{r.max_new_fallbacks})")
    dr = c["worst_drift"]
    if (r.max_drift_ratio != OFF and dr["ratio"] is not None and dr["ratio"] > r.max_drift_ratio
            and dr["new"] >= r.drift_floor):
        grew = "∞" if math.isinf(dr["ratio"]) else f"{dr['ratio']:.2f}"
        add("max_drift_ratio", f"worst drift grew {grew}× (rel L2 {dr['base']:.3g} → {dr['new']:.3g}; allowed "
                               f"{r.max_drift_ratio:g}×, {dr['evidence']})")


def change_lines(d: dict) -> list[str]:
    """One line per change, models first, then cells in the matrix's order."""
    lines = [f"model added: {printable_line(m)}" for m in d["models_added"]]
    lines += [f"model removed: {printable_line(m)}" for m in d["models_removed"]]
    lines += [f"{printable_line(m)} × {t}: target added" for m, t in d["cells_added"]]
    lines += [f"{printable_line(m)} × {t}: target removed" for m, t in d["cells_removed"]]
    for c in d["cells"]:
        what = []
        s = c["status"]
        if s["base"] != s["new"]:
            what.append(f"status {s['base']} → {s['new']}")
        for metric, name in (("fallbacks", "fallbacks"), ("fusions", "fusions")):
            x = c[metric]
            if x["base"] != x["new"] and x["base"] is not None and x["new"] is not None:
                what.append(f"{name} {x['base']} → {x['new']}")
        sh = c["accelerated_share"]
        if sh["base"] != sh["new"] and sh["base"] is not None and sh["new"] is not None:
            what.append(f"accelerated share {100 * sh['base']:.0f}% → {100 * sh['new']:.0f}%")
        dr = c["worst_drift"]
        if dr["ratio"] is not None and abs(dr["ratio"] - 1) > 0.01:
            what.append(f"worst drift ×{dr['ratio']:.2f}" if not math.isinf(dr["ratio"]) else "worst drift from 0")
        what += _matters_changes(c)
        t = c["time_us"]
        if t["bucket"] and not t["bucket"].startswith("<"):
            if t.get("verdict") in (SLOWER, FASTER):
                what.append(f"time {t['bucket']}")
            elif t.get("verdict") == SPREAD_UNKNOWN:
                what.append(f"time {t['bucket']} (spread unknown: not judged)")
        if what:
            lines.append(f"{printable_line(c['model'])} × {c['target']}: " + "; ".join(what))
    return lines


def _matters_changes(c: dict) -> list[str]:
    """A cell's task accuracy and artifact size, where they moved (memory moves from run to run: the gate judges
    it, it is no change on its own)."""
    from ..review.matters import pct, size
    out = []
    acc = c.get("accuracy") or {}
    if _accuracy_moved(acc):
        what = "top-1 accuracy" if acc["new"].get("of") == "top-1" else "agreement with the reference"
        out.append(f"{what} {pct(acc['base']['value'])} → {pct(acc['new']['value'])} ({acc['new']['evidence']})")
    art = c.get("artifact_bytes") or {}
    if art.get("base") and art.get("new") and art["base"]["value"] != art["new"]["value"]:
        out.append(f"artifact {size(art['base']['value'])} → {size(art['new']['value'])}")
    return out


def diff_text(d: dict, regs: list[dict] | None) -> str:
    """The fleet diff for a terminal or a CI log: the two matrices' manifests, models, targets and errors each one
    printable line (`printable_line`)."""
    show = printable_line
    out = [f"fleet diff: {show(d['base']['manifest'])} ({show(d['base']['created_at'])}) → "
           f"{show(d['new']['manifest'])} ({show(d['new']['created_at'])}); {len(d['cells'])} cells in both, "
           f"{len(d['run_diffs'])} model(s) compared run by run"]
    changes = change_lines(d)
    out += [f"  {show(line)}" for line in changes] or ["  no change in any cell"]
    if regs is not None:
        out.append(f"gate: {len(regs)} regression(s)" if regs else "gate: nothing regressed")
        out += [f"  {show(r['model'])} × {show(r['target'])}: [{show(r['rule'])}] {show(r['what'])}" for r in regs]
    return "\n".join(out) + "\n"


def diff_markdown(d: dict, regs: list[dict] | None) -> str:
    """The fleet diff as Markdown (a PR comment, the job summary): names and messages inert (review/md_text.py)."""
    from ..review.md_text import code, text
    out = [f"## xc fleet diff — {text(d['new']['manifest'] or '')}", "",
           f"{len(d['cells'])} cells in both matrices; {len(d['run_diffs'])} model(s) compared run by run."]
    if regs is not None:
        out += ["", f"**Gate: {len(regs)} regression(s)**" if regs else "**Gate: nothing regressed**"]
        if regs:
            out += ["", "| model | target | rule | what |", "|---|---|---|---|"]
            out += [f"| {text(r['model'])} | {code(r['target'])} | {text(r['rule'])} | {text(r['what'])} |"
                    for r in regs]
    changes = change_lines(d)
    out += ["", "<details><summary>Changes</summary>", ""] + [f"- {text(x)}" for x in changes] + ["", "</details>"] \
        if changes else ["", "No change in any cell."]
    return "\n".join(out) + "\n"


def check_matrix_pair(base_ref: str, new_ref: str) -> None:
    """Both a matrix, or neither: one matrix against one run is a wrong argument."""
    a, b = looks_like_matrix(base_ref), looks_like_matrix(new_ref)
    if a != b:
        which, other = (base_ref, new_ref) if a else (new_ref, base_ref)
        if not os.path.exists(other):
            # A mistyped folder is the likelier slip than a run id against a matrix: name what is missing.
            raise XcInputError(f"{other}: no such batch folder or matrix.json ({which} is a fleet matrix: diff it "
                               "against another xc batch --out folder)")
        raise XcInputError(f"{which} is a fleet matrix and the other is a run: diff two matrices (xc batch --out "
                           "folders) or two runs")
