"""A routed target's drift is the compiler's (issue 50, item 1): for an ONNX source, the targets that compile the
program xc's ONNX → PyTorch route made are measured against that program's own outputs, and the route's own drift
against ONNX Runtime is said first, once, naming the first ONNX node that departs — xc's error, never a runtime's.

The model is the issue's: Conv → BN → ReLU → mean → Linear → GELU → CumSum(axis -1), exported with
torch.onnx.export(dynamo=True). The route is made wrong on purpose, as onnx2torch once was (it read CumSum's missing
`reverse` as 1): every CumSum converter is wrapped to compute the reverse cumulative sum."""
import copy
import os

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from xc_core.analysis.checklist import checklist
from xc_core.analysis.drift import ROUTE_REFERENCE
from xc_core.api import analyze
from xc_core.cli import summary_table
from xc_core.pipeline.assemble import _route_program_outputs, target_block
from xc_core.review.diff import diff_reports
from xc_core.review.gate import GateRules, regressions
from xc_core.review.html import report_html
from xc_core.review.markdown import report_markdown
from xc_core.targets import TargetResult
from xc_core.views.rows import onnx_route_lines, overview_rows, route_headline, verdict_line

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ["ort-cpu", "coreml-cpu", "inductor-cpu"]
ROUTED = ("coreml-cpu", "inductor-cpu")


class _CumSumNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.bn = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return torch.cumsum(torch.nn.functional.gelu(self.fc(y)), dim=-1)


