"""Plain tables derived from a Report, shared by the pages and the CLI (no UI imports here)."""
from __future__ import annotations

from collections.abc import Mapping

from ..evidence import ESTIMATED_COMPILER
from ..report.types import DriftOutput, Report, RouteBlock, StageStep, TargetBlock
from .time_evidence import is_estimated
from .typed_report import as_report, as_target


def plotly_text(text) -> str:
    """Text for plotly's hover and tick labels, which render <a>, <b>, <br> … : escaped."""
    import html
    return html.escape(str(text), quote=False)


def fmt_sci(x) -> str:
    """Error figures (rel L2, max abs, tolerances) in one format everywhere: 3.17e-07 beside 8.57e-03."""
    if x is None:
        return "—"
    return "0" if x == 0 else f"{x:.2e}"


def overview_rows(report: Report | Mapping) -> list[dict]:
    """One row per target with every column a view may show. Counts come from views/target_counts.py and say what
    they count: "53 source → 41 compiled" ops (compute ops), an accelerated target's split of its compiled ops
    (xc's placement on the graph), the runtime's own count beside it where the runtime stated one."""
    from .target_counts import SPLIT_COLUMN, count_check, op_counts, split_counts
    from .compute_share import WEIGHTED_COLUMN, weighted_cell
    report = as_report(report)
    rows = []
    for tid, t in report.targets.items():
        mix = t.precision.mix
        total = sum(mix.values()) or 1
        rows.append({
            "target": tid,
            "status": t.status,
            "ops": (op_counts(t) or {}).get("cell", "—"),
            "fused groups": t.fusions.count if t.fusions else "—",
            "precision": ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in mix.items()) or "—",
            "worst drift (rel L2)": worst_drift_cell(t),
            "evidence": ", ".join(f"{k}: {v}" for k, v in t.evidence.items()),
            "error": t.error,
        })
        info = t.info
        units = info.compute_units_predicted
        if units:
            coreml_facts = info.extra      # the Core ML toolchain's own counts: free facts of its info
            rows[-1].update({
                # Units in capitals (ANE, CPU), ops no rule places in words: "UNKNOWN" read as a unit.
                "Core ML units": ", ".join(f"{k.upper() if k != 'unknown' else k} {100 * v:.0f}%"
                                           for k, v in units.share.items() if v),
                "casts": (coreml_facts.get("casts") or {}).get("count", 0),
                "MIL ops": (f"{coreml_facts['mil_ops_before']} → {coreml_facts['mil_ops_after']}"
                            if coreml_facts.get("mil_ops_before") is not None
                            else str(coreml_facts.get("mil_ops_after", "—"))),
            })
        part, bounds = info.partitioning, info.boundaries
        split = split_counts(report, tid)
        if split:
            rows[-1][SPLIT_COLUMN] = split["text"]
            weighted = weighted_cell(t)     # the same split weighed by MACs and time (views/compute_share.py)
            if weighted:
                rows[-1][WEIGHTED_COLUMN] = weighted
            check = count_check(report, tid)
            if check:
                count = check["runtime"]
                rows[-1]["runtime's own count"] = (
                    f"{count['by']}: {count['on_accelerator']} of {count['total']} ops ({count['evidence']}) — "
                    + ("xc's placement agrees" if check["agree"] else f"xc's placement counts {check['placed']}"))
        if part:
            # ORT's checker's own figures (free facts of its partitioning): the weights its partitions hold, and
            # its share with the dims symbolic.
            pshare = part.extra.get("accelerated_share_param_bytes")
            shipped = info.partitioning_as_shipped
            if pshare is not None:
                rows[-1]["weights on the accelerator"] = f"{100 * pshare:.0f}% ({part.evidence})"
            if shipped:
                rows[-1]["as shipped (dynamic dims)"] = (f"{100 * shipped.extra['accelerated_share_nodes']:.0f}% of "
                                                         f"the nodes ORT's checker counts "
                                                         f"({shipped.extra.get('evidence')})")
            rows[-1].update({
                "partitions": part.num_partitions,
                "ORT verdict": part.extra.get("suitability") or "—",
                "latency cliff (est.)": (f"{bounds.latency_cliff['estimate_ms']:.2f} ms" if bounds else "—"),
            })
    return rows


def all_columns_rows(report: Report | Mapping) -> list[dict]:
    """overview_rows with every column for every target, as text: a blank is "—" (a column with a gap would
    otherwise turn its counts into floats in a table), the evidence last."""
    rows = overview_rows(report)
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in ("error", "evidence")] + ["evidence"]
    return [{c: str(r[c]) if r.get(c) is not None else "—" for c in columns} for r in rows]


def worst_drift_cell(t: TargetBlock | Mapping) -> str:
    """A target's worst drift in one cell: rel L2 and output, what it was measured against when that is the
    route's program, and why the figure says nothing (not informative) or cannot be right (implausible)."""
    from ..analysis.drift import ROUTE_REFERENCE
    t = as_target(t)
    d = t.drift
    worst = d.worst or {}
    if d.failed:
        return "emulation failed (xc's)"
    if t.info.numerics_not_run:
        return "not run here"
    if not worst:
        return "—"
    if worst.get("error"):
        return worst["error"]
    not_informative, bad = _output_flags(d.outputs.get(worst.get("output")), worst)
    where = worst.get("output") + ("; vs the route's program" if d.reference == ROUTE_REFERENCE else "")
    if bad:
        return f"{fmt_sci(worst.get('rel_l2'))} ({where}) — implausible"
    if not_informative:
        return f"not informative ({where}: {_reference_is(not_informative)})"
    return f"{fmt_sci(worst.get('rel_l2'))} ({where})"


def _output_flags(m: DriftOutput | None, over: Mapping | None = None) -> tuple[str | None, str | None]:
    """analysis.drift.output_flags of one output's figures, with `over` laid on them (a target's worst-output
    figures); it reads them as report.json holds them, so the older-report rule stays in one place."""
    from ..analysis.drift import output_flags
    return output_flags({**(m.to_dict() if m else {}), **(over or {})})


