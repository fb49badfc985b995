"""Bounds before reads, and malformed files: each ends in one line on stderr and exit 2, never a traceback, and
whatever was unpacked on the way is gone afterwards."""
import io
import os
import struct
import zipfile

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

from xc_core.cli import main
from xc_core.errors import XcInputError
from xc_core.inputs.values import read_npz
from xc_core.limits import Limits


def _relu_onnx(path, node_name="relu", init=None, x_shape=(1, 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x_shape))
    b = init or helper.make_tensor("b", TensorProto.FLOAT, [x_shape[-1]], [1.0] * x_shape[-1])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name=node_name), helper.make_node("Add", ["r", "b"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [b]),
                              opset_imports=[helper.make_opsetid("", 17)])
    data = model.SerializeToString()
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def _run(capsys, out, *argv, env=None, monkeypatch=None):
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    code = main(["analyze", *map(str, argv), "--targets", "ort-cpu", "--out", str(out / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    return code, err


def _one_line_exit_2(code, err, *needles):
    assert code == 2, err
    assert err.startswith("xc: ") and "\n" not in err and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)


# --- limits ---------------------------------------------------------------------------------------------------

def test_file_size_limit_names_the_flag_and_the_variable(tmp_path, capsys, monkeypatch):
    path = _relu_onnx(tmp_path / "m.onnx")
    code, err = _run(capsys, tmp_path, path, "--max-file-mb", "0.00001")
    _one_line_exit_2(code, err, "m.onnx: the file is", "--max-file-mb", "XC_MAX_FILE_MB")
    code, err = _run(capsys, tmp_path, path, env={"XC_MAX_FILE_MB": "0.00001"}, monkeypatch=monkeypatch)
    _one_line_exit_2(code, err, "above the 1e-05 MiB limit")


def test_a_declared_dim_of_a_billion_is_refused_before_anything_is_allocated(tmp_path, capsys):
    path = _relu_onnx(tmp_path / "m.onnx")
    code, err = _run(capsys, tmp_path, path, "--shape", "x=1x1000000000")
    _one_line_exit_2(code, err, "inputs for the shapes that would run", "x 1x1000000000 float32", "3.73 GiB",
                     "--max-input-mb", "XC_MAX_INPUT_MB")
    declared = _relu_onnx(tmp_path / "big.onnx", x_shape=(1, 1_000_000_000), init=helper.make_tensor(
        "b", TensorProto.FLOAT, [1], [1.0]))
    code, err = _run(capsys, tmp_path, declared)
    _one_line_exit_2(code, err, "--max-input-mb")


def test_npz_whose_header_declares_more_than_the_limit_is_refused_unread(tmp_path):
    p = tmp_path / "in.npz"
    np.savez(p, x=np.zeros((1024, 1024, 2), np.float32))   # 8 MiB
    with pytest.raises(XcInputError, match=r"in.npz: the arrays hold 8.00 MiB, above the 1 MiB limit.*"
                                           r"--max-input-mb or the environment variable XC_MAX_INPUT_MB"):
        read_npz(str(p), Limits(max_input_mb=1))
    with pytest.raises(XcInputError) as e:
        read_npz(str(p), Limits(max_input_mb=1))
    assert "--" not in e.value.for_dashboard() and "XC_MAX_INPUT_MB where the dashboard" in e.value.for_dashboard()
    assert read_npz(str(p))["x"].shape == (1024, 1024, 2)


def test_npz_declaring_gigabytes_in_a_small_file_is_refused(tmp_path):
    # The header says 4 GiB; the entry stores 16 bytes: refused from the header, never allocated.
    p = tmp_path / "lie.npz"
    with zipfile.ZipFile(p, "w") as z:
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (1, 1 << 30)})
        z.writestr("x.npy", buf.getvalue() + b"\0" * 16)
    with pytest.raises(XcInputError, match="lie.npz: the array 'x' declares 4.00 GiB but stores"):
        read_npz(str(p))


