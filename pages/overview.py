"""Overview: first what the drift figures can tell (an ONNX upload's route and its own error against ONNX Runtime,
once; a reference that cannot tell targets apart; figures beyond any plausible range), then each target's checklist
in one line, then what differs between the targets a user ships
together (one sentence per pair), then one row per target in eight columns (target — with its status when it did
not compile —, checklist verdicts, ops source → compiled, fused groups, accelerator split, precision, worst drift,
evidence), with every other column one click away."""
import itertools
import json

import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.analysis.advice import advice_line
from xc_core.analysis.drift import ROUTE_REFERENCE
from xc_core.analysis.common_cause import ROUTE, cause_body, cause_head
from xc_core.views.figures import time_by_op_type_figure
from xc_core.views.isolation import culprit_entries, runs_words
from xc_core.views.target_counts import count_findings, run_counts, target_notes
from xc_core.views.rows import (
    all_columns_rows,
    colour_verdicts,
    default_pairs,
    drift_flags,
    drift_output_rows,
    input_rows,
    onnx_route_lines,
    onnx_route_rows,
    pair_sentence,
    probe_rows,
    route_departs,
    style_verdicts,
    target_summary_rows,
    time_rows,
    verdict_lines,
    verdict_text,
)
from xc_core.views.time_evidence import timed_targets_by_kind, vela_rows

report = _ui.require_report()
_ui.header(report, "Overview")

src = report.source
cap = report.capture
# Each metric says what it counts, so none reads as another's: targets that compiled and ran beside targets that fail
# a checklist question (a target can do both).
counts = run_counts(report)
c1, c2, c3, c4 = st.columns(4)
c1.metric("Source ops", cap.op_count_before if "op_count_before" in (cap.key_order or ()) else "—",
          help="compute ops of the captured graph; each target's compiled ops are in its row below")
c2.metric("Compiled and ran", f"{counts['ran']} of {counts['targets']}",
          help=f"targets that compiled and ran here; {counts['compiled_only']} more compiled but cannot run on this "
               f"host, {counts['failed']} failed, {counts['unavailable']} unavailable")
c3.metric("Checklist: targets failing", f"{counts['failing']} of {counts['targets']}",
          help=f"targets with at least one failing checklist question; {counts['warning']} more only warn")
c4.metric("Reference", report.reference.id if "id" in (report.reference.key_order or ()) else "—")

if cap.onnx_error:
    st.warning(f"**No ONNX**: {_ui.plain(cap.onnx_error)}. The targets that compile ONNX could not run; those "
               "that compile the ExportedProgram (Core ML, Inductor, ExecuTorch, Core AI, the torch reference) ran "
               "on their own.")

# Said before any target's figure: what the comparisons can and cannot tell. First, an ONNX upload's route — the
# program the PyTorch-side targets compiled, its own error against ONNX Runtime (xc's, never a target's), once;
# then a reference that cannot tell targets apart, and figures no compiler can produce.
route_lines = onnx_route_lines(report)
if route_lines:
    route = cap.onnx_route
    (st.warning if route_departs(report) else st.info)(
        f"**ONNX → PyTorch route** {_ui.evidence_badge(route.evidence)} " + _ui.plain(route_lines[0]))
# The report's common causes (computed once, by as_report, for a report written before it kept them), as the
# cause_* sentences of analysis/common_cause read them.
report_causes = [cause.to_dict() for cause in report.common_causes]
if route_lines and route.error:
    # What to do about the route's refusal (its owner and its cause are said in the box above).
    for cause in report.common_causes:
        if cause.owner == ROUTE:
            st.caption(f"What to do: {_ui.plain(cause.fix)}")
# Failures with one cause in the model or in what xc fed it: one block each, naming the cause, whose it is and the
# fix; the targets it stopped say "not run: see above" instead of blaming their toolchains one by one.
covered = {tid for cause in report.common_causes for tid in cause.targets}
for cause, cause_dict in zip(report.common_causes, report_causes):
    if cause.owner == ROUTE and route_lines:
        continue
    st.error(f"**{_ui.plain(cause_head(cause_dict))}** {_ui.evidence_badge(cause.evidence)}: "
             + _ui.plain(cause_body(cause_dict)))
    if cause.reference_failed:
        _ui.full_message(report.reference.error_detail)
for flag in drift_flags(report):
    st.warning(_ui.plain(flag))
if route_lines and not route.error and not route.skipped:
    with st.expander(f"ONNX → PyTorch route: one program for {', '.join(route.targets) or 'no target'}"):
        if route_lines[1:]:
            st.markdown(_ui.plain(" ".join(route_lines[1:])))
        rows = onnx_route_rows(report)
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        if route.preprocessing:
            st.caption("Prepared for the conversion: " + _ui.plain("; ".join(route.preprocessing)))

