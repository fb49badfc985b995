"""A compiled OpenVINO IR (model.xml + model.bin, uploaded zipped) as a source for `openvino-cpu`: read back and
compiled as it is. It has no ONNX and no reference, so other targets are unavailable and there is no drift."""
from __future__ import annotations

import os
import shutil
import tempfile

from ..errors import XcInputError
from ..limits import Limits
from . import safe_zip
from .spec import InputSpec, Source

OV_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64", "i64": "int64",
             "i32": "int32", "i16": "int16", "i8": "int8", "u8": "uint8", "boolean": "bool"}


def port_name(port) -> str:
    """A port's tensor name; an IR may leave tensors unnamed (get_any_name() then raises), so fall back to the
    friendly name of the node the port belongs to."""
    return port.get_any_name() if port.get_names() else port.get_node().get_friendly_name()


def load_openvino_ir(path: str, limits: Limits | None = None) -> Source:
    limits = limits or Limits.from_env()
    name = os.path.basename(path)
    workdir = tempfile.mkdtemp(prefix="xc-openvino-ir-")
    try:
        with safe_zip.open_zip(path, name, limits) as z:
            safe_zip.extract_all(z, workdir, name, limits)
        xml = _find_pair(workdir, name)
        try:
            import openvino as ov
            model = ov.Core().read_model(xml)
        except Exception as e:  # noqa: BLE001
            from ..errors import summarize_error
            raise XcInputError(f"{name}: OpenVINO could not read the IR ({summarize_error(str(e), 200)})") from None
        inputs = []
        for port in model.inputs:
            ps = port.get_partial_shape()
            if ps.rank.is_dynamic:
                raise XcInputError(f"{name}: input '{port_name(port)}' has no known rank; xc needs at least the "
                                   "rank of every input")
            shape = [d.get_length() if d.is_static else (1 if i == 0 else 16) for i, d in enumerate(ps)]
            labels = tuple(None if d.is_static else "?" for d in ps)
            dtype = OV_DTYPES.get(port.get_element_type().get_type_name(), "float32")
            inputs.append(InputSpec(port_name(port), shape, dtype, dim_names=labels if any(labels) else ()))
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    from ..paths import sha256_file
    src = Source(kind="openvino-ir", name=name, sha256=sha256_file(path), inputs=inputs, path=path,
                 notes=["a compiled OpenVINO IR: compiled and read back by openvino-cpu as it is; there is no "
                        "reference to compare its numbers to"])
    src.openvino_model, src.openvino_xml = model, xml
    src.temp_dirs.append(workdir)
    return src


def _find_pair(root: str, name: str) -> str:
    for folder, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".xml") and f[:-4] + ".bin" in files:
                return os.path.join(folder, f)
    raise XcInputError(f"{name}: the zip holds no OpenVINO IR (an .xml with the .bin of the same name)")
