"""TFLite / LiteRT flatbuffer → IR: the main subgraph's operators, one node each, with their tensors' shapes,
dtypes and quantization parameters, read with the schema LiteRT ships (`ai_edge_litert.schema_py_generated`,
zero-copy accessors: nothing is unpacked beyond what is asked for).

A .tflite has no operator names: a node is called by its op and position (`conv_2d_1`), the position the runtime's
own op details use, so a delegate's decision (`_get_ops_details`) maps onto it by index. Constant tensors (those
with data in a buffer) are operands, not nodes. NCHW↔NHWC TRANSPOSEs — LiteRT's converter puts them around every
convolution of a PyTorch model — are layout nodes carrying their permutation.
"""
from __future__ import annotations

from ..ir import COMPUTE, LAYOUT, Graph, Node, TensorInfo

TFLITE_IDENTIFIER = b"TFL3"     # the flatbuffer's file identifier, bytes 4..8
# TensorType enum → numpy-style names (the schema's own order, tensorflow/compiler/mlir/lite/schema/schema.fbs)
# The schema's TensorType enum, by value (public: the weight records of a .tflite read it too).
TENSOR_TYPES = _DTYPES = ["float32", "float16", "int32", "uint8", "int64", "string", "bool", "int16", "complex64", "int8",
           "float64", "complex128", "uint64", "resource", "variant", "uint32", "uint16", "int4", "bfloat16",
           "int2", "uint4", "float8_e4m3fn"]
# Ops that only move or reinterpret data (what op counts and fusion analysis leave aside).
_LAYOUT_OPS = {"TRANSPOSE"}
MAX_QUANT_VALUES = 8      # per-channel scales listed in a node's attributes (the rest are counted)


def is_tflite(head: bytes) -> bool:
    return len(head) >= 8 and head[4:8] == TFLITE_IDENTIFIER


