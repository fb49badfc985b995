"""The self-contained HTML report: renders reports that lack blocks (saying why each section is empty), escapes
what came from the upload, and opens offline in headless Chromium — its first screen without drawing a figure,
each figure drawn when it is scrolled to or its <details> opened, no request leaving the file, and the targets
table as wide as the page at most."""
import base64
import copy
import gzip
import json
import os
import re
from html import escape as html_escape
from html.parser import HTMLParser

import pytest
from plotly.offline import get_plotlyjs

from browser import CHROMIUM, FLAGS
from xc_core.review.html import SECTIONS, _inert_json, report_html

HOSTILE = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


class _Links(HTMLParser):
    """Every src / href / srcset / action / data / poster attribute value, and every tag, of a document."""

    def __init__(self):
        super().__init__()
        self.urls, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "srcset", "action", "data", "poster")]


def _plotly_js(html: str) -> str | None:
    """plotly.js as the report packs it (gzip + base64 in an inert script), unpacked; None when not there."""
    m = re.search(r'<script type="application/octet-stream" id="xc-plotly-js" data-encoding="gzip\+base64">'
                  r"([A-Za-z0-9+/=]*)</script>", html)
    return gzip.decompress(base64.b64decode(m.group(1))).decode() if m else None


def _assert_sane(html: str) -> None:
    for sid, title in SECTIONS:
        assert f'<section id="{sid}"><h2>{title}</h2>' in html
    assert "could not be rendered" not in html      # no section fell back to its exception guard
    assert HOSTILE not in html
    figures = html.count('class="xc-fig"')
    assert html.count("id=\"xc-plotly-js\"") == (1 if figures else 0)     # the library once, only when drawn
    if figures:
        assert _plotly_js(html) == get_plotlyjs()
    # Nothing is fetched: no src/href that leaves the file (only #section links), no stylesheet, frame or image.
    links = _Links()
    links.feed(html)
    assert all(u.startswith("#") for u in links.urls), [u for u in links.urls if not u.startswith("#")]
    assert not {"link", "img", "iframe", "object", "embed", "base"} & set(links.tags)
    assert not re.search(r"<script[^>]*\ssrc\s*=|url\(|@import", html)
    # Every script is ours and inert except one: the figure loader.
    types = re.findall(r"<script([^>]*)>", html)
    assert sum(t == "" for t in types) == (1 if figures else 0)
    assert all(t == "" or 'type="application/json"' in t or 'type="application/octet-stream"' in t for t in types)


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


def _sixteen_targets(report: dict) -> dict:
    """The report with every target twice (a '-b' copy beside each), for the layout of 16 target columns."""
    r = copy.deepcopy(report)
    for tid in list(r["targets"]):
        r["targets"][f"{tid}-b"] = {**copy.deepcopy(r["targets"][tid]), "id": f"{tid}-b"}
        r["checklist"]["targets"][f"{tid}-b"] = copy.deepcopy(r["checklist"]["targets"][tid])
    for p in (r.get("fusion_matrix") or {}).get("patterns") or []:
        p["targets"].update({f"{t}-b": n for t, n in list(p["targets"].items())})
    assert len(r["targets"]) >= 16
    return r


class _TargetColumns(HTMLParser):
    """Per table: the header cells that name a target."""

    def __init__(self, targets):
        super().__init__()
        self.targets, self.tables, self._in_th = set(targets), [], False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        self._in_th = tag == "th"

    def handle_endtag(self, tag):
        self._in_th = self._in_th and tag != "th"

    def handle_data(self, data):
        if self._in_th and data in self.targets:
            self.tables[-1].append(data)


