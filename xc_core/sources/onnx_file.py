"""ONNX sources: parsed, checked with onnx.checker, inputs resolved (symbolic dims get documented defaults)."""
from __future__ import annotations

import os
import re

from ..errors import XcInputError, hide_paths
from .spec import InputSpec, ShapeOverrides, Source

# Provisional values of symbolic dims until xc_core.inputs.shapes resolves them (by name, role and probing).
DEFAULT_BATCH = 1
DEFAULT_DIM = 16

ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 16: "bfloat16"}


def load_onnx(path: str, shapes: "ShapeOverrides | None" = None, limits=None, zipped: str | None = None) -> Source:
    """`zipped` names the zip the model was unpacked from (load_onnx_zip), for the words of a refusal."""
    import onnx
    name = os.path.basename(path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError / RuntimeWarning subclasses
        raise XcInputError(f"{name}: not a valid ONNX protobuf ({type(e).__name__}); "
                           "accepted: an ONNX model file saved by onnx.save or torch.onnx.export") from None
    _check_text_fields(model.graph, name)
    if any(not isinstance(o.domain, str) for o in model.opset_import):
        raise XcInputError(f"{name}: an opset domain is not valid UTF-8; ONNX names must be UTF-8 text")
    if _uses_external_data(model):
        # Weights beside the file (model.onnx.data): each data file inside the model's folder and within the
        # file-size limit before onnx reads it.
        _check_external_files(model, os.path.dirname(os.path.abspath(path)), name, limits, zipped)
        try:
            from onnx.external_data_helper import load_external_data_for_model
            load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
        except Exception as e:
            said = (f"{name}: the model keeps its weights in external data that could not be read "
                    f"({type(e).__name__}: {hide_paths(str(e).splitlines()[0])[:120] if str(e) else ''})")
            raise XcInputError(f"{said}; put the data file beside the model, or save the model as one file",
                               dashboard=f"{said}; upload the model with its data files as the exporter wrote them, "
                                         "or save the model as one file") from None
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        first = hide_paths(str(e).strip().splitlines()[0]) if str(e).strip() else type(e).__name__
        raise XcInputError(f"{name}: onnx.checker rejected the model: {first}") from None
    _check_fields(model, name)
    if not model.graph.node:
        raise XcInputError(f"{name}: the ONNX graph has no nodes")
    from ..paths import sha256_file
    return Source(kind="onnx", name=name, sha256=sha256_file(path), inputs=onnx_input_specs(model, shapes),
                  onnx_model=model, path=path, value_hints=onnx_branch_inputs(model))


def _check_text_fields(graph, name: str, where: str = "the graph") -> None:
    """protobuf hands back `bytes` for a string field that is not valid UTF-8; every name must be text before
    anything compares, prints or serialises it."""
    def bad(x) -> bool:
        return not isinstance(x, str)

    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        if bad(vi.name):
            raise XcInputError(f"{name}: a value in {where} has a name that is not valid UTF-8 ({vi.name[:40]!r}); "
                               "ONNX names must be UTF-8 text")
    for t in list(graph.initializer) + list(graph.sparse_initializer):
        if bad(getattr(t, "name", "")):
            raise XcInputError(f"{name}: an initializer in {where} has a name that is not valid UTF-8; ONNX names "
                               "must be UTF-8 text")
    for i, node in enumerate(graph.node):
        fields = [node.name, node.op_type, node.domain, *node.input, *node.output, *(a.name for a in node.attribute)]
        if any(bad(f) for f in fields):
            raise XcInputError(f"{name}: node #{i} in {where} ({node.op_type if not bad(node.op_type) else '?'}) "
                               "has a name, type or tensor name that is not valid UTF-8; ONNX names must be UTF-8 "
                               "text")
        for a in node.attribute:
            for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _check_text_fields(sub, name, f"a subgraph of node #{i}")


def _check_fields(model, name: str) -> None:
    """Every text field of the model is text and every tensor type one ONNX defines, anywhere in it (doc strings,
    dim names, metadata, attributes, subgraphs): a bit flip there passes onnx.checker, and a name that is bytes or
    a data_type of 9999 would otherwise fail deep inside capture or the report, worded as xc's bug."""
    from google.protobuf.descriptor import FieldDescriptor
    from onnx import helper
    known = set(helper.get_all_tensor_dtypes())
    string, message = FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE
    stack = [(model, "model")]
    while stack:
        msg, where = stack.pop()
        kind = msg.DESCRIPTOR.full_name
        if kind == "onnx.TensorProto":
            if msg.data_type not in known:
                raise XcInputError(f"{name}: the tensor at {where} has data_type {msg.data_type}, which is no ONNX "
                                   "tensor type; accepted: the types of onnx.TensorProto.DataType")
            # Its text fields only: ListFields would copy the weights out of raw_data.
            fields = [(msg.DESCRIPTOR.fields_by_name[f], getattr(msg, f))
                      for f in ("name", "doc_string", "external_data", "metadata_props")
                      if f in msg.DESCRIPTOR.fields_by_name]
        else:
            if kind == "onnx.TypeProto.Tensor" and msg.elem_type and msg.elem_type not in known:
                raise XcInputError(f"{name}: the type at {where} has elem_type {msg.elem_type}, which is no ONNX "
                                   "tensor type; accepted: the types of onnx.TensorProto.DataType")
            fields = msg.ListFields()
        for field, value in fields:
            if field.type == string:
                for i, text in enumerate(value if _repeated(field) else [value]):
                    if not isinstance(text, str):
                        at = f"{where}.{field.name}" + (f"[{i}]" if _repeated(field) else "")
                        raise XcInputError(f"{name}: the text at {at} is not valid UTF-8; ONNX names and text "
                                           "must be UTF-8")
            elif field.type == message:
                if _repeated(field):
                    stack.extend((m, f"{where}.{field.name}[{i}]") for i, m in enumerate(value))
                else:
                    stack.append((value, f"{where}.{field.name}"))


def _repeated(field) -> bool:
    # protobuf 5+ says is_repeated; older versions only have label
    rep = getattr(field, "is_repeated", None)
    return rep if rep is not None else field.label == field.LABEL_REPEATED


def onnx_input_specs(model, shapes: "ShapeOverrides | None" = None) -> list[InputSpec]:
    """Declared inputs. Symbolic or unknown dims are named in `dim_names` (the model's dim_param, or "?") and hold
    a provisional value until `inputs.shapes.resolve_inputs` picks one. `shapes` is used only for inputs that
    declare no shape at all (their rank is unknown)."""
    shapes = shapes or {}
    initializers = {i.name for i in model.graph.initializer}
    int_bounds = onnx_index_bounds(model)
    specs = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        dtype = ONNX_DTYPES.get(tt.elem_type) if vi.type.HasField("tensor_type") else None
        if dtype is None:
            what = vi.type.WhichOneof("value") or "unknown"
            raise XcInputError(f"input '{vi.name}' is of type {what}"
                               + (f" (elem_type {tt.elem_type})" if what == "tensor_type" else "")
                               + "; accepted: float, integer and bool tensors")
        low = high = None
        if dtype.startswith(("int", "uint")):
            low, high = (0, int_bounds[vi.name]) if vi.name in int_bounds else (None, None)
        if not tt.HasField("shape"):
            if vi.name not in shapes:
                raise XcInputError(f"input '{vi.name}' declares no shape (not even its rank); give its shape",
                                   fix="shapes", inputs=[vi.name])
            shape, given = shapes[vi.name]
            specs.append(InputSpec(vi.name, list(shape), given or dtype, low, high, "shape given by the user"))
            continue
        shape, labels = [], []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
                labels.append(None)
            else:
                labels.append(d.dim_param or "?")
                shape.append(DEFAULT_BATCH if i == 0 else DEFAULT_DIM)
        specs.append(InputSpec(vi.name, shape, dtype, low, high, "", dim_names=tuple(labels) if any(labels) else ()))
    return specs


def onnx_index_bounds(model) -> dict[str, int]:
    """Integer inputs that index a table (Gather on an initializer: an embedding's vocabulary), and its size — ids
    outside it fail at the Gather. Follows Cast / Unsqueeze / Reshape / Flatten / Squeeze between the two."""
    tables = {i.name: list(i.dims) for i in model.graph.initializer}
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    bounds: dict[str, int] = {}
    for vi in model.graph.input:
        frontier, seen = [vi.name], set()
        for _ in range(4):
            nxt = []
            for t in frontier:
                for node in consumers.get(t, []):
                    if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == t \
                            and node.input[0] in tables:
                        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                        dims = tables[node.input[0]]
                        if dims and -len(dims) <= axis < len(dims):
                            rows = int(dims[axis])
                            bounds[vi.name] = min(bounds.get(vi.name, rows), rows)
                    elif node.op_type in ("Cast", "Unsqueeze", "Reshape", "Flatten", "Squeeze") \
                            and node.input[0] == t and node.name not in seen:
                        seen.add(node.name)
                        nxt.extend(node.output)
            frontier = nxt
    return bounds


def onnx_branch_inputs(model) -> dict[str, str]:
    """Scalar-ish inputs that reach the condition of an If within a few nodes: their value picks a branch, so a
    random draw decides which half of the model is analysed."""
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for t in node.input:
            consumers.setdefault(t, []).append(node)
    out = {}
    for vi in model.graph.input:
        frontier = [vi.name]
        for _ in range(4):
            nxt = []
            for t in frontier:
                for node in consumers.get(t, []):
                    if node.op_type == "If" and node.input and node.input[0] == t:
                        out[vi.name] = (f"its value picks a branch of If '{node.name or node.output[0]}' — give "
                                        "the value the model will really see")
                    else:
                        nxt.extend(node.output)
            frontier = nxt
            if vi.name in out:
                break
    return out


def _missing_data(name: str, location: str, zipped: str | None) -> XcInputError:
    """The one line for a data file the model names but nobody gave: where to put it depends on how the model came
    (beside it for the CLI, in the same upload in the dashboard, in the same folder of a zip)."""
    shown = repr(location[:80])
    if zipped:
        return XcInputError(f"{zipped}: the model {name} keeps its weights in {shown}, which is not beside it in the "
                            "zip; zip the model's folder with its external-data files")
    # An upload's name is reduced to letters, digits, '.', '_' and '-', so a data file named otherwise no longer
    # matches what the model says: a zip keeps names as they are.
    renamed = re.search(r"[^A-Za-z0-9._-]", location) is not None
    return XcInputError(
        f"{name}: the external data file {shown} is missing; put it beside the model, or save the model as one file",
        dashboard=f"{name}: the model keeps its weights in {shown}, which is not among the uploaded files; add it to "
                  "the upload (select the model and its data files together) or upload a zip of the model's folder"
                  + ("; its name has characters an upload's name loses, so zip the folder" if renamed else ""))


def _check_external_files(model, folder: str, name: str, limits, zipped: str | None = None) -> None:
    from onnx import TensorProto

    from ..limits import Limits, check_file_size
    limits = limits or Limits.from_env()
    root = os.path.realpath(folder)
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), None)
        if not isinstance(location, str) or not location or "\0" in location:
            raise XcInputError(f"{name}: an initializer's external data has no readable location (a file name "
                               "beside the model is accepted)")
        target = os.path.realpath(os.path.join(root, location))
        if not target.startswith(root + os.sep):
            raise XcInputError(f"{name}: external data location {location[:80]!r} points outside the model's "
                               "folder")
        if not os.path.isfile(target):
            raise _missing_data(name, location, zipped)
        check_file_size(target, limits)