def op_names() -> dict[int, str]:
    from ai_edge_litert.schema_py_generated import BuiltinOperator
    return {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


def node_id(op_name: str, index: int) -> str:
    return f"{op_name.lower()}_{index}"


class TfliteModel:
    """A parsed .tflite: the main subgraph's operators and tensors, as plain data."""

    def __init__(self, data: bytes):
        from ai_edge_litert import schema_py_generated as schema
        if not is_tflite(data[:8]):
            raise ValueError("not a TFLite flatbuffer (no TFL3 identifier)")
        model = schema.Model.GetRootAs(data, 0)
        limit = len(data) // 4           # a vector's entries take 4 bytes at least: a longer one is corrupt

        def bounded(n: int, what: str) -> int:
            if n < 0 or n > limit:
                raise ValueError(f"corrupt flatbuffer: {what} claims {n} entries in a {len(data)}-byte file")
            return n
        if bounded(model.SubgraphsLength(), "subgraphs") == 0:
            raise ValueError("the model has no subgraph")
        bounded(model.BuffersLength(), "buffers")
        self.version = model.Version()
        self.subgraphs = model.SubgraphsLength()
        names = op_names()
        codes = []
        for i in range(bounded(model.OperatorCodesLength(), "operator codes")):
            oc = model.OperatorCodes(i)
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            custom = oc.CustomCode()
            codes.append(custom.decode("utf-8", "replace") if custom else names.get(code, f"BUILTIN_{code}"))
        self.custom = {i for i in range(model.OperatorCodesLength()) if model.OperatorCodes(i).CustomCode()}
        sg = model.Subgraphs(0)
        self.name = (sg.Name() or b"main").decode("utf-8", "replace")
        self.tensors = []
        for t in range(bounded(sg.TensorsLength(), "tensors")):
            tensor = sg.Tensors(t)
            buf = model.Buffers(tensor.Buffer()) if tensor.Buffer() < model.BuffersLength() else None
            constant = buf is not None and (buf.DataLength() > 0 or buf.Offset() > 1)
            q = tensor.Quantization()
            quant = None
            if q is not None and bounded(q.ScaleLength(), "scales"):
                scales = [float(q.Scale(k)) for k in range(q.ScaleLength())]
                zps = [int(q.ZeroPoint(k)) for k in range(q.ZeroPointLength())]
                quant = {"scale": scales[:MAX_QUANT_VALUES], "zero_point": zps[:MAX_QUANT_VALUES],
                         "channels": len(scales), "axis": int(q.QuantizedDimension())}
            dtype = _DTYPES[tensor.Type()] if tensor.Type() < len(_DTYPES) else f"type{tensor.Type()}"
            shape = [int(tensor.Shape(k)) for k in range(bounded(tensor.ShapeLength(), "a shape"))]
            sig = [int(tensor.ShapeSignature(k)) for k in range(bounded(tensor.ShapeSignatureLength(), "a shape"))]
            if sig and len(sig) == len(shape):
                shape = [None if s < 0 else d for d, s in zip(shape, sig)]
            self.tensors.append({"name": (tensor.Name() or b"").decode("utf-8", "replace") or f"t{t}",
                                 "shape": shape, "dtype": dtype, "constant": constant, "quant": quant,
                                 "value": _small_int_value(buf, dtype, shape) if constant else None})
        self.inputs = self._indices(sg.Inputs, bounded(sg.InputsLength(), "inputs"), "the graph")
        self.outputs = self._indices(sg.Outputs, bounded(sg.OutputsLength(), "outputs"), "the graph")
        # The first signature of the main subgraph (what apps call the inputs and outputs): {key: tensor index}.
        self.signature = None
        if bounded(model.SignatureDefsLength(), "signatures") and model.SignatureDefs(0).SubgraphIndex() == 0:
            sig = model.SignatureDefs(0)
            self.signature = {
                "inputs": {sig.Inputs(k).Name().decode("utf-8", "replace"): int(sig.Inputs(k).TensorIndex())
                           for k in range(bounded(sig.InputsLength(), "signature inputs"))},
                "outputs": {sig.Outputs(k).Name().decode("utf-8", "replace"): int(sig.Outputs(k).TensorIndex())
                            for k in range(bounded(sig.OutputsLength(), "signature outputs"))}}
        self.ops = []
        for i in range(bounded(sg.OperatorsLength(), "operators")):
            op = sg.Operators(i)
            if not 0 <= op.OpcodeIndex() < len(codes):
                raise ValueError(f"corrupt flatbuffer: operator {i} has opcode {op.OpcodeIndex()} of {len(codes)}")
            self.ops.append({"index": i, "op": codes[op.OpcodeIndex()], "custom": op.OpcodeIndex() in self.custom,
                             "inputs": self._indices(op.Inputs, bounded(op.InputsLength(), "inputs"), i),
                             "outputs": self._indices(op.Outputs, bounded(op.OutputsLength(), "outputs"), i),
                             "options": _options(op)})

    def _indices(self, get, n: int, where) -> list[int]:
        out = [int(get(k)) for k in range(n)]
        bad = [t for t in out if t >= len(self.tensors) or t < -1]
        if bad:
            raise ValueError(f"corrupt flatbuffer: {where if isinstance(where, str) else f'operator {where}'} "
                             f"names tensor {bad[0]} of {len(self.tensors)}")
        return out

    def io_names(self) -> tuple[list[str], list[str]]:
        """Names of the inputs and outputs, in the main subgraph's order: the signature's keys where it has them,
        else the tensors' names; made unique."""
        keys_in = {i: k for k, i in (self.signature or {}).get("inputs", {}).items()}
        keys_out = {i: k for k, i in (self.signature or {}).get("outputs", {}).items()}
        return (_unique([keys_in.get(i, self.tensors[i]["name"]) for i in self.inputs]),
                _unique([keys_out.get(i, self.tensors[i]["name"]) for i in self.outputs]))

    def tensor(self, index: int) -> TensorInfo:
        t = self.tensors[index]
        return TensorInfo(t["name"], list(t["shape"]), t["dtype"])

    def graph(self, name: str, stage: str) -> Graph:
        g = Graph(name=name, stage=stage)
        g.inputs = [self.tensor(i) for i in self.inputs]
        g.outputs = [self.tensor(i) for i in self.outputs]
        for op in self.ops:
            ins = [i for i in op["inputs"] if i >= 0]
            attrs = dict(op["options"])
            consts = {f"input{k}": self.tensors[i]["value"] for k, i in enumerate(ins)
                      if self.tensors[i]["value"] is not None}
            if op["op"] == "TRANSPOSE" and len(ins) > 1 and self.tensors[ins[1]]["value"] is not None:
                attrs["perm"] = self.tensors[ins[1]]["value"]
            elif consts:
                attrs["constant_operands"] = consts
            quant = {self.tensors[i]["name"]: self.tensors[i]["quant"] for i in ins + op["outputs"]
                     if self.tensors[i]["quant"]}
            if quant:
                attrs["quantization"] = quant
            weights = sorted({self.tensors[i]["dtype"] for i in ins if self.tensors[i]["constant"]
                              and self.tensors[i]["dtype"] not in ("int32", "int64")})
            if weights:
                attrs["weight_dtypes"] = weights
            if op["custom"]:
                attrs["custom_op"] = True
            g.nodes.append(Node(id=node_id(op["op"], op["index"]), op_type=op["op"], domain="tflite",
                                kind=LAYOUT if op["op"] in _LAYOUT_OPS else COMPUTE,
                                inputs=[self.tensor(i) for i in ins if not self.tensors[i]["constant"]],
                                outputs=[self.tensor(i) for i in op["outputs"] if i >= 0], attributes=attrs))
        return g


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


def _small_int_value(buf, dtype: str, shape: list) -> list | int | None:
    """A constant int32/int64 operand with a handful of values (a permutation, an axis, a shape), as a list."""
    import numpy as np
    if dtype not in ("int32", "int64") or buf is None or buf.DataLength() == 0 or buf.DataLength() > 64:
        return None
    values = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=dtype).tolist()
    return values[0] if not shape and len(values) == 1 else values


