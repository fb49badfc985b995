"""Plain tables derived from a Report, shared by the pages and the CLI (no UI imports here)."""
from __future__ import annotations


def plotly_text(text) -> str:
    """Text for plotly's hover and tick labels, which render <a>, <b>, <br> … : escaped."""
    import html
    return html.escape(str(text), quote=False)


def fmt_sci(x) -> str:
    """Error figures (rel L2, max abs, tolerances) in one format everywhere: 3.17e-07 beside 8.57e-03."""
    if x is None:
        return "—"
    return "0" if x == 0 else f"{x:.2e}"


def overview_rows(report: dict) -> list[dict]:
    """One row per target with every column a view may show. Counts come from views/target_counts.py and say what
    they count: "53 source → 41 compiled" ops (compute ops), an accelerated target's split of its compiled ops
    (xc's placement on the graph), the runtime's own count beside it where the runtime stated one."""
    from .target_counts import SPLIT_COLUMN, count_check, op_counts, split_counts
    rows = []
    for tid, t in report["targets"].items():
        mix = (t.get("precision") or {}).get("mix") or {}
        total = sum(mix.values()) or 1
        ev = t.get("evidence") or {}
        rows.append({
            "target": tid,
            "status": t["status"],
            "ops": (op_counts(t) or {}).get("cell", "—"),
            "fused groups": (t.get("fusions") or {}).get("count", "—") if t.get("fusions") else "—",
            "precision": ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in mix.items()) or "—",
            "worst drift (rel L2)": worst_drift_cell(t),
            "evidence": ", ".join(f"{k}: {v}" for k, v in ev.items()),
            "error": t.get("error"),
        })
        units = (t.get("info") or {}).get("compute_units_predicted")
        if units:
            info = t["info"]
            rows[-1].update({
                # Units in capitals (ANE, CPU), ops no rule places in words: "UNKNOWN" read as a unit.
                "Core ML units": ", ".join(f"{k.upper() if k != 'unknown' else k} {100 * v:.0f}%"
                                           for k, v in units["share"].items() if v),
                "casts": (info.get("casts") or {}).get("count", 0),
                "MIL ops": (f"{info['mil_ops_before']} → {info['mil_ops_after']}" if info.get("mil_ops_before")
                            is not None else str(info.get("mil_ops_after", "—"))),
            })
        part = (t.get("info") or {}).get("partitioning")
        bounds = (t.get("info") or {}).get("boundaries")
        split = split_counts(report, tid)
        if split:
            rows[-1][SPLIT_COLUMN] = split["text"]
            check = count_check(report, tid)
            if check:
                count = check["runtime"]
                rows[-1]["runtime's own count"] = (
                    f"{count['by']}: {count['on_accelerator']} of {count['total']} ops ({count['evidence']}) — "
                    + ("xc's placement agrees" if check["agree"] else f"xc's placement counts {check['placed']}"))
        if part:
            # ORT's checker's own figures: the weights its partitions hold, and its share with the dims symbolic.
            pshare = part.get("accelerated_share_param_bytes")
            shipped = (t.get("info") or {}).get("partitioning_as_shipped")
            if pshare is not None:
                rows[-1]["weights on the accelerator"] = f"{100 * pshare:.0f}% ({part.get('evidence')})"
            if shipped:
                rows[-1]["as shipped (dynamic dims)"] = (f"{100 * shipped['accelerated_share_nodes']:.0f}% of the "
                                                         f"nodes ORT's checker counts ({shipped.get('evidence')})")
            rows[-1].update({
                "partitions": part["num_partitions"],
                "ORT verdict": part.get("suitability") or "—",
                "latency cliff (est.)": (f"{bounds['latency_cliff']['estimate_ms']:.2f} ms" if bounds else "—"),
            })
    return rows


def all_columns_rows(report: dict) -> list[dict]:
    """overview_rows with every column for every target, as text: a blank is "—" (a column with a gap would
    otherwise turn its counts into floats in a table), the evidence last."""
    rows = overview_rows(report)
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in ("error", "evidence")] + ["evidence"]
    return [{c: str(r[c]) if r.get(c) is not None else "—" for c in columns} for r in rows]


def worst_drift_cell(t: dict) -> str:
    """A target's worst drift in one cell: rel L2 and output, what it was measured against when that is the
    route's program, and why the figure says nothing (not informative) or cannot be right (implausible)."""
    from ..analysis.drift import ROUTE_REFERENCE, output_flags
    d = t.get("drift") or {}
    worst = d.get("worst") or {}
    if d.get("failed"):
        return "emulation failed (xc's)"
    if (t.get("info") or {}).get("numerics_not_run"):
        return "not run here"
    if not worst:
        return "—"
    if worst.get("error"):
        return worst["error"]
    not_informative, bad = output_flags({**(d.get("outputs") or {}).get(worst.get("output"), {}), **worst})
    where = worst.get("output") + ("; vs the route's program" if d.get("reference") == ROUTE_REFERENCE else "")
    if bad:
        return f"{fmt_sci(worst.get('rel_l2'))} ({where}) — implausible"
    if not_informative:
        return f"not informative ({where}: {_reference_is(not_informative)})"
    return f"{fmt_sci(worst.get('rel_l2'))} ({where})"


def _reference_is(why: str) -> str:
    """"the reference output is all zeros" as "reference all zeros", for a table cell."""
    return "reference " + why.removeprefix("the reference output ").removeprefix("is ")


def drift_output_rows(t: dict) -> list[dict]:
    """A target's drift, one row per output: the metrics as text, or why it has none; a `check` column when a
    figure is not informative (its reference is constant) or implausible, with the check that failed."""
    from ..analysis.drift import output_flags
    rows = []
    for name, m in ((t.get("drift") or {}).get("outputs") or {}).items():
        if "error" in m:
            rows.append({"output": name, "error": m["error"]})
            continue
        not_informative, bad = output_flags(m)
        rows.append({"output": name, "max abs": fmt_sci(m["max_abs"]), "mean abs": fmt_sci(m["mean_abs"]),
                     "rel L2": fmt_sci(m["rel_l2"]),
                     "cosine": f"{m['cosine']:.6f}" if m["cosine"] is not None else "—",
                     # SNR is null when the target is exact (infinite) or the reference all zeros (undefined)
                     "SNR dB": f"{m['snr_db']:.1f}" if m["snr_db"] is not None else "—" if not_informative else "∞",
                     "min atol": fmt_sci(m["min_atol"]), "min rtol": fmt_sci(m["min_rtol"])})
        if bad or not_informative:
            rows[-1]["check"] = f"implausible: {bad}" if bad else f"not informative: {not_informative}"
    return rows


