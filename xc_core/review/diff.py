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

What changed in the model itself (blocks inserted, ops replaced, weights retrained: review/model_diff.py) is `model`,
and every decision change that names a source op carries a `cause`: the model change at that op, or at a graph
neighbour of it; else a toolchain that changed between the runs; else nothing xc can name (`_attach_causes`).
"""
from __future__ import annotations

import math
from collections import Counter

from ..analysis.node_time import (
    FASTER,
    SLOWER,
    SLOWER_MIN_US,
    SLOWER_RATIO,
    SPREAD_UNKNOWN,
    UNCHANGED,
    WITHIN_NOISE,
    figure,
    host_busy,
    noise_test,
    slower_floor,
    target_shift,
    time_change,
)
from ..errors import printable_line
from ..evidence import ESTIMATED_COMPILER
from ..report.types import NodeRecord, NodeTimes, Report, TargetBlock
from ..views.rows import ACCELERATORS, fmt_sci
from ..views.time_evidence import is_estimated
from ..views.typed_report import as_report, as_target
from .gate import fallback_place
from .matters import accuracy_figures, cost_figures, headline, mb, pct, seconds, share_figures, size
from .md_text import code, table, text
from .model_diff_text import model_changes_markdown, model_changes_text

WORSE = {"pass": 0, "not applicable": 0, "warn": 1, "fail": 2}
SAME_MODEL_SHARE = 0.5      # of the larger model's source ops, lined up by module path and op type


def diff_reports(base: Report | dict, new: Report | dict, model: dict | None = None) -> dict:
    """The decision diff of two runs' reports, joined to `model`, the model diff of the two runs (review/
    model_diff.py's dict; None: computed here from the reports alone, so weights compare by their recorded norms)."""
    if model is None:
        model = model_diff_of_reports(base, new)
    # Both upgraded to today's fields: two runs of different xc versions compare on the same terms.
    base, new = as_report(base), as_report(new)
    b_ops, n_ops = _source_ops(base), _source_ops(new)
    n_ops = _matched_as_the_model_diff(b_ops, n_ops, model)
    out = {
        "models": _models(base, new, b_ops, n_ops),     # first: it says how to read everything after it
        "base": _about(base), "new": _about(new),
        "targets_added": [t for t in new.targets if t not in base.targets],
        "targets_removed": [t for t in base.targets if t not in new.targets],
        "source_ops": {
            "added": [_op_ref(n_ops[k]) for k in n_ops if k not in b_ops],
            "removed": [_op_ref(b_ops[k]) for k in b_ops if k not in n_ops],
            "op_count": {"base": _captured_ops(base), "new": _captured_ops(new)},
        },
        "targets": {},
    }
    swaps = _replacements(b_ops, n_ops)
    for tid in [t for t in new.targets if t in base.targets]:
        out["targets"][tid] = _target_diff(tid, base, new, b_ops, n_ops, swaps)
    # Kept for scripts that read it; the change lines say what changed in the model from `model` instead.
    out["source_ops"]["replaced"] = _replaced(out["source_ops"])
    out["model"] = model
    _attach_causes(out, base, new, model)
    # The model diff, not the source ops by module path: a renumbered block is no change.
    out["changed"] = bool(out["targets_added"] or out["targets_removed"] or model_changed(model)
                          or any(t["changed"] for t in out["targets"].values()))
    return out


def model_diff_of_reports(base: Report | dict, new: Report | dict) -> dict:
    """The model diff of two reports without their runs' files: weights compare by the norms the reports recorded."""
    from types import SimpleNamespace

    from .model_diff import model_diff_of_runs
    sides = []
    for report in (base, new):
        data = report.to_dict() if isinstance(report, Report) else report
        # A run as model_diff_of_runs reads one (review.runs.Run: runs.py reads reports through this module, so it
        # is not imported here), with no files: no values.
        sides.append(SimpleNamespace(report=data, files={}, label=as_report(data).source.name or "model"))
    return model_diff_of_runs(*sides)


def model_changed(model: dict | None) -> bool:
    """Whether the model diff found anything: a change, or models that cannot be lined up at all."""
    return bool(model) and (not model.get("comparable", True) or bool(model.get("changes"))
                            or bool(model.get("blocks")))


def _about(report: Report) -> dict:
    src = report.source
    return {"name": src.name, "kind": src.kind, "sha256": src.sha256, "run": report.run.key}


def _captured_ops(report: Report) -> int | None:
    """The captured graph's op count (None: no captured graph)."""
    return report.capture.op_count_before if report.capture else None


def _models(base: Report, new: Report, b_ops: dict, n_ops: dict) -> dict:
    """Are base and new one model? {relation, common_source_ops, line}: relation is same-file, new-version,
    edited or different; line (None unless different) is the sentence every format puts first."""
    b, n = base.source, new.source
    larger = max(len(b_ops), len(n_ops))
    common = sum(1 for k in n_ops if k in b_ops) / larger if larger else None
    if b.sha256 == n.sha256:
        relation = "same-file"
    elif b.name == n.name:
        relation = "new-version"
    elif common is not None and common >= SAME_MODEL_SHARE:
        relation = "edited"
    else:
        relation = "different"
    line = None
    if relation == "different":
        def about(src, report):
            ops = _captured_ops(report)
            name = printable_line(src.name)     # a file name may hold a newline or a terminal escape
            return (f"{name} ({src.kind}, sha256 {src.sha256[:12]}"
                    + (f", {ops} captured ops" if ops is not None else ", no captured graph") + ")")
        shared = (f"{100 * common:.0f}% of source ops line up" if common is not None
                  else "no captured graph to line up")
        line = (f"base and new are different models: {about(b, base)} vs {about(n, new)}, {shared} — the "
                "comparison below lines up targets, not the same ops")
    return {"relation": relation, "common_source_ops": None if common is None else round(common, 3), "line": line}


# ---- source ops ---------------------------------------------------------------------------------------------
def _source_ops(report: Report) -> dict[tuple, dict]:
    """The alignment's source-op rows (as the report holds them) by where they sit."""
    seen: Counter = Counter()
    out = {}
    for row in report.alignment.source_ops or []:
        where = (row.get("module_path") or "", row["op_type"])
        out[(*where, seen[where])] = row
        seen[where] += 1
    return out


