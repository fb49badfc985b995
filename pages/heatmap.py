"""Backend heat map: rows are source modules (or ops), columns are targets, each cell what runs it."""
import streamlit as st

from pages import _ui
from xc_core.views.figures import heatmap_figure, heatmap_targets, time_targets
from xc_core.views.rows import module_depth, not_compiled
from xc_core.views.time_evidence import time_phrase

report = _ui.require_report()
_ui.header(report, "Backend heat map")

c1, c2, c3, c4, c5 = st.columns([1.2, 1.2, 1.4, 1, 1])
by = c1.radio("Rows", ["modules", "source ops"], horizontal=True, key="hm_rows")
colour = c2.radio("Colour", ["backend", "time"], horizontal=True, key="hm_colour",
                  help="time: each cell's share of its target's time — measured by the runtime's profiler on "
                       "this host's CPU, or, for a device no one runs here (Ethos-U), its compiler's estimate "
                       "(estimated-compiler, the column says so); targets with no time per node stay blank")
# Depth counts the levels where the module tree branches: single-child wrappers (a Hugging Face model's `model` →
# `model.vit` → `model.vit.encoder`) are no level, so the first view already shows the model's parts.
deepest = max(2, module_depth(report))
st.session_state.setdefault("hm_depth", 2)
if st.session_state["hm_depth"] > deepest:       # another report, shallower: its deepest level
    st.session_state["hm_depth"] = deepest
depth = c3.slider("Module depth", 1, deepest, key="hm_depth", disabled=by != "modules",
                  help="Levels where the module hierarchy branches; a module with a single child is no level of "
                       "its own.")
only_diff = c4.checkbox("Only rows that differ", key="hm_diff", help="between the targets")
only_fb = c5.checkbox("Only fallbacks", key="hm_fallbacks")

targets = heatmap_targets(report)
if not targets:
    st.info("No target produced a graph.")
    st.stop()
fig = heatmap_figure(report, by_module=by == "modules", depth=depth, only_diff=only_diff, only_fallbacks=only_fb,
                     colour=colour)
if fig is None:
    if colour == "time" and not time_targets(report):
        st.info("No target timed its nodes in this run (the profiled runs were turned off with XC_PROFILE_RUNS=0, "
                "or no selected target's runtime has a per-node profiler here).")
    else:
        st.success("No rows match the filters.")
    st.stop()
st.plotly_chart(fig, width="stretch", key="heatmap")
missing = not_compiled(report)
st.caption("Evidence per target: " + " · ".join(
    f"{_ui.code(t)} {_ui.plain(report.targets[t].graph.evidence)}" for t in targets)
    + ". Hover a cell for the ops it covers and the fallback reason. A cell counts source ops (the captured "
    "graph's ops its row holds, as they ran on that target), not compiled ops: one source op may become several "
    "compiled ops, or be fused with others, so these counts differ from the Overview's compiled-op split."
    + (" Time: " + " · ".join(f"{_ui.code(t)} {_ui.plain(time_phrase(report.targets[t].node_times))}"
                              for t in time_targets(report))
       + "; a compiled node counts in the first row that carries it." if colour == "time" else "")
    + (" Empty columns: " + " · ".join(f"{_ui.code(t)} {_ui.plain(why)}" for t, why in missing.items())
       + " — the Overview has the whole message." if missing else ""))
