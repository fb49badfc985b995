"""History: every stored run (the dashboard's, the CLI's, report.json files imported from CI); open one, import
one, or compare two — the same diff and gate as `xc diff --gate`."""
import datetime
import hashlib
import json

import pandas as pd
import streamlit as st

from pages import _auth, _ui
from xc_core.analysis.node_time import noise_test
from xc_core.errors import XcInputError
from xc_core.review.diff import change_lines, diff_markdown, diff_reports, different_models, time_notes, verdict_line
from xc_core.review.gate import GateRules, regressions
from xc_core.review.model_diff import model_diff_of_runs
from xc_core.review.model_diff_text import model_change_lines, rename_items, summary_line
from xc_core.review.runs import Run, parse_report
from xc_core.store import run_key

_ui.guard_page()
st.title("History")
store = _ui._service().store


def _open(key: str) -> None:
    """A callback (it runs before the sidebar is built), so it may set the sidebar's widgets."""
    st.session_state.update(source_mode=_ui.SAVED_RUN, saved_run=key, report=None, report_key=None)


with st.expander("Open a report.json (e.g. a CI artifact)"):
    uploads = st.file_uploader("report.json (with report.nodes.json.gz, when the run wrote one beside it)",
                               type=["json"], key="history_import", accept_multiple_files=True)
    if uploads:
        report_file, sidecar = _ui.report_and_sidecar(uploads)
        data = report_file.getvalue()
        try:
            imported = parse_report(data, _ui._safe_filename(report_file.name), sidecar)
        except XcInputError as e:
            st.error(_ui.plain(e.for_dashboard()))
        else:
            key = run_key(imported=hashlib.sha256(data).hexdigest())
            try:
                if not store.has(key):
                    imported.setdefault("run", {})["key"] = key
                    store.put(key, imported, None, origin="imported", user=_auth.user())
            except OSError as e:        # the server's disk, not the file: one line, no path
                st.error(f"The report could not be kept in the run store ({_ui.plain(e.strerror or type(e).__name__)}"
                         "); free space where the dashboard server keeps its runs (XC_HOME).")
            else:
                st.success(f"Imported as run `{key[:12]}` — {_ui.plain(imported['source']['name'])}, "
                           f"{len(imported['targets'])} target(s). Its artifacts stay in CI; the report opens here.")
                if st.button("Open it", key="history_open_import", on_click=_open, args=(key,)):
                    st.switch_page("pages/overview.py")

runs = store.runs()
if not runs:
    st.info("No runs yet. Every dashboard analysis and every `xc analyze` (without --no-store) is "
            "kept here, and survives restarts.")
    st.stop()

st.caption(f"{len(runs)} run(s) in {_ui.plain(store.root)} · {store.total_bytes() / 2**20:.1f} MiB; the least "
           "recently used are evicted beyond XC_STORE_MB.")
rows = []
for r in runs:
    s = r["summary"]
    v = s.get("verdicts") or {}
    rows.append({"run": r["key"][:12], "when": datetime.datetime.fromtimestamp(r["created"]).strftime("%Y-%m-%d %H:%M"),
                 "model": r["source_name"] or "?", "from": s.get("origin", "—"), "by": r.get("user") or "—",
                 "ok / failed": f"{s['ok']} / {s['error']}" if s else "—",
                 "checklist": f"{v.get('fail', 0)} fail · {v.get('warn', 0)} warn · {v.get('pass', 0)} pass"
                 if s else "—",
                 "targets": r["targets"] or "—", "kind": s.get("kind") or "—",
                 "sha256": (r["source_sha256"] or "")[:12], "MiB": round(r["bytes"] / 2**20, 2),
                 "link": f"?run={r['key'][:12]}"})
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")

labels = {r["key"]: _ui.run_label(r) for r in runs}
keys = list(labels)
c1, c2 = st.columns([4, 1])
pick = c1.selectbox("Run", keys, format_func=lambda k: labels[k], key="history_pick")
c2.write("")
if c2.button("Open", key="history_open", on_click=_open, args=(pick,), type="primary"):
    st.switch_page("pages/overview.py")

st.subheader("Compare two runs")
if len(keys) < 2:
    st.info("Compare needs two runs: analyze another model (or the same model with other targets).")
    st.stop()