def _matched_as_the_model_diff(b_ops: dict, n_ops: dict, model: dict) -> dict[tuple, dict]:
    """new's source ops keyed so that an op the model diff matched to a base op has that op's key: a block inserted
    into a Sequential renumbers every later module path, and matching by (module path, op type, index) would then
    compare each later block with the one before it. An op the model diff calls added keeps a key no base op has;
    a replaced op keeps its own (the swap is paired by module path, `_replacements`). Unchanged when the model diff
    did not read the captured graphs (a PyTorch run against an ONNX one, models that do not line up)."""
    graphs = [str((model.get(side) or {}).get("graph") or "") for side in ("base", "new")]
    if not model.get("comparable") or not model.get("node_map") or any(g.startswith("ONNX export") for g in graphs):
        return n_ops
    node_map = model["node_map"]
    replaced = {n for n, st in ((model.get("node_status") or {}).get("new") or {}).items() if st == "replaced"}
    base_key = {row["source_op"]: k for k, row in b_ops.items()}
    out = {}
    for k, row in n_ops.items():
        matched = node_map.get(row["source_op"])
        if matched in base_key and row["source_op"] not in replaced:
            out[base_key[matched]] = row
        elif k in b_ops:
            out[(k[0], k[1], ("new", k[2]))] = row      # its place-key is a base op's that matched elsewhere
        else:
            out[k] = row
    return out


def _replacements(b_ops: dict, n_ops: dict) -> dict[tuple, tuple]:
    """new source-op key → the base key it replaces: ops removed and added at the same module path, paired in
    order (as `_replaced` pairs them for the change lines)."""
    removed: dict[str, list] = {}
    for k in b_ops:
        if k not in n_ops:
            removed.setdefault(k[0], []).append(k)
    out = {}
    for k in n_ops:
        if k not in b_ops and removed.get(k[0]):
            out[k] = removed[k[0]].pop(0)
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
def _target_diff(tid: str, base: Report, new: Report, b_ops: dict, n_ops: dict, swaps: dict) -> dict:
    bt, nt = base.targets[tid], new.targets[tid]
    d: dict = {"status": {"base": bt.status, "new": nt.status},
               "op_count": {"base": bt.op_count_after, "new": nt.op_count_after}}
    d["fallbacks"] = _fallbacks(tid, bt, nt, b_ops, n_ops, swaps)
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
    d["evidence"] = {"assignment": nt.evidence.get("assignment"), "numerics": nt.evidence.get("numerics")}
    # What the change does to a release (review/matters.py): task accuracy, cost on this host, weighted share.
    d["accuracy"] = {"base": accuracy_figures(bt), "new": accuracy_figures(nt)}
    d["cost"] = {"base": cost_figures(bt), "new": cost_figures(nt)}
    d["compute_share"] = {"base": share_figures(bt), "new": share_figures(nt)}
    d["changed"] = bool(bt.status != nt.status or d["op_count"]["base"] != d["op_count"]["new"]
                        or d["fallbacks"]["added"] or d["fallbacks"]["removed"] or d["fusions"]["gained"]
                        or d["fusions"]["lost"] or d["backend_changes"] or d["precision_changes"]
                        or d["stage_changes"] or d["layout"]
                        or any(c["base"] != c["new"] for c in d["checklist"])
                        or any(x.get("ratio") not in (None, 1.0) for x in d["drift"])
                        or bool(d["time"]["slower"]) or bool(d["time"].get("faster"))
                        or (whole_run_time(d["time"]) or {}).get("verdict") in (SLOWER, FASTER)
                        or bool(_matters_lines(d)))
    return d


def _matters_lines(t: dict) -> list[str]:
    """The release figures that changed: accuracy (or agreement), the artifact's size and the weighted accelerated
    shares. Memory and times move from run to run on any host: the compact table shows them, the gate judges them,
    but they are no change on their own."""
    lines = []
    acc = t.get("accuracy") or {}
    b, n = acc.get("base"), acc.get("new")
    if b and n:
        labelled = b.get("accuracy") is not None and n.get("accuracy") is not None
        (bv, what), (nv, _) = headline(b, labelled), headline(n, labelled)
        if bv is not None and nv is not None and round(bv, 6) != round(nv, 6):
            lines.append(f"{what} {pct(bv)} → {pct(nv)} ({n.get('evidence')})")
    elif bool(b) != bool(n):
        lines.append("task accuracy " + ("no longer measured (no dataset run)" if b else "measured (a dataset run)"))
    cost = t.get("cost") or {}
    b, n = cost.get("base") or {}, cost.get("new") or {}
    if b.get("artifact_bytes") is not None and n.get("artifact_bytes") is not None \
            and b["artifact_bytes"] != n["artifact_bytes"]:
        lines.append(f"artifact size {size(b['artifact_bytes'])} → {size(n['artifact_bytes'])}")
    share = t.get("compute_share") or {}
    b, n = share.get("base") or {}, share.get("new") or {}
    for way, words in (("by_macs", "by MACs"), ("by_time", "by measured time")):
        bs, ns = (b.get(way) or {}).get("share"), (n.get(way) or {}).get("share")
        # by time: only a move of a point or more (the times the weights come from are measured, and noisy)
        if bs is not None and ns is not None and abs(bs - ns) >= (0.01 if way == "by_time" else 1e-4):
            lines.append(f"accelerated share {words} {pct(bs)} → {pct(ns)} ({(n.get(way) or {}).get('evidence')})")
    return lines


def whole_run_time(time: dict) -> dict | None:
    """The judged time of the whole run (`_node_times`' `run`: the toolchain's own run, where both runs timed one),
    else the timed nodes' sum (`total`), with `what` naming which; None where neither run was compared."""
    run = time.get("run") or {}
    if run.get("base") and run.get("new"):
        return {**run, "what": "whole run"}
    total = time.get("total") or {}
    return {**total, "what": "timed nodes' total"} if total.get("base") and total.get("new") else None