def _options(op) -> dict:
    """The op's builtin options as plain scalars (fused activation, padding, strides, axes…)."""
    from ai_edge_litert import schema_py_generated as schema
    try:
        t = schema.OperatorT.InitFromObj(op)
    except Exception:  # noqa: BLE001 — options of an op this schema does not know: the op is still listed
        return {}
    opts = getattr(t, "builtinOptions", None)
    out = {}
    if opts is not None:
        for k, v in vars(opts).items():
            if isinstance(v, (bool, int, float, str)):
                out[k] = v
    if out.get("fusedActivationFunction") is not None:
        names = {v: k for k, v in vars(schema.ActivationFunctionType).items() if isinstance(v, int)}
        out["fusedActivationFunction"] = names.get(out["fusedActivationFunction"], out["fusedActivationFunction"])
    if "padding" in out:
        out["padding"] = {0: "SAME", 1: "VALID"}.get(out["padding"], out["padding"])
    return out


def tflite_graph(data: bytes, name: str, stage: str) -> Graph:
    return TfliteModel(data).graph(name, stage)


# -- TFLite Support metadata ----------------------------------------------------------------------------------
# A .tflite written by the TFLite Support metadata writers (MediaPipe, Model Maker) names a `TFLITE_METADATA` entry
# in the model's `metadata` list: a buffer holding a ModelMetadata flatbuffer (file identifier "M001"), and the
# files it associates (labels, vocabularies) are zipped and appended after the model's flatbuffer. The table layouts
# below are tensorflow/tflite-support, tensorflow_lite_support/metadata/metadata_schema.fbs (schema 1.1.0): no
# generated module of that schema ships in the wheels xc installs, so fields are read by their slot number.
METADATA_NAME = "TFLITE_METADATA"
# AssociatedFileType, in the schema's order.
ASSOCIATED_FILE_TYPES = ["UNKNOWN", "DESCRIPTIONS", "TENSOR_AXIS_LABELS", "TENSOR_VALUE_LABELS",
                         "TENSOR_AXIS_SCORE_CALIBRATION", "VOCABULARY", "SCANN_INDEX_FILE"]
MAX_METADATA_FILES = 64       # associated files listed (a model that declares more is counted, not listed)
MAX_METADATA_TEXT = 500       # characters kept of a name, description, author or license


