"""The dashboard through streamlit.testing.v1.AppTest: opens on tts-mini with no upload and renders the Overview.

Each scenario starts a fresh AppTest with its widget state preset: with the app's `pages/` folder, AppTest drops
the sidebar tree on a rerun (a harness quirk; the served app is checked in test_browser.py)."""
import os

import pytest
from apptest_wait import until_report
from streamlit.testing.v1 import AppTest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_app(**state):
    def make():
        at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
        for k, v in state.items():
            at.session_state[k] = v
        return at
    return until_report(make)


@pytest.mark.slow
def test_opens_on_tts_mini_overview():
    at = run_app()
    assert not at.exception
    assert at.session_state["sample"] == "tts-mini"                 # the app's own key …
    assert at.selectbox(key="_xc_widget_sample").value == "tts-mini"    # … drawn by the sidebar's widget
    assert at.title[0].value == "Overview"
    table = at.table[0].value                                  # a static table: nothing cut off
    from xc_core.targets import default_target_ids
    # the cells are escaped Markdown (st.table renders it); a target that failed would read "id (error)"; the
    # default set leaves the deprecated ort-nnapi out
    assert {t.replace("\\", "") for t in table["target"]} == set(default_target_ids())
    assert all("→" in v for v in table["ops"])
    assert (at.dataframe[0].value["status"] == "ok").all()     # "All columns" keeps the status column


def test_no_targets_explains_itself():
    at = run_app(targets=[])
    assert not at.exception
    assert not at.error and "Pick at least one target" in at.info[0].value     # an invitation, not an error


@pytest.mark.slow
def test_other_sample_and_one_target():
    at = run_app(sample="vision-mini", targets=["ort-cpu"])
    assert not at.exception
    assert list(at.dataframe[0].value["target"]) == ["ort-cpu"]
    assert any("vision-mini" in c.value.replace("\\", "") for c in at.caption)   # the name is escaped Markdown


def test_upload_mode_without_a_file_asks_for_one():
    at = run_app(source_mode="Upload")
    assert not at.exception
    assert not at.error and "Drop a model in the sidebar" in at.info[0].value


@pytest.mark.slow
def test_inputs_panel_edits_rerun_the_analysis():
    """The Inputs panel shows what xc picked; an edited field is an override of the next analysis."""
    at = run_app(targets=["ort-cpu"])
    assert not at.exception
    auto = at.session_state["in|sample:tts-mini|auto"]
    assert auto["ranges"]["tokens"][0] == 0 and auto["ranges"]["tokens"][1] > 5
    assert at.number_input(key="in|sample:tts-mini|hi|tokens").value == auto["ranges"]["tokens"][1]
    at = run_app(targets=["ort-cpu"], **{"in|sample:tts-mini|auto": auto, "in|sample:tts-mini|hi|tokens": 5})
    assert not at.exception
    tokens = at.session_state["report"]["source"]["inputs"][0]
    assert (tokens["low"], tokens["high"]) == (0, 5)
    rows = at.dataframe[-1].value
    assert "integers in [0, 5)" in rows.loc[rows["input"] == "tokens", "values from"].iloc[0]


@pytest.mark.slow
def test_a_variant_added_in_the_sidebar_is_its_own_column():
    """The sidebar's variant form adds ort-cpu[level=basic] next to ort-cpu; both are rows of the Overview."""
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    for k, v in {"sample": "vision-mini", "targets": ["ort-cpu"], "variant_target": "ort-cpu",
                 "variant_opt_ort-cpu_level": "basic"}.items():
        at.session_state[k] = v
    at.run()
    at.button(key="variant_add").click().run()     # the callback runs before the script
    assert at.session_state["targets"] == ["ort-cpu", "ort-cpu[level=basic]"]
    assert at.session_state["target_variants"] == ["ort-cpu[level=basic]"]
    at = run_app(sample="vision-mini", targets=["ort-cpu", "ort-cpu[level=basic]"],
                 target_variants=["ort-cpu[level=basic]"])
    assert not at.exception
    assert list(at.dataframe[0].value["target"]) == ["ort-cpu", "ort-cpu[level=basic]"]
    assert at.multiselect(key="overview_pairs").value[0] == "ort-cpu vs ort-cpu[level=basic]"
    assert any(m.value.startswith("- ort\\-cpu vs ort\\-cpu\\[level=basic\\]:") and "fuses" in m.value
               for m in at.markdown)


def test_a_variant_with_no_option_set_is_refused_in_words():
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600)
    for k, v in {"sample": "vision-mini", "targets": ["ort-cpu"], "variant_target": "ort-cpu"}.items():
        at.session_state[k] = v
    at.run()
    at.button(key="variant_add").click().run()
    assert at.session_state["targets"] == ["ort-cpu"]
    assert "Set at least one option" in at.session_state["variant_error"]


def test_a_new_session_joins_the_analysis_the_server_started(monkeypatch):
    """The server's start-up hook (app.py → _ui.warm_start) starts the default sample's analysis with the default
    targets under the key a new session computes, so the first visitor joins it instead of starting another."""
    from pages import _ui
    monkeypatch.delenv("XC_WARM_START", raising=False)
    key = _ui.warm_start()
    assert key and _ui._service().get(key) is not None
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=600).run()
    assert not at.exception
    state = at.session_state
    assert key in (state["pending"] if "pending" in state else None, state["report_key"] if "report_key" in state
                   else None)
    monkeypatch.setenv("XC_WARM_START", "0")
    assert _ui.warm_start() is None