def _node_times(bt: TargetBlock, nt: TargetBlock) -> dict:
    """The measured time of each compiled node in both runs, matched like fallbacks (module path, op type, the
    n-th such node), judged by the noise test (analysis/node_time.time_change; `test` says it in words): `slower`
    the nodes beyond the runs' noise, `within_noise` how many changed materially but not beyond it,
    `spread_unknown` those a run without per-run samples (an older xc) cannot judge; `shift` what every node of the
    target shared (a busier host); `host_busy` why neither run's times are judged, when one was profiled on a busy
    host; `run` and `total` the whole run's time and the timed nodes' sum, judged the same way. Times from two
    different CPUs (the `node_times` host) are not compared. Times a compiler estimated (estimated-compiler) are
    compared by `_estimated_node_times`, and never with measured ones."""
    b_nt, n_nt = bt.node_times, nt.node_times
    out = {"base_us": b_nt.timed_us, "new_us": n_nt.timed_us, "slower": [], "compared": False,
           "why_not": None, "evidence": n_nt.evidence, "test": noise_test(), "shift": None,
           "within_noise": 0, "spread_unknown": [], "run": None, "total": None, "host_busy": None}
    if not b_nt.timed_us or not n_nt.timed_us:
        out["why_not"] = "not timed in " + ("either run" if not b_nt.timed_us and not n_nt.timed_us
                                            else "the base run" if not b_nt.timed_us else "the new run")
        return out
    if is_estimated(b_nt) != is_estimated(n_nt):
        out["evidence"] = None
        out["why_not"] = (f"one run's times are measured, the other's are the compiler's estimate "
                          f"({ESTIMATED_COMPILER}): a performance model's figure and a measurement are not comparable")
        return out
    if b_nt.host_cpu != n_nt.host_cpu:
        out["why_not"] = (f"estimated for different devices ({b_nt.host_cpu} / {n_nt.host_cpu})"
                          if is_estimated(n_nt) else f"timed on different CPUs ({b_nt.host_cpu} / {n_nt.host_cpu})")
        return out
    if is_estimated(n_nt):
        return _estimated_node_times(bt, nt, out)
    out["compared"] = True

    b_nodes, n_nodes = _keyed_nodes(bt), _keyed_nodes(nt)
    b_samples = _samples(b_nt).get("nodes") or {}
    n_samples = _samples(n_nt).get("nodes") or {}
    matched = [(key, b_nodes[key], n) for key, n in n_nodes.items() if key in b_nodes
               and b_nodes[key].measured_us is not None and n.measured_us is not None]
    shift = target_shift([(b_samples[b.id], n_samples[n.id]) for _, b, n in matched
                          if b_samples.get(b.id) and n_samples.get(n.id)])
    out["shift"] = shift
    busy = out["host_busy"] = host_busy(b_nt.cpu_wait_share, n_nt.cpu_wait_share)
    floor = slower_floor(n_nt.timed_us)
    for key, b, n in matched:
        c = time_change(figure(b.measured_us, b_samples.get(b.id)),
                        figure(n.measured_us, n_samples.get(n.id)), floor, shift, busy=busy)
        if c["verdict"] in (SLOWER, WITHIN_NOISE, SPREAD_UNKNOWN) and n.measured_us > b.measured_us:
            row = {"node": n.id, "op_type": n.op_type, "module_path": key[0], "base_us": b.measured_us,
                   "new_us": n.measured_us, "ratio": c["ratio"], "why": c["why"]}
            if c["verdict"] == SLOWER:
                out["slower"].append({**row, "base_iqr": _iqr(c["base"]), "new_iqr": _iqr(c["new"]),
                                      "expected_us": c["expected_us"]})
            elif c["verdict"] == WITHIN_NOISE:
                out["within_noise"] += 1
            else:
                out["spread_unknown"].append(row)
    out["slower"].sort(key=lambda x: -(x["new_us"] - x["base_us"]))
    nodes = shift["nodes"] if shift else 1
    b_s, n_s = _samples(b_nt), _samples(n_nt)
    out["run"] = time_change(figure(b_nt.run_us, b_s.get("run")), figure(n_nt.run_us, n_s.get("run")),
                             slower_floor(None), shift, min_ratio=WHOLE_RUN_RATIO, nodes=nodes, busy=busy)
    out["total"] = time_change(figure(b_nt.timed_us, b_s.get("total")),
                               figure(n_nt.timed_us, n_s.get("total")), slower_floor(None), shift,
                               min_ratio=WHOLE_RUN_RATIO, nodes=nodes, busy=busy)
    return out


def _keyed_nodes(t: TargetBlock) -> dict[tuple, NodeRecord]:
    """A target's nodes by (module path, op type, the n-th such node): how two runs' nodes are matched."""
    seen: Counter = Counter()
    table = {}
    for n in t.graph.nodes:
        k = (n.module_path or "", n.op_type)
        table[(*k, seen[k])] = n
        seen[k] += 1
    return table


# A compiler's performance model is deterministic (the same graph and options give the same cycles), so two
# estimates for one device compare exactly: no runs, no noise test. A move beyond this share is a change.
ESTIMATE_CHANGE = 0.01


def _estimated_node_times(bt: TargetBlock, nt: TargetBlock, out: dict) -> dict:
    """Two runs' estimated times for the same modelled device, compared exactly: `slower` and `faster` the nodes
    whose estimate moved by more than ESTIMATE_CHANGE (with the ratio), `total` the estimated sum judged the same
    way. No shift, no spread, no host to be busy: the figures are the compiler's, not a measurement."""
    out.update(compared=True, evidence=ESTIMATED_COMPILER, faster=[],
               test=f"{ESTIMATED_COMPILER}: the compiler's estimates compared exactly — a move of more than "
                    f"{100 * ESTIMATE_CHANGE:g} % is a change")
    b_nodes, n_nodes = _keyed_nodes(bt), _keyed_nodes(nt)
    for key, n in n_nodes.items():
        b = b_nodes.get(key)
        if b is None or b.estimated_us is None or n.estimated_us is None:
            continue
        c = _estimate_change(b.estimated_us, n.estimated_us)
        if c["verdict"] in (SLOWER, FASTER):
            out["slower" if c["verdict"] == SLOWER else "faster"].append(
                {"node": n.id, "op_type": n.op_type, "module_path": key[0], "base_us": b.estimated_us,
                 "new_us": n.estimated_us, "ratio": c["ratio"], "why": c["why"], "evidence": ESTIMATED_COMPILER})
    out["slower"].sort(key=lambda x: -(x["new_us"] - x["base_us"]))
    out["faster"].sort(key=lambda x: x["new_us"] - x["base_us"])
    out["total"] = _estimate_change(bt.node_times.timed_us, nt.node_times.timed_us)
    return out


def _estimate_change(base_us: float, new_us: float) -> dict:
    """One estimated time in two runs, in time_change's shape ({base, new: {median}, ratio, verdict, why})."""
    ratio = round(new_us / base_us, 4) if base_us else (None if new_us == 0 else math.inf)
    moved = ratio is None or math.isinf(ratio) or abs(new_us - base_us) > ESTIMATE_CHANGE * base_us
    verdict = UNCHANGED if not moved or new_us == base_us else SLOWER if new_us > base_us else FASTER
    why = (f"the compiler's estimate moved by more than {100 * ESTIMATE_CHANGE:g} % ({ESTIMATED_COMPILER})"
           if verdict != UNCHANGED else f"within {100 * ESTIMATE_CHANGE:g} % ({ESTIMATED_COMPILER})")
    return {"base": {"median": base_us}, "new": {"median": new_us}, "ratio": ratio, "expected_us": None,
            "verdict": verdict, "why": why}


# A whole run's time is judged from 1.1× (the first of the fleet's time buckets, Qualcomm AI Hub's "within noise"
# bound): a repository's max_time_ratio then says how much slower it allows.
WHOLE_RUN_RATIO = 1.1


def _samples(node_times: NodeTimes) -> dict:
    """The per-run samples a `node_times` block kept ({} from an older xc, which kept none)."""
    samples = node_times.samples_us
    return samples if isinstance(samples, dict) else {}


def _iqr(s: dict | None) -> list[float] | None:
    return [s["q1"], s["q3"]] if s and "q1" in s else None


def _stage_ends(t: TargetBlock) -> dict[str, int]:
    """Canonical stage → the op count the target's toolchain ended that stage with (its last step there)."""
    out = {}
    from ..views.rows import target_steps
    for s in target_steps(t):
        if s["op_count"] is not None and s["stage"] not in ("backend-selection", "fallback-insertion"):
            out[s["stage"]] = s["op_count"]
    return out


