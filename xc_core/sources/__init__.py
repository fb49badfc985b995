"""Load a source safely: a bundled sample, a PyTorch file (.pt2 / TorchScript .pt / state_dict) or ONNX.

Every failure is an `XcInputError` with one line that names the problem and what is accepted. Nothing here unpickles
arbitrary objects or evaluates text from a file: `.pt` files go through TorchScript's loader or
`torch.load(weights_only=True)`, whose unpickler only rebuilds tensors and plain containers and refuses every other
global before it is called; `.pt2` archives go through `pt2_archive`, which reads them without torch's unsafe paths.
Every file is bounded (`xc_core.limits`) before it is read, and every zip before it is unpacked.
"""
from __future__ import annotations

import os

from ..errors import XcInputError, hide_paths
from ..limits import Limits, check_file_size
from . import safe_zip
from .formats import BY_KIND, ONNX_ZIP
from .spec import InputSpec, ShapeOverrides, Source

ACCEPTED = ("accepted: sample:NAME, a PyTorch ExportedProgram .pt2 (torch.export.save), a TorchScript archive "
            "(torch.jit.save: .pt, .jit, .ptl), a state_dict of a bundled sample's architecture (.pt or "
            ".safetensors), an ONNX model (or a zip of its folder with its external data), a Core ML model, ML "
            "program or neuralNetwork (.mlmodel, or a .mlpackage zipped), an OpenVINO IR (.xml + .bin, zipped), or a LiteRT / TFLite model (.tflite)")


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
    name = os.path.basename(spec)
    size = os.path.getsize(spec)
    if size == 0:
        raise XcInputError(f"{name}: the file is empty ({ACCEPTED})")
    check_file_size(spec, limits)
    from . import sniff
    # By content, not by name: the extension only spares parsing an .onnx / .mlmodel twice.
    kind = sniff.sniff(spec, limits) if ext not in (".onnx", ".mlmodel") or safe_zip.is_zip(spec) else \
        (sniff.ONNX if ext == ".onnx" else sniff.MLMODEL)
    if kind == sniff.UNKNOWN and _holds_onnx(spec, name, limits):
        kind = ONNX_ZIP
    try:
        src = _load_kind(kind, spec, name, shapes, limits)
    except XcInputError as e:
        # A loader may quote a library's message, which names the folder the upload was unpacked into or the
        # server's scratch copy of it: the user knows their file by its base name.
        text = hide_paths(str(e))
        if text == str(e):
            raise
        raise XcInputError(text, fix=e.fix, inputs=e.inputs,
                           dashboard=hide_paths(e.dashboard) if e.dashboard else None) from None
    expected = BY_KIND[kind].extensions if kind in BY_KIND else ()
    if ext and expected and ext not in expected and not spec.lower().endswith(".mlpackage.zip"):
        src.notes.append(f"read as {BY_KIND[kind].label} by its content (the file is named {ext})")
    return src


def _holds_onnx(spec: str, name: str, limits: Limits) -> bool:
    """A zip of an ONNX model's folder: the model and its external data, as torch.onnx.export(dynamo=True) writes
    them (model.onnx + model.onnx.data), in one file an upload can carry."""
    if not safe_zip.is_zip(spec):
        return False
    from .onnx_file import zipped_onnx_models
    with safe_zip.open_zip(spec, name, limits) as z:
        return bool(zipped_onnx_models([i.filename for i in z.infolist() if not i.is_dir()]))


def _load_kind(kind: str, spec: str, name: str, shapes, limits: Limits) -> Source:
    from . import sniff
    if kind == sniff.ONNX:
        from .onnx_file import load_onnx
        return load_onnx(spec, shapes, limits)
    if kind == ONNX_ZIP:
        from .onnx_file import load_onnx_zip
        return load_onnx_zip(spec, shapes, limits)
    if kind == sniff.PT2:
        from .pytorch import load_exported_program
        return load_exported_program(spec, shapes, limits)
    if kind in (sniff.MLMODEL, sniff.MLPACKAGE_ZIP):
        from .coreml_file import load_coreml
        return load_coreml(spec, limits)
    if kind in (sniff.TORCHSCRIPT, sniff.TORCH_ZIP, sniff.PICKLE):
        from .pytorch import load_torch_file
        return load_torch_file(spec, shapes, limits)
    if kind == sniff.SAFETENSORS:
        from .pytorch import load_safetensors
        return load_safetensors(spec, limits)
    if kind == sniff.OPENVINO_ZIP:
        from .openvino_ir import load_openvino_ir
        return load_openvino_ir(spec, limits)
    if kind == sniff.TFLITE:
        from .tflite_file import load_tflite
        return load_tflite(spec, shapes, limits)
    if kind == sniff.NPZ:
        raise XcInputError(f"{name}: an .npz of arrays, not a model — give it as the inputs of a model "
                           "(--inputs in the CLI, the Inputs .npz upload in the dashboard)")
    ext = os.path.splitext(name)[1].lower()
    if safe_zip.is_zip(spec):
        raise XcInputError(f"{name}: a zip archive, but not of a model — it holds no torch.export program, "
                           "TorchScript code, torch.save data, .onnx model, .mlpackage folder or OpenVINO .xml + .bin "
                           f"pair ({ACCEPTED})")
    if ext in (".pt2", ".pt", ".pth", ".zip", ".ptl", ".jit"):
        raise XcInputError(f"{name}: not a readable archive — a {ext} file is a zip, and this one has no readable zip "
                           "directory (truncated or damaged?); for .pt2 re-save it with torch.export.save")
    raise XcInputError(f"{name}: not a model xc can read — its content is none of the accepted formats "
                       f"({ACCEPTED})")


__all__ = ["load_source", "Source", "InputSpec", "ACCEPTED"]
