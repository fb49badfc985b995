"""Fusion: op counts before → after per target, by op type, the patterns that fired where, and the ones that
fired on one target but not another."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.figures import fusion_counts_figure, fusion_targets

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
           + " · ".join(f"`{t}` {report['targets'][t]['op_counts']['evidence']}" for t in targets))

with st.expander("Op counts by type"):
    rows = {}
    for op, n in report["capture"]["op_types_before"].items():
        rows.setdefault(("captured", op), n)
    table = pd.DataFrame([{"graph": "captured", "op_type": op, "count": n}
                          for op, n in report["capture"]["op_types_before"].items()]
                         + [{"graph": t, "op_type": op, "count": n} for t in targets
                            for op, n in report["targets"][t]["op_counts"]["after"].items()])
    st.dataframe(table.pivot_table(index="op_type", columns="graph", values="count", fill_value=0),
                 width="stretch")

matrix = report.get("fusion_matrix") or {"patterns": [], "not_fired_by_pattern": []}
st.subheader("Fusion patterns (in source ops) and where they fired")
if matrix["patterns"]:
    prow = [{"pattern": p["pattern"], **{t: p["targets"].get(t, 0) for t in targets}} for p in matrix["patterns"]]
    st.dataframe(pd.DataFrame(prow), hide_index=True, width="stretch")
else:
    st.write("No fusions on any target.")

st.subheader("Expected fusion did not fire")
st.caption("A group of source ops one target fused into one node, kept in separate nodes on another — with the "
           "compiler's reason where it gives one.")
missed = matrix.get("not_fired_by_pattern") or []
pick = st.multiselect("Missing on", targets, default=targets, key="fusion_missing_on")
rows = [{"pattern": m["pattern"], "did not fire on": m["missing_on"], "fired on": ", ".join(m["fired_on"]),
         "instances": m["instances"], "reason": m["reason"] or "—", "example source ops": ", ".join(m["example"])}
        for m in missed if m["missing_on"] in pick]
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
else:
    st.success("Every fusion that fired on one selected target fired on the others.")

st.subheader("Fused groups per target")
tid = st.selectbox("Target", targets, key="fusion_target")
groups = report["targets"][tid]["fusions"]["groups"]
if groups:
    st.dataframe(pd.DataFrame([{"node": g["node"], "pattern": g["pattern"], "pass": g.get("pass") or "—",
                                "module_path": g.get("module_path") or "—",
                                "absorbed": ", ".join(a["id"] for a in g["absorbed"]),
                                "source ops": ", ".join(g["source_ops"])} for g in groups]),
                 hide_index=True, width="stretch")
else:
    st.write("No fused groups.")
