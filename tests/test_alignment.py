"""Alignment across targets and "expected fusion did not fire"."""
import pytest
import torch
from torch import nn

from xc_core.api import analyze
from xc_core.sources.spec import InputSpec, Source

SAMPLES = ["vision-mini", "tts-mini", "transformer-mini"]


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_every_target_maps_95_percent_of_compiled_nodes(sample_report, sample):
    report, _ = sample_report(sample)
    cov = report["alignment"]["coverage"]
    assert set(cov) == set(report["targets"])
    for tid, c in cov.items():
        assert c["ratio"] >= 0.95, (tid, c["unmapped"])
        for item in c["unmapped"] + c["inserted"]:
            assert item["kind"] in ("compute", "layout", "cast", "alias")
    rows = report["alignment"]["source_ops"]
    assert rows and all(set(r["targets"]) == set(report["targets"]) for r in rows)
    # every source op is carried somewhere on ort-cpu, or was folded away (status absent, never missing)
    assert {r["targets"]["ort-cpu"]["status"] for r in rows} <= {"present", "fused", "fallback", "absent"}


class ConvRelu(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.out = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        return self.out(self.act(self.conv(x)))


def test_conv_relu_fused_on_one_target_did_not_fire_on_another():
    src = Source(kind="sample", name="conv-relu", sha256="4" * 64, inputs=[InputSpec("x", [1, 3, 8, 8], "float32")],
                 module=ConvRelu().eval())
    report = analyze(src, ["ort-cpu", "ort-nnapi"])
    fired = {p["pattern"]: p["targets"] for p in report["fusion_matrix"]["patterns"]}
    assert fired["conv2d+relu"] == {"ort-cpu": 1}
    missed = [m for m in report["fusion_matrix"]["not_fired"] if m["pattern"] == "conv2d+relu"]
    assert [(m["fired_on"], m["missing_on"]) for m in missed] == [("ort-cpu", "ort-nnapi")]
    assert missed[0]["source_ops"] == ["conv2d", "relu"] and len(missed[0]["carried_by"]) == 2
    # ConvActivationFusion is a CPU-EP (Level 2) fusion: its absence on NNAPI is that compiler's design, shown as
    # information — question 3 does not warn for it.
    q3 = report["checklist"]["targets"]["ort-nnapi"][2]
    assert q3["verdict"] == "pass" and "other targets fused" in q3["detail"]
    assert report["checklist"]["targets"]["ort-cpu"][2]["verdict"] == "pass"


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_checklist_is_never_blank(sample_report, sample):
    report, _ = sample_report(sample)
    for tid, items in report["checklist"]["targets"].items():
        assert [i["id"] for i in items] == [1, 2, 3, 4, 5]
        assert all(i["verdict"] in ("pass", "warn", "fail", "not applicable") and i["detail"] for i in items)
    c = report["checklist"]["targets"]
    assert c["ort-cpu"][1]["verdict"] == "not applicable"              # no accelerator
    assert c["ort-cpu-int8"][4]["verdict"] == "warn"                   # int8 as configured
    assert c["ort-cpu"][3]["verdict"] == "pass"                        # fp32 outputs match
