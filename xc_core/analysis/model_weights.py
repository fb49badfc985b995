"""Weight records: one per weight tensor of a captured model — its name, the name the captured graph reads it by,
the module that owns it, shape, dtype, a hash of its values and their L2 norm. The model diff compares two runs'
records: an equal hash is an unchanged tensor; two norms bound how much a changed one moved when the values are
not at hand.

The hash is SHA-256 over the tensor's values as contiguous little-endian bytes in its own dtype (bf16 and other
dtypes numpy lacks through a same-width integer view), so a record written from a .pt2 and one from an ONNX of the
same model hash alike. Each tensor is hashed where it lies (a buffer view, no copy) and its norm is taken in float64
a chunk at a time: a model of a few GB is never copied whole. Record dicts are what the report's capture.weights
holds (report/types.py WeightRecord).
"""
from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Sequence

import numpy as np

# Elements converted to float64 at a time for the norm: 8 MB of float64, whatever the tensor's size.
_NORM_CHUNK = 1 << 20


def records_from_program(ep, graph=None) -> list[dict]:
    """The parameters, buffers and lifted tensor constants of a torch.export ExportedProgram, in the order of its
    signature. `graph` (the captured graph in xc's IR, or its NodeRecords) gives each tensor's owner: the module of
    the first node that reads it."""
    from torch.export.graph_signature import InputKind
    owners = first_consumer_modules(graph.nodes if graph is not None and hasattr(graph, "nodes") else graph or [])
    kinds = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    out = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in kinds or spec.target is None:
            continue
        # A persistent buffer is in the state dict, a non-persistent one among the constants.
        tensor = ep.state_dict.get(spec.target) if spec.kind != InputKind.CONSTANT_TENSOR else None
        if tensor is None:
            tensor = ep.constants.get(spec.target)
        if tensor is None:
            continue
        placeholder = spec.arg.name
        out.append(_torch_record(spec.target, placeholder, tensor, owners.get(placeholder)))
    return out


def records_from_onnx(model, graph=None) -> list[dict]:
    """An ONNX model's initializers, then the tensors of its Constant nodes (by their output's name: the name node
    inputs use), each tensor's data read once. External data must be loaded into `model` already. `graph` as in
    `records_from_program`."""
    from onnx import AttributeProto
    owners = first_consumer_modules(graph.nodes if graph is not None and hasattr(graph, "nodes") else graph or [])
    out = [_onnx_record(init, init.name, owners.get(init.name)) for init in model.graph.initializer]
    for node in model.graph.node:
        if node.op_type != "Constant" or not node.output:
            continue
        for attr in node.attribute:
            # value_float(s) / value_int(s) are attributes the graph shows already; only a tensor value is hidden.
            if attr.name == "value" and attr.type == AttributeProto.TENSOR:
                out.append(_onnx_record(attr.t, node.output[0], owners.get(node.output[0])))
    return out


def records_from_tflite(data: bytes, tensor_types: Sequence[str]) -> list[dict]:
    """A .tflite's constant tensors of its main subgraph (those whose data sits in a buffer inside the file), by
    tensor name. TFLite graphs carry no module paths: the owner is unknown (None). `tensor_types`: the schema's
    TensorType names by value (readers/tflite.py's table — passed in, as analysis does not import readers)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    sg = model.Subgraphs(0)
    out = []
    for t in range(sg.TensorsLength()):
        tensor = sg.Tensors(t)
        if tensor.Buffer() >= model.BuffersLength():
            continue
        buf = model.Buffers(tensor.Buffer())
        if buf.DataLength() == 0:       # no data, or data past the flatbuffer (a >2 GB model): not read here
            continue
        dtype = tensor_types[tensor.Type()] if tensor.Type() < len(tensor_types) else f"type{tensor.Type()}"
        raw = buf.DataAsNumpy()         # a uint8 view of the file's bytes (little-endian by the format)
        name = (tensor.Name() or b"").decode("utf-8", "replace") or f"t{t}"
        shape = [int(tensor.Shape(k)) for k in range(tensor.ShapeLength())]
        try:
            values = raw.view(np.dtype(dtype))
        except (TypeError, ValueError):  # a dtype numpy lacks (int4 packed, float16 as raw …): hashed, no norm
            values = None
        out.append(_record(name, name, None, shape, dtype, raw, values if _numeric(values) else None))
    return out


def first_consumer_modules(nodes) -> dict[str, str]:
    """{tensor name: the module path of the first node, in graph order, that reads it and has a module path}."""
    owners: dict[str, str] = {}
    for node in nodes:
        if node.module_path is None:
            continue
        for t in node.inputs:
            owners.setdefault(t.name, node.module_path)
    return owners


def owner_from_name(name: str) -> str:
    """A weight's module read off its dotted name ('blocks.0.conv.weight' → 'blocks.0.conv'; '' for the root)."""
    return name.rsplit(".", 1)[0] if "." in name else ""