def _uses_external_data(model) -> bool:
    from onnx import TensorProto
    return any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)


def zipped_onnx_models(names: list[str]) -> list[str]:
    """The ONNX model files in a zip's listing; macOS's __MACOSX/ copies and hidden files are no models."""
    return [n for n in names if n.lower().endswith(".onnx") and "__MACOSX/" not in n
            and not n.rsplit("/", 1)[-1].startswith(".")]


def load_onnx_zip(path: str, shapes: "ShapeOverrides | None" = None, limits=None) -> Source:
    """A zip of an ONNX model's folder (the model and the external-data files it names): unpacked with bounds into a
    temporary folder, removed when the analysis ends (also on error); then read like a model on disk, its data
    only from files inside its own folder."""
    import shutil
    import tempfile

    from ..limits import Limits
    from ..paths import sha256_file
    from . import safe_zip
    limits = limits or Limits.from_env()
    name = os.path.basename(path)
    workdir = tempfile.mkdtemp(prefix="xc-onnx-zip-")
    try:
        with safe_zip.open_zip(path, name, limits) as z:
            models = zipped_onnx_models([i.filename for i in z.infolist() if not i.is_dir()])
            if len(models) != 1:
                listed = ", ".join(safe_zip._short(m, 60) for m in models[:3]) + (", …" if len(models) > 3 else "")
                raise XcInputError(f"{name}: the zip holds {len(models)} ONNX models ({listed}); accepted: a zip of "
                                   "one model's folder (its .onnx and the external-data files it names)")
            safe_zip.extract_all(z, workdir, name, limits)
        try:
            src = load_onnx(os.path.join(workdir, *models[0].split("/")), shapes, limits, zipped=name)
        except XcInputError as e:
            if str(e).startswith(f"{name}:"):
                raise
            # The model's own name alone would not say it came from this zip.
            raise XcInputError(f"{name}: {e}", fix=e.fix, inputs=e.inputs,
                               dashboard=f"{name}: {e.dashboard}" if e.dashboard else None) from None
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    src.name, src.sha256 = name, sha256_file(path)
    src.temp_dirs.append(workdir)
    return src
