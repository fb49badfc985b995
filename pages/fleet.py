"""Fleet: a model × target matrix from `xc batch` — status, accelerated share, fallbacks, worst drift and time per
cell, coloured by any of them; a click on a cell opens that model's run on every other page."""
import datetime

import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.errors import XcInputError
from xc_core.fleet.matrix import grid, matrix_problem, parse_matrix
from xc_core.fleet.render import COLOUR_BY, cell_colours, cell_evidence, families, grid_table, summary_line
from xc_core.views.target_groups import target_groups

_ui.guard_page()
st.title("Fleet")
store = _ui._service().store
GRID_KEY = "fleet_grid"
FLEET_COLUMNS = 3       # target columns side by side: with the model's, four of CELL_WIDTH fit 1280 px
CELL_WIDTH = 195        # px


def _label(entry: dict) -> str:
    m = entry["matrix"]
    when = datetime.datetime.fromtimestamp(entry.get("saved") or 0).strftime("%Y-%m-%d %H:%M")
    return (f"{m.get('manifest') or '?'} · {when} · {len(m['models'])} model(s) × {len(m.get('targets') or [])} "
            f"target(s) · {entry.get('out_dir', '').rsplit('/', 1)[-1]}")


# A kept matrix that is not as xc batch writes it (edited by hand, or by an older xc) is left out of the list
# rather than breaking the page.
entries = {e["id"]: e for e in store.fleets() if matrix_problem(e["matrix"]) is None}
with st.expander("Open a matrix.json (e.g. a CI artifact of xc batch)"):
    upload = st.file_uploader("matrix.json", type=["json"], key="fleet_upload")
uploaded = None
if upload is not None:
    try:
        uploaded = parse_matrix(upload.getvalue(), _ui._safe_filename(upload.name))
    except XcInputError as e:
        st.error(_ui.plain(e.for_dashboard()))
if uploaded is None and not entries:
    st.info("No fleet matrices yet. `xc batch MANIFEST --targets … --out DIR` analyses many models for every "
            "target as one matrix; each batch this server's run store keeps is listed here.")
    st.stop()

if uploaded is not None:
    matrix, source = uploaded, "uploaded"
else:
    ids = list(entries)
    wanted = st.query_params.get("fleet")       # ?fleet=ID links to one matrix
    if "fleet_pick" not in st.session_state and wanted in entries:
        st.session_state["fleet_pick"] = wanted
    pick = st.selectbox("Matrix", ids, format_func=lambda i: _label(entries[i]), key="fleet_pick")
    matrix, source = entries[pick]["matrix"], pick

st.caption(_ui.plain(summary_line(matrix)) + f" · made by xc {matrix.get('xc_version', '?')} on "
           f"{matrix.get('host', {}).get('cpu') or 'an unknown CPU'}, backend {matrix.get('backend', '?')}")
c1, c2 = st.columns([1, 2])
colour_by = c1.selectbox("Colour by", list(COLOUR_BY), key="fleet_colour")
all_families = families(matrix)
kept = c2.multiselect("Target families", all_families, default=all_families, key="fleet_families")
models, targets, labels = grid_table(matrix, kept)
if not targets:
    st.info("No target of the chosen families in this matrix.")
    st.stop()
# A few targets at a time, by toolchain family: fifteen columns of "ok 94% acc · 2 fb · drift …" need sideways
# scrolling at 1280 px; a group of FLEET_COLUMNS fits, the others a click away.
groups = target_groups(targets, FLEET_COLUMNS)
if len(groups) > 1:
    titles = [title for title, _ in groups]
    shown = st.radio("Targets shown", range(len(groups)), format_func=titles.__getitem__, horizontal=True,
                     key="fleet_group", help="The matrix's targets by toolchain family, a few columns at a time: "
                     "pick a group, or narrow the families above.")
    keep = [targets.index(t) for t in groups[shown if shown is not None and shown < len(groups) else 0][1]]
    targets, labels = [targets[k] for k in keep], [[row[k] for k in keep] for row in labels]
colours = cell_colours(matrix, targets, colour_by)
table = pd.DataFrame(labels, index=pd.Index(models, name="model"), columns=targets)
styled = table.style.apply(lambda _df: pd.DataFrame([[f"background-color: {c}" for c in row] for row in colours],
                                                    index=table.index, columns=table.columns), axis=None)
_, _, cells = grid(matrix)


def _open_cell() -> None:
    """A callback (it runs before the sidebar is built): a selected cell's run becomes the session's report."""
    selected = st.session_state[GRID_KEY].selection.get("cells") or []
    if not selected:
        return
    row, column = selected[0]
    cell = cells.get((models[row], column))
    run = (cell or {}).get("run")
    if run and store.has(run):
        st.session_state.update(source_mode=_ui.SAVED_RUN, saved_run=run, report=None, report_key=None,
                                fleet_go=True)
    else:
        st.session_state["fleet_note"] = (
            f"{models[row]} × {column}: " + ("its model did not run (see its error below)" if not run else
                                            f"run {run[:12]} is not in this server's run store (the matrix was made "
                                            "elsewhere): import that model's runs/…/report.json on History"))


if st.session_state.pop("fleet_go", False):
    st.switch_page("pages/overview.py")
st.dataframe(styled, key=GRID_KEY, on_select=_open_cell, selection_mode="single-cell", width="stretch",
             column_config={c: st.column_config.TextColumn(width=CELL_WIDTH) for c in ["_index", *targets]})
st.caption("Click a cell to open that model's run on every page. acc: share of compute nodes on the accelerator · "
           "fb: CPU fallbacks · drift: the worst output's relative L2 against the reference · time: one run "
           "measured on the CPU named above. Each figure's evidence kind is listed below.")
note = st.session_state.pop("fleet_note", None)
if note:
    st.warning(_ui.plain(note))

with st.expander("Cells: each figure with its evidence kind, and errors"):
    rows = []
    for m in models:
        for t in targets:
            c = cells.get((m, t))
            if c is None:
                continue
            rows.append({"model": m, "target": c.get("identity") or t,
                         "status": c["status"] + (" (cached)" if c.get("cached") else ""),
                         "evidence": cell_evidence(c) or "—", "error": c.get("error") or "",
                         "what to do": c.get("advice") or "", "run": (c.get("run") or "")[:12],
                         "link": f"?run={c['run'][:12]}" if c.get("run") else ""})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
if source != "uploaded":
    st.caption(f"Link to this matrix: `?fleet={source}` · its files: {_ui.plain(entries[source]['out_dir'])}")
