"""Checklist: the five questions, answered per target with a verdict, its evidence and the page that shows it."""
import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.analysis.checklist import SHORT_QUESTION

report = _ui.require_report()
_ui.header(report, "Checklist")

ICON = {"pass": "pass", "warn": "warn", "fail": "FAIL", "not applicable": "n/a"}
COLOR = {"pass": "green", "warn": "orange", "fail": "red", "not applicable": "gray"}
PAGE = {"overview": "pages/overview.py", "fallbacks": "pages/fallbacks.py", "fusion": "pages/fusion.py",
        "drift": "pages/drift.py", "precision": "pages/precision.py"}
check = report["checklist"]
targets = list(check["targets"])
questions = [(i["id"], i["question"], i["page"]) for i in check["targets"][targets[0]]] if targets else []

grid = []
for tid in targets:      # a row per target, a column per question: fits the page at 1280 px with every target
    row = {"target": tid}
    for qid, _, _ in questions:
        row[f"({qid}) {SHORT_QUESTION[qid]}"] = ICON[check["targets"][tid][qid - 1]["verdict"]]
    grid.append(row)
st.dataframe(pd.DataFrame(grid), hide_index=True, width="stretch")
st.caption(" · ".join(f"({_ui.plain(qid)}) {_ui.plain(question)}" for qid, question, _ in questions))
th = check["thresholds"]
st.caption(f"Outputs match when rel L2 ≤ {th['match_rel_l2']:g} and cosine ≥ {th['match_cosine']}; warn up to rel "
           f"L2 {th['warn_rel_l2']:g}. Every verdict names the evidence it rests on.")

for qid, question, page in questions:
    st.subheader(f"{_ui.plain(qid)}. {_ui.plain(question)}")
    st.page_link(PAGE[page], label=f"Open {page}", icon=":material/arrow_forward:")
    for tid in targets:
        item = check["targets"][tid][qid - 1]
        ev = _ui.evidence_badge(item["evidence"]) if item["evidence"] else ""
        badge = f":{COLOR[item['verdict']]}-badge[{ICON[item['verdict']]}]"
        st.markdown(f"**{tid}** {badge} {ev} — {_ui.plain(item['detail'])}")
