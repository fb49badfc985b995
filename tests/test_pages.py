"""Every page renders through AppTest for every bundled sample, with no exception."""
import os

import pytest
from apptest_wait import until_report
from streamlit.testing.v1 import AppTest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = ["vision-mini", "tts-mini", "transformer-mini"]
ALL_TARGETS = ["ort-cpu", "ort-nnapi", "ort-coreml", "ort-cpu-int8", "coreml-ane", "coreml-cpu", "openvino-cpu"]


def run_page(page: str, sample: str, targets=ALL_TARGETS):
    def make():
        at = AppTest.from_file(os.path.join(ROOT, "app.py"), default_timeout=900)
        at.session_state["sample"] = sample
        at.session_state["targets"] = targets
        return at
    at = until_report(make)
    assert not at.exception, at.exception
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, at.exception
    return at


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_fallbacks_page(sample):
    at = run_page("fallbacks", sample)
    assert at.title[0].value == "Fallbacks"
    metrics = {m.label for m in at.metric}
    assert {"Latency cliff, ms (est.)", "Partitions", "Boundaries"} <= metrics
    tables = [d.value for d in at.dataframe]
    sources = next(t for t in tables if "assignment from" in t.columns)     # where ORT's assignments come from
    assert set(sources["assignment from"]) >= {"ort-api", "ort-checker"}
    # every sample has NNAPI fallbacks (HardSigmoid, LayerNorm, ...)
    fallback_table = next(t for t in tables if "reason" in t.columns)
    assert {"reason", "module_path", "inputs from", "boundary bytes", "kernel µs", "copies µs (assumed)"} <= \
        set(fallback_table.columns)
    assert fallback_table["reason"].str.len().min() > 0
    # Ranked by the measured kernel time (untimed last), never by the copies the cost model assumes.
    timed = list(fallback_table["kernel µs"].dropna())
    assert timed == sorted(timed, reverse=True) and fallback_table["kernel µs"].isna().is_monotonic_increasing


@pytest.mark.slow
def test_fallbacks_page_without_accelerated_targets_says_so():
    at = run_page("fallbacks", "tts-mini", ["ort-cpu"])
    assert "None of the selected targets has an accelerator" in at.info[0].value


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_coreml_page(sample):
    at = run_page("coreml", sample)
    assert at.title[0].value == "Core ML"
    assert {"MIL ops before → after", "Casts", "Fused ops"} <= {m.label for m in at.metric}
    placement = at.dataframe[-1].value
    assert {"unit", "reason", "source", "passes"} <= set(placement.columns)
    assert set(placement["unit"]) <= {"ane", "gpu", "cpu", "unknown"}


@pytest.mark.slow
def test_overview_leads_with_pair_sentences_and_keeps_eight_columns():
    at = run_page("overview", "tts-mini")
    table = at.table[0].value       # a static table: every cell whole; it renders Markdown, so cells come escaped
    assert len(table.columns) <= 8 and {"accelerator", "evidence", "fused", "checklist"} <= set(table.columns)
    assert {t.replace("\\", "") for t in table["target"]} == set(ALL_TARGETS)
    assert all(v == "—" or v.isdigit() for v in table["fused"])          # integers as integers
    # The details are one click away: every column overview_rows knows, including Core ML and partition ones.
    full = at.dataframe[0].value
    assert {"Core ML units", "casts", "MIL ops", "partitions", "ORT verdict"} <= set(full.columns)
    sentences = [m.value.replace("\\", "") for m in at.markdown if m.value.startswith("- ") and " vs " in m.value]
    # iOS through ONNX Runtime and natively: the first pair these targets ship (ort-nnapi is deprecated: in none).
    assert sentences and sentences[0].startswith("- ort-coreml vs coreml-ane:")
    assert "fall back to the CPU on ort-coreml and not on coreml-ane" in sentences[0] and "Drift:" in sentences[0]
    # One target in detail, the one picked: its drift per output follows the pick.
    pick = at.selectbox(key="overview_target")
    assert pick.options[0].startswith("ort-cpu — ") and pick.value == "ort-cpu"

    def detail_drift(at):
        heads = [m.value for m in at.markdown if m.value.startswith("**Drift vs")]
        assert len(heads) == 1, heads                       # one target's section, not one per target
        return next(d.value for d in at.dataframe if "rel L2" in d.value.columns)
    cpu_drift = detail_drift(at)
    pick.set_value("coreml-ane").run()
    assert not at.exception, at.exception
    ane_drift = detail_drift(at)
    assert ane_drift["rel L2"].tolist() != cpu_drift["rel L2"].tolist()      # fp16 emulated vs fp32 measured
    assert any(m.value.startswith("**Precision mix**") and "fp16" in m.value for m in at.markdown)


COMPARE_PAGES = {"heatmap": "Backend heat map", "fusion": "Fusion", "drift": "Numerical drift",
                 "precision": "Precision audit", "checklist": "Checklist"}


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("page", list(COMPARE_PAGES))
def test_compare_pages(sample, page):
    at = run_page(page, sample)
    assert at.title[0].value == COMPARE_PAGES[page]
    if page == "checklist":
        grid = at.table[0].value      # a static table of escaped Markdown
        assert {t.replace("\\", "") for t in grid["target"]} == set(ALL_TARGETS) and len(grid.columns) == 6
        for col in grid.columns[1:]:
            assert grid[col].str.len().min() > 0          # never blank
    if page == "fusion":
        assert len(at.dataframe) >= 2
    if page == "drift":
        assert set(at.dataframe[0].value["pass"]) <= {"pass", "fail"}


