"""The diagnostic checklist: five questions answered per target, each with a verdict (pass | warn | fail |
not applicable — never blank), the evidence kind it rests on, one line of detail, and the page that shows it."""
from __future__ import annotations

from ..report.types import ReferenceBlock, TargetBlock
from .compute_share import share_sentence, weighted_share
from .drift import ROUTE_REFERENCE, output_flags, route_departing

# How a verdict reads wherever it is shown (Markdown, the dashboard's tables, the CLI): a symbol and a word, the
# word always there and the symbol one a text font draws (DejaVu has them): ✅/❌ are colour emoji, empty boxes on
# a machine without an emoji font, where a pass and a fail would look alike.
VERDICT = {"pass": "✓ pass", "warn": "⚠ warn", "fail": "✗ FAIL", "not applicable": "– n/a"}

PASS, WARN, FAIL, NA = "pass", "warn", "fail", "not applicable"

# Output agreement thresholds (relative L2 and cosine) for question 4; written into the report next to verdicts.
MATCH_REL_L2, WARN_REL_L2, MATCH_COSINE = 1e-3, 1e-2, 0.9999

# Question 2 fails when less than this share of the measured time (or, untimed, of the MACs) stays on the
# accelerator; cheaper fallbacks warn.
MIN_WEIGHTED_SHARE = 0.9

# Column headings where the five questions sit side by side (dashboard grid, Markdown, CLI).
SHORT_QUESTION = {1: "report read", 2: "CPU fallback", 3: "fusions fired", 4: "outputs match", 5: "same precision"}

QUESTIONS = {
    1: ("Was the compilation report read?", "overview"),
    2: ("Is any operator assigned to the CPU on an otherwise accelerated target?", "fallbacks"),
    3: ("Did the fusions this compiler implements fire where they could?", "fusion"),
    4: ("Do outputs match the reference within tolerance?", "drift"),
    5: ("Is precision the same across targets?", "precision"),
}


def checklist(report: dict, not_fired: list[dict]) -> dict:
    """The five answers for every target of the report dict being assembled (pipeline/assemble.py)."""
    reference = ReferenceBlock.from_dict(report.get("reference"))
    # The route as report.json holds it: route_departure reads its free conversion figures.
    route = (report.get("capture") or {}).get("onnx_route")
    out = {}
    for tid, block in report["targets"].items():
        # Typed, all but the compiled graph: questions 1 and 2 read its nodes as dicts, since typing every node of
        # a big model's graphs (tens of thousands per target) would cost seconds while the report is assembled.
        graph = block.get("graph")
        t = TargetBlock.from_dict({**block, "graph": None})
        items = [_q1(t, graph), _q2(t, graph, block.get("compute_share")), _q3(tid, t, graph, not_fired), _q4(t, graph, reference, route),
                 _q5(t, graph)]
        out[tid] = [{"id": i, "question": QUESTIONS[i][0], "page": QUESTIONS[i][1], **item}
                    for i, item in enumerate(items, start=1)]
    return {"targets": out, "thresholds": {"match_rel_l2": MATCH_REL_L2, "warn_rel_l2": WARN_REL_L2,
                                           "match_cosine": MATCH_COSINE, "min_weighted_share": MIN_WEIGHTED_SHARE}}


def _unavailable(t: TargetBlock, graph: dict | None) -> dict | None:
    """A target with nothing to judge: unavailable here, or failed before its graph was read. The failure is one
    finding, question 1's; the other questions say they cannot be answered instead of repeating it."""
    if t.status == "unavailable":
        return {"verdict": NA, "evidence": None, "detail": f"target unavailable: {t.error}"}
    if graph is None:
        return {"verdict": NA, "evidence": None, "detail": "no compiled graph to judge (question 1 says why)"}
    return None


