"""LiteRT targets: litert-torch's conversion traced to the source ops, XNNPACK's partitions read from the
interpreter (an op it does not take on the CPU with its reason, measured drift), the GPU delegate's own decision on
SwiftShader, the int8 variant, the converter's transposes in the layout audit, .tflite uploads (the file xc wrote
re-opens) and hostile flatbuffers refused in one line."""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("litert_torch")

from tiny_models import ConvMeanGeluCumsum  # noqa: E402
from xc_core.errors import XcInputError  # noqa: E402

LITERT = ("litert-xnnpack", "litert-gpu", "litert-xnnpack[quantize=int8]")


class GatherCount(torch.nn.Module):
    """Two inputs, three outputs: rows picked by run-time indices (GATHER_ND, which the GPU delegate refuses), an
    integer running count (CUMSUM on int32: the GPU delegate wants floats) and a float path it takes."""

    def forward(self, x, idx):
        return x[idx % x.shape[0]], (x > 0).to(torch.int32).cumsum(1), torch.tanh(x) * 2 + 1


def _analyze(tmp, module, args, targets, name="net.pt2"):
    from xc_core.api import analyze
    path = os.path.join(tmp, name)
    torch.export.save(torch.export.export(module.eval(), args), path)
    return analyze(path, list(targets), out_dir=os.path.join(tmp, "out"))


@pytest.fixture(scope="module")
def conv_report(tmp_path_factory):
    torch.manual_seed(0)
    tmp = str(tmp_path_factory.mktemp("litert"))
    return _analyze(tmp, ConvMeanGeluCumsum(), (torch.randn(1, 3, 16, 16),), LITERT), tmp


def _nodes(t):
    return {n["id"]: n for n in t["graph"]["nodes"]}


@pytest.mark.slow
def test_xnnpack_leaves_cumsum_on_the_cpu_with_its_reason_and_measures_drift(conv_report):
    report, _ = conv_report
    t = report["targets"]["litert-xnnpack"]
    assert t["status"] == "ok", t["error"]
    nodes = _nodes(t)
    assert nodes["cumsum_6"]["backend"] == "cpu" and nodes["cumsum_6"]["fallback"]
    assert "no kernel for CUMSUM" in nodes["cumsum_6"]["fallback_reason"]
    assert {n["backend"] for i, n in nodes.items() if i != "cumsum_6"} == {"xnnpack"}
    part = t["info"]["partitioning"]
    assert part["evidence"] == "reported" and part["unsupported_ops"] == ["CUMSUM"] and part["num_partitions"] == 1
    assert t["evidence"]["numerics"] == "measured"
    assert max(d["rel_l2"] for d in t["drift"]["outputs"].values()) < 1e-5


@pytest.mark.slow
def test_every_op_traced_to_its_source_ops_and_the_conv_fusion_named(conv_report):
    report, _ = conv_report
    nodes = _nodes(report["targets"]["litert-xnnpack"])
    assert nodes["conv_2d_1"]["source_ops"] == ["conv2d", "batch_norm", "relu"]
    assert nodes["conv_2d_1"]["module_path"] == "conv"
    assert nodes["fully_connected_4"]["source_ops"] == ["linear"] and nodes["cumsum_6"]["source_ops"] == ["cumsum"]
    groups = report["targets"]["litert-xnnpack"]["fusions"]["groups"]
    assert [g["pattern"] for g in groups] == ["conv2d+batch_norm+relu → CONV_2D"]


@pytest.mark.slow
def test_the_converters_transposes_are_in_the_layout_audit(conv_report):
    report, _ = conv_report
    layout = report["targets"]["litert-xnnpack"]["layout"]
    assert layout["move_count"] == 2
    assert layout["transitions"] == {"NCHW → NHWC": 1, "NHWC → NCHW": 1}
    assert layout["bytes_moved"] == (1 * 16 * 16 * 3 + 1 * 8 * 16 * 16) * 4
    assert "TRANSPOSE" in layout["said_by"]


@pytest.mark.slow
def test_gpu_target_is_the_delegates_own_decision_and_emulated_numerics(conv_report):
    report, _ = conv_report
    t = report["targets"]["litert-gpu"]
    if t["status"] == "unavailable":
        pytest.skip(t["error"])
    assert t["status"] == "ok", t["error"]
    assert t["evidence"]["assignment"] == "predicted-runtime" and t["evidence"]["numerics"] == "emulated"
    assert t["info"]["partitioning"]["fully_accelerated"] is True
    assert {n["backend"] for n in t["graph"]["nodes"]} == {"gpu"}
    assert "SwiftShader" in t["info"]["numerics_assumption"]
    assert max(d["rel_l2"] for d in t["drift"]["outputs"].values()) < 1e-4


