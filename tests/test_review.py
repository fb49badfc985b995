"""The review workflow from the CLI: a model change in a pull request, diffed and gated; Markdown a PR comment can
hold; runs found by id, folder or report.json; bad reports and bad gate files refused in one line."""
import html
import json
import os
import re

import pytest
from markdown_it import MarkdownIt

from tiny_models import review_pair
from xc_core.cli import main
from xc_core.review.markdown import MAX_CHARS, report_markdown

TARGETS = "ort-cpu,ort-nnapi,ort-coreml,ort-cpu-int8"


@pytest.fixture(scope="module")
def review_runs(tmp_path_factory):
    """v1 analysed twice (the same model, two runs) and v2 (ReLU → HardSwish, plus a LayerNorm), by the CLI."""
    folder = tmp_path_factory.mktemp("review")
    v1, v2 = review_pair(str(folder))
    outs = {}
    for name, model in (("v1", v1), ("v1-again", v1), ("v2", v2)):
        outs[name] = str(folder / name)
        assert main(["analyze", model, "--targets", TARGETS, "--out", outs[name], "--quiet"]) == 0
    return outs


@pytest.fixture(scope="module")
def other_model_run(tmp_path_factory):
    """Another model altogether, and in another format: ConvBnRelu exported to ONNX."""
    import torch

    from tiny_models import conv_bn_relu
    folder = tmp_path_factory.mktemp("other")
    model, args = conv_bn_relu()
    torch.onnx.export(model, args, str(folder / "tiny.onnx"), dynamo=True, input_names=["x"])
    assert main(["analyze", str(folder / "tiny.onnx"), "--targets", TARGETS, "--out", str(folder / "run"),
                 "--quiet", "--no-store"]) == 0
    return str(folder / "run")


def _run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_gate_fails_on_the_new_nnapi_fallback_and_the_drift_change(review_runs, capsys, tmp_path):
    code, out, err = _run(capsys, ["diff", review_runs["v1"], review_runs["v2"], "--gate"])
    assert code == 1, out + err
    assert "REGRESSION ort-nnapi" in out and "new CPU fallback" in out
    assert "LayerNormalization at norm (unsupported operator)" in out
    assert "HardSigmoid at act" in out            # ORT lowers HardSwish to HardSigmoid × x; NNAPI lacks it
    assert "drift of 'output 0' grew" in out          # a lone unnamed output goes by its position
    assert "replaced: relu → hardswish at act" in out      # the model diff, above the decisions
    assert err.startswith("xc: ") and len(err.strip().splitlines()) == 1
    # The JSON says the same, for scripts.
    code, out, _ = _run(capsys, ["diff", review_runs["v1"], review_runs["v2"], "--gate", "--format", "json"])
    d = json.loads(out)
    assert code == 1 and {r["rule"] for r in d["regressions"]} >= {"max_new_fallbacks", "max_drift_ratio"}
    nnapi = d["targets"]["ort-nnapi"]
    assert {f["op_type"] for f in nnapi["fallbacks"]["added"]} == {"HardSigmoid", "LayerNormalization"}
    assert nnapi["fallbacks"]["count"] == {"base": 0, "new": 2}
    # Another file name, yet the same model edited: most source ops line up, so no different-models note.
    assert d["models"]["relation"] == "edited" and d["models"]["common_source_ops"] >= 0.5
    assert d["models"]["line"] is None and not out.startswith("NOTE")
    # Where in the lowering it changed: the added LayerNorm is there from the import on.
    stages = {c["stage"]: c for c in d["targets"]["ort-cpu"]["stage_changes"]}
    assert stages["Import"]["new"] > stages["Import"]["base"]


def test_the_same_model_twice_passes_the_gate(review_runs, capsys):
    code, out, err = _run(capsys, ["diff", review_runs["v1"], review_runs["v1-again"], "--gate"])
    assert code == 0, out + err
    assert "gate: no regression" in out
    code, out, _ = _run(capsys, ["diff", review_runs["v1"], review_runs["v1-again"], "--format", "json"])
    d = json.loads(out)
    assert all(not t["stage_changes"] and t["layout"] is None for t in d["targets"].values())


