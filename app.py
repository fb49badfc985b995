"""xc dashboard — router only: page config, the sidebar (source and targets), navigation.

The sidebar produces one Report (cached by content hash) and puts it in session state; every page only renders it.
"""
import os

import streamlit as st

from pages import _ui

_ui.leave_legacy_pages_mode()  # before any widget: the first run of a fresh server must not build the sidebar
st.set_page_config(page_title="xc — what each compiler did", page_icon=":material/compare_arrows:", layout="wide")
st.logo(os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "logo.svg"), size="large")  # name above pages

_ui.sidebar_and_analyze()
st.navigation(_ui.pages()).run()