def _reference_is(why: str) -> str:
    """"the reference output is all zeros" as "reference all zeros", for a table cell."""
    return "reference " + why.removeprefix("the reference output ").removeprefix("is ")


def drift_output_rows(t: TargetBlock | Mapping) -> list[dict]:
    """A target's drift, one row per output: the metrics as text, or why it has none; a `check` column when a
    figure is not informative (its reference is constant) or implausible, with the check that failed."""
    return _drift_rows(as_target(t).drift.outputs)


def _drift_rows(outputs: Mapping[str, DriftOutput]) -> list[dict]:
    rows = []
    for name, m in outputs.items():
        if m.error is not None:
            rows.append({"output": name, "error": m.error})
            continue
        not_informative, bad = _output_flags(m)
        rows.append({"output": name, "max abs": fmt_sci(m.max_abs), "mean abs": fmt_sci(m.mean_abs),
                     "rel L2": fmt_sci(m.rel_l2),
                     "cosine": f"{m.cosine:.6f}" if m.cosine is not None else "—",
                     # SNR is null when the target is exact (infinite) or the reference all zeros (undefined)
                     "SNR dB": f"{m.snr_db:.1f}" if m.snr_db is not None else "—" if not_informative else "∞",
                     "min atol": fmt_sci(m.min_atol), "min rtol": fmt_sci(m.min_rtol)})
        if bad or not_informative:
            rows[-1]["check"] = f"implausible: {bad}" if bad else f"not informative: {not_informative}"
    return rows


def _says(block, key: str) -> bool:
    """Whether the report wrote `key` in this block, where an absent key means something else than its empty
    value (a report of an older xc that did not record it). A block made in code writes every field."""
    return block.key_order is None or key in block.key_order


def _route_departure(route: RouteBlock) -> Mapping | None:
    """Where the route departs from ONNX Runtime: as the report says, or by the route's own test for a report
    written before it said (analysis.checklist.route_departure reads the route as report.json holds it)."""
    if _says(route, "departure"):
        return route.departure
    from ..analysis.checklist import route_departure
    return route_departure(route.to_dict())


def _conversion_outputs(route: RouteBlock) -> dict[str, DriftOutput]:
    """The route's conversion drift read as drift outputs: it holds a drift output's figures per output
    (ConversionDrift types only what the route adds, whether shape and dtype match ONNX Runtime's)."""
    return {name: DriftOutput.from_dict(m.to_dict()) for name, m in route.conversion_drift.items()}


def route_headline(report: Report | Mapping) -> str | None:
    """The ONNX → PyTorch route in one line, said first and once on every surface: whether xc's conversion
    departs from ONNX Runtime (where, and at which ONNX node first), as xc's error; and that the targets that
    compile its program are measured against it. None without a route."""
    from ..analysis.checklist import departure_words
    from ..analysis.drift import ROUTE_REFERENCE
    report = as_report(report)
    route = report.capture.onnx_route
    if not route:
        return None
    names = route.targets
    targets = ", ".join(names) or "none"
    if route.error:
        return f"The ONNX could not be made a PyTorch program, so {targets} did not compile it: {route.error}"
    if route.skipped:
        why = route.skipped["why"].removeprefix("skipped: ")
        return f"The ONNX was not made a PyTorch program, so {targets} did not compile it: {why}."
    departure = _route_departure(route)
    against = [tid for tid in names if tid in report.targets and report.targets[tid].drift.reference
               == ROUTE_REFERENCE]
    drifts = [m.rel_l2 for m in _conversion_outputs(route).values() if m.rel_l2 is not None]
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


def route_departs(report: Report | Mapping) -> bool:
    """Whether the report's ONNX → PyTorch route failed or departs from ONNX Runtime (a warning, not a note)."""
    route = as_report(report).capture.onnx_route
    if not route:
        return False
    return bool(route.error or _route_departure(route))


def onnx_route_lines(report: Report | Mapping) -> list[str]:
    """An ONNX source's ONNX → PyTorch route in plain sentences (empty when there was none): `route_headline`
    first, then the program, whether it is a float model, and the inputs it does not read."""
    report = as_report(report)
    route = report.capture.onnx_route
    if not route:
        return []
    lines = [route_headline(report)]
    if route.error or route.skipped:
        return lines
    nodes = "?" if route.program_nodes is None else route.program_nodes
    lines.append(f"{route.route}: {nodes} ops in {route.seconds or 0:.1f} s; its outputs are compared with ONNX "
                 "Runtime's (optimizations off), output by output.")
    first = route.first_departure or {}
    if first.get("compared") is not None:
        found = (f"the first to depart is '{first['node']}' ({first.get('op_type')}), output '{first.get('output')}'"
                 if first.get("node") else first.get("note") or "none departs")
        lines.append(f"Node by node against ONNX Runtime ({first['compared']} node output(s) compared): {found}.")
    elif first.get("error"):
        lines.append(f"Node by node against ONNX Runtime: {first['error']}.")
    if route.float_model:
        lines.append(route.float_model[0].upper() + route.float_model[1:] + ".")
    resolved = report.inputs.resolution.get("inputs") or {}
    unread = [name for name in resolved if _says(route, "program_inputs") and name not in route.program_inputs]
    if unread:
        lines.append(f"The program takes no {', '.join(unread)}: once the route fixed its conditions, nothing it "
                     f"computes reads {'it' if len(unread) == 1 else 'them'}.")
    return lines


def onnx_route_rows(report: Report | Mapping) -> list[dict]:
    """The ONNX → PyTorch conversion's own drift, one row per output (as `drift_output_rows`), with whether its
    shape and dtype match ONNX Runtime's where the route compared them."""
    route = as_report(report).capture.onnx_route
    rows = _drift_rows(_conversion_outputs(route))
    for row, m in zip(rows, route.conversion_drift.values()):
        for key in ("shape", "dtype"):
            if _says(m, f"{key}_match"):
                # shapes as the report lists them ("[1, 8]"): the values the route wrote, not typed
                row[key] = "same" if getattr(m, f"{key}_match") else \
                    f"{m.extra.get(key)} vs ONNX Runtime's {m.extra.get('reference_' + key)}"
        if "dtype" in row and m.extra.get("note"):      # integer values held in float32: the same numbers
            row["dtype"] += f" ({m.extra['note']})"
    return rows


