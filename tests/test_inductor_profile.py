"""`inductor-cpu` times each compiled node: torch.profiler over a few runs of the module torch.compile built, each
generated kernel's own RecordFunction and each extern ATen call matched to the debug handles of output_code.py."""
import os
import re
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from tiny_models import ConvMeanGeluCumsum  # noqa: E402
from xc_core.capture import capture  # noqa: E402
from xc_core.inputs.values import random_inputs  # noqa: E402
from xc_core.sources.spec import InputSpec, Source  # noqa: E402
from xc_core.targets import OK, execute_target, make_target  # noqa: E402
from xc_core.targets.inductor_cpu import _match_calls  # noqa: E402


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    model = ConvMeanGeluCumsum().eval()
    src = Source(kind="sample", name="cmgc", sha256="1" * 64, inputs=[InputSpec("x", [1, 3, 16, 16], "float32")],
                 module=model)
    feeds = random_inputs(src.inputs)
    cap = capture(src, str(tmp_path_factory.mktemp("cap")), feeds)
    r = execute_target(make_target("inductor-cpu"), cap, feeds, str(tmp_path_factory.mktemp("inductor")))
    assert r.status == OK, r.error
    return r


@pytest.mark.slow
def test_every_kernel_is_timed_by_the_profiler(profiled):
    r = profiled
    nt = r.node_times
    assert nt and nt["evidence"] == "measured" and r.evidence["time"] == "measured"
    assert nt["runs"] >= 1 and "profile" in r.timings
    compute = r.graph.compute_nodes()
    assert compute and nt["compute_nodes"] == len(compute)
    assert nt["compute_nodes_timed"] == len(compute), [n.id for n in compute if n.measured_us is None]
    # Every node of the graph (the debug handles of output_code.py) is timed, and every time sits on one of them.
    assert all(n.measured_us is not None and n.measured_us > 0 for n in r.graph.nodes)
    assert nt["nodes_timed"] == len(r.graph.nodes)
    assert nt["total_us"] == pytest.approx(sum(n.measured_us for n in r.graph.nodes), abs=0.01 * len(r.graph.nodes))
    # The kernels run inside the whole run: their sum cannot exceed it (medians of the same runs, so some slack).
    assert nt["run_us"] and nt["total_us"] <= 1.5 * nt["run_us"]
    assert not [n for n in r.notes if n.startswith("time per node")], r.notes


@pytest.mark.slow
def test_the_generated_kernels_name_themselves_to_the_profiler(profiled):
    """What the matching rests on: each generated kernel opens a RecordFunction under its own name (Inductor's
    cpp.enable_kernel_profile), and the graph has both kinds of calls — generated and extern."""
    r = profiled
    code = open(next(p for p in r.artifacts if os.path.basename(p) == "output_code.py")).read()
    generated = [n for n in r.graph.nodes if n.op_type == "cpp_fused"]
    assert generated and any(n.op_type != "cpp_fused" for n in r.graph.nodes)
    for n in generated:
        assert re.search(r'RAIIAtenRecordFunctionHandle record_(graph_\d+_)?' + re.escape(n.kernel), code), n.kernel


def _ev(name, start, us):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start), cpu_time_total=us)


@pytest.mark.slow
def test_repeated_kernels_are_matched_by_call_order_and_glue_is_left_over():
    """Two calls of one generated kernel take the handles of that name in order; an extern call is its ATen op; an
    allocation between calls is no handle's."""
    handles = ["cpp_fused_relu_0:1", "extern_kernels.convolution:2", "cpp_fused_relu_0:3",
               "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:4", "extern_kernels.addmm:5"]
    children = [_ev("graph_0_cpp_fused_relu_0", 0, 1.0), _ev("aten::empty", 1, 0.5),
                _ev("aten::convolution", 2, 10.0), _ev("graph_0_cpp_fused_relu_0", 3, 2.0),
                _ev("aten::_scaled_dot_product_flash_attention_for_cpu", 4, 7.0), _ev("aten::addmm", 5, 3.0)]
    times, glue = _match_calls(handles, list(reversed(children)))      # the profiler's order is not relied on
    assert times == {"cpp_fused_relu_0:1": 1.0, "extern_kernels.convolution:2": 10.0, "cpp_fused_relu_0:3": 2.0,
                     "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:4": 7.0,
                     "extern_kernels.addmm:5": 3.0}
    assert glue == 0.5
    # A kernel that did not run in this region (another graph's) is left untimed, not given another's event.
    times, _ = _match_calls(["cpp_fused_mul_1:1", "extern_kernels.addmm:2"], children)
    assert times == {"extern_kernels.addmm:2": 3.0}
    # A call missing from its place does not take a later call of the same kernel: that one stays its handle's.
    times, left = _match_calls(["cpp_fused_relu_0:1", "extern_kernels.convolution:2", "cpp_fused_relu_0:3"],
                               children[1:4])
    assert times == {"extern_kernels.convolution:2": 10.0, "cpp_fused_relu_0:3": 2.0} and left == 0.5