@pytest.mark.slow
def test_int8_variant_quantizes_weights_and_drifts_more_than_float(conv_report):
    report, _ = conv_report
    f, q = report["targets"]["litert-xnnpack"], report["targets"]["litert-xnnpack[quantize=int8]"]
    assert q["status"] == "ok", q["error"]
    assert q["declared_precisions"] == ["int8"]
    assert _nodes(q)["conv_2d_1"]["precision"] == "int8" and _nodes(q)["fully_connected_4"]["precision"] == "int8"
    worst = lambda t: max(d["rel_l2"] for d in t["drift"]["outputs"].values())  # noqa: E731
    assert 1e-5 < worst(q) < 0.1 and worst(q) > 10 * worst(f)


@pytest.mark.slow
def test_gpu_delegate_refusals_carry_its_words(tmp_path):
    report = _analyze(str(tmp_path), GatherCount(), (torch.randn(6, 5), torch.tensor([0, 2, 4])),
                      ("litert-gpu", "litert-xnnpack"))
    t = report["targets"]["litert-gpu"]
    if t["status"] == "unavailable":
        pytest.skip(t["error"])
    assert t["status"] == "ok", t["error"]
    on_cpu = {n["op_type"]: n["fallback_reason"] for n in t["graph"]["nodes"] if n["fallback"]}
    assert set(on_cpu) == {"GATHER_ND", "CUMSUM"}
    assert "must be float" in on_cpu["CUMSUM"] and on_cpu["GATHER_ND"].startswith("the GPU delegate:")
    assert "2 operations will run on the CPU" in t["info"]["partitioning"]["delegate_said"]
    assert set(t["outputs"]) == {"output 0", "output 1", "output 2"} or len(t["drift"]["outputs"]) == 3
    x = report["targets"]["litert-xnnpack"]
    assert x["status"] == "ok", x["error"]
    assert any("int64" in n or "64-bit" in n for n in x["notes"])          # idx was int64: fed as int32


@pytest.mark.slow
def test_the_tflite_xc_wrote_reopens_as_an_upload(conv_report, tmp_path):
    from xc_core.api import analyze
    _, tmp = conv_report
    written = os.path.join(tmp, "out", "artifacts", "litert-xnnpack", "model.tflite")
    upload = tmp_path / "from_xc.tflite"
    upload.write_bytes(open(written, "rb").read())
    report = analyze(str(upload), ["litert-xnnpack", "litert-gpu", "ort-cpu", "coreml-ane"],
                     out_dir=str(tmp_path / "out"))
    assert report["source"]["kind"] == "tflite" and report["reference"]["id"] == "tflite-reference"
    t = report["targets"]["litert-xnnpack"]
    assert t["status"] == "ok", t["error"]
    assert _nodes(t)["cumsum_6"]["fallback"] and _nodes(t)["conv_2d_1"]["source_ops"] == ["conv_2d_1"]
    assert max(d["rel_l2"] for d in t["drift"]["outputs"].values()) < 1e-5
    assert report["targets"]["ort-cpu"]["status"] == "unavailable"
    assert "tflite" in report["targets"]["coreml-ane"]["error"]


@pytest.mark.slow
def test_an_onnx_upload_reaches_litert_through_the_route(tmp_path):
    from xc_core.api import analyze
    torch.manual_seed(0)
    m = ConvMeanGeluCumsum().eval()
    path = str(tmp_path / "net.onnx")
    torch.onnx.export(m, (torch.randn(1, 3, 16, 16),), path, dynamo=True, input_names=["image"])
    report = analyze(path, ["litert-xnnpack"], out_dir=str(tmp_path / "out"))
    t = report["targets"]["litert-xnnpack"]
    assert t["status"] == "ok", t["error"]
    onnx_ids = {n["id"] for n in report["capture"]["graph"]["nodes"]}
    conv = next(n for n in t["graph"]["nodes"] if n["op_type"] == "CONV_2D")
    assert conv["source_ops"] and set(conv["source_ops"]) <= onnx_ids      # the ONNX node names, not the route's


def _tflite_bytes(conv_report) -> bytes:
    _, tmp = conv_report
    return open(os.path.join(tmp, "out", "artifacts", "litert-xnnpack", "model.tflite"), "rb").read()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "huge-vector", "bad-tensor-index"])
