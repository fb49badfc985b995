"""The README as a front door, the documentation site (docs/ + mkdocs.yml, built strictly so no link or page rots) and
`xc docs`, which builds and serves it."""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import urllib.request
from html.parser import HTMLParser

import pytest

from xc_core import cli, docs_site
from xc_core.errors import XcInputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
CONFIG = os.path.join(ROOT, "mkdocs.yml")
# [text](target) and ![alt](target); a target ends at whitespace or the closing parenthesis
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _headings(markdown: str) -> list[str]:
    """The heading texts of a Markdown file, outside fenced code."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line.lstrip("#").strip())
    return found


def _anchor(heading: str) -> str:
    # The slug mkdocs.yml configures, which is GitHub's: the same #anchor works on the site and on GitHub.
    from pymdownx.slugs import slugify
    return slugify(case="lower")(heading, "-")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> str:
    """The site as `xc docs --out DIR` writes it (strict, the default)."""
    out = str(tmp_path_factory.mktemp("site"))
    assert cli.main(["docs", "--out", out]) == 0
    return out


# --- README ---------------------------------------------------------------------------------------------------------

def test_readme_is_a_front_door_that_starts_with_the_two_commands():
    lines = _read(README).splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the manual belongs in docs/"
    assert lines[0].startswith("# xc")
    # test_dashboard_auth.py runs the first block as it is: setup, then the dashboard
    assert lines[1:5] == ["", "```bash", lines[3], "```"]
    assert "pip install -r requirements.txt" in lines[3] and lines[3].endswith("streamlit run app.py")
    assert lines[5:9] == ["", "```bash", "bash tests/run.sh", "```"]


def test_every_relative_link_in_the_readme_reaches_a_file_and_its_heading():
    text = _read(README)
    links = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]
    assert len(links) >= 15 and any(t.endswith(".png") for t in links)      # the docs pages and a screenshot
    for target in links:
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(ROOT, path))
        assert full.startswith(ROOT + os.sep) and os.path.isfile(full), f"README links to a missing {target}"
        if anchor:
            assert anchor in {_anchor(h) for h in _headings(_read(full))}, f"README: no heading for #{anchor} in {path}"


def test_every_readme_section_of_the_docs_site_is_linked_from_it():
    text = _read(README)
    for name in sorted(os.listdir(DOCS)):
        if name.endswith(".md") and name != "index.md":
            assert f"(docs/{name}" in text, f"README does not link docs/{name}"


# --- the site -------------------------------------------------------------------------------------------------------

def _nav_files(nav) -> set[str]:
    files = set()
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        files |= _nav_files(value) if isinstance(value, list) else {value}
    return files


def test_every_docs_page_is_in_the_navigation():
    from mkdocs.config import load_config
    nav = load_config(config_file=CONFIG)["nav"]
    pages = {n for n in os.listdir(DOCS) if n.endswith(".md")}
    assert _nav_files(nav) == pages
    assert {"mcp.md", "model-explorer.md", "security.md", "architecture.md", "index.md"} <= pages


def test_the_strict_build_writes_every_page(site):
    pages = {n[:-3] + ".html" for n in os.listdir(DOCS) if n.endswith(".md")}
    assert pages <= set(os.listdir(site))
    assert os.path.isfile(os.path.join(site, "search", "search_index.json"))
    # a page's body made it through, not just the theme's frame
    assert "Decision → drift attribution" in _read(os.path.join(site, "targets.html"))
    assert os.path.isfile(os.path.join(site, "screenshots", "overview-tts-mini-executorch.png"))


class _AssetURLs(HTMLParser):
    """What a browser fetches on its own when it opens a page: src= of any element, and <link href=> (stylesheets,
    icons, preconnects). Anchors (<a href>) are navigation, only followed when clicked."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name in ("src", "srcset") or (tag == "link" and name == "href")):
                self.urls.append(value)


