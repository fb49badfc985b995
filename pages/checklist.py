"""Checklist: the five questions, answered per target with a verdict, its evidence and the page that shows it."""
import streamlit as st

from pages import _ui
from xc_core.views.rows import checklist_grid, style_verdicts, verdict_text

report = _ui.require_report()
_ui.header(report, "Checklist")

COLOR = {"pass": "green", "warn": "orange", "fail": "red", "not applicable": "gray"}
PAGE = {"overview": "pages/overview.py", "fallbacks": "pages/fallbacks.py", "fusion": "pages/fusion.py",
        "drift": "pages/drift.py", "precision": "pages/precision.py"}
check = report.checklist
targets = list(check.targets)
questions = [(i.id, i.question, i.page) for i in check.targets[targets[0]]] if targets else []

# A row per target, a column per question, each verdict with the Markdown report's symbol on its colour. A static
# table: every cell whole at any width (a data grid cuts the last columns off behind a scroll); it renders
# Markdown, so every cell is escaped.
grid = checklist_grid(report)
if grid:
    st.table(style_verdicts(grid, [c for c in grid[0] if c != "target"], text=_ui.plain), hide_index=True)
st.caption(" · ".join(f"({_ui.plain(qid)}) {_ui.plain(question)}" for qid, question, _ in questions))
th = check.thresholds
st.caption(f"Outputs match when rel L2 ≤ {th['match_rel_l2']:g} and cosine ≥ {th['match_cosine']}; warn up to rel "
           f"L2 {th['warn_rel_l2']:g}. Every verdict names the evidence it rests on.")

for qid, question, page in questions:
    st.subheader(f"{_ui.plain(qid)}. {_ui.plain(question)}")
    st.page_link(PAGE[page], label=f"Open {page}", icon=":material/arrow_forward:")
    for tid in targets:
        item = check.targets[tid][qid - 1]
        ev = _ui.evidence_badge(item.evidence) if item.evidence else ""
        badge = f":{COLOR.get(item.verdict, 'gray')}-badge[{_ui.plain(verdict_text(item.verdict))}]"
        st.markdown(f"**{_ui.plain(tid)}** {badge} {ev} — {_ui.plain(item.detail)}")
