"""The gate judges fallbacks by what runs where: a compiled fallback is new only when a source op it carries ran on
the accelerator in base, or is new in the model and falls back; an op replaced on the CPU by another on the CPU
(silu → gelu, at the same module path) is no new fallback. Lines are one per op and place, with a count, and every
rendering of a diff ends with its verdict."""
import pytest
import torch
from torch import nn

from xc_core.review.diff import change_lines, diff_markdown, diff_reports, diff_text
from xc_core.review.gate import GateRules, regressions

# ---- a hand-made report pair --------------------------------------------------------------------------------------
ACCEL = "gpu"


def _node(nid, op_type, source_ops, fallback, module_path):
    return {"id": nid, "op_type": op_type, "kind": "compute", "backend": "cpu" if fallback else ACCEL,
            "precision": "fp32", "source_ops": source_ops, "module_path": module_path, "fused_from": [],
            "fallback": fallback, "fallback_reason": "outside the delegated partition" if fallback else None,
            "measured_us": None, "inputs": [], "outputs": []}


def _report(name_sha: str, ops: list[tuple], nodes: list[dict]) -> dict:
    """ops: (source op id, op type, module path); nodes: the target's compiled graph."""
    by_op = {}
    for n in nodes:
        for s in n["source_ops"]:
            by_op.setdefault(s, []).append(n)
    rows = []
    for sid, op_type, path in ops:
        carried = by_op.get(sid, [])
        cell = {"status": "absent", "nodes": []} if not carried else {
            "status": "fallback" if any(n["fallback"] for n in carried) else "present",
            "nodes": [n["id"] for n in carried], "node": carried[0]["id"], "op_type": carried[0]["op_type"],
            "backend": carried[0]["backend"], "precision": "fp32", "fused_with": [], "fallback_reason": None}
        rows.append({"source_op": sid, "op_type": op_type, "module_path": path, "targets": {"litert-gpu": cell}})
    target = {"status": "ok", "op_count_after": len(nodes), "graph": {"nodes": nodes, "evidence": "predicted-runtime"},
              "accelerated": True, "accelerator": "GPU", "evidence": {"assignment": "predicted-runtime"}}
    return {"source": {"name": "decoder.pt2", "kind": "exported-program", "sha256": name_sha * 64},
            "alignment": {"source_ops": rows}, "targets": {"litert-gpu": target},
            "checklist": {"targets": {}}, "capture": {"op_count_before": len(ops)}}


def _decoder_pair(layer0_new_on_cpu: bool):
    """v1: each layer's silu a LOGISTIC + MUL; layer 1's on the CPU (outside the delegate's partition), layer 0's
    on the GPU. v2: silu → gelu, one GELU each; layer 1's on the CPU again; layer 0's on the GPU unless asked."""
    ops_v1 = [("linear", "linear", "layers.0.mlp.gate_proj"), ("silu", "silu", "layers.0.mlp.act_fn"),
              ("linear_1", "linear", "layers.1.mlp.gate_proj"), ("silu_1", "silu", "layers.1.mlp.act_fn")]
    ops_v2 = [("linear", "linear", "layers.0.mlp.gate_proj"), ("gelu", "gelu", "layers.0.mlp.act_fn"),
              ("linear_1", "linear", "layers.1.mlp.gate_proj"), ("gelu_1", "gelu", "layers.1.mlp.act_fn")]
    # The TFLite read-back names layer 1's LOGISTIC with layer 0's module path: the diff must not go by it.
    v1 = [_node("fc_0", "FULLY_CONNECTED", ["linear"], False, "layers.0.mlp.gate_proj"),
          _node("logistic_1", "LOGISTIC", ["silu"], False, "layers.0.mlp.act_fn"),
          _node("mul_2", "MUL", ["silu"], False, "layers.0.mlp.act_fn"),
          _node("fc_3", "FULLY_CONNECTED", ["linear_1"], True, "layers.1.mlp.gate_proj"),
          _node("logistic_4", "LOGISTIC", ["silu_1"], True, "layers.0.mlp.act_fn"),
          _node("mul_5", "MUL", ["silu_1"], True, "layers.1.mlp.act_fn")]
    v2 = [_node("fc_0", "FULLY_CONNECTED", ["linear"], False, "layers.0.mlp.gate_proj"),
          _node("gelu_1", "GELU", ["gelu"], layer0_new_on_cpu, "layers.0.mlp.act_fn"),
          _node("fc_2", "FULLY_CONNECTED", ["linear_1"], True, "layers.1.mlp.gate_proj"),
          _node("gelu_3", "GELU", ["gelu_1"], True, "layers.1.mlp.act_fn")]
    return _report("a", ops_v1, v1), _report("b", ops_v2, v2)


