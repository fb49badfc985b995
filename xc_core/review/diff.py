"""What changed between two runs, in the compilers' decisions: per target and per source op.

Source ops are matched by where they sit, not by their names: a model edit renumbers the exporter's names
(`relu_3` becomes `hardswish`), so a source op's key is (module path, op type, its index among the ops of that
type in that module). Fallbacks are matched the same way on the compiled node (module path, compiled op type),
as a multiset. Everything in the result is plain data (JSON); `diff_text` and `diff_markdown` render it.

Two runs of different models still diff (targets line up by id), but op by op the comparison means nothing, so
`models` says first whether base and new are one model: the same file (same sha256), a new version of it (same
file name), or an edited model under another name (at least SAME_MODEL_SHARE of the source ops line up by module
path and op type). Anything else — another model, or one model in two formats whose captured ops do not line up
(aten `conv2d` in a .pt2, ONNX `Conv` in an .onnx) — is "different", with a line that says so before any change.
"""
from __future__ import annotations

import math
from collections import Counter

from ..errors import printable_line
from ..views.rows import ACCELERATORS, fmt_sci
from .md_text import code, table, text

WORSE = {"pass": 0, "not applicable": 0, "warn": 1, "fail": 2}
SAME_MODEL_SHARE = 0.5      # of the larger model's source ops, lined up by module path and op type


def diff_reports(base: dict, new: dict) -> dict:
    b_ops, n_ops = _source_ops(base), _source_ops(new)
    out = {
        "models": _models(base, new, b_ops, n_ops),     # first: it says how to read everything after it
        "base": _about(base), "new": _about(new),
        "targets_added": [t for t in new["targets"] if t not in base["targets"]],
        "targets_removed": [t for t in base["targets"] if t not in new["targets"]],
        "source_ops": {
            "added": [_op_ref(n_ops[k]) for k in n_ops if k not in b_ops],
            "removed": [_op_ref(b_ops[k]) for k in b_ops if k not in n_ops],
            "op_count": {"base": (base.get("capture") or {}).get("op_count_before"),
                         "new": (new.get("capture") or {}).get("op_count_before")},
        },
        "targets": {},
    }
    for tid in [t for t in new["targets"] if t in base["targets"]]:
        out["targets"][tid] = _target_diff(tid, base, new, b_ops, n_ops)
    out["source_ops"]["replaced"] = _replaced(out["source_ops"])
    out["changed"] = bool(out["targets_added"] or out["targets_removed"] or out["source_ops"]["added"]
                          or out["source_ops"]["removed"] or any(t["changed"] for t in out["targets"].values()))
    return out


def _about(report: dict) -> dict:
    src = report["source"]
    return {"name": src["name"], "kind": src["kind"], "sha256": src["sha256"],
            "run": (report.get("run") or {}).get("key")}


def _models(base: dict, new: dict, b_ops: dict, n_ops: dict) -> dict:
    """Are base and new one model? {relation, common_source_ops, line}: relation is same-file, new-version,
    edited or different; line (None unless different) is the sentence every format puts first."""
    b, n = base["source"], new["source"]
    larger = max(len(b_ops), len(n_ops))
    common = sum(1 for k in n_ops if k in b_ops) / larger if larger else None
    if b["sha256"] == n["sha256"]:
        relation = "same-file"
    elif b["name"] == n["name"]:
        relation = "new-version"
    elif common is not None and common >= SAME_MODEL_SHARE:
        relation = "edited"
    else:
        relation = "different"
    line = None
    if relation == "different":
        def about(src, report):
            ops = (report.get("capture") or {}).get("op_count_before")
            name = printable_line(src["name"])     # a file name may hold a newline or a terminal escape
            return (f"{name} ({src['kind']}, sha256 {src['sha256'][:12]}"
                    + (f", {ops} captured ops" if ops is not None else ", no captured graph") + ")")
        shared = (f"{100 * common:.0f}% of source ops line up" if common is not None
                  else "no captured graph to line up")
        line = (f"base and new are different models: {about(b, base)} vs {about(n, new)}, {shared} — the "
                "comparison below lines up targets, not the same ops")
    return {"relation": relation, "common_source_ops": None if common is None else round(common, 3), "line": line}


# ---- source ops ---------------------------------------------------------------------------------------------
def _source_ops(report: dict) -> dict[tuple, dict]:
    seen: Counter = Counter()
    out = {}
    for row in (report.get("alignment") or {}).get("source_ops", []):
        where = (row.get("module_path") or "", row["op_type"])
        out[(*where, seen[where])] = row
        seen[where] += 1
    return out


