"""Load a `torch.export.save` archive (.pt2) without executing anything from the file.

`torch.export.load` is not a loader for untrusted files: it unpickles sample inputs in full when the restricted
unpickler refuses them, honours a `use_pickle` flag on weights and constants, unpickles "opaque" constants, loads
AOTInductor shared libraries, falls back to a legacy format that unpickles its state dict, passes the text of
symbolic sizes to `sympy.sympify` (which evaluates Python), and `ExportedProgram.module()` compiles the archive's
`guards_code` with `exec`. Node targets are resolved by walking attributes of the `torch` module (so
`torch.os.system` resolves), and parameter names end up inside Python that FX generates and runs.

This loader reads the archive itself and hands torch only checked pieces:
1. the zip is opened with bounds (`safe_zip`): entry count, unpacked size, methods, paths;
2. only the current archive format is read; the legacy format and every pickle but the sample inputs are refused;
3. weights and constants are rebuilt from raw bytes (no pickle), with their sizes checked against the data;
4. sample inputs go through `torch.load(weights_only=True)` only — no fallback;
5. the program's JSON is checked before deserialising: every `expr_str` and guard must be plain arithmetic
   (`safe_expr`), every operator name must name a registered operator, every parameter / buffer / subgraph name
   must be a plain dotted identifier;
6. torch's own deserializer then builds the ExportedProgram from those pieces, and every call target of the
   result is checked again by type (an OpOverload, a higher-order operator or a symbolic-size operator).
"""
from __future__ import annotations

import io
import json
import math
import operator
import os
import re
import unicodedata
from typing import Any

from ..errors import XcInputError
from ..limits import Limits
from . import safe_zip
from .safe_expr import UnsafeExpression, check_guard, check_sympy_expr

MODEL = "model"
ARCHIVE_FORMAT = "pt2"
ARCHIVE_VERSION = "0"   # torch 2.13 writes and reads this one
# Names that become attribute paths in code FX generates ("layers.0.weight", "blocks.conv-1.bias"): FX quotes a
# part that is not an identifier as getattr(self, "<part>"), so a part must not hold quotes, backslashes or
# control characters, and must not reach dunder attributes.
FQN_PART = re.compile(r"[^\"'\\\x00-\x1f\x7f.]{1,200}")
IDENT = re.compile(r"_?[A-Za-z][A-Za-z0-9_]*")
# How torch's serializer spells call targets: torch.ops.<namespace>.<op>[.<overload>] (ASCII identifiers; operators
# may be dunders: aten.__and__, aten.__lshift__), plus symbolic-size ops. The name is then resolved in torch.ops.
OP_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
NEVER_LOADED = ("data/aotinductor/", "data/mtia", "data/executorch/", "xl_model_weights/")


class Pt2Refused(XcInputError):
    """The archive asks for something xc will not do (unpickle, evaluate, load native code)."""


def load_pt2(path: str, limits: Limits):
    """The ExportedProgram in `path`, and notes on what was left unread. Raises XcInputError with one line."""
    name = os.path.basename(path)
    z = safe_zip.open_zip(path, name, limits)
    with z:
        members = _members_by_path(z, name)
        notes = _check_layout(members, name)

        def read(p: str) -> bytes:
            return safe_zip.read_member(z, members[p], name, limits)

        _check_small_record(read, members, "archive_format", ARCHIVE_FORMAT, name)
        _check_small_record(read, members, "archive_version", ARCHIVE_VERSION, name)

        program = _json(read, f"models/{MODEL}.json", members, name)
        check_program_json(program, name)
        notes += plain_pytree_specs(program)
        state_dict = _payloads(read, members, "data/weights/", f"data/weights/{MODEL}_weights_config.json", name,
                               kind="weight", limits=limits)
        constants = _payloads(read, members, "data/constants/", f"data/constants/{MODEL}_constants_config.json",
                              name, kind="constant", limits=limits)
        sample_inputs = _sample_inputs(read, members, name, limits)

    ep = _deserialize(program, state_dict, constants, sample_inputs, name)
    check_call_targets(ep, name)
    return ep, notes


