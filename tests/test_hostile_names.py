"""Hostile names (tests/hostile_names.py) through every target: nothing runs, nothing outside the run's folders
changes, and each target ends ok or with a one-line error. The ONNX → PyTorch route is where a node name once ran
as Python (torch.fx wrote it into `forward`); the renaming in xc_core/onnx_route/names.py closes that."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from conftest import ALL_TARGETS
from hostile_names import (hostile_module_names, hostile_onnx, hostile_op_type_onnx, hostile_torch_module,
                           payloads)
from xc_core.views import figures, graph_layout as layout, topology
from xc_core.cli import main


@pytest.fixture(autouse=True)
def _no_sandbox(monkeypatch):
    """These tests pin the guards that keep names out of code. The workers' Landlock sandbox would stop a payload
    that ran from creating the canary outside the run folder, and so hide it: turned off here (its own tests are in
    test_worker_confinement.py)."""
    monkeypatch.setenv("XC_LANDLOCK", "0")


def _tree(root: str, skip: str) -> dict[str, tuple[int, int]]:
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) != skip]
        for f in files:
            st = os.lstat(os.path.join(folder, f))
            out[os.path.relpath(os.path.join(folder, f), root)] = (st.st_size, st.st_mtime_ns)
    return out


EXECUTORCH_TARGETS = ("executorch-xnnpack", "executorch-vulkan", "executorch-coreml")
# Core AI: coreai-ane regenerates the program's code to re-export it in fp16.
COREAI_TARGETS = ("coreai-cpu", "coreai-ane")
# LiteRT: litert-torch re-exports the program (ep.module() regenerates its code) and writes names into MLIR.
LITERT_TARGETS = ("litert-xnnpack", "litert-gpu")


def _analyze(tmp_path, source: str, targets=ALL_TARGETS) -> tuple[int, dict | None]:
    """The CLI on `source` with every target, Markdown and HTML too; asserts nothing beside the outputs changed."""
    out = tmp_path / "out"
    before = _tree(str(tmp_path), str(out))
    rc = main(["analyze", source, "--targets", ",".join(targets), "--out", str(out), "--quiet",
               "--md", str(out / "report.md"), "--html", str(out / "report.html")])
    assert _tree(str(tmp_path), str(out)) == before, "a file outside the run's output changed"
    return rc, (json.loads((out / "report.json").read_text()) if rc == 0 else None)


def _one_line_outcomes(report: dict) -> None:
    for tid, t in report["targets"].items():
        assert t["status"] in ("ok", "error", "unavailable"), tid
        if t["status"] != "ok":
            text = t.get("error") or t.get("reason") or ""
            assert text and "\n" not in text and "Traceback" not in text, (tid, text)


def _drawings_hold_no_markup(report: dict) -> None:
    """Every target's graph draws, and no model name became Graphviz markup (an <IMG> would read a file)."""
    for tid, t in report["targets"].items():
        if t.get("graph"):
            svg = topology.render_svg(topology.view(topology.build_tree(layout.prepare(t["graph"])), set()))
            assert "<image" not in svg.lower() and "<script" not in svg.lower(), tid


def test_hostile_onnx_names_run_nothing_on_any_target(tmp_path):
    canary = str(tmp_path / "canary")
    # the batch dim's name is a payload too: xc picks a default for it and never evaluates it
    path = hostile_onnx(str(tmp_path / "hostile.onnx"), canary, batch_dim=payloads(canary)[4])
    # ExecuTorch and Core AI regenerate the route's program's code at each pass: those too.
    rc, report = _analyze(tmp_path, path, ALL_TARGETS + ("executorch-xnnpack", "coreai-cpu", "litert-xnnpack"))
    assert rc == 0 and not os.path.exists(canary)
    _one_line_outcomes(report)
    # The ONNX → PyTorch route converts it for every target that compiles PyTorch programs, and their ops still
    # trace to the model's own names.
    for tid in ("coreml-cpu", "coreml-ane", "inductor-cpu", "executorch-xnnpack", "coreai-cpu", "litert-xnnpack"):
        t = report["targets"][tid]
        assert t["status"] == "ok", (tid, t.get("error"))
        traced = {s for n in t["graph"]["nodes"] for s in n.get("source_ops") or []}
        assert any(payloads(canary)[0] in s for s in traced), tid
        assert all(d.get("exact") or d.get("max_abs", 1) < 1e-5
                   for d in t["info"]["onnx_conversion"]["conversion_drift"].values())
    assert all(report["targets"][t]["status"] == "ok" for t in ("ort-cpu", "openvino-cpu", "ort-nnapi"))
    _drawings_hold_no_markup(report)
    # plotly renders <a>, <b>, <img …> in hover text and tick labels: the heat map's come escaped
    fig = figures.heatmap_figure(report, by_module=False)
    shown = [str(v) for v in fig.data[0].y] + [str(v) for row in fig.data[0].text for v in row]
    assert any("&lt;img src=x onerror" in v for v in shown) and not any("<img" in v.lower() for v in shown)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<img src=x onerror" not in html.lower() and "<script>alert" not in html.lower()