class _Table:
    """A flatbuffer table read by field slot (no generated code), every offset checked against the buffer."""

    def __init__(self, buf: bytes, pos: int):
        from flatbuffers.table import Table
        if not 0 <= pos < len(buf):
            raise ValueError("a metadata table points outside its buffer")
        self.buf, self.tab = buf, Table(buf, pos)

    def _field(self, slot: int) -> int:
        return self.tab.Offset(4 + 2 * slot)

    def string(self, slot: int) -> str | None:
        o = self._field(slot)
        if not o:
            return None
        return self.tab.String(o + self.tab.Pos).decode("utf-8", "replace")[:MAX_METADATA_TEXT]

    def byte(self, slot: int) -> int:
        from flatbuffers import number_types
        o = self._field(slot)
        return int(self.tab.Get(number_types.Int8Flags, o + self.tab.Pos)) if o else 0

    def tables(self, slot: int) -> list["_Table"]:
        o = self._field(slot)
        if not o:
            return []
        n = self.tab.VectorLen(o)
        if n < 0 or n > len(self.buf) // 4:
            raise ValueError(f"a metadata vector claims {n} entries in a {len(self.buf)}-byte buffer")
        start = self.tab.Vector(o)
        return [_Table(self.buf, self.tab.Indirect(start + 4 * k)) for k in range(n)]


def _associated(table: _Table, slot: int, owner: str) -> list[dict]:
    out = []
    for f in table.tables(slot):
        kind = f.byte(2)
        out.append({"name": f.string(0) or "", "description": f.string(1) or "",
                    "type": ASSOCIATED_FILE_TYPES[kind] if 0 <= kind < len(ASSOCIATED_FILE_TYPES) else f"type{kind}",
                    "locale": f.string(3) or "", "owner": owner})
    return out


def read_model_metadata(data: bytes) -> dict | None:
    """The model's TFLite Support metadata (name, description, version, author, license and every associated file
    with the tensor it belongs to), or None when the model has no `TFLITE_METADATA` entry. Raises ValueError on a
    damaged metadata buffer."""
    from ai_edge_litert import schema_py_generated as schema
    model = schema.Model.GetRootAs(data, 0)
    for i in range(min(model.MetadataLength(), len(data) // 4)):
        entry = model.Metadata(i)
        if (entry.Name() or b"") != METADATA_NAME.encode():
            continue
        if entry.Buffer() >= model.BuffersLength():
            raise ValueError(f"{METADATA_NAME} names buffer {entry.Buffer()} of {model.BuffersLength()}")
        buf = model.Buffers(entry.Buffer())
        if buf.DataLength():
            meta = buf.DataAsNumpy().tobytes()
        elif buf.Offset() > 1 and buf.Offset() + buf.Size() <= len(data):   # a >2 GB model keeps buffers outside
            meta = data[buf.Offset():buf.Offset() + buf.Size()]
        else:
            raise ValueError(f"{METADATA_NAME} buffer is empty")
        return _parse_model_metadata(meta, model)
    return None


def _parse_model_metadata(meta: bytes, model) -> dict:
    import struct
    if len(meta) < 8:
        raise ValueError(f"{METADATA_NAME} buffer is {len(meta)} bytes")
    (root_pos,) = struct.unpack_from("<I", meta, 0)
    root = _Table(meta, root_pos)
    sg = model.Subgraphs(0) if model.SubgraphsLength() else None
    files = _associated(root, 6, "model")
    for k, sub in enumerate(root.tables(3)):
        files += _associated(sub, 4, f"subgraph {k}")
        for slot, side, count in ((2, "input", sg.InputsLength() if sg else 0),
                                  (3, "output", sg.OutputsLength() if sg else 0)):
            for j, tensor in enumerate(sub.tables(slot)):
                label = tensor.string(0) or f"{side} {j}"
                files += _associated(tensor, 6, f"{side} {label}" if j < max(count, 1) else f"{side} {j}")
    try:
        identifier = meta[4:8].decode("ascii")
    except UnicodeDecodeError:
        identifier = ""
    return {"name": root.string(0) or "", "description": root.string(1) or "", "version": root.string(2) or "",
            "author": root.string(4) or "", "license": root.string(5) or "",
            "min_parser_version": root.string(7) or "", "identifier": identifier,
            "associated_files": files[:MAX_METADATA_FILES], "associated_files_declared": len(files)}
