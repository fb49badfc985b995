"""The Overview's "Cost on this host" section: the side-by-side table of xc_core/views/cost.py, the runtimes' own
memory figures, and the caveat that these are this Linux host's CPU figures, not the device's."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from pages import _ui
from xc_core.views.cost import COST_CAVEAT, cost_host, cost_rows, runtime_memory_rows


def overview(report) -> None:
    rows = cost_rows(report)
    if not rows:
        return
    st.subheader("Cost on this host")
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption(f"Host: {_ui.plain(cost_host(report))}. {_ui.plain(COST_CAVEAT)} Peak memory: in brackets, its "
               "growth over the resident size before the run; steady inference: the median of the runs after ×.")
    own = runtime_memory_rows(report)
    if own:
        with st.expander("The runtimes' own memory figures"):
            st.dataframe(pd.DataFrame(own), hide_index=True, width="stretch")
