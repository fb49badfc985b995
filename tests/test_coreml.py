"""Core ML targets: MIL before/after with the passes that fused, provenance, cited unit predictions, emulated
numerics, and compiled Core ML uploads inspected without a source model."""
import json
import os
import subprocess
import sys
import zipfile

import pytest

from xc_core.targets.coreml_rules import ANE, CPU, GPU, UNKNOWN, predict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = ["vision-mini", "tts-mini", "transformer-mini"]


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_mil_before_after_passes_and_provenance(sample_report, sample):
    report, _ = sample_report(sample)
    for tid in ("coreml-ane", "coreml-cpu"):
        t = report["targets"][tid]
        assert t["status"] == "ok", t["error"]
        info = t["info"]
        assert info["mil_ops_before"] > info["mil_ops_after"], (tid, info["mil_ops_before"], info["mil_ops_after"])
        for g in t["fusions"]["groups"]:
            assert g["pass"], g                      # each fused op names the pass that produced it
        ops = [n for n in t["graph"]["nodes"] if n["kind"] != "constant"]
        mapped = [n for n in ops if n["source_ops"]]
        assert len(mapped) / len(ops) >= 0.95, (tid, [n["id"] for n in ops if not n["source_ops"]])
        for n in ops:
            assert n["backend"] in (ANE, GPU, CPU, UNKNOWN)
            assert n["attributes"]["unit_reason"], n["id"]
        assert t["graph"]["evidence"] == "predicted-rules"


@pytest.mark.slow
def test_fusion_names_its_pass(sample_report):
    report, _ = sample_report("vision-mini")
    groups = report["targets"]["coreml-ane"]["fusions"]["groups"]
    assert any(g["pass"] == "fuse_conv_batchnorm" and g["pattern"] == "conv+batch_norm → conv" for g in groups)


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_fp16_drifts_more_and_is_emulated(sample_report, sample):
    report, _ = sample_report(sample)
    ane, cpu = report["targets"]["coreml-ane"]["drift"], report["targets"]["coreml-cpu"]["drift"]
    assert ane["evidence"] == "emulated" and cpu["evidence"] == "emulated"
    assert ane["worst"]["rel_l2"] > 10 * cpu["worst"]["rel_l2"]
    assert cpu["worst"]["rel_l2"] <= 1e-5      # the interpreter in fp32 matches torch
    assert "emulated" in ane["assumption"]


@pytest.mark.slow
def test_casts_are_counted(sample_report):
    report, _ = sample_report("tts-mini")
    casts = report["targets"]["coreml-ane"]["info"]["casts"]
    assert casts["count"] == sum(casts["by_type"].values()) > 0


def test_rule_table():
    assert predict("conv", "fp16", "ALL").unit == ANE
    assert predict("conv", "fp32", "ALL").unit == GPU                     # fp32 never on the Neural Engine
    assert predict("conv", "fp16", "CPU_ONLY").unit == CPU
    assert predict("gather", "fp16", "ALL").unit == CPU
    assert predict("conv", "fp16", "ALL", {"dilations": [2, 2]}).unit == CPU
    assert predict("frobnicate", "fp16", "ALL").unit == UNKNOWN          # no rule: unknown, never guessed
    for op in ("conv", "gather", "conv_transpose", "layer_norm"):
        p = predict(op, "fp16", "ALL")
        assert p.source and p.reason


@pytest.mark.slow
def test_cli_coreml_targets_and_zipped_mlpackage_upload(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "xc_core", "analyze", "sample:tts-mini", "--targets",
                        "coreml-ane,coreml-cpu", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    zipped = out / "artifacts" / "coreml-ane" / "model.mlpackage.zip"
    assert zipfile.is_zipfile(zipped)
    r = subprocess.run([sys.executable, "-m", "xc_core", "analyze", str(zipped), "--targets", "all", "--out",
                        str(tmp_path / "upload")], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "upload" / "report.json").read_text())
    assert report["source"]["kind"] == "coreml" and report["reference"] is None
    t = report["targets"]["coreml-ane"]
    assert t["status"] == "ok" and t["precision"]["mix"].get("fp16")
    assert t["info"]["compute_units_predicted"]["share"].get("ane", 0) > 0.5
    assert t["outputs"]["evidence"] == "emulated" and t["outputs"]["values"]
    assert report["targets"]["ort-cpu"]["status"] == "unavailable"


