"""Failures of several targets that have one cause, told once.

When the cause lies in the model or in what xc fed it, every target fails on its own path and in its own words:
coremltools, TorchInductor and ExecuTorch each name a different symptom, and each would be blamed. This module
finds such groups in a report and states each once: the cause, the fix, whose it is, and the targets it covers
(which the views then list as "not run: see above" instead of one toolchain's blame each).

A group is:
- the reference failing: the source does not run in its own framework with these inputs, so no target's failure
  says anything about its compiler; the reference's error is the cause, and it covers every failed target except
  one stopped by a limit of this run (time, memory);
- xc's ONNX → PyTorch route refusing the model: one refusal, every target that compiles PyTorch programs;
- the same exception class and message core on targets of two or more toolchains: a message that survives every
  compiler comes from before any of them (the model or its inputs).

Owners: "source" (the model as uploaded), "xc input handling" (the inputs xc picked or was given), "xc's ONNX
route". Computed once where the report is built (`report["common_causes"]`); `causes` computes it for a report
written before the field existed.
"""
from __future__ import annotations

import re

from .. import evidence as ev
from ..errors import hide_paths
from .advice import LIMITS, TOOLCHAIN, advise, toolchain_of

SOURCE, INPUTS, ROUTE = "source", "xc input handling", "xc's ONNX route"
OWNER_WORDS = {SOURCE: "the model (the source as uploaded)", INPUTS: "xc's input handling (the inputs it fed)",
               ROUTE: "xc's ONNX → PyTorch route"}
NOT_RUN = "not run: see above"

_ROUTE_PREFIX = "no PyTorch program from the ONNX: "
_PHASE = re.compile(r"^(\w+) failed:")
_PHASE_PREFIX = re.compile(r"^(?:(?:compile|inspect|run|capture|export|load|worker|convert)\s+)?failed:\s*")
# What a failure about the inputs says: their shape, rank or dims, a missing or extra input or argument, a
# placeholder the program expected. Words that name only a value (an index out of bounds) are not enough.
_ABOUT_INPUTS = re.compile(r"\bshapes?\b|\bdimensions?\b|\bdims?\b|\brank\b|broadcast|size mismatch|\binputs?\b|"
                           r"\bkwargs?\b|keyword|placeholder|positional|\bargument|expected .{0,40}\bgot\b", re.I)
# … and of those, the ones about the arguments xc fed (a keyword or placeholder), whatever the shapes.
_ABOUT_ARGUMENTS = re.compile(r"\bkwargs?\b|keyword|placeholder|positional|\bargument", re.I)


def message_core(error: str | None) -> str:
    """A target's error without what differs between targets that met the same failure: the phase it failed in,
    the route's preamble, absolute paths and spacing."""
    text = (error or "").strip()
    text = _PHASE_PREFIX.sub("", text)
    text = text.removeprefix(_ROUTE_PREFIX)
    return " ".join(hide_paths(text).split())


def about_inputs(error: str | None) -> bool:
    """Whether a failure is about the inputs (their shapes, ranks, names or count): only then is "set the inputs"
    the advice."""
    return bool(_ABOUT_INPUTS.search(message_core(error)))


def common_causes(report: dict) -> list[dict]:
    """The report's failures that share one cause, each as {cause, owner, fix, targets, reference_failed,
    set_inputs (the fix is to set the inputs), node, evidence}; [] when every failure is its own."""
    failed = {tid: t for tid, t in (report.get("targets") or {}).items() if t.get("status") == "error"}
    found, covered = [], set()
    ref = report.get("reference") or {}
    if ref.get("status") == "error":
        finding = _reference_cause(report, ref, failed)
        found.append(finding)
        covered |= set(finding["targets"])
    routed = [tid for tid, t in failed.items() if tid not in covered and (t.get("error") or "").startswith(
        _ROUTE_PREFIX)]
    if len(routed) >= 2:       # one target's refusal is its own line already
        found.append(_route_cause(report, routed, failed))
        covered |= set(routed)
    by_core: dict[str, list[str]] = {}
    for tid, t in failed.items():
        if tid not in covered and t.get("error"):
            by_core.setdefault(message_core(t["error"]), []).append(tid)
    for core, tids in by_core.items():
        if len({toolchain_of(tid) for tid in tids}) >= 2 and not _own_limitation(tids[0], failed[tids[0]]):
            found.append(_shared_cause(report, core, tids))
    return found


def causes(report: dict) -> list[dict]:
    """The report's common causes: as stored, or computed for a report written before they were."""
    stored = report.get("common_causes")
    return list(stored) if isinstance(stored, list) else common_causes(report)


def set_inputs_advised(report: dict) -> bool:
    """Whether the reference failed for its inputs: only then do the views say to set them (--shape, the Inputs
    panel); a model that does not load, or fails on a value it holds, is not helped by other inputs."""
    return any(c.get("reference_failed") and c.get("set_inputs") for c in causes(report))


def covered_targets(report: dict) -> dict[str, dict]:
    """{target id: the common cause that covers it}."""
    return {tid: c for c in causes(report) for tid in c.get("targets") or []}


