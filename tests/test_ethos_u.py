"""Arm Ethos-U through ExecuTorch's Arm backend: placement from the partitioner's own support checks and from Vela,
Vela's per-layer cycles as `estimated-compiler` time per node, numerics from TOSA's reference model (`emulated`)
against the fp32 reference, the TOSA and Vela steps — on a net with an op the Ethos-U cannot take (sort) and two
outputs."""
import csv
import glob
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")
pytest.importorskip("ethosu.vela")
pytest.importorskip("tosa_reference_model")

ETHOS = ("executorch-ethos-u55", "executorch-ethos-u85")


class SortInTheMiddle(torch.nn.Module):
    """Conv+BN+ReLU → mean → Linear → GELU → sort (no TOSA op for it: left to the CPU) → Linear → cumsum, and
    the pooled features as a second output."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc1 = torch.nn.Linear(8, 6)
        self.fc2 = torch.nn.Linear(6, 4)

    def forward(self, x):
        pooled = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        y = torch.nn.functional.gelu(self.fc1(pooled))
        y = torch.sort(y, dim=1).values
        return torch.cumsum(self.fc2(y), 1), pooled


@pytest.fixture(scope="module")
def ethos_report(tmp_path_factory):
    from xc_core.api import analyze
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ethos")
    path = folder / "net.pt2"
    torch.export.save(torch.export.export(SortInTheMiddle().eval(), (torch.randn(1, 3, 16, 16),)), str(path))
    return analyze(str(path), list(ETHOS), out_dir=str(folder / "out")), str(folder / "out")


def _compute(t):
    return [n for n in t["graph"]["nodes"] if n["kind"] == "compute"]


@pytest.mark.slow
@pytest.mark.parametrize("tid", ETHOS)
def test_placement_from_the_partitioner_and_vela(ethos_report, tid):
    report, _ = ethos_report
    t = report["targets"][tid]
    assert t["status"] == "ok", t["error"]
    part = t["info"]["partitioning"]
    assert part["decided_by"] == "ExecuTorch's EthosUPartitioner" and part["evidence"] == "reported"
    assert part["num_partitions"] == 2                       # the sort splits the program in two delegates
    fallbacks = {n["op_type"]: n["fallback_reason"] for n in t["graph"]["nodes"] if n.get("fallback")}
    assert "sort" in fallbacks
    # the Arm backend's own support check, in its words (executorch/backends/arm/operator_support/)
    assert "TOSA" in fallbacks["sort"] or "not supported" in fallbacks["sort"].lower()
    on_npu = [n for n in _compute(t) if n["backend"] == "ethos-u"]
    assert {s for n in on_npu for s in n["source_ops"]} >= {"conv2d", "linear", "gelu", "cumsum"}
    assert all(n["precision"] == "int8" for n in on_npu)
    vela = t["info"]["vela"]
    assert vela["evidence"] == "estimated-compiler" and vela["npu_layers"] > 0 and vela["cpu_layers"] == 0
    assert len(vela["delegates"]) == 2
    assert all(s["sram_used_kib"] > 0 and s["cycles_total"] > 0 for s in vela["delegates"].values())
    # question 2 by the partitioner's split, with the compiler's own beside it
    q2 = next(q for q in report["checklist"]["targets"][tid] if q["id"] == 2)
    assert q2["verdict"] in ("warn", "fail") and "sort" in q2["detail"]
    assert f"Vela put {vela['npu_layers']} layer(s) on the NPU and 0 on the CPU" in q2["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("tid", ETHOS)
def test_vela_cycles_per_node_as_the_compilers_estimate(ethos_report, tid):
    report, out = ethos_report
    t = report["targets"][tid]
    nt = t["node_times"]
    assert nt["evidence"] == "estimated-compiler" and t["evidence"]["time"] == "estimated-compiler"
    assert nt["runs"] == 0 and "Vela" in nt["method"]
    on_npu = [n for n in _compute(t) if n["backend"] == "ethos-u"]
    estimated = [n for n in on_npu if n.get("estimated_us") is not None]
    assert len(estimated) >= 0.9 * len(on_npu)
    assert all(n.get("measured_us") is None for n in t["graph"]["nodes"])     # an estimate is never a measurement
    conv = next(n for n in on_npu if n["op_type"] == "convolution")
    assert conv["estimated_us"] > 0 and conv["attributes"]["vela"]["cycles"] > 0
    assert any(layer.startswith("Conv2D") for layer in conv["attributes"]["vela"]["layers"])
    # Checked against Vela's own files: per delegate, the cycles xc put on nodes plus those it could not trace
    # add up to the cycles of Vela's per-layer table.
    folders = sorted(glob.glob(os.path.join(out, "artifacts", tid, "vela", "delegate_*")))
    assert len(folders) == 2
    vela_cycles = 0
    for folder in folders:
        with open(os.path.join(folder, "output", "out_per-layer.csv"), newline="") as f:
            vela_cycles += sum(int(float(r["Op Cycles"])) for r in csv.DictReader(f))
    node_cycles = sum(n["attributes"]["vela"]["cycles"] for n in on_npu if "vela" in n["attributes"])
    clock = next(iter(t["info"]["vela"]["delegates"].values()))["core_clock_hz"]
    assert node_cycles + round(nt["unattributed_us"] * clock / 1e6) == vela_cycles
    # … and the time per node (Where the time goes) adds up to the inference time of Vela's network summary (the
    # Overview's Vela table): one figure, the same wherever it is shown
    vela_us = sum(s["inference_time_s"] * 1e6 for s in t["info"]["vela"]["delegates"].values())
    assert nt["total_us"] + nt["unattributed_us"] == pytest.approx(vela_us, abs=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("tid", ETHOS)
def test_tosa_reference_numerics_at_int8_level(ethos_report, tid):
    report, _ = ethos_report
    t = report["targets"][tid]
    drift = t["drift"]
    assert drift["evidence"] == "emulated" and "TOSA's reference model" in t["info"]["numerics_assumption"]
    assert set(drift["outputs"]) == {"output 0", "output 1"} or len(drift["outputs"]) == 2
    worst = drift["worst"]["rel_l2"]
    # int8: not bit-equal to fp32, and not garbage either
    assert 1e-5 < worst < 0.1


@pytest.mark.slow
def test_stages_tosa_and_vela_and_the_pte(ethos_report):
    report, out = ethos_report
    t = report["targets"]["executorch-ethos-u55"]
    names = [s["name"] for s in t["stages"]["steps"]]
    assert any("PT2E-quantized with EthosUQuantizer" in n for n in names)
    assert any(n.startswith("TOSA:") for n in names) and any(n.startswith("Vela:") for n in names)
    pte = [p for p in t["artifacts"] if p.endswith(".pte")]
    assert pte


def test_a_vela_layer_goes_to_the_tosa_op_of_its_own_kind():
    """Vela names a fused pass after its last op: the linear's CONV2D in a pass ending in the GELU's TABLE is
    named "tosa_table_default" (seen with Vela 5.2.0); a layer Vela added is its op's name plus a suffix."""
    from xc_core.targets.executorch.vela_layers import _layer_op
    ops = [("tosa_transpose_default", "transpose"), ("tosa_conv2d_default", "conv2d"),
           ("tosa_rescale_default_1", "rescale"), ("tosa_reduce_sum_default", "reducesum"),
           ("tosa_conv2d_default_1", "conv2d"), ("tosa_rescale_default_6", "rescale"),
           ("tosa_table_default", "table")]
    assert _layer_op({"Name": "tosa_rescale_default_1", "Original Operator": "Conv2D"}, ops) == "tosa_conv2d_default"
    assert _layer_op({"Name": "tosa_table_default", "Original Operator": "Conv2D"}, ops) == "tosa_conv2d_default_1"
    assert _layer_op({"Name": "tosa_table_default", "Original Operator": "Table"}, ops) == "tosa_table_default"
    assert _layer_op({"Name": "tosa_reduce_sum_default_transpose", "Original Operator": "ReduceSum"}, ops) == \
        "tosa_reduce_sum_default"
    assert _layer_op({"Name": "#176", "Original Operator": "Transpose"}, ops) == "tosa_transpose_default"
    assert _layer_op({"Name": "#12", "Original Operator": "Conv2D"}, ops) is None     # two convs: no guess