def drift_flags(report: Report | Mapping) -> list[str]:
    """What makes drift figures say nothing or cannot be right, said before any of them: a reference output that
    is constant, all zeros or not finite ("drift is not informative"), and a target figure beyond any plausible
    range (with the check that failed). Empty when every comparison can tell."""
    report = as_report(report)
    lines, said = [], set()
    for name, o in report.reference.outputs.items():
        if o.not_informative:
            said.add(name)
            lines.append(f"Drift is not informative: {o.not_informative} (output '{name}') — every target that "
                         "outputs the same agrees with it, right or wrong (if the model should vary here, analyse "
                         "with other inputs).")
    for tid, t in report.targets.items():
        d = t.drift
        for name, m in d.outputs.items():
            not_informative, bad = _output_flags(m)
            if not_informative and name not in said:
                lines.append(f"Drift of {tid} is not informative: {not_informative} (output '{name}', "
                             f"{d.reference}).")
            if bad:
                lines.append(f"{tid}'s drift on '{name}' is implausible: {bad} — a broken run or read-back, not "
                             "rounding; the target ran, but its numbers do not hold.")
    return lines


def run_status(report: Report | Mapping) -> tuple[str, str]:
    """(label, state) for the analysis status box: never "compiled" when nothing compiled, and the likely cause."""
    report = as_report(report)
    targets = report.targets.values()
    ok = sum(t.status == "ok" for t in targets)
    failed = sum(t.status == "error" for t in targets)
    unavailable = sum(t.status == "unavailable" for t in targets)
    ref = report.reference
    counts = f"{ok} ok, {failed} failed" + (f", {unavailable} unavailable" if unavailable else "")
    if ref.status == "error":
        # "Set the inputs" only when the reference's failure is about them (analysis.common_cause
        # set_inputs_advised); otherwise what it says is the cause.
        set_inputs = any(c.reference_failed and c.set_inputs for c in report.common_causes)
        return ((f"The reference itself failed with the inputs xc picked ({counts}) — set the input shapes or "
                 "values", "error") if set_inputs else
                (f"The reference itself failed with the inputs xc picked ({counts}): "
                 f"{short_reason(ref.error, 120)}", "error"))
    if ok == 0 and failed:
        return f"No target compiled: {counts} — {_likely_cause(report)}", "error"
    return f"Compiled: {counts}", "complete"


def _likely_cause(report: Report) -> str:
    """What the failures share: every target failing when it runs points at the inputs; one message everywhere
    points at the model; otherwise each target's own error is the thing to read."""
    failed = [t for t in report.targets.values() if t.status == "error"]
    stages = {t.error_stage for t in failed}
    messages = {(t.error or "").split(": ", 1)[-1] for t in failed}
    if stages == {"run"}:
        return "every target failed when it ran, so the inputs likely do not fit the model: set the input shapes"
    if len(messages) == 1:
        return f"each says: {messages.pop()}"
    return "each target's error is on the Overview"


def input_rows(report: Report | Mapping) -> list[dict]:
    """Per input: the shape that ran, in the model's dim names, and where its shape and values came from."""
    report = as_report(report)
    per_input = report.inputs.resolution.get("inputs") or {}
    rows = []
    for i in report.source.inputs:
        names = i.dim_names
        dims = [f"{names[a]}={d}" if a < len(names) and names[a] else str(d) for a, d in enumerate(i.shape)]
        rec = per_input.get(i.name, {})
        values = rec.get("values_from") or report.inputs.origin
        if i.low is not None and values == "seeded-random":
            values += f", integers in [{i.low:g}, {i.high:g})"
        rows.append({"input": i.name, "shape": "[" + ", ".join(dims) + "]", "dtype": i.dtype,
                     "shape from": rec.get("shape_from", "declared"), "values from": values,
                     "note": i.note or ""})
    return rows


def probe_rows(report: Report | Mapping) -> list[dict]:
    return [{"tried": p["dims"], "result": "ran" if p["ok"] else f"failed: {p['error']}"}
            for p in as_report(report).inputs.resolution.get("probes") or []]


def coreml_targets(report: Report | Mapping) -> list[str]:
    return [tid for tid, t in as_report(report).targets.items() if t.info.compute_units_predicted]


def coreml_op_rows(report: Report | Mapping, tid: str) -> list[dict]:
    """Every MIL op of a Core ML target: predicted unit, reason, the rule's source, passes, provenance."""
    rows = []
    for n in as_report(report).targets[tid].graph.nodes:
        if n.kind == "constant":
            continue
        a = n.attributes
        # Core ML through ExecuTorch: the node's backend is the delegate, the unit its rule table's prediction.
        unit = a.get("predicted_unit") or n.backend or "—"
        rows.append({"op": n.id, "op_type": n.op_type, "unit": unit,
                     "reason": a.get("unit_reason") or n.kernel or "—", "source": a.get("unit_source") or "—",
                     "precision": n.precision or "—", "passes": ", ".join(a.get("passes") or []),
                     "module_path": n.module_path if n.module_path is not None else "—",
                     "source ops": ", ".join(n.source_ops), "location": n.source_location or "—"})
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


def checklist_grid(report: Report | Mapping) -> list[dict]:
    """A row per target, a column per question ("(2) CPU fallback"), each cell its verdict with its symbol."""
    from ..analysis.checklist import SHORT_QUESTION
    out = []
    for tid, items in as_report(report).checklist.targets.items():
        row = {"target": tid}
        for i in items:
            row[f"({i.id}) {SHORT_QUESTION.get(i.id, '')}".strip()] = verdict_text(i.verdict)
        out.append(row)
    return out