def route_headline(report: dict) -> str | None:
    """The ONNX → PyTorch route in one line, said first and once on every surface: whether xc's conversion
    departs from ONNX Runtime (where, and at which ONNX node first), as xc's error; and that the targets that
    compile its program are measured against it. None without a route."""
    from ..analysis.checklist import departure_words, route_departure
    from ..analysis.drift import ROUTE_REFERENCE
    route = (report.get("capture") or {}).get("onnx_route")
    if not route:
        return None
    names = route.get("targets") or []
    targets = ", ".join(names) or "none"
    if route.get("error"):
        return f"The ONNX could not be made a PyTorch program, so {targets} did not compile it: {route['error']}"
    if route.get("skipped"):
        why = route["skipped"]["why"].removeprefix("skipped: ")
        return f"The ONNX was not made a PyTorch program, so {targets} did not compile it: {why}."
    departure = route["departure"] if "departure" in route else route_departure(route)
    against = [tid for tid in names if ((report["targets"].get(tid) or {}).get("drift") or {}).get("reference")
               == ROUTE_REFERENCE]
    drifts = [m["rel_l2"] for m in (route.get("conversion_drift") or {}).values() if m.get("rel_l2") is not None]
    if departure:
        head = (f"xc's ONNX → PyTorch conversion {departure_words(departure)} — xc's own error (measured), not "
                "the compilers'")
    else:
        head = (f"xc's ONNX → PyTorch conversion matches ONNX Runtime (worst rel L2 "
                f"{fmt_sci(max(drifts)) if drifts else '—'}, measured)")
    if against:
        return head + f"; {', '.join(against)} compile its program, and their drift is measured against it " \
                      "(each compiler's own)."
    if names and departure:      # a report from before routed targets were measured against the program
        return head + f"; the drift of {targets} includes it."
    return head + (f"; {targets} compile its program." if names else ".")


def route_departs(report: dict) -> bool:
    """Whether the report's ONNX → PyTorch route failed or departs from ONNX Runtime (a warning, not a note)."""
    from ..analysis.checklist import route_departure
    route = (report.get("capture") or {}).get("onnx_route")
    if not route:
        return False
    return bool(route.get("error") or (route["departure"] if "departure" in route else route_departure(route)))


def onnx_route_lines(report: dict) -> list[str]:
    """An ONNX source's ONNX → PyTorch route in plain sentences (empty when there was none): `route_headline`
    first, then the program, whether it is a float model, and the inputs it does not read."""
    route = (report.get("capture") or {}).get("onnx_route")
    if not route:
        return []
    lines = [route_headline(report)]
    if route.get("error") or route.get("skipped"):
        return lines
    lines.append(f"{route['route']}: {route.get('program_nodes', '?')} ops in {route.get('seconds', 0):.1f} s; its "
                 "outputs are compared with ONNX Runtime's (optimizations off), output by output.")
    first = route.get("first_departure") or {}
    if first.get("compared") is not None:
        found = (f"the first to depart is '{first['node']}' ({first.get('op_type')}), output '{first.get('output')}'"
                 if first.get("node") else first.get("note") or "none departs")
        lines.append(f"Node by node against ONNX Runtime ({first['compared']} node output(s) compared): {found}.")
    elif first.get("error"):
        lines.append(f"Node by node against ONNX Runtime: {first['error']}.")
    if route.get("float_model"):
        lines.append(route["float_model"][0].upper() + route["float_model"][1:] + ".")
    unread = [name for name in ((report.get("inputs") or {}).get("resolution") or {}).get("inputs") or {}
              if "program_inputs" in route and name not in route["program_inputs"]]
    if unread:
        lines.append(f"The program takes no {', '.join(unread)}: once the route fixed its conditions, nothing it "
                     f"computes reads {'it' if len(unread) == 1 else 'them'}.")
    return lines


def onnx_route_rows(report: dict) -> list[dict]:
    """The ONNX → PyTorch conversion's own drift, one row per output (as `drift_output_rows`), with whether its
    shape and dtype match ONNX Runtime's where the route compared them."""
    route = (report.get("capture") or {}).get("onnx_route") or {}
    drift = route.get("conversion_drift") or {}
    rows = drift_output_rows({"drift": {"outputs": drift}})
    for row, m in zip(rows, drift.values()):
        for key in ("shape", "dtype"):
            if f"{key}_match" in m:
                row[key] = "same" if m[f"{key}_match"] else \
                    f"{m.get(key)} vs ONNX Runtime's {m.get('reference_' + key)}"
        if "dtype" in row and m.get("note"):      # integer values held in float32: the same numbers
            row["dtype"] += f" ({m['note']})"
    return rows


def drift_flags(report: dict) -> list[str]:
    """What makes drift figures say nothing or cannot be right, said before any of them: a reference output that
    is constant, all zeros or not finite ("drift is not informative"), and a target figure beyond any plausible
    range (with the check that failed). Empty when every comparison can tell."""
    from ..analysis.drift import output_flags
    lines, said = [], set()
    for name, o in ((report.get("reference") or {}).get("outputs") or {}).items():
        if o.get("not_informative"):
            said.add(name)
            lines.append(f"Drift is not informative: {o['not_informative']} (output '{name}') — every target that "
                         "outputs the same agrees with it, right or wrong (if the model should vary here, analyse "
                         "with other inputs).")
    for tid, t in report["targets"].items():
        d = t.get("drift") or {}
        for name, m in (d.get("outputs") or {}).items():
            not_informative, bad = output_flags(m)
            if not_informative and name not in said:
                lines.append(f"Drift of {tid} is not informative: {not_informative} (output '{name}', "
                             f"{d.get('reference')}).")
            if bad:
                lines.append(f"{tid}'s drift on '{name}' is implausible: {bad} — a broken run or read-back, not "
                             "rounding; the target ran, but its numbers do not hold.")
    return lines


def run_status(report: dict) -> tuple[str, str]:
    """(label, state) for the analysis status box: never "compiled" when nothing compiled, and the likely cause."""
    targets = report["targets"].values()
    ok = sum(t["status"] == "ok" for t in targets)
    failed = sum(t["status"] == "error" for t in targets)
    unavailable = sum(t["status"] == "unavailable" for t in targets)
    ref = report.get("reference") or {}
    counts = f"{ok} ok, {failed} failed" + (f", {unavailable} unavailable" if unavailable else "")
    if ref.get("status") == "error":
        from ..analysis.common_cause import set_inputs_advised
        # "Set the inputs" only when the reference's failure is about them; otherwise what it says is the cause.
        return ((f"The reference itself failed with the inputs xc picked ({counts}) — set the input shapes or "
                 "values", "error") if set_inputs_advised(report) else
                (f"The reference itself failed with the inputs xc picked ({counts}): "
                 f"{short_reason(ref.get('error'), 120)}", "error"))
    if ok == 0 and failed:
        return f"No target compiled: {counts} — {_likely_cause(report)}", "error"
    return f"Compiled: {counts}", "complete"


def _likely_cause(report: dict) -> str:
    """What the failures share: every target failing when it runs points at the inputs; one message everywhere
    points at the model; otherwise each target's own error is the thing to read."""
    failed = [t for t in report["targets"].values() if t["status"] == "error"]
    stages = {t.get("error_stage") for t in failed}
    messages = {(t.get("error") or "").split(": ", 1)[-1] for t in failed}
    if stages == {"run"}:
        return "every target failed when it ran, so the inputs likely do not fit the model: set the input shapes"
    if len(messages) == 1:
        return f"each says: {messages.pop()}"
    return "each target's error is on the Overview"


def input_rows(report: dict) -> list[dict]:
    """Per input: the shape that ran, in the model's dim names, and where its shape and values came from."""
    resolution = (report.get("inputs") or {}).get("resolution") or {}
    per_input = resolution.get("inputs") or {}
    rows = []
    for i in report["source"]["inputs"]:
        names = i.get("dim_names") or []
        dims = [f"{names[a]}={d}" if a < len(names) and names[a] else str(d) for a, d in enumerate(i["shape"])]
        rec = per_input.get(i["name"], {})
        values = rec.get("values_from") or report["inputs"].get("origin")
        if i.get("low") is not None and values == "seeded-random":
            values += f", integers in [{i['low']:g}, {i['high']:g})"
        rows.append({"input": i["name"], "shape": "[" + ", ".join(dims) + "]", "dtype": i["dtype"],
                     "shape from": rec.get("shape_from", "declared"), "values from": values,
                     "note": i.get("note") or ""})
    return rows