def test_bad_coreml_uploads_are_one_line(tmp_path):
    from xc_core.errors import XcInputError
    from xc_core.sources import load_source
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("../escape.txt", "x")
    with pytest.raises(XcInputError, match="unsafe path"):
        load_source(str(evil))
    notmodel = tmp_path / "m.mlmodel"
    notmodel.write_bytes(b"\x00\x01garbage")
    with pytest.raises(XcInputError, match="m.mlmodel"):
        load_source(str(notmodel))


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "darwin", reason="MLComputePlan and Core ML predict need macOS")
def test_macos_uses_compute_plan_and_predict(sample_report):
    report, _ = sample_report("vision-mini")
    t = report["targets"]["coreml-ane"]
    assert t["graph"]["evidence"] == "reported" and t["drift"]["evidence"] == "measured"


@pytest.mark.slow
def test_fp32_takes_the_frontend_program_as_before_without_copying_it(tmp_path, monkeypatch):
    """fp32 adds no casts, so the program before the passes is the one the frontend produced: the recorder
    copies the MIL program (seconds on a long one) only for fp16, where the casts make `before` differ."""
    import torch

    from xc_core.api import analyze
    from xc_core.targets import coreml

    class TwoOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            return y, y.mean(dim=(2, 3))

    path = tmp_path / "two.pt2"
    torch.export.save(torch.export.export(TwoOutputs().eval(), (torch.randn(1, 3, 16, 16),)), str(path))
    copies = []
    real_copy = coreml._copy_program
    monkeypatch.setattr(coreml, "_copy_program", lambda prog: copies.append(prog) or real_copy(prog))
    report = analyze(str(path), ["coreml-cpu", "coreml-ane"], isolate=False)   # the patch lives here
    assert len(copies) == 1                                  # coreml-ane's; coreml-cpu copied nothing
    befores = {}
    for tid in ("coreml-cpu", "coreml-ane"):
        t = report["targets"][tid]
        assert t["status"] == "ok", t["error"]
        frontend = t["stages"]["steps"][0]
        assert frontend["stage"] == "import"
        befores[tid] = t["info"]["mil_ops_before"] - (frontend["op_count"] + frontend["counts"]["casts"])
        assert t["info"]["mil_ops_before"] > t["info"]["mil_ops_after"]      # conv + batch_norm fused
    assert befores["coreml-cpu"] == 0                       # before is the frontend program itself
    assert befores["coreml-ane"] > 0                        # the fp16 casts, added to the copy


def test_an_op_the_emulator_cannot_run_keeps_the_compile_and_names_the_emulator(tmp_path, monkeypatch):
    """The program compiled; only xc's numpy emulation of it stopped at one op. The target keeps its compile facts
    (predicted units, MIL counts), its numerics say they were not run and why, and coremltools is not blamed."""
    import torch

    from xc_core.analysis.advice import XC, advise
    from xc_core.api import analyze
    from xc_core.emulate import mil_interpreter

    class Small(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x * 2.0) + 1.0

    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(Small().eval(), (torch.randn(2, 8),)), str(path))
    monkeypatch.delitem(mil_interpreter.OPS, "relu")              # an op the interpreter does not know
    report = analyze(str(path), ["coreml-cpu"], isolate=False)   # the patch lives here
    t = report["targets"]["coreml-cpu"]
    assert t["status"] == "ok", t["error"]
    assert "cannot emulate op relu" in t["info"]["numerics_not_run"]
    assert t["info"]["mil_ops_after"] > 0 and not (t.get("drift") or {}).get("outputs")
    advice = advise("coreml-cpu", "EmulationError: cannot emulate op concat (concat_3): zero-dimensional arrays")
    assert advice["owner"] == XC and advice["op"] == "concat" and "emulator" in advice["who"]
