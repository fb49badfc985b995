"""Loading sources: accepted formats load; anything else fails with one clear line and nothing in it runs."""
import os
import pickle
import zipfile

import numpy as np
import pytest
import torch

from tiny_models import conv_bn_relu
from xc_core.errors import XcInputError
from xc_core.sources import load_source
from xc_core.sources.samples import SAMPLES


@pytest.mark.parametrize("name", list(SAMPLES))
def test_samples_are_seeded_and_declare_inputs(name):
    a, b = load_source(f"sample:{name}"), load_source(f"sample:{name}")
    assert a.sha256 == b.sha256 and a.inputs
    for spec in a.inputs:
        if spec.dtype == "int64":  # token ids stay inside the vocabulary
            assert spec.low == 0 and spec.high == a.module.embedding.num_embeddings


def test_unknown_sample():
    with pytest.raises(XcInputError, match="unknown sample 'nope'; accepted: sample:vision-mini"):
        load_source("sample:nope")


def test_exported_program_pt2(tmp_path):
    model, args = conv_bn_relu()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, args), str(path))
    src = load_source(str(path))
    assert src.kind == "exported-program" and src.inputs[0].shape == [1, 3, 16, 16]
    assert src.exported_program is not None and len(src.sha256) == 64


def test_torchscript_needs_shapes_then_loads(tmp_path):
    model, args = conv_bn_relu()
    path = tmp_path / "m.pt"
    torch.jit.script(model).save(str(path))
    with pytest.raises(XcInputError, match="TorchScript does not record input shapes; give the shape of x") as e:
        load_source(str(path))
    assert "--shape NAME=DxDx" in e.value.for_cli() and "Inputs panel" in e.value.for_dashboard()
    src = load_source(str(path), {"x": ([1, 3, 16, 16], None)})
    assert src.kind == "torchscript" and src.inputs[0].dtype == "float32"


def test_state_dict_of_a_sample_architecture(tmp_path):
    model = SAMPLES["vision-mini"].model()
    path = tmp_path / "weights.pt"
    torch.save(model.state_dict(), str(path))
    src = load_source(str(path))
    assert src.kind == "state-dict" and "vision-mini" in src.notes[0]


def test_onnx_with_symbolic_dims_gets_documented_defaults(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "len"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "len"])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    src = load_source(str(path))
    assert src.inputs[0].dim_names == ("batch", None, "len")
    from xc_core.inputs.shapes import resolve_inputs
    (spec,), record = resolve_inputs(src.inputs)
    assert spec.shape == [1, 3, 16]
    assert "batch=1 (batch)" in spec.note and "len=16 (sequence)" in spec.note


def _one_line(e: XcInputError):
    text = str(e)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_text_file_named_onnx(tmp_path):
    p = tmp_path / "x.onnx"
    p.write_text("this is not a model\n")
    with pytest.raises(XcInputError) as e:
        load_source(str(p))
    assert "x.onnx: not a valid ONNX protobuf" in _one_line(e.value)


def test_truncated_pt2(tmp_path):
    model, args = conv_bn_relu()
    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(model, args), str(good))
    data = good.read_bytes()
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(XcInputError) as e:
        load_source(str(bad))
    assert "bad.pt2" in _one_line(e.value)


class _Payload:
    """Unpickling this would create a marker file: proof that code from the file ran."""
    marker = ""

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_module_is_refused_and_nothing_runs(tmp_path):
    model, _ = conv_bn_relu()
    whole = tmp_path / "whole.pt"
    torch.save(model, str(whole))
    with pytest.raises(XcInputError) as e:
        load_source(str(whole))
    assert "never unpickles arbitrary objects" in _one_line(e.value)

    marker = tmp_path / "pwned"
    _Payload.marker = str(marker)
    evil = tmp_path / "evil.pt"
    torch.save({"w": torch.zeros(1), "x": _Payload()}, str(evil))   # zip + data.pkl, like torch.save
    with pytest.raises(XcInputError):
        load_source(str(evil))
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(pickle.dumps(_Payload()))                     # a bare pickle
    with pytest.raises(XcInputError, match="bare pickle"):
        load_source(str(legacy))
    assert not marker.exists()


def test_unsupported_extension_and_missing_file(tmp_path):
    p = tmp_path / "model.h5"
    p.write_bytes(b"x")
    with pytest.raises(XcInputError, match="model.h5: not a model xc can read — its content is none of the accepted"):
        load_source(str(p))
    with pytest.raises(XcInputError, match="no such file"):
        load_source(str(tmp_path / "missing.onnx"))


def test_npz_inputs_are_read_without_pickle(tmp_path):
    from xc_core.inputs.values import read_npz
    p = tmp_path / "in.npz"
    np.savez(p, x=np.array([object()], dtype=object))
    with pytest.raises(XcInputError, match="is an object array"):
        read_npz(str(p))
    zipfile.ZipFile(tmp_path / "empty.zip", "w").close()
    os.rename(tmp_path / "empty.zip", tmp_path / "e.npz")
    assert read_npz(str(tmp_path / "e.npz")) == {}


@pytest.mark.parametrize("location, needle", [
    ("../../../../etc/passwd", "points outside the model's folder"),
    ("/etc/passwd", "points outside the model's folder"),
    ("weights.bin\0../x", "no readable location"),
    ("missing.bin", "is missing"),
])
def test_external_data_outside_the_model_folder_is_refused_in_one_line(tmp_path, location, needle):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from xc_core.errors import XcInputError
    from xc_core.sources import load_source
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value=location)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(XcInputError, match=needle) as e:
        load_source(str(path))
    assert "\n" not in str(e.value)


def test_an_openvino_ir_with_unnamed_tensors_is_analysed_in_a_worker(tmp_path):
    """openvino.convert_model leaves output tensors unnamed; the IR source names them by their node, and
    openvino-cpu (which loads the IR again in its worker) compiles and runs it."""
    import zipfile
    ov = pytest.importorskip("openvino")
    from tiny_models import conv_bn_relu
    from xc_core.api import analyze
    model, args = conv_bn_relu()
    ov.save_model(ov.convert_model(model, example_input=args), str(tmp_path / "model.xml"))
    with zipfile.ZipFile(tmp_path / "ir.zip", "w") as z:
        for f in ("model.xml", "model.bin"):
            z.write(tmp_path / f, f)
    report = analyze(str(tmp_path / "ir.zip"), ["openvino-cpu"])
    t = report["targets"]["openvino-cpu"]
    assert t["status"] == "ok" and t["outputs"]["values"]
    assert t["info"]["worker"]["evidence"] == "measured"