st.subheader("Each target in one line")
# Its checklist, summed up: the symbols and words of the Checklist page and the Markdown report.
st.markdown("  \n".join(f"**{_ui.plain(tid)}** {colour_verdicts(_ui.plain(line))}"
                        for tid, line in verdict_lines(report)))
fails = sum(item.verdict == "fail" for items in report.checklist.targets.values() for item in items)
if counts["failing"] or counts["warning"]:
    st.caption(f"Checklist: {counts['failing']} target(s) fail a question ({fails} failing answers in all), "
               f"{counts['warning']} more only warn — the Checklist page says which and why.")

culprits = culprit_entries(report)
if culprits:
    # Opt-in (the Drift page's button, `xc analyze --isolate`): the smallest run of ops that reproduces each
    # target's output drift, in one line each; the Drift page has the curves, the ops and the trials.
    st.subheader("Culprits")
    st.markdown("  \n".join(f"{_ui.evidence_badge(e['evidence'])} {_ui.plain(e['sentence'])} "
                             f"({_ui.plain(runs_words(e['runs']))})" for e in culprits))
    st.caption("Each op compiled by the target on its own, then ranges of ops on the target while the reference "
               "computes the rest: the Drift page shows the ops above the gate and every trial.")

# Task accuracy on the run's dataset (--data, the dataset upload, a sample's own): does the drift change answers?
# Up here, beside the verdicts: it is what a release decision reads first.
from pages import _accuracy_section  # noqa: E402
_accuracy_section.overview(report)

st.subheader("Where the targets you ship together differ")
compiled = [tid for tid, t in report.targets.items() if t.graph]
all_pairs = [f"{a} vs {b}" for a, b in itertools.combinations(compiled, 2)]
chosen = st.multiselect("Pairs", all_pairs, default=[f"{a} vs {b}" for a, b in default_pairs(report)],
                        key="overview_pairs", help="Targets you ship side by side: the sentences compare each pair's "
                                                   "CPU fallbacks (by source op) and drift, with its cause.")
for pair in chosen:
    a, b = pair.split(" vs ")
    st.markdown("- " + _ui.plain(pair_sentence(report, a, b)))
if not chosen:
    st.caption("Pick two targets you ship together to see what differs between them.")

st.subheader("Targets")
# A static table: eight columns of every target whole at 1280 px, long cells wrapped (a data grid cut them
# off). It renders Markdown: style_verdicts escapes every cell with _ui.plain.
st.table(style_verdicts(target_summary_rows(report), ["checklist"], nowrap=("target", "checklist", "ops"),
                       text=_ui.plain), hide_index=True)
st.caption(f"Checklist: how many of its questions fail and warn ({verdict_text('fail')}, {verdict_text('warn')}; "
           f"{verdict_text('pass')} when none does). "
           "Ops: compute ops of the captured (source) graph → of the target's compiled graph. "
           "Accelerator: the compiled ops on the accelerator and on the CPU, as xc's placement on the graph records "
           "them — unsupported (the delegate / EP cannot run them) or supported but outside the partition it takes; "
           "Core ML on the CPU: predicted compute units. Evidence: how the assignment · the numbers were obtained.",
           help=" · ".join(f"{k} — {v}" for k, v in _ui.EVIDENCE_HELP.items()))
# Where a runtime's own count and xc's placement disagree: one labelled finding per target, said here once.
for tid, finding in count_findings(report):
    st.warning(f"**{_ui.plain(tid)}** {_ui.plain(finding)}")
with st.expander("All columns"):
    st.dataframe(pd.DataFrame(all_columns_rows(report)), hide_index=True, width="stretch")

# What each target cost on this host: memory, size on disk, compile / load / inference time (views/cost.py).
from pages import _cost_section  # noqa: E402
_cost_section.overview(report)

time_table = time_rows(report)
if time_table:
    st.subheader("Where the time goes")
    fig = time_by_op_type_figure(report)
    if fig is not None:
        st.plotly_chart(fig, width="stretch", key="overview_time")
    st.dataframe(pd.DataFrame(time_table), hide_index=True, width="stretch")
    st.caption("Each compiled node's median time over the profiled runs, as its runtime's own profiler measured it "
               "on this host's CPU (not the device's): the shape of the profile — which ops dominate on which "
               "target — not the device's latency. The heat map's time colouring and the Topology's show it per "
               "module and per node."
               + (" The rows whose evidence is estimated-compiler (" + ", ".join(estimated_timed)
                  + ") are the compiler's estimate for its device instead — nothing ran — listed after the "
                  "measured ones and never comparable with them."
                  if (estimated_timed := timed_targets_by_kind(report)[1]) else ""))
    vela_table = vela_rows(report)
    if vela_table:
        with st.expander("Vela's estimate of each Ethos-U network (estimated-compiler)", expanded=True):
            st.dataframe(pd.DataFrame(vela_table), hide_index=True, width="stretch")
            st.caption("Arm's NPU compiler, Vela, on each delegate it compiled: its SRAM and flash use, cycles and "
                       "MACs by its own performance model, and how many of its layers it put on the NPU and left on "
                       "the CPU. Nothing ran on an NPU here.")