def probe_rows(report: dict) -> list[dict]:
    resolution = (report.get("inputs") or {}).get("resolution") or {}
    return [{"tried": p["dims"], "result": "ran" if p["ok"] else f"failed: {p['error']}"}
            for p in resolution.get("probes") or []]


def coreml_targets(report: dict) -> list[str]:
    return [tid for tid, t in report["targets"].items() if (t.get("info") or {}).get("compute_units_predicted")]


def coreml_op_rows(report: dict, tid: str) -> list[dict]:
    """Every MIL op of a Core ML target: predicted unit, reason, the rule's source, passes, provenance."""
    rows = []
    for n in (report["targets"][tid].get("graph") or {}).get("nodes", []):
        if n["kind"] == "constant":
            continue
        a = n.get("attributes") or {}
        # Core ML through ExecuTorch: the node's backend is the delegate, the unit its rule table's prediction.
        unit = a.get("predicted_unit") or n.get("backend") or "—"
        rows.append({"op": n["id"], "op_type": n["op_type"], "unit": unit,
                     "reason": a.get("unit_reason") or n.get("kernel") or "—", "source": a.get("unit_source") or "—",
                     "precision": n.get("precision") or "—", "passes": ", ".join(a.get("passes") or []),
                     "module_path": n.get("module_path") if n.get("module_path") is not None else "—",
                     "source ops": ", ".join(n.get("source_ops") or []), "location": n.get("source_location") or "—"})
    return rows


# ---- checklist verdicts ------------------------------------------------------------------------------------
# A verdict cell's colour, keyed by the verdict its text starts with; translucent, so it reads on the light and
# the dark theme alike.
VERDICT_BACKGROUND = {"pass": "rgba(47, 158, 68, 0.16)", "warn": "rgba(245, 159, 0, 0.22)",
                      "fail": "rgba(224, 49, 49, 0.20)", "not applicable": "rgba(134, 142, 150, 0.14)"}


# The Streamlit Markdown colour of a verdict's tag (":red[...]"), for lines of findings.
VERDICT_COLOR = {"pass": "green", "warn": "orange", "fail": "red", "not applicable": "gray"}


def verdict_text(verdict: str) -> str:
    """A verdict as every view writes it: a symbol a text font draws and the word ("✗ FAIL"); never the symbol
    alone, so it reads without colour and without an emoji font."""
    from ..analysis.checklist import (
        VERDICT,  # markdown.py imports this module: imported when first called
    )
    return VERDICT.get(verdict, str(verdict))


def verdict_symbol(verdict: str) -> str:
    """The tag before a finding in a line of findings: the verdict's symbol with its word ("✗ FAIL 3 ops fall
    back…"), as verdict_text."""
    return verdict_text(verdict)


def verdict_glyph(verdict: str) -> str:
    """The verdict's symbol alone ("✗"): only to recognise a cell's verdict, never to show one."""
    return verdict_text(verdict).split(" ", 1)[0]


def verdict_css(cell) -> str:
    """The Styler CSS of a cell that starts with a verdict's symbol (the worst first in a tally); '' otherwise."""
    from ..analysis.checklist import VERDICT
    head = str(cell).split(" ", 1)[0]
    verdict = next((v for v in VERDICT if verdict_glyph(v) == head), None)
    return f"background-color: {VERDICT_BACKGROUND[verdict]}" if verdict in VERDICT_BACKGROUND else ""


def colour_verdicts(markdown: str) -> str:
    """Streamlit Markdown with every verdict tag in it ("✗ FAIL", "✓ pass"…) in its verdict's colour and bold: call
    it on text already escaped for Markdown (the tags hold no Markdown character, so escaping leaves them as is)."""
    from ..analysis.checklist import VERDICT
    for verdict, tag in VERDICT.items():
        markdown = markdown.replace(tag, f":{VERDICT_COLOR[verdict]}[**{tag}**]")
    return markdown


def style_verdicts(rows: list[dict], columns, nowrap=(), text=str):
    """A pandas Styler of `rows` for st.table, with the verdict cells of `columns` coloured and the cells of
    `nowrap` kept on one line ("53 → 41", not "53 →" over "41"). st.table renders every header and cell as
    Markdown, so each goes through `text` (the page's escaping); the colours follow the text's leading symbol."""
    import pandas as pd
    names = {c: text(c) for c in dict.fromkeys(k for r in rows for k in r)}
    df = pd.DataFrame([{names[k]: text(v) for k, v in r.items()} for r in rows], columns=list(names.values()))
    styler = df.style.map(verdict_css, subset=[names[c] for c in columns if c in names])
    # st.table wraps each cell's text in a Markdown block that sets its own white-space: the rule names it. One
    # selector per rule: Streamlit scopes a rule to its table by prefixing the table's id to the whole selector.
    keep = [f"col{list(names).index(c)}" for c in nowrap if c in names]
    if keep:
        rules = [{"selector": f"td.{k}{inner}", "props": [("white-space", "nowrap")]}
                 for k in keep for inner in ("", " *")]
        styler = styler.set_table_styles(rules, overwrite=False)
    return styler


def checklist_grid(report: dict) -> list[dict]:
    """A row per target, a column per question ("(2) CPU fallback"), each cell its verdict with its symbol."""
    from ..analysis.checklist import SHORT_QUESTION
    out = []
    for tid, items in report["checklist"]["targets"].items():
        row = {"target": tid}
        for i in items:
            row[f"({i['id']}) {SHORT_QUESTION.get(i['id'], '')}".strip()] = verdict_text(i["verdict"])
        out.append(row)
    return out


def checklist_tally(report: dict, tid: str) -> str:
    """A target's checklist in one cell, worst first: "✗ 1 FAIL · ⚠ 2 warn", "✓ pass", or "– n/a" when nothing
    could be judged (a target that did not compile). It starts with the worst verdict's symbol (its colour)."""
    items = ((report.get("checklist") or {}).get("targets") or {}).get(tid) or []
    verdicts = [i["verdict"] for i in items]
    counts = [f"{verdict_glyph(v)} {verdicts.count(v)} {verdict_text(v).split(' ', 1)[1]}" for v in ("fail", "warn")
              if v in verdicts]
    if counts:
        return " · ".join(counts)
    return verdict_text("pass" if "pass" in verdicts else "not applicable")


def verdict_line(report: dict, tid: str) -> str:
    """A target's checklist in one line, each finding after its verdict's tag: "✗ FAIL 3 ops fall back to the CPU ·
    ✓ pass outputs match". Passing questions are left out, except the outputs (the line's bottom line) and, on an
    accelerated target, that nothing falls back; a target that failed says why instead (even one whose graph was
    read back before its run failed: no verdict on fallbacks as if it had run), or "not run: see above" when a
    cause common to several targets, said once above, stopped it."""
    from ..analysis.common_cause import NOT_RUN, covered_targets
    t = report["targets"][tid]
    if t["status"] == "error":
        return NOT_RUN if tid in covered_targets(report) else f"{t['status']}: {short_reason(t.get('error'), 80)}"
    if not t.get("graph"):
        return f"{verdict_symbol('not applicable')} {t['status'] if t['status'] != 'ok' else 'no graph'}: " \
               f"{short_reason(t.get('error'), 80)}"
    items = {i["id"]: i["verdict"] for i in ((report.get("checklist") or {}).get("targets") or {}).get(tid, [])}
    parts = []
    for qid in sorted(items):
        phrase = _finding(report, tid, qid, items[qid])
        if phrase:
            parts.append(f"{verdict_symbol(items[qid])} {phrase}")
    return " · ".join(parts) or "no checklist"