def test_an_op_replaced_on_the_cpu_by_another_on_the_cpu_is_no_new_fallback():
    base, new = _decoder_pair(layer0_new_on_cpu=False)
    d = diff_reports(base, new)
    fb = d["targets"]["litert-gpu"]["fallbacks"]
    assert fb["count"] == {"base": 3, "new": 2} and fb["added"] == [] and fb["removed"] == []
    assert fb["still_on_cpu"] == [{"module_path": "layers.1.mlp.act_fn", "base": "silu", "new": "gelu",
                                   "node": "gelu_3", "op_type": "GELU"}]
    assert regressions(d, GateRules()) == []
    lines = [line for tid, line in change_lines(d) if tid == "litert-gpu"]
    assert "on the CPU before and after: silu → gelu at layers.1.mlp.act_fn (not a new fallback)" in lines
    assert not any(line.startswith(("new CPU fallback", "fallback gone")) for line in lines)
    assert diff_text(d).rstrip().splitlines()[-1] == "Verdict (the default gate rules; not gated): no regressions"


def test_an_op_that_moves_from_the_accelerator_to_the_cpu_is_a_new_fallback():
    base, new = _decoder_pair(layer0_new_on_cpu=True)
    d = diff_reports(base, new)
    added = d["targets"]["litert-gpu"]["fallbacks"]["added"]
    assert [(f["op_type"], f["module_path"], f["source_op_type"], f["count"]) for f in added] == \
        [("GELU", "layers.0.mlp.act_fn", "gelu", 1)]
    regs = regressions(d, GateRules())
    assert [(r["target"], r["rule"]) for r in regs] == [("litert-gpu", "max_new_fallbacks")]
    assert regs[0]["what"].startswith("1 new CPU fallback(s) (allowed 0): GELU at layers.0.mlp.act_fn")
    # Gated or not, the last line is the verdict.
    assert diff_text(d, regs).rstrip().splitlines()[-1].startswith("Verdict: 1 regression: litert-gpu 1 new CPU")
    assert diff_markdown(d).rstrip().splitlines()[-1].startswith(
        "**Verdict (the default gate rules; not gated): 1 regression: litert-gpu 1 new CPU fallback(s)")


def test_fallback_lines_are_one_per_op_and_place_with_a_count():
    """Two LOGISTIC fallbacks of one module gone in the new run (the accelerator takes them): one line, × 2."""
    ops = [("sigmoid", "sigmoid", "gate"), ("sigmoid_1", "sigmoid", "gate"), ("linear", "linear", "head")]
    base = _report("a", ops, [_node("l0", "LOGISTIC", ["sigmoid"], True, "gate"),
                              _node("l1", "LOGISTIC", ["sigmoid_1"], True, "gate"),
                              _node("fc", "FULLY_CONNECTED", ["linear"], False, "head")])
    new = _report("b", ops, [_node("l0", "LOGISTIC", ["sigmoid"], False, "gate"),
                             _node("l1", "LOGISTIC", ["sigmoid_1"], False, "gate"),
                             _node("fc", "FULLY_CONNECTED", ["linear"], False, "head")])
    d = diff_reports(base, new)
    gone = [line for tid, line in change_lines(d) if line.startswith("fallback gone")]
    assert gone == ["fallback gone: LOGISTIC at gate × 2"]
    assert d["targets"]["litert-gpu"]["fallbacks"]["removed"][0]["nodes"] == ["l0", "l1"]
    # And back: two new ones are one regression line that counts both.
    what = regressions(diff_reports(new, base), GateRules())[0]["what"]
    assert what.startswith("2 new CPU fallback(s) (allowed 0): LOGISTIC at gate × 2")


