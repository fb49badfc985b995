"""Backend heat map: rows are source modules (or ops), columns are targets, each cell what runs it."""
import plotly.graph_objects as go
import streamlit as st

from pages import _ui
from xc_core.views import HEAT_CATEGORIES, heatmap_rows

report = _ui.require_report()
_ui.header(report, "Backend heat map")

COLORS = {"accelerator": "#1a9850", "accelerator (fused)": "#91cf60", "CPU": "#4575b4", "CPU (fused)": "#91bfdb",
          "CPU fallback": "#d73027", "unknown": "#fee08b", "not present": "#f0f0f0"}

c1, c2, c3, c4 = st.columns(4)
by = c1.radio("Rows", ["modules", "source ops"], horizontal=True, key="hm_rows")
depth = c2.slider("Module depth", 1, 6, 2, key="hm_depth", disabled=by != "modules")
only_diff = c3.checkbox("Only rows that differ between targets", key="hm_diff")
only_fb = c4.checkbox("Only fallbacks", key="hm_fallbacks")

labels, targets, cells = heatmap_rows(report, by_module=by == "modules", depth=depth)
if not targets:
    st.info("No target produced a graph.")
    st.stop()
keep = []
for i, line in enumerate(cells):
    cats = [c["category"] for c in line]
    if only_diff and len(set(cats)) < 2:
        continue
    if only_fb and "CPU fallback" not in cats:
        continue
    keep.append(i)
if not keep:
    st.success("No rows match the filters.")
    st.stop()
index = {c: i for i, c in enumerate(HEAT_CATEGORIES)}
z = [[index[cells[i][j]["category"]] for j in range(len(targets))] for i in keep]
text = [[cells[i][j]["hover"] for j in range(len(targets))] for i in keep]
n = len(HEAT_CATEGORIES)
scale = []
for k, cat in enumerate(HEAT_CATEGORIES):  # a discrete colour scale: one flat band per category
    scale += [[k / n, COLORS[cat]], [(k + 1) / n, COLORS[cat]]]
fig = go.Figure(go.Heatmap(z=z, x=targets, y=[labels[i] for i in keep], text=text, hoverinfo="text",
                           colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=2, ygap=1,
                           colorbar=dict(tickvals=list(range(n)), ticktext=HEAT_CATEGORIES, title="runs on")))
fig.update_layout(height=max(320, 22 * len(keep) + 120), yaxis=dict(autorange="reversed"),
                  margin=dict(l=10, r=10, t=30, b=10))
st.plotly_chart(fig, width="stretch", key="heatmap")
st.caption("Evidence per target: " + " · ".join(
    f"`{t}` {report['targets'][t]['graph']['evidence']}" for t in targets)
    + ". Hover a cell for the ops it covers and the fallback reason.")
