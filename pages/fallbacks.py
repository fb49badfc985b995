"""Fallbacks: every node an accelerated target leaves on the CPU, why, where it came from, and what it costs."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.analysis.boundaries import latency_cliff
from xc_core.views import accelerated_targets, fallback_rows, not_compiled_accelerated

report = _ui.require_report()
_ui.header(report, "Fallbacks")

targets = accelerated_targets(report)
failed = not_compiled_accelerated(report)     # an accelerated target that did not compile keeps its column


def failed_columns(cols) -> None:
    for col, (tid, why) in zip(cols, failed.items()):
        with col:
            st.subheader(_ui.plain(tid))
            st.error(f"{_ui.plain(why)} — nothing to show; the Overview has the whole message.")


if not targets:
    if failed:
        failed_columns(st.columns(len(failed)))
    else:
        st.info("None of the selected targets has an accelerator to fall back from. Pick `ort-nnapi` or "
                "`ort-coreml` in the sidebar.")
    st.stop()

with st.expander("Cost model (latency-cliff estimate)", expanded=False):
    first = report["targets"][targets[0]]["info"]["boundaries"]["latency_cliff"]["assumptions"]
    c1, c2 = st.columns(2)
    bandwidth = c1.number_input("Copy bandwidth (GB/s)", 0.1, 100.0, float(first["bandwidth_gb_s"]), 0.5,
                                key="fb_bandwidth")
    overhead = c2.number_input("Overhead per transition (ms)", 0.0, 10.0, float(first["transition_overhead_ms"]),
                               0.05, key="fb_overhead")
    st.caption("estimate = Σ boundary bytes / bandwidth + transitions × overhead. Every boundary counts: tensors "
               "are sized at the input shapes that ran, and measured in a run where no shape says.")

cols = st.columns(len(targets) + len(failed))
failed_columns(cols[len(targets):])
for col, tid in zip(cols, targets):
    t = report["targets"][tid]
    part, bounds = t["info"]["partitioning"], t["info"]["boundaries"]
    est = latency_cliff(bounds["total_bytes"], bounds["count"], bandwidth, overhead)
    with col:
        st.subheader(_ui.plain(tid))
        st.markdown(_ui.evidence_badge(part["evidence"]) + f" ORT verdict: **{part['suitability']}**")
        a, b, c = st.columns([1.4, 1, 1])   # room for "Latency cliff (est.)", not "(e…"
        a.metric("Latency cliff (est.)", f"{est['estimate_ms']:.2f} ms",
                 help=f"{est['transfer_ms']:.3f} ms transfer + {est['overhead_ms']:.2f} ms overhead")
        b.metric("Partitions", part["num_partitions"], help="sizes: " + str(part["partition_sizes"]))
        c.metric("Boundaries", bounds["count"], help=f"{bounds['total_bytes']:,} bytes cross")
        st.caption(f"{part['num_supported_nodes']}/{part['num_nodes']} nodes on {_ui.plain(part['ep'])}; "
                   f"assumes {bandwidth:g} GB/s and {overhead:g} ms per transition"
                   + (f"; {bounds['symbolic_count']} boundary(ies) no shape or run could size (bytes not counted)"
                      if bounds["symbolic_count"] else ""))
        if part["unsupported_ops"]:
            st.caption("Unsupported ops: " + ", ".join(part["unsupported_ops"]))
        shipped = t["info"].get("partitioning_as_shipped")
        if shipped:
            sb = shipped["boundaries"]
            sest = latency_cliff(sb["total_bytes"], sb["count"], bandwidth, overhead)
            st.markdown("**As shipped, with its dynamic dims** "
                        + _ui.evidence_badge(shipped["evidence"]) + f" ORT verdict: **{shipped['suitability']}**")
            a, b, c = st.columns([1, 1, 1.4])
            a.metric("Accelerated", f"{100 * shipped['accelerated_share_nodes']:.0f}%",
                     delta=f"{100 * (shipped['accelerated_share_nodes'] - part['accelerated_share_nodes']):.0f} pts",
                     help="share of nodes the EP takes when the input dims stay symbolic")
            b.metric("Partitions", shipped["num_partitions"])
            c.metric("Latency cliff (est.)", f"{sest['estimate_ms']:.2f} ms")
            reasons = ", ".join(f"{k} × {v}" for k, v in shipped.get("fallbacks_by_reason", {}).items())
            st.caption(f"{shipped['nodes_unsupported_due_to_dynamic_input']} node(s) left on the CPU for a dynamic "
                       f"input shape ({reasons or 'none'}). Fix the input shapes before converting for the "
                       "device (onnxruntime.tools.make_dynamic_shape_fixed) to get the figures above.")

st.subheader("Fallback nodes")
picked = st.multiselect("Targets", targets, default=targets, key="fb_targets")
rows = [r for tid in picked for r in fallback_rows(report, tid)]
if rows:
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                 column_config={"boundary bytes": st.column_config.NumberColumn(format="%d")})
else:
    st.success("No fallback nodes: every node runs on the accelerator.")

st.subheader("Boundaries")
brows = []
for tid in picked:
    for b in report["targets"][tid]["info"]["boundaries"]["items"]:
        brows.append({"target": tid, "tensor": b["tensor"], "direction": b["direction"], "from": b["from_node"],
                      "to": ", ".join(b["consumers"]), "shape": str(b["shape"]), "dtype": b["dtype"],
                      "bytes": b["bytes"] if b["bytes"] is not None else "symbolic"})
if brows:
    st.dataframe(pd.DataFrame(brows), hide_index=True, width="stretch")
else:
    st.write("No accelerator ↔ CPU boundaries.")

caveats = {tid: report["targets"][tid]["info"]["partitioning"]["unchecked_caveats"] for tid in picked}
if any(caveats.values()):
    with st.expander("Caveats ORT's checker lists but does not check"):
        for tid, items in caveats.items():
            for c in items:
                st.markdown(f"- {_ui.code(tid)} {_ui.plain(c)}")