def _stage_changes(bt: TargetBlock, nt: TargetBlock) -> list[dict]:
    """Stages whose op count changed: where in the lowering a compiler decided differently."""
    from ..lowering import STAGE_TITLES, STAGES
    b, n = _stage_ends(bt), _stage_ends(nt)
    return [{"stage": STAGE_TITLES[s], "base": b[s], "new": n[s]} for s in STAGES if s in b and s in n
            and b[s] != n[s]]


def _layout_change(bt: TargetBlock, nt: TargetBlock) -> dict | None:
    """Reorders / transposes inserted and the bytes they move, when either changed."""
    b, n = bt.layout, nt.layout
    if not b or not n or (b["move_count"], b["bytes_moved"]) == (n["move_count"], n["bytes_moved"]):
        return None
    return {"moves": {"base": b["move_count"], "new": n["move_count"]},
            "bytes": {"base": b["bytes_moved"], "new": n["bytes_moved"]}}


def _accelerated(backend: str) -> bool:
    return backend.split(" ")[0] in ACCELERATORS


def _fallbacks(tid: str, bt: TargetBlock, nt: TargetBlock, b_ops: dict, n_ops: dict, swaps: dict) -> dict:
    """CPU fallbacks judged by what runs where: each compiled fallback node of the new run through the source ops it
    carries, each matched to base by where it sits (`_source_ops`' key) or, where the model replaced it, to the op
    it replaced at the same module path (`swaps`). A fallback is new only when one of its source ops ran on the
    accelerator in base, or is new in the model and falls back; an op that was on the CPU in base and is on the
    CPU now — the same op, or its replacement (silu → gelu) — is not. Gone: a base fallback one of whose source ops
    now runs on the accelerator or left the model. Compiled nodes that carry no source op (a cast the compiler
    inserted), and whole runs without the source-op table, are matched by (module path, compiled op type) as a
    multiset. `added` / `removed` are grouped per op and place with a `count`; `count` is the compiled fallback
    nodes of each run; `still_on_cpu` the replaced ops that were on the CPU before and after."""
    def fallback_nodes(t: TargetBlock) -> list[NodeRecord]:
        return [n for n in t.graph.nodes if n.fallback]
    b_nodes, n_nodes = fallback_nodes(bt), fallback_nodes(nt)
    out = {"count": {"base": len(b_nodes), "new": len(n_nodes)}, "added": [], "removed": [], "still_on_cpu": [],
           "matched_by": "source op" if b_ops and n_ops else "module path and compiled op type"}
    b_key = {row["source_op"]: k for k, row in b_ops.items()} if b_ops and n_ops else {}
    n_key = {row["source_op"]: k for k, row in n_ops.items()} if b_ops and n_ops else {}
    b_mapped = [n for n in b_nodes if any(s in b_key for s in n.source_ops)]
    n_mapped = [n for n in n_nodes if any(s in n_key for s in n.source_ops)]
    b_rest = [n for n in b_nodes if not any(s in b_key for s in n.source_ops)]
    n_rest = [n for n in n_nodes if not any(s in n_key for s in n.source_ops)]

    def key(n: NodeRecord):
        return (n.module_path or "", n.op_type)
    added_keys = Counter(map(key, n_rest)) - Counter(map(key, b_rest))
    removed_keys = Counter(map(key, b_rest)) - Counter(map(key, n_rest))
    added, removed = _take(n_rest, added_keys, key), _take(b_rest, removed_keys, key)
    if n_mapped or b_mapped:
        replaced_by = {old: new for new, old in swaps.items()}

        def on_cpu(row: dict | None) -> bool | None:
            """Whether a source op's compiled nodes fall back on this target (None: it compiled to no node)."""
            cell = (row or {}).get("targets", {}).get(tid) if row else None
            if not cell or cell.get("status") in (None, "absent", "missing"):
                return None
            return cell.get("status") == "fallback"

        def counterpart(k, ops_there, pairs):
            """The row an op's key has on the other side: the same key, else what replaced it / it replaced."""
            if k in ops_there:
                return ops_there[k], False
            other = pairs.get(k)
            return (ops_there.get(other), True) if other else (None, False)
        for n in n_mapped:
            keys = [n_key[s] for s in n.source_ops if s in n_key]
            sides = [counterpart(k, b_ops, swaps) for k in keys]
            # New unless every source op it carries was on the CPU in base (itself, or the op it replaced).
            if any(on_cpu(row) is not True for row, _ in sides):
                added.append(_fallback_ref(n, n_ops[keys[0]]))
            else:
                for k, (row, swapped) in zip(keys, sides):
                    if swapped:
                        out["still_on_cpu"].append({"module_path": k[0], "base": row["op_type"], "new": k[1],
                                                    "node": n.id, "op_type": n.op_type})
        for n in b_mapped:
            keys = [b_key[s] for s in n.source_ops if s in b_key]
            sides = [counterpart(k, n_ops, replaced_by) for k in keys]
            # Gone when a source op it carried runs on the accelerator now, or left the model.
            if any(on_cpu(row) is not True for row, _ in sides):
                removed.append(_fallback_ref(n, b_ops[keys[0]]))
    out["added"], out["removed"] = _grouped(added), _grouped(removed)
    out["still_on_cpu"] = [dict(x) for x in {(x["module_path"], x["base"], x["new"]): x
                                             for x in out["still_on_cpu"]}.values()]
    return out


def _fallback_ref(n: NodeRecord, row: dict | None) -> dict:
    """A compiled fallback node as the diff names it: its compiled op type, and where it sits — the module path of
    the source op it carries (the capture's, which every target shares), else the node's own."""
    return {"node": n.id, "op_type": n.op_type,
            "module_path": (row or {}).get("module_path") or n.module_path or "",
            "source_op_type": (row or {}).get("op_type"), "reason": n.fallback_reason,
            "source_ops": list(n.source_ops)}


def _grouped(refs: list[dict]) -> list[dict]:
    """One entry per (compiled op type, module path, reason), with the count of nodes and their ids: a line per
    distinct op and place, not one per node."""
    groups: dict[tuple, dict] = {}
    for r in refs:
        g = groups.setdefault((r["op_type"], r["module_path"], r["reason"]), {**r, "count": 0, "nodes": []})
        g["count"] += 1
        g["nodes"].append(r["node"])
    return list(groups.values())


def _take(nodes: list[NodeRecord], wanted: Counter, key) -> list[dict]:
    out = []
    for n in nodes:
        if wanted[key(n)] > 0:
            wanted[key(n)] -= 1
            out.append(_fallback_ref(n, None))
    return out


