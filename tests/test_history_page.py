"""History and saved runs through AppTest: a run link that names no run is one line; an opened run renders on
every page with no analysis; a run whose report is missing from the store is said so."""
import os

import pytest
from streamlit.testing.v1 import AppTest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _app(run: str | None = None, page: str | None = None) -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=300)
    if run:
        at.query_params["run"] = run
    at.run()
    if page:
        at.switch_page(f"pages/{page}.py").run()
    return at


def test_a_run_link_to_no_run_says_so_in_one_line():
    at = _app("0123456789ab")
    assert not at.exception
    assert at.session_state["source_mode"] == "Saved run"
    assert any("no such run in the store" in e.value for e in at.error)


@pytest.mark.slow
def test_an_opened_run_renders_pages_without_analysing(sample_report):
    from xc_core.store import RunStore
    report, out = sample_report("vision-mini")
    store = RunStore()
    key, twin = "feedface" * 4, "facefeed" * 4
    store.put(twin, {**report, "run": {**report.get("run", {}), "key": twin}}, None, origin="imported")
    store.put(key, {**report, "run": {**report.get("run", {}), "key": key}}, out, origin="cli")
    for page in ("overview", "downloads", "fallbacks", "history"):
        at = _app(key[:12], page)
        assert not at.exception, (page, at.exception)
        assert at.session_state["report_key"] == key and not at.session_state["pending"]
    assert at.title[0].value == "History"
    assert any("No regression" in e.value for e in at.success)     # the same report twice
    at = _app(twin[:12], "downloads")                                # imported: a report without its files
    assert not at.exception and any("imported from a report.json" in i.value for i in at.info)
    store.delete(key)
    store.delete(twin)
    at = _app(key[:12])
    assert any("no such run" in e.value for e in at.error)


@pytest.mark.slow
def test_an_imported_reports_name_is_text_in_the_header(sample_report):
    """A report.json is anyone's file: its source name shows as written, never as a link, markup or an image."""
    import json
    import re
    from xc_core.store import RunStore
    payload = "[click](https://evil.example) @octocat <img src=x onerror=alert(1)> | pipe **bold**"
    report, _ = sample_report("vision-mini")
    hostile = json.loads(json.dumps(report))
    hostile["source"]["name"] = payload
    key = "badc0ffe" * 4
    hostile["run"] = {**hostile.get("run", {}), "key": key}
    store = RunStore()
    store.put(key, hostile, None, origin="imported")
    try:
        for page in ("overview", "downloads"):
            at = _app(key[:12], page)
            assert not at.exception, (page, at.exception)
            header = next(c.value for c in at.caption if "sha256" in c.value)
            # Every Markdown character of the name is escaped, and "://" no longer starts a URL autolink.
            assert re.search(r"(?<!\\)[\[\]()<>*|]", header.split("**")[1]) is None, header
            assert "https://" not in header and "\\[click\\]\\(https:\u2060//evil.example\\)" in header, header
    finally:
        store.delete(key)
