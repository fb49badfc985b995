"""The pages a stakeholder opens first, through AppTest: a verdict line per target above the pair sentences,
verdicts with the Markdown report's symbols on the Checklist grid and the Overview table, a target that did not
compile as a labelled column, and one Model Explorer zip with the command that opens it."""
import copy
import json
import re

import pytest
from test_pages import _page_with_report, run_page

from xc_core.analysis.checklist import VERDICT

SYMBOLS = tuple(v.split(" ", 1)[0] for v in VERDICT.values())


def _unescaped(values):
    """st.table renders Markdown, so its cells arrive escaped ("ort\\-cpu")."""
    return [str(v).replace("\\", "") for v in values]


@pytest.fixture(scope="module")
def overview():
    return run_page("overview", "tts-mini")


def test_overview_leads_with_one_verdict_line_per_target(overview):
    at = overview
    report = at.session_state["report"]
    texts = [m.value for m in at.markdown]
    block = next(i for i, v in enumerate(texts) if v.startswith("**ort\\-cpu** "))
    pairs = next(i for i, v in enumerate(texts) if v.startswith("- ") and " vs " in v)
    assert block < pairs                                                   # above the pair sentences
    lines = texts[block].split("  \n")
    assert len(lines) == len(report["targets"])
    nnapi = next(line.replace("\\", "") for line in lines if line.startswith("**ort\\-nnapi**"))
    # Each finding after its verdict's word in the verdict's colour (no emoji: it needs a font many hosts lack).
    assert nnapi.startswith("**ort-nnapi** :red[**✗ FAIL**] 3 ops fall back to the CPU")
    assert ":green[**✓ pass**] outputs match" in nnapi
    # The Targets table: its checklist column in the same symbols, every target whole.
    table = at.table[0].value
    assert list(table.columns)[:2] == ["target", "checklist"]
    assert all(cell.startswith(SYMBOLS) for cell in table["checklist"])


def test_checklist_grid_verdicts_are_the_markdown_reports():
    at = run_page("checklist", "tts-mini")
    grid = at.table[0].value
    assert all(v in VERDICT.values() for col in grid.columns[1:] for v in grid[col])
    assert any(v == VERDICT["fail"] for col in grid.columns[1:] for v in grid[col])


def _with_failed(report: dict, tid: str, status: str, error: str) -> dict:
    r = copy.deepcopy(report)
    t = r["targets"][tid]
    for key in ("graph", "drift", "fusions", "precision", "op_count_after", "op_counts", "layer_drift"):
        t[key] = None
    t.update(status=status, error=error, info={})
    for row in r["alignment"]["source_ops"]:
        row["targets"].pop(tid, None)
    for item in r["checklist"]["targets"][tid]:
        item.update(verdict="not applicable", evidence=None)
    return r


def test_a_target_that_did_not_compile_keeps_a_labelled_column(overview):
    report = _with_failed(overview.session_state["report"], "ort-nnapi", "error",
                          "compile failed: killed by SIGSEGV in compile")
    at = _page_with_report("heatmap", report)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    columns = spec["data"][0]["x"]
    assert "ort-nnapi<br>error: compile failed: killed by SIGSEGV in …" in columns
    assert len(columns) == len(report["targets"])
    at = _page_with_report("fallbacks", report)
    # The accelerated targets that compiled (the ORT CoreML EP, Core ML's ANE units), then the failed one's column.
    assert [h.value for h in at.subheader][:3] == ["ort\\-coreml", "coreml\\-ane", "ort\\-nnapi"]
    assert "error: compile failed" in at.error[0].value
    at = _page_with_report("overview", report)
    lines = next(m.value for m in at.markdown if m.value.startswith("**ort\\-cpu** ")).split("  \n")
    assert lines[1].replace("\\", "") == "**ort-nnapi** error: compile failed: killed by SIGSEGV in compile"


def test_downloads_give_one_model_explorer_zip_and_label_openvinos_two_models():
    at = run_page("downloads", "tts-mini")
    buttons = at.get("download_button")
    keys = [b.proto.id for b in buttons]
    labels = [b.proto.label for b in buttons]
    assert labels.count("model\\_explorer.zip") + labels.count("model_explorer.zip") == 1
    assert not any("model_explorer/" in k for k in keys)                 # no button per exported file
    command = at.code[0].value
    # the Overview's first default pair among the targets this report has (ort-nnapi left the default pairs)
    assert command.startswith("unzip model_explorer.zip && model-explorer model_explorer/ort-coreml.graph.json,")
    captions = " ".join(c.value for c in at.caption).replace("\\", "")
    assert "execution graph — open in Netron; not loadable by read_model" in captions
    assert "IR — loadable by openvino.Core().read_model" in captions
    # a stored run: the live extension's command beside the export's
    assert re.search(r"`xc explorer [0-9a-f]{12}` starts Model Explorer with xc's extension", captions)
    assert {"runtime_model.xml", "model.xml"} <= set(_unescaped(labels))