# archive layout ---------------------------------------------------------------------------------------------------

def load_pt2_tensors(path: str, limits: Limits, names) -> dict:
    """Only the named weights and constants of the archive (by state-dict / constants key), rebuilt from raw bytes
    as `load_pt2` rebuilds them; the program is not read and no other tensor's data is. Names it lacks are left out.
    Raises XcInputError with one line."""
    name = os.path.basename(path)
    wanted = set(names)
    z = safe_zip.open_zip(path, name, limits)
    with z:
        members = _members_by_path(z, name)
        _check_layout(members, name)

        def read(p: str) -> bytes:
            return safe_zip.read_member(z, members[p], name, limits)

        _check_small_record(read, members, "archive_format", ARCHIVE_FORMAT, name)
        _check_small_record(read, members, "archive_version", ARCHIVE_VERSION, name)
        out = _payloads(read, members, "data/weights/", f"data/weights/{MODEL}_weights_config.json", name,
                        kind="weight", limits=limits, only=wanted)
        out.update(_payloads(read, members, "data/constants/", f"data/constants/{MODEL}_constants_config.json",
                             name, kind="constant", limits=limits, only=wanted - set(out)))
    return out


def _members_by_path(z, name: str) -> dict:
    """Entries by their path below the archive's root folder (torch writes `<stem>/...`)."""
    infos = [i for i in z.infolist() if not i.is_dir()]
    top = {i.filename for i in infos if "/" not in i.filename}
    if top & {"serialized_exported_program.json", "version"}:
        raise Pt2Refused(f"{name}: a .pt2 in torch.export's legacy format (before torch 2.6), whose state dict "
                         "is a pickle; xc does not unpickle — re-save it with torch.export.save from a current "
                         "torch")
    roots = {i.filename.split("/", 1)[0] for i in infos}
    if len(roots) != 1 or top:
        raise XcInputError(f"{name}: not a torch.export archive (its files do not sit in one root folder as "
                           "torch.export.save writes them)")
    return {i.filename.split("/", 1)[1]: i for i in infos}


def _check_layout(members: dict, name: str) -> list[str]:
    if "archive_format" not in members:
        raise XcInputError(f"{name}: not a torch.export archive (no archive_format record)")
    notes = []
    skipped = sorted({p.split("/")[1] if p.startswith("data/") else p.split("/")[0]
                      for p in members if p.startswith(NEVER_LOADED)})
    if skipped:
        notes.append("the archive also holds compiled code (" + ", ".join(skipped) + "); xc never loads it")
    others = sorted(p for p in members if p.startswith("models/") and p != f"models/{MODEL}.json")
    if others:
        notes.append(f"only the program '{MODEL}' is read; the archive also holds {', '.join(others)}")
    if f"models/{MODEL}.json" not in members:
        raise XcInputError(f"{name}: the archive holds no program models/{MODEL}.json (written by "
                           "torch.export.save)")
    return notes


