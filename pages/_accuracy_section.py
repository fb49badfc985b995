"""The "Accuracy on <dataset>" sections of the Overview and Drift pages (task accuracy on the run's dataset, --data
or the dashboard's dataset upload): what they show is computed in xc_core/views/accuracy.py."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.accuracy import (
    accuracy_lines,
    accuracy_rows,
    accuracy_targets,
    as_image,
    changed_sample_rows,
    confusion_table,
    dataset_title,
    sample_rows,
    sample_values,
)


def overview(report) -> None:
    """A sentence per target with its evidence, and the compact table."""
    lines = accuracy_lines(report)
    if not lines:
        return
    st.subheader(f"Accuracy on {_ui.plain(dataset_title(report))}")
    st.markdown("  \n".join(f"**{_ui.plain(tid)}** {_ui.evidence_badge(evidence)} {_ui.plain(sentence)}"
                            for tid, sentence, evidence in lines))
    st.dataframe(pd.DataFrame(accuracy_rows(report)), hide_index=True, width="stretch")
    changed = changed_sample_rows(report)
    if changed:
        total = sum(report.targets[tid].accuracy.changed_count for tid in accuracy_targets(report))
        st.caption(f"Samples whose class changed ({total:,} in all; the first {len(changed)} listed — the Drift "
                   "page opens each, with the confusion of classes)")
        st.dataframe(pd.DataFrame(changed), hide_index=True, width="stretch")
    for note in report.dataset.notes:       # how the files became inputs: preprocessing, layout, sample rate
        st.caption(_ui.plain(note))


def drift(report, dataset_npz: str | None) -> None:
    """Per target: the changed and worst samples (each openable), and the confusion of reference and target classes."""
    targets = accuracy_targets(report)
    if not targets:
        return
    st.subheader(f"Accuracy on the dataset: {_ui.plain(dataset_title(report))}")
    # The target whose answers changed most opens first: the one a reader came to see.
    most = max(range(len(targets)), key=lambda i: report.targets[targets[i]].accuracy.changed_count)
    tid = st.selectbox("Target", targets, index=most, key="accuracy_target")
    acc = report.targets[tid].accuracy
    st.markdown(f"{_ui.evidence_badge(acc.evidence)} " + _ui.plain(dict((t, s) for t, s, _ in
                                                                        accuracy_lines(report))[tid]))
    changed, worst = sample_rows(acc, "changed"), sample_rows(acc, "worst")
    if changed:
        st.caption(f"Samples whose class changed ({acc.changed_count:,} in all; the first {len(changed)} listed)")
        st.dataframe(pd.DataFrame(changed), hide_index=True, width="stretch")
    if worst:
        st.caption(f"Worst samples by {acc.metric or 'the metric'} against the reference")
        st.dataframe(pd.DataFrame(worst), hide_index=True, width="stretch")
    listed = {r["sample"]: r for r in changed + worst}
    if listed:
        pick = st.selectbox("Open a sample", list(listed), key="accuracy_sample",
                            format_func=lambda i: f"{i}: {listed[i]['name']}")
        row = listed[pick]
        if acc.task == "classification":
            st.caption(_ui.plain(f"reference: {row.get('reference')} · target: {row.get('target')} · label: "
                                 f"{row.get('label', '—')}"))
        values = sample_values(dataset_npz, int(pick))
        if values is None:
            st.caption("The sample's values are not kept with this run (it is not in the run store).")
        for name, arr in (values or {}).items():
            image = as_image(arr)
            if image is not None:
                st.image(image, caption=_ui.plain(f"{name} {list(arr.shape)}"), width=160)
            else:
                st.caption(_ui.plain(f"{name} {list(arr.shape)} {arr.dtype}"))
                st.code(repr(arr.reshape(-1)[:64].tolist()))
    classes, matrix = confusion_table(acc)
    if matrix:
        st.caption("Confusion: rows are the reference's class, columns the target's")
        st.dataframe(pd.DataFrame(matrix, index=classes, columns=classes), width="stretch")


def dataset_file(report) -> str | None:
    """The run store's copy of the run's dataset.npz, None for a run not in the store."""
    from xc_core.inputs.dataset import DATASET_FILE
    key = _ui.run_key(report)
    if not key:
        return None
    try:
        return _ui._service().store.files(key).get(DATASET_FILE)
    except OSError:
        return None
