"""What each MCP tool answers, made from a Report by the views' own functions: the sentences and rows the dashboard
and the CLI show, never a second reading of the report. Pure functions of their arguments (no store, no server), so
the tests call them in-process on the report the server read.

Every string that comes from the model or a toolchain (node, tensor, output, module and file names, error messages)
goes out through `printable_line`, as the CLI prints it: one line, control and format characters shown as escapes.
Every figure goes out beside its evidence kind. Lists are capped (`MAX_ROWS`), long texts cut (`MAX_TEXT`), each
saying how much was left out, so a 20,000-node model answers in kilobytes.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping

from ..errors import XcInputError, printable_line

MAX_ROWS = 40           # rows of a list in one answer (fallback nodes, outputs, jumps, regressions, files)
MAX_TEXT = 24_000       # characters of one text (the diff, a bug report, a script)

PLACEMENT_KINDS_WORDS = "measured, reported, predicted-runtime, predicted-rules, emulated, estimated-compiler, assumed"


def line(value) -> str:
    """Text xc did not write, as one printable line (a hostile name cannot break the answer's lines)."""
    return printable_line("" if value is None else value)


def capped(items: list, limit: int = MAX_ROWS) -> tuple[list, int]:
    """The first `limit` items and how many were left out."""
    return list(items[:limit]), max(0, len(items) - limit)


def cut_text(text: str, limit: int = MAX_TEXT) -> tuple[str, int]:
    """`text` up to `limit` characters, cut at a line end where one is near; and how many characters were left."""
    if len(text) <= limit:
        return text, 0
    head = text[:limit]
    at = head.rfind("\n")
    if at > limit // 2:
        head = head[:at + 1]
    return head, len(text) - len(head)


def left_out(n: int, what: str) -> str | None:
    return f"{n} more {what} left out of this answer (the dashboard and `xc report RUN --format html` list " \
           "them all)" if n else None


def pick_target(report: Mapping, name: str) -> str:
    """The report's key for the target `name` names (its key, identity or id); bad input lists the run's targets."""
    targets = report.get("targets") or {}
    for key, t in targets.items():
        if name in (key, (t or {}).get("identity"), (t or {}).get("id")):
            return key
    raise XcInputError(f"target {line(name)!r}: not a target of this run; it has "
                       f"{', '.join(line(k) for k in targets) or 'none'}")


# ---- list_targets ------------------------------------------------------------------------------------------------
def target_catalogue() -> list[dict]:
    """Every registered target as `xc targets` lists it (xc_core/targets: target_ids, each class's `available`),
    with the runtime family and the evidence kind of each figure it reports."""
    from ..targets import REGISTRY, make_target, target_ids
    from ..views.target_groups import family, family_name
    out = []
    for tid in target_ids():
        cls = REGISTRY[tid]
        ok, why = cls.available()
        out.append({
            "id": tid, "label": cls.label, "runtime": family_name(family(tid)), "description": cls.description,
            "available": bool(ok), "unavailable_because": None if ok else line(why),
            "accelerator": make_target(tid).accelerator,      # a property on some targets: per instance
            "placement_evidence": cls.evidence.get("assignment"),
            "evidence": dict(cls.evidence),
            "in_default_set": cls.in_default_set(), "deprecated": cls.deprecated,
            "options": [{"name": o.name, "aliases": list(o.aliases), "help": o.help} for o in cls.option_specs()],
        })
    return out


def catalogue_text(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        where = "available" if r["available"] else f"unavailable here: {r['unavailable_because']}"
        lines.append(f"{r['id']} — {r['label']} ({r['runtime']}); {where}; placement evidence: "
                     f"{r['placement_evidence']}" + ("" if r["in_default_set"] else f"; deprecated: {r['deprecated']}"))
    return "\n".join(lines)


# ---- list_runs ---------------------------------------------------------------------------------------------------
def run_rows(rows: list[dict], store_name: str) -> list[dict]:
    """The store's runs as `xc runs` lists them (RunStore.runs), one dict each."""
    import datetime
    out = []
    for r in rows:
        s = r.get("summary") or {}
        out.append({
            "run": line(r["key"][:12]), "key": line(r["key"]), "store": store_name,
            "created": datetime.datetime.fromtimestamp(r["created"]).isoformat(timespec="seconds"),
            "model": line(r.get("source_name") or "?"), "origin": line(s.get("origin") or "—"),
            "targets": [line(t) for t in str(r.get("targets") or "").split(",") if t],
            "targets_ok": s.get("ok"), "targets_failed": s.get("error"),
            "checklist": {v: (s.get("verdicts") or {}).get(v, 0) for v in ("fail", "warn", "pass")} if s else None,
        })
    return out


# ---- analyze -----------------------------------------------------------------------------------------------------
def verdicts(report: Mapping) -> list[dict]:
    """Each target's Overview line (views.rows.verdict_lines), and the common causes said once above them."""
    from ..views.rows import verdict_lines
    return [{"target": line(tid), "verdict": line(text)} for tid, text in verdict_lines(report)]


def causes_lines(report: Mapping, tid: str | None = None) -> list[str]:
    """The run's common causes (analysis.common_cause) in the CLI's words; only those covering `tid` when given."""
    from ..analysis.common_cause import cause_line, causes
    found = causes(report)
    if tid is not None:
        found = [c for c in found if tid in (c.get("targets") or [])]
    return [line(cause_line(c)) for c in found]


# ---- explain_fallbacks -------------------------------------------------------------------------------------------
FALLBACK_FIELDS = ("node", "op_type", "reason", "on the CPU as", "module_path", "source ops", "kernel µs",
                   "kernel µs (estimated)", "copies µs (assumed)", "boundary bytes", "time evidence")


def fallbacks(report: Mapping, tid: str) -> dict:
    """The target's Overview line, how it splits the graph between its accelerator and the CPU (the Fallbacks
    page's split_summary), its fallback nodes ranked as every view ranks them (fallback_rows), and the common
    causes that cover it."""
    from ..views.fallbacks import accelerated_targets, fallback_rows, split_summary
    from ..views.rows import not_compiled, verdict_line
    t = report["targets"][tid]
    out: dict = {"run_target": line(tid), "verdict_line": line(verdict_line(report, tid)),
                 "placement_evidence": line((t.get("evidence") or {}).get("assignment") or "—"),
                 "accelerator": line(t.get("accelerator")) if t.get("accelerator") else None,
                 "split": None, "fallbacks": [], "fallbacks_left_out": 0, "note": None,
                 "common_causes": causes_lines(report, tid)}
    if tid in not_compiled(report):
        out["note"] = line(f"no compiled graph: {not_compiled(report)[tid]}")
        return out
    if tid not in accelerated_targets(report):
        out["note"] = f"{line(tid)} has no accelerator: every op runs on the CPU, so nothing falls back."
        return out
    s = split_summary(report, tid)
    cliff = s.get("cliff") or {}
    out["split"] = {
        "decided_by": line(s["decided_by"]), "evidence": line(s["evidence"]),
        "compiled_ops": s["nodes"], "on_accelerator": s["on_accelerator"], "on_cpu": s["on_cpu"],
        "share_on_accelerator": round(s["share"], 4) if s.get("share") is not None else None,
        "partitions": s["partitions"], "runtime_verdict": line(s["verdict"]) if s["verdict"] else None,
        "cpu_op_types": [line(x) for x in s["cpu_type_lines"]],
        "boundaries": s["boundaries"], "boundary_bytes": s["boundary_bytes"],
        "boundary_evidence": line(s["boundary_evidence"] or "—"),
        "latency_cliff_ms": cliff.get("estimate_ms"),
        "latency_cliff_evidence": f"{_assumed()} ({s['bandwidth_gb_s']:g} GB/s, {s['transition_overhead_ms']:g} ms "
                                  "per transition): a cost model's estimate, not a measurement",
        "caveats": [line(c) for c in s["caveats"][:MAX_ROWS]],
    }
    rows, more = capped(fallback_rows(report, tid))
    out["fallbacks"] = [{k: (line(r[k]) if isinstance(r[k], str) else r[k]) for k in FALLBACK_FIELDS if k in r}
                        for r in rows]
    out["fallbacks_left_out"] = more
    out["note"] = left_out(more, "fallback nodes")
    return out


def _assumed() -> str:
    from .. import evidence
    return evidence.ASSUMED


def fallbacks_text(a: dict) -> str:
    lines = [f"{a['run_target']}: {line(a['verdict_line'])}"]
    lines += [f"common cause: {c}" for c in a["common_causes"]]
    s = a["split"]
    if s:
        lines.append(f"split ({s['evidence']}, decided by {s['decided_by']}): {s['on_accelerator']} of "
                     f"{s['compiled_ops']} compiled ops on {a['accelerator']}, {s['on_cpu']} on the CPU"
                     + (f"; {s['partitions']} partitions" if s["partitions"] is not None else "")
                     + (f"; the runtime's verdict: {s['runtime_verdict']}" if s["runtime_verdict"] else ""))
        lines += [f"  {x}" for x in s["cpu_op_types"]]
        if s["latency_cliff_ms"] is not None:
            lines.append(f"  {s['boundaries']} accelerator ↔ CPU boundaries ({s['boundary_bytes']} bytes, "
                         f"{s['boundary_evidence']}); latency cliff ≈ {s['latency_cliff_ms']:.3g} ms "
                         f"({s['latency_cliff_evidence']})")
    for r in a["fallbacks"]:
        kernel = r.get("kernel µs")
        kernel = r.get("kernel µs (estimated)") if kernel is None else kernel
        lines.append(f"- {r['node']} ({r['op_type']}, {r['module_path']}): {r['reason']}; kernel "
                     f"{'—' if kernel is None else f'{kernel:g} µs'}, copies {r['copies µs (assumed)']:g} µs "
                     f"[{r['time evidence']}]")
    if a["note"]:
        lines.append(a["note"])
    return "\n".join(lines)


# ---- explain_drift -----------------------------------------------------------------------------------------------
def drift(report: Mapping, tid: str) -> dict:
    """The target's drift as the Overview and the Drift page say it: its Overview line, the run's drift flags
    (views.rows.drift_flags), one row per output (drift_output_rows), the per-layer first divergence and the
    decision → drift attribution where the run has them, and the culprit (views.isolation.culprit_entries)."""
    from ..views.isolation import culprit_entries
    from ..views.rows import drift_flags, drift_output_rows, verdict_line
    from ..views.typed_report import as_report
    typed = as_report(report)
    t = typed.targets[tid]
    d = t.drift
    evidence = line(d.evidence or t.evidence.get("numerics") or "—")
    rows, more = capped(drift_output_rows(t))
    out: dict = {
        "run_target": line(tid), "verdict_line": line(verdict_line(report, tid)),
        "flags": [line(f) for f in drift_flags(report)],
        "against": line(d.reference or "the reference"), "evidence": evidence,
        "outputs": [{k: line(v) for k, v in r.items()} | {"evidence": evidence} for r in rows],
        "outputs_left_out": more, "layer_drift": None, "attribution": None, "culprit": None,
        "notes": [n for n in [left_out(more, "outputs")] if n],
    }
    ld = t.layer_drift
    if ld.points:
        first = ld.first_divergence
        out["layer_drift"] = {
            "first_boundary_over_tolerance": line(first["module_path"]) if first else None,
            "rel_l2_there": first.get("rel_l2") if first else None,
            "threshold_rel_l2": ld.threshold_rel_l2, "boundaries_compared": ld.covered,
            "boundaries": ld.boundaries, "unverified_left_out": ld.unverified, "method": line(ld.method or "—"),
            "evidence": line(ld.evidence or "—")}
    att = ld.attribution
    if att:
        jumps, more_jumps = capped(list(att.jumps))
        out["attribution"] = {
            "summary": line(att.summary), "evidence": line(att.evidence or "—"),
            "jumps": [{"boundary": line(j.module_path), "share": round(j.share, 4), "decision": line(j.kind),
                       "sentence": line(j.sentence), "evidence": line(att.evidence or "—")} for j in jumps],
            "jumps_left_out": more_jumps}
    for e in culprit_entries(report):
        if e["target"] == tid:
            out["culprit"] = {"status": line(e["status"]), "sentence": line(e["sentence"]),
                              "evidence": line(e["evidence"] or "evidence unknown"), "share": line(e["share"]),
                              "trial_compiles": e["runs"]}
    if t.status != "ok":
        out["notes"].append(line(f"{tid} did not run to the end ({t.status}): {t.error or ''}"))
    return out


def drift_text(a: dict) -> str:
    lines = [f"{a['run_target']}: {line(a['verdict_line'])}"]
    lines += [f"warning: {f}" for f in a["flags"]]
    lines.append(f"drift against {a['against']} ({a['evidence']}):")
    for r in a["outputs"]:
        if "error" in r:
            lines.append(f"- {r['output']}: {r['error']}")
        else:
            lines.append(f"- {r['output']}: rel L2 {r['rel L2']}, max abs {r['max abs']}, cosine {r['cosine']}, "
                         f"SNR {r['SNR dB']} dB" + (f" ({r['check']})" if r.get("check") else ""))
    ld = a["layer_drift"]
    if ld:
        where = (f"first boundary over tolerance: {ld['first_boundary_over_tolerance']} (rel L2 "
                 f"{ld['rel_l2_there']:.2e})" if ld["first_boundary_over_tolerance"] else
                 "no boundary over tolerance")
        lines.append(f"per-layer drift ({ld['evidence']}): {where}; {ld['boundaries_compared']} of "
                     f"{ld['boundaries']} boundaries compared")
    att = a["attribution"]
    if att:
        lines.append(f"attribution ({att['evidence']}): {att['summary']}")
        lines += [f"- {j['sentence']} ({round(100 * j['share'])} %)" for j in att["jumps"]]
    if a["culprit"]:
        c = a["culprit"]
        lines.append(f"culprit ({c['evidence']}; {c['trial_compiles']} trial compiles): {c['sentence']}")
    lines += a["notes"]
    return "\n".join(lines)


# ---- diff_runs ---------------------------------------------------------------------------------------------------
def diff(base, head, gate: bool, allow_different_models: bool, rules_dir: str) -> dict:
    """`xc diff BASE HEAD [--gate]`: the same diff (review.diff.diff_reports with the model diff of
    review.model_diff), the same text (diff_text) and, gated, the same regressions (review.gate.regressions under
    the rules `xc diff` reads: defaults, then .xc-gate.toml in `rules_dir`)."""
    from ..review.diff import diff_reports, diff_text, different_models
    from ..review.gate import load_rules, regressions
    from ..review.model_diff import model_diff_of_runs
    d = diff_reports(base.report, head.report, model=model_diff_of_runs(base, head))
    d["base"]["label"], d["new"]["label"] = base.label, head.label
    if gate and different_models(d) and not allow_different_models:
        raise XcInputError(f"{different_models(d)}; not gating one model against another (a wrong baseline?) — "
                           "pass allow_different_models=true to gate anyway")
    regs = None
    if gate:
        rules, per_target = load_rules(None, None, search_dir=rules_dir)
        regs = regressions(d, rules, per_target)
    text, more = cut_text(diff_text(d, regs))
    shown, more_regs = capped(regs or [])
    return {
        "text": text, "text_left_out_chars": more,
        "different_models": line(different_models(d)) if different_models(d) else None,
        "gate": None if regs is None else {
            "verdict": "fail" if regs else "pass",
            "regressions": [{k: line(r[k]) for k in ("target", "rule", "what")} for r in shown],
            "regressions_left_out": more_regs},
    }


# ---- get_repro ---------------------------------------------------------------------------------------------------
MAX_FILE_BYTES = 256 << 10      # a bundle's text file read for the answer (BUG_REPORT.md, the script)


def repro(run, tid: str, run_ref: str, can_write: bool) -> dict:
    """The culprit's repro bundle as the run holds it (its Repro block and its files), or why there is none and
    how to get one."""
    from ..views.isolation import culprit_entries
    entry = next((e for e in culprit_entries(run.report) if e["target"] == tid), None)
    ref = _shell_ref(run, run_ref)
    how = (f"`xc repro {ref} --target {shlex.quote(tid)}` runs the per-op isolation and the culprit search for "
           "this target and writes the bundle (a write: into the run store or the run folder)")
    out: dict = {"run_target": line(tid), "status": None, "sentence": None, "evidence": None, "bug_report": None,
                 "script": None, "script_name": None, "no_script": None, "files": [], "files_left_out": 0,
                 "command": None, "tracker": None, "how_to_get_one": None}
    if entry is None:
        out["status"] = "no isolation"
        out["how_to_get_one"] = (f"this run has no culprit search for {line(tid)}; {how}. This MCP server does not "
                                 "run it" + ("." if can_write else " (it is read-only; run the command yourself)."))
        return out
    out.update(status=line(entry["status"]), sentence=line(entry["sentence"]),
               evidence=line(entry["evidence"] or "evidence unknown"), tracker=line(entry["tracker"] or "") or None,
               no_script=line(entry["no_script"]) if entry["no_script"] else None)
    if entry["status"] != "found" or not entry["folder"]:
        out["how_to_get_one"] = "no culprit was found, so there is no bundle"
        return out
    prefix = entry["folder"].rstrip("/") + "/"
    bundle = {rel[len(prefix):]: path for rel, path in run.files.items() if rel.startswith(prefix)}
    if not bundle:
        out["how_to_get_one"] = f"the bundle's files are not among this run's files; {how}"
        return out
    names, more = capped(sorted(bundle))
    out["files"], out["files_left_out"] = [line(n) for n in names], more
    from ..culprit.repro import REPORT
    if REPORT in bundle:
        out["bug_report"] = _bundle_text(bundle[REPORT])
    if entry["script"] and entry["script"] in bundle:
        out["script_name"] = line(entry["script"])
        out["script"] = _bundle_text(bundle[entry["script"]])
    folder = f"xc-repro-{tid.replace('[', '-').replace(']', '')}"
    folder = shlex.quote(folder)
    out["command"] = line(f"xc repro {ref} --target {shlex.quote(tid)} --out {folder}"
                          + (f" && cd {folder} && python {shlex.quote(entry['script'])}" if entry["script"] else ""))
    return out


def _shell_ref(run, run_ref: str) -> str:
    """The run as a shell word a user can paste: its store id, else the path quoted; a path a command line cannot
    show as it is (a newline, a control character) stays a description instead of a command that names another."""
    if run.key:
        return run.key[:12]
    return shlex.quote(run_ref) if line(run_ref) == run_ref else "RUN (the run folder: its name cannot be shown here)"


def _bundle_text(path: str) -> str:
    """A text file of the bundle, bounded and read as a regular file (never through a symlink put in its place)."""
    import os

    from ..safe_files import read_regular
    data = read_regular(path, root=os.path.dirname(path), head=MAX_FILE_BYTES)
    text, more = cut_text(data.decode("utf-8", errors="replace"))
    return text + (f"\n[… {more} more characters left out]" if more else "")


def repro_text(a: dict) -> str:
    if a["how_to_get_one"] and not a["files"]:
        return f"{a['run_target']}: {a['sentence'] or a['status']}\n{a['how_to_get_one']}"
    lines = [f"{a['sentence']} ({a['evidence']})", f"files: {', '.join(a['files'])}"]
    if a["command"]:
        lines.append(f"run it: {a['command']}")
    if a["no_script"]:
        lines.append(f"no script: {a['no_script']}")
    if a["bug_report"]:
        lines += ["", "BUG_REPORT.md:", a["bug_report"]]
    return "\n".join(lines)
