"""Per-op isolation and culprit search (xc_core/culprit): the figures against libraries xc did not write, the
sub-programs against the reference they are cut from, and the search on models where one op is made to go wrong."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_models import ExpOverflow

from xc_core.culprit import isolate, metrics, regions, search
from xc_core.errors import XcInputError
from xc_core.targets import REGISTRY


# ---- the figures ------------------------------------------------------------------------------------------------
def test_figures_agree_with_scipy_and_sklearn():
    from scipy.spatial.distance import cosine
    from scipy.stats import pearsonr
    from sklearn.metrics import mean_squared_error
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(4, 33)).astype(np.float32)
    got = ref + rng.normal(scale=0.05, size=ref.shape).astype(np.float32)
    f = metrics.compare(ref, got)
    r, g = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    assert f["mse"] == pytest.approx(mean_squared_error(r, g), rel=1e-12)
    assert f["cosine"] == pytest.approx(1 - cosine(r, g), rel=1e-12)
    assert f["pearson"] == pytest.approx(pearsonr(r, g).statistic, rel=1e-9)
    assert f["max_abs"] == pytest.approx(np.abs(r - g).max())
    assert f["rel_l2"] == pytest.approx(np.linalg.norm(r - g) / np.linalg.norm(r))
    # SNR and PSNR in decibels from the same MSE: 10·log10(signal power / noise power), 10·log10(range² / MSE).
    assert f["snr_db"] == pytest.approx(10 * math.log10(np.mean(r * r) / mean_squared_error(r, g)))
    assert f["psnr_db"] == pytest.approx(10 * math.log10((r.max() - r.min()) ** 2 / mean_squared_error(r, g)))
    assert not f["non_finite"]


def test_a_non_finite_value_fails_every_gate_and_has_no_error_figure():
    ref = np.ones(4, np.float32)
    f = metrics.compare(ref, np.array([1, np.inf, 1, 1], np.float32))
    assert f["non_finite"] and f["rel_l2"] is None and f["mse"] is None
    assert metrics.failed_gates(f, {"rel_l2": 1.0, "pearson": 0.5}) == ["rel_l2", "pearson"]
    exact = metrics.compare(ref, ref)
    assert exact["rel_l2"] == 0.0 and exact["snr_db"] is None
    assert metrics.failed_gates(exact, metrics.DEFAULT_GATES) == []


def test_gates_parse_from_flags_with_one_line_errors():
    gates = metrics.parse_gates(["rel_l2=1e-3", "pearson=0.99", "cosine=off"])
    assert gates == {"rel_l2": 1e-3, "pearson": 0.99}
    assert metrics.failed_gates({"rel_l2": 2e-3, "pearson": 0.995, "non_finite": False}, gates) == ["rel_l2"]
    for bad in (["speed=1"], ["rel_l2"], ["rel_l2=fast"], ["rel_l2=inf"]):
        with pytest.raises(XcInputError, match="--gate"):
            metrics.parse_gates(bad)


# ---- the sub-programs ----------------------------------------------------------------------------------------------
class Branchy(torch.nn.Module):
    """Several outputs, a split (a tuple taken apart by getitem), a reduction, a size read from a tensor."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = torch.nn.functional.hardswish(self.bn(self.conv(x)))
        z = y.mean(dim=(2, 3))
        a, b = torch.split(z, 4, dim=1)
        return self.fc(a * b), torch.cumsum(z, 1).reshape(x.shape[0], -1)


def _program(module, *args):
    torch.manual_seed(0)
    module = module.eval()
    ep = torch.export.export(module, args)
    return ep, regions.reference_values(ep, list(args))


def test_islands_and_ranges_compute_the_reference_values():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    ep, values = _program(Branchy(), x)
    ops, why = regions.isolatable(ep.graph_module, values)
    assert "split" in ops and "conv2d" in ops
    # reshape(x.shape[0], -1) of a [2, 8] value is that value itself: nothing for a target to compute.
    assert list(why) == ["reshape"] and "unchanged" in why["reshape"]
    islands = regions.region_program(ep, ops, values, cut_every_edge=True)
    # Every op's inputs are graph inputs: no op reads another's value inside the island program.
    inside = {n.name for n in islands.module.graph.nodes if n.op == "call_function"}
    for n in islands.module.graph.nodes:
        if n.op == "call_function" and n.target is not __import__("operator").getitem:
            assert not {a.name for a in n.all_input_nodes} & inside
    out = islands.module(*islands.example_args(values))
    for name, value in zip(islands.outputs, out):
        torch.testing.assert_close(value, values[name], rtol=0, atol=0)
    # A range keeps its inner edges, reads what it needs from before it and returns what is read after it.
    mid = regions.region_program(ep, ["hardswish", "mean", "split"], values, cut_every_edge=False)
    assert mid.inputs == ["batch_norm"] and set(mid.outputs) == {"mean", "getitem", "getitem_1"}
    for name, value in zip(mid.outputs, mid.module(*mid.example_args(values))):
        torch.testing.assert_close(value, values[name])
    # The reference finishing the model from a range's outputs: unchanged values give the model's own outputs.
    finished = regions.finish_with_reference(ep, [x], {"mean": values["mean"]})
    for a, b in zip(finished, regions.user_outputs(ep, values)):
        np.testing.assert_array_equal(a, b)
    exported = regions.export_region(mid, values)
    assert [s.arg.name for s in exported.graph_signature.input_specs if s.kind.name == "USER_INPUT"] == ["in_0"]