def checklist_tally(report: Report | Mapping, tid: str) -> str:
    """A target's checklist in one cell, worst first: "✗ 1 FAIL · ⚠ 2 warn", "✓ pass", or "– n/a" when nothing
    could be judged (a target that did not compile). It starts with the worst verdict's symbol (its colour)."""
    verdicts = [i.verdict for i in as_report(report).checklist.targets.get(tid, ())]
    counts = [f"{verdict_glyph(v)} {verdicts.count(v)} {verdict_text(v).split(' ', 1)[1]}" for v in ("fail", "warn")
              if v in verdicts]
    if counts:
        return " · ".join(counts)
    return verdict_text("pass" if "pass" in verdicts else "not applicable")


def verdict_line(report: Report | Mapping, tid: str) -> str:
    """A target's checklist in one line, each finding after its verdict's tag: "✗ FAIL 3 ops fall back to the CPU ·
    ✓ pass outputs match". Passing questions are left out, except the outputs (the line's bottom line) and, on an
    accelerated target, that nothing falls back; a target that failed says why instead (even one whose graph was
    read back before its run failed: no verdict on fallbacks as if it had run), or "not run: see above" when a
    cause common to several targets, said once above, stopped it."""
    from ..analysis.common_cause import NOT_RUN
    report = as_report(report)
    t = report.targets[tid]
    if t.status == "error":
        return NOT_RUN if tid in report.covered_targets() else f"{t.status}: {short_reason(t.error, 80)}"
    if not t.graph:
        return f"{verdict_symbol('not applicable')} {t.status if t.status != 'ok' else 'no graph'}: " \
               f"{short_reason(t.error, 80)}"
    items = {i.id: i.verdict for i in report.checklist.targets.get(tid, ())}
    parts = []
    for qid in sorted(items):
        phrase = _finding(report, tid, qid, items[qid])
        if phrase:
            parts.append(f"{verdict_symbol(items[qid])} {phrase}")
    return " · ".join(parts) or "no checklist"


def _finding(report: Report, tid: str, qid: int, verdict: str) -> str | None:
    """A few words on one question's verdict, from the report's own numbers (None: not worth a place)."""
    t = report.targets[tid]
    if qid == 4:
        worst = t.drift.worst or {}
        rel = f" (rel L2 {fmt_sci(worst['rel_l2'])})" if worst.get("rel_l2") is not None else ""
        if verdict == "not applicable" and t.info.numerics_not_run:
            return "not run here"
        not_informative, bad = _output_flags(None, worst)
        if bad or (not_informative and verdict == "warn"):
            return "implausible drift figures" if bad else f"drift not informative: {_reference_is(not_informative)}"
        return {"pass": "outputs match", "warn": "outputs drift" + rel,
                "fail": "outputs differ" + rel if rel else "outputs could not be compared"}.get(
                    verdict, "outputs not compared")
    if verdict == "not applicable" or (verdict == "pass" and qid != 2):
        return None
    if qid == 1:
        unknown = sum(1 for n in t.graph.compute_nodes() if n.backend in (None, "unknown"))
        if unknown:
            return f"{_ops(unknown)} without a device"
        return "devices predicted by xc's rules" if t.graph.evidence == "predicted-rules" \
            else "compilation report not read"
    if qid == 2:
        from .target_counts import fallback_count
        # Compiled ops on the CPU as the split counts them; a target the split does not know: its fallback flags.
        n = fallback_count(report, tid)
        if n is None:
            n = sum(1 for x in t.graph.nodes if x.fallback)
        return "nothing falls back to the CPU" if not n else f"{_ops(n)} fall{'s' if n == 1 else ''} back to the CPU"
    if qid == 3:
        n = len(catalogue_rows(report, [tid], only_failed=True))
        return f"{n} fusion(s) did not fire" if n else "no fusion"
    if qid == 5:
        mix = t.precision.mix
        lowered = [k for k in ("fp16", "bf16", "int8", "uint8") if mix.get(k)]
        return f"runs {'/'.join(lowered)}" if lowered else "precision differs"
    return None


def _ops(n: int) -> str:
    return f"{n} op" + ("" if n == 1 else "s")


def verdict_lines(report: Report | Mapping) -> list[tuple[str, str]]:
    """(target, its one-line verdict) for every target, in the report's order."""
    report = as_report(report)
    return [(tid, verdict_line(report, tid)) for tid in report.targets]


# ---- heat map ---------------------------------------------------------------------------------------------
# The side a graph falls back from: an accelerator, or a delegate that takes ops off the runtime's own CPU kernels
# (ExecuTorch's XNNPACK delegate runs on the CPU, but an op outside it is a fallback all the same).
ACCELERATORS = {"nnapi", "coreml", "ane", "gpu", "npu", "xnnpack", "vulkan", "ethos-u"}
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


def not_compiled(report: Report | Mapping) -> dict[str, str]:
    """Targets that came back without a graph (an error, or unavailable here), each with its status and the start
    of its reason ("error: killed by SIGSEGV in compile"): per-target grids show them as a labelled empty column."""
    return {tid: f"{t.status if t.status != 'ok' else 'no graph'}: {short_reason(t.error)}"
            for tid, t in as_report(report).targets.items() if not t.graph}


def not_compiled_coreml(report: Report | Mapping) -> dict[str, str]:
    """not_compiled, for the Core ML targets (the Core ML page's)."""
    report = as_report(report)
    return {tid: why for tid, why in not_compiled(report).items()
            if (report.targets[tid].id or tid).startswith("coreml-")}


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


def module_depth(report: Report | Mapping) -> int:
    """Levels where the module hierarchy branches, down to its deepest module (the heat map's largest depth)."""
    paths = {r["module_path"] or "" for r in as_report(report).alignment.source_ops or []}
    deepest = 1
    for d in range(1, 1 + max((p.count(".") + 1 for p in paths if p), default=0)):
        deepest = d
        # Each branching level splits some row in two or more; past the last, the rows stay the same.
        if len(set(module_rows(paths, d).values())) == len(set(module_rows(paths, d + 1).values())):
            break
    return deepest


