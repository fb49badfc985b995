"""Numerical drift: per target and output, metrics with tolerance controls and pass/fail, error histogram,
reference-vs-target scatter, and per-layer drift along the depth of the network."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.analysis.drift import passes_at
from xc_core.analysis.drift_attribution import attribution_rows
from xc_core.analysis.layer_drift import VERIFICATION, unverified_rows
from xc_core.views.figures import (
    drift_histogram_figure,
    drift_scatter_figure,
    layer_drift_attribution_marks,
    layer_drift_figure,
    layer_drift_series,
)
from xc_core.analysis.drift import output_flags
from xc_core.views.rows import drift_flags, fmt_sci, route_departs, route_headline
from xc_core.views.isolation import (
    above_gate_rows,
    culprit_sentence,
    drifting_targets,
    gate_fields,
    gate_label,
    gates_from_fields,
    gates_sense_text,
    isolated_targets,
    isolation_figure,
    local_words,
    numeric_targets,
    runs_words,
    share_text,
    trial_rows,
)

report = _ui.require_report()
_ui.header(report, "Numerical drift")

# Before any figure: the ONNX → PyTorch route's own error (xc's, once), a reference that cannot tell targets apart,
# and figures no compiler can produce.
route_line = route_headline(report)
if route_line:
    (st.warning if route_departs(report) else st.info)(
        f"**ONNX → PyTorch route** {_ui.evidence_badge('measured')} {_ui.plain(route_line)}")
for flag in drift_flags(report):
    st.warning(_ui.plain(flag))

targets = [t for t, b in report.targets.items() if b.drift]
if not targets:
    st.info("No drift figures: " + ("this source has no reference (a compiled artifact)."
                                    if report.reference.null else "no target ran."))
    st.stop()

c1, c2 = st.columns(2)
atol = c1.number_input("atol", min_value=0.0, value=1e-3, format="%.1e", key="drift_atol")
rtol = c2.number_input("rtol", min_value=0.0, value=1e-3, format="%.1e", key="drift_rtol")

rows = []
for tid in targets:
    d = report.targets[tid].drift
    for name, m in d.outputs.items():
        if m.error is not None:
            rows.append({"target": tid, "output": name, "pass": "fail", "error": m.error, "evidence": d.evidence})
            continue
        ok = passes_at(m.details, atol, rtol) if m.details else False
        not_informative, bad = output_flags(m.to_dict())     # analysis/ reads the output as report.json holds it
        # A pass against a constant reference says nothing, and an implausible figure is no drift at all.
        verdict = "implausible" if bad else ("pass — not informative" if ok else "fail") if not_informative else \
            "pass" if ok else "fail"
        rows.append({"target": tid, "output": name, "against": d.reference or "—", "pass": verdict,
                     "max abs": fmt_sci(m.max_abs), "mean abs": fmt_sci(m.mean_abs),
                     "rel L2": fmt_sci(m.rel_l2),
                     "cosine": f"{m.cosine:.6f}" if m.cosine is not None else "—",
                     "SNR dB": f"{m.snr_db:.1f}" if m.snr_db is not None else "—" if not_informative
                     else "∞", "min atol": fmt_sci(m.min_atol), "min rtol": fmt_sci(m.min_rtol),
                     "check": (f"implausible: {bad}" if bad else f"not informative: {not_informative}"
                               if not_informative else ""),
                     "evidence": d.evidence})
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
st.caption("Pass: |target − reference| ≤ atol + rtol·|reference| everywhere (np.isclose). Against: what the "
           "outputs are compared with — the reference, or for a target that compiled the program xc's ONNX → PyTorch "
           "route made, that program's outputs (the compiler's own drift). min atol / min rtol: the smallest "
           "tolerance that passes with the other at 0 (as Polygraphy reports them). Assumptions: "
           + " · ".join(f"`{t}` {report.targets[t].drift.assumption}" for t in targets
                        if report.targets[t].drift.assumption))

st.subheader("Error distribution")
tid = st.selectbox("Target", targets, key="drift_target")
outputs = list(report.targets[tid].drift.outputs)
name = st.selectbox("Output", outputs, key="drift_output")
details = report.targets[tid].drift.outputs[name].details
if details:
    h = details["histogram"]
    left, right = st.columns(2)
    with left:
        fig = drift_histogram_figure(report, tid, name, atol)
        if fig is not None:
            st.plotly_chart(fig, width="stretch", key="drift_hist")
        st.caption(f"{h['exact']} element(s) exactly equal to the reference.")
    with right:
        sc = details["scatter"]
        fig = drift_scatter_figure(report, tid, name)
        if fig is not None:
            st.plotly_chart(fig, width="stretch", key="drift_scatter")
        st.caption(f"{sc['sampled']:,} of {sc['total']:,} elements (seeded sample).")

st.subheader("Per-layer drift")
layer = layer_drift_series(report)
# The targets it names, their blocks read as types here (and handed to analysis/ as report.json holds them).
layer_blocks = {t: report.targets[t].layer_drift for t in layer}
if not layer:
    st.info("No target exposed intermediate values for this model.")
else:
    st.plotly_chart(layer_drift_attribution_marks(layer_drift_figure(report), report), width="stretch",
                    key="drift_layers")
    rows = []
    for t, ld in layer_blocks.items():
        first = ld.first_divergence
        rows.append({"target": t, "first boundary over tolerance": first["module_path"] if first else "none",
                     "rel L2 there": fmt_sci(first["rel_l2"]) if first else "—",
                     "boundaries compared": f"{ld.covered} / {ld.boundaries}",
                     "unverified (left out)": ld.unverified,
                     "how intermediates were obtained": ld.method or "—", "evidence": ld.evidence})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption("Boundaries are module outputs of the captured graph; a boundary whose tensor does not survive "
               "compilation on a target (fused into a larger node) is skipped for that target. Boundaries "
               "compared: the verified ones, drawn as the line.")
    apart = unverified_rows({t: ld.to_dict() for t, ld in layer_blocks.items()})
    if apart:
        st.markdown(f"**{len(apart)} compared boundar{'y' if len(apart) == 1 else 'ies'} left out as unverified** "
                    "— not drawn on the line (grey crosses where a rel L2 was measured), not attributed:")
        st.dataframe(pd.DataFrame(apart), hide_index=True, width="stretch")
        st.caption("Verification: " + next((ld.verification["method"] for ld in layer_blocks.values()
                                            if ld.verification), VERIFICATION) + ".")

    st.subheader("Which decision caused the drift")
    method = None
    for t, ld in layer_blocks.items():
        att = ld.attribution
        if not att:
            continue
        method = att.method
        st.markdown(f"**{_ui.plain(t)}** {_ui.evidence_badge(att.evidence)} — {_ui.plain(att.summary)}")
        rows = attribution_rows({"layer_drift": {"attribution": att.to_dict()}})   # all of the target it reads
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if method:
        st.caption("Stars on the figure mark the attributed jumps. Method: " + method + ". Boundaries are module "
                   "outputs only; a decision inside a fused node that hides its tensor cannot be separated.")


# ---- task accuracy on the run's dataset (--data, the dataset upload) -----------------------------------------------
from pages import _accuracy_section  # noqa: E402
_accuracy_section.drift(report, _accuracy_section.dataset_file(report))

# ---- per-op isolation and the culprit (opt-in: `xc analyze --isolate`, or the button below) ----------------------
st.subheader("Per-op isolation and the culprit")
isolated = isolated_targets(report)
if not isolated:
    st.caption("No target of this run was isolated op by op. The button below compiles each op on its own on the "
               "targets you pick (its local error, beside the error the full run carries there) and searches for the "
               "smallest run of ops that reproduces the output drift.")
for number, tid in enumerate(isolated):
    iso = report.targets[tid].isolation
    culprit = iso.culprit
    st.markdown(f"**{_ui.plain(tid)}** {_ui.evidence_badge(iso.evidence)}")
    sentence = culprit_sentence(tid, iso)
    if sentence:
        (st.warning if culprit.status == "found" else st.info)(
            f"{_ui.evidence_badge(iso.evidence)} {_ui.plain(sentence)}")
        found = culprit.status == "found"
        facts = [_ui.plain(f) for f in (f"share of the output drift: {share_text(iso)}" if found else None,
                                        ("found in " if found else "") + runs_words(culprit.runs),
                                        f"the culprit alone: {local_words(culprit.local)}" if culprit.local else None)
                 if f]
        if culprit.repro.folder:
            facts.append(f"repro folder {_ui.code(culprit.repro.folder)} (the Downloads page has it as one zip)")
        st.caption(" · ".join(facts))
    if iso.error:
        st.warning(f"Not every op could be isolated: {_ui.plain(iso.error)}")
    fig = isolation_figure(report, tid)
    if fig is not None:
        st.plotly_chart(fig, width="stretch", key=f"isolation_figure_{number}")
    rows = above_gate_rows(report, tid)
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    elif iso.ops:
        st.caption("No op's local error is above the gate: each op alone stays within it.")
    st.caption(f"Gates: {_ui.plain(iso.gates_text or '—')} · {iso.isolated} op(s) isolated, "
               f"{len(iso.not_isolated)} not · local: the op alone on the target, fed the reference's inputs · "
               "carried: the rel L2 the full run has there (per-layer drift, where it compared the op)")
    if iso.not_isolated:
        with st.expander(f"{len(iso.not_isolated)} op(s) not isolated, and why"):
            st.dataframe(pd.DataFrame([{"op": o.get("source_op"), "why": o.get("why")} for o in iso.not_isolated]),
                         hide_index=True, width="stretch")
    trials = trial_rows(report, tid)
    if trials:
        with st.expander(f"Culprit search: {runs_words(len(trials))}"):
            st.dataframe(pd.DataFrame(trials), hide_index=True, width="stretch")
            st.caption("Each trial compiled the ops in its range on the target while the fp32 reference computed "
                       f"the rest; a range reproduces the drift when its output drift is at least "
                       f"{round(100 * (culprit.share_required or 0.9))} % of the whole program's (non-finite when "
                       "the whole program's is). Op positions count the captured program's ops from 1.")

candidates = numeric_targets(report)
run_id = _ui.run_key(report)
with st.expander("Isolate ops and find the culprit", expanded=not isolated):
    if not candidates:
        st.info("No target ran numbers in this run: isolation compares each op's value with the reference's.")
    elif not run_id:
        st.info("This report is not in the run store, so its run cannot be extended; analyse it here or open it "
                "on the History page first.")
    else:
        with st.form(f"isolate_form_{run_id[:12]}"):
            chosen = st.multiselect("Targets", candidates, default=drifting_targets(report),
                                    key=f"isolate_targets_{run_id[:12]}",
                                    help="Targets that ran numbers here; those whose output drift is above their "
                                         "default gate are picked")
            cols = st.columns(4)
            fields = {name: cols[i % 4].text_input(gate_label(name), value=start,
                                                   key=f"isolate_gate_{name}_{run_id[:12]}")
                      for i, (name, start) in enumerate(gate_fields().items())}
            st.caption(gates_sense_text() + " Left as they are, each target is judged by its default gates (int8 "
                       "targets: rel_l2 at most 0.1, cosine at least 0.99). Each target compiles every op (one "
                       "program per few hundred ops) and about 2·log2(ops) sub-programs: seconds for a small model, "
                       "minutes for a large one.")
            pressed = st.form_submit_button("Isolate ops and find the culprit")
        if pressed:
            from xc_core.errors import XcInputError, first_line
            try:
                gates = gates_from_fields(fields)
                if fields == gate_fields():
                    gates = None        # untouched: each target's default (int8 targets have looser ones)
                if not chosen:
                    raise XcInputError("pick at least one target to isolate")
                with st.spinner(f"Isolating the ops of {', '.join(chosen)} and searching for the culprit…"):
                    from xc_core.culprit.run import isolate_stored
                    service = _ui._service()
                    updated = isolate_stored(run_id, list(chosen), gates, store=service.store)
            except XcInputError as e:
                st.error(_ui.plain(e.for_dashboard()))
            except Exception as e:  # noqa: BLE001 — one line on the page, never a traceback
                st.error(_ui.plain(f"Isolation failed: {first_line(e)}"))
            else:
                # The run as the store now keeps it, blocks included: this session's, and the finished analysis the
                # server keeps in memory for the next session that asks for the same run.
                kept = service.get(run_id)
                if kept is not None and kept.report is not None:
                    kept.report = updated
                st.session_state["report"] = updated
                st.rerun()
