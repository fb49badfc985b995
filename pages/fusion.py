"""Fusion: op counts before → after per target, by op type; whether the fusions each compiler implements fired
where the graph allowed them (checklist question 3); the patterns that fired where, and the ones that fired on one
target but not another (information: compilers fuse differently by design)."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.analysis.fusion_diff import not_fired_by_pattern
from xc_core.views.figures import fusion_counts_figure, fusion_targets
from xc_core.views.rows import catalogue_entries, catalogue_rows

report = _ui.require_report()
_ui.header(report, "Fusion")

targets = fusion_targets(report)
if not targets:
    st.info("No target produced a graph.")
    st.stop()

fig = fusion_counts_figure(report, targets)
st.plotly_chart(fig, width="stretch", key="fusion_counts")
st.caption("Before: ops of the captured framework graph. After: compute ops of each compiled graph (layout "
           "reorders, casts and constants are counted apart). Evidence: "
           + " · ".join(f"`{t}` {report.targets[t].op_counts.evidence}" for t in targets))

with st.expander("Op counts by type"):
    rows = {}
    for op, n in report.capture.op_types_before.items():
        rows.setdefault(("captured", op), n)
    table = pd.DataFrame([{"graph": "captured", "op_type": op, "count": n}
                          for op, n in report.capture.op_types_before.items()]
                         + [{"graph": t, "op_type": op, "count": n} for t in targets
                            for op, n in report.targets[t].op_counts.after.items()])
    st.dataframe(table.pivot_table(index="op_type", columns="graph", values="count", fill_value=0),
                 width="stretch")

st.subheader("Fusions each compiler implements: did they fire?")
st.caption("Every place where a fusion from the target's own compiler catalogue could apply. **Blocked**: the "
           "graph forbids it (an intermediate tensor has a second consumer or is a model output). **Missed**: "
           "nothing forbids it and it still did not fire. **Superseded**: another fusion took one of its ops. "
           "Evidence: " + " · ".join(f"`{t}` {report.targets[t].fusions.evidence}" for t in targets))
show_all = st.toggle("Show the fusions that fired too", value=False, key="fusion_catalogue_all")
crow = catalogue_rows(report, targets, only_failed=not show_all)
if crow:
    st.dataframe(pd.DataFrame(crow), hide_index=True, width="stretch")
else:
    st.success("Every catalogued fusion that was possible fired on every target.")
with st.expander("The catalogues and where each entry comes from"):
    cat_tid = st.selectbox("Target", targets, key="fusion_catalogue_target")
    entries = catalogue_entries(report, cat_tid)
    if entries:
        st.dataframe(pd.DataFrame(entries), hide_index=True, width="stretch")
    else:
        st.write("No catalogue is kept for this target's compiler.")

# As report.json holds it: analysis/fusion_diff reads it so.
matrix = report.fusion_matrix.to_dict() if report.fusion_matrix else {"patterns": [], "not_fired": []}
st.subheader("Fusion patterns (in source ops) and where they fired")
if matrix["patterns"]:
    prow = [{"pattern": p["pattern"], **{t: p["targets"].get(t, 0) for t in targets}} for p in matrix["patterns"]]
    st.dataframe(pd.DataFrame(prow), hide_index=True, width="stretch")
else:
    st.write("No fusions on any target.")

st.subheader("Fused on one target, not on another")
st.caption("Information, not a finding: a group of source ops one target fused into one node, kept in separate "
           "nodes on another — compilers implement different fusions. The compiler's reason is shown where it "
           "gives one.")
missed = not_fired_by_pattern(matrix)
pick = st.multiselect("Not fused on", targets, default=targets, key="fusion_missing_on")
rows = [{"pattern": m["pattern"], "did not fire on": m["missing_on"], "fired on": ", ".join(m["fired_on"]),
         "instances": m["instances"], "reason": m["reason"] or "—", "example source ops": ", ".join(m["example"])}
        for m in missed if m["missing_on"] in pick]
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
else:
    st.success("Every fusion that fired on one selected target fired on the others.")

st.subheader("Fused groups per target")
tid = st.selectbox("Target", targets, key="fusion_target")
groups = report.targets[tid].fusions.groups
if groups:     # "pass": the compiler pass that fused it (coremltools'), a toolchain fact kept in extra
    st.dataframe(pd.DataFrame([{"node": g.node, "pattern": g.pattern, "pass": g.extra.get("pass") or "—",
                                "module_path": g.module_path or "—",
                                "absorbed": ", ".join(a["id"] for a in g.absorbed),
                                "source ops": ", ".join(g.source_ops)} for g in groups]),
                 hide_index=True, width="stretch")
else:
    st.write("No fused groups.")
