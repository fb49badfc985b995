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
