"""The Inputs panel in the sidebar: per input, the shape xc picked (symbolic dims as number fields labelled with the
model's dim names), integer ranges, fixed values for scalars, and shapes for inputs the model does not describe
(TorchScript). Whatever differs from xc's own pick becomes an override of the next analysis."""
from __future__ import annotations

import streamlit as st

from pages._markup import code as _code, plain
from xc_core.inputs.values import INPUT_DTYPES
from xc_core.views.typed_report import Report, as_report


def _t(text) -> str:
    """A model's input or dim name as text in a label (labels render Markdown)."""
    return plain(text)


def _k(source_key: str, *parts) -> str:
    return "in|" + source_key + "|" + "|".join(str(p) for p in parts)


def overrides(source_key: str) -> dict:
    """The user's edits for this source, as analyze() keywords (dims, shapes, values, ranges)."""
    auto = st.session_state.get(_k(source_key, "auto")) or {}
    out: dict = {"dims": {}, "shapes": {}, "values": {}, "ranges": {}}
    for name, v in (auto.get("dims") or {}).items():
        got = st.session_state.get(_k(source_key, "dim", name))
        if got is not None and int(got) != v:
            out["dims"][name] = int(got)
    for inp, shape in (auto.get("axes") or {}).items():
        new = list(shape)
        for axis in range(len(shape)):
            got = st.session_state.get(_k(source_key, "axis", inp, axis))
            if got is not None:
                new[axis] = int(got)
        if new != list(shape):
            out["shapes"][inp] = (new, None)
    for inp, (lo, hi) in (auto.get("ranges") or {}).items():
        glo = st.session_state.get(_k(source_key, "lo", inp), lo)
        ghi = st.session_state.get(_k(source_key, "hi", inp), hi)
        if (glo, ghi) != (lo, hi) and ghi > glo:
            out["ranges"][inp] = (int(glo), int(ghi))
    for inp in auto.get("scalars") or []:
        if st.session_state.get(_k(source_key, "valon", inp)):
            out["values"][inp] = float(st.session_state.get(_k(source_key, "val", inp), 0.0))
    for inp in st.session_state.get(_k(source_key, "needs")) or []:
        text = (st.session_state.get(_k(source_key, "ts", inp)) or "").strip().lower()
        if text:
            try:
                dims = [int(d) for d in text.split("x")]
            except ValueError:
                continue
            if dims and all(d > 0 for d in dims):
                out["shapes"][inp] = (dims, st.session_state.get(_k(source_key, "tsdtype", inp)) or "float32")
    return {k: v for k, v in out.items() if v}


def remember_auto(source_key: str, report: Report | dict) -> None:
    """What xc picked with no edits: the baseline edits are measured against."""
    report = as_report(report)
    dims, axes, ranges, scalars = {}, {}, {}, []
    for i in report.source.inputs:
        unnamed = False
        for axis, label in enumerate(i.dim_names):
            if label and label != "?":
                dims.setdefault(label, int(i.shape[axis]))
            elif label == "?":
                unnamed = True
        if unnamed:
            axes[i.name] = list(i.shape)
        if i.low is not None and i.dtype.startswith(("int", "uint")):
            ranges[i.name] = (int(i.low), int(i.high))
        if not i.shape or i.shape == (1,):
            scalars.append(i.name)
    st.session_state[_k(source_key, "auto")] = {"dims": dims, "axes": axes, "ranges": ranges, "scalars": scalars}


def render(sb, source_key: str, report: Report | dict | None, needs_shapes: list[str]) -> None:
    report = as_report(report) if report is not None else None
    st.session_state[_k(source_key, "needs")] = list(needs_shapes)
    auto = st.session_state.get(_k(source_key, "auto"))
    if report is None and not needs_shapes:
        return
    with sb.expander("Inputs", expanded=bool(needs_shapes) or _reference_failed(report)):
        if needs_shapes:
            st.caption("This model does not record its input shapes: give each one, e.g. 1x3x224x224.")
            for inp in needs_shapes:
                st.text_input(f"{inp} shape", key=_k(source_key, "ts", inp), placeholder="1x3x224x224")
                st.selectbox(f"{inp} dtype", INPUT_DTYPES, key=_k(source_key, "tsdtype", inp))
            return
        if not auto:
            return
        st.caption("What xc picked for each input. Change a field and the model is analysed again.")
        for i in report.source.inputs:
            st.markdown(f"**{_t(i.name)}** · {_t(i.dtype)} · {_code(_shape_text(i))}")
            if i.note:
                st.caption(_t(i.note))
        _constants(report)
        for name, v in auto["dims"].items():
            st.number_input(f"dim '{_t(name)}'", min_value=1, max_value=1 << 20, value=v, step=1,
                            key=_k(source_key, "dim", name), help="every dim of this name, in every input")
        for inp, shape in auto["axes"].items():
            names = next(i.dim_names for i in report.source.inputs if i.name == inp)
            cols = st.columns(max(1, sum(1 for n in names if n == "?")))
            c = 0
            for axis, label in enumerate(names):
                if label == "?":
                    cols[c].number_input(f"{_t(inp)} axis {axis}", min_value=1, max_value=1 << 20,
                                         value=int(shape[axis]), step=1, key=_k(source_key, "axis", inp, axis))
                    c += 1
        for inp, (lo, hi) in auto["ranges"].items():
            a, b = st.columns(2)
            a.number_input(f"{_t(inp)} from", value=lo, step=1, key=_k(source_key, "lo", inp))
            b.number_input(f"{_t(inp)} below", value=hi, step=1, key=_k(source_key, "hi", inp),
                           help="integer values are drawn from [from, below)")
        for inp in auto["scalars"]:
            if st.checkbox(f"fix {_t(inp)} to a value", key=_k(source_key, "valon", inp),
                           help="a scalar whose value matters (a sample rate, a flag) instead of a random draw"):
                st.number_input(f"{_t(inp)} value", value=0.0, key=_k(source_key, "val", inp))
        if st.button("Reset to xc's picks", key=_k(source_key, "reset")):
            for key in [k for k in st.session_state if str(k).startswith(_k(source_key, ""))
                        and not str(k).endswith(("|auto", "|needs"))]:
                del st.session_state[key]
            st.rerun()


def _constants(report: Report) -> None:
    """The constant inputs the export recorded (use_cache=False), read-only: the program was re-exported with
    them baked in, so there is nothing to set — but the panel shows every input the model was given."""
    constants = report.source.constant_inputs
    if not constants:
        return
    from xc_core.sources.pt2_constants import baked_in_note
    for name, value in constants.items():
        st.markdown(f"**{_t(name)}** · constant · {_code(repr(value))}")
    st.caption(_t(baked_in_note(constants)) + "; to analyse other values, export the model again with them.")


def _shape_text(i) -> str:
    """An InputSpec's shape, each named axis with its name."""
    names = i.dim_names
    return "[" + ", ".join(f"{names[a]}={d}" if a < len(names) and names[a] else str(d)
                           for a, d in enumerate(i.shape)) + "]"


def _reference_failed(report: Report | None) -> bool:
    return bool(report) and report.reference.status == "error"
