"""The source formats xc reads: one table that the loader (the note "read as … by its content"), the service (which
uploaded file is the model) and the dashboard's uploader (the extensions it offers) all read, so a new format is
declared once. How to add one: docs/architecture.md, "How to add a source format".

A file is read by its content (sniff.py), never by its name: the extensions say what a format's files are usually
called, for the uploader's filter and for a note when the name and the content disagree.
"""
from __future__ import annotations

from dataclasses import dataclass

ONNX_ZIP = "onnx-zip"     # a zip holding an .onnx (with its external data): no sniff kind of its own


@dataclass(frozen=True)
class SourceFormat:
    kind: str                      # what sniff.py (or the loader, for ONNX_ZIP) calls the content
    label: str                     # in a sentence: "read as {label} by its content"
    extensions: tuple[str, ...]    # the names its files usually have, lower case, with the dot


FORMATS = (
    SourceFormat("pt2", "a torch.export archive", (".pt2",)),
    SourceFormat("torchscript", "TorchScript", (".pt", ".pth", ".jit", ".ptl", ".torchscript")),
    SourceFormat("torch-zip", "a torch.save file", (".pt", ".pth", ".bin", ".ckpt")),
    SourceFormat("onnx", "ONNX", (".onnx",)),
    SourceFormat("mlmodel", "a Core ML model", (".mlmodel",)),
    SourceFormat("mlpackage-zip", "a zipped .mlpackage", (".zip",)),
    SourceFormat("openvino-ir-zip", "a zipped OpenVINO IR", (".zip",)),
    SourceFormat("safetensors", "safetensors weights", (".safetensors",)),
    SourceFormat(ONNX_ZIP, "a zipped ONNX model", (".zip",)),
    SourceFormat("tflite", "a TFLite model", (".tflite", ".lite")),
)
BY_KIND = {f.kind: f for f in FORMATS}

# What exporters name an ONNX model's external data (torch: model.onnx.data; Hugging Face optimum: model.onnx_data).
EXTERNAL_DATA_EXTENSIONS = (".data", ".onnx_data")
# Names that are both a model's and external data's (.bin: a torch.save file, and what some exporters call an ONNX
# model's weights): beside an .onnx in one upload such a file is its data, alone it is the model.
EITHER_MODEL_OR_DATA = (".bin",)


def model_extensions() -> tuple[str, ...]:
    """The names that make an uploaded file the model when several come together (never an either-name)."""
    return tuple(dict.fromkeys(e for f in FORMATS for e in f.extensions if e not in EITHER_MODEL_OR_DATA))


def upload_extensions() -> list[str]:
    """Every name the uploader takes, without the dot (Streamlit's `type=`): models and external data."""
    every = [e for f in FORMATS for e in f.extensions] + list(EXTERNAL_DATA_EXTENSIONS)
    return [e.lstrip(".") for e in dict.fromkeys(every)]
