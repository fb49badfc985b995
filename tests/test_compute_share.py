"""MACs per op from shapes (analysis/compute_weight.py), checked against torch's own FlopCounterMode, and the
accelerated share by op count, MACs and time (analysis/compute_share.py) with the checklist's question 2 and the
views that say it."""
import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from xc_core.analysis.checklist import _q2
from xc_core.analysis.compute_share import compute_share, share_sentence
from xc_core.analysis.compute_weight import dim_value, macs_by_kind, node_macs, run_dims_of
from xc_core.readers.exported_program import exported_program_graph
from xc_core.report.types import TargetBlock
from xc_core.views.compute_share import heaviest_fallback_rows, weighted_cell
from xc_core.views.target_counts import split_counts


class ConvsAndProducts(nn.Module):
    """Every conv / matmul rule: grouped and strided conv, transposed conv, depthwise 1-d conv, linear on a 3-d
    input, mm, bmm, baddbmm, addmm and a broadcasting matmul."""
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
        self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
        self.dw = nn.Conv1d(6, 6, 5, padding=2, groups=6)
        self.fc = nn.Linear(12, 7)
        self.w = nn.Parameter(torch.randn(7, 5))

    def forward(self, x, a, b):
        y = self.up(self.conv(x))                                   # [1, 6, 12, 12]
        z = self.dw(y.flatten(2))                                   # [1, 6, 144]
        h = self.fc(z.reshape(1, 72, 12))                           # [1, 72, 7]
        m = torch.mm(h[0], self.w)                                  # [72, 5]
        p = torch.bmm(a, b)                                         # [3, 4, 6]
        q = torch.baddbmm(p, a, b)
        r = torch.addmm(m[:4, :1], a[0], b[0])                      # [4, 6]
        s = torch.matmul(a.unsqueeze(0), b)                         # [1, 3, 4, 6]
        return m.sum() + q.sum() + r.sum() + s.sum()


class Attention(nn.Module):
    def forward(self, q, k, v):
        return nn.functional.scaled_dot_product_attention(q, k, v)


def _captured_nodes(model, args):
    ep = torch.export.export(model, args)
    return [n.to_dict() for n in exported_program_graph(ep, "m").nodes]


def _flop_counts(model, args) -> dict[str, int]:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(*args)
    return {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}


def test_conv_and_matmul_macs_are_half_of_torchs_flop_counts():
    model, args = ConvsAndProducts().eval(), (torch.randn(1, 4, 12, 12), torch.randn(3, 4, 5), torch.randn(3, 5, 6))
    mine = macs_by_kind(_captured_nodes(model, args))
    theirs = _flop_counts(model, args)
    assert 2 * mine["conv"] == theirs["convolution"] > 0
    assert 2 * mine["matmul"] == sum(theirs.get(k, 0) for k in ("mm", "addmm", "bmm", "baddbmm")) > 0


@pytest.mark.parametrize("kv_len, v_dim", [(16, 8), (12, 6)])
def test_attention_macs_are_half_of_torchs_flop_count(kv_len, v_dim):
    # The math kernel FlopCounterMode counts (on the CPU it has no entry for the fused one): two batched products.
    args = (torch.randn(2, 4, 16, 8), torch.randn(2, 4, kv_len, 8), torch.randn(2, 4, kv_len, v_dim))
    mine = macs_by_kind(_captured_nodes(Attention(), args))
    assert 2 * mine["attention"] == _flop_counts(Attention(), args)["bmm"] > 0


def _node(op, ins, out, nid="n", **attrs):
    return {"id": nid, "op_type": op, "kind": "compute", "attributes": attrs,
            "inputs": [{"name": f"{nid}_i{i}", "shape": s} for i, s in enumerate(ins)],
            "outputs": [{"name": f"{nid}_o", "shape": out}]}


def test_onnx_rules_and_the_ones_per_element():
    assert node_macs(_node("Conv", [[1, 3, 8, 8], [4, 3, 3, 3]], [1, 4, 8, 8], group=1)) == 4 * 64 * 27
    assert node_macs(_node("Gemm", [[5, 3], [5, 7]], [3, 7], transA=1)) == 3 * 7 * 5
    assert node_macs(_node("MatMul", [[2, 3, 4], [4, 6]], [2, 3, 6])) == 2 * 3 * 6 * 4
    assert node_macs(_node("MaxPool", [[1, 2, 8, 8]], [1, 2, 4, 4], kernel_shape=[2, 2])) == 32 * 4
    assert node_macs(_node("relu_", [[2, 5]], [2, 5])) == 10
    assert node_macs(_node("LayerNormalization", [[2, 5], [5]], [2, 5])) == 20
    assert node_macs(_node("ReduceMean", [[2, 5]], [2, 1])) == 10
    assert node_macs(_node("embedding", [[100, 8], [1, 4]], [1, 4, 8])) == 0
    assert node_macs(_node("Transpose", [[2, 5]], [5, 2])) == 0
    assert node_macs(_node("SomeCustomOp", [[2, 5]], [2, 5])) is None


def test_symbolic_dims_are_read_at_the_run_shapes_or_left_unknown():
    dims = run_dims_of([{"name": "x", "shape": ["batch", "s0", 8]}], [{"name": "x", "shape": [2, 10, 8]}])
    assert dims == {"batch": 2, "s0": 10}
    assert dim_value("2*s0 + 1", dims) == 21 and dim_value("Max(1, s0)", dims) == 10
    assert dim_value("s9", dims) is None and dim_value("__import__('os').getpid()", dims) is None
    linear = _node("linear", [["batch", "s0", 8], [4, 8]], ["batch", "s0", 4])
    assert node_macs(linear, dims) == 2 * 10 * 4 * 8
    assert node_macs(linear, {}) is None


