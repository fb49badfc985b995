"""Tiny .tflite files built in code with the schema LiteRT ships (no converter): for the metadata, sniffing and
delegate-only custom op tests."""
from __future__ import annotations

import io
import struct
import zipfile

import numpy as np


def tflite_bytes(ops: list[tuple], tensors: list[tuple], inputs: list[int], outputs: list[int],
                 metadata: bytes | None = None) -> bytes:
    """ops: (builtin name or custom name, input tensor ids, output tensor ids, custom options bytes or None);
    tensors: (name, shape, constant array or None). float32 throughout."""
    from ai_edge_litert import schema_py_generated as s
    from ai_edge_litert.tools.flatbuffer_utils import convert_object_to_bytearray
    m = s.ModelT()
    m.version = 3
    m.buffers = [s.BufferT()]                          # buffer 0: the empty sentinel
    sg = s.SubGraphT()
    sg.tensors = []
    for name, shape, value in tensors:
        t = s.TensorT()
        t.name, t.shape, t.type = name.encode(), list(shape), s.TensorType.FLOAT32
        t.buffer = 0
        if value is not None:
            buf = s.BufferT()
            buf.data = np.asarray(value, np.float32).tobytes()
            m.buffers.append(buf)
            t.buffer = len(m.buffers) - 1
        sg.tensors.append(t)
    codes, sg.operators = [], []
    for name, ins, outs, custom_options in ops:
        builtin = getattr(s.BuiltinOperator, name, None)
        key = (builtin, None if builtin is not None else name)
        if key not in codes:
            codes.append(key)
        op = s.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = codes.index(key), list(ins), list(outs)
        if custom_options is not None:
            op.customOptions = list(custom_options)
        sg.operators.append(op)
    m.operatorCodes = []
    for builtin, custom in codes:
        oc = s.OperatorCodeT()
        if builtin is None:
            oc.builtinCode = oc.deprecatedBuiltinCode = s.BuiltinOperator.CUSTOM
            oc.customCode = custom.encode()
        else:
            oc.builtinCode, oc.deprecatedBuiltinCode = builtin, min(builtin, 127)
        oc.version = 1
        m.operatorCodes.append(oc)
    sg.inputs, sg.outputs, sg.name = list(inputs), list(outputs), b"main"
    m.subgraphs = [sg]
    if metadata is not None:
        buf = s.BufferT()
        buf.data = metadata
        m.buffers.append(buf)
        entry = s.MetadataT()
        entry.name, entry.buffer = b"TFLITE_METADATA", len(m.buffers) - 1
        m.metadata = [entry]
    return bytes(convert_object_to_bytearray(m))


def classifier(metadata: bytes | None = None) -> bytes:
    """x[1,4] → ADD(x, bias) → LOGISTIC → probability[1,4]: a four-class 'classifier'."""
    return tflite_bytes(ops=[("ADD", [0, 1], [2], None), ("LOGISTIC", [2], [3], None)],
                        tensors=[("image", [1, 4], None), ("bias", [1, 4], [[0.5, -1.0, 2.0, 0.0]]),
                                 ("logits", [1, 4], None), ("probability", [1, 4], None)],
                        inputs=[0], outputs=[3], metadata=metadata)


def model_metadata(model_name: str, files_by_output: dict[str, list[tuple[str, str, int]]],
                   model_files: list[tuple[str, str, int]] = ()) -> bytes:
    """A ModelMetadata flatbuffer as the TFLite Support metadata writers make it (file identifier M001), written
    field by field after tensorflow_lite_support/metadata/metadata_schema.fbs: files are (name, description,
    AssociatedFileType value)."""
    import flatbuffers
    b = flatbuffers.Builder(0)

    def files_vector(files):
        tables = []
        for name, desc, kind in files:
            n, d = b.CreateString(name), b.CreateString(desc)
            b.StartObject(5)
            b.PrependUOffsetTRelativeSlot(0, n, 0)
            b.PrependUOffsetTRelativeSlot(1, d, 0)
            b.PrependInt8Slot(2, kind, 0)
            tables.append(b.EndObject())
        return vector(tables)

    def vector(tables):
        b.StartVector(4, len(tables), 4)
        for t in reversed(tables):
            b.PrependUOffsetTRelative(t)
        return b.EndVector()

    outputs = []
    for tensor_name, files in files_by_output.items():
        fv, tn = files_vector(files), b.CreateString(tensor_name)
        b.StartObject(7)
        b.PrependUOffsetTRelativeSlot(0, tn, 0)
        b.PrependUOffsetTRelativeSlot(6, fv, 0)
        outputs.append(b.EndObject())
    out_vec = vector(outputs)
    b.StartObject(5)
    b.PrependUOffsetTRelativeSlot(3, out_vec, 0)
    subgraph = b.EndObject()
    subgraphs = vector([subgraph])
    model_fv = files_vector(list(model_files)) if model_files else None
    name, version, author = b.CreateString(model_name), b.CreateString("v2"), b.CreateString("xc tests")
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUOffsetTRelativeSlot(2, version, 0)
    b.PrependUOffsetTRelativeSlot(3, subgraphs, 0)
    b.PrependUOffsetTRelativeSlot(4, author, 0)
    if model_fv is not None:
        b.PrependUOffsetTRelativeSlot(6, model_fv, 0)
    root = b.EndObject()
    b.Finish(root, file_identifier=b"M001")
    return bytes(b.Output())


def with_appended_zip(model: bytes, files: dict[str, str]) -> bytes:
    """The metadata writer's layout: the model's bytes, then a zip of the associated files opened in append mode
    on them (zipfile.ZipFile(..., "a") over a buffer holding the model)."""
    buf = io.BytesIO(model)
    buf.seek(0, io.SEEK_END)
    with zipfile.ZipFile(buf, "a") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return buf.getvalue()


def transpose_conv_params(padding: int = 2, stride_w: int = 2, stride_h: int = 2) -> bytes:
    """Convolution2DTransposeBias's custom options: a TfLiteTransposeConvParams struct (padding, strides) as
    MediaPipe writes it (TfLitePadding: 1 SAME, 2 VALID)."""
    return struct.pack("<iii", padding, stride_w, stride_h) + bytes(8)