def _replaced(ops: dict) -> list[dict]:
    """Ops removed and added at the same module path: a swap (ReLU → HardSwish) reads as one change."""
    added = {}
    for op in ops["added"]:
        added.setdefault(op["module_path"], []).append(op)
    out = []
    for op in ops["removed"]:
        if added.get(op["module_path"]):
            new = added[op["module_path"]].pop(0)
            out.append({"module_path": op["module_path"], "base": op["op_type"], "new": new["op_type"]})
    return out


def _op_ref(row: dict) -> dict:
    return {"source_op": row["source_op"], "op_type": row["op_type"], "module_path": row.get("module_path") or ""}


def _placement(cell: dict | None) -> tuple[str | None, str | None]:
    """(backend, precision) of a source op on a target; the backend reads "cpu (fallback)" for a fallback."""
    if not cell or cell.get("status") in (None, "absent", "missing"):
        return None, None
    backend = cell.get("backend")
    if cell.get("status") == "fallback":
        backend = f"{backend or 'cpu'} (fallback)"
    return backend, cell.get("precision")


# ---- one target -------------------------------------------------------------------------------------------
def _target_diff(tid: str, base: dict, new: dict, b_ops: dict, n_ops: dict) -> dict:
    bt, nt = base["targets"][tid], new["targets"][tid]
    d: dict = {"status": {"base": bt["status"], "new": nt["status"]},
               "op_count": {"base": bt.get("op_count_after"), "new": nt.get("op_count_after")}}
    d["fallbacks"] = _fallbacks(bt, nt)
    d["fusions"] = _fusions(tid, base, new)
    d["backend_changes"], d["precision_changes"] = [], []
    for key in [k for k in n_ops if k in b_ops]:
        b_backend, b_prec = _placement(b_ops[key]["targets"].get(tid))
        n_backend, n_prec = _placement(n_ops[key]["targets"].get(tid))
        ref = _op_ref(n_ops[key])
        if b_backend and n_backend and b_backend != n_backend:
            d["backend_changes"].append({**ref, "base": b_backend, "new": n_backend,
                                         "to_cpu": _accelerated(b_backend) and not _accelerated(n_backend)})
        if b_prec and n_prec and b_prec != n_prec:
            d["precision_changes"].append({**ref, "base": b_prec, "new": n_prec})
    d["drift"] = _drift(bt, nt)
    d["time"] = _node_times(bt, nt)
    d["stage_changes"] = _stage_changes(bt, nt)
    d["layout"] = _layout_change(bt, nt)
    d["checklist"] = _checklist(tid, base, new)
    d["accelerated_share"] = {"base": accelerated_share(bt), "new": accelerated_share(nt)}
    d["latency_cliff_ms"] = {"base": _cliff(bt), "new": _cliff(nt)}
    d["evidence"] = {"assignment": (nt.get("evidence") or {}).get("assignment"),
                     "numerics": (nt.get("evidence") or {}).get("numerics")}
    d["changed"] = bool(bt["status"] != nt["status"] or d["op_count"]["base"] != d["op_count"]["new"]
                        or d["fallbacks"]["added"] or d["fallbacks"]["removed"] or d["fusions"]["gained"]
                        or d["fusions"]["lost"] or d["backend_changes"] or d["precision_changes"]
                        or d["stage_changes"] or d["layout"]
                        or any(c["base"] != c["new"] for c in d["checklist"])
                        or any(x.get("ratio") not in (None, 1.0) for x in d["drift"])
                        or bool(d["time"]["slower"]))
    return d


# A compiled node is "slower" when its measured time grew by SLOWER_RATIO or more and by at least
# SLOWER_MIN_US and SLOWER_MIN_SHARE of the new run's timed total: the medians of a few runs on a shared CPU move
# by tens of percent on a node of a few microseconds, which is noise, not a compiler's decision.
SLOWER_RATIO = 1.5
SLOWER_MIN_US = 20.0
SLOWER_MIN_SHARE = 0.02