def _reversed_cumsum(monkeypatch) -> None:
    """Every CumSum converter onnx2torch holds (xc's own included) made to compute the reverse cumulative sum."""
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY
    from onnx2torch.utils.common import OnnxToTorchModule

    from xc_core.onnx_route.converters import import_onnx2torch
    import_onnx2torch()

    class Reversed(torch.nn.Module, OnnxToTorchModule):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, axis):
            dims = (int(axis.item()),)
            return torch.flip(self.inner(torch.flip(x, dims=dims), axis), dims=dims)

    keys = [k for k in _CONVERTER_REGISTRY if k.operation_type == "CumSum"]
    assert keys
    for key in keys:
        def convert(node, graph, original=_CONVERTER_REGISTRY[key]):
            made = original(node, graph)
            return type(made)(torch_module=Reversed(made.torch_module), onnx_mapping=made.onnx_mapping)
        monkeypatch.setitem(_CONVERTER_REGISTRY, key, convert)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(good, bad): the model analysed with the route as it is, and with its CumSum converter reversed."""
    folder = tmp_path_factory.mktemp("cumsum")
    path = str(folder / "cumsum.onnx")
    torch.onnx.export(_CumSumNet().eval(), (torch.randn(1, 3, 8, 8),), path, dynamo=True, opset_version=17)
    good = analyze(path, TARGETS, isolate=False)
    with pytest.MonkeyPatch.context() as mp:
        _reversed_cumsum(mp)
        bad = analyze(path, TARGETS, isolate=False)
    return good, bad


def test_routed_targets_are_measured_against_the_program_they_compiled(runs):
    good, bad = runs
    route = bad["capture"]["onnx_route"]
    # The route's own error, measured against ONNX Runtime, localised to the CumSum node.
    assert route["conversion_drift"]["cumsum"]["rel_l2"] > 0.1
    assert route["departure"]["output"] == "cumsum" and route["first_departure"]["op_type"] == "CumSum"
    assert good["capture"]["onnx_route"]["departure"] is None
    for report in (good, bad):
        assert report["targets"]["ort-cpu"]["drift"]["reference"] == "onnx-reference"
        assert report["targets"]["ort-cpu"]["drift"]["worst"]["rel_l2"] <= 1e-6
        for tid in ROUTED:
            t = report["targets"][tid]
            assert t["status"] == "ok", t["error"]
            d = t["drift"]
            # the compiler's drift: its output against the program it compiled, not the route's error on top
            assert d["reference"] == ROUTE_REFERENCE and d["worst"]["rel_l2"] <= 1e-5, (tid, d["worst"])
            assert d["evidence"] == t["evidence"]["numerics"]          # the target's numerics kind, unchanged


def test_question_4_judges_the_compiler_and_names_the_conversion(runs):
    _, bad = runs
    for tid in ROUTED:
        q4 = bad["checklist"]["targets"][tid][3]
        assert q4["verdict"] == "pass", q4
        assert "the compiler's own drift" in q4["detail"]
        assert "the conversion (xc's ONNX → PyTorch route) departs from ONNX Runtime on 'cumsum'" in q4["detail"]
        assert "(CumSum" in q4["detail"] and "xc's error" in q4["detail"] and "not this compiler's" in q4["detail"]
        assert verdict_line(bad, tid).count("✓ pass outputs match") == 1
    assert "conversion" not in bad["checklist"]["targets"]["ort-cpu"][3]["detail"]   # it compiles the ONNX itself


def test_the_route_is_said_first_and_once_on_every_surface(runs):
    _, bad = runs
    head = route_headline(bad)
    node = bad["capture"]["onnx_route"]["first_departure"]["node"]
    assert head.startswith("xc's ONNX → PyTorch conversion departs from ONNX Runtime on 'cumsum'")
    assert f"first at ONNX node '{node}' (CumSum" in head and "not the compilers'" in head
    assert "coreml-cpu, inductor-cpu compile its program, and their drift is measured against it" in head
    assert onnx_route_lines(bad)[0] == head
    # The CLI: before the summary table. Markdown and HTML: before any target's figure, once.
    assert summary_table(bad).splitlines()[0] == f"ONNX → PyTorch route (measured): {head}"
    md = report_markdown(bad)
    assert md.count("#### ONNX → PyTorch route (measured)") == 1
    assert md.index("#### ONNX → PyTorch route") < md.index("- **ort-cpu**")
    html = report_html(bad)
    assert html.count("<h3>ONNX → PyTorch route") == 1 and html.index("<h3>ONNX → PyTorch route") < \
        html.index("<h3>Targets</h3>")
    cells = {r["target"]: r["worst drift (rel L2)"] for r in overview_rows(bad)}
    assert cells["coreml-cpu"].endswith("(cumsum; vs the route's program)") and "route" not in cells["ort-cpu"]


def _page(name: str, report: dict) -> AppTest:
    at = AppTest.from_file(os.path.join(ROOT, "pages", f"{name}.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    at.session_state["report"] = report
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_pages_say_the_route_first(runs):
    _, bad = runs
    at = _page("overview", bad)
    assert "conversion departs from ONNX Runtime" in at.warning[0].value and "CumSum" in at.warning[0].value
    at.selectbox(key="overview_target").set_value("coreml-cpu").run()
    assert any(c.value.startswith("Against the outputs of the program xc's ONNX → PyTorch route made")
               for c in at.caption)
    drift = _page("drift", bad)
    assert "conversion departs" in drift.warning[0].value
    table = drift.dataframe[0].value
    assert dict(zip(table["target"], table["against"])) == {"ort-cpu": "onnx-reference", "coreml-cpu": ROUTE_REFERENCE,
                                                            "inductor-cpu": ROUTE_REFERENCE}
    assert "conversion departs" in _page("coreml", bad).warning[0].value


def test_diff_and_gate_never_fail_a_target_for_the_routes_error(runs):
    good, bad = runs
    for base, new in ((good, bad), (bad, good)):
        d = diff_reports(base, new)
        for tid in ROUTED:
            assert all(x["against"] == {"base": ROUTE_REFERENCE, "new": ROUTE_REFERENCE} for x in
                       d["targets"][tid]["drift"])
        found = [r for r in regressions(d, GateRules()) if r["target"] in ROUTED]
        assert not found, found


def test_a_report_from_before_still_renders_and_never_fails_the_runtime(runs):
    """An older report: routed targets measured against ONNX Runtime's reference, so their figure includes the
    route's error, and the route block without `departure` or `first_departure`."""
    _, bad = runs
    old = copy.deepcopy(bad)
    route = old["capture"]["onnx_route"]
    conv = route["conversion_drift"]["cumsum"]
    for key in ("departure", "first_departure"):
        route.pop(key)
    for key in ("shape_match", "dtype_match"):
        conv.pop(key, None)
    for tid in ROUTED:
        d = old["targets"][tid]["drift"]
        d["reference"] = "onnx-reference"
        d["outputs"]["cumsum"].update(rel_l2=conv["rel_l2"], cosine=conv["cosine"])
        d["worst"].update(rel_l2=conv["rel_l2"], cosine=conv["cosine"])
    old["checklist"] = checklist(old, (old.get("fusion_matrix") or {}).get("not_fired", []))
    for tid in ROUTED:
        q4 = old["checklist"]["targets"][tid][3]
        assert q4["verdict"] == "warn" and "this drift includes the conversion's error" in q4["detail"]
    assert route_headline(old).endswith("the drift of coreml-cpu, inductor-cpu includes it.")
    summary_table(old), report_markdown(old), report_html(old)
    _page("overview", old), _page("drift", old)


def test_without_the_programs_outputs_drift_stays_against_the_reference(tmp_path):
    """A route record from before the outputs were written (or an unreadable file): the reference, as before."""
    class Captured:
        onnx_route = {"program_outputs_path": str(tmp_path / "missing.npz")}

        @staticmethod
        def output_label_map():
            return {}
    assert _route_program_outputs(Captured()) is None
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    Captured.onnx_route = {"program_outputs_path": str(tmp_path / "bad.npz")}
    assert _route_program_outputs(Captured()) is None
    ref = np.arange(6, dtype=np.float32)
    result = TargetResult("coreml-cpu", outputs={"y": ref + 1e-7}, info={"onnx_conversion": {}})
    block = target_block(result, None, TargetResult("onnx-reference", outputs={"y": ref}))
    assert block["drift"]["reference"] == "onnx-reference"