c1, c2 = st.columns(2)
new_key = c2.selectbox("New", keys, index=0, format_func=lambda k: labels[k], key="history_new")
# The baseline a reviewer means: the run of the same model before this one, else the run before it.
by_key = {r["key"]: r for r in runs}
same = [k for k in keys if k != new_key and by_key[k]["source_name"] == by_key[new_key]["source_name"]]
default_base = same[0] if same else next(k for k in keys if k != new_key)
if st.session_state.get("history_base") not in keys:
    st.session_state["history_base"] = default_base
base_key = c1.selectbox("Base", keys, format_func=lambda k: labels[k], key="history_base")
base, new = store.get(base_key), store.get(new_key)
if base is None or new is None:
    st.error("One of the runs is gone from the store.")
    st.stop()

def _model_diff(base_key: str, new_key: str) -> dict:
    """The two runs' model diff, with their files (exact weight changes), kept for the page's reruns."""
    kept = st.session_state.get("history_model_diff")
    if kept and kept[0] == (base_key, new_key):
        return kept[1]
    md = model_diff_of_runs(Run(base, labels[base_key], base_key, store.files(base_key)),
                            Run(new, labels[new_key], new_key, store.files(new_key)))
    st.session_state["history_model_diff"] = ((base_key, new_key), md)
    return md


try:
    d = diff_reports(base, new, model=_model_diff(base_key, new_key))
    regs = regressions(d, GateRules())       # the defaults; a CI job passes its repository's .xc-gate.toml
except Exception as e:  # noqa: BLE001 — xc's bug, but the page still lists and opens runs
    st.error(_ui.plain(f"These two runs cannot be compared (an error in xc: {type(e).__name__}); open each on its "
                       "own, or compare them from the CLI with XC_DEBUG=1 for the details."))
    st.stop()

other_model = different_models(d)
if other_model:     # say it first: the "regressions" below then compare targets, not the same ops
    st.warning(_ui.plain(other_model))
if regs:
    st.error(f"**{len(regs)} regression(s)** under the default gate rules (`diff --gate`):")
    st.dataframe(pd.DataFrame(regs), hide_index=True, width="stretch")
else:
    st.success("No regression under the default gate rules.")
# What changed in the model first: the decisions below follow from it (each change line says its cause).
st.markdown("**Model changes:** " + _ui.plain(summary_line(d["model"])))
model_lines = model_change_lines(d["model"])
if model_lines:
    st.dataframe(pd.DataFrame({"model change": model_lines}), hide_index=True, width="stretch")
quiet = ["".join(v for _, v in item) for _, item in rename_items(d["model"])] + d["model"].get("notes", [])
if quiet:
    st.caption(" · ".join(_ui.plain(q) for q in quiet))
lines = change_lines(d)
if lines:
    st.dataframe(pd.DataFrame([{"target": t, "change": line} for t, line in lines]), hide_index=True,
                 width="stretch")
else:
    st.info("No change in any compiler decision between these runs.")
# Times that moved without a change: within the runs' noise, a shift every node shared, or not judged (no spread).
notes = time_notes(d)
if notes or any((t.get("time") or {}).get("compared") for t in d["targets"].values()):
    st.caption(" · ".join(f"{_ui.code(t)} {_ui.plain(line)}" for t, line in notes)
               + ("; " if notes else "") + "Time test: " + _ui.plain(noise_test()) + ".")
st.markdown(f"**{_ui.plain(verdict_line(d, None))}**")      # the default rules, as `regs` above
if d["targets_added"] or d["targets_removed"]:
    st.caption("Targets only in one run: " + _ui.plain(", ".join(d["targets_added"] + d["targets_removed"])))
c1, c2 = st.columns(2)
# Rendered only when clicked: most reruns of this page never download the diff.
c1.download_button("Diff as Markdown (PR comment)", lambda: diff_markdown(d, regs), file_name="xc-diff.md",
                   key="history_dl_md", on_click="ignore")
c2.download_button("Diff as JSON", lambda: json.dumps({**d, "regressions": regs}, indent=1), file_name="xc-diff.json",
                   key="history_dl_json", on_click="ignore")
st.caption(f"From the CLI: `xc diff {base_key[:12]} {new_key[:12]} --gate --format md`")