def _json(read, path: str, members: dict, name: str) -> Any:
    if path not in members:
        raise XcInputError(f"{name}: the archive has no {path}")
    try:
        return json.loads(read(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise XcInputError(f"{name}: {path} is not valid JSON ({type(e).__name__})") from None


def _check_small_record(read, members: dict, path: str, expected: str, name: str) -> None:
    if path in members and read(path).decode("utf-8", "replace").strip() != expected:
        raise XcInputError(f"{name}: unexpected {path} record (this loader reads {expected!r})")


# weights and constants --------------------------------------------------------------------------------------------

def _payloads(read, members: dict, folder: str, config_path: str, name: str, kind: str, limits: Limits,
              only: set | None = None) -> dict:
    """Tensors by FQN, rebuilt from raw little-endian bytes; anything pickled is refused. `only`: just these FQNs
    (the whole config is still checked)."""
    import torch
    from torch._export.serde import schema
    from torch._export.serde.serialize import (_dict_to_dataclass, deserialize_scalar_type, deserialize_size,
                                               deserialize_storage_offset, deserialize_stride)
    _check_small_record(read, members, "byteorder", "little", name)
    legacy = f"{folder}{MODEL}.pt"
    if legacy in members:
        raise Pt2Refused(f"{name}: the {kind}s are stored as one pickle ({legacy}, torch's legacy layout); xc does "
                         "not unpickle — re-save with torch.export.save from a current torch")
    if config_path not in members:
        return {}
    raw = _json(read, config_path, members, name)
    if not isinstance(raw, dict) or not isinstance(raw.get("config"), dict):
        raise XcInputError(f"{name}: {config_path} is not a payload config")
    for fqn, meta in raw["config"].items():
        check_fqn(fqn, f"{kind} name", name)
        if not isinstance(meta, dict):
            raise XcInputError(f"{name}: {config_path} entry {fqn!r} is not an object")
        path_name = str(meta.get("path_name", ""))
        if meta.get("use_pickle") or not path_name.startswith(("weight_", "tensor_")):
            what = ("a TorchScript custom object" if path_name.startswith("custom_obj_")
                    else "an opaque Python object" if path_name.startswith("opaque_obj_") else "a pickle")
            raise Pt2Refused(f"{name}: the {kind} {_short(fqn)} is stored as {what} ({path_name}); xc does not "
                             "unpickle — only tensors stored as raw data are read")
    try:
        config = _dict_to_dataclass(schema.PayloadConfig, raw)
    except Exception as e:  # noqa: BLE001 — any malformed field
        raise XcInputError(f"{name}: {config_path} is malformed ({_why(e)})") from None

    flat: dict[str, Any] = {}
    out = {}
    for fqn, meta in config.config.items():
        if only is not None and fqn not in only:
            continue
        tm = meta.tensor_meta
        if tm is None:
            raise XcInputError(f"{name}: the {kind} {_short(fqn)} has no tensor metadata")
        try:
            dtype = deserialize_scalar_type(tm.dtype)
            sizes, strides = deserialize_size(tm.sizes), deserialize_stride(tm.strides)
            offset = deserialize_storage_offset(tm.storage_offset)
        except Exception as e:  # noqa: BLE001 — unknown dtype code, symbolic sizes
            raise XcInputError(f"{name}: the {kind} {_short(fqn)} has unreadable metadata ({_why(e)})") from None
        if dtype.is_complex or dtype in (torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4):
            raise XcInputError(f"{name}: the {kind} {_short(fqn)} has dtype {dtype}, which xc does not read")
        record = folder + meta.path_name
        if meta.path_name not in flat:
            if record not in members:
                raise XcInputError(f"{name}: the {kind} {_short(fqn)} points at {record}, which is not in the "
                                   "archive")
            flat[meta.path_name] = _raw_tensor(read(record), dtype, sizes, name, fqn)
        base = flat[meta.path_name]
        if base.dtype != dtype:
            raise XcInputError(f"{name}: {record} is read as {base.dtype} and as {dtype}")
        try:
            t = torch.as_strided(base, sizes, strides, offset)
        except Exception as e:  # noqa: BLE001 — strides or offset outside the stored bytes
            raise XcInputError(f"{name}: the {kind} {_short(fqn)} does not fit its stored data ({_why(e)})") \
                from None
        if kind == "weight" and meta.is_param:
            t = torch.nn.Parameter(t, requires_grad=bool(tm.requires_grad) and t.is_floating_point())
        out[fqn] = t
    return out


def _raw_tensor(data: bytes, dtype, sizes: tuple, name: str, fqn: str):
    import torch
    item = torch.empty((), dtype=dtype).element_size()
    if not data:
        # torch writes empty records for tensors with no elements.
        if any(s < 0 for s in sizes) or math.prod(sizes) != 0:
            raise XcInputError(f"{name}: {_short(fqn)} declares shape {list(sizes)} but stores no data")
        return torch.zeros(sizes, dtype=dtype).reshape(-1)
    if len(data) % item:
        raise XcInputError(f"{name}: {_short(fqn)} stores {len(data)} bytes, not a whole number of {dtype} values")
    return torch.frombuffer(bytearray(data), dtype=dtype)


def _sample_inputs(read, members: dict, name: str, limits: Limits):
    """The example inputs, through the restricted unpickler only (tensors and plain containers)."""
    import pickle
    import torch
    path = f"data/sample_inputs/{MODEL}.pt"
    if path not in members:
        return None
    data = read(path)
    if not data:
        return None
    # The record is itself a torch.save zip: bound it like any other archive before torch reads it.
    safe_zip.open_zip(data, f"{name} ({path})", limits).close()
    try:
        value = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        raise Pt2Refused(f"{name}: the sample inputs ({path}) hold Python objects other than tensors; xc does not "
                         "unpickle them") from None
    except Exception as e:  # noqa: BLE001
        raise XcInputError(f"{name}: the sample inputs ({path}) cannot be read ({_why(e)})") from None
    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple)
            and isinstance(value[1], dict)):
        raise XcInputError(f"{name}: the sample inputs ({path}) are not (args, kwargs)")
    return value