def test_zip_bomb_is_refused_from_its_directory(tmp_path):
    # 64 MiB of zeros deflate to ~64 KiB: a 1000:1 entry is a bomb, refused before a byte is inflated.
    p = tmp_path / "bomb.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                     "shape": (16 << 20,)})
            for _ in range(64):
                f.write(b"\0" * (1 << 20))
    with pytest.raises(XcInputError, match=r"bomb.npz: the entry 'x.npy' claims to inflate 1,0\d\d×, above the "
                                           r"100× limit.*--max-zip-ratio or the environment variable "
                                           r"XC_MAX_ZIP_RATIO"):
        read_npz(str(p))
    with pytest.raises(XcInputError, match="the archive unpacks to 64.00 MiB, above the 1 MiB limit"):
        read_npz(str(p), Limits(max_zip_ratio=10_000, max_unzipped_mb=1))


def test_zip_entry_count_is_checked_before_the_directory_is_parsed(tmp_path):
    p = tmp_path / "many.zip"
    with zipfile.ZipFile(p, "w") as z:
        for i in range(50):
            z.writestr(f"m.mlpackage/{i}", b"")
    from xc_core.sources import load_source
    with pytest.raises(XcInputError, match="many.zip: the archive declares 50, above the 10 limit on the number "
                                           "of files in an archive"):
        load_source(str(p), limits=Limits(max_zip_entries=10))


def test_limits_from_the_environment_are_checked(monkeypatch):
    monkeypatch.setenv("XC_MAX_INPUT_MB", "lots")
    with pytest.raises(XcInputError, match="XC_MAX_INPUT_MB='lots': expected a number"):
        Limits.from_env()
    monkeypatch.setenv("XC_MAX_INPUT_MB", "5")
    assert Limits.from_env().max_input_mb == 5 and Limits.from_env(max_input_mb=7).max_input_mb == 7


# --- malformed files --------------------------------------------------------------------------------------------

def _sample_state_dict():
    from xc_core.sources.samples import SAMPLES
    return SAMPLES["vision-mini"].model().state_dict()


def _mlpackage_zip(path, name="m.mlpackage/Manifest.json", data=b"{}" * 100):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name, data)
    return path


def _patch(path, edits):
    """Set header fields in both the local header and the central directory entry of a one-entry zip."""
    b = bytearray(open(path, "rb").read())
    for sig, offset, fmt, value in edits:
        i = b.find(sig)
        b[i + offset:i + offset + struct.calcsize(fmt)] = struct.pack(fmt, value)
    open(path, "wb").write(bytes(b))


def _malformed(kind, tmp):
    sd = _sample_state_dict()
    first = next(iter(sd))
    if kind == "onnx-name-not-utf8":
        p = tmp / "badname.onnx"
        _relu_onnx(p, node_name="QQQQ")
        p.write_bytes(p.read_bytes().replace(b"QQQQ", b"\xff\xfe\xfd\xfc"))
        return [p], "node #0 in the graph (Relu) has a name, type or tensor name that is not valid UTF-8"
    if kind == "onnx-unknown-data-type":
        init = helper.make_tensor("b", TensorProto.FLOAT, [4], [1, 2, 3, 4])
        init.data_type = 77
        return [_relu_onnx(tmp / "dtype.onnx", init=init)], "Unrecognized data_type (tensor name: b): 77"
    if kind in ("state-dict-meta", "state-dict-sparse", "state-dict-quantized"):
        t = {"state-dict-meta": torch.empty(sd[first].shape, device="meta"),
             "state-dict-sparse": sd[first].to_sparse(),
             "state-dict-quantized": torch.quantize_per_tensor(sd[first], 0.1, 0, torch.qint8)}[kind]
        p = tmp / f"{kind}.pt"
        torch.save({**sd, first: t}, p)
        return [p], {"state-dict-meta": "is a tensor on the 'meta' device", "state-dict-sparse": "is a sparse_coo "
                     "tensor", "state-dict-quantized": "is a quantized tensor (torch.qint8)"}[kind]
    if kind == "pt-broken-zip-directory":
        good = tmp / "good.pt"
        torch.save(sd, good)
        g = good.read_bytes()
        cd = g.rfind(b"PK\x01\x02")
        p = tmp / "broken.pt"
        p.write_bytes(g[:cd] + b"\0" * 50 + g[-22:])
        return [p], "broken.pt: the zip's central directory is damaged"
    if kind == "zip-encrypted":
        p = _mlpackage_zip(tmp / "enc.zip")
        _patch(p, [(b"PK\x03\x04", 6, "<H", 1), (b"PK\x01\x02", 8, "<H", 1)])
        return [p], "is encrypted; xc reads only unencrypted archives"
    if kind == "zip-unknown-method":
        p = _mlpackage_zip(tmp / "method.zip")
        _patch(p, [(b"PK\x03\x04", 8, "<H", 97), (b"PK\x01\x02", 10, "<H", 97)])
        return [p], "uses method 97 compression; accepted: stored or deflate"
    if kind == "zip-fails-to-inflate":
        p = _mlpackage_zip(tmp / "inflate.zip", data=os.urandom(2000))
        b = bytearray(p.read_bytes())
        i = b.find(b"Manifest.json") + len("Manifest.json")
        b[i + 5:i + 40] = os.urandom(35)
        p.write_bytes(bytes(b))
        return [p], "fails to inflate"
    if kind == "zip-long-path":
        return [_mlpackage_zip(tmp / "long.zip", "m.mlpackage/" + "a" * 5000)], "path is 5,012 characters long"
    if kind == "zip-deep-path":
        return [_mlpackage_zip(tmp / "deep.zip", "m.mlpackage/" + "d/" * 500 + "f")], "path is 502 folders deep"
    if kind == "zip-slip":
        return [_mlpackage_zip(tmp / "slip.zip", "../../escaped.txt")], "unsafe path '../../escaped.txt'"
    if kind == "npz-structured":
        npz = tmp / "s.npz"
        np.savez(npz, x=np.zeros(4, dtype=[("a", "f4"), ("b", "i4")]))
        return [_relu_onnx(tmp / "m.onnx"), "--inputs", npz], "s.npz: 'x' is a structured array"
    if kind == "npz-empty":
        npz = tmp / "e.npz"
        npz.write_bytes(b"")
        return [_relu_onnx(tmp / "m.onnx"), "--inputs", npz], "e.npz: the .npz file is empty"
    if kind == "shape-unknown-dtype":
        return [_relu_onnx(tmp / "m.onnx"), "--shape", "x=1x4:float99"], "unknown dtype 'float99'; accepted: float32"
    raise ValueError(kind)


