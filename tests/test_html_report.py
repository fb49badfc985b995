"""The self-contained HTML report: renders reports that lack blocks (saying why each section is empty), escapes
what came from the upload, and opens offline in headless Chromium with every figure drawn and no request leaving
the file."""
import copy
import os
import re
from html import escape as html_escape

import pytest
from plotly.offline import get_plotlyjs

from browser import CHROMIUM, FLAGS
from xc_core.review.html import SECTIONS, report_html

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def _assert_sane(html: str) -> None:
    for sid, title in SECTIONS:
        assert f'<section id="{sid}"><h2>{title}</h2>' in html
    assert "could not be rendered" not in html      # no section fell back to its exception guard
    assert HOSTILE not in html
    assert html.count(get_plotlyjs()) == 1                  # the library inlined once, in the head
    ours = html.replace(get_plotlyjs(), "")                 # (its defaults name a CDN it never fetches here)
    assert not re.search(r"<(link|img|iframe)\b|<script[^>]*\ssrc\s*=|url\(|href=\"?https?:", ours)


def _all_errored() -> dict:
    """A report whose every target failed before producing anything (built by hand: no analysis needed)."""
    target = {"id": "ort-cpu", "label": "ORT CPU", "status": "error", "error": f"compile failed: {HOSTILE}",
              "error_stage": "compile", "evidence": {}, "op_count_before": None, "op_count_after": None,
              "op_counts": None, "fusions": None, "precision": None, "graph": None, "drift": None, "info": {},
              "layer_drift": None}
    return {"schema_version": "1.0", "xc_version": "0.1.0", "created_at": "2026-01-01T00:00:00+00:00",
            "source": {"kind": "onnx", "name": HOSTILE, "sha256": "0" * 64, "inputs": []},
            "inputs": {"origin": "seeded-random"}, "capture": None, "reference": None,
            "targets": {"ort-cpu": target, "ort-nnapi": {**target, "id": "ort-nnapi"}},
            "checklist": {"targets": {}, "thresholds": {}}}


def _degraded(report: dict, kind: str) -> dict:
    r = copy.deepcopy(report)
    if kind == "no-reference":
        r["reference"] = None
        for t in r["targets"].values():
            t["drift"] = t["layer_drift"] = None
    elif kind == "no-capture":
        r["capture"] = None
        r.pop("alignment", None)
        r.pop("fusion_matrix", None)
    elif kind == "no-accelerator":
        r["targets"] = {k: v for k, v in r["targets"].items() if k in ("ort-cpu", "openvino-cpu")}
        r["checklist"]["targets"] = {k: v for k, v in r["checklist"]["targets"].items() if k in r["targets"]}
    elif kind == "one-target-errored":
        t = r["targets"]["ort-nnapi"]
        t.update(status="error", error=f"NNAPI said {HOSTILE}", graph=None, op_counts=None, fusions=None,
                 drift=None, layer_drift=None, info={}, op_count_after=None, precision=None)
    elif kind == "single-graph":
        keep = next(iter(r["targets"]))
        for tid, t in r["targets"].items():
            if tid != keep:
                t["graph"] = None
    return r


def test_report_whose_targets_all_errored_renders_and_escapes():
    html = report_html(_all_errored())
    _assert_sane(html)
    assert ESCAPED in html                                  # source name and error text, shown escaped
    assert f"compile failed: {ESCAPED}" in html
    assert "No target produced a graph" in html
    assert "this source has no reference" in html
    assert "None of the targets has an accelerator" in html
    assert "no checklist" in html.lower()
    assert 'class="plotly-graph-div"' not in html


@pytest.mark.parametrize("kind,says", [
    ("no-reference", "this source has no reference"),
    ("no-capture", "No source-op alignment in this report"),
    ("no-accelerator", "None of the targets has an accelerator"),
    ("one-target-errored", f"NNAPI said {ESCAPED}"),
    ("single-graph", "Only one target produced a graph"),
])
def test_reports_lacking_blocks_say_why(sample_report, kind, says):
    report, _ = sample_report("vision-mini")
    html = report_html(_degraded(report, kind))
    _assert_sane(html)
    assert says in html
    if kind == "no-capture":
        assert "No fusion matrix" in html


def test_hostile_names_are_escaped_everywhere(sample_report):
    report, _ = sample_report("vision-mini")
    r = copy.deepcopy(report)
    r["source"]["name"] = HOSTILE
    nnapi = r["targets"]["ort-nnapi"]
    fb = next(n for n in nnapi["graph"]["nodes"] if n.get("fallback"))
    fb["fallback_reason"] = HOSTILE                         # lands in the fallback table
    fb["module_path"] = HOSTILE
    r["checklist"]["targets"]["ort-cpu"][0]["detail"] = HOSTILE
    r["alignment"]["source_ops"][0]["module_path"] = HOSTILE   # a heat map row label, inside the figure JSON
    # A target id names figure divs, table columns and headings.
    evil = 'x"><img src=x onerror=alert(1)>'
    r["targets"] = {(evil if k == "ort-cpu-int8" else k): v for k, v in r["targets"].items()}
    r["checklist"]["targets"] = {(evil if k == "ort-cpu-int8" else k): v for k, v in r["checklist"]["targets"].items()}
    html = report_html(r)
    _assert_sane(html)
    assert html.count(html_escape(evil)) >= 3
    assert f"<title>xc report — {ESCAPED}</title>" in html
    assert html.count(ESCAPED) >= 4


def test_output_is_deterministic(sample_report):
    report, _ = sample_report("vision-mini")
    assert report_html(report) == report_html(copy.deepcopy(report))


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
def test_html_report_opens_offline_in_headless_chromium(sample_report, tmp_path):
    from playwright.sync_api import sync_playwright
    report, _ = sample_report("vision-mini")
    html = report_html(report)
    _assert_sane(html)
    n_figures = html.count('class="plotly-graph-div"')
    assert n_figures >= 6                                   # heat map, counts, histogram + scatter, layers, panes
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")

    outside, errors = [], []

    def route(r):
        url = r.request.url
        if url.startswith("file:") or url.startswith("data:"):
            r.continue_()
        else:
            outside.append(url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", route)
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri(), timeout=120_000)
            page.wait_for_function(f"document.querySelectorAll('.js-plotly-plot').length >= {n_figures}",
                                   timeout=120_000)
            for sid, title in SECTIONS:
                heading = page.locator(f"#{sid} > h2")
                assert heading.is_visible() and heading.inner_text() == title
            drawn = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
                .map(d => d.querySelectorAll('svg.main-svg, canvas').length)""")
            assert len(drawn) >= n_figures and all(drawn), drawn
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert not outside, outside
    assert not errors, errors
    print(f"HTML report: {path} ({len(html.encode()):,} bytes), screenshot {tmp_path / 'report.png'}")