# the program's JSON -----------------------------------------------------------------------------------------------

def check_program_json(program: Any, name: str) -> None:
    """Refuse the program unless every piece of text that torch evaluates, compiles or resolves is plain."""
    if not isinstance(program, dict) or not isinstance(program.get("graph_module"), dict):
        raise XcInputError(f"{name}: models/{MODEL}.json is not an exported program")
    guards = program.get("guards_code") or []
    if not isinstance(guards, list):
        raise XcInputError(f"{name}: guards_code is not a list")
    for g in guards:
        try:
            check_guard(g)
        except UnsafeExpression as e:
            raise Pt2Refused(f"{name}: an input guard is not plain shape arithmetic ({e}): {_short(g)}; xc does not "
                             "run code from the file") from None
    for key in program.get("range_constraints") or {}:
        if not _symbol_key(key):
            raise XcInputError(f"{name}: range constraint for {_short(key)} is not a size symbol")
    _walk(program["graph_module"], name)


def _walk(obj: Any, name: str) -> None:
    """Every dict and list below `obj`, iteratively (a deeply nested file must not blow the Python stack)."""
    stack = [obj]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if "expr_str" in v:
                try:
                    check_sympy_expr(v["expr_str"])
                except UnsafeExpression as e:
                    raise Pt2Refused(f"{name}: a symbolic size is not plain arithmetic ({e}): "
                                     f"{_short(v['expr_str'])}; xc does not evaluate code from the file") from None
            if isinstance(v.get("target"), str) and "inputs" in v and "outputs" in v:
                _check_target(v["target"], name)
            if isinstance(v.get("as_operator"), str):
                _check_target(v["as_operator"], name)
            if "as_custom_obj" in v and v["as_custom_obj"] is not None:
                raise Pt2Refused(f"{name}: the program takes a TorchScript custom object, which xc does not load")
            if isinstance(v.get("as_graph"), dict):
                sub = v["as_graph"].get("name")
                if not isinstance(sub, str) or not IDENT.fullmatch(sub):
                    raise XcInputError(f"{name}: a subgraph is named {_short(sub)}, not a plain identifier")
            for fk in ("parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name", "fqn",
                       "user_input_name", "lifted_name"):
                if isinstance(v.get(fk), str):
                    check_fqn(v[fk], fk.replace("_", " "), name)
            if isinstance(v.get("metadata"), dict):
                _scrub_metadata(v["metadata"])
            if v.get("custom_obj") is not None:  # an input spec that lifts a TorchScript object
                raise Pt2Refused(f"{name}: the program takes a TorchScript custom object, which xc does not load")
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


# Python's tokenizer ends a line at a carriage return too: a stack trace torch copies into a comment of code it
# generates must hold no control character but the newlines it splits on (and tabs).
_CONTROL_IN_METADATA = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\x85]")