def test_isolation_on_ort_cpu_keeps_every_op_within_the_gate(tmp_path):
    torch.manual_seed(0)
    ep, values = _program(Branchy(), torch.randn(1, 3, 8, 8))
    block = isolate.isolate_ops(REGISTRY["ort-cpu"](), ep, values, _tmp(tmp_path, "w1"), metrics.DEFAULT_GATES,
                                carried={"mean": 1e-7}, nodes_of={"mean": ["node_mean"]})
    assert block["error"] is None and not block["above_gate"]
    assert block["isolated"] == len(regions.isolatable(ep.graph_module, values)[0])
    mean = next(r for r in block["ops"] if r["source_op"] == "mean")
    assert mean["carried_rel_l2"] == 1e-7 and mean["nodes"] == ["node_mean"]
    assert all(r["local"]["rel_l2"] < 1e-5 for r in block["ops"])


# ---- the culprit -----------------------------------------------------------------------------------------------
class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(8, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.sigmoid(self.a(x)))))


@pytest.fixture
def wrong_sigmoid(monkeypatch):
    """xc's MIL interpreter (coreml-cpu's numbers) with a sigmoid kernel 5 % off: a wrong kernel on one target."""
    from xc_core.emulate import mil_interpreter
    right = mil_interpreter.OPS["sigmoid"]
    monkeypatch.setitem(mil_interpreter.OPS, "sigmoid", lambda a: np.asarray(right(a)) * 1.05)


def test_a_wrong_kernel_is_named_with_its_share_and_its_neighbours_pass(wrong_sigmoid, tmp_path):
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    ep, values = _program(Chain(), x)
    gates = metrics.DEFAULT_GATES
    block = isolate.isolate_ops(REGISTRY["coreml-cpu"](), ep, values, _tmp(tmp_path, "w1"), gates)
    local = {r["source_op"]: r for r in block["ops"]}
    assert block["above_gate"] == ["sigmoid"]
    ops = regions.compute_ops(ep.graph_module)
    i = ops.index("sigmoid")
    for neighbour in (ops[i - 1], ops[i + 1]):
        assert not local[neighbour]["above_gate"]
    culprit = search.find_culprit(REGISTRY["coreml-cpu"](), ep, values, [x], _tmp(tmp_path, "w2"), gates)
    culprit.pop("_search")
    assert culprit["status"] == "found" and culprit["ops"] == ["sigmoid"]
    assert culprit["explained"] >= 0.9
    assert culprit["runs"] == len(culprit["trials"]) <= 2 * math.ceil(math.log2(len(ops))) + 2
    assert culprit["baseline"]["rel_l2"] > gates["rel_l2"]


def test_no_search_where_the_output_is_within_the_gate(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    ep, values = _program(Chain(), x)
    culprit = search.find_culprit(REGISTRY["ort-cpu"](), ep, values, [x], _tmp(tmp_path, "w1"),
                                  metrics.DEFAULT_GATES)
    culprit.pop("_search")
    assert culprit["status"] == "not-needed" and culprit["runs"] == 1


@pytest.mark.slow
def test_fp16_overflow_is_found_on_coreai_ane_with_a_sentence(tmp_path):
    from xc_core.culprit.sentence import culprit_sentence
    torch.manual_seed(0)
    x = torch.randn(2, 8) * 3
    ep, values = _program(ExpOverflow(), x)
    block = isolate.isolate_ops(REGISTRY["coreai-ane"](), ep, values, _tmp(tmp_path, "w1"),
                                metrics.DEFAULT_GATES)
    assert "exp" in block["above_gate"] and "relu" not in block["above_gate"]
    culprit = search.find_culprit(REGISTRY["coreai-ane"](), ep, values, [x], _tmp(tmp_path, "w2"),
                                  metrics.DEFAULT_GATES)
    culprit.pop("_search")
    assert culprit["status"] == "found" and culprit["ops"] == ["exp"] and culprit["baseline"]["non_finite"]
    culprit["op_types"] = ["exp"]
    sentence = culprit_sentence("coreai-ane", culprit, block, values, ["fp16"])
    assert sentence.startswith("coreai-ane: the exp (1 op) accounts for all of the output drift")
    assert "past float16's 65,504" in sentence


def _tmp(tmp_path, name: str) -> str:
    return str(tmp_path / name)