def _node_times(bt: dict, nt: dict) -> dict:
    """The measured time of each compiled node in both runs, matched like fallbacks (module path, op type, the
    n-th such node), and the nodes that got SLOWER_RATIO× slower. Times from two different CPUs (the
    `node_times` host) are not compared."""
    b_nt, n_nt = bt.get("node_times") or {}, nt.get("node_times") or {}
    out = {"base_us": b_nt.get("timed_us"), "new_us": n_nt.get("timed_us"), "slower": [], "compared": False,
           "why_not": None, "evidence": n_nt.get("evidence")}
    if not b_nt.get("timed_us") or not n_nt.get("timed_us"):
        out["why_not"] = "not timed in " + ("either run" if not b_nt.get("timed_us") and not n_nt.get("timed_us")
                                            else "the base run" if not b_nt.get("timed_us") else "the new run")
        return out
    if b_nt.get("host_cpu") != n_nt.get("host_cpu"):
        out["why_not"] = f"timed on different CPUs ({b_nt.get('host_cpu')} / {n_nt.get('host_cpu')})"
        return out
    out["compared"] = True

    def keyed(t):
        seen: Counter = Counter()
        table = {}
        for n in (t.get("graph") or {}).get("nodes", []):
            k = (n.get("module_path") or "", n["op_type"])
            table[(*k, seen[k])] = n
            seen[k] += 1
        return table
    b_nodes, n_nodes = keyed(bt), keyed(nt)
    floor = max(SLOWER_MIN_US, SLOWER_MIN_SHARE * n_nt["timed_us"])
    for key, n in n_nodes.items():
        b = b_nodes.get(key)
        b_us, n_us = (b or {}).get("measured_us"), n.get("measured_us")
        if not b_us or n_us is None:
            continue
        if n_us / b_us >= SLOWER_RATIO and n_us - b_us >= floor:
            out["slower"].append({"node": n["id"], "op_type": n["op_type"], "module_path": key[0],
                                  "base_us": b_us, "new_us": n_us, "ratio": round(n_us / b_us, 3)})
    out["slower"].sort(key=lambda x: -(x["new_us"] - x["base_us"]))
    return out


def _stage_ends(t: dict) -> dict[str, int]:
    """Canonical stage → the op count the target's toolchain ended that stage with (its last step there)."""
    out = {}
    from ..views.rows import target_steps
    for s in target_steps(t):
        if s["op_count"] is not None and s["stage"] not in ("backend-selection", "fallback-insertion"):
            out[s["stage"]] = s["op_count"]
    return out


def _stage_changes(bt: dict, nt: dict) -> list[dict]:
    """Stages whose op count changed: where in the lowering a compiler decided differently."""
    from ..lowering import STAGE_TITLES, STAGES
    b, n = _stage_ends(bt), _stage_ends(nt)
    return [{"stage": STAGE_TITLES[s], "base": b[s], "new": n[s]} for s in STAGES if s in b and s in n
            and b[s] != n[s]]


def _layout_change(bt: dict, nt: dict) -> dict | None:
    """Reorders / transposes inserted and the bytes they move, when either changed."""
    b, n = bt.get("layout") or {}, nt.get("layout") or {}
    if not b or not n or (b["move_count"], b["bytes_moved"]) == (n["move_count"], n["bytes_moved"]):
        return None
    return {"moves": {"base": b["move_count"], "new": n["move_count"]},
            "bytes": {"base": b["bytes_moved"], "new": n["bytes_moved"]}}


def _accelerated(backend: str) -> bool:
    return backend.split(" ")[0] in ACCELERATORS


def _fallbacks(bt: dict, nt: dict) -> dict:
    def nodes(t):
        return [n for n in (t.get("graph") or {}).get("nodes", []) if n.get("fallback")]

    def key(n):
        return (n.get("module_path") or "", n["op_type"])
    b, n = nodes(bt), nodes(nt)
    added_keys = Counter(map(key, n)) - Counter(map(key, b))
    removed_keys = Counter(map(key, b)) - Counter(map(key, n))
    return {"added": _take(n, added_keys, key), "removed": _take(b, removed_keys, key),
            "count": {"base": len(b), "new": len(n)}}


def _take(nodes: list[dict], wanted: Counter, key) -> list[dict]:
    out = []
    for n in nodes:
        if wanted[key(n)] > 0:
            wanted[key(n)] -= 1
            out.append({"node": n["id"], "op_type": n["op_type"], "module_path": n.get("module_path") or "",
                        "reason": n.get("fallback_reason"), "source_ops": n.get("source_ops") or []})
    return out


def _fusions(tid: str, base: dict, new: dict) -> dict:
    def counts(report):
        return {p["pattern"]: p["targets"].get(tid, 0)
                for p in (report.get("fusion_matrix") or {}).get("patterns", []) if p["targets"].get(tid)}
    b, n = counts(base), counts(new)
    gained = [{"pattern": p, "base": b.get(p, 0), "new": c} for p, c in sorted(n.items()) if c > b.get(p, 0)]
    lost = [{"pattern": p, "base": c, "new": n.get(p, 0)} for p, c in sorted(b.items()) if c > n.get(p, 0)]
    return {"gained": gained, "lost": lost,
            "groups": {"base": (base["targets"][tid].get("fusions") or {}).get("count"),
                       "new": (new["targets"][tid].get("fusions") or {}).get("count")}}