def _q1(t: TargetBlock, graph: dict | None) -> dict:
    if t.status != "unavailable" and graph is None:
        # Nothing came back to judge. The failure is the target's status and error (with whose it is and
        # what to do), not a verdict on a report nobody could read.
        return {"verdict": NA, "evidence": None,
                "detail": f"no compiled graph came back, so there is no report to read: {t.error}"}
    bad = _unavailable(t, graph)
    if bad:
        return bad
    ev = graph["evidence"]
    nodes = [n for n in graph["nodes"] if n["kind"] == "compute"]
    unknown = sum(1 for n in nodes if n["backend"] in (None, "unknown"))
    if unknown:
        return {"verdict": WARN, "evidence": ev, "detail": f"{unknown} of {len(nodes)} op(s) without an assignment"}
    if ev == "predicted-runtime":
        # The runtime's own capability checker assigned every op (ORT's EP partitioning on this host): that is the
        # compiler's report, only not measured on the device.
        return {"verdict": PASS, "evidence": ev,
                "detail": f"compiled graph read back: {len(nodes)} ops, each assigned by the runtime's own checker "
                          f"on this host (not measured on a device)"}
    if ev == "predicted-rules":
        return {"verdict": WARN, "evidence": ev,
                "detail": f"compiled program read back ({len(nodes)} ops); devices predicted from xc's rule table, "
                          f"not by the runtime — confirm on a device"}
    return {"verdict": PASS, "evidence": ev, "detail": f"compiled graph read back: {len(nodes)} ops, each with "
                                                      f"its backend ({ev})"}


def _q2(t: TargetBlock, graph: dict | None, share: dict | None = None) -> dict:
    """CPU fallbacks on an accelerated target, judged by what they weigh — the share of measured time (or of MACs)
    left on the accelerator where it is known: the one CPU op a count hides may be most of the time — and by the
    boundaries they make. The count and both weighted shares are said together."""
    bad = _unavailable(t, graph)
    if bad:
        return bad
    if not t.accelerated:
        return {"verdict": NA, "evidence": graph["evidence"], "detail": "no accelerator on this target"}
    bounds = t.info.boundaries
    fallbacks = [n for n in graph["nodes"] if n.get("fallback")]
    ev = bounds.evidence or graph["evidence"]
    # An NPU compiler's own split of what it was given (Vela's NPU vs CPU layers), beside the partitioner's.
    vela = t.info.extra.get("vela") or {}
    compiler = (f"; Vela put {vela['npu_layers']} layer(s) on the NPU and {vela['cpu_layers']} on the CPU"
                if "npu_layers" in vela else "")
    if not fallbacks:
        return {"verdict": PASS, "evidence": ev, "detail": "every op stays on the accelerator" + compiler}
    count = bounds.count
    cliff = (bounds.latency_cliff or {}).get("estimate_ms")
    types = sorted({n["op_type"] for n in fallbacks})
    # A failure when the fallbacks weigh (a tenth of the measured time or of the MACs off the accelerator: one
    # CPU op can be most of the time) or when they cut the graph at two or more boundaries (each a copy and a
    # dispatch on the device, which the latency-cliff estimate prices); else a warning.
    weighted = weighted_share(share)
    heavy = weighted is not None and weighted[0] < MIN_WEIGHTED_SHARE
    verdict = FAIL if heavy or count >= 2 else WARN
    on_accelerator = share_sentence(share)
    # Counted as every view counts the split (views/target_counts.py): compiled (compute) ops; a layout move or
    # cast the target flags as a fallback is said apart.
    compiled = sum(n.get("kind") == "compute" for n in fallbacks)
    other = len(fallbacks) - compiled
    return {"verdict": verdict, "evidence": ev,
            "detail": f"{compiled} compiled op(s) on the CPU" + (f" and {other} layout/cast node(s)" if other else "")
                      + f" ({', '.join(types)}), {count} boundaries"
                      + (f", ≈{cliff:.2f} ms latency-cliff estimate" if cliff is not None else "") + compiler
                      + (f"; on the accelerator: {on_accelerator}" if on_accelerator else "")}


