"""One count per fact: what a target's compiled graph holds and where its ops run, counted here once and worded here
once. The Overview, the Fallbacks and Topology pages, the CLI, the Markdown and the HTML report all read these
figures, so a target's split reads the same everywhere. What is counted, and said in every label:

- **compiled ops**: the compute nodes of the target's compiled graph; **source ops**: those of the captured graph.
  Constants and graph inputs/outputs are no ops; layout moves (transposes, reorders) and casts are counted apart.
- **the split** of an accelerated target: its compiled ops on the accelerator, on the CPU and (where no rule or
  runtime said) without a device, as xc's placement on the graph records them — the node-by-node figures the heat
  map, Topology and the checklist show.
- an op on the CPU is **unsupported** when the delegate / EP cannot run it (its own refusal, or the rule for the
  device), and **outside the delegated partition** when it can, but the partition(s) it takes leave it out.
- **the runtime's own count**, where a runtime states one (the LiteRT GPU delegate's log line, ONNX Runtime's
  partition checker), is compared with xc's placement counted on the runtime's own basis: the two agreeing is said
  where the split is detailed; their disagreeing is one labelled finding, with each figure's evidence.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from ..report.types import NodeRecord, Report, TargetBlock
from .typed_report import as_report, as_target

# Graph node kinds that are no op a runtime executes: never counted as ops, never drawn on Topology.
NOT_OPS = ("constant", "io")
KIND_WORDS = {"layout": "layout move", "cast": "cast", "alias": "alias"}
NO_DEVICE = (None, "unknown")

# How the targets word an op the delegate / EP could run but leaves on the CPU, outside the partition(s) it takes:
# targets/litert/gpu.py (OUTSIDE_PARTITION_REASON) and targets/ort_mobile.py (OrtMobileTarget._reason). Any other
# reason says why the delegate / EP cannot run the op.
OUTSIDE_PARTITION_REASONS = ("supported, but outside", "left on the CPU EP by partitioning")
UNSUPPORTED_LABEL = "unsupported"
OUTSIDE_LABEL = "supported, but outside the delegated partition"

SPLIT_COLUMN = "accelerator split (compiled ops)"

# litert-gpu reports written before xc read the delegate's refusals per node carry this note, and their placement
# refused a whole op type wherever the delegate refused one node of it.
_OLD_GPU_NOTE = "the GPU delegate said "
_OLD_GPU_GAP = ("this report predates xc reading the delegate's refusals per node: an op type it refused in some "
                "nodes was placed on the CPU in all of them (analyse again for the delegate's own placement)")


# ---- op counts --------------------------------------------------------------------------------------------------
def op_counts(t: TargetBlock | Mapping) -> dict | None:
    """A target's op counts — compute ops of its compiled graph, and of the captured graph it was given — in the
    two forms every view uses: a sentence ("41 compiled ops (from 53 source ops)") and a table cell ("53 source →
    41 compiled", under "ops"). None when the target has no compiled graph."""
    t = as_target(t)
    if t.op_count_after is None:
        return None
    source, compiled = t.op_count_before, t.op_count_after
    src = "?" if source is None else source
    return {"source": source, "compiled": compiled,
            "evidence": t.op_counts.evidence or t.graph.evidence,
            "text": f"{compiled} compiled ops (from {src} source ops)", "cell": f"{src} source → {compiled} compiled"}


def drawn_text(nodes: tuple[NodeRecord, ...], ops_are: str = "compiled ops") -> str:
    """What a graph drawing holds, in words, so its node count reads beside the op counts: "137 nodes drawn: 127
    compiled ops + 10 layout moves; 12 constants and graph inputs/outputs not drawn"."""
    kinds = Counter(n.kind for n in nodes)
    hidden = sum(kinds.pop(k, 0) for k in NOT_OPS)
    compute = kinds.pop("compute", 0)
    parts = ([f"{compute} {ops_are.replace('ops', 'op', 1) if compute == 1 else ops_are}"]
             + [plural(v, KIND_WORDS.get(k, str(k))) for k, v in sorted(kinds.items())])
    return (f"{compute + sum(kinds.values())} nodes drawn: " + " + ".join(parts)
            + (f"; {hidden} constants and graph inputs/outputs not drawn" if hidden else ""))


# ---- the accelerator / CPU split ---------------------------------------------------------------------------------
def accelerator_of(t: TargetBlock | Mapping, tid: str | None = None) -> str | None:
    """The accelerator a target block can fall back from, or None, as the block says (`accelerated`,
    `accelerator`). A block read through `as_report` says so whichever xc wrote it: an older report is upgraded
    there (report/types.py `upgrade`). A lone block dict is upgraded here the same way, as the only target of a
    report (`tid`: its key there, when the block names no identity)."""
    if not isinstance(t, TargetBlock):
        named = as_target(t)
        key = named.identity or tid or named.id
        # common_causes given: that upgrade reads the whole report, which a lone block is not
        t = as_report({"targets": {key: t}, "common_causes": []}).targets[key]
    return (t.accelerator or "an accelerator") if t.accelerated else None


def outside_partition(node: NodeRecord) -> bool:
    """Whether an op on the CPU is one its delegate / EP supports, left outside the partition(s) it takes."""
    return (node.fallback_reason or "").startswith(OUTSIDE_PARTITION_REASONS)


def split_counts(report: Report | Mapping, tid: str) -> dict | None:
    """How an accelerated target's compiled ops split, from xc's placement on its graph (None: no accelerator or no
    graph): on the accelerator, on the CPU — unsupported, or outside the delegated partition —, without a device;
    the op types of each CPU kind; `text`, the one sentence every view shows."""
    t = as_report(report).targets[tid]
    accelerator = accelerator_of(t)
    graph = t.graph
    if not accelerator or not graph:
        return None
    nodes = graph.nodes
    compute = [n for n in nodes if n.kind == "compute"]
    on_cpu = [n for n in compute if n.fallback or n.backend == "cpu"]
    cpu_ids = {id(n) for n in on_cpu}
    no_device = [n for n in compute if id(n) not in cpu_ids and n.backend in NO_DEVICE]
    outside = [n for n in on_cpu if outside_partition(n)]
    unsupported = [n for n in on_cpu if not outside_partition(n)]
    on_accelerator = len(compute) - len(on_cpu) - len(no_device)
    s = {"target": tid, "accelerator": accelerator.split(" (", 1)[0], "counted": "compiled ops",
         "compute": len(compute), "on_accelerator": on_accelerator, "on_cpu": len(on_cpu),
         "no_device": len(no_device), "share": on_accelerator / len(compute) if compute else None,
         "unsupported": len(unsupported), "outside_partition": len(outside),
         "unsupported_types": Counter(n.op_type for n in unsupported),
         "outside_types": Counter(n.op_type for n in outside),
         # A layout move or cast a target itself marks as a CPU fallback (ORT's checker does): said apart.
         "other_on_cpu": Counter(n.kind for n in nodes if n.fallback and n.kind != "compute"),
         "evidence": graph.evidence}
    s["cpu_text"] = _cpu_text(s)
    s["text"] = _split_text(s)
    return s


def _the(accelerator: str) -> str:
    """"the GPU delegate", "the Apple Neural Engine"; "NNAPI", "Core ML" and "an accelerator" as they are."""
    if accelerator.startswith(("a ", "an ", "the ")):
        return accelerator
    return f"the {accelerator}" if re.search(r"delegate|Engine|accelerator", accelerator) else accelerator


def _cpu_text(s: dict) -> str:
    """"75 on the CPU: 12 unsupported, 63 supported, but outside the delegated partition"; "7 on the CPU
    (unsupported)" when they are all of one kind."""
    if not s["on_cpu"]:
        return "none on the CPU"
    if not s["outside_partition"] or not s["unsupported"]:
        return f"{s['on_cpu']} on the CPU ({OUTSIDE_LABEL if s['outside_partition'] else UNSUPPORTED_LABEL})"
    return (f"{s['on_cpu']} on the CPU: {s['unsupported']} {UNSUPPORTED_LABEL}, {s['outside_partition']} "
            f"{OUTSIDE_LABEL}")


def _split_text(s: dict) -> str:
    if not s["compute"]:
        return "no compiled ops"
    text = (f"{s['on_accelerator']} of {s['compute']} compiled ops ({100 * s['share']:.0f}%) on "
            f"{_the(s['accelerator'])} · {s['cpu_text']}")
    if s["no_device"]:
        text += f" · {s['no_device']} without a device"
    extra = [plural(v, KIND_WORDS.get(k, str(k))) for k, v in sorted(s["other_on_cpu"].items())]
    if extra:
        text += f" · and {', '.join(extra)} on the CPU"
    return text


def types_text(types: Counter) -> str:
    """Op types with how many of each: "BROADCAST_TO ×4, RESHAPE ×8"."""
    return ", ".join(f"{k} ×{v}" if v > 1 else k for k, v in sorted(types.items()))


def cpu_type_lines(s: dict) -> list[str]:
    """The op types on the CPU in two labelled lines — those the delegate / EP cannot run, and those it can that
    sit outside its partition — for the Fallbacks card and the HTML report."""
    lines = []
    if s["unsupported_types"]:
        lines.append(f"Unsupported ({_the(s['accelerator'])} cannot run them): "
                     + types_text(s["unsupported_types"]))
    if s["outside_types"]:
        lines.append(f"Supported, but outside the delegated partition: {types_text(s['outside_types'])}")
    return lines


def cpu_kind(node: NodeRecord) -> str:
    """A CPU-fallback node's kind in the split's words (the Fallbacks rows' column)."""
    return OUTSIDE_LABEL if outside_partition(node) else UNSUPPORTED_LABEL


def fallback_count(report: Report | Mapping, tid: str) -> int | None:
    """Compiled ops on the CPU as the split counts them (the checklist line, the summary columns); None for a
    target without an accelerator or a graph."""
    s = split_counts(report, tid)
    return s["on_cpu"] if s else None


# ---- the runtime's own count beside xc's placement --------------------------------------------------------------
def runtime_count(t: TargetBlock | Mapping) -> dict | None:
    """The count a runtime stated itself — {by, on_accelerator, total, counted, evidence[, words, gap]} — or None.
    Reports written before the block carried it are read from what they kept: the GPU delegate's log line, ORT's
    partition checker's figures (the checker's own keys, kept in the partitioning block's `extra`)."""
    t = as_target(t)
    part = t.info.partitioning
    if part.runtime_count:
        return part.runtime_count.to_dict()
    checker = part.extra
    said = checker.get("delegate_said")
    if said:
        m = re.search(r"(\d+) operations will run on the GPU, and the remaining (\d+)", said)
        none = re.search(r"No operations will run on the GPU, and all (\d+)", said)
        if not (m or none):
            return None
        on, cpu = (int(m.group(1)), int(m.group(2))) if m else (0, int(none.group(1)))
        count = {"by": "the GPU delegate", "on_accelerator": on, "total": on + cpu, "words": said.rsplit("\n", 1)[-1],
                 "counted": "every op of the .tflite, layout ops included", "evidence": part.evidence}
        if any(str(n).startswith(_OLD_GPU_NOTE) for n in t.notes):
            count["gap"] = _OLD_GPU_GAP
        return count
    if checker.get("suitability") is not None and checker.get("num_nodes") is not None:  # ORT's partition checker
        return {"by": "ONNX Runtime's partition checker", "on_accelerator": checker["num_supported_nodes"],
                "total": checker["num_nodes"], "counted": "every node of the graph it checked, layout nodes included",
                "evidence": part.evidence}
    return None


def count_check(report: Report | Mapping, tid: str) -> dict | None:
    """The runtime's own count beside xc's placement counted on the same basis: {agree, text, …}; None when the
    runtime stated no count. `text` is the one sentence every view shows: a plain confirmation when they agree,
    a labelled finding — both figures, each with its evidence, and why they differ or "not explained" — when not."""
    report = as_report(report)
    t = report.targets[tid]
    count, s = runtime_count(t), split_counts(report, tid)
    if not count or not s:
        return None
    ops = [n for n in t.graph.nodes if n.kind not in NOT_OPS]
    placed = sum(1 for n in ops if not n.fallback and n.backend not in ("cpu", *NO_DEVICE))
    agree = placed == count["on_accelerator"] and len(ops) == count["total"]
    where = _the(s["accelerator"])
    # "the GPU delegate reports it takes 57 of 137 ops"; "ONNX Runtime's partition checker reports 128 of 137 ops
    # on NNAPI"
    on_where = "it takes" if count["by"] == where else ""
    said = (f"{count['by']} reports {on_where + ' ' if on_where else ''}{count['on_accelerator']} of "
            f"{count['total']} ops{'' if on_where else ' on ' + where} "
            f"({count['evidence'] or 'evidence not recorded'}: its own count, {count['counted']})")
    mine = f"xc's placement on the graph ({s['evidence']})"
    if agree:
        text = (f"{said[0].upper() + said[1:]}; {mine} counts the same {placed} of {len(ops)} — "
                f"{s['on_accelerator']} of them compiled ops.")
    else:
        why = count.get("gap") or (f"the two count different graphs ({count['total']} and {len(ops)} ops)"
                                   if len(ops) != count["total"] else "not explained")
        text = f"Counts disagree: {said}; {mine} counts {placed} of {len(ops)} — {why}."
    return {"agree": agree, "text": text, "runtime": count, "placed": placed, "ops": len(ops)}


def target_notes(t: TargetBlock | Mapping) -> list[str]:
    """A target's notes, less the one a count finding now says (litert-gpu reports before `runtime_count` noted the
    delegate's count beside xc's; count_check says it, labelled, once)."""
    return [n for n in as_target(t).notes if not str(n).startswith(_OLD_GPU_NOTE)]


def count_findings(report: Report | Mapping) -> list[tuple[str, str]]:
    """(target, finding) for every target whose runtime's own count and xc's placement disagree, report order."""
    report = as_report(report)
    out = []
    for tid in report.targets:
        check = count_check(report, tid)
        if check and not check["agree"]:
            out.append((tid, check["text"]))
    return out


# ---- the run at a glance ----------------------------------------------------------------------------------------
def run_counts(report: Report | Mapping) -> dict:
    """The Overview's metrics, each unambiguous beside the checklist: targets that compiled and ran, compiled only
    (this host cannot run them), failed or unavailable; and how many targets fail a checklist question."""
    report = as_report(report)
    targets = report.targets
    compiled = [tid for tid, t in targets.items() if t.status == "ok"]
    compiled_only = [tid for tid in compiled if targets[tid].info.numerics_not_run]
    checks = report.checklist.targets
    failing = [tid for tid, items in checks.items() if any(i.verdict == "fail" for i in items)]
    warning = [tid for tid, items in checks.items()
               if tid not in failing and any(i.verdict == "warn" for i in items)]
    return {"targets": len(targets), "compiled": len(compiled), "ran": len(compiled) - len(compiled_only),
            "compiled_only": len(compiled_only), "failed": sum(t.status == "error" for t in targets.values()),
            "unavailable": sum(t.status == "unavailable" for t in targets.values()),
            "failing": len(failing), "warning": len(warning)}


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
