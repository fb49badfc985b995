"""ort-nnapi / ort-coreml: the partition figures are exactly what ORT's own checker prints for the same graph;
every CPU-EP node has a reason; boundaries and the estimate carry their assumptions; ort-cpu-int8 drifts more."""
import logging
import pathlib
import re

import pytest
import torch
from torch import nn

from xc_core.api import analyze
from xc_core.sources.spec import InputSpec, Source



def ort_checker_log(onnx_path) -> dict:
    """Run ORT's own usability checker (as `python -m onnxruntime.tools.check_onnx_model_mobile_usability` does) and
    parse what it prints per EP."""
    from onnxruntime.tools.mobile_helpers.usability_checker import analyze_model
    lines = []

    class Grab(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("xc-test-usability")
    logger.setLevel(logging.INFO)
    logger.handlers = [Grab()]
    logger.propagate = False
    analyze_model(pathlib.Path(onnx_path), logger=logger)
    out, current = {}, None
    for line in lines:
        if line.startswith("Checking ") and not line.startswith("Checking if"):
            current = line[len("Checking "):].strip()
            out.setdefault(current, {"unsupported_ops": []})
        m = re.match(r"(\d+) partitions with a total of (\d+)/(\d+) nodes", line)
        if m and current and "partitions" not in out[current]:
            out[current].update(partitions=int(m[1]), supported=int(m[2]), nodes=int(m[3]))
        if "Unsupported ops:" in line and current and not out[current]["unsupported_ops"]:
            out[current]["unsupported_ops"] = sorted(line.split("Unsupported ops:")[1].strip().split(","))
        m = re.match(r"Model should perform well with (.+) as is: (\w+)", line)
        if m:
            out[m[1]]["suitability"] = m[2]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["vision-mini", "tts-mini", "transformer-mini"])
def test_partitions_match_ort_checker_exactly(sample_report, sample):
    report, out_dir = sample_report(sample)
    printed = ort_checker_log(pathlib.Path(out_dir) / "artifacts" / "capture" / "model.onnx")
    for tid, section in (("ort-nnapi", "NNAPI"), ("ort-coreml", "CoreML MLProgram")):
        part = report["targets"][tid]["info"]["partitioning"]
        assert part["num_partitions"] == printed[section]["partitions"], (tid, printed[section])
        assert part["num_supported_nodes"] == printed[section]["supported"]
        assert part["num_nodes"] == printed[section]["nodes"]
        assert part["unsupported_ops"] == printed[section]["unsupported_ops"]
        assert part["suitability"] == printed[section]["suitability"]
        assert part["evidence"] == "predicted-runtime"


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["vision-mini", "tts-mini", "transformer-mini"])
def test_every_cpu_node_has_a_reason_and_boundaries_have_bytes(sample_report, sample):
    report, _ = sample_report(sample)
    for tid in ("ort-nnapi", "ort-coreml"):
        t = report["targets"][tid]
        cpu = [n for n in t["graph"]["nodes"] if n["backend"] == "cpu"]
        assert all(n["fallback"] and n["fallback_reason"] for n in cpu)
        b = t["info"]["boundaries"]
        assert all(item["bytes"] > 0 for item in b["items"])
        assert b["latency_cliff"]["assumptions"]["bandwidth_gb_s"] > 0
        assert b["latency_cliff"]["estimate_ms"] >= b["count"] * b["latency_cliff"]["assumptions"][
            "transition_overhead_ms"]


@pytest.mark.slow
@pytest.mark.parametrize("sample", ["vision-mini", "tts-mini", "transformer-mini"])
def test_int8_drifts_more_than_fp32_and_emulation_is_labelled(sample_report, sample):
    report, _ = sample_report(sample)
    t = report["targets"]
    assert t["ort-cpu-int8"]["drift"]["evidence"] == "measured"
    assert t["ort-cpu-int8"]["drift"]["worst"]["rel_l2"] > 10 * t["ort-cpu"]["drift"]["worst"]["rel_l2"]
    assert "int8" in t["ort-cpu-int8"]["precision"]["mix"]
    coreml = t["ort-coreml"]["drift"]          # fp16 on by default for the CoreML EP
    assert coreml["evidence"] == "emulated" and "fp16" in coreml["assumption"]
    nnapi = t["ort-nnapi"]["drift"]            # NNAPI's fp16 flag is opt-in: CPU EP numbers, labelled so
    assert nnapi["evidence"] == "measured" and "CPU EP" in nnapi["assumption"]


class MiddleUnsupported(nn.Module):
    """Conv → ReLU → HardSigmoid → Conv: NNAPI has no HardSigmoid, so it falls back in the middle."""
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU()
        self.gate = nn.Hardsigmoid()
        self.second = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        return self.second(self.gate(self.act(self.first(x))))


def test_a_single_unsupported_op_in_the_middle():
    src = Source(kind="sample", name="middle", sha256="2" * 64, inputs=[InputSpec("x", [1, 3, 8, 8], "float32")],
                 module=MiddleUnsupported().eval())
    report = analyze(src, ["ort-nnapi"], target_options={"ort-nnapi": {"fp16": True}})
    t = report["targets"]["ort-nnapi[fp16=True]"]
    part, bounds = t["info"]["partitioning"], t["info"]["boundaries"]
    assert part["num_partitions"] == 2 and part["unsupported_ops"] == ["ai.onnx:HardSigmoid"]
    assert bounds["count"] == 2
    assert {b["direction"] for b in bounds["items"]} == {"nnapi→cpu", "cpu→nnapi"}
    assert all(b["bytes"] == 1 * 8 * 8 * 8 * 4 for b in bounds["items"])   # fp32 [1, 8, 8, 8]
    fallbacks = [n for n in t["graph"]["nodes"] if n["fallback"]]
    assert [(n["op_type"], n["fallback_reason"], n["module_path"]) for n in fallbacks] == [
        ("HardSigmoid", "unsupported operator", "gate")]
    assert t["drift"]["evidence"] == "emulated" and t["precision"]["mix"] == {"fp16": 3, "fp32": 1}
    # Why NNAPI is out of the default set is said in its report block, with its other notes.
    assert [n for n in t["notes"] if n.startswith("NNAPI is deprecated since Android 15: not in xc's default")]


def test_cli_option_flags(tmp_path):
    from xc_core.errors import XcInputError
    from xc_core.targets import parse_target_options
    assert parse_target_options(["ort-nnapi.fp16=true", "ort-nnapi.bandwidth_gb_s=8"], ["ort-nnapi"]) == {
        "ort-nnapi": {"fp16": True, "bandwidth_gb_s": 8}}
    with pytest.raises(XcInputError, match="takes no option 'speed'"):
        parse_target_options(["ort-nnapi.speed=3"], ["ort-nnapi"])
    with pytest.raises(XcInputError, match="not among --targets"):
        parse_target_options(["ort-coreml.fp16=false"], ["ort-nnapi"])