def _q3(tid: str, t: TargetBlock, graph: dict | None, not_fired: list[dict]) -> dict:
    """Fusions this target's compiler implements that were possible here and did not fire (a per-compiler
    catalogue, analysis/fusion_catalogue.py). Patterns fused only on other targets are information, not a warning:
    compilers fuse differently by design."""
    bad = _unavailable(t, graph)
    if bad:
        return bad
    fusions = t.fusions
    ev = fusions.evidence
    groups = fusions.count
    elsewhere = sorted({m["pattern"] for m in not_fired if m["missing_on"] == tid})
    aside = (f"; {len(elsewhere)} pattern(s) other targets fused are their compilers' choices (see Fusion)"
             if elsewhere else "")
    cat = fusions.catalogue
    if not cat:
        shrink = t.op_count_after < t.op_count_before
        hidden = t.info.extra.get("fusions_inside_delegates")     # a toolchain's free fact (ExecuTorch's)
        if not shrink and not groups and hidden:
            # The backend fuses when it compiles its delegate (XNNPACK, Vulkan): not in the program xc reads.
            return {"verdict": NA, "evidence": ev, "detail": hidden}
        if not shrink and not groups:
            return {"verdict": WARN, "evidence": ev, "detail": f"no fusion and no op-count shrink "
                                                              f"({t.op_count_before} → {t.op_count_after})"}
        return {"verdict": PASS, "evidence": ev, "detail": f"{groups} fused group(s); ops {t.op_count_before} → "
                                                          f"{t.op_count_after}" + aside}
    opps = cat.opportunities
    failed = [o for o in opps if o.outcome in ("blocked", "missed")]
    if failed:
        first = failed[0]
        names = sorted({o.fusion for o in failed})
        return {"verdict": WARN, "evidence": ev,
                "detail": f"{len(failed)} of {len(opps)} {cat.compiler} fusion opportunities did not fire "
                          f"({', '.join(names[:3])}); e.g. {'→'.join(first.op_types)} at {first.nodes[0]}: "
                          f"{first.reason}"}
    if not opps:
        return {"verdict": PASS, "evidence": ev,
                "detail": f"nothing here matches a fusion {cat.compiler} is catalogued with; ops "
                          f"{t.op_count_before} → {t.op_count_after}" + aside}
    fired = cat.counts.get("fired", 0)
    return {"verdict": PASS, "evidence": ev,
            "detail": f"every catalogued {cat.compiler} fusion that was possible fired ({fired} of {len(opps)}"
                      + (f", {len(opps) - fired} taken by another fusion" if fired < len(opps) else "")
                      + f"); ops {t.op_count_before} → {t.op_count_after}" + aside}


def _q4(t: TargetBlock, graph: dict | None, reference: ReferenceBlock, route: dict | None) -> dict:
    """Whether the outputs match; where the target was isolated op by op (xc_core/culprit), the answer also names
    the ops whose local error is above the gate and the culprit — the verdict stays the output drift's."""
    item = _q4_outputs(t, graph, reference, route)
    if t.isolation and t.drift:
        item["detail"] += _isolation_clause(t)
    return item


# At most this many ops above the gate are named in question 4's line; the Drift page lists them all.
NAMED_OPS = 3


def _isolation_clause(t: TargetBlock) -> str:
    """"; per-op isolation (measured): local error above the gate at exp (non-finite), div (rel L2 3.10e-02) and
    2 more; culprit: <the culprit sentence>", or "" when the block says nothing."""
    iso = t.isolation
    ops = sorted((op for op in iso.ops if op.above_gate), key=lambda op: op.depth)
    parts = []
    if ops:
        named = ", ".join(f"{op.source_op} ("
                          + ("non-finite" if (op.local or {}).get("non_finite")
                             else f"rel L2 {_sci((op.local or {}).get('rel_l2'))}") + ")" for op in ops[:NAMED_OPS])
        parts.append(f"local error above the gate ({iso.gates_text or 'its gates'}) at {named}"
                     + (f" and {len(ops) - NAMED_OPS} more" if len(ops) > NAMED_OPS else ""))
    elif iso.ops:
        parts.append(f"no op's local error is above the gate ({len(iso.ops)} isolated)")
    culprit = iso.culprit
    if culprit.sentence:
        parts.append(f"culprit: {culprit.sentence}")
    elif culprit.status in ("not-needed", "not-found"):
        parts.append(f"no culprit ({culprit.status})" + (f": {culprit.why}" if culprit.why else ""))
    if not parts:
        return ""
    return f"; per-op isolation ({iso.evidence or 'evidence unknown'}): " + "; ".join(parts)


