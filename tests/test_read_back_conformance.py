"""The read-back contract, asserted for every registered target: unique node ids, `fused_from` within the graph the
compiler was given, `source_ops` within the captured graph, a backend on every compute node (targets/base.py,
check_result). The targets come from the registry, so a target is covered the day it registers; one that cannot
run on this host must say so as `unavailable` with the reason its `available()` gives, never be skipped."""
import pytest

from xc_core.targets import OK, REGISTRY, UNAVAILABLE, target_ids

# Two samples whose graphs differ in kind (convolutions; attention), analysed once each with every target.
SAMPLES = ("vision-mini", "transformer-mini")


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("tid", target_ids())
def test_every_registered_target_passes_the_read_back_checks(sample_report, sample, tid):
    report, _ = sample_report(sample, tuple(target_ids()))
    block = report["targets"][tid]
    runs_here, why_not = REGISTRY[tid].available()
    if not runs_here:
        assert block["status"] == UNAVAILABLE and block["error"] == why_not, (block["status"], block["error"])
        assert why_not.strip() and "\n" not in why_not
        return
    # A target that can run here must read its graph back: an error would leave the contract unchecked.
    assert block["status"] == OK, block["error"]
    assert block["graph"]["nodes"], "nothing was read back, so nothing was checked"
    assert "read_back_check" not in block["info"], block["info"]["read_back_check"]


def test_the_checks_catch_a_bad_read_back():
    from xc_core.ir import COMPUTE, Graph, Node
    from xc_core.targets.base import TargetResult, check_result

    class Cap:
        before = Graph("b", "captured", [Node("conv", "Conv")])
        onnx_graph = before
    g = Graph("t", "runtime", [Node("a", "Conv", kind=COMPUTE, backend="cpu", fused_from=["ghost"],
                                    source_ops=["conv"]),
                               Node("a", "Relu", kind=COMPUTE, source_ops=["nowhere"])])
    problems = check_result(TargetResult("t", graph=g), Cap())
    assert len(problems) == 4
    assert any("repeat" in p for p in problems) and any("ghost" in p for p in problems)
    assert any("nowhere" in p for p in problems) and any("no backend" in p for p in problems)
