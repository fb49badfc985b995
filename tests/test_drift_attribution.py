"""Decision → drift attribution. Real: a tiny model where exactly one layer (a Linear) is lowered — to fp16 by
ort-nnapi's fp16 emulation, which converts only the partition NNAPI takes (every other op here is one NNAPI does
not support), and to int8 by ort-cpu-int8, which quantizes only MatMul/Gemm — must have its largest attributed
jump at that layer's boundary, naming the precision decision and its compiled node; fp32 ORT must have none.
Unit: the jump / share / recovery rules on hand-built points, and the decision kinds on a hand-built graph."""
import json
import os

import pytest
import torch
from torch import nn

from xc_core.analysis.drift_attribution import (
    JUMP_SHARE,
    attribution_lines,
    drift_attribution,
    segment_shares,
)
from xc_core.api import analyze
from xc_core.report.schema import validate_report
from xc_core.sources.spec import InputSpec, Source

WIDTH = 32
NNAPI = "ort-nnapi[fp16=True]"


class Mix(nn.Module):
    """CELU then a Linear: the Linear's input is computed inside this module, so the fp32 → fp16 handoff into the
    NNAPI partition is not itself a module boundary."""

    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return self.fc(nn.functional.celu(x))


class OneLinear(nn.Module):
    """Five modules; only `mix.fc` is an op NNAPI supports (Gemm) or ORT's dynamic int8 quantizes."""

    def __init__(self, width: int = WIDTH):
        super().__init__()
        torch.manual_seed(0)
        self.pre = nn.SELU()
        self.mix = Mix(width)
        self.soft = nn.CELU()
        self.gate = nn.Hardsigmoid()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(self.gate(self.soft(self.mix(self.pre(x)))))


@pytest.fixture(scope="module")
def report():
    src = Source(kind="sample", name="one-linear", sha256="d" * 64, inputs=[InputSpec("x", [1, WIDTH], "float32")],
                 module=OneLinear().eval())
    return analyze(src, ["ort-nnapi", "ort-cpu-int8", "ort-cpu"], target_options={"ort-nnapi": {"fp16": True}},
                   isolate=False)


def _att(report, tid):
    t = report["targets"][tid]
    assert t["status"] == "ok", t["error"]
    return t["layer_drift"]["attribution"]


def _lowered(report, tid, precision):
    return [n for n in report["targets"][tid]["graph"]["nodes"]
            if n["kind"] == "compute" and n["precision"] == precision]


def test_the_fp16_layer_takes_the_largest_jump(report):
    # The premise: exactly one compiled node runs in fp16, the Linear's Gemm.
    fp16 = _lowered(report, NNAPI, "fp16")
    assert [n["source_ops"] for n in fp16] == [["linear"]], fp16
    att = _att(report, NNAPI)
    assert att["evidence"] == "emulated" and att["method"]
    top = att["jumps"][0]
    assert top["module_path"] == "mix.fc" and top["source_op"] == "linear", att
    assert top["kind"] == "precision" and top["nodes"] == [fp16[0]["id"]]
    assert top["share"] >= 0.8, top
    assert "fp16" in top["sentence"] and "mix.fc" in top["sentence"] and "%" in top["sentence"]
    # Its segment runs from the graph input (the CPU ops' own outputs do not survive the emulation's renaming),
    # and the cpu → nnapi handoff into the Gemm is recorded beside the precision decision.
    kinds = {d["kind"] for d in top["decisions"]}
    assert {"precision", "backend-boundary", "fallback"} <= kinds, top["decisions"]


