"""Fallbacks: every node an accelerated target leaves on the CPU, why, where it came from, and what it costs."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.fallbacks import (
    accelerated_targets,
    assignment_rows,
    boundary_rows,
    fallback_rank,
    fallback_rows,
    not_compiled_accelerated,
    split_summary,
)
from xc_core.views.compute_share import heaviest_fallback_rows, weighted_cell
from xc_core.views.target_counts import count_check

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
    st.caption(_ui.evidence_badge("assumed") + " estimate = Σ boundary bytes / bandwidth + transitions × overhead. "
               "The bandwidth and the overhead per transition are assumptions (a phone's copy bandwidth, an "
               "accelerator's dispatch cost), not measured on this host: change them here. Every boundary counts: "
               "tensors are sized at the input shapes that ran, and measured in a run where no shape says.")

for col, tid in zip(_ui.target_columns(targets, failed), targets):
    s = split_summary(report, tid, bandwidth, overhead)
    with col:
        st.subheader(_ui.plain(tid))
        st.markdown(_ui.evidence_badge(s["evidence"])
                    + (f" ORT verdict: **{_ui.plain(s['verdict'])}**" if s["verdict"] else
                       f" split decided by {_ui.plain(s['decided_by'])}"))
        # A card is a third of the page: three metrics side by side cut their labels and values at 1280 px
        # ("Latency cli… 1.21…"), so the estimate has a row of its own and the two counts share the next one.
        est = s["cliff"]
        st.metric("Latency cliff, ms (est.)", f"{est['estimate_ms']:.2f}" if est else "—",
                 help=f"assumed, not measured: {est['transfer_ms']:.3f} ms transfer + {est['overhead_ms']:.2f} ms "
                 "overhead, from the cost model's bandwidth and overhead per transition" if est else
                 "no boundaries were recorded")
        b, c = st.columns(2)
        if s["partitions"] is not None:
            b.metric(s["partitions_label"], s["partitions"], help="sizes: " + str(s["partition_sizes"]))
        else:
            b.metric("Accelerated", f"{100 * s['share']:.0f}%" if s["share"] is not None else "—",
                     help="share of its compiled ops the accelerator takes (xc's placement on the graph)")
        c.metric("Boundaries", s["boundaries"], help=f"{s['boundary_bytes']:,} bytes cross")
        # The split in the words of every other page (views/target_counts.py), then what the CPU ops are.
        st.caption(f"{_ui.plain(s['split']['text'])}. The estimate assumes {bandwidth:g} GB/s and {overhead:g} ms "
                   "per transition"
                   + (f"; {s['unsized_boundaries']} boundary(ies) no shape or run could size (bytes not counted)"
                      if s["unsized_boundaries"] else ""))
        weighted = weighted_cell(report.targets[tid])
        if weighted:        # what the split weighs: a count hides the one CPU op that is most of the time
            st.caption(_ui.plain(f"By compute: {weighted} on the accelerator."))
        for line in s["cpu_type_lines"]:
            st.caption(_ui.plain(line))
        check = count_check(report, tid)
        if check:       # the runtime's own count beside xc's placement: agreeing, or one labelled finding
            (st.caption if check["agree"] else st.warning)(_ui.plain(check["text"]))
        shipped = s["shipped"]
        if shipped:
            st.markdown("**As shipped, with its dynamic dims** "
                        + _ui.evidence_badge(shipped["evidence"]) + f" ORT verdict: **{shipped['verdict']}**")
            st.metric("Latency cliff, ms (est.)", f"{shipped['cliff']['estimate_ms']:.2f}")
            a, b = st.columns(2)
            a.metric("Accelerated", f"{100 * shipped['share']:.0f}%", delta=f"{shipped['share_change_pts']:.0f} pts",
                     help="share of the nodes ORT's checker counts (layout nodes included) that the EP takes when "
                          "the input dims stay symbolic, against its share at the shapes that ran")
            b.metric("Partitions", shipped["partitions"])
            reasons = ", ".join(f"{k} × {v}" for k, v in shipped["reasons"].items())
            st.caption(f"{shipped['left_for_dynamic_shape']} node(s) left on the CPU for a dynamic "
                       f"input shape ({reasons or 'none'}). Fix the input shapes before converting for the "
                       "device (onnxruntime.tools.make_dynamic_shape_fixed) to get the figures above.")

st.subheader("Fallback nodes")
picked = st.multiselect("Targets", targets, default=targets, key="fb_targets")
heavy = [r for tid in picked for r in heaviest_fallback_rows(report, tid)]
if heavy:
    st.markdown("**Heaviest off the accelerator** — source ops by their MACs, then by their nodes' time")
    st.dataframe(pd.DataFrame(heavy), hide_index=True, width="stretch",
                 column_config={"MACs": st.column_config.NumberColumn(format="%d"),
                                "time µs": st.column_config.NumberColumn(format="%.1f")})
    st.caption("MACs from the captured graph's shapes at the input shapes that ran (multiply-accumulates for "
               "convolutions, matrix products and attention; one per element for element-wise ops); % of MACs is "
               "of the target's weighed source ops, % of time of its timed nodes, where it profiled both sides.")
rows = sorted((r for tid in picked for r in fallback_rows(report, tid, bandwidth, overhead)), key=fallback_rank)
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={"boundary bytes": st.column_config.NumberColumn(format="%d"),
                                "kernel µs": st.column_config.NumberColumn(format="%.1f"),
                                "kernel µs (estimated)": st.column_config.NumberColumn(format="%.1f"),
                                "copies µs (assumed)": st.column_config.NumberColumn(format="%.1f")})
    st.caption("Ranked by the kernel's time, measured by its runtime's profiler on this host's CPU (median of the "
               "profiled runs; blank where the runtime does not time it, and those nodes last, by the bytes that "
               "cross their boundaries). "
               + (_ui.evidence_badge("estimated-compiler") + " Where no device runs here (Ethos-U), \"kernel µs "
                  "(estimated)\" holds the compiler's estimate, ranked after every measured time, never among them. "
                  if any("kernel µs (estimated)" in r for r in rows) else "")
               + _ui.evidence_badge("assumed") + " The copies at the accelerator ↔ CPU "
               "boundaries it sits on are the cost model's above — its bandwidth and its overhead per transition "
               "are assumptions, not measurements — so they sit in a column of their own and never rank a node.")
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