def test_the_built_site_makes_no_external_request(site):
    external = re.compile(r"^\s*(https?:)?//", re.I)
    checked = 0
    for folder, _, names in os.walk(site):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith((".html", ".css", ".js")):
                text = _read(path)
                assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, path
            if name.endswith(".html"):
                parser = _AssetURLs()
                parser.feed(_read(path))
                assert not [u for u in parser.urls if external.match(u)], path
                checked += 1
            elif name.endswith(".css"):
                assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import", _read(path)), path
    assert checked >= 15


def _docs_copy(tmp_path) -> str:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(CONFIG, tmp_path / "mkdocs.yml")
    return str(tmp_path / "mkdocs.yml")


@pytest.mark.parametrize("breakage, problem", [
    (("index.md", "](checks.md)", "](no-such-page.md)"), "no-such-page.md"),
    (("index.md", "](targets.md#evidence-kinds)", "](targets.md#no-such-heading)"), "#no-such-heading"),
    (("stray.md", None, "# A page nobody listed\n"), "stray.md"),
])
def test_a_broken_link_anchor_or_unlisted_page_fails_the_build(tmp_path, breakage, problem):
    config = _docs_copy(tmp_path)
    name, old, new = breakage
    page = tmp_path / "docs" / name
    if old is None:
        page.write_text(new, encoding="utf-8")
    else:
        text = page.read_text(encoding="utf-8")
        assert old in text
        page.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(docs_site.DocsBuildError) as e:
        docs_site.build_site(str(tmp_path / "site"), config_file=config)
    assert e.value.only_strict and any(problem in line for line in e.value.problems), e.value.problems
    assert all("\n" not in line for line in e.value.problems)
    # without --strict the same problem is a warning, and the site is written
    warnings = docs_site.build_site(str(tmp_path / "site"), config_file=config, strict=False)
    assert any(problem in line for line in warnings)
    assert (tmp_path / "site" / "index.html").is_file()


def test_a_failed_build_is_one_line_per_problem_and_exit_1(tmp_path, monkeypatch, capsys):
    config = _docs_copy(tmp_path)
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text(encoding="utf-8") + "\n[gone](gone.md)\n", encoding="utf-8")
    monkeypatch.setattr(docs_site, "config_path", lambda: config)
    assert cli.main(["docs", "--out", str(tmp_path / "site")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert any("gone.md" in line for line in err) and err[-1].startswith("xc docs: the documentation did not build")
    assert "Traceback" not in "\n".join(err)


def test_out_refuses_a_folder_of_other_files(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine", encoding="utf-8")
    assert cli.main(["docs", "--out", str(tmp_path)]) == 2
    assert (tmp_path / "keep.txt").read_text(encoding="utf-8") == "mine"
    assert "holds other files" in capsys.readouterr().err


def test_out_rebuilds_a_site_it_wrote_before(site):
    assert cli.main(["docs", "--out", site]) == 0


def test_without_its_docs_xc_docs_says_where_they_are(monkeypatch):
    monkeypatch.setattr(docs_site, "CONFIG_NAME", "no-such-mkdocs.yml")
    with pytest.raises(XcInputError, match="docs/ folder of xc's repository"):
        docs_site.config_path()


def test_a_port_out_of_range_is_refused_in_one_line(capsys):
    assert cli.main(["docs", "--port", "70000"]) == 2
    assert "0 to 65535" in capsys.readouterr().err


# --- xc docs: serving -----------------------------------------------------------------------------------------------

def test_xc_docs_serves_the_site_on_loopback_until_stopped():
    proc = subprocess.Popen([sys.executable, "-m", "xc_core", "docs"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        # the address is printed once the site is built and the port is listening
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
        with urllib.request.urlopen(match.group(0), timeout=10) as answer:
            assert answer.status == 200 and "Getting started" in answer.read().decode("utf-8")
        with urllib.request.urlopen(match.group(0) + "targets.html", timeout=10) as answer:
            assert "Evidence kinds" in answer.read().decode("utf-8")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert proc.returncode == 143
    # the built site lived in a scratch folder of $XC_HOME/work named by the process, and went with it
    from xc_core.paths import home
    work = os.path.join(home(), "work")
    assert not [n for n in (os.listdir(work) if os.path.isdir(work) else []) if f"-{proc.pid}-" in n]