def _finding(report: dict, tid: str, qid: int, verdict: str) -> str | None:
    """A few words on one question's verdict, from the report's own numbers (None: not worth a place)."""
    t = report["targets"][tid]
    if qid == 4:
        worst = (t.get("drift") or {}).get("worst") or {}
        rel = f" (rel L2 {fmt_sci(worst['rel_l2'])})" if worst.get("rel_l2") is not None else ""
        if verdict == "not applicable" and (t.get("info") or {}).get("numerics_not_run"):
            return "not run here"
        from ..analysis.drift import output_flags
        not_informative, bad = output_flags(worst)
        if bad or (not_informative and verdict == "warn"):
            return "implausible drift figures" if bad else f"drift not informative: {_reference_is(not_informative)}"
        return {"pass": "outputs match", "warn": "outputs drift" + rel,
                "fail": "outputs differ" + rel if rel else "outputs could not be compared"}.get(
                    verdict, "outputs not compared")
    if verdict == "not applicable" or (verdict == "pass" and qid != 2):
        return None
    if qid == 1:
        compute = [n for n in t["graph"]["nodes"] if n["kind"] == "compute"]
        unknown = sum(1 for n in compute if n.get("backend") in (None, "unknown"))
        if unknown:
            return f"{_ops(unknown)} without a device"
        return "devices predicted by xc's rules" if t["graph"].get("evidence") == "predicted-rules" \
            else "compilation report not read"
    if qid == 2:
        from .target_counts import fallback_count
        # Compiled ops on the CPU as the split counts them; a target the split does not know: its fallback flags.
        n = fallback_count(report, tid)
        if n is None:
            n = sum(1 for x in t["graph"]["nodes"] if x.get("fallback"))
        return "nothing falls back to the CPU" if not n else f"{_ops(n)} fall{'s' if n == 1 else ''} back to the CPU"
    if qid == 3:
        n = len(catalogue_rows(report, [tid], only_failed=True))
        return f"{n} fusion(s) did not fire" if n else "no fusion"
    if qid == 5:
        mix = (t.get("precision") or {}).get("mix") or {}
        lowered = [k for k in ("fp16", "bf16", "int8", "uint8") if mix.get(k)]
        return f"runs {'/'.join(lowered)}" if lowered else "precision differs"
    return None


def _ops(n: int) -> str:
    return f"{n} op" + ("" if n == 1 else "s")


def verdict_lines(report: dict) -> list[tuple[str, str]]:
    """(target, its one-line verdict) for every target, in the report's order."""
    return [(tid, verdict_line(report, tid)) for tid in report["targets"]]


# ---- heat map ---------------------------------------------------------------------------------------------
# The side a graph falls back from: an accelerator, or a delegate that takes ops off the runtime's own CPU kernels
# (ExecuTorch's XNNPACK delegate runs on the CPU, but an op outside it is a fallback all the same).
ACCELERATORS = {"nnapi", "coreml", "ane", "gpu", "npu", "xnnpack", "vulkan"}
HEAT_CATEGORIES = ["accelerator", "accelerator (fused)", "CPU", "CPU (fused)", "CPU fallback", "unknown",
                   "not present"]


def _cell_category(cell: dict) -> str:
    if cell["status"] == "absent":
        return "not present"
    if cell["status"] == "fallback":
        return "CPU fallback"
    backend = cell.get("backend") or "unknown"
    fused = cell["status"] == "fused"
    if backend in ACCELERATORS:
        return "accelerator (fused)" if fused else "accelerator"
    if backend == "cpu":
        return "CPU (fused)" if fused else "CPU"
    return "unknown"


def not_compiled(report: dict) -> dict[str, str]:
    """Targets that came back without a graph (an error, or unavailable here), each with its status and the start
    of its reason ("error: killed by SIGSEGV in compile"): per-target grids show them as a labelled empty column."""
    return {tid: f"{t['status'] if t['status'] != 'ok' else 'no graph'}: {short_reason(t.get('error'))}"
            for tid, t in report["targets"].items() if not t.get("graph")}


def not_compiled_coreml(report: dict) -> dict[str, str]:
    """not_compiled, for the Core ML targets (the Core ML page's)."""
    return {tid: why for tid, why in not_compiled(report).items()
            if ((report["targets"][tid].get("id") or tid).startswith("coreml-"))}


def short_reason(text, limit: int = 40) -> str:
    """The start of a one-line error, cut at a word, for a column label."""
    words = " ".join(str(text or "no reason given").split())
    if len(words) <= limit:
        return words
    return words[:limit].rsplit(" ", 1)[0].rstrip(" ,;:(") + " …"


def module_rows(paths, depth: int) -> dict[str, str]:
    """Each module path → its row at `depth` levels of the hierarchy, counting only levels where it branches: a
    wrapper with a single child (Hugging Face's `model` → `model.vit` → `model.vit.encoder` → its layers) is no
    level of its own, so depth 1 already splits the model into parts. Ops that sit on a module itself count as one
    more child of it."""
    children: dict[tuple, set] = {}
    split = {p: tuple(p.split(".")) if p else () for p in set(paths)}
    for parts in split.values():
        for i in range(len(parts)):
            children.setdefault(parts[:i], set()).add(parts[i])
        children.setdefault(parts, set()).add(None)
    out = {}
    for path, parts in split.items():
        level = i = 0
        while i < len(parts) and level < depth:
            level += len(children[parts[:i]]) > 1
            i += 1
        out[path] = ".".join(parts[:i]) if parts else "(root)"
    return out


def module_depth(report: dict) -> int:
    """Levels where the module hierarchy branches, down to its deepest module (the heat map's largest depth)."""
    paths = {r["module_path"] or "" for r in (report.get("alignment") or {}).get("source_ops", [])}
    deepest = 1
    for d in range(1, 1 + max((p.count(".") + 1 for p in paths if p), default=0)):
        deepest = d
        # Each branching level splits some row in two or more; past the last, the rows stay the same.
        if len(set(module_rows(paths, d).values())) == len(set(module_rows(paths, d + 1).values())):
            break
    return deepest