def test_hostile_flatbuffers_are_refused_in_one_line(conv_report, tmp_path, damage):
    from xc_core.readers.tflite import TfliteModel
    from xc_core.sources import load_source
    data = bytearray(_tflite_bytes(conv_report))
    if damage == "truncated":
        data = data[:200]
    else:
        model = TfliteModel(bytes(data))
        # Find the little-endian encoding of the first operator's input count or a tensor index and break it.
        import struct
        from ai_edge_litert import schema_py_generated as schema
        op = schema.Model.GetRootAs(bytes(data), 0).Subgraphs(0).Operators(model.ops.__len__() - 1)
        vec = op._tab.Vector(op._tab.Offset(8))      # the operator's inputs vector
        if damage == "huge-vector":
            struct.pack_into("<I", data, vec - 4, 0x7FFFFFF0)
        else:
            struct.pack_into("<i", data, vec, 99999)
    path = tmp_path / f"{damage}.tflite"
    path.write_bytes(bytes(data))
    with pytest.raises(XcInputError) as e:
        load_source(str(path))
    text = str(e.value)
    assert "\n" not in text and f"{damage}.tflite" in text and "TFLite" in text


@pytest.mark.slow
def test_report_json_and_markdown_carry_the_litert_columns(conv_report):
    from xc_core.review.markdown import report_markdown
    report, tmp = conv_report
    json.dumps(report)
    md = report_markdown(report)
    assert "litert-xnnpack" in md and "litert-gpu" in md
    from xc_core.export.model_explorer import export_plan
    assert "litert-xnnpack" in export_plan(report)["graphs"]
    assert np.isfinite(report["targets"]["litert-gpu"]["drift"]["outputs"]["output 0"]["rel_l2"]) or \
        report["targets"]["litert-gpu"]["status"] != "ok"


class Bucketize(torch.nn.Module):
    """torch.bucketize: litert-torch has no lowering for it."""

    def forward(self, x):
        return torch.bucketize(x, torch.tensor([-1.0, 0.0, 1.0])).float() + x


@pytest.mark.slow
def test_one_conversion_per_run_shared_by_the_litert_targets_its_failure_too(tmp_path):
    report = _analyze(str(tmp_path), Bucketize(), (torch.randn(2, 5),), ("litert-xnnpack", "litert-gpu", "ort-cpu"))
    errors = {tid: report["targets"][tid]["error"] for tid in ("litert-xnnpack", "litert-gpu")}
    assert all(e and "aten.bucketize" in e and "\n" not in e for e in errors.values()), errors
    assert len(set(errors.values())) == 1                       # the same words: one conversion, said to both
    assert report["targets"]["ort-cpu"]["status"] == "ok"
    converted = os.listdir(tmp_path / "out" / "artifacts" / "litert-converted")
    assert len(converted) == 1


class TensorLiteral(torch.nn.Module):
    """A tensor literal in forward: lift_fresh_copy + detach_ in the program, a view of the .pt2's storage once read
    back — litert-torch's re-export refused it until xc made the detach out of place."""

    def forward(self, x):
        return x * torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]) + 1


@pytest.mark.slow
def test_a_pt2_with_a_tensor_literal_converts(tmp_path):
    report = _analyze(str(tmp_path), TensorLiteral(), (torch.randn(2, 5),), ("litert-xnnpack",))
    t = report["targets"]["litert-xnnpack"]
    assert t["status"] == "ok", t["error"]
    assert max(d["rel_l2"] for d in t["drift"]["outputs"].values()) < 1e-6


@pytest.mark.slow
def test_a_tflite_with_a_dynamic_batch_runs_at_the_batch_asked_for(conv_report, tmp_path):
    """A .tflite whose batch is -1 in its shape signature: the source says the dim is the model's to choose, the
    run's batch is what the user gives, and both runtimes resize their inputs to it."""
    from ai_edge_litert.tools import flatbuffer_utils as fb
    from xc_core.api import analyze
    _, tmp = conv_report
    m = fb.read_model(os.path.join(tmp, "out", "artifacts", "litert-xnnpack", "model.tflite"))
    for t in m.subgraphs[0].tensors:
        if t.shape is not None and len(t.shape) in (2, 4) and t.shape[0] == 1 and not m.buffers[t.buffer].data:
            t.shapeSignature = [-1] + list(t.shape[1:])
    fb.write_model(m, str(tmp_path / "dynamic.tflite"))
    report = analyze(str(tmp_path / "dynamic.tflite"), ["litert-xnnpack", "litert-gpu"],
                     shapes={"args_0": ([3, 3, 16, 16], None)}, out_dir=str(tmp_path / "out"))
    assert report["source"]["inputs"][0]["dim_names"][0] == "?"
    for tid in ("litert-xnnpack", "litert-gpu"):
        t = report["targets"][tid]
        if t["status"] == "unavailable":
            continue
        assert t["status"] == "ok", (tid, t["error"])
        assert t["outputs"]["values"]["output_0"]["shape"] == [3, 16]
        assert t["drift"]["worst"]["rel_l2"] < 1e-5
