"""Backend heat map: rows are source modules (or ops), columns are targets, each cell what runs it."""
import streamlit as st

from pages import _ui
from xc_core.figures import heatmap_figure, heatmap_targets

report = _ui.require_report()
_ui.header(report, "Backend heat map")

c1, c2, c3, c4 = st.columns(4)
by = c1.radio("Rows", ["modules", "source ops"], horizontal=True, key="hm_rows")
depth = c2.slider("Module depth", 1, 6, 2, key="hm_depth", disabled=by != "modules")
only_diff = c3.checkbox("Only rows that differ between targets", key="hm_diff")
only_fb = c4.checkbox("Only fallbacks", key="hm_fallbacks")

targets = heatmap_targets(report)
if not targets:
    st.info("No target produced a graph.")
    st.stop()
fig = heatmap_figure(report, by_module=by == "modules", depth=depth, only_diff=only_diff, only_fallbacks=only_fb)
if fig is None:
    st.success("No rows match the filters.")
    st.stop()
st.plotly_chart(fig, width="stretch", key="heatmap")
st.caption("Evidence per target: " + " · ".join(
    f"`{t}` {report['targets'][t]['graph']['evidence']}" for t in targets)
    + ". Hover a cell for the ops it covers and the fallback reason.")
