"""The diagnostic checklist: five questions answered per target, each with a verdict (pass | warn | fail |
not applicable — never blank), the evidence kind it rests on, one line of detail, and the page that shows it."""
from __future__ import annotations

# How a verdict reads wherever it is shown (Markdown, the dashboard's tables, the CLI): a symbol and a word.
VERDICT = {"pass": "✅ pass", "warn": "⚠️ warn", "fail": "❌ fail", "not applicable": "➖ n/a"}

PASS, WARN, FAIL, NA = "pass", "warn", "fail", "not applicable"

# Output agreement thresholds (relative L2 and cosine) for question 4; written into the report next to verdicts.
MATCH_REL_L2, WARN_REL_L2, MATCH_COSINE = 1e-3, 1e-2, 0.9999

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
    out = {}
    for tid, t in report["targets"].items():
        items = [_q1(t), _q2(t), _q3(tid, t, not_fired), _q4(t, report), _q5(t)]
        out[tid] = [{"id": i, "question": QUESTIONS[i][0], "page": QUESTIONS[i][1], **item}
                    for i, item in enumerate(items, start=1)]
    return {"targets": out, "thresholds": {"match_rel_l2": MATCH_REL_L2, "warn_rel_l2": WARN_REL_L2,
                                           "match_cosine": MATCH_COSINE}}


def _unavailable(t) -> dict | None:
    """A target with nothing to judge: unavailable here, or failed before its graph was read. The failure is one
    finding, question 1's; the other questions say they cannot be answered instead of repeating it."""
    if t["status"] == "unavailable":
        return {"verdict": NA, "evidence": None, "detail": f"target unavailable: {t['error']}"}
    if t.get("graph") is None:
        return {"verdict": NA, "evidence": None, "detail": "no compiled graph to judge (question 1 says why)"}
    return None


def _q1(t) -> dict:
    if t["status"] != "unavailable" and t.get("graph") is None:
        # Nothing came back to judge. The failure is the target's status and error (with whose it is and
        # what to do), not a verdict on a report nobody could read.
        return {"verdict": NA, "evidence": None,
                "detail": f"no compiled graph came back, so there is no report to read: {t['error']}"}
    bad = _unavailable(t)
    if bad:
        return bad
    ev = t["graph"]["evidence"]
    nodes = [n for n in t["graph"]["nodes"] if n["kind"] == "compute"]
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


def _q2(t) -> dict:
    bad = _unavailable(t)
    if bad:
        return bad
    if not t.get("accelerated"):
        return {"verdict": NA, "evidence": t["graph"]["evidence"], "detail": "no accelerator on this target"}
    bounds = (t.get("info") or {}).get("boundaries") or {}
    fallbacks = [n for n in t["graph"]["nodes"] if n.get("fallback")]
    ev = bounds.get("evidence") or t["graph"]["evidence"]
    if not fallbacks:
        return {"verdict": PASS, "evidence": ev, "detail": "every op stays on the accelerator"}
    count = bounds.get("count", 0)
    cliff = (bounds.get("latency_cliff") or {}).get("estimate_ms")
    types = sorted({n["op_type"] for n in fallbacks})
    verdict = FAIL if count >= 2 else WARN
    return {"verdict": verdict, "evidence": ev,
            "detail": f"{len(fallbacks)} op(s) on the CPU ({', '.join(types)}), {count} boundaries"
                      + (f", ≈{cliff:.2f} ms latency-cliff estimate" if cliff is not None else "")}


def _q3(tid, t, not_fired) -> dict:
    """Fusions this target's compiler implements that were possible here and did not fire (a per-compiler
    catalogue, analysis/fusion_catalogue.py). Patterns fused only on other targets are information, not a warning:
    compilers fuse differently by design."""
    bad = _unavailable(t)
    if bad:
        return bad
    fusions = t.get("fusions") or {}
    ev = fusions.get("evidence")
    groups = fusions.get("count", 0)
    elsewhere = sorted({m["pattern"] for m in not_fired if m["missing_on"] == tid})
    aside = (f"; {len(elsewhere)} pattern(s) other targets fused are their compilers' choices (see Fusion)"
             if elsewhere else "")
    cat = fusions.get("catalogue")
    if cat is None:
        shrink = t["op_count_after"] < t["op_count_before"]
        hidden = (t.get("info") or {}).get("fusions_inside_delegates")
        if not shrink and not groups and hidden:
            # The backend fuses when it compiles its delegate (XNNPACK, Vulkan): not in the program xc reads.
            return {"verdict": NA, "evidence": ev, "detail": hidden}
        if not shrink and not groups:
            return {"verdict": WARN, "evidence": ev, "detail": f"no fusion and no op-count shrink "
                                                              f"({t['op_count_before']} → {t['op_count_after']})"}
        return {"verdict": PASS, "evidence": ev, "detail": f"{groups} fused group(s); ops {t['op_count_before']} → "
                                                          f"{t['op_count_after']}" + aside}
    opps = cat["opportunities"]
    failed = [o for o in opps if o["outcome"] in ("blocked", "missed")]
    if failed:
        first = failed[0]
        names = sorted({o["fusion"] for o in failed})
        return {"verdict": WARN, "evidence": ev,
                "detail": f"{len(failed)} of {len(opps)} {cat['compiler']} fusion opportunities did not fire "
                          f"({', '.join(names[:3])}); e.g. {'→'.join(first['op_types'])} at {first['nodes'][0]}: "
                          f"{first['reason']}"}
    if not opps:
        return {"verdict": PASS, "evidence": ev,
                "detail": f"nothing here matches a fusion {cat['compiler']} is catalogued with; ops "
                          f"{t['op_count_before']} → {t['op_count_after']}" + aside}
    fired = cat["counts"].get("fired", 0)
    return {"verdict": PASS, "evidence": ev,
            "detail": f"every catalogued {cat['compiler']} fusion that was possible fired ({fired} of {len(opps)}"
                      + (f", {len(opps) - fired} taken by another fusion" if fired < len(opps) else "")
                      + f"); ops {t['op_count_before']} → {t['op_count_after']}" + aside}