def _fusions(tid: str, base: Report, new: Report) -> dict:
    def counts(report: Report):
        return {p["pattern"]: p["targets"].get(tid, 0)
                for p in report.fusion_matrix.patterns or [] if p["targets"].get(tid)}
    b, n = counts(base), counts(new)
    gained = [{"pattern": p, "base": b.get(p, 0), "new": c} for p, c in sorted(n.items()) if c > b.get(p, 0)]
    lost = [{"pattern": p, "base": c, "new": n.get(p, 0)} for p, c in sorted(b.items()) if c > n.get(p, 0)]
    return {"gained": gained, "lost": lost,
            "groups": {"base": _fused_groups(base.targets[tid]), "new": _fused_groups(new.targets[tid])}}


def _fused_groups(t: TargetBlock) -> int | None:
    """How many fused groups the target's graph has (None: no fusion block)."""
    return t.fusions.count if t.fusions else None


def _drift(bt: TargetBlock, nt: TargetBlock) -> list[dict]:
    """Each output's rel L2 in both runs and new / base, with what each was measured against (a target that
    compiled the program xc's ONNX → PyTorch route made is measured against that program: the compiler's drift,
    never the route's), whether the new figure's reference can tell (`informative`) and why a figure is
    implausible. A figure that became implausible with no rel L2 left (a NaN output) is an infinite ratio."""
    from ..analysis.drift import output_flags
    b_drift, n_drift = bt.drift, nt.drift
    b_out, n_out = b_drift.outputs, n_drift.outputs
    rows = []
    for name in n_out:
        if name not in b_out:
            continue
        b, n = b_out[name].rel_l2, n_out[name].rel_l2
        # output_flags (analysis/, below the typed views) reads one output's figures as report.json holds them.
        (_, b_bad), (n_unsure, n_bad) = output_flags(b_out[name].to_dict()), output_flags(n_out[name].to_dict())
        ratio = None
        if b is not None and n is not None:
            ratio = 1.0 if b == n else (n / b if b > 0 else math.inf)
        elif n_bad and not b_bad and b_out[name].error is None:
            ratio = math.inf
        rows.append({"output": name, "base": b, "new": n, "ratio": ratio,
                     "against": {"base": b_drift.reference, "new": n_drift.reference},
                     "informative": not n_unsure, "implausible": {"base": b_bad, "new": n_bad},
                     "evidence": n_drift.evidence})
    return rows


def _checklist(tid: str, base: Report, new: Report) -> list[dict]:
    b = {i.id: i for i in base.checklist.targets.get(tid, ())}
    rows = []
    for i in new.checklist.targets.get(tid, ()):
        if i.id in b:
            rows.append({"id": i.id, "question": i.question, "base": b[i.id].verdict,
                         "new": i.verdict, "detail": i.detail,
                         "worse": WORSE.get(i.verdict, 0) > WORSE.get(b[i.id].verdict, 0)})
    return rows


def accelerated_share(t: TargetBlock | dict) -> float | None:
    """The share of nodes the accelerator takes: ORT's checker's own figure, else the compute ops not left on the
    CPU (Core ML's predicted units); None on a target without an accelerator or a graph."""
    t = as_target(t)
    part = t.info.partitioning
    if part:
        return part.extra.get("accelerated_share_nodes")     # the checker's own figure, a toolchain fact
    if not t.accelerated or not t.graph:
        return None
    compute = t.graph.compute_nodes()
    return round(sum(not n.fallback for n in compute) / len(compute), 4) if compute else None


def _cliff(t: TargetBlock) -> float | None:
    return (t.info.boundaries.latency_cliff or {}).get("estimate_ms")


# ---- why a decision changed -----------------------------------------------------------------------------------
# Which model change explains a decision change best, when an op (or its neighbours) has several.
_CAUSE_ORDER = ("replaced", "added", "removed", "attributes", "shapes", "dtypes", "weights")
# Nodes that carry no computation of their own (a view, a transpose, a cast, a constant): a neighbour is looked for
# through them, so `conv → reshape → relu` still makes the conv and the relu neighbours.
_PASS_THROUGH = ("alias", "layout", "cast", "constant")
_MAX_PASS_THROUGH = 4


def _attach_causes(d: dict, base: Report, new: Report, model: dict) -> None:
    """A `cause` on every decision change that names a source op (a captured-graph node: of new, or of base for what
    is gone): {"kind": "model", ...} when the model diff changed that op; {"kind": "neighbourhood", ...} when it
    changed a graph neighbour of it (1 hop, through view/layout/cast nodes); {"kind": "toolchain", ...} when the
    target's toolchain versions (or xc's, whose rules predict some placements) differ between the runs; else
    {"kind": "unexplained"}: same model there, same toolchain — the compiler decided differently. Two models that
    cannot be lined up get {"kind": "incomparable"}, an op that is no captured node {"kind": "unknown"} (both
    without a text: nothing to add to the line)."""
    explain = _Explainer(base, new, model)
    for tid, t in d["targets"].items():
        def cause(side: str, ops) -> dict:
            return explain.cause(tid, side, [o for o in ops or () if o])
        for f in t["fallbacks"]["added"]:
            f["cause"] = cause("new", f.get("source_ops"))
        for f in t["fallbacks"]["removed"]:
            f["cause"] = cause("base", f.get("source_ops"))
        for c in t["backend_changes"] + t["precision_changes"]:
            c["cause"] = cause("new", [c.get("source_op")])
        for side, way in (("new", "gained"), ("base", "lost")):
            report = new if side == "new" else base
            for f in t["fusions"][way]:
                f["cause"] = cause(side, _fused_ops(report, tid, f["pattern"], explain, side))
        timed = [x for way in ("slower", "faster") for x in (t.get("time") or {}).get(way) or []]
        if timed:
            carried = {n.id: n.source_ops for n in new.targets[tid].graph.nodes}
            for x in timed:
                x["cause"] = cause("new", carried.get(x.get("node"), ()))


def _fused_ops(report: Report, tid: str, pattern: str, explain: "_Explainer", side: str) -> list[str]:
    """The source ops of every fused group of `pattern` (source op types joined by "+", as the fusion matrix names
    it) on the target: the changed ones among them explain why the count moved."""
    index = {n.id: (i, n) for i, n in enumerate(report.capture.graph.nodes)}
    ops = []
    for n in report.targets[tid].graph.nodes:
        carried = sorted((index[s] for s in n.source_ops if s in index and index[s][1].kind == "compute"),
                         key=lambda x: x[0])
        if len(carried) >= 2 and "+".join(c[1].op_type for c in carried) == pattern:
            ops += [c[1].id for c in carried]
    # Changed ops first: `cause` takes the first op with a model change, in this order.
    return sorted(ops, key=lambda o: o not in explain.status[side])