def heatmap_rows(report: Report | Mapping, by_module: bool = True,
                 depth: int = 2) -> tuple[list[str], list[str], list[list]]:
    """Rows (modules `depth` branching levels deep — see module_rows —, or source ops), columns (every target),
    cells {category, hover, us} for the heat map (us: the time of the compiled nodes the row owns — measured, or
    the compiler's estimate where the target's node_times says so). A module's cell is its worst op: a CPU
    fallback anywhere in it shows, then the most common category. A target without a graph keeps its column, every cell's category None (an empty
    column; not_compiled labels it)."""
    report = as_report(report)
    rows = report.alignment.source_ops or []
    targets = list(report.targets)
    missing = not_compiled(report)
    keys = module_rows([r["module_path"] or "" for r in rows], depth) if by_module else {}
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if by_module:
            key = keys[r["module_path"] or ""]
        else:
            key = f"{r['source_op']} · {r['op_type']}" + (f" · {r['module_path']}" if r["module_path"] else "")
        groups.setdefault(key, []).append(r)
    # Time per cell: each compiled node's time counts once, in the first row (execution order) that carries it; a
    # node fused across rows is said in the hover of the row that has it. The time is measured, or a compiler's
    # estimate where the target's node_times says estimated-compiler (one kind per target, so a cell never mixes).
    node_us = {tid: {n.id: n.time_us for n in report.targets[tid].graph.nodes}
               for tid in targets if tid not in missing}
    time_label = {tid: ("measured" if not is_estimated(report.targets[tid].node_times)
                        else f"{ESTIMATED_COMPILER}: the compiler's estimate, nothing ran") for tid in node_us}
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
            # The commonest category; a tie goes to the first op's (a set's order changed with the hash seed, so
            # one cell read "CPU" in one process and "CPU (fused)" in the next).
            cat = "CPU fallback" if "CPU fallback" in cats else max(dict.fromkeys(cats), key=cats.count)
            reasons = sorted({m["targets"][tid].get("fallback_reason") for m in members
                              if m["targets"].get(tid, {}).get("fallback_reason")})
            ev = report.targets[tid].graph.evidence
            # plotly renders a subset of HTML in hover text (links included): the model's names go in escaped
            hover = (plotly_text(f"{key} on {tid}: {cat} ({len(members)} op(s): " + ", ".join(sorted(set(cats))) + ")")
                     + (f"<br>reason: {plotly_text('; '.join(reasons))}" if reasons else "")
                     + f"<br>evidence: {plotly_text(ev)}")
            if us is not None:
                hover += f"<br>time: {us:,.1f} µs ({len(times)} node(s) timed, {time_label[tid]})"
            line.append({"category": cat, "hover": hover, "us": us})
        cells.append(line)
    return labels, targets, cells


# ---- precision ----------------------------------------------------------------------------------------------
def precision_rows(report: Report | Mapping, only_differing: bool = False) -> list[dict]:
    report = as_report(report)
    rows = []
    for r in report.alignment.source_ops or []:
        row = {"source op": r["source_op"], "op_type": r["op_type"],
               "module_path": r["module_path"] if r["module_path"] is not None else "—"}
        precs = set()
        for tid, cell in r["targets"].items():
            p = cell.get("precision") if cell["status"] != "absent" else None
            row[tid] = p or "—"
            if p and p in ("fp32", "fp16", "bf16", "int8", "uint8"):
                precs.add(p)
        row["differs"] = len(precs) > 1
        if report.reference.id:
            row["reference"] = "fp32"
        if not only_differing or row["differs"]:
            rows.append(row)
    return rows


OUTCOME_ORDER = {"blocked": 0, "missed": 1, "superseded": 2, "fired": 3}


def catalogue_rows(report: Report | Mapping, targets: list[str] | None = None, *,
                   only_failed: bool = False) -> list[dict]:
    """Each target's catalogued fusion opportunities (fusions its own compiler implements) and how each ended:
    blocked and missed first, as question 3 of the checklist reads them."""
    report = as_report(report)
    rows = []
    for tid in targets or list(report.targets):
        for o in report.targets[tid].fusions.catalogue.opportunities:
            if only_failed and o.outcome not in ("blocked", "missed"):
                continue
            rows.append({"target": tid, "fusion": o.fusion, "outcome": o.outcome,
                         "reason": o.reason or "—", "ops": "→".join(o.op_types),
                         "first node": o.nodes[0], "module_path": o.module_path or "—"})
    return sorted(rows, key=lambda r: (OUTCOME_ORDER.get(r["outcome"], 9), r["target"]))


def catalogue_entries(report: Report | Mapping, tid: str) -> list[dict]:
    return [{"fusion": e["fusion"], "pattern": e["pattern"], "source": e["source"]}
            for e in as_report(report).targets[tid].fusions.catalogue.entries or []]


def fmt_count(x) -> str:
    """Counts are integers everywhere ("4", never "4.0"); a missing count is "—"."""
    return "—" if x is None else str(int(x))


def target_summary_rows(report: Report | Mapping) -> list[dict]:
    """The Overview / Markdown target table: eight short columns (a failed target's status is in its first cell;
    the Markdown leaves out the checklist tally, which has its own table there). The rest of overview_rows
    (partitions, ORT's verdict, the runtime's own count, the latency-cliff estimate, casts, MIL op counts, every
    evidence key) is one click away."""
    from ..analysis.common_cause import NOT_RUN
    from .compute_share import WEIGHTED_COLUMN
    from .target_counts import SPLIT_COLUMN
    report = as_report(report)
    covered = report.covered_targets()
    out = []
    for row in overview_rows(report):
        ev = report.targets[row["target"]].evidence
        # An accelerated target's split of its compiled ops, worded as on every page (target_counts.split_counts);
        # a Core ML target that runs on the CPU anyway: its predicted compute units.
        accel = row.get(SPLIT_COLUMN) or row.get("Core ML units") or "—"
        if row.get(WEIGHTED_COLUMN):    # beside the count, what it weighs: by MACs and by time
            accel += f" · by compute: {row[WEIGHTED_COLUMN]}"
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