def heatmap_rows(report: dict, by_module: bool = True, depth: int = 2) -> tuple[list[str], list[str], list[list]]:
    """Rows (modules `depth` branching levels deep — see module_rows —, or source ops), columns (every target),
    cells {category, hover, us} for the heat map (us: the measured time of the compiled nodes the row owns). A module's cell is its worst op: a CPU fallback anywhere in it shows,
    then the most common category. A target without a graph keeps its column, every cell's category None (an empty
    column; not_compiled labels it)."""
    rows = (report.get("alignment") or {}).get("source_ops", [])
    targets = list(report["targets"])
    missing = not_compiled(report)
    keys = module_rows([r["module_path"] or "" for r in rows], depth) if by_module else {}
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if by_module:
            key = keys[r["module_path"] or ""]
        else:
            key = f"{r['source_op']} · {r['op_type']}" + (f" · {r['module_path']}" if r["module_path"] else "")
        groups.setdefault(key, []).append(r)
    # Time per cell: each compiled node's measured time counts once, in the first row (execution order) that
    # carries it; a node fused across rows is said in the hover of the row that has it.
    node_us = {tid: {n["id"]: n.get("measured_us") for n in (report["targets"][tid].get("graph") or {}).get("nodes", [])}
               for tid in targets if tid not in missing}
    owned: dict[str, set] = {tid: set() for tid in node_us}
    labels, cells = [], []
    for key, members in groups.items():
        labels.append(key)
        line = []
        for tid in targets:
            if tid in missing:
                line.append({"category": None, "hover": plotly_text(f"{tid}: {missing[tid]}"), "us": None})
                continue
            mine = [nid for m in members for nid in (m["targets"].get(tid) or {}).get("nodes", [])
                    if nid not in owned[tid]]
            owned[tid].update(mine)
            times = [node_us[tid][nid] for nid in dict.fromkeys(mine) if node_us[tid].get(nid) is not None]
            us = round(sum(times), 3) if times else None
            cats = [_cell_category(m["targets"][tid]) for m in members if tid in m["targets"]]
            if not cats:
                line.append({"category": "not present", "hover": "no data", "us": None})
                continue
            cat = "CPU fallback" if "CPU fallback" in cats else max(set(cats), key=cats.count)
            reasons = sorted({m["targets"][tid].get("fallback_reason") for m in members
                              if m["targets"].get(tid, {}).get("fallback_reason")})
            ev = report["targets"][tid]["graph"]["evidence"]
            # plotly renders a subset of HTML in hover text (links included): the model's names go in escaped
            hover = (plotly_text(f"{key} on {tid}: {cat} ({len(members)} op(s): " + ", ".join(sorted(set(cats))) + ")")
                     + (f"<br>reason: {plotly_text('; '.join(reasons))}" if reasons else "")
                     + f"<br>evidence: {plotly_text(ev)}")
            if us is not None:
                hover += f"<br>time: {us:,.1f} µs ({len(times)} node(s) timed, measured)"
            line.append({"category": cat, "hover": hover, "us": us})
        cells.append(line)
    return labels, targets, cells


# ---- precision ----------------------------------------------------------------------------------------------
def precision_rows(report: dict, only_differing: bool = False) -> list[dict]:
    ref_id = (report.get("reference") or {}).get("id")
    rows = []
    for r in (report.get("alignment") or {}).get("source_ops", []):
        row = {"source op": r["source_op"], "op_type": r["op_type"],
               "module_path": r["module_path"] if r["module_path"] is not None else "—"}
        precs = set()
        for tid, cell in r["targets"].items():
            p = cell.get("precision") if cell["status"] != "absent" else None
            row[tid] = p or "—"
            if p and p in ("fp32", "fp16", "bf16", "int8", "uint8"):
                precs.add(p)
        row["differs"] = len(precs) > 1
        if ref_id:
            row["reference"] = "fp32"
        if not only_differing or row["differs"]:
            rows.append(row)
    return rows


OUTCOME_ORDER = {"blocked": 0, "missed": 1, "superseded": 2, "fired": 3}


def catalogue_rows(report: dict, targets: list[str] | None = None, *, only_failed: bool = False) -> list[dict]:
    """Each target's catalogued fusion opportunities (fusions its own compiler implements) and how each ended:
    blocked and missed first, as question 3 of the checklist reads them."""
    rows = []
    for tid in targets or list(report["targets"]):
        cat = ((report["targets"][tid].get("fusions") or {}).get("catalogue")) or {}
        for o in cat.get("opportunities", []):
            if only_failed and o["outcome"] not in ("blocked", "missed"):
                continue
            rows.append({"target": tid, "fusion": o["fusion"], "outcome": o["outcome"],
                         "reason": o.get("reason") or "—", "ops": "→".join(o["op_types"]),
                         "first node": o["nodes"][0], "module_path": o.get("module_path") or "—"})
    return sorted(rows, key=lambda r: (OUTCOME_ORDER.get(r["outcome"], 9), r["target"]))


def catalogue_entries(report: dict, tid: str) -> list[dict]:
    cat = ((report["targets"][tid].get("fusions") or {}).get("catalogue")) or {}
    return [{"fusion": e["fusion"], "pattern": e["pattern"], "source": e["source"]} for e in cat.get("entries", [])]


def fmt_count(x) -> str:
    """Counts are integers everywhere ("4", never "4.0"); a missing count is "—"."""
    return "—" if x is None else str(int(x))


def target_summary_rows(report: dict) -> list[dict]:
    """The Overview / Markdown target table: eight short columns (a failed target's status is in its first cell;
    the Markdown leaves out the checklist tally, which has its own table there). The rest of overview_rows
    (partitions, ORT's verdict, the runtime's own count, the latency-cliff estimate, casts, MIL op counts, every
    evidence key) is one click away."""
    from ..analysis.common_cause import NOT_RUN, covered_targets
    from .target_counts import SPLIT_COLUMN
    covered = covered_targets(report)
    out = []
    for row in overview_rows(report):
        t = report["targets"][row["target"]]
        # An accelerated target's split of its compiled ops, worded as on every page (target_counts.split_counts);
        # a Core ML target that runs on the CPU anyway: its predicted compute units.
        accel = row.get(SPLIT_COLUMN) or row.get("Core ML units") or "—"
        ev = t.get("evidence") or {}
        # A target that did not compile says so in its first cell (the table keeps to eight columns).
        out.append({"target": row["target"] if row["status"] == "ok" else f"{row['target']} ({row['status']})",
                    # A failed target has no verdicts: it did not run (its error is said under the table).
                    "checklist": checklist_tally(report, row["target"]) if row["status"] != "error" else
                    NOT_RUN if row["target"] in covered else "failed: its error is below",
                    "ops": row["ops"],
                    "fused": fmt_count(row["fused groups"]) if row["fused groups"] != "—" else "—",
                    "accelerator": accel, "precision": row["precision"], "worst drift (rel L2)":
                    row["worst drift (rel L2)"],
                    "evidence": " · ".join(ev[k] for k in ("assignment", "numerics") if k in ev) or "—"})
    return out


# Targets users ship together, in the order the Overview reads them: the two phone platforms, each phone
# platform through ONNX Runtime and natively, the two CPU runtimes, and float against int8.
SHIPPED_TOGETHER = [("coreml-ane", "coreai-ane"), ("coreml-cpu", "coreai-cpu"),   # Apple's two stacks, one checkpoint
                    ("ort-nnapi", "coreml-ane"),
                    # an ExecuTorch team's Android and iOS builds; Core ML direct and through ExecuTorch
                    ("executorch-xnnpack", "executorch-coreml"), ("coreml-ane", "executorch-coreml"),
                    ("ort-coreml", "coreml-ane"), ("ort-nnapi", "ort-coreml"), ("ort-nnapi", "executorch-xnnpack"),
                    # Android's two native stacks, and LiteRT's CPU and GPU delegates on one .tflite
                    ("litert-xnnpack", "executorch-xnnpack"), ("litert-xnnpack", "litert-gpu"),
                    ("litert-gpu", "executorch-vulkan"), ("litert-xnnpack", "coreml-ane"),
                    ("ort-cpu", "openvino-cpu"), ("ort-cpu", "ort-cpu-int8"), ("inductor-cpu", "ort-cpu")]


