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
    in_names, out_names = _signature_names(data, model)
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


def _signature_names(data: bytes, model) -> tuple[list[str], list[str]]:
    """Input and output names: the first signature's keys where the model has one (what apps call them), else the
    tensors' names — in the main subgraph's order."""
    from ai_edge_litert import schema_py_generated as schema
    m = schema.Model.GetRootAs(data, 0)
    ins = [model.tensors[i]["name"] for i in model.inputs]
    outs = [model.tensors[i]["name"] for i in model.outputs]
    if m.SignatureDefsLength() and m.SignatureDefs(0).SubgraphIndex() == 0:
        sig = m.SignatureDefs(0)
        by_index_in = {sig.Inputs(k).TensorIndex(): sig.Inputs(k).Name().decode("utf-8", "replace")
                       for k in range(min(sig.InputsLength(), len(data) // 4))}
        by_index_out = {sig.Outputs(k).TensorIndex(): sig.Outputs(k).Name().decode("utf-8", "replace")
                        for k in range(min(sig.OutputsLength(), len(data) // 4))}
        ins = [by_index_in.get(i, n) for i, n in zip(model.inputs, ins)]
        outs = [by_index_out.get(i, n) for i, n in zip(model.outputs, outs)]
    return _unique(ins), _unique(outs)


def _unique(names: list[str]) -> list[str]:
    seen, out = set(), []
    for n in names:
        base, k = n, 1
        while n in seen:
            k += 1
            n = f"{base}_{k}"
        seen.add(n)
        out.append(n)
    return out