for tid, t in report.targets.items():
    if tid in covered:       # said once, in its cause's block above
        continue
    if t.status != "ok":
        box = st.error if t.status == "error" else st.info
        advice = advice_line(t.advice.to_dict())
        box(f"**{_ui.plain(tid)}** {t.status}: {_ui.plain(t.error or '')}"
            + (f"  \n{_ui.plain(advice)}" if advice else ""))
        _ui.full_message(t.error_detail)
    elif t.drift.failed:
        st.warning(f"**{tid}**: {_ui.plain(t.drift.failed)} — its partitions and fallbacks still stand; "
                   "only its numbers are missing (xc's emulation failed, not the model).")

st.subheader("Per target")
# One target at a time: seven collapsed sections cost the browser as much to draw as open ones.
if st.session_state.get("overview_target") not in report.targets:   # another report: its first target
    st.session_state.pop("overview_target", None)
tid = st.selectbox("Target", list(report.targets), key="overview_target",
                   format_func=lambda k: f"{k} — {report.targets[k].label} ({report.targets[k].status})")
t = report.targets[tid]
if t.status != "ok" and not t.graph:
    st.write(_ui.plain(t.error or ""))
else:
    left, right = st.columns(2)
    with left:
        fus = t.fusions
        st.markdown(f"**Fusion patterns** {_ui.evidence_badge(fus.evidence)}")
        if fus.patterns:
            st.dataframe(pd.DataFrame(fus.patterns), hide_index=True, width="stretch")
        else:
            st.write("No fusions.")
    with right:     # the short things beside the fusion patterns
        prec = t.precision
        st.markdown(f"**Precision mix** {_ui.evidence_badge(prec.evidence)}: "
                    + ", ".join(f"{k} × {v}" for k, v in prec.mix.items()))
        for note in target_notes(t):
            st.caption(f"Note: {_ui.plain(note)}")
        # The info block's scalar facts, in report.json's order (its typed blocks and lists are shown elsewhere).
        info = {k: v for k, v in (t.info.to_dict() or {}).items() if not isinstance(v, (list, dict))}
        if info:      # the compiler's settings as report.json names them: one hover away, not in the way
            st.caption(f"{len(info)} compiler setting(s) and read-back detail(s)",
                       help=" · ".join(f"{k}: {v}" for k, v in info.items()))
    # Full width: its eight columns, cut off in half the page ("min atol / mi…"), fit whole here.
    drift = t.drift
    st.markdown(f"**Drift vs {_ui.plain(drift.reference if 'reference' in (drift.key_order or ()) else 'reference')}** "
                f"{_ui.evidence_badge(drift.evidence)}")
    if drift.assumption:
        st.caption(f"Assumption: {_ui.plain(drift.assumption)}")
    if drift.reference == ROUTE_REFERENCE:
        st.caption("Against the outputs of the program xc's ONNX → PyTorch route made, which this target compiled: "
                   "the compiler's own drift. The conversion's own error is said once, at the top.")
    elif t.info.extra.get("onnx_conversion"):    # a report from before: the figure includes the route's
        st.caption("Includes the ONNX → PyTorch conversion (xc's route), whose own error is said at the top.")
    out_rows = drift_output_rows(t)
    if out_rows:
        st.dataframe(pd.DataFrame(out_rows), hide_index=True, width="stretch")
    elif t.info.numerics_not_run:
        st.info(f"No drift figures — {_ui.plain(t.info.numerics_not_run)}")
    else:
        st.write("No drift figures (the target did not run).")

st.subheader("Inputs")
st.dataframe(pd.DataFrame(input_rows(report)), hide_index=True, width="stretch")
st.caption(f"Input values: {_ui.plain(report.inputs.origin)}"
           + (f" (seed {report.inputs.extra.get('seed')})" if report.inputs.origin == "seeded-random" else "")
           + ". Change shapes, ranges and values in the Inputs panel in the sidebar.")
probes = probe_rows(report)
if probes:
    with st.expander(f"How the input sizes were picked ({len(probes)} tried on the reference)"):
        st.dataframe(pd.DataFrame(probes), hide_index=True, width="stretch")
for note in src.notes:
    st.caption(_ui.plain(note))

# Serialised when clicked, not on every run: a big model's whole report is tens of MB of JSON.
stored = _ui.stored_report(report)
st.download_button("Download report.json", lambda: json.dumps(stored, indent=1), file_name="report.json",
                   mime="application/json", key="download_report", on_click="ignore",
                   help="the whole report in one file (the per-node lists a big model keeps in report.nodes.json.gz "
                        "beside it included); the Downloads page has the run's files")