def _scrub_metadata(metadata: dict) -> None:
    """Node metadata (stack traces, module stacks) as text only, in place."""
    for k, text in metadata.items():
        if isinstance(text, str) and _CONTROL_IN_METADATA.search(text):
            metadata[k] = _CONTROL_IN_METADATA.sub(" ", text)


def _symbol_targets() -> set[str]:
    from torch._export.serde.serialize import _SYM_OPS
    return {f"{t.__module__}.{t.__name__}" for t in _SYM_OPS} | {"_operator.getitem"}


def _check_target(target: str, name: str) -> None:
    """A call target must resolve in torch.ops to a registered operator overload (or a higher-order operator, or a
    symbolic-size operator). Resolving only looks names up in the dispatcher's registry; nothing is called."""
    if target in _symbol_targets():
        return
    parts = target.split(".")
    if not (4 <= len(parts) <= 5 and parts[:2] == ["torch", "ops"] and all(OP_PART.fullmatch(p) for p in parts[2:])
            and not parts[2].startswith("__")):
        raise Pt2Refused(f"{name}: a node calls {_short(target)}, which is not a torch.ops operator name; xc runs "
                         "only registered torch.ops operators from a file")
    resolved = _resolve_operator(parts[2:])
    if resolved is None:
        raise Pt2Refused(f"{name}: a node calls {_short(target)}, which is not a registered operator in this torch; "
                         "xc runs only registered torch.ops operators from a file")
    if not resolved:
        raise Pt2Refused(f"{name}: a node calls {_short(target)}, which names something in torch.ops that is not an "
                         "operator, so it is not allowed; xc runs only registered torch.ops operators from a file")


def _resolve_operator(parts: list[str]) -> bool | None:
    """True: an operator overload, a packet's default overload or a higher-order operator; False: the name resolves
    to something else (a method, a dict …: not allowed); None: nothing of that name is registered."""
    import torch
    from torch._ops import HigherOrderOperator, OpOverload, OpOverloadPacket
    try:
        namespace = getattr(torch.ops, parts[0])
        packet = getattr(namespace, parts[1])
    except (AttributeError, RuntimeError):
        return None
    if isinstance(packet, HigherOrderOperator):
        return len(parts) == 2
    if not isinstance(packet, OpOverloadPacket):
        return False
    if len(parts) == 2:
        return True
    if parts[2].startswith("__"):
        return False
    try:
        return isinstance(getattr(packet, parts[2]), OpOverload)
    except (AttributeError, RuntimeError):
        return None


def check_fqn(fqn: Any, what: str, name: str) -> None:
    """Refuse a dotted name that would not be a plain attribute path in generated code."""
    if fqn == "" and what == "fqn":
        return  # the root module's entry in the module call graph
    # NFKC: Python reads identifiers normalised, so a fullwidth 'ｗeight' in generated code is the attribute 'weight'
    if not isinstance(fqn, str) or not all(FQN_PART.fullmatch(p) and not p.startswith("__")
                                           and unicodedata.normalize("NFKC", p) == p for p in fqn.split(".")):
        raise Pt2Refused(f"{name}: a {what} is {_short(fqn)}, not a plain dotted name (parts of at most 200 "
                         "characters, without quotes, backslashes, control characters, a leading '__' or letters "
                         "Python reads as others); such names become code torch generates, so xc refuses them")


def _symbol_key(key: Any) -> bool:
    from .safe_expr import SYMBOL_NAME
    return isinstance(key, str) and bool(SYMBOL_NAME.fullmatch(key))


# deserialising and the final check --------------------------------------------------------------------------------