def default_pairs(report: Report | Mapping, limit: int = 3) -> list[tuple[str, str]]:
    """Variants of one target first (what a flag changed is what their user asked), then targets shipped
    together (each target declares whom it ships with: `shipped_with`). Only targets that ran: a failed one's
    graph is no verdict on what it would have done."""
    from ..targets import shipped_together
    ok = [tid for tid, t in as_report(report).targets.items() if t.graph and t.status != "error"]
    base = {tid: tid.split("[", 1)[0] for tid in ok}
    variants = [(a, b) for i, a in enumerate(ok) for b in ok[i + 1:] if base[a] == base[b]]
    # Each pair in the report's target order, as the Overview lists every pair (itertools.combinations).
    pos = {tid: i for i, tid in enumerate(ok)}
    pairs = variants + [tuple(sorted(p, key=pos.get)) for p in shipped_together() if p[0] in ok and p[1] in ok]
    if not pairs and len(ok) >= 2:
        pairs = [(ok[0], ok[1])]
    return pairs[:limit]


def pair_sentence(report: Report | Mapping, a: str, b: str) -> str:
    """One sentence on what differs between two targets a user ships together: the source ops that fall back to the
    CPU on one and not the other (counted by source op, as the heat map rows are: one source op may be several
    compiled ops), how much each fused (when that differs), then each one's worst drift and its cause."""
    report = as_report(report)
    rows = report.alignment.source_ops or []

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
    fused = {x: (t.fusions.count if t.fusions else None, t.op_count_after)
             for x, t in ((a, report.targets[a]), (b, report.targets[b]))}
    if fused[a] != fused[b] and None not in (fused[a][0], fused[b][0]):
        parts.append(f"{a} fuses {fused[a][0]} group(s) into {fused[a][1]} compiled ops, {b} {fused[b][0]} into "
                     f"{fused[b][1]}")
    drift = "; ".join(_drift_phrase(report, x) for x in (a, b))
    return f"{a} vs {b}: " + "; ".join(parts) + f". Drift: {drift}."


def _neural_engine_phrases(report: Report, a: str, b: str) -> list[str]:
    """Source ops one target keeps wholly on the Neural Engine and the other does not (Core ML vs Core AI: a
    source op may become several ops, and it stays on the ANE only if all of them do). Said only when both
    targets assign ops to the ANE at all."""
    def split(tid):
        on, off = set(), set()
        for n in report.targets[tid].graph.nodes:
            if n.kind in ("constant", "io", "cast"):
                continue
            for src in n.source_ops:
                (on if n.backend == "ane" else off).add(src)
        return on - off, on | off
    (ane_a, all_a), (ane_b, all_b) = split(a), split(b)
    if not ane_a or not ane_b:
        return []
    pos = {n.id: i for i, n in enumerate(report.capture.graph.nodes)}
    out = []
    for x, y, ane_x, ane_y, all_y in ((a, b, ane_a, ane_b, all_b), (b, a, ane_b, ane_a, all_a)):
        only = sorted((ane_x - ane_y) & all_y, key=lambda k: (pos.get(k, 1 << 30), k))
        if only:
            names = ", ".join(only[:3]) + (f" and {len(only) - 3} more" if len(only) > 3 else "")
            out.append(f"{len(only)} source op(s) wholly on the Neural Engine on {x}, not wholly (or not predictably) "
                       f"on {y}: {names}")
    kinds = {x: report.targets[x].evidence.get("assignment", "—") for x in (a, b)}
    out = out or ["the same source ops on the Neural Engine on both"]
    out[-1] += f" (devices: {a} {kinds[a]}, {b} {kinds[b]})"
    return out


def _drift_phrase(report: Report, tid: str) -> str:
    t = report.targets[tid]
    d = t.drift
    if d.failed:
        return f"{tid} has no numbers (xc's emulation failed)"
    if t.info.numerics_not_run:
        return f"{tid} not run here"
    worst = d.worst or {}
    from ..analysis.drift import ROUTE_REFERENCE
    not_informative, bad = _output_flags(d.outputs.get(worst.get("output")), worst)
    if bad:
        return f"{tid} implausible on '{worst.get('output')}' ({bad})"
    if not_informative:
        return f"{tid} not informative on '{worst.get('output')}' ({not_informative})"
    if worst.get("rel_l2") is None:
        return f"{tid} not compared"
    against = " against the route's program" if d.reference == ROUTE_REFERENCE else ""
    mix = t.precision.mix
    lowered = [k for k in ("fp16", "bf16", "int8", "uint8") if mix.get(k)]
    cause = (f"{'/'.join(lowered)} compute" if lowered else "fp32 rounding only")
    part = t.info.partitioning
    if part and not part.extra.get("decided_by") and not lowered:      # ORT's mobile EPs, run on the CPU EP
        cause = "the CPU EP's numbers for its partitions; the device's own rounding is not predicted"
    return f"{tid} {fmt_sci(worst['rel_l2'])} on '{worst.get('output')}'{against} ({cause}; {d.evidence})"


# ------------------------------------------------------------------------------------------------ stages
def target_steps(t: TargetBlock | Mapping) -> list[dict]:
    """A target block's recorded steps as report.json holds them; [] for reports made before steps were recorded
    (their `stages` was a list of graphs, which the typed block keeps aside)."""
    return [s.to_dict() for s in as_target(t).stages.steps]


def stage_targets(report: Report | Mapping) -> list[str]:
    """Targets with recorded steps, in report order."""
    return [tid for tid, t in as_report(report).targets.items() if t.stages.steps]