def default_pairs(report: dict, limit: int = 3) -> list[tuple[str, str]]:
    """Variants of one target first (what a flag changed is what their user asked), then targets shipped
    together. Only targets that ran: a failed one's graph is no verdict on what it would have done."""
    ok = [tid for tid, t in report["targets"].items() if t.get("graph") and t.get("status") != "error"]
    base = {tid: tid.split("[", 1)[0] for tid in ok}
    variants = [(a, b) for i, a in enumerate(ok) for b in ok[i + 1:] if base[a] == base[b]]
    # Each pair in the report's target order, as the Overview lists every pair (itertools.combinations).
    pos = {tid: i for i, tid in enumerate(ok)}
    pairs = variants + [tuple(sorted(p, key=pos.get)) for p in SHIPPED_TOGETHER if p[0] in ok and p[1] in ok]
    if not pairs and len(ok) >= 2:
        pairs = [(ok[0], ok[1])]
    return pairs[:limit]


def pair_sentence(report: dict, a: str, b: str) -> str:
    """One sentence on what differs between two targets a user ships together: the source ops that fall back to the
    CPU on one and not the other (counted by source op, as the heat map rows are: one source op may be several
    compiled ops), how much each fused (when that differs), then each one's worst drift and its cause."""
    rows = (report.get("alignment") or {}).get("source_ops") or []

    def fallbacks(x, y):
        return [r for r in rows if (r["targets"].get(x) or {}).get("status") == "fallback"
                and (r["targets"].get(y) or {}).get("status") != "fallback"]

    parts = []
    for x, y in ((a, b), (b, a)):
        only = fallbacks(x, y)
        if only:
            names = ", ".join(f"{r['source_op']}" + (f" ({r['module_path']})" if r.get("module_path") else "")
                              for r in only[:3]) + (f" and {len(only) - 3} more" if len(only) > 3 else "")
            parts.append(f"{len(only)} source op(s) fall back to the CPU on {x} and not on {y}: {names}")
    if not parts:
        parts.append("the same source ops run on the CPU on both" if any(
            (r["targets"].get(a) or {}).get("status") == "fallback" for r in rows) else "neither falls back to the CPU")
    parts += _neural_engine_phrases(report, a, b)
    fused = {x: ((report["targets"][x].get("fusions") or {}).get("count"), report["targets"][x].get("op_count_after"))
             for x in (a, b)}
    if fused[a] != fused[b] and None not in (fused[a][0], fused[b][0]):
        parts.append(f"{a} fuses {fused[a][0]} group(s) into {fused[a][1]} compiled ops, {b} {fused[b][0]} into "
                     f"{fused[b][1]}")
    drift = "; ".join(_drift_phrase(report, x) for x in (a, b))
    return f"{a} vs {b}: " + "; ".join(parts) + f". Drift: {drift}."


def _neural_engine_phrases(report: dict, a: str, b: str) -> list[str]:
    """Source ops one target keeps wholly on the Neural Engine and the other does not (Core ML vs Core AI: a
    source op may become several ops, and it stays on the ANE only if all of them do). Said only when both
    targets assign ops to the ANE at all."""
    def split(tid):
        on, off = set(), set()
        for n in (report["targets"][tid].get("graph") or {}).get("nodes", []):
            if n["kind"] in ("constant", "io", "cast"):
                continue
            for src in n.get("source_ops") or []:
                (on if n.get("backend") == "ane" else off).add(src)
        return on - off, on | off
    (ane_a, all_a), (ane_b, all_b) = split(a), split(b)
    if not ane_a or not ane_b:
        return []
    order = [n["id"] for n in ((report.get("capture") or {}).get("graph") or {}).get("nodes", [])]
    pos = {k: i for i, k in enumerate(order)}
    out = []
    for x, y, ane_x, ane_y, all_y in ((a, b, ane_a, ane_b, all_b), (b, a, ane_b, ane_a, all_a)):
        only = sorted((ane_x - ane_y) & all_y, key=lambda k: (pos.get(k, 1 << 30), k))
        if only:
            names = ", ".join(only[:3]) + (f" and {len(only) - 3} more" if len(only) > 3 else "")
            out.append(f"{len(only)} source op(s) wholly on the Neural Engine on {x}, not wholly (or not predictably) "
                       f"on {y}: {names}")
    kinds = {x: (report["targets"][x].get("evidence") or {}).get("assignment", "—") for x in (a, b)}
    out = out or ["the same source ops on the Neural Engine on both"]
    out[-1] += f" (devices: {a} {kinds[a]}, {b} {kinds[b]})"
    return out


def _drift_phrase(report: dict, tid: str) -> str:
    t = report["targets"][tid]
    d = t.get("drift") or {}
    if d.get("failed"):
        return f"{tid} has no numbers (xc's emulation failed)"
    if (t.get("info") or {}).get("numerics_not_run"):
        return f"{tid} not run here"
    worst = d.get("worst") or {}
    from ..analysis.drift import ROUTE_REFERENCE, output_flags
    not_informative, bad = output_flags({**(d.get("outputs") or {}).get(worst.get("output"), {}), **worst})
    if bad:
        return f"{tid} implausible on '{worst.get('output')}' ({bad})"
    if not_informative:
        return f"{tid} not informative on '{worst.get('output')}' ({not_informative})"
    if worst.get("rel_l2") is None:
        return f"{tid} not compared"
    against = " against the route's program" if d.get("reference") == ROUTE_REFERENCE else ""
    mix = (t.get("precision") or {}).get("mix") or {}
    lowered = [k for k in ("fp16", "bf16", "int8", "uint8") if mix.get(k)]
    cause = (f"{'/'.join(lowered)} compute" if lowered else "fp32 rounding only")
    part = (t.get("info") or {}).get("partitioning")
    if part and not part.get("decided_by") and not lowered:      # ORT's mobile EPs, run on the CPU EP
        cause = "the CPU EP's numbers for its partitions; the device's own rounding is not predicted"
    return f"{tid} {fmt_sci(worst['rel_l2'])} on '{worst.get('output')}'{against} ({cause}; {d.get('evidence')})"


# ------------------------------------------------------------------------------------------------ stages
def target_steps(t: dict) -> list[dict]:
    """A target block's recorded steps; [] for reports made before steps were recorded (their `stages` was a
    list of graphs)."""
    stages = t.get("stages")
    return stages.get("steps") or [] if isinstance(stages, dict) else []


def stage_targets(report: dict) -> list[str]:
    """Targets with recorded steps, in report order."""
    return [tid for tid, t in report["targets"].items() if target_steps(t)]