def _page_with_report(page: str, report: dict):
    """One page alone, rendering a given report (as the router would have put it in session state)."""
    at = AppTest.from_file(os.path.join(ROOT, "pages", f"{page}.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    at.session_state["report"] = report
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.slow
def test_fallbacks_page_shows_the_model_as_shipped_beside_the_resolved_shapes(tmp_path):
    from realistic_models import detector_onnx
    from xc_core.api import analyze
    report = analyze(detector_onnx(str(tmp_path / "det.onnx")), ["ort-nnapi"])
    at = _page_with_report("fallbacks", report)
    assert any("As shipped, with its dynamic dims" in m.value for m in at.markdown)
    accelerated = next(m for m in at.metric if m.label == "Accelerated")
    assert accelerated.value == "0%"
    assert any("left on the CPU for a dynamic input shape" in c.value for c in at.caption)


@pytest.mark.slow
def test_the_onnx_route_is_shown_apart_on_the_overview_and_the_core_ml_page(tmp_path):
    from realistic_models import two_in_three_out_onnx
    from xc_core.api import analyze
    report = analyze(two_in_three_out_onnx(str(tmp_path / "m.onnx")), ["coreml-cpu", "inductor-cpu"])
    at = _page_with_report("coreml", report)
    # Said once for the Core ML columns: the conversion's own error, and that their drift is the compiler's.
    assert any("ONNX → PyTorch conversion" in m.value and "their drift is measured against it" in m.value
               for m in at.markdown)
    at = _page_with_report("overview", report)
    assert not at.exception, at.exception
    route = at.info[0].value.replace("\\", "")       # above the targets: the route, before any target's figure
    assert "coreml-cpu, inductor-cpu compile its program" in route and "worst rel L2" in route and "measured" in route
    assert len(at.dataframe[0].value) == 3          # the conversion's own drift, one row per output


@pytest.mark.slow
def test_stages_page_shows_six_stages_and_opens_a_step_graph_in_topology():
    at = run_page("stages", "vision-mini")
    assert at.title[0].value == "Stages"
    # Eight targets: two tables by toolchain family (ONNX Runtime · Core ML, then OpenVINO · Inductor), none wider
    # than fits 1280 px, every target in one of them.
    matrices = [t.value for t in at.table]
    assert len(matrices) == 2
    for matrix in matrices:
        assert list(matrix.index) == ["Import", "Graph optimisation", "Fusion", "Backend selection",
                                      "Kernel lowering", "Fallback insertion"]
        assert len(matrix.columns) <= 6
    columns = [c.replace("\\", "") for m in matrices for c in m.columns]      # escaped
    assert columns == list(ALL_TARGETS)
    divergence = at.dataframe[2].value
    assert "first diverges at" in divergence.columns and len(divergence) > 0
    layout = at.dataframe[3].value
    assert "openvino-cpu" in set(layout["target"])
    at.selectbox(key="stages_target").select("ort-cpu").run()
    at.button(key="stages_open").click().run()
    assert not at.exception, at.exception
    assert any(link.label == "Open the Topology page" for link in at.get("page_link"))
    at.switch_page("pages/topology.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Topology"
    picked = at.multiselect(key="topo_targets").value
    assert len(picked) == 2 and picked[1] == "ort-cpu" and picked[0].startswith("ort-cpu · ")


ET_TARGETS = ["ort-nnapi", "coreml-ane", "executorch-xnnpack", "executorch-vulkan", "executorch-coreml"]


@pytest.mark.slow
def test_every_page_with_the_executorch_targets():
    """The ExecuTorch columns beside ort-nnapi and coreml-ane on every page (one analysis, shared by the pages)."""
    pytest.importorskip("executorch")
    for page in ("overview", "topology", "heatmap", "fusion", "stages", "drift", "precision", "checklist",
                 "fallbacks", "coreml", "downloads"):
        at = run_page(page, "tts-mini", ET_TARGETS)
        text = " ".join(str(getattr(e, "value", "")) for e in at.main).replace("\\", "")
        subheaders = {s.value.replace("\\", "") for s in at.subheader}      # Markdown-escaped ids
        if page == "fallbacks":
            assert {"executorch-xnnpack", "executorch-vulkan", "executorch-coreml"} <= subheaders
            assert "Delegates" in {m.label for m in at.metric}
        if page == "coreml":
            assert "executorch-coreml" in subheaders
        if page == "overview":
            assert "not run here" in text


@pytest.mark.slow
def test_a_deployment_picks_the_default_targets(monkeypatch, capsys):
    from pages._ui import default_targets
    monkeypatch.setenv("XC_DEFAULT_TARGETS", "ort-nnapi, coreml-ane,no-such-target")
    assert default_targets() == ["ort-nnapi", "coreml-ane"]
    assert "no-such-target" in capsys.readouterr().err
    monkeypatch.setenv("XC_DEFAULT_TARGETS", "")
    assert "ort-cpu" in default_targets() and len(default_targets()) >= 7
    assert "ort-nnapi" not in default_targets()     # deprecated: out of the default set, still in the picker


COREAI_TARGETS = ["coreml-ane", "coreml-cpu", "coreai-cpu", "coreai-ane"]


@pytest.mark.slow
def test_every_page_with_the_core_ai_targets():
    """Core AI beside Core ML on every page; the Overview opens on the Core ML vs Core AI pair."""
    pytest.importorskip("coreai_torch")
    for page in ("overview", "topology", "heatmap", "fusion", "stages", "drift", "precision", "checklist",
                 "fallbacks", "coreml", "downloads"):
        at = run_page(page, "tts-mini", COREAI_TARGETS)
        assert not at.exception, (page, at.exception)
        if page == "overview":
            assert at.multiselect(key="overview_pairs").value[0] == "coreml-ane vs coreai-ane"
        if page == "fallbacks":
            subheaders = {s.value.replace("\\", "") for s in at.subheader}
            assert "coreai-ane" in subheaders