class _Explainer:
    """What `_attach_causes` looks up: the model diff's changes by node, each side's captured-graph neighbours
    (built on first use), and per target the versions that differ."""

    def __init__(self, base: Report, new: Report, model: dict):
        self.reports = {"base": base, "new": new}
        self.model = model
        status = model.get("node_status") or {}
        self.status = {"base": status.get("base") or {}, "new": status.get("new") or {}}
        self.change_at: dict[str, dict[str, dict]] = {"base": {}, "new": {}}
        for c in model.get("changes") or []:
            for side in ("base", "new"):
                node = c.get(f"{side}_node")
                if node is None:
                    continue
                kept = self.change_at[side].get(node)
                if kept is None or _cause_rank(c) < _cause_rank(kept):
                    self.change_at[side][node] = c
        self._hood: dict[str, dict[str, set[str]]] = {}
        self._captured: dict[str, set[str]] = {}
        self._versions: dict[str, dict | None] = {}

    def cause(self, tid: str, side: str, ops: list[str]) -> dict:
        if not self.model.get("comparable", True):
            return {"kind": "incomparable", "text": None}      # the model diff's own line says why, once
        if not any(op in self.captured(side) for op in ops):
            # No captured node to look at (a run without a captured graph, an op the compiler made up): whether
            # the model changed there is not known, so nothing is said.
            return {"kind": "unknown", "text": None}
        for op in ops:
            change = self._change(side, op)
            if change:
                return {"kind": "model", "change": change["kind"], "module_path": change.get("module_path") or "",
                        "op_type": change.get("op_type"), "node": op, "text": _model_cause_text(change)}
        near = [(self._change(side, other), other) for op in ops for other in sorted(self.neighbours(side, op))]
        near = sorted(((c, o) for c, o in near if c), key=lambda x: _cause_rank(x[0]))
        if near:
            change, other = near[0]
            where = change.get("block") or change.get("module_path") or change.get("op_type") or other
            return {"kind": "neighbourhood", "change": change["kind"], "module_path": change.get("module_path") or "",
                    "op_type": change.get("op_type"), "node": other,
                    "text": f"on an unchanged op next to {where or '(root)'} ({_kind_words(change)})"}
        moved = self.versions(tid)
        if moved:
            return {"kind": "toolchain", "versions": moved,
                    "text": "unchanged model; toolchain " + ", ".join(f"{k} {v['base']} → {v['new']}"
                                                                       for k, v in moved.items())}
        if self.model.get("changes"):
            # The compiler decided differently for an op the model diff left alone: a change further away (a
            # partition boundary, a memory plan) or the compiler's own — xc cannot say which.
            return {"kind": "unexplained", "text": "on an unchanged op, same toolchain (the model changed elsewhere)"}
        return {"kind": "unexplained", "text": "unchanged model and toolchain"}

    def captured(self, side: str) -> set[str]:
        if side not in self._captured:
            self._captured[side] = {n.id for n in self.reports[side].capture.graph.nodes}
        return self._captured[side]

    def _change(self, side: str, node: str) -> dict | None:
        if node not in self.status[side]:
            return None
        return self.change_at[side].get(node) or {"kind": self.status[side][node], "text": None}

    def neighbours(self, side: str, node: str) -> set[str]:
        if side not in self._hood:
            self._hood[side] = _neighbourhood(self.reports[side].capture.graph.nodes)
        return self._hood[side].get(node, set())

    def versions(self, tid: str) -> dict:
        if tid not in self._versions:
            b, n = (_toolchain_versions(self.reports[side], tid) for side in ("base", "new"))
            self._versions[tid] = {k: {"base": b[k], "new": n[k]} for k in b if k in n and b[k] != n[k]}
        return self._versions[tid]


def _cause_rank(change: dict) -> int:
    kind = change.get("kind")
    return _CAUSE_ORDER.index(kind) if kind in _CAUSE_ORDER else len(_CAUSE_ORDER)


def _kind_words(change: dict) -> str:
    kind = change.get("kind")
    if kind == "replaced" and change.get("base_op"):
        return f"replaced: {change['base_op']} → {change.get('op_type')}"
    return {"attributes": "attributes changed", "shapes": "shapes changed", "dtypes": "dtypes changed",
            "weights": "weights changed"}.get(kind, kind)


def _model_cause_text(change: dict) -> str:
    """The model change at the op itself, in words ("replaced in new (relu → hardswish)")."""
    kind = change.get("kind")
    if kind == "replaced":
        return f"replaced in new ({change.get('base_op')} → {change.get('op_type')})"
    if kind in ("added", "removed"):
        block = change.get("block")
        return f"{kind} in new" + (f" (part of the {'inserted' if kind == 'added' else 'removed'} block {block})"
                                   if block else "")
    return {"attributes": "its attributes changed in new", "shapes": "its shapes changed in new",
            "dtypes": "its dtypes changed in new", "weights": "its weights changed in new"}.get(kind, f"{kind} in new")


def _neighbourhood(nodes) -> dict[str, set[str]]:
    """Each captured node's neighbours: the nodes that make its inputs and that read its outputs, looked for through
    nodes that compute nothing (views, layout, casts), up to _MAX_PASS_THROUGH of them."""
    made_by: dict[str, str] = {}
    read_by: dict[str, list[str]] = {}
    kind = {}
    for n in nodes:
        kind[n.id] = n.kind
        for t in n.outputs:
            made_by[t.name] = n.id
        for t in n.inputs:
            read_by.setdefault(t.name, []).append(n.id)
    by_id = {n.id: n for n in nodes}

    def step(node_id: str) -> set[str]:
        n = by_id[node_id]
        near = {made_by[t.name] for t in n.inputs if t.name in made_by}
        for t in n.outputs:
            near.update(read_by.get(t.name, ()))
        near.discard(node_id)
        return near

    out = {}
    for n in nodes:
        if n.kind != "compute":
            continue
        found, frontier, seen = set(), step(n.id), {n.id}
        for _ in range(_MAX_PASS_THROUGH + 1):
            onward = set()
            for other in frontier - seen:
                seen.add(other)
                if kind.get(other) in _PASS_THROUGH:
                    onward |= step(other)
                elif kind.get(other) != "io":
                    found.add(other)
            frontier = onward
            if not frontier:
                break
        out[n.id] = found
    return out


def _toolchain_versions(report: Report, tid: str) -> dict[str, str]:
    """The versions a target's decisions depend on: the host's installed toolchains, the target's own
    (`*_version` facts) and xc's (it predicts some placements by its rules)."""
    versions = {k: str(v) for k, v in report.host.versions.items() if v is not None}
    t = report.targets.get(tid)
    for key, value in (t.info.extra.items() if t is not None else ()):
        if key.endswith("_version") and isinstance(value, (str, int, float)):
            versions[key.removesuffix("_version")] = str(value)
    if report.xc_version:
        versions["xc"] = report.xc_version
    return versions