def _stage_cell(steps: list[dict], stage: str, previous_ops, precision: dict | None = None) -> str:
    """What one target did in one canonical stage, in a few words. Toolchains that run in levels (ORT,
    OpenVINO, Inductor) read "ops in → out"; pass pipelines whose passes interleave (coremltools) read the net
    change the passes of that kind made."""
    from ..lowering import BACKEND, FALLBACK, FUSION, IMPORT, KERNEL
    mine = [s for s in steps if s["stage"] == stage]
    if not mine:
        return "—"
    last = mine[-1]
    c = last["counts"]
    if stage == BACKEND:
        text = " · ".join(f"{b} {n}" for b, n in sorted(c.get("backends", {}).items(), key=lambda kv: -kv[1]))
        if c.get("partitions") is not None:
            text += f" · {c['partitions']} partition(s)"
        return text or "—"
    if stage == FALLBACK:
        if not c.get("fallbacks"):
            return "none"
        return f"{c['fallbacks']} op(s) on the CPU" + (f" · {c['boundaries']} boundaries" if c.get("boundaries")
                                                        else "")
    parts = []
    passes = [s for s in mine if "ops_before" in s["counts"]]
    if stage == IMPORT:
        counts = [s["op_count"] for s in mine if s["op_count"] is not None]
        parts.append(" → ".join(str(n) for n in dict.fromkeys(counts)) + " ops" if counts else "?")
    elif passes:
        ops = sum(s["op_count"] - s["counts"]["ops_before"] for s in passes)
        casts = sum(s["counts"]["casts"] - s["counts"]["casts_before"] for s in passes)
        parts.append(f"{len(passes)} pass(es): ops {ops:+d}" + (f", casts {casts:+d}" if casts else ""))
    elif previous_ops is not None and last["op_count"] is not None:
        parts.append(f"{previous_ops} → {last['op_count']} ops")
    if c.get("fused_nodes") and stage != KERNEL and not passes:
        parts.append(f"{c['fused_nodes']} fused nodes")
    if stage == KERNEL:
        if c.get("reorders"):
            parts.append(f"{c['reorders']} reorders")
        if c.get("casts") and not passes:
            parts.append(f"{c['casts']} casts")
        if last.get("graph") == "final" and precision:
            parts.append(" · ".join(f"{p} ×{n}" for p, n in sorted(precision.items(), key=lambda kv: -kv[1])[:3]))
    elif stage != FUSION and c.get("casts") and not passes:
        parts.append(f"{c['casts']} casts")
    return " · ".join(parts)


def stage_matrix(report: dict) -> list[dict]:
    """Rows: the six canonical stages; columns: targets; each cell a short count of what happened there."""
    from ..lowering import STAGE_TITLES, STAGES
    targets = stage_targets(report)
    if not targets:
        return []
    rows = []
    previous = {tid: None for tid in targets}
    for stage in STAGES:
        row = {"stage": STAGE_TITLES[stage]}
        for tid in targets:
            steps = report["targets"][tid]["stages"]["steps"]
            row[tid] = _stage_cell(steps, stage, previous[tid],
                                   (report["targets"][tid].get("precision") or {}).get("mix"))
            counts = [s["op_count"] for s in steps if s["stage"] == stage and s["op_count"] is not None]
            if counts and stage not in ("backend-selection", "fallback-insertion"):
                previous[tid] = counts[-1]
        rows.append(row)
    return rows


def step_rows(report: dict, tid: str) -> list[dict]:
    """Every recorded step of one target, in the order its toolchain ran them."""
    from ..lowering import STAGE_TITLES
    out = []
    for i, s in enumerate(report["targets"][tid]["stages"]["steps"]):
        c = s["counts"]
        extra = {k: v for k, v in c.items() if k not in ("ops_before", "casts_before", "pass_index", "backends")}
        out.append({"#": i + 1, "stage": STAGE_TITLES.get(s["stage"], s["stage"]), "step": s["name"],
                    "ops": fmt_count(s["op_count"]),
                    "details": ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in extra.items()
                                         if v not in (None, 0, {}))
                    + (" · " + s["note"] if s.get("note") else ""),
                    "graph": "compiled graph" if s["graph"] == "final" else ("kept" if s["graph"] else "—")})
    return out


def stage_graph_choices(report: dict) -> list[tuple[str, int, str]]:
    """(target, step index, label) of every step whose graph is kept beside the report (not the final graph,
    which every page already shows)."""
    from ..lowering import STAGE_TITLES
    out = []
    for tid in stage_targets(report):
        for i, s in enumerate(report["targets"][tid]["stages"]["steps"]):
            if s["graph"] and s["graph"] != "final":
                out.append((tid, i, f"{tid} · {STAGE_TITLES.get(s.get('ends_stage') or s['stage'])} · {s['name']}"))
    return out


def with_stage_graphs(report: dict, stage_graphs: dict, picks: list[tuple[str, int, str]]) -> dict:
    """A shallow copy of the report where each picked step graph is one more target (named by its label), with
    its own alignment cells, so every graph view draws and aligns it like a compiled graph."""
    from ..analysis.alignment import source_op_table
    from ..ir import Graph
    out = dict(report)
    targets = dict(report["targets"])
    graphs = {}
    for tid, i, label in picks:
        step = report["targets"][tid]["stages"]["steps"][i]
        gd = stage_graphs.get(step["graph"])
        if gd is None:
            continue
        ev = report["targets"][tid]["stages"]["evidence"].get("steps")
        targets[label] = {"id": report["targets"][tid]["id"], "identity": label, "status": "ok",
                          "label": f"{report['targets'][tid].get('label', tid)} — {step['name']}",
                          "graph": {**gd, "evidence": ev}, "fusions": None, "evidence": {"assignment": ev},
                          "stage_of": tid}
        graphs[label] = Graph.from_dict(gd)
    out["targets"] = targets
    if graphs and (report.get("capture") or {}).get("graph"):
        extra = {r["source_op"]: r["targets"] for r in
                 source_op_table(Graph.from_dict(report["capture"]["graph"]), graphs)}
        al = dict(report.get("alignment") or {})
        al["source_ops"] = [{**r, "targets": {**r["targets"], **extra.get(r["source_op"], {})}}
                            for r in (al.get("source_ops") or [])]
        out["alignment"] = al
    return out


def _divergence_across(report: dict) -> list[dict]:
    """Per source op, the first stage at which the targets' signatures differ and how they split there (reports
    of the previous stop stored these rows; they are computed from the signatures now)."""
    from ..analysis.stage_trace import first_divergence
    div = report.get("divergence") or {}
    if "rows" in div:
        return div["rows"] or []
    sigs = div.get("signatures") or {}
    return first_divergence(sigs, div.get("ops") or []) if len(sigs) > 1 else []


def divergence_counts(report: dict) -> dict[str, int]:
    """How many source ops first part ways at each stage (across every target with steps)."""
    from ..lowering import STAGE_TITLES, STAGES
    rows = _divergence_across(report)
    counts = {STAGE_TITLES[s]: 0 for s in STAGES}
    counts["never"] = 0
    for r in rows:
        counts[STAGE_TITLES[r["first_stage"]] if r["first_stage"] else "never"] += 1
    return counts


def divergence_rows(report: dict, a: str | None = None, b: str | None = None,
                    only_diverging: bool = True) -> list[dict]:
    """Per source op, the first stage at which targets part ways: across every target (a, b None) — with how
    they split there — or between two targets, with both sides."""
    from ..analysis.stage_trace import pair_divergence
    from ..lowering import STAGE_TITLES
    div = report.get("divergence") or {}
    index = {r["source_op"]: r for r in (report.get("alignment") or {}).get("source_ops") or []}
    out = []
    if a and b:
        sigs = div.get("signatures") or {}
        if a not in sigs or b not in sigs:
            return []
        for r in pair_divergence(sigs, a, b, div["ops"]):
            if only_diverging and not r["first_stage"]:
                continue
            src = index.get(r["op"], {})
            out.append({"source op": r["op"], "op_type": src.get("op_type", "—"),
                        "module": src.get("module_path") or "(root)",
                        "first diverges at": STAGE_TITLES.get(r["first_stage"], "never"), a: r[a], b: r[b]})
        return out
    for r in _divergence_across(report):
        if only_diverging and not r["first_stage"]:
            continue
        src = index.get(r["op"], {})
        out.append({"source op": r["op"], "op_type": src.get("op_type", "—"), "module": src.get("module_path") or "(root)",
                    "first diverges at": STAGE_TITLES.get(r["first_stage"], "never"),
                    "how the targets split there": " | ".join(f"{', '.join(s['targets'])}: {s['signature']}"
                                                              for s in r["split"])})
    return out


