"""A LiteRT / TensorFlow Lite model (.tflite) as a source, recognised by its flatbuffer identifier (TFL3). It is read
into the IR (readers/tflite.py, which refuses vectors longer than the file can hold and tensor indices out of
range) and run by the LiteRT targets as it is; the reference is LiteRT's interpreter without delegates. Nothing
else compiles it: there is no ONNX or PyTorch program to give the other targets.

A .tflite written with TFLite Support metadata (MediaPipe, Model Maker) carries a `TFLITE_METADATA` buffer and a zip
of its associated files (labels, vocabularies) appended after the flatbuffer; both are read into the source's
`metadata` (names, types, and the first lines of each text file, read from the zip with bounds — nothing is
extracted). The runtimes ignore what follows the flatbuffer."""
from __future__ import annotations

import os

from ..errors import XcInputError
from ..limits import Limits
from . import safe_zip
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
             "delegates (tflite-reference; with XNNPACK only when a custom op of the model needs it)"]
    if model.subgraphs > 1:
        notes.append(f"the model has {model.subgraphs} subgraphs (control flow or decompositions): xc shows the "
                     "main one")
    src = Source(kind="tflite", name=name, sha256=sha256_file(path), inputs=inputs, path=path, notes=notes)
    src.tflite_outputs = out_names
    src.metadata = model_metadata(path, data, limits or Limits.from_env())
    if src.metadata:
        notes.append(metadata_note(src.metadata))
    return src


# What is read of an associated text file (labels, vocabulary): its line count and first lines, from files up to
# this size; a larger one is listed with its size only.
MAX_TEXT_FILE_BYTES = 4 << 20
MAX_TEXT_TOTAL_BYTES = 16 << 20     # what all of them may add up to (a zip of many vocabularies is listed, not read)
FIRST_LINES = 10
MAX_LINE_CHARS = 80
UNREAD = ""        # _zipped_files' key for why the zip could not be read (no file has an empty name)


def model_metadata(path: str, data: bytes, limits: Limits) -> dict:
    """The .tflite's TFLite Support metadata and the files zipped after its flatbuffer, as report data ({} when it
    has neither). Each associated file: its name, type and owner (the tensor it labels) from the metadata, whether
    the zip holds it, its size, and for text files (labels, vocabularies) the line count and first lines."""
    from ..readers.tflite import read_model_metadata
    name = os.path.basename(path)
    out: dict = {}
    try:
        meta = read_model_metadata(data)
    except Exception as e:  # noqa: BLE001 — damaged metadata: the model itself still runs; said in the report
        meta, out["metadata_error"] = None, f"{type(e).__name__}: {str(e)[:160]}"
    if meta:
        out.update({k: v for k, v in meta.items() if v not in ("", None)})
    zipped = _zipped_files(path, name, limits) if safe_zip.is_zip(path) else None
    if zipped is None and not meta:
        return out
    files = {f["name"]: dict(f) for f in (meta or {}).get("associated_files", [])}
    if zipped is not None and UNREAD in zipped:
        out["appended_zip"] = {"files": 0, "error": zipped.pop(UNREAD)}
    elif zipped is not None:
        out["appended_zip"] = {"files": len(zipped)}
    if zipped:
        for fname, facts in zipped.items():
            entry = files.setdefault(fname, {"name": fname, "type": "UNKNOWN", "owner": "", "description": "",
                                             "locale": ""})
            entry.update(facts)
    for entry in files.values():
        entry.setdefault("in_zip", False)
    out["associated_files"] = list(files.values())
    out["evidence"] = "reported"
    return out


def _zipped_files(path: str, name: str, limits: Limits) -> dict[str, dict]:
    """{file name: {in_zip, bytes, lines, first_lines}} of the zip appended after the flatbuffer, read in memory
    with safe_zip's bounds; text files only are read, and only up to MAX_TEXT_FILE_BYTES."""
    out, budget = {}, MAX_TEXT_TOTAL_BYTES
    try:
        with safe_zip.open_zip(path, f"{name} (its appended zip of associated files)", limits) as z:
            for info in z.infolist()[:200]:
                if info.is_dir():
                    continue
                facts = {"in_zip": True, "bytes": int(info.file_size)}
                if info.file_size <= min(MAX_TEXT_FILE_BYTES, budget) and _looks_textual(info.filename):
                    budget -= info.file_size
                    text = safe_zip.read_member(z, info, name, limits).decode("utf-8", "replace")
                    lines = text.splitlines()
                    while lines and not lines[-1].strip():
                        lines.pop()
                    facts["lines"] = len(lines)
                    facts["first_lines"] = [line[:MAX_LINE_CHARS] for line in lines[:FIRST_LINES]]
                out[info.filename] = facts
    except XcInputError as e:
        # A damaged, oversized or hostile zip of labels does not make the model unreadable: said, with why.
        return {UNREAD: str(e)[:200]}
    return out


def _looks_textual(filename: str) -> bool:
    return filename.lower().endswith((".txt", ".csv", ".json", ".vocab", ".labels", ".pbtxt", ".md"))


def metadata_note(meta: dict) -> str:
    """One line for the source's notes (the dashboard shows them under Inputs), in the CLI's and Markdown's words."""
    from .facts import source_fact_lines
    lines = source_fact_lines({"source": {"metadata": meta}})
    return "; ".join(line.strip() for line in lines) + " — carried after the flatbuffer; the runtimes ignore it"