def cause_head(cause: dict) -> str:
    """What a finding means for the run, in a few words: the line's head."""
    return ("The reference failed, so no target can be compared" if cause.get("reference_failed")
            else f"One cause for {len(cause.get('targets') or [])} targets")


def cause_body(cause: dict) -> str:
    """The cause, whose it is, what to do, and the targets it stopped."""
    covers = cause.get("targets") or []
    where = f" (node '{cause['node']}')" if cause.get("node") else ""
    line = (f"{cause['cause']}{where} — whose: {OWNER_WORDS.get(cause['owner'], cause['owner'])} · what to do: "
            f"{cause['fix']}")
    if covers:
        line += f" · the {len(covers)} target(s) it stopped: {', '.join(covers)}"
    return line


def cause_line(cause: dict) -> str:
    """One finding in one line: `cause_head`: `cause_body`."""
    return f"{cause_head(cause)}: {cause_body(cause)}"


def _reference_cause(report: dict, ref: dict, failed: dict) -> dict:
    error = ref.get("error") or "the reference failed"
    core = message_core(error)
    # Nothing after a source that does not run says anything about a compiler: every failure follows from the
    # reference's, except a limit of this run (time, memory), which is said on its own.
    targets = [tid for tid, t in failed.items() if message_core(t.get("error")) == core or not _own_limitation(
        tid, t, owners=(LIMITS,))]
    advice = advise(ref.get("id") or "", error, None, ref.get("error_detail")) or {}
    shapes_from = {i.get("shape_from") for i in (((report.get("inputs") or {}).get("resolution") or {})
                                                  .get("inputs") or {}).values()}
    user_inputs = bool(shapes_from & {"user", "npz"}) or (report.get("inputs") or {}).get("origin") not in (
        None, "seeded-random")
    phase = _PHASE.match(error)
    loaded = not (phase and phase.group(1) in ("compile", "load", "inspect", "capture", "export"))
    # xc's when it picked a shape (a free dim) or fed the arguments wrong; a model that does not load before any
    # input is fed, or that fails with the shapes it declares whole, is the model's.
    xc_fed = bool(_ABOUT_ARGUMENTS.search(core)) or "default" in shapes_from or not shapes_from
    ref_id = ref.get("id") or "the reference"
    if not loaded:
        owner = SOURCE
        fix = (f"the model does not load in its own runtime ({ref_id}), before any input is fed: fix or re-export "
               "the model; no target can be compared until the reference runs")
    elif about_inputs(error) and (xc_fed or user_inputs):
        owner = SOURCE if user_inputs else INPUTS
        fix = ("the inputs given do not fit the model: give inputs of the shapes and names it takes"
               if user_inputs else
               "set the inputs the model is meant for — CLI: --shape NAME=DxD…, --dim NAME=N, --value or --inputs "
               "FILE.npz; dashboard: the Inputs panel")
    else:
        owner = SOURCE
        fix = (f"the model fails in its own runtime ({ref_id}) with these inputs, before any compiler sees it: fix "
               "the model there, or give inputs it accepts; no target can be compared until the reference runs")
        if re.search(r"custom op|delegate", error, re.I):
            fix += (" (the reference runs without delegates: an op only a delegate provides cannot run there; the "
                    "targets with that delegate still show what they did)")
    return {"cause": core, "owner": owner, "fix": fix, "targets": targets, "reference_failed": True,
            "set_inputs": loaded and about_inputs(error) and (xc_fed or user_inputs), "node": advice.get("node"),
            "evidence": ev.MEASURED}


def _route_cause(report: dict, routed: list[str], failed: dict) -> dict:
    advice = advise(routed[0], failed[routed[0]]["error"], None, failed[routed[0]].get("error_detail")) or {}
    return {"cause": "the ONNX could not be made a PyTorch program: " + message_core(failed[routed[0]]["error"]),
            "owner": ROUTE, "fix": advice.get("workaround") or
            "upload the model as a .pt2 (torch.export.save), or analyse the ONNX targets only",
            "targets": routed, "reference_failed": False, "set_inputs": False, "node": advice.get("node"),
            "evidence": ev.MEASURED}


def _shared_cause(report: dict, core: str, tids: list[str]) -> dict:
    owner = INPUTS if about_inputs(core) else SOURCE
    fix = ("set the inputs the model is meant for — CLI: --shape, --dim, --value or --inputs; dashboard: the Inputs "
           "panel" if owner == INPUTS else
           f"the same error from {len({toolchain_of(t) for t in tids})} toolchains comes from before any of them: "
           "look at the model where it says")
    node = (advise(tids[0], core) or {}).get("node")
    return {"cause": core, "owner": owner, "fix": fix, "targets": tids, "reference_failed": False,
            "set_inputs": owner == INPUTS, "node": node, "evidence": ev.MEASURED}


def _own_limitation(tid: str, t: dict, owners=(TOOLCHAIN, LIMITS)) -> bool:
    """Whether a target's failure is one its own toolchain is known for (advice's table, with a way around it) or
    a limit of this run (of `owners`): a cause of its own, not the common one."""
    advice = advise(tid, t.get("error"), t.get("traceback"), t.get("error_detail")) or {}
    return advice.get("owner") in owners and bool(advice.get("workaround"))