def _q4(t, report) -> dict:
    bad = _unavailable(t)
    if bad:
        return bad
    drift = t.get("drift")
    if not drift:
        ref = report.get("reference")
        if ref is None:
            return {"verdict": NA, "evidence": None, "detail": "no reference for this source"}
        if ref.get("status") != "ok":
            return {"verdict": NA, "evidence": None,
                    "detail": "the reference itself failed with these inputs, so there is nothing to compare to"}
        not_run = (t.get("info") or {}).get("numerics_not_run")
        if not_run:
            return {"verdict": NA, "evidence": None, "detail": not_run}
        return {"verdict": FAIL, "evidence": None, "detail": f"the target did not run: {t.get('error')}"}
    if drift.get("failed"):
        return {"verdict": NA, "evidence": drift["evidence"],
                "detail": f"no numbers: {drift['failed']} — xc's emulation failed, not a finding about the model"}
    worst = drift["worst"] or {}
    if "error" in worst:
        return {"verdict": FAIL, "evidence": drift["evidence"], "detail": worst["error"]}
    rel, cos = worst.get("rel_l2") or 0.0, worst.get("cosine") or 0.0
    verdict = PASS if rel <= MATCH_REL_L2 and cos >= MATCH_COSINE else WARN if rel <= WARN_REL_L2 else FAIL
    return {"verdict": verdict, "evidence": drift["evidence"],
            "detail": f"worst output '{worst.get('output')}': rel L2 {rel:.2e}, cosine {cos:.6f}"
                      + (f" ({drift['assumption']})" if drift.get("assumption") and verdict != PASS else "")
                      + (_attribution_clause(t) if verdict != PASS else "")}


def _q5(t) -> dict:
    bad = _unavailable(t)
    if bad:
        return bad
    mix = (t.get("precision") or {}).get("mix") or {}
    ev = (t.get("precision") or {}).get("evidence")
    floats = {k for k in mix if k in ("fp32", "fp16", "bf16", "int8", "uint8", "fp64")}
    lowered = floats - {"fp32", "fp64"}
    if not lowered:
        return {"verdict": PASS, "evidence": ev, "detail": "fp32 like the reference"}
    undeclared = lowered - _declared_precisions(t)
    detail = ", ".join(f"{k} × {mix[k]}" for k in sorted(lowered))
    if undeclared:
        # The runtime chose it by itself (OpenVINO runs bf16 on CPUs with AMX / avx512_bf16): a warning that says
        # what it cost in drift and how to turn it off.
        return {"verdict": WARN, "evidence": ev,
                "detail": f"runs {detail} by the runtime's own choice, not xc's or yours" + _drift_clause(t)
                          + _precision_switch(t) + _attribution_clause(t, "precision")}
    return {"verdict": WARN, "evidence": ev, "detail": f"runs {detail} as configured; the reference is fp32"
                                                      + _attribution_clause(t, "precision")}


def _drift_clause(t) -> str:
    worst = (t.get("drift") or {}).get("worst") or {}
    if worst.get("rel_l2") is None:
        return ""
    return f"; worst output '{worst.get('output')}' drifts rel L2 {worst['rel_l2']:.2e} from the fp32 reference"


def _attribution_clause(t, kind: str | None = None) -> str:
    """The largest attributed drift jump (of `kind`, when given) as evidence, with its own evidence kind (the
    per-layer numerics), or nothing when the per-layer drift attributed none."""
    att = (t.get("layer_drift") or {}).get("attribution") or {}
    jumps = [j for j in att.get("jumps") or [] if kind is None or j["kind"] == kind]
    if not jumps:
        return ""
    return f"; per-layer drift ({att['evidence']}): {jumps[0]['sentence']}"


def _precision_switch(t) -> str:
    if t.get("id", "").startswith("openvino"):
        return " — set OpenVINO's INFERENCE_PRECISION_HINT to f32 (ov.properties.hint.inference_precision) to keep fp32"
    return ""


def _declared_precisions(t) -> set[str]:
    """What the target's configuration asked for (its typed `declared_precisions`), not what the runtime chose."""
    return set(t.get("declared_precisions") or [])
