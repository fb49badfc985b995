"""A LiteRT / TensorFlow Lite model (.tflite) as a source, recognised by its flatbuffer identifier (TFL3). It is read
into the IR (readers/tflite.py, which refuses vectors longer than the file can hold and tensor indices out of
range) and run by the LiteRT targets as it is; the reference is LiteRT's interpreter without delegates. Nothing
else compiles it: there is no ONNX or PyTorch program to give the other targets."""
from __future__ import annotations

import os

from ..errors import XcInputError
from ..limits import Limits
from .spec import InputSpec, Source

# Dynamic dims (-1 in the shape signature) when the model does not fix them: batch 1, others 16 (--shape overrides).
DEFAULT_BATCH, DEFAULT_DIM = 1, 16


def load_tflite(path: str, shapes=None, limits: Limits | None = None) -> Source:
    from ..readers.tflite import TfliteModel
    name = os.path.basename(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        model = TfliteModel(data)
    except Exception as e:  # noqa: BLE001 — any parse failure of an uploaded flatbuffer is a refusal
        raise XcInputError(f"{name}: not a readable TFLite model ({type(e).__name__}: {str(e)[:160]}); accepted: a "
                           ".tflite flatbuffer as LiteRT / TensorFlow Lite writes it") from None
    if not model.inputs:
        raise XcInputError(f"{name}: the TFLite model has no inputs; xc runs a model on inputs it draws")
    in_names, out_names = model.io_names()
    inputs = []
    for idx, label in zip(model.inputs, in_names):
        t = model.tensors[idx]
        if t["dtype"] in ("string", "resource", "variant"):
            raise XcInputError(f"{name}: input '{label}' is a {t['dtype']} tensor; xc draws numeric inputs only")
        shape = [DEFAULT_BATCH if d is None and i == 0 else DEFAULT_DIM if d is None else d
                 for i, d in enumerate(t["shape"])]
        dims = tuple("?" if d is None else None for d in t["shape"])
        if shapes and label in shapes:
            shape = list(shapes[label][0])
        inputs.append(InputSpec(label, shape, t["dtype"], dim_names=dims if any(dims) else ()))
    from ..paths import sha256_file
    notes = ["a LiteRT / TFLite model: run by the LiteRT targets as it is, against LiteRT's interpreter without "
             "delegates (tflite-reference)"]
    if model.subgraphs > 1:
        notes.append(f"the model has {model.subgraphs} subgraphs (control flow or decompositions): xc shows the "
                     "main one")
    src = Source(kind="tflite", name=name, sha256=sha256_file(path), inputs=inputs, path=path, notes=notes)
    src.tflite_outputs = out_names
    return src
