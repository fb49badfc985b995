"""Test-only router: the real sidebar (source, targets → Report), then the Topology page as the default page.

app.py is owned elsewhere and AppTest can only switch to pages st.navigation registered, so the page's tests run
through this router (same sidebar, same session-state keys)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import streamlit as st  # noqa: E402

from pages import _ui  # noqa: E402

st.set_page_config(page_title="xc — topology (test router)", layout="wide")
_ui.sidebar_and_analyze()
st.navigation([st.Page(os.path.join(ROOT, "pages", "topology.py"), title="Topology", default=True),
               st.Page(os.path.join(ROOT, "pages", "overview.py"), title="Overview")]).run()
