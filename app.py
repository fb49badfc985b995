"""xc dashboard — router only: page config, the sidebar (source and targets), navigation.

The sidebar produces one Report (cached by content hash) and puts it in session state; every page only renders it.
"""
import streamlit as st

from pages import _ui

st.set_page_config(page_title="xc — what each compiler did", page_icon="🧭", layout="wide")

_ui.sidebar_and_analyze()

PAGES = {
    "Report": [
        st.Page("pages/overview.py", title="Overview", icon="📋", default=True),
    ],
    "Compare": [
        st.Page("pages/heatmap.py", title="Heat map", icon="🟩"),
        st.Page("pages/fusion.py", title="Fusion", icon="🔗"),
        st.Page("pages/drift.py", title="Drift", icon="📈"),
        st.Page("pages/precision.py", title="Precision", icon="🎯"),
        st.Page("pages/checklist.py", title="Checklist", icon="✅"),
    ],
    "Accelerators": [
        st.Page("pages/fallbacks.py", title="Fallbacks", icon="🧯"),
        st.Page("pages/coreml.py", title="Core ML", icon="🍏"),
    ],
}
st.navigation(PAGES).run()
