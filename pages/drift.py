"""Numerical drift: per target and output, metrics with tolerance controls and pass/fail, error histogram,
reference-vs-target scatter, and per-layer drift along the depth of the network."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.analysis.drift import passes_at
from xc_core.analysis.drift_attribution import attribution_rows
from xc_core.views.figures import (
    drift_histogram_figure,
    drift_scatter_figure,
    layer_drift_attribution_marks,
    layer_drift_figure,
    layer_drift_series,
)
from xc_core.views.rows import fmt_sci

report = _ui.require_report()
_ui.header(report, "Numerical drift")

targets = [t for t, b in report["targets"].items() if b.get("drift")]
if not targets:
    st.info("No drift figures: " + ("this source has no reference (a compiled artifact)."
                                    if report.get("reference") is None else "no target ran."))
    st.stop()

c1, c2 = st.columns(2)
atol = c1.number_input("atol", min_value=0.0, value=1e-3, format="%.1e", key="drift_atol")
rtol = c2.number_input("rtol", min_value=0.0, value=1e-3, format="%.1e", key="drift_rtol")

rows = []
for tid in targets:
    d = report["targets"][tid]["drift"]
    for name, m in d["outputs"].items():
        if "error" in m:
            rows.append({"target": tid, "output": name, "pass": "fail", "error": m["error"], "evidence": d["evidence"]})
            continue
        ok = passes_at(m["details"], atol, rtol) if m.get("details") else False
        rows.append({"target": tid, "output": name, "pass": "pass" if ok else "fail", "max abs": fmt_sci(m["max_abs"]),
                     "mean abs": fmt_sci(m["mean_abs"]), "rel L2": fmt_sci(m["rel_l2"]),
                     "cosine": f"{m['cosine']:.6f}", "SNR dB": f"{m['snr_db']:.1f}" if m["snr_db"] else "∞",
                     "min atol": fmt_sci(m["min_atol"]), "min rtol": fmt_sci(m["min_rtol"]),
                     "evidence": d["evidence"]})
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
st.caption("Pass: |target − reference| ≤ atol + rtol·|reference| everywhere (np.isclose). min atol / min rtol: the "
           "smallest tolerance that passes with the other at 0 (as Polygraphy reports them). Assumptions: "
           + " · ".join(f"`{t}` {report['targets'][t]['drift']['assumption']}" for t in targets
                        if report["targets"][t]["drift"].get("assumption")))

st.subheader("Error distribution")
tid = st.selectbox("Target", targets, key="drift_target")
outputs = list(report["targets"][tid]["drift"]["outputs"])
name = st.selectbox("Output", outputs, key="drift_output")
m = report["targets"][tid]["drift"]["outputs"][name]
details = m.get("details")
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
if not layer:
    st.info("No target exposed intermediate values for this model.")
else:
    st.plotly_chart(layer_drift_attribution_marks(layer_drift_figure(report), report), width="stretch",
                    key="drift_layers")
    rows = []
    for t, ld in layer.items():
        first = ld["first_divergence"]
        rows.append({"target": t, "first boundary over tolerance": first["module_path"] if first else "none",
                     "rel L2 there": fmt_sci(first["rel_l2"]) if first else "—",
                     "boundaries compared": f"{ld['covered']} / {ld['boundaries']}",
                     "how intermediates were obtained": ld.get("method") or "—", "evidence": ld["evidence"]})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption("Boundaries are module outputs of the captured graph; a boundary whose tensor does not survive "
               "compilation on a target (fused into a larger node) is skipped for that target.")

    st.subheader("Which decision caused the drift")
    method = None
    for t, ld in layer.items():
        att = ld.get("attribution")
        if not att:
            continue
        method = att["method"]
        st.markdown(f"**{_ui.plain(t)}** {_ui.evidence_badge(att['evidence'])} — {_ui.plain(att['summary'])}")
        rows = attribution_rows(report["targets"][t])
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    if method:
        st.caption("Stars on the figure mark the attributed jumps. Method: " + method + ". Boundaries are module "
                   "outputs only; a decision inside a fused node that hides its tensor cannot be separated.")