def _drift(bt: dict, nt: dict) -> list[dict]:
    b_out = (bt.get("drift") or {}).get("outputs") or {}
    n_out = (nt.get("drift") or {}).get("outputs") or {}
    rows = []
    for name in n_out:
        if name not in b_out:
            continue
        b, n = b_out[name].get("rel_l2"), n_out[name].get("rel_l2")
        ratio = None
        if b is not None and n is not None:
            ratio = 1.0 if b == n else (n / b if b > 0 else math.inf)
        rows.append({"output": name, "base": b, "new": n, "ratio": ratio,
                     "evidence": (nt.get("drift") or {}).get("evidence")})
    return rows


def _checklist(tid: str, base: dict, new: dict) -> list[dict]:
    b = {i["id"]: i for i in base["checklist"]["targets"].get(tid, [])}
    rows = []
    for i in new["checklist"]["targets"].get(tid, []):
        if i["id"] in b:
            rows.append({"id": i["id"], "question": i["question"], "base": b[i["id"]]["verdict"],
                         "new": i["verdict"], "detail": i["detail"],
                         "worse": WORSE.get(i["verdict"], 0) > WORSE.get(b[i["id"]]["verdict"], 0)})
    return rows


def accelerated_share(t: dict) -> float | None:
    """The share of nodes the accelerator takes: ORT's checker's own figure, else the compute ops not left on the
    CPU (Core ML's predicted units); None on a target without an accelerator or a graph."""
    part = (t.get("info") or {}).get("partitioning")
    if part:
        return part.get("accelerated_share_nodes")
    if not t.get("accelerated") or not t.get("graph"):
        return None
    compute = [n for n in t["graph"]["nodes"] if n.get("kind") == "compute"]
    return round(sum(not n.get("fallback") for n in compute) / len(compute), 4) if compute else None


def _cliff(t: dict) -> float | None:
    return (((t.get("info") or {}).get("boundaries") or {}).get("latency_cliff") or {}).get("estimate_ms")


# ---- rendering --------------------------------------------------------------------------------------------
def change_lines(d: dict) -> list[tuple[str, str]]:
    """(target, one line) for every change, in a fixed order; shared by the text and Markdown renderings."""
    lines = [(t, "target added") for t in d["targets_added"]] + [(t, "target removed") for t in d["targets_removed"]]
    swapped = {(r["module_path"], r["base"]) for r in d["source_ops"]["replaced"]} | \
        {(r["module_path"], r["new"]) for r in d["source_ops"]["replaced"]}
    for r in d["source_ops"]["replaced"]:
        lines.append(("model", f"source op replaced at {r['module_path'] or '(root)'}: {r['base']} → {r['new']}"))
    for op in d["source_ops"]["added"]:
        if (op["module_path"], op["op_type"]) not in swapped:
            lines.append(("model", f"source op added: {op['op_type']} at {op['module_path'] or '(root)'}"))
    for op in d["source_ops"]["removed"]:
        if (op["module_path"], op["op_type"]) not in swapped:
            lines.append(("model", f"source op removed: {op['op_type']} at {op['module_path'] or '(root)'}"))
    for tid, t in d["targets"].items():
        if t["status"]["base"] != t["status"]["new"]:
            lines.append((tid, f"status {t['status']['base']} → {t['status']['new']}"))
        if t["op_count"]["base"] != t["op_count"]["new"]:
            lines.append((tid, f"compiled ops {t['op_count']['base']} → {t['op_count']['new']}"))
        for f in t["fallbacks"]["added"]:
            lines.append((tid, f"new CPU fallback: {f['op_type']} at {f['module_path'] or '(root)'} "
                               f"({f['reason'] or 'no reason given'})"))
        for f in t["fallbacks"]["removed"]:
            lines.append((tid, f"fallback gone: {f['op_type']} at {f['module_path'] or '(root)'}"))
        for f in t["fusions"]["lost"]:
            lines.append((tid, f"fusion lost: {f['pattern']} ({f['base']} → {f['new']})"))
        for f in t["fusions"]["gained"]:
            lines.append((tid, f"fusion gained: {f['pattern']} ({f['base']} → {f['new']})"))
        for c in t["backend_changes"]:
            lines.append((tid, f"backend {c['base']} → {c['new']}: {c['op_type']} at {c['module_path'] or '(root)'}"))
        for c in t["precision_changes"]:
            lines.append((tid, f"precision {c['base']} → {c['new']}: {c['op_type']} at "
                               f"{c['module_path'] or '(root)'}"))
        for c in t.get("stage_changes") or []:
            lines.append((tid, f"{c['stage']}: ends with {c['base']} → {c['new']} ops"))
        if t.get("layout"):
            lay = t["layout"]
            lines.append((tid, f"layout moves {lay['moves']['base']} → {lay['moves']['new']} "
                               f"({lay['bytes']['base']} → {lay['bytes']['new']} bytes)"))
        for x in t["drift"]:
            if x["ratio"] not in (None, 1.0):
                lines.append((tid, f"drift of '{x['output']}' rel L2 {fmt_sci(x['base'])} → {fmt_sci(x['new'])} "
                                   f"({_ratio(x['ratio'])}, {x['evidence']})"))
        for x in (t.get("time") or {}).get("slower", []):
            lines.append((tid, f"slower: {x['op_type']} at {x['module_path'] or '(root)'} {x['base_us']:,.0f} → "
                               f"{x['new_us']:,.0f} µs ({_ratio(x['ratio'])}, measured)"))
        for c in t["checklist"]:
            if c["base"] != c["new"]:
                lines.append((tid, f"checklist ({c['id']}) {c['base']} → {c['new']}: {c['detail']}"))
    return lines


