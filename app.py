"""xc dashboard — router only: page config, the sidebar (source and targets), navigation.

The sidebar produces one Report (cached by content hash) and puts it in session state; every page only renders it.
"""
import streamlit as st

from pages import _ui

_ui.leave_legacy_pages_mode()  # before any widget: the first run of a fresh server must not build the sidebar
st.set_page_config(page_title="xc — what each compiler did", page_icon=":material/compare_arrows:", layout="wide")

_ui.sidebar_and_analyze()

PAGES = {
    "Report": [
        st.Page("pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    ],
    "Compare": [
        st.Page("pages/topology.py", title="Topology", icon=":material/account_tree:"),
        st.Page("pages/heatmap.py", title="Heat map", icon=":material/grid_on:"),
        st.Page("pages/fusion.py", title="Fusion", icon=":material/merge:"),
        st.Page("pages/drift.py", title="Drift", icon=":material/show_chart:"),
        st.Page("pages/precision.py", title="Precision", icon=":material/tune:"),
        st.Page("pages/checklist.py", title="Checklist", icon=":material/checklist:"),
    ],
    "Accelerators": [
        st.Page("pages/fallbacks.py", title="Fallbacks", icon=":material/warning:"),
        st.Page("pages/coreml.py", title="Core ML", icon=":material/phone_iphone:"),
    ],
}
st.navigation(PAGES).run()
