"""ExecuTorch targets: XNNPACK lowered and run here (measured), Vulkan and Core ML partitioned by ExecuTorch's own
partitioners (predicted-runtime), the int8 PT2E variant — each op left outside a delegate with the partitioner's
reason, side by side with ort-nnapi and coreml-ane in every rendering."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")

from tiny_models import ConvMeanGeluCumsum  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ET = ("executorch-xnnpack", "executorch-vulkan", "executorch-coreml")
INT8 = "executorch-xnnpack[quantize=int8]"
TARGETS = ET + (INT8, "ort-nnapi", "coreml-ane")


@pytest.fixture(scope="module")
def et_report(tmp_path_factory):
    from xc_core.api import analyze
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("et")
    path = folder / "net.pt2"
    torch.export.save(torch.export.export(ConvMeanGeluCumsum().eval(), (torch.randn(1, 3, 16, 16),)), str(path))
    return analyze(str(path), list(TARGETS), out_dir=str(folder / "out")), str(folder / "out")


def _fallbacks(t):
    return {n["op_type"]: n["fallback_reason"] for n in t["graph"]["nodes"] if n.get("fallback")}


@pytest.mark.slow
def test_xnnpack_two_delegates_cpu_ops_with_the_partitioners_reasons_and_measured_drift(et_report):
    report, out = et_report
    t = report["targets"]["executorch-xnnpack"]
    assert t["status"] == "ok", t["error"]
    part = t["info"]["partitioning"]
    assert part["num_partitions"] == 2 and part["decided_by"] == "ExecuTorch's XnnpackPartitioner"
    assert part["evidence"] == "reported"
    fallbacks = _fallbacks(t)
    assert set(fallbacks) == {"mean", "cumsum"}
    assert "keepdim" in fallbacks["mean"]                       # XNNPACK's own WhyNoPartition words
    assert fallbacks["cumsum"] == "no XNNPACK config for aten.cumsum.default"
    delegated = [n for n in t["graph"]["nodes"] if n["backend"] == "xnnpack" and n["kind"] == "compute"]
    assert {n["attributes"]["delegate"] for n in delegated} == {"lowered_module_0", "lowered_module_1"}
    assert {s for n in delegated for s in n["source_ops"]} >= {"conv2d", "relu", "linear", "gelu"}
    bounds = t["info"]["boundaries"]
    assert bounds["count"] == 3 and bounds["total_bytes"] > 0 and bounds["latency_cliff"]["estimate_ms"] > 0
    assert t["drift"]["evidence"] == "measured" and t["drift"]["worst"]["rel_l2"] < 1e-5
    assert t["accelerated"] and t["info"].get("read_back_check") is None
    plan = t["info"]["execution_plan"]
    assert plan["delegate_calls"] == 2 and set(plan["operators"]) == {"aten::mean.out", "aten::cumsum.out"}
    pte = [p for p in t["artifacts"] if p.endswith(".pte")]
    assert pte and os.path.getsize(os.path.join(out, pte[0]) if not os.path.isabs(pte[0]) else pte[0]) > 0


@pytest.mark.slow
def test_vulkan_is_the_partitioners_decision_and_not_run_here(et_report):
    report, _ = et_report
    t = report["targets"]["executorch-vulkan"]
    assert t["status"] == "ok", t["error"]
    assert t["info"]["partitioning"]["evidence"] == "predicted-runtime"
    fallbacks = _fallbacks(t)
    assert fallbacks["cumsum"] == "no operator implementation"     # VulkanSupportedOperators.log_skip
    assert "mean" in fallbacks
    assert t.get("drift") is None and "not run here" in t["info"]["numerics_not_run"]
    q4 = next(i for i in report["checklist"]["targets"]["executorch-vulkan"] if i["id"] == 4)
    assert q4["verdict"] == "not applicable" and "Vulkan" in q4["detail"]


@pytest.mark.slow
def test_coreml_delegate_takes_everything_as_an_ml_program_emulated(et_report):
    report, _ = et_report
    t = report["targets"]["executorch-coreml"]
    assert t["status"] == "ok", t["error"]
    assert t["info"]["partitioning"]["num_partitions"] == 1 and not _fallbacks(t)
    mil = [n for n in t["graph"]["nodes"] if n["kind"] == "compute"]
    assert mil and all(n["domain"] == "mil" and n["backend"] == "coreml" for n in mil)
    # op by op comparable with Core ML direct: the same MIL op types as coreml-ane's program
    direct = {n["op_type"] for n in report["targets"]["coreml-ane"]["graph"]["nodes"] if n["kind"] == "compute"}
    assert {n["op_type"] for n in mil} <= direct | {"cast"}
    assert all(n["source_ops"] for n in mil), [n["id"] for n in mil if not n["source_ops"]]
    assert all(n["attributes"]["predicted_unit"] for n in mil)
    assert t["info"]["compute_units_predicted"]["evidence"] == "predicted-rules"
    assert t["drift"]["evidence"] == "emulated" and 1e-6 < t["drift"]["worst"]["rel_l2"] < 1e-2     # fp16
    assert t["declared_precisions"] == ["fp16"]


@pytest.mark.slow
def test_int8_runs_quantized_and_drifts_more(et_report):
    report, _ = et_report
    t, fp32 = report["targets"][INT8], report["targets"]["executorch-xnnpack"]
    assert t["status"] == "ok", t["error"]
    assert t["precision"]["mix"].get("int8", 0) >= 2 and t["declared_precisions"] == ["int8"]
    assert t["drift"]["evidence"] == "measured"
    assert t["drift"]["worst"]["rel_l2"] > 10 * fp32["drift"]["worst"]["rel_l2"]
    q5 = next(i for i in report["checklist"]["targets"][INT8] if i["id"] == 5)
    assert "as configured" in q5["detail"]


@pytest.mark.slow
def test_side_by_side_in_every_rendering(et_report, tmp_path):
    from xc_core.export.model_explorer import write_model_explorer
    from xc_core.review.diff import diff_reports
    from xc_core.review.html import report_html
    from xc_core.review.markdown import report_markdown
    from xc_core.views.fallbacks import accelerated_targets, split_summary
    from xc_core.views.rows import overview_rows
    report, _ = et_report
    assert set(accelerated_targets(report)) >= set(ET) | {"ort-nnapi", "coreml-ane"}
    s = split_summary(report, "executorch-vulkan")
    assert s["decided_by"] == "ExecuTorch's VulkanPartitioner" and s["verdict"] is None and s["boundaries"] == 3
    rows = {r["target"]: r for r in overview_rows(report)}
    assert rows["executorch-vulkan"]["worst drift (rel L2)"] == "not run here"
    md, html = report_markdown(report), report_html(report)
    for tid in TARGETS:
        assert tid in md and tid in html
    assert "no XNNPACK config for aten.cumsum.default" in html
    files = write_model_explorer(report, str(tmp_path / "me"))
    assert any("executorch-xnnpack" in os.path.basename(f) for f in files)
    d = diff_reports(report, report)
    assert set(ET) <= set(d["targets"])
    steps = [s["name"] for s in report["targets"]["executorch-xnnpack"]["stages"]["steps"]]
    assert any("Edge dialect" in s for s in steps) and any("to_executorch" in s for s in steps)
    json.dumps(report)


@pytest.mark.slow
def test_a_program_executorch_cannot_lower_is_that_targets_error(tmp_path):
    """aten._unique2 is not Core ATen: to_edge refuses it; the error names the op, the other target completes."""
    from xc_core.api import analyze

    class Unique(torch.nn.Module):
        def forward(self, x):
            return torch.unique(x).sum() + x.sum()
    path = tmp_path / "u.pt2"
    torch.export.save(torch.export.export(Unique(), (torch.randn(4, 4),)), str(path))
    report = analyze(str(path), ["executorch-xnnpack", "inductor-cpu"], out_dir=str(tmp_path / "out"))
    t = report["targets"]["executorch-xnnpack"]
    assert t["status"] == "error" and t["error_stage"] == "compile"
    assert "aten._unique2" in t["error"] and "\n" not in t["error"]
    assert t["advice"]["op"] == "aten._unique2.default" and "Core ATen" in t["advice"]["who"]
    assert report["targets"]["inductor-cpu"]["status"] == "ok"


@pytest.mark.slow
def test_a_kernel_the_runtime_lacks_is_named_not_an_error_code(tmp_path):
    """torch.sort lowers, but this runtime build has no aten::sort.values: the error says so (the runtime itself
    says only "error: 0x14")."""
    from xc_core.api import analyze

    class Sort(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x)[0]
    path = tmp_path / "s.pt2"
    torch.export.save(torch.export.export(Sort(), (torch.randn(4, 16),)), str(path))
    t = analyze(str(path), ["executorch-xnnpack"], out_dir=str(tmp_path / "out"))["targets"]["executorch-xnnpack"]
    assert t["status"] == "error" and t["error_stage"] == "run"
    assert "aten::sort.values" in t["error"] and t["graph"] is not None
    assert t["advice"]["op"] == "aten::sort.values"


@pytest.mark.slow
def test_dynamic_batch_and_two_outputs(tmp_path):
    """A model not built for ExecuTorch: a dynamic batch dim, two outputs, a layer norm and a softmax."""
    from xc_core.api import analyze

    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = torch.nn.Linear(12, 6), torch.nn.LayerNorm(6)

        def forward(self, x):
            h = self.norm(self.fc(x))
            return torch.softmax(h, -1), h.amax(-1)
    batch = torch.export.Dim("batch", max=64)
    ep = torch.export.export(TwoHeads().eval(), (torch.randn(3, 12),), dynamic_shapes={"x": {0: batch}})
    path = tmp_path / "two.pt2"
    torch.export.save(ep, str(path))
    report = analyze(str(path), ["executorch-xnnpack", "executorch-coreml"], out_dir=str(tmp_path / "out"))
    for tid in ("executorch-xnnpack", "executorch-coreml"):
        t = report["targets"][tid]
        assert t["status"] == "ok", (tid, t["error"])
        assert len(t["drift"]["outputs"]) == 2, t["drift"]
        assert t["drift"]["worst"]["rel_l2"] < 1e-2


@pytest.mark.slow
def test_an_onnx_upload_is_lowered_from_the_routes_program(tmp_path):
    from xc_core.api import analyze
    path = tmp_path / "m.onnx"
    torch.onnx.export(torch.nn.Linear(4, 2), (torch.randn(1, 4),), str(path), dynamo=False)
    t = analyze(str(path), ["executorch-xnnpack"], out_dir=str(tmp_path / "out"))["targets"]["executorch-xnnpack"]
    assert t["status"] == "ok", t["error"]
    assert t["info"]["onnx_conversion"] and t["drift"]["worst"]["rel_l2"] < 1e-5


@pytest.mark.slow
def test_cli_lists_the_targets_and_their_options():
    out = subprocess.run([sys.executable, "-m", "xc_core", "targets"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT}, check=True).stdout
    for tid in ET:
        assert tid in out
    assert "[quantize=…]" in out and "[fp16=…]" in out


@pytest.mark.slow
def test_vulkan_fp16_variant_is_its_own_column_and_the_hooks_are_put_back(tmp_path):
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanSupportedOperators
    from executorch.exir.backend.utils import WhyNoPartition

    from xc_core.api import analyze
    before = (WhyNoPartition.__call__, VulkanSupportedOperators.log_skip)
    path = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(ConvMeanGeluCumsum().eval(), (torch.randn(1, 3, 8, 8),)), str(path))
    report = analyze(str(path), ["executorch-vulkan", "executorch-vulkan[fp16=true]"], out_dir=str(tmp_path / "o"),
                     isolate=False)
    fp16 = report["targets"]["executorch-vulkan[fp16=True]"]
    assert fp16["status"] == "ok", fp16["error"]
    assert fp16["declared_precisions"] == ["fp16"] and fp16["precision"]["mix"].get("fp16", 0) >= 3
    assert report["targets"]["executorch-vulkan"]["precision"]["mix"].get("fp16", 0) == 0
    assert (WhyNoPartition.__call__, VulkanSupportedOperators.log_skip) == before