# ---- the share ------------------------------------------------------------------------------------------------
def _source():
    """A big conv, then a small relu, then a reshape (no MACs): the conv is 98.6% of the compute."""
    return [_node("conv2d", [[1, 8, 16, 16], [8, 8, 3, 3]], [1, 8, 16, 16], "conv"),
            _node("relu", [[1, 8, 16, 16]], [1, 8, 16, 16], "relu"),
            _node("view", [[1, 8, 16, 16]], [1, 2048], "view")]


def _compiled(conv_where, relu_where, times=None, estimated=False):
    times = times or {}
    key = "estimated_us" if estimated else "measured_us"

    def node(nid, where, sources):
        return {"id": nid, "op_type": nid.upper(), "kind": "compute", "inputs": [], "outputs": [],
                "backend": where, "fallback": where == "cpu", "source_ops": sources, key: times.get(nid)}
    nodes = [node("c", conv_where, ["conv"]), node("r", relu_where, ["relu", "view"])]
    block = {"id": "t", "identity": "t", "status": "ok", "accelerated": True, "accelerator": "GPU delegate",
             "evidence": {"assignment": "predicted-runtime"}, "op_count_after": 2,
             "graph": {"evidence": "predicted-runtime", "nodes": nodes},
             "node_times": {"evidence": "estimated-compiler" if estimated else "measured"} if times else None}
    return block


def test_one_heavy_op_on_the_cpu_is_half_the_ops_and_nearly_all_the_compute():
    block = _compiled("cpu", "gpu", {"c": 90.0, "r": 10.0})
    share = compute_share(block, _source(), {})
    conv, relu = 8 * 256 * 72, 8 * 256
    assert share["by_ops"] == {"accelerated": 1, "total": 2, "share": 0.5, "unit": "ops",
                               "evidence": "predicted-runtime", "covered": 1.0}
    assert (share["by_macs"]["accelerated"], share["by_macs"]["total"]) == (relu, conv + relu)
    assert share["by_macs"]["covered"] == 1.0 and share["by_macs"]["evidence"] == "predicted-runtime"
    assert share["by_time"]["share"] == 0.1 and share["by_time"]["evidence"] == "measured"
    heaviest = share["heaviest_fallbacks"][0]
    assert (heaviest["source_op"], heaviest["macs"], heaviest["time_us"], heaviest["time_share"]) == \
        ("conv", conv, 90.0, 0.9)
    assert share_sentence(share) == "1 of 2 compiled ops (50%), 1% of MACs, 10% of measured time"
    # The checklist judges what the one fallback weighs, not its single boundary, and says the shares.
    q2 = _q2(TargetBlock.from_dict({**block, "graph": None}), block["graph"], share)
    assert q2["verdict"] == "fail" and q2["detail"].endswith(
        "; on the accelerator: 1 of 2 compiled ops (50%), 1% of MACs, 10% of measured time")


def test_a_cheap_fallback_only_warns():
    block = _compiled("gpu", "cpu", {"c": 90.0, "r": 1.0})
    share = compute_share(block, _source(), {})
    assert share["by_macs"]["share"] > 0.98 and share["by_time"]["share"] > 0.98
    q2 = _q2(TargetBlock.from_dict({**block, "graph": None}), block["graph"], share)
    assert q2["verdict"] == "warn", q2


def test_time_needs_both_sides_timed_and_says_an_estimate():
    # ORT's mobile EPs time only what they leave on the CPU EP here: no share of time, the fallback's time kept.
    share = compute_share(_compiled("gpu", "cpu", {"r": 5.0}), _source(), {})
    assert share["by_time"] is None and share["heaviest_fallbacks"][0]["time_us"] == 5.0
    vela = compute_share(_compiled("npu", "cpu", {"c": 30.0, "r": 10.0}, estimated=True), _source(), {})
    assert vela["by_time"]["evidence"] == "estimated-compiler" and vela["by_time"]["share"] == 0.75
    assert share_sentence(vela).endswith("75% of estimated time")


def test_cpu_only_and_unweighed_ops():
    assert compute_share({**_compiled("cpu", "cpu"), "accelerated": False}, _source(), {}) is None
    source = _source() + [_node("mystery", [[4]], [4], "mystery")]
    share = compute_share(_compiled("gpu", "gpu"), source, {})
    assert share["by_macs"]["share"] == 1.0 and share["by_macs"]["covered"] == 0.75


def test_the_count_is_the_split_every_view_shows():
    block = _compiled("gpu", "cpu")
    block["graph"]["nodes"].append({"id": "u", "op_type": "U", "kind": "compute", "inputs": [], "outputs": [],
                                    "backend": None, "fallback": False, "source_ops": []})
    report = {"targets": {"t": {**block, "compute_share": compute_share(block, _source(), {})}}}
    split, share = split_counts(report, "t"), report["targets"]["t"]["compute_share"]
    assert (share["by_ops"]["accelerated"], share["by_ops"]["total"]) == (split["on_accelerator"], split["compute"])
    assert weighted_cell(report["targets"]["t"]) == "99% of MACs"
    rows = heaviest_fallback_rows(report, "t")
    assert [r["source op"] for r in rows] == ["relu"] and rows[0]["% of MACs"] == 1.37