def test_hostile_op_types_and_domains_fail_each_target_in_one_line(tmp_path):
    canary = str(tmp_path / "canary")
    rc, report = _analyze(tmp_path, hostile_op_type_onnx(str(tmp_path / "ops.onnx"), canary))
    assert rc == 0 and not os.path.exists(canary)
    _one_line_outcomes(report)
    assert {t["status"] for t in report["targets"].values()} <= {"error", "unavailable"}


def test_hostile_pt2_names_are_refused_or_compiled_without_running(tmp_path):
    import torch
    canary = str(tmp_path / "canary")
    # Quotes, backslashes, control characters and look-alike letters: xc's .pt2 reader refuses the archive.
    model, args = hostile_torch_module(hostile_module_names(canary))
    torch.export.save(torch.export.export(model, args), str(tmp_path / "quoted.pt2"))
    rc, _ = _analyze(tmp_path, str(tmp_path / "quoted.pt2"), ("ort-cpu",))
    assert rc == 2 and not os.path.exists(canary)
    # What the reader lets through (torch's own deserializer fails on ';') compiles on every target.
    names = [n for n in hostile_module_names(canary, quotes=False) if ";" not in n]
    assert any("<IMG" in n for n in names) and any("chr(111)" in n for n in names)
    model, args = hostile_torch_module(names)
    torch.export.save(torch.export.export(model, args), str(tmp_path / "plain.pt2"))
    # ExecuTorch regenerates the program's code at every pass (to_edge, partitioning, to_executorch): those too.
    rc, report = _analyze(tmp_path, str(tmp_path / "plain.pt2"),
                          ALL_TARGETS + EXECUTORCH_TARGETS + COREAI_TARGETS + LITERT_TARGETS)
    assert rc == 0 and not os.path.exists(canary)
    _one_line_outcomes(report)
    assert all(t["status"] == "ok" for t in report["targets"].values()), \
        {k: t.get("error") for k, t in report["targets"].items() if t["status"] != "ok"}
    _drawings_hold_no_markup(report)


def test_fullwidth_names_are_refused_in_pt2(tmp_path):
    """Python reads identifiers NFKC-normalised: 'ｅｘｅｃ' in generated code is the attribute 'exec'."""
    import torch
    from xc_core.errors import XcInputError
    from xc_core.sources import load_source
    model, args = hostile_torch_module(["ｅｘｅｃ"])
    torch.export.save(torch.export.export(model, args), str(tmp_path / "fw.pt2"))
    with pytest.raises(XcInputError, match="letters Python reads as others"):
        load_source(str(tmp_path / "fw.pt2"))