def test_the_int8_layer_takes_the_largest_jump_after_a_clean_start_and_the_drift_recovers_later(report):
    int8 = _lowered(report, "ort-cpu-int8", "int8")
    assert int8 and all(n["source_ops"] == ["linear"] for n in int8), int8
    att = _att(report, "ort-cpu-int8")
    assert att["evidence"] == "measured"
    points = {p["module_path"]: p for p in report["targets"]["ort-cpu-int8"]["layer_drift"]["points"]}
    assert points["pre"]["rel_l2"] < 1e-5            # measured before the int8 layer: still fp32-exact
    top = att["jumps"][0]
    assert top["module_path"] == "mix.fc" and top["kind"] == "precision", att
    assert set(top["nodes"]) <= {n["id"] for n in int8} and top["nodes"]
    assert top["share"] >= 0.8 and "int8" in top["sentence"]
    assert all(j["module_path"] != "pre" for j in att["jumps"])


def test_fp32_has_no_jump_and_the_report_validates(report):
    att = _att(report, "ort-cpu")
    assert att["jumps"] == [] and "noise floor" in att["summary"]
    validate_report(report)


def test_checklist_cites_the_top_attribution(report):
    items = report["checklist"]["targets"]["ort-cpu-int8"]
    q4, q5 = items[3], items[4]
    sentence = _att(report, "ort-cpu-int8")["jumps"][0]["sentence"]
    assert q4["verdict"] in ("warn", "fail") and sentence in q4["detail"]
    assert q5["verdict"] == "warn" and sentence in q5["detail"]
    # A passing target does not get the clause.
    assert "per-layer drift" not in report["checklist"]["targets"]["ort-cpu"][3]["detail"]


