"""Every target block says whether the target has an accelerator and which (`accelerated`, `accelerator`), and
which precisions its configuration asks for (`declared_precisions`); the Fallbacks view, the checklist and the
reports read those fields, whichever toolchain decided the split — so Core ML's compute units (xc's rule table)
show their CPU ops with reasons beside ONNX Runtime's mobile EPs (ORT's partition checker)."""
import os

import pytest
from streamlit.testing.v1 import AppTest

from xc_core.views.fallbacks import accelerated_targets, fallback_rows, not_compiled_accelerated, split_summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_every_target_block_says_whether_it_is_accelerated(sample_report):
    report, _ = sample_report("transformer-mini")
    blocks = report["targets"]
    assert {tid for tid, t in blocks.items() if t["accelerated"]} == {"ort-nnapi", "ort-coreml", "coreml-ane"}
    assert blocks["ort-nnapi"]["accelerator"].startswith("NNAPI")
    assert "Neural Engine" in blocks["coreml-ane"]["accelerator"]
    assert all(t["accelerator"] is None for t in blocks.values() if not t["accelerated"])
    # What each configuration asks for, as typed fields (the checklist's question 5 reads these).
    assert blocks["coreml-ane"]["declared_precisions"] == ["fp16"]
    assert blocks["coreml-cpu"]["declared_precisions"] == []
    assert blocks["ort-cpu-int8"]["declared_precisions"] == ["int8", "uint8"]
    assert blocks["ort-coreml"]["declared_precisions"] == ["fp16"]        # its EP partitions, emulated in fp16
    assert blocks["ort-nnapi"]["declared_precisions"] == []               # NNAPI's fp16 relaxation is opt-in
    assert blocks["ort-cpu"]["declared_precisions"] == []


@pytest.mark.slow
def test_core_ml_cpu_ops_are_fallbacks_with_their_reasons(sample_report):
    """transformer-mini's embedding is a MIL gather, which the ANE does not run (hollance's list): on coreml-ane it
    falls back to the CPU, and the Fallbacks view says so as it does for the ORT EPs."""
    report, _ = sample_report("transformer-mini")
    assert {"ort-nnapi", "ort-coreml", "coreml-ane"} <= set(accelerated_targets(report))
    rows = fallback_rows(report, "coreml-ane")
    gathers = [r for r in rows if r["op_type"].startswith("gather")]
    assert gathers and all("ANE" in r["reason"] for r in gathers), rows[:3]
    s = split_summary(report, "coreml-ane")
    assert s["decided_by"] == "xc's rule table" and s["evidence"] == "predicted-rules"
    assert s["partitions"] is None and s["verdict"] is None         # ORT's own figures: not made up for Core ML
    assert 0 < s["on_accelerator"] < s["nodes"] and any(o.startswith("gather") for o in s["ops_on_cpu"])
    assert s["boundaries"] >= 1 and s["cliff"]["estimate_ms"] > 0
    ort = split_summary(report, "ort-nnapi")
    assert ort["decided_by"] == "ONNX Runtime's partition checker" and ort["partitions"] >= 1
    # The checklist's fallback question answers for coreml-ane from the same fields.
    q2 = next(i for i in report["checklist"]["targets"]["coreml-ane"] if i["id"] == 2)
    assert q2["verdict"] in ("warn", "fail") and "gather" in q2["detail"]


@pytest.mark.slow
def test_the_fallbacks_page_has_a_column_for_core_ml(sample_report):
    report, _ = sample_report("transformer-mini")
    at = AppTest.from_file(os.path.join(ROOT, "pages", "fallbacks.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    at.session_state["report"] = report
    at.run()
    assert not at.exception, at.exception
    assert "coreml-ane" in [s.value.replace("\\", "") for s in at.subheader]
    assert any(m.label == "Accelerated" for m in at.metric)              # Core ML: no ORT partitions to count
    table = next(d.value for d in at.dataframe if "reason" in d.value.columns)   # the fallback nodes
    assert "coreml-ane" in set(table["target"])
    assert any("ANE" in r for r in table[table["target"] == "coreml-ane"]["reason"])


def test_a_report_from_before_the_fields_is_read_by_its_boundaries():
    """A stored or imported report written before blocks said `accelerated`: a compiled target with accelerator ↔
    CPU boundaries is accelerated; one that did not compile is what the registered target of its id is."""
    nodes = [{"id": "a", "kind": "compute", "op_type": "Relu", "fallback": True, "inputs": [], "outputs": []}]
    report = {"targets": {
        "ort-nnapi": {"status": "ok", "graph": {"nodes": nodes}, "info": {"boundaries": {"count": 0, "items": []}}},
        "ort-cpu": {"status": "ok", "graph": {"nodes": nodes}, "info": {}},
        "coreml-ane": {"status": "error", "error": "boom", "graph": None, "info": {}},
    }}
    assert accelerated_targets(report) == ["ort-nnapi"]
    assert set(not_compiled_accelerated(report)) == {"coreml-ane"}