def test_diff_of_two_different_models_says_so_first_and_the_gate_refuses(review_runs, other_model_run, capsys):
    v1, other = review_runs["v1"], other_model_run
    code, out, err = _run(capsys, ["diff", v1, other])
    assert code == 0, err
    first = out.splitlines()[0]
    assert re.fullmatch(r"NOTE: base and new are different models: review_v1\.pt2 \(exported-program, sha256 "
                        r"[0-9a-f]{12}, \d+ captured ops\) vs tiny\.onnx \(onnx, sha256 [0-9a-f]{12}, \d+ captured "
                        r"ops\), 0% of source ops line up — the comparison below lines up targets, not the same ops",
                        first), first
    # Markdown: right under the title, before any table or regression.
    code, out, _ = _run(capsys, ["diff", v1, other, "--format", "md"])
    paragraphs = [p for p in out.split("\n\n") if p.strip()]
    assert paragraphs[1].startswith("> **⚠️ base and new are different models: review\\_v1.pt2 "
                                    "(exported-program, sha256")
    assert "\n" not in paragraphs[1]
    # JSON: the first key, with the relation for scripts.
    code, out, _ = _run(capsys, ["diff", v1, other, "--format", "json"])
    d = json.loads(out)
    assert next(iter(d)) == "models" and d["models"]["relation"] == "different"
    assert d["models"]["common_source_ops"] == 0 and d["models"]["line"] == first.removeprefix("NOTE: ")
    # The gate: one model against another is a wrong baseline, not a list of regressions — exit 2, one line.
    code, out, err = _run(capsys, ["diff", v1, other, "--gate"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert err.startswith("xc: base and new are different models: review_v1.pt2") and \
        "--allow-different-models" in err
    code, out, err = _run(capsys, ["diff", v1, other, "--gate", "--allow-different-models"])
    assert code in (0, 1) and out.startswith("NOTE: base and new are different models") and "gate: " in out


def test_the_same_model_at_a_new_version_is_not_different(review_runs, other_model_run):
    """Same file name, another sha256: a new version, compared as usual even when few ops line up."""
    from xc_core.review.diff import diff_markdown, diff_reports, diff_text
    base = json.load(open(os.path.join(review_runs["v1"], "report.json")))
    new = json.load(open(os.path.join(other_model_run, "report.json")))
    assert diff_reports(base, new)["models"]["relation"] == "different"
    # A file name with a newline or a terminal escape in it: the sentence is still one printable line.
    hostile = {**new, "source": {**new["source"], "name": "x\n\x1b[2J<b>.onnx"}}
    line = diff_reports(base, hostile)["models"]["line"]
    assert line.isprintable() and "x \\x1b[2J<b>.onnx (onnx" in line
    assert "x \\\\x1b\\[2J&lt;b&gt;.onnx" in diff_markdown(diff_reports(base, hostile))
    new = {**new, "source": {**new["source"], "name": base["source"]["name"]}}   # a new dict: a read one is kept
    d = diff_reports(base, new)
    assert d["models"] == {"relation": "new-version", "common_source_ops": 0, "line": None}
    assert "different models" not in diff_text(d) + diff_markdown(d)
    assert diff_reports(base, base)["models"]["relation"] == "same-file"


def test_gate_rules_from_a_repository_file_and_flags(review_runs, capsys, tmp_path):
    config = tmp_path / ".xc-gate.toml"
    config.write_text('max_drift_ratio = 10\n[target."ort-nnapi"]\nmax_new_fallbacks = 2\ncheklist_worse = true\n')
    code, _, err = _run(capsys, ["diff", review_runs["v1"], review_runs["v2"], "--gate", "--config", str(config)])
    assert code == 2 and "unknown gate rule 'cheklist_worse'" in err and len(err.strip().splitlines()) == 1
    config.write_text('max_drift_ratio = 10\n[target."ort-nnapi"]\nmax_new_fallbacks = 2\n')
    code, out, _ = _run(capsys, ["diff", review_runs["v1"], review_runs["v2"], "--gate", "--config", str(config),
                                 "--allow-checklist-worse"])
    assert code == 0, out      # two fallbacks allowed on NNAPI, drift up to 10×, verdicts not gated
    code, out, _ = _run(capsys, ["diff", review_runs["v1"], review_runs["v2"], "--gate", "--config", str(config),
                                 "--allow-checklist-worse", "--max-drift-ratio", "1.2"])
    assert code == 1 and "drift" in out and "fallback" not in out.split("gate:")[1]
    config.write_text("max_new_fallbacks = 'none'\n")
    code, _, err = _run(capsys, ["diff", review_runs["v1"], review_runs["v2"], "--gate", "--config", str(config)])
    assert code == 2 and "max_new_fallbacks must be int" in err


def test_malformed_reports_exit_2_with_one_line(review_runs, capsys, tmp_path):
    bad = {"not-json.json": b"{\"targets\": ", "other.json": b'{"hello": 1}',
           "schema.json": json.dumps({**json.load(open(os.path.join(review_runs["v1"], "report.json"))),
                                      "targets": {"ort-cpu": {"status": "exploded"}}}).encode()}
    for name, data in bad.items():
        path = tmp_path / name
        path.write_bytes(data)
        code, out, err = _run(capsys, ["diff", review_runs["v1"], str(path), "--gate"])
        assert code == 2, (name, out, err)
        assert err.startswith("xc: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, _, err = _run(capsys, ["diff", review_runs["v1"], "deadbeefdead", "--gate"])
    assert code == 2 and "no such run" in err
    code, _, err = _run(capsys, ["report", str(tmp_path / "missing.json")])
    assert code == 2 and "no such file" in err


def test_report_by_id_folder_and_file_is_the_same(review_runs, capsys, tmp_path):
    report = json.load(open(os.path.join(review_runs["v2"], "report.json")))
    run_id = report["run"]["key"][:12]
    texts = []
    for ref in (run_id, review_runs["v2"], os.path.join(review_runs["v2"], "report.json")):
        code, out, err = _run(capsys, ["report", ref, "--format", "md"])
        assert code == 0, err
        texts.append(out)
    assert texts[0] == texts[1] == texts[2]
    code, out, _ = _run(capsys, ["runs"])
    assert code == 0 and run_id in out and "review_v2.pt2" in out
    # Deterministic and portable: no timestamps, no absolute paths in the comment; artifacts relative in the JSON.
    assert report["created_at"] not in texts[0] and str(tmp_path.anchor + "tmp") not in texts[0]
    assert all(not p.startswith("/") for t in report["targets"].values() for p in t["artifacts"])
    assert report["artifacts_dir"] == "artifacts"
    md_file = tmp_path / "comment.md"
    code, _, _ = _run(capsys, ["report", run_id, "--format", "md", "--out", str(md_file)])
    assert code == 0 and md_file.read_text() == texts[0]


def _tables(md: str):
    """Every GFM table markdown-it finds, as lists of rows of cell counts."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    tables, rows, cells = [], None, 0
    for tok in tokens:
        if tok.type == "table_open":
            rows = []
        elif tok.type == "tr_open":
            cells = 0
        elif tok.type in ("th_open", "td_open"):
            cells += 1
        elif tok.type == "tr_close":
            rows.append(cells)
        elif tok.type == "table_close":
            tables.append(rows)
    return tables


@pytest.mark.slow
def test_markdown_tables_are_valid_github_tables_and_fit_a_comment(sample_report):
    report, _ = sample_report("transformer-mini")
    md = report_markdown(report, full=True)          # every table (the default leaves the long ones to the HTML)
    assert len(md) <= MAX_CHARS
    separators = [line for line in md.splitlines() if line.startswith("|---")]
    tables = _tables(md)
    assert len(tables) == len(separators) >= 3          # every table written parses as a table
    for rows in tables:
        assert len(set(rows)) == 1 and rows[0] <= 8      # rows as wide as the header; at most 8 columns
    # One collapsed section per checklist question, and one for the lowering stages.
    assert md.count("<details>") == md.count("</details>") == 6
    assert "Lowering stages" in md and "first stage at which the targets diverge" in md
    assert report_markdown(report, full=True) == md      # deterministic
    # A long report is cut to fit, saying so, and its tables stay tables.
    small = report_markdown(report, max_chars=6000)
    assert len(small) <= 6000 and all(len(set(rows)) == 1 for rows in _tables(small))


@pytest.mark.slow
def test_markdown_escapes_names_from_the_upload(sample_report):
    report, _ = sample_report("vision-mini")
    hostile = json.loads(json.dumps(report))
    hostile["source"]["name"] = "<img src=x onerror=alert(1)>|`x`|**bold**"
    fallbacks = [n for t in hostile["targets"].values() for n in (t.get("graph") or {}).get("nodes", [])
                 if n.get("fallback")]
    assert fallbacks, "vision-mini has NNAPI fallbacks: the fallback table must hold a hostile node name"
    fallbacks[0]["id"] = "a|b<script>"
    md = report_markdown(hostile)
    assert "<img" not in md                              # text: escaped; identifiers: inside code spans
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in html and "<script" not in html
    assert all(len(set(rows)) == 1 for rows in _tables(md))


PAYLOAD = "[click](https://evil.example) @octocat <img src=x onerror=alert(1)> | pipe www.evil.example #1"


def _outside_code(md: str) -> str:
    return re.sub(r"`[^`\n]*`", "", md)


@pytest.mark.slow
def test_model_text_in_reports_links_nothing_and_pings_no_one(sample_report):
    """Names from an upload reach the Markdown comment and the HTML report as text: no link, image or HTML, no
    live @mention (a PR comment would notify that user), no issue reference, no table split by a pipe."""
    from xc_core.review.html import report_html
    report, _ = sample_report("vision-mini")
    hostile = json.loads(json.dumps(report))
    hostile["source"]["name"] = PAYLOAD
    nnapi = hostile["targets"]["ort-nnapi"]
    fallback = next(n for n in nnapi["graph"]["nodes"] if n.get("fallback"))
    fallback.update(op_type=PAYLOAD, module_path=PAYLOAD)
    broken = hostile["targets"]["coreml-cpu"]
    broken.update(status="error", error=f"{PAYLOAD} failed", error_detail=PAYLOAD)
    for items in hostile["checklist"]["targets"].values():
        for item in items:
            item.update(detail=PAYLOAD, question=PAYLOAD)
    md = report_markdown(hostile)
    prose = _outside_code(md)
    # GitHub's own patterns: a mention is "@" then a letter or digit after a non-word character; references,
    # e-mail and URL autolinks likewise need "#", "@", "://" or "www." directly before a letter or digit.
    assert not re.search(r"(?:^|\W)@[A-Za-z0-9]", prose, re.M), "a live @mention"
    assert not re.search(r"#\d|https?://|www\.", prose), "a live reference or link"
    rendered = MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in rendered and "<a " not in rendered and "<script" not in rendered
    assert all(len(set(rows)) == 1 for rows in _tables(md))     # the pipe did not split a cell
    # Still readable: the name shows as written, less the escapes and word joiners.
    shown = MarkdownIt("commonmark").render(md.splitlines()[0]).replace("\u2060", "")
    assert html.escape(PAYLOAD, quote=False) in shown

    page = report_html(hostile)
    assert "<img src=x" not in page and "<a href=\"https://evil" not in page
    assert html.escape(PAYLOAD) in page                 # escaped wherever it is shown