def _stage_cell(steps: tuple[StageStep, ...], stage: str, previous_ops, precision: Mapping | None = None) -> str:
    """What one target did in one canonical stage, in a few words. Toolchains that run in levels (ORT,
    OpenVINO, Inductor) read "ops in → out"; pass pipelines whose passes interleave (coremltools) read the net
    change the passes of that kind made."""
    from ..lowering import BACKEND, FALLBACK, FUSION, IMPORT, KERNEL
    mine = [s for s in steps if s.stage == stage]
    if not mine:
        return "—"
    last = mine[-1]
    c = last.counts
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
    passes = [s for s in mine if "ops_before" in s.counts]
    if stage == IMPORT:
        counts = [s.op_count for s in mine if s.op_count is not None]
        parts.append(" → ".join(str(n) for n in dict.fromkeys(counts)) + " ops" if counts else "?")
    elif passes:
        ops = sum(s.op_count - s.counts["ops_before"] for s in passes)
        casts = sum(s.counts["casts"] - s.counts["casts_before"] for s in passes)
        parts.append(f"{len(passes)} pass(es): ops {ops:+d}" + (f", casts {casts:+d}" if casts else ""))
    elif previous_ops is not None and last.op_count is not None:
        parts.append(f"{previous_ops} → {last.op_count} ops")
    if c.get("fused_nodes") and stage != KERNEL and not passes:
        parts.append(f"{c['fused_nodes']} fused nodes")
    if stage == KERNEL:
        if c.get("reorders"):
            parts.append(f"{c['reorders']} reorders")
        if c.get("casts") and not passes:
            parts.append(f"{c['casts']} casts")
        if last.graph == "final" and precision:
            parts.append(" · ".join(f"{p} ×{n}" for p, n in sorted(precision.items(), key=lambda kv: -kv[1])[:3]))
    elif stage != FUSION and c.get("casts") and not passes:
        parts.append(f"{c['casts']} casts")
    return " · ".join(parts)


def stage_matrix(report: Report | Mapping) -> list[dict]:
    """Rows: the six canonical stages; columns: targets; each cell a short count of what happened there."""
    from ..lowering import STAGE_TITLES, STAGES
    report = as_report(report)
    targets = stage_targets(report)
    if not targets:
        return []
    rows = []
    previous = {tid: None for tid in targets}
    for stage in STAGES:
        row = {"stage": STAGE_TITLES[stage]}
        for tid in targets:
            t = report.targets[tid]
            steps = t.stages.steps
            row[tid] = _stage_cell(steps, stage, previous[tid], t.precision.mix)
            counts = [s.op_count for s in steps if s.stage == stage and s.op_count is not None]
            if counts and stage not in ("backend-selection", "fallback-insertion"):
                previous[tid] = counts[-1]
        rows.append(row)
    return rows


def step_rows(report: Report | Mapping, tid: str) -> list[dict]:
    """Every recorded step of one target, in the order its toolchain ran them."""
    from ..lowering import STAGE_TITLES
    out = []
    for i, s in enumerate(as_report(report).targets[tid].stages.steps):
        extra = {k: v for k, v in s.counts.items() if k not in ("ops_before", "casts_before", "pass_index", "backends")}
        out.append({"#": i + 1, "stage": STAGE_TITLES.get(s.stage, s.stage), "step": s.name,
                    "ops": fmt_count(s.op_count),
                    "details": ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in extra.items()
                                         if v not in (None, 0, {}))
                    + (" · " + s.note if s.note else ""),
                    "graph": "compiled graph" if s.graph == "final" else ("kept" if s.graph else "—")})
    return out


def stage_graph_choices(report: Report | Mapping) -> list[tuple[str, int, str]]:
    """(target, step index, label) of every step whose graph is kept beside the report (not the final graph,
    which every page already shows)."""
    from ..lowering import STAGE_TITLES
    report = as_report(report)
    out = []
    for tid in stage_targets(report):
        for i, s in enumerate(report.targets[tid].stages.steps):
            if s.graph and s.graph != "final":
                out.append((tid, i, f"{tid} · {STAGE_TITLES.get(s.ends_stage or s.stage)} · {s.name}"))
    return out


def with_stage_graphs(report: Report | Mapping, stage_graphs: dict, picks: list[tuple[str, int, str]]) -> dict:
    """A shallow copy of the report (as report.json holds it) where each picked step graph is one more target
    (named by its label), with its own alignment cells, so every graph view draws and aligns it like a compiled
    graph."""
    from ..analysis.alignment import source_op_table
    from ..ir import Graph
    typed = as_report(report)
    # The copy is of the report dict the caller holds (written out only when handed a Report).
    out = dict(report) if isinstance(report, Mapping) else typed.to_dict()
    targets = dict(out["targets"])
    graphs = {}
    for tid, i, label in picks:
        t = typed.targets[tid]
        step = t.stages.steps[i]
        gd = stage_graphs.get(step.graph)
        if gd is None:
            continue
        ev = t.stages.evidence.get("steps")
        targets[label] = {"id": t.id, "identity": label, "status": "ok",
                          "label": f"{t.label or tid} — {step.name}",
                          "graph": {**gd, "evidence": ev}, "fusions": None, "evidence": {"assignment": ev},
                          "stage_of": tid}
        graphs[label] = Graph.from_dict(gd)
    out["targets"] = targets
    if graphs and typed.capture.graph:
        extra = {r["source_op"]: r["targets"] for r in
                 source_op_table(Graph.from_dict(out["capture"]["graph"]), graphs)}
        al = typed.alignment.to_dict() if typed.alignment else {}
        al["source_ops"] = [{**r, "targets": {**r["targets"], **extra.get(r["source_op"], {})}}
                            for r in (typed.alignment.source_ops or [])]
        out["alignment"] = al
    return out


def _divergence_across(report: Report) -> list[dict]:
    """Per source op, the first stage at which the targets' signatures differ and how they split there (reports
    of the previous stop stored these rows; they are computed from the signatures now)."""
    from ..analysis.stage_trace import first_divergence
    div = report.divergence
    if "rows" in div:
        return div["rows"] or []
    sigs = div.get("signatures") or {}
    return first_divergence(sigs, div.get("ops") or []) if len(sigs) > 1 else []


def divergence_counts(report: Report | Mapping) -> dict[str, int]:
    """How many source ops first part ways at each stage (across every target with steps)."""
    from ..lowering import STAGE_TITLES, STAGES
    rows = _divergence_across(as_report(report))
    counts = {STAGE_TITLES[s]: 0 for s in STAGES}
    counts["never"] = 0
    for r in rows:
        counts[STAGE_TITLES[r["first_stage"]] if r["first_stage"] else "never"] += 1
    return counts