def _ratio(r: float | None) -> str:
    if r is None:
        return "—"
    return "∞×" if math.isinf(r) else f"{r:.2f}×"


def different_models(d: dict) -> str | None:
    """The sentence saying base and new are different models, or None (also for a diff made before it existed)."""
    return (d.get("models") or {}).get("line")


def diff_text(d: dict, regressions: list[dict] | None = None) -> str:
    """The diff for a terminal or a CI log: every name and message from the two reports one printable line
    (`printable_line`), so none can break a line or drive the terminal."""
    show = printable_line
    out = [f"NOTE: {show(different_models(d))}"] if different_models(d) else []
    out += [f"base: {show(d['base']['name'])} ({show(d['base']['sha256'][:12])})",
            f"new:  {show(d['new']['name'])} ({show(d['new']['sha256'][:12])})"]
    lines = change_lines(d)
    out += [f"  {show(tid):24} {show(line)}" for tid, line in lines] or ["  no change in any compiler decision"]
    if regressions is not None:
        out.append(f"gate: {len(regressions)} regression(s)" if regressions else "gate: no regression")
        out += [f"  REGRESSION {show(r['target'])}: {show(r['what'])}" for r in regressions]
    return "\n".join(out) + "\n"


def diff_markdown(d: dict, regressions: list[dict] | None = None, max_rows: int = 200) -> str:
    out = [f"### xc diff: {text(d['base']['name'])} → {text(d['new']['name'])}"]
    if different_models(d):
        out += ["", f"> **⚠️ {text(different_models(d))}**", ""]
    out += [f"base sha256 {code(d['base']['sha256'][:12])} · new sha256 {code(d['new']['sha256'][:12])}", ""]
    if regressions is not None:
        if regressions:
            out += [f"**❌ {len(regressions)} regression(s)**", ""]
            out += [f"- {code(r['target'])} {text(r['what'])}" for r in regressions[:max_rows]] + [""]
        else:
            out += ["**✅ no regression**", ""]
    summary = []
    for tid, t in d["targets"].items():
        drift = max((x["ratio"] for x in t["drift"] if x["ratio"] is not None), default=None)
        summary.append([code(tid), text(f"{t['status']['base']} → {t['status']['new']}"
                                        if t["status"]["base"] != t["status"]["new"] else t["status"]["new"]),
                        text(_arrow(t["op_count"])), text(_arrow(t["fallbacks"]["count"])),
                        f"+{len(t['fusions']['gained'])} / −{len(t['fusions']['lost'])}",
                        str(len(t["backend_changes"])), _ratio(drift),
                        str(sum(c["base"] != c["new"] for c in t["checklist"]))])
    if summary:
        out += [table(["target", "status", "compiled ops", "CPU fallbacks", "fusions", "backend changes",
                       "worst drift ratio", "verdicts changed"], summary), ""]
    lines = change_lines(d)
    if lines:
        out += ["<details><summary>Every change</summary>", ""]
        out += [f"- {code(tid)} {text(line)}" for tid, line in lines[:max_rows]]
        if len(lines) > max_rows:
            out.append(f"- … and {len(lines) - max_rows} more (in the JSON diff)")
        out += ["", "</details>", ""]
    else:
        out += ["No change in any compiler decision.", ""]
    return "\n".join(out)


def _arrow(pair: dict) -> str:
    b, n = pair.get("base"), pair.get("new")
    return str(n) if b == n else f"{b} → {n}"