def plain_pytree_specs(program: dict) -> list[str]:
    """Inputs and outputs whose container type this process has not registered, read as dicts of their fields.

    Hugging Face models return `ModelOutput`s (CausalLMOutput, ImageClassifierOutput …): transformers registers them
    with torch's pytree when it is imported, so torch cannot rebuild such a program without it — and xc never
    imports a module a file names. Their serialized context is the list of field names, exactly a dict's, so the
    container is read as a dict with the same fields, in the same order (which also names the outputs: 'logits')."""
    import torch.utils._pytree as pytree
    known = set(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)
    replaced: dict[str, int] = {}

    def plain(node) -> None:
        stack = [node]
        while stack:
            n = stack.pop()
            if not isinstance(n, dict):
                continue
            kids = n.get("children_spec") if isinstance(n.get("children_spec"), list) else []
            t = n.get("type")
            if isinstance(t, str) and t not in known:
                try:
                    fields = json.loads(n.get("context") or "null")
                except (ValueError, TypeError, RecursionError):
                    fields = None
                if isinstance(fields, list) and len(fields) == len(kids) and all(isinstance(f, str) for f in fields):
                    n["type"] = "builtins.dict"
                    replaced[t] = replaced.get(t, 0) + 1
            stack.extend(kids)

    for entry in (program.get("graph_module") or {}).get("module_call_graph") or []:
        sig = entry.get("signature") if isinstance(entry, dict) else None
        for key in ("in_spec", "out_spec"):
            if not isinstance(sig, dict) or not isinstance(sig.get(key), str):
                continue
            try:
                spec = json.loads(sig[key])
            except (ValueError, RecursionError):
                continue
            if isinstance(spec, list) and len(spec) == 2:
                before = dict(replaced)
                plain(spec[1])
                if replaced != before:
                    sig[key] = json.dumps(spec)
    if not replaced:
        return []
    kinds = ", ".join(t.rsplit(".", 1)[-1] for t in sorted(replaced))
    return [f"inputs or outputs of a type this torch does not know ({kinds}) are read as dicts of their fields"]


def _deserialize(program: dict, state_dict: dict, constants: dict, sample_inputs, name: str):
    from torch._export.serde import schema
    from torch._export.serde.serialize import ExportedProgramDeserializer, _dict_to_dataclass
    try:
        serialized = _dict_to_dataclass(schema.ExportedProgram, program)
    except Exception as e:  # noqa: BLE001
        raise XcInputError(f"{name}: models/{MODEL}.json does not follow torch.export's schema ({_why(e)})") \
            from None
    try:
        return ExportedProgramDeserializer(None).deserialize(serialized, state_dict, constants, sample_inputs)
    except RecursionError:
        raise XcInputError(f"{name}: the program is nested too deeply to read") from None
    except Exception as e:  # noqa: BLE001 — SerializeError, SpecViolationError, version mismatch, …
        raise XcInputError(f"{name}: torch could not rebuild the exported program ({_why(e)}); the file may be "
                           "damaged or written by another torch version") from None


def check_call_targets(ep, name: str) -> None:
    """Every call in every graph of the program is a registered operator (checked by type, not by name)."""
    import torch
    from torch._export.serde.serialize import _SYM_OPS
    allowed_plain = set(_SYM_OPS) | {operator.getitem}

    def ok(target) -> bool:
        return (isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator))
                or target in allowed_plain)

    for gm in ep.graph_module.modules():
        graph = getattr(gm, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            if node.op in ("call_method", "call_module"):
                raise Pt2Refused(f"{name}: the graph has a {node.op} node, which exported programs never have")
            if node.op == "call_function" and not ok(node.target):
                raise Pt2Refused(f"{name}: a node calls {_short(str(node.target))}, which is not a registered "
                                 "operator")
            for arg in _flat(node.args) + _flat(node.kwargs):
                if callable(arg) and not isinstance(arg, torch.fx.Node) and not ok(arg):
                    raise Pt2Refused(f"{name}: a node passes {_short(str(arg))} as an operator, which is not a "
                                     "registered one")


def _flat(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _flat(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _flat(v)]
    return [x]


def _short(v: Any, n: int = 80) -> str:
    text = repr(v)
    return text if len(text) <= n else text[: n - 1] + "…"


_why = safe_zip._why