def _q4_outputs(t: TargetBlock, graph: dict | None, reference: ReferenceBlock, route: dict | None) -> dict:
    bad = _unavailable(t, graph)
    if bad:
        return bad
    drift = t.drift
    if not drift:
        if not reference:
            return {"verdict": NA, "evidence": None, "detail": "no reference for this source"}
        if reference.status != "ok":
            return {"verdict": NA, "evidence": None,
                    "detail": "the reference itself failed with these inputs, so there is nothing to compare to"}
        not_run = t.info.numerics_not_run
        if not_run:
            return {"verdict": NA, "evidence": None, "detail": not_run}
        return {"verdict": FAIL, "evidence": None, "detail": f"the target did not run: {t.error}"}
    if drift.failed:
        return {"verdict": NA, "evidence": drift.evidence,
                "detail": f"no numbers: {drift.failed} — xc's emulation failed, not a finding about the model"}
    worst = drift.worst or {}        # the worst output's figures, as analysis/drift.worst wrote them
    routed = bool(route) and ((t.identity or t.id) in (route.get("targets") or [])
                              or "onnx_conversion" in t.info.extra)
    against_route = routed and drift.reference == ROUTE_REFERENCE
    departure = route_departure(route) if routed else None
    if "error" in worst:
        return {"verdict": FAIL, "evidence": drift.evidence,
                "detail": worst["error"] + _conversion_clause(departure, against_route)}
    worst_output = drift.outputs.get(worst.get("output"))
    not_informative, implausible = output_flags({**(worst_output.to_dict() if worst_output else {}), **worst})
    rel, cos = worst.get("rel_l2"), worst.get("cosine")
    figures = f"rel L2 {_sci(rel)}, cosine {cos:.6f}" if cos is not None else f"rel L2 {_sci(rel)}"
    if implausible:
        verdict = FAIL
        detail = (f"implausible figure on output '{worst.get('output')}': {implausible} — a broken run or read-back, "
                  "not a rounding difference")
    elif not_informative:
        # A constant reference cannot show a match (every target that outputs the constant agrees with it, right or
        # wrong), but it can show a mismatch: a warning unless the figures already fail.
        verdict = FAIL if rel is not None and rel > WARN_REL_L2 else WARN
        detail = (f"drift is not informative: {not_informative} (output '{worst.get('output')}'), so {figures} "
                  "cannot tell a right target from a wrong one — if the model should vary here, analyse with other "
                  "inputs (--inputs, --value)" if verdict == WARN else
                  f"outputs differ: {figures} on '{worst.get('output')}', though {not_informative}")
    else:
        rel_v, cos_v = rel or 0.0, cos or 0.0
        verdict = PASS if rel_v <= MATCH_REL_L2 and cos_v >= MATCH_COSINE else WARN if rel_v <= WARN_REL_L2 else FAIL
        detail = f"worst output '{worst.get('output')}': rel L2 {rel_v:.2e}, cosine {cos_v:.6f}"
    if against_route:
        detail += " against the program xc's ONNX → PyTorch route made (the compiler's own drift)"
    elif departure and verdict == FAIL:
        # A report from before routed targets were measured against the route's program: the figure includes the
        # conversion's error, which is xc's — a warning to measure again, never a failure of the runtime.
        verdict = WARN
    detail += _conversion_clause(departure, against_route)
    others = {k: why for k, why in drift.not_informative.items() if k != worst.get("output")}
    if others:
        detail += "; not informative: " + ", ".join(f"'{k}' ({why})" for k, why in others.items())
    return {"verdict": verdict, "evidence": drift.evidence,
            "detail": detail + (f" ({drift.assumption})" if drift.assumption and verdict != PASS else "")
            + (_attribution_clause(t) if verdict != PASS else "")}


def route_departure(route: dict | None) -> dict | None:
    """Where xc's ONNX → PyTorch route departs from ONNX Runtime, by the route's own test (analysis.drift
    `route_departing`: a shape or dtype that differs, or rel L2 above DEPARTS_ABOVE — the test that made it look for the
    first departing node): {output, rel_l2, why, first} for its worst departing output (`first`: the route's
    `first_departure`, when it looked), or None when it matches (or did not run)."""
    if not route or route.get("error") or route.get("skipped"):
        return None
    drift = route.get("conversion_drift") or {}
    # A report from before the route compared shapes said a shape that differs only in its error text.
    names = route_departing(drift) + [k for k, m in drift.items() if "shape_match" not in m
                                and (m.get("error") or "").startswith("shape ")]
    if not names:
        return None

    def size(name):
        rel = drift[name].get("rel_l2")
        return float("inf") if rel is None else rel
    name = max(dict.fromkeys(names), key=size)
    m = drift[name]
    why = m.get("error") or f"rel L2 {_sci(m.get('rel_l2'))}" + (
        f", cosine {m['cosine']:.6f}" if m.get("cosine") is not None else "")
    return {"output": name, "rel_l2": m.get("rel_l2"), "why": why, "first": route.get("first_departure")}


