"""`inductor-cpu`: torch.compile (TorchInductor) compiles and runs each bundled sample for real; every kernel it
generated is a node traced to the source ops it absorbed, read from Inductor's own provenance mapping."""
import json
import os

import pytest

from xc_core.api import analyze

SAMPLES = ["vision-mini", "tts-mini", "transformer-mini"]


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
def test_inductor_fuses_source_ops_into_kernels_and_matches_eager(sample_report, sample):
    report, out = sample_report(sample)      # every target, inductor-cpu among them (conftest.ALL_TARGETS)
    t = report["targets"]["inductor-cpu"]
    assert t["status"] == "ok", t["error"]
    assert t["evidence"]["numerics"] == "measured"
    assert "read_back_check" not in t["info"], t["info"].get("read_back_check")
    groups = [g for g in t["fusions"]["groups"] if len(g["absorbed"]) >= 2]
    assert groups, "no kernel absorbed two source ops"
    assert t["drift"]["worst"]["rel_l2"] <= 1e-5
    # What xc shows is what Inductor wrote: every kernel node is one of the generated code's debug handles, and
    # the kernels of the provenance mapping are exactly the graph's nodes.
    files = {os.path.basename(p): os.path.join(out, p) for p in t["artifacts"]}
    code = open(files["output_code.py"]).read()
    mapping = json.load(open(files["inductor_provenance_tracking_node_mappings.json"]))
    assert {n["id"] for n in t["graph"]["nodes"]} == set(mapping["cppCodeToPost"])
    for g in groups:
        assert g["node"] in code, g["node"]
    # Generated C++ kernels fuse; an extern call may too (the SDPA kernel Inductor's pattern matcher puts in place
    # of an attention subgraph).
    assert any(g["op_type"] == "cpp_fused" for g in groups)
    coverage = report["alignment"]["coverage"]["inductor-cpu"]
    assert coverage["ratio"] >= 0.9, coverage


def test_an_onnx_source_the_route_cannot_run_names_its_node(tmp_path):
    """An ONNX source reaches torch.compile through the ONNX → PyTorch route; a node PyTorch cannot run at the
    analysis shapes (an index out of range) is the error, by name."""
    from test_workers import gathernd_out_of_range
    report = analyze(gathernd_out_of_range(tmp_path / "g.onnx"), ["inductor-cpu"])
    t = report["targets"]["inductor-cpu"]
    assert t["status"] == "error" and t["error_stage"] == "capture"
    assert t["error"].startswith("no PyTorch program from the ONNX: GatherND 'GatherND_1' (domain ai.onnx)")
