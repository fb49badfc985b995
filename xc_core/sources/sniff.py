"""What a file is, from its content rather than its name: a TorchScript archive named .jit or .ptl, an ONNX model
named .bin, a zipped .mlpackage or OpenVINO IR named anything, a .tflite by its flatbuffer identifier. Nothing here loads a model; zips are opened with
bounds (`safe_zip`) and only their directory is read.
"""
from __future__ import annotations

import json
import os
import struct

from ..limits import Limits
from . import safe_zip

PT2, TORCHSCRIPT, TORCH_ZIP, MLPACKAGE_ZIP, OPENVINO_ZIP, NPZ = ("pt2", "torchscript", "torch-zip",
                                                                 "mlpackage-zip", "openvino-ir-zip", "npz")
ONNX, MLMODEL, SAFETENSORS, PICKLE, UNKNOWN = "onnx", "mlmodel", "safetensors", "pickle", "unknown"
TFLITE = "tflite"
SAFETENSORS_MAX_HEADER = 100 << 20


def sniff(path: str, limits: Limits) -> str:
    with open(path, "rb") as f:
        head = f.read(16)
    if head[4:8] == b"TFL3":
        # A LiteRT / TFLite flatbuffer's file identifier, tested before the zip: a .tflite with TFLite Support
        # metadata carries a zip of its associated files (labels) after the flatbuffer, so it is a zip too.
        return TFLITE
    if safe_zip.is_zip(path):
        with safe_zip.open_zip(path, os.path.basename(path), limits) as z:
            return _zip_kind([i.filename for i in z.infolist()])
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):
        return PICKLE  # pickle protocol 2-5
    if _is_safetensors(path, head):
        return SAFETENSORS
    return _protobuf_kind(path)


def _zip_kind(names: list[str]) -> str:
    top = {n for n in names if "/" not in n}
    if top & {"serialized_exported_program.json", "version"} or any(n.endswith("/archive_format") for n in names):
        return PT2
    if any(n.endswith("/constants.pkl") for n in names) and any("/code/" in n for n in names):
        return TORCHSCRIPT
    if any(n.endswith("/data.pkl") or n == "data.pkl" for n in names):
        return TORCH_ZIP
    if any(".mlpackage/" in n for n in names):
        return MLPACKAGE_ZIP
    stems = {n[:-4] for n in names if n.endswith(".xml")}
    if any(n[:-4] in stems for n in names if n.endswith(".bin")):
        return OPENVINO_ZIP
    if names and all(n.endswith(".npy") for n in names if not n.endswith("/")):
        return NPZ
    return UNKNOWN


def _is_safetensors(path: str, head: bytes) -> bool:
    if len(head) < 9:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    if not (2 <= n <= min(SAFETENSORS_MAX_HEADER, os.path.getsize(path) - 8)) or head[8:9] != b"{":
        return False
    with open(path, "rb") as f:
        f.seek(8)
        try:
            return isinstance(json.loads(f.read(n)), dict)
        except (ValueError, UnicodeDecodeError):
            return False


def _protobuf_kind(path: str) -> str:
    """ONNX and Core ML specs are both protobuf; parse as ONNX and look for a graph, else as a Core ML spec."""
    try:
        import onnx
        model = onnx.load(path, load_external_data=False)
        if model.graph.node or model.opset_import:
            return ONNX
    except Exception:  # noqa: BLE001 — not ONNX; maybe Core ML
        pass
    try:
        from ..quiet import quiet_coremltools
        with quiet_coremltools():  # coremltools prints version warnings on import
            from coremltools.proto import Model_pb2
        spec = Model_pb2.Model()
        with open(path, "rb") as f:
            spec.ParseFromString(f.read())
        if spec.WhichOneof("Type"):
            return MLMODEL
    except Exception:  # noqa: BLE001
        pass
    return UNKNOWN
