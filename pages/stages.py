"""Stages: each target's lowering pipeline on the six canonical stages (import, graph optimisation, fusion, backend
selection, kernel lowering, fallback insertion) side by side; every step its toolchain ran, with the graph after
it where the toolchain gives one (open it in the Topology page); the first stage at which targets part ways for
each source op; and the layout audit (the layouts nodes run in, the reorders and transposes inserted, the bytes
they move)."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.rows import (
    divergence_counts,
    divergence_rows,
    layout_move_rows,
    layout_summary_rows,
    stage_matrix,
    stage_targets,
    step_rows,
)
from xc_core.targets import steps_captions
from xc_core.views.target_groups import target_groups

STAGE_COLUMNS = 6       # targets side by side in one stage table: a cell of ~110 px each at 1280 px

report = _ui.require_report()
_ui.header(report, "Stages")

targets = stage_targets(report)
if not targets:
    st.info("No target recorded its lowering steps (every target failed, or this report predates stages).")
    st.stop()

# Static tables, long cells wrapped: every target's column visible at once without sideways scrolling, a few
# targets a table (by toolchain family) — 15 columns in one table would not fit 1280 px.
# st.table renders its cells and headers as Markdown: target ids and step names from a report are text.
matrix = pd.DataFrame(stage_matrix(report)).set_index("stage")
groups = target_groups(targets, STAGE_COLUMNS)
for title, members in groups:
    if len(groups) > 1:
        st.markdown(f"**{_ui.plain(title)}**")
    part = matrix[members].map(_ui.plain)
    part.columns = [_ui.plain(c) for c in members]
    st.table(part)
# Each family says where its steps come from (its target class's `steps_caption`).
st.caption("Each cell: what the target's toolchain did in that stage. Ops are compute ops (casts, reorders and "
           "constants counted apart); *fused nodes* carry two or more source ops. " + " ".join(steps_captions()) +
           " Evidence (steps / backend selection): " + " · ".join(f"{_ui.code(t)} {ev.get('steps')} / {ev.get('assignment')}" for t in targets
                                       for ev in [report.targets[t].stages.evidence]))

st.subheader("Every step of one target")
tid = st.selectbox("Target", targets, key="stages_target", format_func=_ui.target_label(report))
st.dataframe(pd.DataFrame(step_rows(report, tid)), hide_index=True, width="stretch")
steps = report.targets[tid].stages.steps
for i, step in enumerate(steps):
    if step.note:       # in full: a table cell cuts it (e.g. why a big graph's levels were left out)
        st.caption(f"Step {i + 1}: {_ui.plain(step.note)}")
kept = [i for i, s in enumerate(steps) if s.graph and s.graph != "final"]
files = _ui.run_files(report)
if kept and _ui.stage_graph_file(report, files):
    later = [i for i in kept if steps[i].stage != "import"]      # the import graph is the least news
    pick = st.selectbox("Step graph", kept, index=kept.index(later[0]) if later else 0, key="stages_step",
                        format_func=lambda i: f"#{i + 1} {steps[i].name}")
    st.button("Show it in the Topology page beside the compiled graph", key="stages_open",
              on_click=_ui.request_stage_graph, args=(report, tid, pick))
    if st.session_state.get(_ui.STAGE_REQUEST):
        st.page_link("pages/topology.py", label="Open the Topology page", icon=":material/account_tree:")
elif kept:
    st.caption("The step graphs are not kept for this run (a report.json opened without its run folder).")

st.subheader("Where targets first part ways, per source op")
st.caption("For each source op and target: which other source ops share a node with it after import, graph "
           "optimisation and fusion ('gone': constant-folded or eliminated); then the backend, the precision and "
           "whether it falls back, in the compiled graph. The first stage whose answer differs is where the "
           "targets diverge for that op. Evidence: " + report.divergence.get("evidence", "—"))
st.dataframe(pd.DataFrame([divergence_counts(report)]), hide_index=True, width="stretch")
c1, c2, c3 = st.columns([2, 2, 1])
compare = [t for t in targets if t in (report.divergence.get("signatures") or {})]
everyone = "every target"
a = c1.selectbox("Compare", [everyone] + compare, key="stages_div_a")
b = c2.selectbox("with", [t for t in compare if t != a], key="stages_div_b", disabled=a == everyone)
only = c3.toggle("Only ops that diverge", value=True, key="stages_div_only")
rows = divergence_rows(report, None if a == everyone else a, None if a == everyone else b, only_diverging=only)
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
else:
    st.success("No source op parts ways between these targets." if compare else
               "Only one target compiled: nothing to compare.")

st.subheader("Layout audit")
st.caption("The memory layout each compute node runs in where the runtime reports it, every reorder or transpose "
           "the compiler inserted with the bytes it moves (element count × element size; blocked layouts may pad "
           "channels), and the transitions between channels-first, channels-last and blocked layouts.")
summary = layout_summary_rows(report)
if summary:
    st.dataframe(pd.DataFrame(summary), hide_index=True, width="stretch")
    with_moves = [r["target"] for r in summary if r["reorders / transposes"]]
    if with_moves:
        lt = st.selectbox("Reorders and transposes of", with_moves, key="stages_layout_target")
        st.dataframe(pd.DataFrame(layout_move_rows(report, lt)), hide_index=True, width="stretch")
else:
    st.write("No target produced a compiled graph.")
