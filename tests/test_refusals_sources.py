"""Every uploaded file xc cannot take ends in one line naming the problem (exit 2), never an internal error, and
never names the server's scratch folders: bit-flipped ONNX (text that is not UTF-8 anywhere, a data_type no ONNX
type has), an .npz without arrays, zips whose entries collide or whose names no file system takes."""
import os
import random
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xc_core.cli import main
from xc_core.errors import XcInputError
from xc_core.sources import load_source


def _model(dim: str = "batch") -> onnx.ModelProto:
    """Relu → Add of a weight, with text in every kind of field a bit flip can reach: doc strings, dim names,
    metadata on the model, graph, nodes and values, a producer, a denotation."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 4])
    x.type.denotation = "TENSOR"
    relu = helper.make_node("Relu", ["x"], ["r"], name="relu", doc_string="NODEDOC")
    add = helper.make_node("Add", ["r", "w"], ["y"], name="add")
    for node in (relu, add):
        node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'block']")
    g = helper.make_graph([relu, add], "main_graph", [x], [y], [numpy_helper.from_array(np.ones((1, 4), np.float32),
                                                                                        "w")], doc_string="GRAPHDOC")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch", doc_string="DOC")
    helper.set_model_props(m, {"source": "xc test"})
    m.ir_version = 9
    return m


def _flip_text(data: bytes, text: bytes) -> bytes:
    """`data` with the last byte of `text` (a length-prefixed protobuf string) made invalid UTF-8."""
    at = data.index(bytes([len(text)]) + text) + len(text)
    return data[:at] + b"\xff" + data[at + 1:]


def _cli_refuses(tmp_path, capsys, argv) -> str:
    code = main(argv + ["--targets", "ort-cpu", "--out", str(tmp_path / "out"), "--quiet", "--no-store"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("xc: ") and err.count("\n") == 1 and "internal error" not in err, err
    assert str(tmp_path) not in err and os.environ["XC_HOME"] not in err and "/tmp" not in err, err
    return err


@pytest.mark.parametrize("field, needle", [
    (b"main_graph", "model.graph.name is not valid UTF-8"),
    (b"batch", "dim_param is not valid UTF-8"),
    (b"GRAPHDOC", "model.graph.doc_string is not valid UTF-8"),
    (b"NODEDOC", "model.graph.node[0].doc_string is not valid UTF-8"),
    (b"['', 'block']", "metadata_props[0].value is not valid UTF-8"),
    (b"pytorch", "model.producer_name is not valid UTF-8"),
    (b"TENSOR", "denotation is not valid UTF-8"),
])
def test_onnx_text_that_is_not_utf8_is_refused_in_one_line(tmp_path, capsys, field, needle):
    path = tmp_path / "flipped.onnx"
    path.write_bytes(_flip_text(_model().SerializeToString(), field))
    err = _cli_refuses(tmp_path, capsys, ["analyze", str(path)])
    assert "flipped.onnx: the text at " in err and needle in err


@pytest.mark.parametrize("dtype", [9999, 40])
def test_an_initializer_of_no_onnx_type_is_refused(tmp_path, capsys, dtype):
    m = _model()
    m.graph.initializer[0].data_type = dtype
    path = tmp_path / "dtype.onnx"
    path.write_bytes(m.SerializeToString())
    err = _cli_refuses(tmp_path, capsys, ["analyze", str(path)])
    assert f"the tensor at model.graph.initializer[0] has data_type {dtype}, which is no ONNX tensor type" in err


def test_an_empty_npz_is_refused_naming_the_inputs(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model().SerializeToString())
    np.savez(tmp_path / "empty.npz")
    err = _cli_refuses(tmp_path, capsys, ["analyze", str(path), "--inputs", str(tmp_path / "empty.npz")])
    assert "the .npz holds no arrays" in err and "x [batch, 4] float32" in err


def _zip(path, entries):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            z.writestr(name, data)
    return str(path)


IR = [("model.xml", b"<net/>"), ("model.bin", b"")]


@pytest.mark.parametrize("entries, needle", [
    ([*IR, ("a", b"x"), ("a/b", b"y")], "'a' is a file in the archive and also the folder of other entries"),
    ([*IR, ("a/", b""), ("a", b"x")], "'a' is a file in the archive and also the folder of other entries"),
    ([*IR, ("./model.xml", b"<x/>")], "the entries 'model.xml' and './model.xml' unpack to the same file"),
    ([("m.mlpackage/a", b"x"), ("m.mlpackage/a/b", b"y")], "'m.mlpackage/a' is a file in the archive and also"),
    ([("m.mlpackage/" + "L" * 300, b"x")], "has a file or folder name of 300 bytes; at most 255"),
    ([*IR, ("é" * 130 + ".txt", b"x")], "has a file or folder name of 264 bytes; at most 255"),
    ([("a", b"x"), ("a/b", b"y")], "'a' is a file in the archive"),
    # Unpacked fine, then OpenVINO's message names the file it read: by its name in the archive, not where.
    (IR, "OpenVINO could not read the IR"),
])
def test_zips_whose_entries_collide_or_cannot_be_files_are_refused(tmp_path, capsys, entries, needle):
    err = _cli_refuses(tmp_path, capsys, ["analyze", _zip(tmp_path / "model.zip", entries)])
    assert err.startswith("xc: model.zip: ") and needle in err, err


def test_a_zip_of_no_model_says_so(tmp_path, capsys):
    err = _cli_refuses(tmp_path, capsys, ["analyze", _zip(tmp_path / "notes.zip", [("notes.txt", b"hi")])])
    assert "notes.zip: a zip archive, but not of a model" in err


def test_seeded_bit_flips_load_or_are_refused_in_one_line(tmp_path):
    """Random byte changes anywhere in a model with text in every field: each loads, or is refused in one line that
    names the file by its base name — no other exception, no scratch path."""
    seed = _model().SerializeToString()
    outcomes = {"loaded": 0, "refused": 0}
    for i in range(400):
        rng = random.Random(i)
        data = bytearray(seed)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path = tmp_path / f"f{i}.onnx"
        path.write_bytes(bytes(data))
        try:
            load_source(str(path)).close()
            outcomes["loaded"] += 1
        except XcInputError as e:
            text = str(e)
            assert text.startswith(f"f{i}.onnx: ") and "\n" not in text and str(tmp_path) not in text, (i, text)
            outcomes["refused"] += 1
        path.unlink()
    assert outcomes["loaded"] and outcomes["refused"], outcomes


def test_runtime_messages_name_files_without_the_servers_folders():
    from xc_core.errors import summarize_error
    said = summarize_error("[ONNXRuntimeError] : 1 : FAIL : Load model from /srv/xc/work/run-1-ab/artifacts/capture/"
                           "model.onnx failed:Type Error: Type (tensor(float8e8m0)) of output arg (relu) does not "
                           "match expected type (tensor(float)). See https://onnx.ai/onnx/intro/ for src/ops.cc")
    assert said.startswith("Load model from model.onnx failed:Type Error") and "/srv" not in said
    assert "https://onnx.ai/onnx/intro/" in said and "src/ops.cc" in said        # URLs and relative paths kept