def departure_words(departure: dict) -> str:
    """"departs from ONNX Runtime on 'y' (rel L2 1.09e+00), first at ONNX node 'cumsum' (CumSum, rel L2 1.09e+00)"."""
    first = departure.get("first") or {}
    at = ""
    if first.get("node"):
        about = [first["op_type"]] if first.get("op_type") else []
        if first.get("rel_l2") is not None:
            about.append(f"rel L2 {_sci(first['rel_l2'])}")
        at = f", first at ONNX node '{first['node']}'" + (f" ({', '.join(about)})" if about else "")
    elif first.get("note") or first.get("error"):     # no single node departs, or the comparison could not run
        at = f" ({first.get('note') or first['error']})"
    return f"departs from ONNX Runtime on '{departure['output']}' ({departure['why']}){at}"


def _conversion_clause(departure: dict | None, against_route: bool) -> str:
    if not departure:
        return ""
    if against_route:
        return (f"; the conversion (xc's ONNX → PyTorch route) {departure_words(departure)} — xc's error, measured "
                "apart, not this compiler's")
    # Measured against ONNX Runtime's reference (a report from before, or no program outputs to read): the
    # figure holds both errors, and only the conversion's is known.
    return (f"; this drift includes the conversion's error: xc's ONNX → PyTorch route alone "
            f"{departure_words(departure)} — xc's error, not this compiler's")


def _sci(x) -> str:
    return "—" if x is None else "0" if x == 0 else f"{x:.2e}"


def _q5(t: TargetBlock, graph: dict | None) -> dict:
    bad = _unavailable(t, graph)
    if bad:
        return bad
    mix = t.precision.mix
    ev = t.precision.evidence
    floats = {k for k in mix if k in ("fp32", "fp16", "bf16", "int8", "uint8", "fp64")}
    lowered = floats - {"fp32", "fp64"}
    if not lowered:
        return {"verdict": PASS, "evidence": ev, "detail": "fp32 like the reference"}
    undeclared = lowered - set(t.declared_precisions)
    detail = ", ".join(f"{k} × {mix[k]}" for k in sorted(lowered))
    if undeclared:
        # The runtime chose it by itself (OpenVINO runs bf16 on CPUs with AMX / avx512_bf16): a warning that says
        # what it cost in drift and how to turn it off.
        return {"verdict": WARN, "evidence": ev,
                "detail": f"runs {detail} by the runtime's own choice, not xc's or yours" + _drift_clause(t)
                          + _precision_switch(t) + _attribution_clause(t, "precision")}
    return {"verdict": WARN, "evidence": ev, "detail": f"runs {detail} as configured; the reference is fp32"
                                                      + _attribution_clause(t, "precision")}


def _drift_clause(t: TargetBlock) -> str:
    worst = t.drift.worst or {}
    if worst.get("rel_l2") is None:
        return ""
    return f"; worst output '{worst.get('output')}' drifts rel L2 {worst['rel_l2']:.2e} from the fp32 reference"


def _attribution_clause(t: TargetBlock, kind: str | None = None) -> str:
    """The largest attributed drift jump (of `kind`, when given) as evidence, with its own evidence kind (the
    per-layer numerics), or nothing when the per-layer drift attributed none."""
    att = t.layer_drift.attribution
    jumps = [j for j in att.jumps if kind is None or j.kind == kind]
    if not jumps:
        return ""
    return f"; per-layer drift ({att.evidence}): {jumps[0].sentence}"


def _precision_switch(t: TargetBlock) -> str:
    if t.id.startswith("openvino"):
        return " — set OpenVINO's INFERENCE_PRECISION_HINT to f32 (ov.properties.hint.inference_precision) to keep fp32"
    return ""