def test_a_report_without_the_source_op_table_is_matched_by_place():
    """An imported report of an older or leaner xc (no alignment): compiled nodes by (module path, op type)."""
    base, new = _decoder_pair(layer0_new_on_cpu=True)
    for report in (base, new):
        report["alignment"] = None
    fb = diff_reports(base, new)["targets"]["litert-gpu"]["fallbacks"]
    assert fb["matched_by"] == "module path and compiled op type"
    assert {(f["op_type"], f["module_path"]) for f in fb["added"]} == {("GELU", "layers.0.mlp.act_fn"),
                                                                        ("GELU", "layers.1.mlp.act_fn")}


# ---- a real silu → gelu pair --------------------------------------------------------------------------------------
class _Mlp(nn.Module):
    def __init__(self, act: str, d: int = 16):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(d, 2 * d, bias=False), nn.Linear(d, 2 * d, bias=False)
        self.down_proj = nn.Linear(2 * d, d, bias=False)
        self.act_fn = nn.SiLU() if act == "silu" else nn.GELU(approximate="tanh")

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    def __init__(self, act: str, d: int = 16):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o_proj, self.mlp = nn.Linear(d, d, bias=False), _Mlp(act, d)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        x = x + self.o_proj(torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ v)
        x = x + self.mlp(x)
        # An integer cumsum the GPU delegate cannot take: it splits the graph, and the delegate keeps only its
        # largest partition, so layer 1's MLP stays on the CPU (supported, outside the partition).
        return x + torch.cumsum((x > 0).int(), -1).float() * 1e-3


class TinyDecoder(nn.Module):
    """Two Qwen2-style layers (attention, a gated MLP) over token embeddings; `act` is the MLP's activation."""

    def __init__(self, act: str, d: int = 16, vocab: int = 50):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([_Layer(act, d) for _ in range(2)])
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(x)


@pytest.fixture(scope="module")
def silu_gelu(tmp_path_factory):
    from xc_core.api import analyze
    from xc_core.targets import make_target
    if not make_target("litert-gpu").available()[0]:
        pytest.skip("litert-gpu is not available here: " + make_target("litert-gpu").available()[1])
    folder = tmp_path_factory.mktemp("decoder")
    reports = []
    for act in ("silu", "gelu"):
        (folder / act).mkdir()
        path = str(folder / act / "decoder.pt2")         # one file name: v1 → v2 of one model
        torch.export.save(torch.export.export(TinyDecoder(act).eval(), (torch.randint(0, 50, (1, 8)),)), path)
        reports.append(analyze(path, ["litert-gpu", "ort-nnapi"], isolate=False,
                               out_dir=str(folder / f"run-{act}")))
    return reports


@pytest.mark.slow
def test_silu_to_gelu_flags_no_litert_gpu_fallback(silu_gelu):
    d = diff_reports(*silu_gelu)
    assert {(r["module_path"], r["base"], r["new"]) for r in d["source_ops"]["replaced"]} == \
        {("layers.0.mlp.act_fn", "silu", "gelu"), ("layers.1.mlp.act_fn", "silu", "gelu")}
    gpu = d["targets"]["litert-gpu"]["fallbacks"]
    assert gpu["added"] == [] and gpu["count"]["new"] <= gpu["count"]["base"], gpu
    assert any(f["module_path"] == "layers.1.mlp.act_fn" for f in gpu["still_on_cpu"]), gpu
    gone = [line for tid, line in change_lines(d) if tid == "litert-gpu" and line.startswith("fallback gone")]
    assert len(gone) == len(set(gone))                     # one line per op and place
    assert not any(r["target"] == "litert-gpu" for r in regressions(d, GateRules()))


@pytest.mark.slow
def test_silu_to_gelu_is_a_real_regression_where_the_gelu_leaves_the_accelerator(silu_gelu):
    """NNAPI runs silu's Sigmoid × x, and has no Gelu: the same edit moves both activations to the CPU."""
    d = diff_reports(*silu_gelu)
    added = d["targets"]["ort-nnapi"]["fallbacks"]["added"]
    assert {(f["op_type"], f["module_path"]) for f in added} == {("Gelu", "layers.0.mlp.act_fn"),
                                                                  ("Gelu", "layers.1.mlp.act_fn")}
    regs = regressions(d, GateRules())
    assert [r["rule"] for r in regs if r["target"] == "ort-nnapi"] == ["max_new_fallbacks"]
    assert diff_text(d, regs).rstrip().splitlines()[-1].startswith("Verdict: 1 regression: ort-nnapi 2 new CPU")