def divergence_rows(report: Report | Mapping, a: str | None = None, b: str | None = None,
                    only_diverging: bool = True) -> list[dict]:
    """Per source op, the first stage at which targets part ways: across every target (a, b None) — with how
    they split there — or between two targets, with both sides."""
    from ..analysis.stage_trace import pair_divergence
    from ..lowering import STAGE_TITLES
    report = as_report(report)
    div = report.divergence
    index = {r["source_op"]: r for r in report.alignment.source_ops or []}
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


def layout_summary_rows(report: Report | Mapping) -> list[dict]:
    """Per target: the layouts its compute nodes run in (where the runtime says), the reorders / transposes it
    inserted, the bytes they move and the NCHW↔NHWC (or blocked) transitions."""
    out = []
    for tid, t in as_report(report).targets.items():
        lay = t.layout
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


def layout_move_rows(report: Report | Mapping, tid: str) -> list[dict]:
    lay = as_report(report).targets[tid].layout
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

def artifact_groups(report: Report | Mapping, rels) -> list[dict]:
    """The run's files for the Downloads page, grouped: each target's artifacts (report order), then the captured
    model, the inputs and the rest. The reports are left out, and so is the model_explorer/ folder of a
    run stored before the export was made on demand (the page builds it as one zip, see model_explorer_command). Each group: {"group", "title", "parts": [(note, [{"rel",
    "label"}])]} — files without a note first, then one part per note in the order its target declares
    them (`artifact_notes`: what a file is, where its name alone does not say), so a note sits above the files it
    is about."""
    from ..export.model_explorer import MODEL_EXPLORER_DIR
    from ..report.sidecar import SIDECAR_FILES
    from ..targets import artifact_notes
    folder = MODEL_EXPLORER_DIR + "/"
    report = as_report(report)
    by_group: dict[str, list[str]] = {}
    for rel in sorted(rels):
        if rel in ("report.json", *SIDECAR_FILES) or rel.startswith(folder):
            continue
        parts = rel.split("/")
        group = parts[1] if parts[0] == "artifacts" and len(parts) > 2 else \
            {"inputs.npz": "inputs"}.get(parts[0], parts[0])
        by_group.setdefault(group, []).append(rel)
    targets = report.targets
    # A variant's folder is not its id ("openvino-cpu--precision-f32" for "openvino-cpu[precision=f32]"): the
    # report's artifact paths say whose folder is whose.
    owner = {a.split("/")[1]: tid for tid, t in targets.items() for a in t.artifacts
             if a.startswith("artifacts/") and a.count("/") >= 2}
    owner.update({tid: tid for tid in targets})
    rank = {tid: i for i, tid in enumerate(targets)}
    order = sorted(by_group, key=lambda g: (0, rank[owner[g]], g) if g in owner else (1, 0, g))
    out = []
    for g in order:
        tid = owner.get(g)
        t = targets.get(tid) or TargetBlock(null=True)     # the captured model, the inputs, the rest: no target
        notes = artifact_notes(t.id or str(tid))
        parts: dict[str, list[dict]] = {}
        for rel in by_group[g]:
            name = rel.rsplit("/", 1)[-1]
            parts.setdefault(notes.get(name, ""), []).append({"rel": rel, "label": name})
        title = f"{tid} — {t.label}" if t.label else (tid or g)
        note_rank = {note: i for i, note in enumerate(dict.fromkeys(notes.values()))}
        out.append({"group": g, "title": title, "count": len(by_group[g]),
                    "parts": sorted(parts.items(), key=lambda kv: note_rank.get(kv[0], -1))})
    return out


def model_explorer_command(report: Report | Mapping) -> str:
    """How to open model_explorer.zip: unzip it, then open two graphs in Model Explorer — the first pair the
    Overview compares, else the first target and the captured graph — the first with its backends coloured. ""
    when the export would hold no target graph. Computed from the file names the export gives, without building
    it."""
    from ..export.model_explorer import CAPTURED, MODEL_EXPLORER_DIR, export_plan, open_command
    report = as_report(report)      # once, for both readers below
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
def time_rows(report: Report | Mapping) -> list[dict]:
    """One row per target that timed its compiled nodes: how many, the timed total with its run-to-run spread
    (the interquartile range of the profiled runs' totals; "spread unknown" for a report of an older xc, which kept
    no per-run samples), its three costliest nodes and the share per backend, with the evidence and the CPU the
    times are from. Measured targets first, then those a compiler estimated (evidence estimated-compiler: no runs,
    no spread, the modelled device in place of the CPU), so the two kinds are never read as one ranking."""
    rows, estimated = [], []
    for tid, t in as_report(report).targets.items():
        nt = t.node_times
        if not nt.timed_us:
            continue
        top = ", ".join(f"{n['node']} ({n['op_type']}) {100 * n['share']:.0f}%" for n in nt.top[:3])
        row = {"target": tid,
               "nodes timed": f"{nt.compute_nodes_timed}/{nt.compute_nodes} compute",
               "timed µs": "",
               "costliest nodes": top,
               "per backend": ", ".join(f"{b['key']} {100 * b['share']:.0f}%" for b in nt.by_backend)}
        if is_estimated(nt):
            row["timed µs"] = f"{nt.timed_us:,.0f} (the compiler's estimate, no runs)"
            row["evidence"] = f"{nt.evidence} · {nt.host_cpu}"
            estimated.append(row)
            continue
        total = nt.spread.get("total_us") or {}
        # The sum of the nodes' medians is not the median of the runs' totals: both said, so they never look like
        # two answers to one question.
        spread = (f"the nodes' medians summed; the runs' totals: median {total['median']:,.0f}, IQR "
                  f"{total['q1']:,.0f}–{total['q3']:,.0f}" if "q1" in total else "spread unknown")
        row["timed µs"] = f"{nt.timed_us:,.0f} ({spread})"
        row["evidence"] = f"{nt.evidence} · {nt.runs} runs, median and interquartile range · {nt.host_cpu}"
        rows.append(row)
    return rows + estimated
