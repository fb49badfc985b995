"""executorch-xnnpack times each compiled node from an ETDump of its own .pte: the CPU kernels' native_call events
and the XNNPACK delegate's per-operator events, matched to the nodes xc reads back (batch norm and ReLU folded
into the convolution XNNPACK runs them in)."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch")

from tiny_models import ConvMeanGeluCumsum  # noqa: E402


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    from xc_core.api import analyze  # noqa: F401 — registers the targets
    from xc_core.capture import capture
    from xc_core.inputs.values import random_inputs
    from xc_core.sources.spec import InputSpec, Source
    from xc_core.targets import execute_target, make_target
    torch.manual_seed(0)
    src = Source(kind="sample", name="tiny-et", sha256="2" * 64, inputs=[InputSpec("x", [1, 3, 16, 16], "float32")],
                 module=ConvMeanGeluCumsum().eval())
    feeds = random_inputs(src.inputs)
    folder = tmp_path_factory.mktemp("etprof")
    cap = capture(src, str(folder / "cap"), feeds)
    return execute_target(make_target("executorch-xnnpack"), cap, feeds, str(folder / "xnnpack")), cap


@pytest.mark.slow
def test_every_compute_node_is_timed_from_the_etdump(profiled):
    r, _ = profiled
    assert r.status == "ok", r.error
    nt = r.node_times
    assert nt["evidence"] == "measured" and r.evidence["time"] == "measured"
    assert "ETDump" in nt["method"] and nt["runs"] >= 1 and nt["host_cpu"]
    compute = r.graph.compute_nodes()
    timed = [n for n in compute if n.measured_us is not None]
    assert nt["compute_nodes"] == len(compute) and nt["compute_nodes_timed"] == len(timed)
    assert len(timed) >= 0.8 * len(compute)
    assert all(n.measured_us >= 0 for n in timed)          # XNNPACK logs whole µs: a tiny op may read 0
    assert nt["total_us"] > 0 and nt["run_us"] > 0 and nt["unattributed_us"] >= 0
    assert nt["total_us"] <= nt["run_us"] * 1.05             # the nodes' times are parts of the run
    assert r.timings["profile"] > 0


@pytest.mark.slow
def test_times_land_on_the_read_back_nodes_of_both_kinds(profiled):
    r, _ = profiled
    by_id = r.graph.by_id()
    # The CPU kernels (mean without keepdim, cumsum) by their native_call events, nanosecond ticks: > 0.
    cpu = [n for n in r.graph.compute_nodes() if n.backend == "cpu"]
    assert {n.op_type for n in cpu} == {"mean", "cumsum"}
    assert all(n.measured_us > 0 and n.id in by_id for n in cpu)
    # Delegated ops by XNNPACK's operator events: the convolution runs batch norm and ReLU folded into it.
    conv = next(n for n in r.graph.compute_nodes() if n.op_type == "convolution")
    assert conv.backend == "xnnpack" and conv.measured_us is not None
    assert conv.fused_from[0] == conv.id and len(conv.fused_from) >= 3
    assert {s for s in conv.source_ops} >= {"conv2d", "batch_norm", "relu"}
    assert not any(n.op_type in ("relu", "_native_batch_norm_legit_no_training") for n in r.graph.nodes)
    given = {n.id for n in r.input_graph.nodes}
    assert set(conv.fused_from) <= given and not r.contract     # xc's read-back check has nothing to say
    delegated = [n for n in r.graph.compute_nodes() if n.backend == "xnnpack"]
    assert {n.op_type for n in delegated} == {"convolution", "linear", "gelu"}
    assert all(n.measured_us is not None for n in delegated)


@pytest.mark.slow
def test_the_folded_graph_still_connects(profiled):
    """Folding keeps the edges: every input of a node is a graph input, a constant or another node's output."""
    r, _ = profiled
    made = {t.name for n in r.graph.nodes for t in n.outputs}
    graph_inputs = {t.name for t in r.graph.inputs}
    for n in r.graph.compute_nodes():
        fed = {t.name for t in n.inputs} & (made | graph_inputs)
        assert fed, n.id
    assert {t.name for t in r.graph.outputs} <= made