# ------------------------------------------------------------------------------------------------ records ----
def _torch_record(name: str, graph_name: str, tensor, owner: str | None) -> dict:
    import torch
    t = tensor.detach()
    if t.is_quantized:
        t = t.int_repr()                # the stored integers; scale and zero point are not weights here
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.cpu().contiguous()            # a no-op for the contiguous CPU tensors a captured program holds
    dtype = str(tensor.dtype).replace("torch.", "")
    try:
        flat = t.reshape(-1).numpy()
        numeric = t.dtype != torch.bool and not t.dtype.is_complex
        chunks = flat if numeric else None
    except TypeError:                   # bf16, float8 …: numpy has no such dtype; hash the same bytes as integers
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
        flat = t.reshape(-1).view(width).numpy()
        chunks = _TorchChunks(t.reshape(-1))
    return _record(name, graph_name, owner if owner is not None else owner_from_name(name), list(tensor.shape),
                   dtype, flat, chunks)


class _TorchChunks:
    """A flat torch tensor whose dtype numpy lacks, sliced and converted to float64 numpy a chunk at a time."""

    def __init__(self, flat):
        self.flat, self.size = flat, flat.numel()

    def __getitem__(self, s: slice):
        import torch
        return self.flat[s].to(torch.float64).numpy()


def _onnx_record(tensor, graph_name: str, owner: str | None) -> dict:
    from onnx import TensorProto, helper, numpy_helper
    shape = [int(d) for d in tensor.dims]
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, TypeError, ValueError):
        dtype = None
    name = tensor.name or graph_name
    if tensor.data_location == TensorProto.EXTERNAL:
        raise ValueError(f"{name}: external data not loaded")
    if tensor.data_type == TensorProto.STRING:
        # Strings have no byte layout of their own: each one's length, then its bytes.
        digest = hashlib.sha256()
        for s in tensor.string_data:
            digest.update(len(s).to_bytes(8, "little") + s)
        return _done(name, graph_name, owner, shape, "string", digest.hexdigest(), None)
    data = tensor.raw_data if tensor.HasField("raw_data") else b""    # each read of the field is a copy: one
    if data and dtype is not None and dtype.itemsize and len(data) == math.prod(shape) * dtype.itemsize:
        raw = np.frombuffer(data, dtype=np.uint8)    # ONNX raw data is little-endian by the spec
        values = raw.view(dtype)
    else:
        values = numpy_helper.to_array(tensor)
        dtype = values.dtype
        raw = _little_endian(values.reshape(-1))
    dtype_name = dtype.name if dtype is not None else str(tensor.data_type)
    return _record(name, graph_name, owner if owner is not None else owner_from_name(name), shape, dtype_name, raw,
                   values.reshape(-1) if _numeric(values) else None)


def _numeric(values) -> bool:
    return values is not None and values.dtype != np.bool_ and values.dtype.kind not in "OSUVc"


def _little_endian(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    return a


def _record(name: str, graph_name: str, owner: str | None, shape: list, dtype: str, data: np.ndarray,
            numeric) -> dict:
    """`data`: the values' bytes as a contiguous array (hashed in place); `numeric`: what the norm is taken over,
    sliceable into chunks that convert to float64 (None: not numeric)."""
    data = _little_endian(data)
    digest = hashlib.sha256(memoryview(data).cast("B")).hexdigest() if data.size else hashlib.sha256().hexdigest()
    return _done(name, graph_name, owner, shape, dtype, digest, _l2(numeric) if numeric is not None else None)


def _done(name, graph_name, owner, shape, dtype, digest, l2) -> dict:
    return {"name": name, "graph_name": graph_name, "module_path": owner, "shape": shape, "dtype": dtype,
            "numel": math.prod(shape), "sha256": digest, "l2": l2}


def _l2(values) -> float | None:
    """The float64 L2 norm of a flat array, a chunk at a time; None when it is not finite (JSON has no inf/NaN, and
    such a norm bounds nothing)."""
    size = values.size
    total = 0.0
    for start in range(0, size, _NORM_CHUNK):
        chunk = np.asarray(values[start:start + _NORM_CHUNK], dtype=np.float64)
        total += float(np.dot(chunk, chunk))
    norm = math.sqrt(total)
    return norm if math.isfinite(norm) else None