@pytest.mark.slow
def test_a_torchscript_source_quantizes_for_both_int8_flows(tmp_path):
    """TorchScript converted by torch's TS2EPConverter holds its weights as buffers: PT2E's batch-norm folding failed
    on it ("attribute 'weight' already exists"), for XNNPACK's int8 variant as for the Ethos-U."""
    import numpy as np

    from tiny_models import conv_bn_relu
    from xc_core.api import analyze
    model, args = conv_bn_relu()
    torch.jit.script(model).save(str(tmp_path / "m.pt"))
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32))
    report = analyze(str(tmp_path / "m.pt"), ["executorch-ethos-u55", "executorch-xnnpack[quantize=int8]"],
                     inputs_npz=str(tmp_path / "in.npz"), out_dir=str(tmp_path / "out"))
    for tid in ("executorch-ethos-u55", "executorch-xnnpack[quantize=int8]"):
        t = report["targets"][tid]
        assert t["status"] == "ok", (tid, t["error"])
        assert t["drift"]["worst"]["rel_l2"] < 0.05


@pytest.mark.slow
def test_overview_and_fallbacks_pages_show_the_ethos_u_column():
    """The dashboard: Vela's network summary and the estimated time on the Overview; the Ethos-U's fallbacks (the
    ops the Arm backend left to the CPU, in its words) on the Fallbacks page, with the kernel time an estimate."""
    from test_pages import run_page
    targets = ["executorch-ethos-u55", "ort-cpu"]
    at = run_page("overview", "tts-mini", targets)
    tables = [d.value for d in at.dataframe]
    vela = next(t for t in tables if "SRAM used KiB" in t.columns)
    assert set(vela["target"]) == {"executorch-ethos-u55"} and set(vela["evidence"]) == {"estimated-compiler"}
    assert len(vela) == 2                                     # one row per delegate: tts-mini lowers to two
    captions = " ".join(c.value for c in at.caption)
    assert "estimated-compiler" in captions and "Vela" in captions
    at = run_page("fallbacks", "tts-mini", targets)
    fallback_table = next(d.value for d in at.dataframe if "reason" in d.value.columns)
    mine = fallback_table[fallback_table["target"] == "executorch-ethos-u55"] \
        if "target" in fallback_table.columns else fallback_table
    assert len(mine) >= 1 and mine["reason"].str.contains("U55|TOSA|supported").any()