@pytest.mark.slow
def test_tables_with_a_column_per_target_are_grouped_by_family(sample_report):
    """15+ targets side by side ran 3,800–4,900 px wide: the Fusion patterns, Stages and Checklist grids hold at most
    TARGET_COLUMNS targets a table, by toolchain family, and every target still has its column."""
    from xc_core.review.html import TARGET_COLUMNS
    from xc_core.views.figures import fusion_targets
    from xc_core.views.rows import stage_targets
    report, _ = sample_report("vision-mini")
    r = _sixteen_targets(report)
    html = report_html(r)
    _assert_sane(html)
    for sid in ("fusion", "stages", "checklist"):
        section = html.split(f'<section id="{sid}">', 1)[1].split("</section>", 1)[0]
        parser = _TargetColumns(r["targets"])
        parser.feed(section)
        grids = [cols for cols in parser.tables if len(cols) > 1]
        assert len(grids) >= 2, sid
        assert all(len(cols) <= TARGET_COLUMNS for cols in grids), (sid, grids)
        expected = {"fusion": fusion_targets(r), "stages": stage_targets(r), "checklist": r["checklist"]["targets"]}
        assert len(expected[sid]) >= 14 and {t for cols in grids for t in cols} >= set(expected[sid]), sid
    assert "<h3>ONNX Runtime</h3>" in html                        # each group titled by its families


def test_report_whose_targets_all_errored_renders_and_escapes():
    html = report_html(_all_errored())
    _assert_sane(html)
    assert ESCAPED in html                                  # source name and error text, shown escaped
    assert f"compile failed: {ESCAPED}" in html
    assert "No target produced a graph" in html
    assert "this source has no reference" in html
    assert "None of the targets has an accelerator" in html
    assert "no checklist" in html.lower()
    assert 'class="xc-fig"' not in html and "xc-plotly-js" not in html     # no figure, so no plotly.js either


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
def test_output_is_deterministic(sample_report):
    report, _ = sample_report("vision-mini")
    assert report_html(report) == report_html(copy.deepcopy(report))


