"""Core ML: what coremltools' MIL pipeline fused (pass by pass), where each op will probably run and why."""

import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.rows import coreml_op_rows, coreml_targets, not_compiled_coreml, route_departs, route_headline

report = _ui.require_report()
_ui.header(report, "Core ML")

targets = coreml_targets(report)
failed = not_compiled_coreml(report)      # a Core ML target that did not compile keeps its column
_ui.stop_unless_targets(targets, failed, "No Core ML target in this report. Pick `coreml-ane` or `coreml-cpu` in "
                                         "the sidebar.")

st.caption("Linux cannot ask Core ML where ops run: units come from xc's rule table, each rule citing its public "
           "source (`predicted-rules`); numerics come from executing the compiled MIL program in numpy with its own "
           "dtypes (`emulated`). On macOS 14.4+ MLComputePlan and predict replace both (`reported`, `measured`).")

# An ONNX source: one program from xc's ONNX → PyTorch route for every column, said once: whether the conversion
# departs from ONNX Runtime (xc's error), and that these targets' drift is measured against its program.
route = report.capture.onnx_route
if route and not route.error and set(route.targets) & set(targets):
    (st.warning if route_departs(report) else st.markdown)(
        f"**ONNX → PyTorch conversion** {_ui.evidence_badge(route.evidence)}: one program for "
        f"{_ui.plain(', '.join(t for t in route.targets if t in targets))}. {_ui.plain(route_headline(report))}")
    if route.preprocessing:
        st.caption("Prepared for the conversion: " + "; ".join(_ui.plain(n) for n in route.preprocessing))

for col, tid in zip(_ui.target_columns(targets, failed), targets):
    t = report.targets[tid]
    units = t.info.compute_units_predicted
    facts = t.info.extra       # coremltools' own facts: MIL op counts, casts, conversion, version
    with col:
        st.subheader(_ui.plain(tid))
        st.markdown(f"{_ui.evidence_badge(units.evidence)} {_ui.plain(t.label)}")
        # A card is a third of the page: "MIL ops before → after" and "198 → 49" were cut off beside two other
        # metrics at 1280 px, so it has a row of its own and the two counts share the next one.
        st.metric("MIL ops before → after",
                  f"{facts.get('mil_ops_before', '—')} → {facts.get('mil_ops_after', '—')}",
                  help="non-const MIL ops after the frontend (+ fp16 casts) vs after the default pass pipeline")
        b, c = st.columns(2)
        casts = facts.get("casts") or {}
        b.metric("Casts", casts.get("count", 0),
                 help=", ".join(f"{k}: {v}" for k, v in casts.get("by_type", {}).items()))
        c.metric("Fused ops", t.fusions.count)
        st.caption("Predicted units: " + ", ".join(f"{k.upper() if k != 'unknown' else k} {100 * v:.0f}%"
                                                   for k, v in units.share.items())
                   + (f" · no rule for: {', '.join(units.unknown_ops)}" if units.unknown_ops else ""))
        st.caption(f"Conversion: {_ui.plain(facts.get('conversion', '—'))} · coremltools "
                   f"{_ui.plain(facts.get('coremltools_version', ''))}")
        files = _ui.run_files(report)
        zips = [files[p] for p in t.artifacts if p.endswith(".zip") and p in files]
        if zips:
            st.download_button("Download .mlpackage (zip)", _ui.file_reader(zips[0]),
                               file_name=f"{tid}.mlpackage.zip", key=f"dl_{tid}", on_click="ignore")

st.subheader("Fusions, pass by pass")
frows = []
for tid in targets:
    for g in report.targets[tid].fusions.groups:     # "pass": coremltools' pass, a toolchain fact kept in extra
        frows.append({"target": tid, "pass": g.extra.get("pass") or "—", "pattern": g.pattern, "op": g.node,
                      "module_path": g.module_path if g.module_path is not None else "—",
                      "source ops": ", ".join(g.source_ops)})
if frows:
    st.dataframe(pd.DataFrame(frows), hide_index=True, width="stretch")
else:
    st.write("The default pipeline fused nothing in this model.")

st.subheader("Per-op placement")
tid = st.selectbox("Target", targets, key="coreml_target")
rows = coreml_op_rows(report, tid)
units = sorted({r["unit"] for r in rows})
only = st.multiselect("Units", units, default=units, key="coreml_units")
st.dataframe(pd.DataFrame([r for r in rows if r["unit"] in only]), hide_index=True, width="stretch")
