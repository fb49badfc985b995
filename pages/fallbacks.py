"""Fallbacks: every node an accelerated target leaves on the CPU, why, where it came from, and what it costs."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.fallbacks import (
    accelerated_targets,
    assignment_rows,
    boundary_rows,
    fallback_rows,
    not_compiled_accelerated,
    split_summary,
)

report = _ui.require_report()
_ui.header(report, "Fallbacks")

sources = assignment_rows(report)
if sources:
    found = any(r["result"].endswith(")") and "disagree" in r["result"] for r in sources)
    with st.expander("Where each ONNX Runtime assignment comes from" + (" — sources disagree" if found else ""),
                     expanded=found):
        st.dataframe(pd.DataFrame(sources), hide_index=True, width="stretch")
        st.caption("ort-api: ONNX Runtime's own record of which EP took each node "
                   "(InferenceSession.get_provider_graph_assignment_info), checked against the EP its profile names "
                   "for each kernel; ort-checker: its partition checker's prediction for a mobile EP this host "
                   "cannot load.")

targets = accelerated_targets(report)
failed = not_compiled_accelerated(report)     # an accelerated target that did not compile keeps its column
_ui.stop_unless_targets(targets, failed, "None of the selected targets has an accelerator to fall back from. Pick "
                                         "`ort-nnapi`, `ort-coreml`, `coreml-ane`, a `litert-…` or an `executorch-…` "
                                         "target in the sidebar.")

with st.expander("Cost model (latency-cliff estimate)", expanded=False):
    first = split_summary(report, targets[0])
    c1, c2 = st.columns(2)
    bandwidth = c1.number_input("Copy bandwidth (GB/s)", 0.1, 100.0, float(first["bandwidth_gb_s"]), 0.5,
                                key="fb_bandwidth")
    overhead = c2.number_input("Overhead per transition (ms)", 0.0, 10.0, float(first["transition_overhead_ms"]),
                               0.05, key="fb_overhead")
    st.caption("estimate = Σ boundary bytes / bandwidth + transitions × overhead. Every boundary counts: tensors "
               "are sized at the input shapes that ran, and measured in a run where no shape says.")

for col, tid in zip(_ui.target_columns(targets, failed), targets):
    s = split_summary(report, tid, bandwidth, overhead)
    with col:
        st.subheader(_ui.plain(tid))
        st.markdown(_ui.evidence_badge(s["evidence"])
                    + (f" ORT verdict: **{_ui.plain(s['verdict'])}**" if s["verdict"] else
                       f" split decided by {_ui.plain(s['decided_by'])}"))
        a, b, c = st.columns([1.4, 1, 1])   # room for "Latency cliff (est.)", not "(e…"
        est = s["cliff"]
        a.metric("Latency cliff (est.)", f"{est['estimate_ms']:.2f} ms" if est else "—",
                 help=f"{est['transfer_ms']:.3f} ms transfer + {est['overhead_ms']:.2f} ms overhead" if est else
                 "no boundaries were recorded")
        if s["partitions"] is not None:
            b.metric(s["partitions_label"], s["partitions"], help="sizes: " + str(s["partition_sizes"]))
        else:
            b.metric("Accelerated", f"{100 * s['share']:.0f}%" if s["share"] is not None else "—",
                     help="share of compute ops the accelerator takes")
        c.metric("Boundaries", s["boundaries"], help=f"{s['boundary_bytes']:,} bytes cross")
        st.caption(f"{s['on_accelerator']}/{s['nodes']} nodes on {_ui.plain(s['accelerator'])}; "
                   f"assumes {bandwidth:g} GB/s and {overhead:g} ms per transition"
                   + (f"; {s['unsized_boundaries']} boundary(ies) no shape or run could size (bytes not counted)"
                      if s["unsized_boundaries"] else ""))
        if s["ops_on_cpu"]:
            st.caption(f"{s['ops_on_cpu_label']}: " + ", ".join(_ui.plain(o) for o in s["ops_on_cpu"]))
        shipped = s["shipped"]
        if shipped:
            st.markdown("**As shipped, with its dynamic dims** "
                        + _ui.evidence_badge(shipped["evidence"]) + f" ORT verdict: **{shipped['verdict']}**")
            a, b, c = st.columns([1, 1, 1.4])
            a.metric("Accelerated", f"{100 * shipped['share']:.0f}%", delta=f"{shipped['share_change_pts']:.0f} pts",
                     help="share of nodes the EP takes when the input dims stay symbolic")
            b.metric("Partitions", shipped["partitions"])
            c.metric("Latency cliff (est.)", f"{shipped['cliff']['estimate_ms']:.2f} ms")
            reasons = ", ".join(f"{k} × {v}" for k, v in shipped["reasons"].items())
            st.caption(f"{shipped['left_for_dynamic_shape']} node(s) left on the CPU for a dynamic "
                       f"input shape ({reasons or 'none'}). Fix the input shapes before converting for the "
                       "device (onnxruntime.tools.make_dynamic_shape_fixed) to get the figures above.")

st.subheader("Fallback nodes")
picked = st.multiselect("Targets", targets, default=targets, key="fb_targets")
rows = sorted((r for tid in picked for r in fallback_rows(report, tid, bandwidth, overhead)),
              key=lambda r: -r["cost µs"])
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={"boundary bytes": st.column_config.NumberColumn(format="%d"),
                                "kernel µs": st.column_config.NumberColumn(format="%.1f"),
                                "copies µs (est.)": st.column_config.NumberColumn(format="%.1f"),
                                "cost µs": st.column_config.NumberColumn(format="%.1f")})
    st.caption("Costliest first. Cost = the node's kernel time, measured by its runtime's profiler on this host's "
               "CPU (median of the profiled runs; blank where the runtime does not time it), + the copies at the "
               "accelerator ↔ CPU boundaries it sits on, estimated with the cost model above.")
else:
    st.success("No fallback nodes: every node runs on the accelerator.")

st.subheader("Boundaries")
brows = boundary_rows(report, picked)
if brows:
    st.dataframe(pd.DataFrame(brows), hide_index=True, width="stretch")
else:
    st.write("No accelerator ↔ CPU boundaries.")

caveats = {tid: split_summary(report, tid)["caveats"] for tid in picked}
if any(caveats.values()):
    with st.expander("Caveats ORT's checker lists but does not check"):
        for tid, items in caveats.items():
            for c in items:
                st.markdown(f"- {_ui.code(tid)} {_ui.plain(c)}")