# ---- rendering --------------------------------------------------------------------------------------------
def change_lines(d: dict) -> list[tuple[str, str]]:
    """(target, one line) for every change, in a fixed order; shared by the text and Markdown renderings."""
    lines = [(t, "target added") for t in d["targets_added"]] + [(t, "target removed") for t in d["targets_removed"]]
    if d.get("model") is None:      # a diff made before the model diff: its source-op lines say what the model did
        lines += _source_op_lines(d)
    for tid, t in d["targets"].items():
        if t["status"]["base"] != t["status"]["new"]:
            lines.append((tid, f"status {t['status']['base']} → {t['status']['new']}"))
        if t["op_count"]["base"] != t["op_count"]["new"]:
            lines.append((tid, f"compiled ops {t['op_count']['base']} → {t['op_count']['new']}"))
        for f in t["fallbacks"]["added"]:
            lines.append((tid, f"new CPU fallback: {fallback_place(f)} ({f['reason'] or 'no reason given'})"
                               + _because(f)))
        for f in t["fallbacks"]["removed"]:
            lines.append((tid, f"fallback gone: {fallback_place(f)}" + _because(f)))
        for f in t["fallbacks"].get("still_on_cpu") or []:
            lines.append((tid, f"on the CPU before and after: {f['base']} → {f['new']} at "
                               f"{f['module_path'] or '(root)'} (not a new fallback)"))
        for f in t["fusions"]["lost"]:
            lines.append((tid, f"fusion lost: {f['pattern']} ({f['base']} → {f['new']})" + _because(f)))
        for f in t["fusions"]["gained"]:
            lines.append((tid, f"fusion gained: {f['pattern']} ({f['base']} → {f['new']})" + _because(f)))
        for c in t["backend_changes"]:
            lines.append((tid, f"backend {c['base']} → {c['new']}: {c['op_type']} at {c['module_path'] or '(root)'}"
                               + _because(c)))
        for c in t["precision_changes"]:
            lines.append((tid, f"precision {c['base']} → {c['new']}: {c['op_type']} at "
                               f"{c['module_path'] or '(root)'}" + _because(c)))
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
        tm = t.get("time") or {}
        if tm.get("evidence") == ESTIMATED_COMPILER:
            # the compiler's estimates, compared exactly: no noise to be beyond, and never called measured
            for way in (SLOWER, FASTER):
                for x in tm.get(way) or []:
                    lines.append((tid, f"{way}: {x['op_type']} at {x['module_path'] or '(root)'} "
                                       f"{x['base_us']:,.1f} → {x['new_us']:,.1f} µs ({_ratio(x['ratio'])}, "
                                       f"{x['why']})" + _because(x)))
            whole = whole_run_time(tm)
            if whole and whole["verdict"] in (SLOWER, FASTER):
                lines.append((tid, f"{whole['verdict']}: estimated total {whole['base']['median']:,.1f} → "
                                   f"{whole['new']['median']:,.1f} µs ({_ratio(whole['ratio'])}, {whole['why']})"))
        else:
            for x in tm.get("slower", []):
                lines.append((tid, f"slower: {x['op_type']} at {x['module_path'] or '(root)'} {x['base_us']:,.0f} → "
                                   f"{x['new_us']:,.0f} µs ({_ratio(x['ratio'])}, beyond the runs' noise: "
                                   f"{_iqr_text(x)}; measured)" + _because(x)))
            whole = whole_run_time(tm)
            if whole and whole["verdict"] in (SLOWER, FASTER):
                lines.append((tid, f"{whole['verdict']}: {whole['what']} {whole['base']['median']:,.0f} → "
                                   f"{whole['new']['median']:,.0f} µs ({_ratio(whole['ratio'])}, beyond the runs' "
                                   f"noise: {whole['why']}; measured)"))
        for c in t["checklist"]:
            if c["base"] != c["new"]:
                lines.append((tid, f"checklist ({c['id']}) {c['base']} → {c['new']}: {c['detail']}"))
        lines += [(tid, line) for line in _matters_lines(t)]
    return lines


def _because(change: dict) -> str:
    """The cause `_attach_causes` found, as the end of a change line (nothing for a diff made before causes)."""
    cause = change.get("cause") or {}
    return f" — {cause['text']}" if cause.get("text") else ""


def _source_op_lines(d: dict) -> list[tuple[str, str]]:
    """The source ops a diff made before the model diff found added, removed or replaced (by module path)."""
    lines = []
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
    return lines


def _iqr_text(x: dict) -> str:
    b, n = x.get("base_iqr"), x.get("new_iqr")
    text_ = f"IQR {b[0]:,.0f}–{b[1]:,.0f} → {n[0]:,.0f}–{n[1]:,.0f} µs" if b and n else "spread unknown"
    if x.get("expected_us") is not None and x["expected_us"] != x["base_us"]:
        text_ += f", {x['expected_us']:,.0f} µs expected from the shift every node shared"
    return text_


def time_notes(d: dict) -> list[tuple[str, str]]:
    """(target, one line) about times that moved but are no change: within the runs' noise, a shift every node
    shared (the host), or not judged — a busy host, or no per-run samples. Said beside the changes, never counted
    as one."""
    lines = []
    for tid, t in d["targets"].items():
        tm = t.get("time") or {}
        if not tm.get("compared") or tm.get("evidence") == ESTIMATED_COMPILER:   # estimates: exact, no noise to note
            if tm.get("why_not") and ESTIMATED_COMPILER in tm["why_not"]:
                lines.append((tid, f"time not compared: {tm['why_not']}"))
            continue
        if tm.get("host_busy"):
            if tm.get("within_noise"):
                lines.append((tid, f"time: {tm['within_noise']} node(s) slower by their medians, not judged — "
                                   f"{tm['host_busy']} (measured)"))
            continue
        shift = tm.get("shift")
        if shift and (shift["ratio"] >= SLOWER_RATIO or shift["ratio"] <= 1 / SLOWER_RATIO
                      or abs(shift["increase_us"]) >= SLOWER_MIN_US):
            lines.append((tid, f"time: every timed node moved together (median ×{shift['ratio']:.2f}, "
                               f"{shift['increase_us']:+,.0f} µs, over {shift['nodes']} nodes; measured) — the "
                               "host's load differed between the runs; each node is judged past that shift"))
        if tm.get("within_noise"):
            lines.append((tid, f"time: {tm['within_noise']} node(s) slower by their medians, within the runs' noise "
                               "(measured)"))
        whole = whole_run_time(tm)
        if whole and whole["verdict"] in (WITHIN_NOISE, SPREAD_UNKNOWN):
            lines.append((tid, f"time: {whole['what']} {whole['base']['median']:,.0f} → {whole['new']['median']:,.0f} "
                               f"µs, {whole['verdict']} — {whole['why']} (measured)"))
        unknown = tm.get("spread_unknown") or []
        if unknown:
            lines.append((tid, f"time: {len(unknown)} node(s) slower by their medians, spread unknown (a run kept "
                               "no per-run samples: an older xc) — not judged (measured)"))
    return lines


def _ratio(r: float | None) -> str:
    if r is None:
        return "—"
    return "∞×" if math.isinf(r) else f"{r:.2f}×"