def layout_summary_rows(report: dict) -> list[dict]:
    """Per target: the layouts its compute nodes run in (where the runtime says), the reorders / transposes it
    inserted, the bytes they move and the NCHW↔NHWC (or blocked) transitions."""
    out = []
    for tid, t in report["targets"].items():
        lay = t.get("layout")
        if not lay:
            continue
        out.append({"target": tid,
                    "node layouts": ", ".join(f"{k} × {v}" for k, v in lay["node_layouts"].items()) or "not reported",
                    "reorders / transposes": lay["move_count"],
                    "bytes moved": _fmt_bytes(lay["bytes_moved"]) + (f" (+{lay['unsized_moves']} unsized)"
                                                                    if lay["unsized_moves"] else ""),
                    "transitions": ", ".join(f"{k} × {v}" for k, v in lay["transitions"].items()) or "none",
                    "said by": lay["said_by"], "evidence": lay.get("evidence", "—")})
    return out


def layout_move_rows(report: dict, tid: str) -> list[dict]:
    lay = report["targets"][tid].get("layout") or {}
    return [{"node": m["id"], "op_type": m["op_type"], "from": m.get("from") or "—", "to": m.get("to") or "—",
             "shape": "×".join(str(d) for d in m["shape"]) if m.get("shape") else "?",
             "dtype": m.get("dtype") or "?", "bytes": _fmt_bytes(m["bytes"]) if m["bytes"] is not None else "?",
             "note": m.get("precision") or m.get("what") or (f"perm {m['perm']}" if m.get("perm") else "")}
            for m in lay.get("moves") or []]


def _fmt_bytes(n) -> str:
    if n is None:
        return "?"
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


# ------------------------------------------------------------------------------------------------ downloads
MODEL_EXPLORER_ZIP = "model_explorer.zip"

# What a file is, where its name alone does not say (target id without options → file name → note). OpenVINO's
# runtime model is the graph the CPU plugin executes: Netron draws it, but read_model refuses it (its layers carry
# no opset version); the IR beside it is the model it compiled, which read_model loads.
ARTIFACT_NOTES = {
    "openvino-cpu": {
        "runtime_model.xml": "execution graph — open in Netron; not loadable by read_model",
        "runtime_model.bin": "execution graph — open in Netron; not loadable by read_model",
        "model.xml": "IR — loadable by openvino.Core().read_model (keep model.bin beside it)",
        "model.bin": "IR — loadable by openvino.Core().read_model (keep model.bin beside it)",
    },
}


def artifact_groups(report: dict, rels) -> list[dict]:
    """The run's files for the Downloads page, grouped: each target's artifacts (report order), then the captured
    model, the inputs and the rest. The reports are left out, and so is the model_explorer/ folder of a
    run stored before the export was made on demand (the page builds it as one zip, see model_explorer_command). Each group: {"group", "title", "parts": [(note, [{"rel",
    "label"}])]} — files without a note first, then one part per note in ARTIFACT_NOTES' order, so a note sits
    above the files it is about."""
    from ..export.model_explorer import MODEL_EXPLORER_DIR
    from ..report.sidecar import SIDECAR_FILES
    folder = MODEL_EXPLORER_DIR + "/"
    by_group: dict[str, list[str]] = {}
    for rel in sorted(rels):
        if rel in ("report.json", *SIDECAR_FILES) or rel.startswith(folder):
            continue
        parts = rel.split("/")
        group = parts[1] if parts[0] == "artifacts" and len(parts) > 2 else \
            {"inputs.npz": "inputs"}.get(parts[0], parts[0])
        by_group.setdefault(group, []).append(rel)
    targets = report["targets"]
    # A variant's folder is not its id ("openvino-cpu--precision-f32" for "openvino-cpu[precision=f32]"): the
    # report's artifact paths say whose folder is whose.
    owner = {a.split("/")[1]: tid for tid, t in targets.items() for a in t.get("artifacts") or []
             if a.startswith("artifacts/") and a.count("/") >= 2}
    owner.update({tid: tid for tid in targets})
    rank = {tid: i for i, tid in enumerate(targets)}
    order = sorted(by_group, key=lambda g: (0, rank[owner[g]], g) if g in owner else (1, 0, g))
    out = []
    for g in order:
        tid = owner.get(g)
        t = targets.get(tid) or {}
        notes = ARTIFACT_NOTES.get(t.get("id") or str(tid).split("[", 1)[0], {})
        parts: dict[str, list[dict]] = {}
        for rel in by_group[g]:
            name = rel.rsplit("/", 1)[-1]
            parts.setdefault(notes.get(name, ""), []).append({"rel": rel, "label": name})
        title = f"{tid} — {t['label']}" if t.get("label") else (tid or g)
        note_rank = {note: i for i, note in enumerate(dict.fromkeys(notes.values()))}
        out.append({"group": g, "title": title, "count": len(by_group[g]),
                    "parts": sorted(parts.items(), key=lambda kv: note_rank.get(kv[0], -1))})
    return out


def model_explorer_command(report: dict) -> str:
    """How to open model_explorer.zip: unzip it, then open two graphs in Model Explorer — the first pair the
    Overview compares, else the first target and the captured graph — the first with its backends coloured. ""
    when the export would hold no target graph. Computed from the file names the export gives, without building
    it."""
    from ..export.model_explorer import CAPTURED, MODEL_EXPLORER_DIR, export_plan, open_command
    index = export_plan(report)
    graphs = index["graphs"]
    pair = next((list(p) for p in default_pairs(report) if all(g in graphs for g in p)), None)
    if pair is None:
        first = next((g for g in graphs if g != CAPTURED), None)
        if first is None:
            return ""
        pair = [first, CAPTURED]
    return f"unzip {MODEL_EXPLORER_ZIP} && " + open_command(index, pair, folder=MODEL_EXPLORER_DIR)


# ---- where the time goes ----------------------------------------------------------------------------------------
def time_rows(report: dict) -> list[dict]:
    """One row per target that timed its compiled nodes: how many, the timed total with its run-to-run spread
    (the interquartile range of the profiled runs' totals; "spread unknown" for a report of an older xc, which kept
    no per-run samples), its three costliest nodes and the share per backend, with the evidence and the CPU the
    times are from."""
    rows = []
    for tid, t in report["targets"].items():
        nt = t.get("node_times") or {}
        if not nt.get("timed_us"):
            continue
        top = ", ".join(f"{n['node']} ({n['op_type']}) {100 * n['share']:.0f}%" for n in nt["top"][:3])
        total = ((nt.get("spread") or {}).get("total_us")) or {}
        # The sum of the nodes' medians is not the median of the runs' totals: both said, so they never look like
        # two answers to one question.
        spread = (f"the nodes' medians summed; the runs' totals: median {total['median']:,.0f}, IQR "
                  f"{total['q1']:,.0f}–{total['q3']:,.0f}" if "q1" in total else "spread unknown")
        rows.append({"target": tid,
                     "nodes timed": f"{nt['compute_nodes_timed']}/{nt['compute_nodes']} compute",
                     "timed µs": f"{nt['timed_us']:,.0f} ({spread})",
                     "costliest nodes": top,
                     "per backend": ", ".join(f"{b['key']} {100 * b['share']:.0f}%" for b in nt["by_backend"]),
                     "evidence": f"{nt['evidence']} · {nt['runs']} runs, median and interquartile range · "
                                 f"{nt['host_cpu']}"})
    return rows