def test_markdown_lines_and_the_drift_page(report):
    lines = attribution_lines(report["targets"]["ort-cpu-int8"])
    assert lines[0].startswith("- **Drift attribution** (measured)") and any("`mix.fc`" in x for x in lines)
    assert attribution_lines(report["targets"]["ort-cpu"])[1:] == []
    from streamlit.testing.v1 import AppTest
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    at = AppTest.from_file(os.path.join(root, "pages", "drift.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    at.session_state["report"] = report
    at.run()
    assert not at.exception, at.exception
    tables = [d.value for d in at.dataframe if "decision" in d.value.columns]
    assert len(tables) == 2 and set(tables[0]["boundary"]) | set(tables[1]["boundary"]) == {"mix.fc"}


def test_an_unverified_point_is_shown_apart_on_the_page_the_figure_and_in_markdown(report, tmp_path):
    """A point made inconsistent by hand (ort-cpu's `soft` boundary at rel L2 0.5 between fp32-exact layers, as a
    mis-mapped value looks): left off the line and the attribution, listed apart with the failed check on the
    Drift page, as grey crosses on the figure, in the Markdown and in the Model Explorer overlay."""
    import copy

    from xc_core.analysis.layer_drift import CONSISTENCY, verify_points
    from xc_core.export.model_explorer import write_model_explorer
    from xc_core.review.markdown import report_markdown
    from xc_core.views.figures import layer_drift_figure
    rep = copy.deepcopy(report)
    t = rep["targets"]["ort-cpu"]
    ld = t["layer_drift"]
    soft = next(p for p in ld["points"] if p["module_path"] == "soft")
    soft["rel_l2"] = 0.5
    verify_points(ld["points"], None, t["drift"]["worst"]["rel_l2"])
    assert (soft["verified"], soft["check"]) == (False, CONSISTENCY)
    ld["covered"], ld["unverified"] = ld["covered"] - 1, 1
    ld["attribution"] = drift_attribution(t, rep["capture"]["graph"])
    assert ld["attribution"]["jumps"] == [] and "soft (consistency)" in ld["attribution"]["summary"]
    validate_report(rep)

    fig = layer_drift_figure(rep)
    crosses = [tr for tr in fig.data if "unverified" in (tr.name or "")]
    assert len(crosses) == 1 and list(crosses[0].y) == [0.5] and "ort-cpu" in crosses[0].name
    line = next(tr for tr in fig.data if tr.name == "ort-cpu")
    assert 0.5 not in list(line.y)

    md = report_markdown(rep)
    assert "left out as unverified" in md and "consistency" in md

    write_model_explorer(rep, str(tmp_path))
    with open(tmp_path / "ort-cpu.drift.nodedata.json") as f:
        overlay = json.load(f)["ort-cpu"]["results"]
    assert overlay and 0.5 not in [r["value"] for r in overlay.values()]

    from streamlit.testing.v1 import AppTest
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    at = AppTest.from_file(os.path.join(root, "pages", "drift.py"), default_timeout=300)
    at.session_state["_xc_routed"] = True
    at.session_state["report"] = rep
    at.run()
    assert not at.exception, at.exception
    apart = [d.value for d in at.dataframe if "source op" in d.value.columns]
    assert len(apart) == 1 and list(apart[0]["boundary"]) == ["soft"] and list(apart[0]["check"]) == ["consistency"]
    assert any("left out as unverified" in m.value for m in at.markdown)


# ---- the rules on hand-built points -----------------------------------------------------------------------------
def _jumps(values):
    return [i for i, s in enumerate(segment_shares(values)["segments"]) if s["jump"]]


def test_no_jump_below_the_noise_floor_or_when_drift_builds_up_gradually():
    assert _jumps([1e-7, 3e-7, 2e-7]) == []
    assert segment_shares([1e-7, 3e-7])["below_noise_floor"]
    steps = [k * 1e-4 for k in range(1, 21)]       # 20 equal steps: each adds 5 %
    assert _jumps(steps) == []
    shares = [s["share"] for s in segment_shares(steps)["segments"]]
    assert sum(shares) == pytest.approx(1.0)


def test_a_jump_then_a_recovery():
    segs = segment_shares([1e-7, 1e-7, 5e-3, 5e-4, 6e-4])["segments"]
    assert [i for i, s in enumerate(segs) if s["jump"]] == [2]
    assert segs[2]["share"] == pytest.approx(1.0, abs=1e-4)
    assert segs[3]["recovery"] and segs[3]["share"] == 0
    # Growing again below the earlier high is not new drift.
    assert segs[4]["share"] == 0 and not segs[4]["jump"]


def test_drift_that_shrinks_and_a_wobble_below_the_high():
    segs = segment_shares([2e-3, 1e-3, 5e-4])["segments"]
    assert [s["jump"] for s in segs] == [True, False, False]
    assert [s["recovery"] for s in segs] == [False, True, True]
    assert sum(s["share"] for s in segs) == pytest.approx(1.0)
    assert _jumps([1e-3, 5e-4, 9e-4, 1e-3]) == [0]


def test_two_jumps_and_a_small_rise_between():
    segs = segment_shares([1e-7, 1e-3, 1.1e-3, 4e-3])["segments"]
    assert [i for i, s in enumerate(segs) if s["jump"]] == [1, 3]
    assert segs[2]["share"] < JUMP_SHARE
    assert segs[3]["share"] == pytest.approx(2.9e-3 / 4e-3)
    # A rise by less than the ratio is not a jump even with a large share.
    assert not segment_shares([1e-3, 1.4e-3])["segments"][1]["jump"]


# ---- decisions on a hand-built graph ----------------------------------------------------------------------------
def _t(name):
    return {"name": name, "shape": [4], "dtype": "float32"}


def _node(nid, op, ins, outs, backend="cpu", precision="fp32", source_ops=(), fused_from=(), fallback=False,
          module_path=None, partition=None):
    return {"id": nid, "op_type": op, "kind": "compute", "inputs": [_t(i) for i in ins],
            "outputs": [_t(o) for o in outs], "backend": backend, "precision": precision,
            "source_ops": list(source_ops), "fused_from": list(fused_from), "fallback": fallback,
            "module_path": module_path, "attributes": {} if partition is None else {"partition": partition}}


CAPTURE = {"nodes": [_node("a", "relu", ["x"], ["ta"], module_path="m0"),
                     _node("b", "conv", ["ta"], ["tb"], module_path="m1.conv"),
                     _node("c", "bn", ["tb"], ["tc"], module_path="m1.bn"),
                     _node("d", "gelu", ["tc"], ["y"], module_path="m2")],
           "outputs": [_t("y")]}


def _block(nodes, rel):
    pts = [{"depth": d, "source_op": op, "module_path": m, "rel_l2": r}
           for (d, op, m), r in zip([(0, "a", "m0"), (2, "c", "m1.bn"), (3, "d", "m2")], rel)]
    return {"graph": {"nodes": nodes}, "layer_drift": {"points": pts, "evidence": "emulated"},
            "drift": {"worst": {"rel_l2": rel[-1]}}}


def test_decisions_precision_first_then_backend_boundary_and_fusion():
    nodes = [_node("n_a", "Relu", ["x"], ["ta"], source_ops=["a"], fallback=True, module_path="m0"),
             _node("n_bc", "FusedConv", ["ta"], ["tc"], backend="nnapi", precision="fp16", source_ops=["b", "c"],
                   fused_from=["b", "c"], module_path="m1", partition=2),
             _node("n_d", "Gelu", ["tc"], ["y"], source_ops=["d"], fallback=True, module_path="m2")]
    att = drift_attribution(_block(nodes, [1e-7, 2e-3, 2.1e-3]), CAPTURE)
    assert len(att["jumps"]) == 1
    j = att["jumps"][0]
    assert (j["module_path"], j["kind"], j["nodes"], j["segment_ops"]) == ("m1.bn", "precision", ["n_bc"], 2)
    assert [d["kind"] for d in j["decisions"]] == ["precision", "backend-boundary", "fusion"]
    assert att["basis"] == "output drift"
    assert j["sentence"].startswith("the fp16 FusedConv at m1 (nnapi, partition 2, fused from b+c) accounts for "
                                    "95 % of the output drift")
    assert att["summary"].startswith(j["sentence"]) and att["evidence"] == "emulated"

    # The same graph in fp32: the backend boundary names the jump.
    nodes[1]["precision"] = "fp32"
    j = drift_attribution(_block(nodes, [1e-7, 2e-3, 2.1e-3]), CAPTURE)["jumps"][0]
    assert j["kind"] == "backend-boundary" and j["nodes"][:2] == ["n_a", "n_bc"]
    assert "cpu→nnapi" in j["sentence"]


def test_depths_that_do_not_index_the_capture_are_not_attributed():
    nodes = [_node("n_a", "Relu", ["x"], ["ta"], source_ops=["a"])]
    shifted = {"nodes": CAPTURE["nodes"][1:], "outputs": CAPTURE["outputs"]}
    att = drift_attribution(_block(nodes, [1e-7, 2e-3, 2.1e-3]), shifted)
    assert att["jumps"] == [] and att["summary"].startswith("not attributed")


def test_a_lowered_op_that_only_moves_data_is_not_named_before_the_arithmetic():
    # The boundary's value leaves a bf16 Reshape (OpenVINO's attention output), fed by a bf16 MatMul: the MatMul's
    # rounding is the decision; the Reshape copies what it was given.
    nodes = [_node("n_a", "Relu", ["x"], ["ta"], source_ops=["a"]),
             _node("n_b", "MatMul", ["ta"], ["tb"], precision="bf16", source_ops=["b"], module_path="m1.conv"),
             _node("n_c", "Reshape", ["tb"], ["tc"], precision="bf16", source_ops=["c"], module_path="m1.bn"),
             _node("n_d", "Gelu", ["tc"], ["y"], source_ops=["d"])]
    j = drift_attribution(_block(nodes, [1e-7, 2e-3, 2.1e-3]), CAPTURE)["jumps"][0]
    assert j["kind"] == "precision" and j["sentence"].startswith("the bf16 MatMul at m1.conv (cpu) with 1 more lowered")