def different_models(d: dict) -> str | None:
    """The sentence saying base and new are different models, or None (also for a diff made before it existed)."""
    return (d.get("models") or {}).get("line")


def verdict_line(d: dict, regressions: list[dict] | None) -> str:
    """The line every rendering of a diff ends with: "Verdict: no regressions" or "Verdict: N regressions: …" —
    under the gate's rules when gated, else under the default rules, and it says which."""
    from .gate import GateRules
    from .gate import regressions as judge
    gated = regressions is not None
    regs = regressions if gated else judge(d, GateRules())
    rules = "" if gated else " (the default gate rules; not gated)"
    if not regs:
        return f"Verdict{rules}: no regressions"
    return (f"Verdict{rules}: {len(regs)} regression{'s' if len(regs) != 1 else ''}: "
            + "; ".join(f"{r['target']} {r['what']}" for r in regs))


def diff_text(d: dict, regressions: list[dict] | None = None) -> str:
    """The diff for a terminal or a CI log: every name and message from the two reports one printable line
    (`printable_line`), so none can break a line or drive the terminal. Ends with the verdict line."""
    show = printable_line
    out = [f"NOTE: {show(different_models(d))}"] if different_models(d) else []
    out += [f"base: {show(d['base']['name'])} ({show(d['base']['sha256'][:12])})",
            f"new:  {show(d['new']['name'])} ({show(d['new']['sha256'][:12])})"]
    if d.get("model") is not None:      # what changed in the model first: the decisions below follow from it
        out += model_changes_text(d["model"]).rstrip("\n").split("\n")
    lines = change_lines(d)
    out += [f"  {show(tid):24} {show(line)}" for tid, line in lines] or ["  no change in any compiler decision"]
    out += [f"  {show(tid):24} {show(line)}" for tid, line in time_notes(d)]
    if regressions is not None:
        out.append(f"gate: {len(regressions)} regression(s)" if regressions else "gate: no regression")
        out += [f"  REGRESSION {show(r['target'])} [{show(r['rule'])}]: {show(r['what'])}" for r in regressions]
    out.append(show(verdict_line(d, regressions)))
    return "\n".join(out) + "\n"


def diff_markdown(d: dict, regressions: list[dict] | None = None, max_rows: int = 200) -> str:
    out = [f"### xc diff: {text(d['base']['name'])} → {text(d['new']['name'])}"]
    if different_models(d):
        out += ["", f"> **⚠️ {text(different_models(d))}**", ""]
    out += [f"base sha256 {code(d['base']['sha256'][:12])} · new sha256 {code(d['new']['sha256'][:12])}", ""]
    if d.get("model") is not None:      # first, so the PR comment opens with it (collapsed beyond a few lines)
        out += [model_changes_markdown(d["model"]).rstrip("\n"), ""]
    if regressions is not None:
        if regressions:
            out += [f"**❌ {len(regressions)} regression(s)**", ""]
            out += [f"- {code(r['target'])} ({code(r['rule'])}) {text(r['what'])}" for r in regressions[:max_rows]]
            out += [""]
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
    out += matters_table(d)
    lines = change_lines(d)
    if lines:
        out += ["<details><summary>Every change</summary>", ""]
        out += [f"- {code(tid)} {text(line)}" for tid, line in lines[:max_rows]]
        if len(lines) > max_rows:
            out.append(f"- … and {len(lines) - max_rows} more (in the JSON diff)")
        out += ["", "</details>", ""]
    else:
        out += ["No change in any compiler decision.", ""]
    notes = time_notes(d)
    if notes:
        out += [f"- {code(tid)} {text(line)}" for tid, line in notes] + [""]
    compared = [t.get("time") or {} for t in d["targets"].values() if (t.get("time") or {}).get("compared")]
    if any(tm.get("evidence") != ESTIMATED_COMPILER for tm in compared):
        out += [f"Time test (measured on this host's CPU): {text(noise_test())}.", ""]
    if any(tm.get("evidence") == ESTIMATED_COMPILER for tm in compared):
        out += [f"Estimated times ({ESTIMATED_COMPILER}): the compiler's estimates for the same device compared "
                f"exactly; a node whose estimate moved by more than {100 * ESTIMATE_CHANGE:g} % is a change.", ""]
    out.append(f"**{text(verdict_line(d, regressions))}**")
    return "\n".join(out) + "\n"


def matters_table(d: dict) -> list[str]:
    """Markdown lines: per target, task accuracy, cost and weighted share, base → new (one figure where they are
    equal); nothing when no target has any of them."""
    def pair(t: dict, block: str, key: str, fmt) -> str:
        b, n = (t[block].get("base") or {}).get(key), (t[block].get("new") or {}).get(key)
        return fmt(n) if fmt(b) == fmt(n) else f"{fmt(b)} → {fmt(n)}"

    def share(t: dict, way: str) -> str:
        b, n = ((t["compute_share"].get(side) or {}).get(way) or {} for side in ("base", "new"))
        return pct(n.get("share")) if pct(b.get("share")) == pct(n.get("share")) \
            else f"{pct(b.get('share'))} → {pct(n.get('share'))}"

    def accuracy(t: dict) -> str:
        b, n = t["accuracy"].get("base"), t["accuracy"].get("new")
        labelled = bool(b and n and b.get("accuracy") is not None and n.get("accuracy") is not None) or \
            bool(n and not b and n.get("accuracy") is not None)
        bv, nv = headline(b, labelled)[0], headline(n, labelled)[0]
        figure = pct(nv) if pct(bv) == pct(nv) else f"{pct(bv)} → {pct(nv)}"
        ref = (n or {}).get("reference_accuracy")
        return figure + (" (agreement)" if not labelled and nv is not None else "") + \
            (f" · ref {pct(ref)}" if labelled and ref is not None else "")
    rows = []
    for tid, t in d["targets"].items():
        t = {"accuracy": {}, "cost": {}, "compute_share": {}, **t}
        if not any((t.get(block) or {}).get(side) for block in ("accuracy", "cost", "compute_share")
                   for side in ("base", "new")):
            continue        # a diff of runs without these blocks (or an older diff)
        rows.append([code(tid), text(accuracy(t)), text(pair(t, "cost", "peak_rss_mb", mb)),
                     text(pair(t, "cost", "artifact_bytes", size)), text(pair(t, "cost", "load_s", seconds)),
                     text(pair(t, "cost", "steady_inference_ms", lambda x: "—" if x is None else f"{x:,.2f} ms")),
                     text(share(t, "by_macs")), text(share(t, "by_time"))])
    if not rows:
        return []
    return [table(["target", "top-1 (vs labels, else agreement)", "peak memory", "artifact", "load",
                   "steady inference", "accelerated by MACs", "by time"], rows),
            "", "Memory, load and inference times: measured on this host's CPU, not the device's.", ""]


def _arrow(pair: dict) -> str:
    b, n = pair.get("base"), pair.get("new")
    return str(n) if b == n else f"{b} → {n}"
