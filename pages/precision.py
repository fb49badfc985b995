"""Precision audit: per source op and target, the compute precision; a summary per target; what differs."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.rows import precision_rows

report = _ui.require_report()
_ui.header(report, "Precision audit")

summary = []
for tid, t in report.targets.items():
    summary.append({"target": tid, "evidence": t.precision.evidence or "—", **dict(t.precision.mix)})
st.subheader("Per target")
st.dataframe(pd.DataFrame(summary).fillna(0), hide_index=True, width="stretch")
notes = [f"`{tid}`: {n}" for tid, t in report.targets.items() for n in t.notes
         if "bf16" in n or "precision" in n]
for n in notes:
    st.caption(_ui.plain(n))

st.subheader("Per source op")
only = st.checkbox("Only source ops whose precision differs between targets", value=True, key="prec_diff")
rows = precision_rows(report, only_differing=only)
if rows:
    st.dataframe(pd.DataFrame(rows).astype(str), hide_index=True, width="stretch")
else:
    st.success("Every source op runs at the same precision on every target.")
st.caption("Precision is the compute precision of the node that carries the op on each target (fused ops share "
           "their node's). The reference runs fp32.")
