"""The two sides of a model diff from real runs (review/model_sides.py): the captured graph and weight records from
the report, exact values from the run's files, a PyTorch run compared with an ONNX one through its ONNX export, and
one line when two runs cannot be compared as models."""
import copy
import os

import numpy as np
import pytest
import torch

from model_pairs import FC_SCALE, base_model, example_inputs, head_model
from xc_core.errors import XcInputError
from xc_core.review.model_sides import ONNX_IN_RUN, PT2_IN_RUN, model_sides, side_from_report
from xc_core.review.runs import Run, load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run folders: the base and head models as .pt2, and the head model as an ONNX source."""
    from xc_core.api import analyze
    folder = tmp_path_factory.mktemp("sides")
    for name, model in (("base", base_model()), ("head", head_model())):
        torch.export.save(torch.export.export(model, example_inputs()), str(folder / f"{name}.pt2"))
    torch.onnx.export(head_model(), example_inputs(), str(folder / "head.onnx"), dynamo=True, verbose=False)
    out = {}
    for name, file in (("base", "base.pt2"), ("head", "head.pt2"), ("onnx", "head.onnx")):
        analyze(str(folder / file), ["ort-cpu"], out_dir=str(folder / f"run-{name}"), isolate=False)
        out[name] = str(folder / f"run-{name}")
    return out


def test_pytorch_sides_are_the_captured_graphs_with_exact_values(runs):
    base, head = model_sides(load_run(runs["base"]), load_run(runs["head"]))
    assert (base.family, head.family) == ("aten", "aten") and not base.notes and not head.notes
    convs = [n for n in head.nodes if n.op_type == "conv2d"]
    assert len(convs) == 1 + 2 * 4 and convs[0].attributes["padding"] == [1, 1]     # aten arguments kept
    readers = {t.name for n in head.nodes for t in n.inputs}
    assert head.weights and all(w.graph_name in readers for w in head.weights
                                if not w.name.endswith("num_batches_tracked"))
    fc = next(w for w in head.weights if w.name == "head.fc.weight")
    assert fc.graph_name == "p_head_fc_weight" and fc.module_path == "head.fc"
    got_b, got_h = base.values(["head.fc.weight", "no.such.weight"]), head.values(["head.fc.weight"])
    assert set(got_b) == {"head.fc.weight"}
    change = np.linalg.norm(got_h["head.fc.weight"] - got_b["head.fc.weight"]) / np.linalg.norm(got_b["head.fc.weight"])
    assert change == pytest.approx(FC_SCALE - 1, rel=1e-5)


def test_the_report_records_what_capture_hashed(runs):
    from xc_core.analysis.model_weights import records_from_program
    report = load_run(runs["base"]).report
    again = {r["name"]: r["sha256"] for r in records_from_program(torch.export.export(base_model(), example_inputs()))}
    assert {w["name"]: w["sha256"] for w in report["capture"]["weights"]} == again


def test_an_onnx_run_and_a_pytorch_run_compare_through_the_onnx_export(runs):
    base, new = model_sides(load_run(runs["onnx"]), load_run(runs["base"]))
    assert (base.family, new.family) == ("onnx", "onnx")
    assert new.graph.startswith("ONNX export") and base.graph == "captured ONNX graph"
    assert {"Conv", "Relu", "Gemm"} <= {n.op_type for n in new.nodes} and not any(n.domain == "aten"
                                                                                for n in new.nodes)
    conv_paths = {n.module_path for n in new.nodes if n.op_type == "Conv"}
    assert {"stem.0", "blocks.0.conv1", "blocks.2.conv2"} <= conv_paths          # from the exporter's metadata
    by_name = {w.name: w for w in new.weights}
    assert by_name["head.fc.weight"].module_path == "head.fc"
    # blocks.0 is the same block in both models, exported twice (torch.onnx's optimizer for the ONNX source, xc's
    # export for the PyTorch run): equal values hash alike across the two files
    onnx_source = {w.name: w.sha256 for w in base.weights}
    assert onnx_source["blocks.0.conv1.weight"] == by_name["blocks.0.conv1.weight"].sha256
    assert onnx_source["head.fc.weight"] != by_name["head.fc.weight"].sha256
    exact = new.values(["head.fc.weight"])["head.fc.weight"]
    assert np.array_equal(exact, base_model().head.fc.weight.detach().numpy())


def test_onnx_against_pytorch_without_the_run_files_is_one_line(runs):
    onnx_run = load_run(runs["onnx"])
    line = model_sides(onnx_run, Run(load_run(runs["base"]).report, "base.pt2"))
    assert isinstance(line, str) and "\n" not in line
    assert "ONNX export" in line and "stored run or a run folder" in line


def test_a_run_made_before_weight_records_is_compared_without_weights(runs):
    old = copy.deepcopy(load_run(runs["base"]).report)
    del old["capture"]["weights"]
    base, head = model_sides(Run(old, "old"), load_run(runs["head"]))
    assert base.weights == [] and len(base.nodes) > 10
    assert base.notes == ["base run has no weight records (made by an xc before runs kept them): weights not "
                          "compared"]
    # a report alone (no files): records, but no values
    alone = side_from_report(load_run(runs["head"]).report)
    assert alone.values is None and alone.weights and not alone.notes


def test_a_tflite_compares_only_with_a_tflite(runs):
    report = copy.deepcopy(load_run(runs["base"]).report)
    report["source"]["kind"] = "tflite"
    for node in report["capture"]["graph"]["nodes"]:
        node["domain"] = "tflite"
    line = model_sides(Run(report, "model.tflite"), load_run(runs["onnx"]))
    assert line == ("base is a .tflite and new an ONNX model: a .tflite compares only with another .tflite (its ops "
                    "are not an ONNX model's)")


def test_external_data_is_read_only_from_the_run(runs, tmp_path):
    """An ONNX in a run whose initializer points outside the run folder: refused in one line, nothing read."""
    import onnx
    run = load_run(runs["onnx"])
    model = onnx.load(run.files[ONNX_IN_RUN])
    init = model.graph.initializer[0]
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.zeros(init.ByteSize(), np.uint8).tobytes())
    del init.external_data[:]
    init.ClearField("raw_data")
    init.data_location = onnx.TensorProto.EXTERNAL
    init.external_data.add(key="location", value=os.path.relpath(secret, os.path.dirname(run.files[ONNX_IN_RUN])))
    onnx.save(model, str(tmp_path / "model.onnx"))
    side = side_from_report(run.report, {ONNX_IN_RUN: str(tmp_path / "model.onnx")})
    with pytest.raises(XcInputError, match="not a file of the run"):
        side.values([init.name])
    assert PT2_IN_RUN not in run.files            # an ONNX source's run has no ExportedProgram


def test_an_onnx_file_exported_from_the_same_model_compares_as_unchanged(runs):
    # head.onnx came from torch.onnx.export with its default rewrites; xc exports head.pt2 without them (targets see
    # the unfused graph). Read through the optimized export, the two are one model: no change at all.
    from xc_core.review.model_diff import model_diff_of_runs
    d = model_diff_of_runs(load_run(runs["onnx"]), load_run(runs["head"]))
    assert d["comparable"] and d["changes"] == [] and d["blocks"] == [], d["changes"][:5]
    assert any("optimized as torch.onnx.export does by default" in n for n in d["notes"])
    # and against base: exactly the done-when edits, through the ONNX graphs
    d = model_diff_of_runs(load_run(runs["base"]), load_run(runs["onnx"]))
    assert [b["module_path"] for b in d["blocks"]] == ["blocks.1"] and d["summary"]["added"] == len(
        [c for c in d["changes"] if c["kind"] == "added"])
    assert {(c["kind"], c["module_path"]) for c in d["changes"] if c["kind"] != "added"} == {
        ("replaced", "blocks.3.act"), ("weights", "head.fc")}, [c["text"] for c in d["changes"]]
