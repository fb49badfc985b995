"""Load a source safely: a bundled sample, a PyTorch file (.pt2 / TorchScript .pt / state_dict) or ONNX.

Every failure is an `XcInputError` with one line that names the problem and what is accepted. Nothing here unpickles
arbitrary objects or evaluates text from a file: `.pt` files go through TorchScript's loader or
`torch.load(weights_only=True)`, whose unpickler only rebuilds tensors and plain containers and refuses every other
global before it is called; `.pt2` archives go through `pt2_archive`, which reads them without torch's unsafe paths.
Every file is bounded (`xc_core.limits`) before it is read, and every zip before it is unpacked.
"""
from __future__ import annotations

import hashlib
import os

from ..errors import XcInputError
from ..limits import Limits, exceeded
from .spec import InputSpec, ShapeOverrides, Source

ACCEPTED = ("accepted: sample:NAME, a PyTorch ExportedProgram .pt2 (torch.export.save), a TorchScript .pt "
            "(torch.jit.save), a state_dict .pt of a bundled sample's architecture, an ONNX .onnx, or a Core ML "
            "ML program (.mlmodel, or a .mlpackage zipped as .zip)")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_source(spec: str, shapes: ShapeOverrides | None = None, limits: Limits | None = None) -> Source:
    """`spec` is `sample:NAME` or a file path. `shapes` overrides input shapes (needed for TorchScript).

    Anything the loader unpacks lives in `Source.temp_dirs`; `Source.close()` removes it (api.analyze does).
    """
    limits = limits or Limits.from_env()
    if spec.startswith("sample:"):
        from .pytorch import load_sample
        return load_sample(spec.split(":", 1)[1])
    if not os.path.exists(spec):
        raise XcInputError(f"{spec}: no such file ({ACCEPTED})")
    if os.path.isdir(spec):
        raise XcInputError(f"{spec}: is a directory ({ACCEPTED})")
    ext = os.path.splitext(spec)[1].lower()
    size = os.path.getsize(spec)
    if size == 0:
        raise XcInputError(f"{os.path.basename(spec)}: the file is empty ({ACCEPTED})")
    check_file_size(spec, limits)
    if ext == ".onnx":
        from .onnx_file import load_onnx
        return load_onnx(spec, shapes, limits)
    if ext == ".pt2":
        from .pytorch import load_exported_program
        return load_exported_program(spec, shapes, limits)
    if ext in (".mlmodel", ".zip") or spec.lower().endswith(".mlpackage.zip"):
        from .coreml_file import load_coreml
        return load_coreml(spec, limits)
    if ext in (".pt", ".pth", ".bin"):
        from .pytorch import load_torch_file
        return load_torch_file(spec, shapes, limits)
    raise XcInputError(f"{os.path.basename(spec)}: unsupported file type '{ext or 'none'}' ({ACCEPTED})")


def check_file_size(path: str, limits: Limits) -> None:
    size = os.path.getsize(path)
    if size > limits.bytes("max_file_mb"):
        raise exceeded("max_file_mb", f"{os.path.basename(path)}: the file is", size, limits)


__all__ = ["load_source", "Source", "InputSpec", "ACCEPTED", "sha256_file", "check_file_size"]