def test_safe_names_keeps_the_computation_and_maps_every_name_back(tmp_path):
    """The renaming is one bijection over the whole model, subgraphs included: the renamed model computes the same,
    every name in it is a plain identifier, and each maps back to the model's own."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from xc_core.onnx_route.names import IDENTIFIER, checked_module_names, in_model_names, safe_names
    canary = str(tmp_path / "canary")
    model = onnx.load(hostile_onnx(str(tmp_path / "h.onnx"), canary))
    # an If whose branches read an outer value by its (hostile) name
    outer = model.graph.node[-1].output[0]
    then = helper.make_graph([helper.make_node("Neg", [outer], ["t" + outer], name='then"')], "then", [],
                             [helper.make_tensor_value_info("t" + outer, TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Abs", [outer], ["e" + outer], name="else\n")], "else", [],
                              [helper.make_tensor_value_info("e" + outer, TensorProto.FLOAT, None)])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(True), 'cond"'))
    model.graph.node.append(helper.make_node("If", ['cond"'], ["picked'"], name="if)", then_branch=then,
                                             else_branch=other))
    model.graph.output.append(helper.make_tensor_value_info("picked'", TensorProto.FLOAT, None))
    renamed, names = safe_names(model)
    every = [n.name for n in renamed.graph.node] + [v.name for v in renamed.graph.input] + \
        [v.name for v in renamed.graph.output] + [i.name for i in renamed.graph.initializer]
    for a in renamed.graph.node[-1].attribute:
        every += [n.name for n in a.g.node] + list(a.g.node[0].input) + list(a.g.node[0].output)
    assert all(IDENTIFIER.match(n) for n in every)
    branches = [a.g.node[0].name for a in renamed.graph.node[-1].attribute]
    assert sorted(names[n] for n in [n.name for n in renamed.graph.node] + branches) == sorted(
        [n.name for n in model.graph.node] + ['then"', "else\n"])
    feeds = {i.name: np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32) for i in model.graph.input}

    def run(m, f):
        return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    mapped = {renamed.graph.input[k].name: feeds[model.graph.input[k].name] for k in range(len(feeds))}
    for a, b in zip(run(model, feeds), run(renamed, mapped)):
        np.testing.assert_array_equal(a, b)
    # error messages about the renamed graph name the model's nodes (control characters escaped)
    assert in_model_names(f"node {renamed.graph.node[2].name} failed", names) == \
        f"node {repr(model.graph.node[2].name)[1:-1]} failed"
    # A name onnx2torch would put into generated code unrenamed is refused, not converted.
    with pytest.raises(RuntimeError, match="not a plain identifier"):
        checked_module_names(model, {})


def test_hostile_tflite_tensor_and_signature_names_run_nothing(tmp_path):
    """A .tflite names its tensors and its signature's inputs and outputs: every payload as such a name, through the
    reference and both LiteRT targets, Markdown, HTML and the drawings."""
    import torch
    pytest.importorskip("litert_torch")
    from ai_edge_litert.tools import flatbuffer_utils as fb
    canary = str(tmp_path / "canary")
    names = payloads(canary)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    model(torch.randn(1, 3, 8, 8))
    from xc_core.api import analyze
    convert = tmp_path / "convert"
    convert.mkdir()
    analyze(str(_saved(convert, model)), ["litert-xnnpack"], out_dir=str(convert / "out"))
    written = convert / "out" / "artifacts" / "litert-xnnpack" / "model.tflite"
    m = fb.read_model(str(written))
    sg = m.subgraphs[0]
    for k, t in enumerate(sg.tensors):
        t.name = names[k % len(names)].encode()
    sig = m.signatureDefs[0]
    sig.inputs[0].name = names[2].encode()                 # a newline and a statement as the input's name
    sig.outputs[0].name = names[-1].encode()
    fb.write_model(m, str(tmp_path / "hostile.tflite"))
    rc, report = _analyze(tmp_path, str(tmp_path / "hostile.tflite"), ("litert-xnnpack", "litert-gpu"))
    assert rc == 0 and not os.path.exists(canary)
    _one_line_outcomes(report)
    t = report["targets"]["litert-xnnpack"]
    assert t["status"] == "ok", t["error"]
    assert report["reference"]["id"] == "tflite-reference" and t["drift"]["outputs"]     # run, and compared
    assert report["source"]["inputs"][0]["name"] == names[2]       # kept as the model's name, never as code
    _drawings_hold_no_markup(report)
    html = (tmp_path / "out" / "report.html").read_text()
    assert "<img src=x onerror" not in html.lower()


def _saved(tmp_path, model):
    import torch
    path = tmp_path / "conv.pt2"
    torch.export.save(torch.export.export(model.eval(), (torch.randn(1, 3, 8, 8),)), str(path))
    return path