MALFORMED = ["onnx-name-not-utf8", "onnx-unknown-data-type", "state-dict-meta", "state-dict-sparse",
             "state-dict-quantized", "pt-broken-zip-directory", "zip-encrypted", "zip-unknown-method",
             "zip-fails-to-inflate", "zip-long-path", "zip-deep-path", "zip-slip", "npz-structured", "npz-empty",
             "shape-unknown-dtype"]


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, kind):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    argv, needle = _malformed(kind, tmp_path)
    code, err = _run(capsys, tmp_path, *argv)
    _one_line_exit_2(code, err, needle)
    assert os.listdir(tmp_path / "tmp") == [], "something unpacked was left behind"
    assert _scratch_left() == [], "a run folder was left behind"
    assert not (tmp_path.parent / "escaped.txt").exists()


def _scratch_left() -> list[str]:
    """Run folders (and the workers' temp folders inside them) still in xc's scratch area."""
    from xc_core.paths import home
    work = os.path.join(home(), "work")
    return os.listdir(work) if os.path.isdir(work) else []


def test_unpacked_mlpackage_is_removed_after_the_analysis(tmp_path, monkeypatch):
    """A zipped .mlpackage is unpacked for the analysis and removed when it ends — also when it fails."""
    from xc_core.api import analyze
    pytest.importorskip("coremltools")
    import coremltools as ct
    from tiny_models import conv_bn_relu
    model, args = conv_bn_relu()
    mlmodel = ct.convert(torch.export.export(model, args).run_decompositions({}), convert_to="mlprogram",
                         minimum_deployment_target=ct.target.iOS17)
    pkg = tmp_path / "m.mlpackage"
    mlmodel.save(str(pkg))
    zipped = tmp_path / "m.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for root, _, files in os.walk(pkg):
            for f in files:
                full = os.path.join(root, f)
                z.write(full, os.path.relpath(full, tmp_path))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(scratch))
    report = analyze(str(zipped), ["coreml-ane"])
    assert report["targets"]["coreml-ane"]["status"] == "ok"
    assert os.listdir(scratch) == [] and _scratch_left() == []
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, nope=np.zeros(3, np.float32))   # fails after the package was unpacked
    with pytest.raises(XcInputError, match="the .npz has no array for input"):
        analyze(str(zipped), ["coreml-ane"], inputs_npz=str(wrong))
    assert os.listdir(scratch) == [] and _scratch_left() == []