def test_figures_are_inert_data_until_drawn(sample_report):
    """No figure is drawn by the HTML itself: each is an empty placeholder and its JSON in an inert script, with
    the hostile names of the upload escaped inside the JSON too."""
    report, _ = sample_report("vision-mini")
    r = copy.deepcopy(report)
    r["alignment"]["source_ops"][0]["module_path"] = "</script><script>alert(1)</script><!--"
    html = report_html(r)
    _assert_sane(html)
    assert "Plotly.newPlot(" not in html.split('id="xc-plotly-js"')[0]      # nothing calls plotly while parsing
    ids = re.findall(r'<div id="(fig-[^"]+)" class="xc-fig" data-state="waiting"', html)
    assert len(ids) >= 6
    for fid in ids:
        assert html.count(f'<script type="application/json" id="{fid}-json">') == 1
    # The label is escaped for plotly (which reads labels as HTML), then for the <script> element it sits in.
    assert "\\u0026lt;/script\\u0026gt;\\u0026lt;script\\u0026gt;alert(1)" in html
    assert "</script><script>alert(1)" not in html
    hostile = {"name": "</script><!--<script>&amp;\u2028"}
    inert = _inert_json(hostile)
    assert not re.search("[<>&]", inert) and json.loads(inert) == hostile
    assert html.count('id="xc-template-1"') == 1 and '"template":{' not in html.split('id="xc-template-1"')[0]


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian chromium is not installed")
def test_html_report_draws_figures_when_scrolled_to_or_opened_offline(sample_report, tmp_path):
    from playwright.sync_api import sync_playwright
    report, _ = sample_report("vision-mini")
    r = copy.deepcopy(report)
    # A variant with a long id must not widen the targets table past the page.
    long_id = "openvino-cpu[inference_precision=f32,performance_hint=THROUGHPUT]"
    r["targets"] = {(long_id if k == "openvino-cpu" else k): v for k, v in r["targets"].items()}
    r["checklist"]["targets"] = {(long_id if k == "openvino-cpu" else k): v
                                 for k, v in r["checklist"]["targets"].items()}
    html = report_html(r)
    _assert_sane(html)
    n_figures = html.count('class="xc-fig"')
    assert n_figures >= 6                                   # heat map, counts, histograms + scatters, layers
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    outside, errors = [], []

    def route(req):
        url = req.request.url
        if url.startswith(("file:", "data:", "blob:")):
            req.continue_()
        else:
            outside.append(url)
            req.abort()

    states = "() => [...document.querySelectorAll('.xc-fig')].map(d => d.dataset.state)"
    drawn = "id => !!document.querySelector('#' + id + ' svg.main-svg')"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            context.route("**/*", route)
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri(), wait_until="load", timeout=120_000)
            for sid, title in SECTIONS:
                heading = page.locator(f"#{sid} > h2")
                assert heading.is_visible() and heading.inner_text() == title
            # At load no figure is drawn that is not near the first screen (the loader draws 300 px ahead) or that
            # sits in a closed <details>; here that is every one — the first screen is text and tables — so
            # plotly.js has not even been unpacked.
            away = page.evaluate("""() => [...document.querySelectorAll('.xc-fig')].filter(d =>
                d.getBoundingClientRect().top > window.innerHeight + 300 || d.closest('details:not([open])'))
                .map(d => d.dataset.state)""")
            assert away == ["waiting"] * n_figures
            assert page.evaluate("typeof window.Plotly") == "undefined"
            # The targets table fits the page at 1280 px: its box scrolls nothing sideways, nor does the page.
            fit = page.evaluate("""() => { const t = document.querySelector('#overview table');
                return [t.parentElement.scrollWidth, t.parentElement.clientWidth,
                        document.documentElement.scrollWidth, window.innerWidth]; }""")
            assert fit[0] <= fit[1] and fit[2] <= fit[3], fit
            page.screenshot(path=str(tmp_path / "first-screen.png"))

            # Scrolled to: the per-layer drift figure (far down) is drawn; a figure in a closed <details> is not,
            # even when its <details> is on screen.
            layers = page.locator(".xc-fig[id*=drift-layers]")
            layers.scroll_into_view_if_needed()
            page.wait_for_function(drawn, arg=layers.get_attribute("id"), timeout=120_000)
            closed = page.locator("details.fig").first
            closed.scroll_into_view_if_needed()
            inside = closed.locator(".xc-fig")
            ids = [inside.nth(k).get_attribute("id") for k in range(inside.count())]
            assert ids and all(page.evaluate(f"document.getElementById('{i}').dataset.state") == "waiting"
                               for i in ids)
            closed.locator("summary").click()                 # opened: its figures are drawn
            for i in ids:
                page.wait_for_function(drawn, arg=i, timeout=120_000)

            # Every figure draws once it is reached: open every <details>, scroll to each figure.
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
            for k in range(n_figures):
                fig = page.locator(".xc-fig").nth(k)
                fig.scroll_into_view_if_needed()
                page.wait_for_function(drawn, arg=fig.get_attribute("id"), timeout=120_000)
            assert page.evaluate(states) == ["drawn"] * n_figures
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)

            # 16 targets: no table of any section scrolls sideways at 1280 px, nor does the page (the tables with
            # a column per target are grouped by family; long names wrap).
            wide = tmp_path / "report-16-targets.html"
            wide.write_text(report_html(_sixteen_targets(r)), encoding="utf-8")
            page.goto(wide.as_uri(), wait_until="load", timeout=120_000)
            overflowing = page.evaluate("""() => [...document.querySelectorAll('div.scroll')]
                .filter(d => d.scrollWidth > d.clientWidth + 1)
                .map(d => [d.closest('section').id, d.scrollWidth, d.clientWidth])""")
            assert overflowing == [], overflowing
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        finally:
            browser.close()
    assert not outside, outside
    assert not errors, errors
    print(f"HTML report: {path} ({len(html.encode()):,} bytes), screenshots in {tmp_path}")
