"""Core ML ML programs (MIL) in the IR: one node per MIL op; tensors are MIL vars. Scopes coremltools attaches
are kept: the graph passes that touched each op (COREMLTOOLS_GRAPH_PASS), the source stack trace
(EXIR_STACK_TRACE) and, on the TorchScript path, the module name (TORCHSCRIPT_MODULE_NAME)."""
from __future__ import annotations

import os
import re

from ..ir import CAST, COMPUTE, CONSTANT, Graph, Node, TensorInfo, precision_of_dtype

# Suffixes the torch frontend and the passes append to an fx node's name when naming MIL ops and vars.
_NAME_TAIL = re.compile(r"_(?:cast_fp16|cast_fp32|cast_int32|cast_int16|to_fp16|to_fp32|\d+|[a-z]+)$")


_DTYPE_NAMES: dict = {}     # MIL builtin type -> its name ("fp16"), looked up once per type


def var_dtype(var) -> str | None:
    from coremltools.converters.mil.mil import types
    try:
        dt = var.dtype
        if dt is None:
            return None
        name = _DTYPE_NAMES.get(dt)
        if name is None:
            name = _DTYPE_NAMES[dt] = types.builtin_to_string(dt)
        return name
    except Exception:  # noqa: BLE001 — list/tuple/state vars have no scalar dtype
        return None


def var_shape(var):
    try:
        return [int(d) if isinstance(d, (int,)) or str(d).isdigit() else str(d) for d in var.shape]
    except Exception:  # noqa: BLE001
        return None


def _numpy_dtype(mil_dtype: str | None) -> str | None:
    return {"fp16": "float16", "fp32": "float32", "fp64": "float64", "int32": "int32", "int16": "int16",
            "int8": "int8", "uint8": "uint8", "bool": "bool", "int64": "int64"}.get(mil_dtype or "", mil_dtype)


def mil_ir_graph(prog, stage: str, debug_handles: bool = False) -> Graph:
    """One node per MIL op. `debug_handles`: keep the ExecuTorch debug handles coremltools records on each op
    converted from an Edge program (attributes["debug_handles"]), to trace a delegate's ops to its Edge nodes."""
    from coremltools.converters.mil.mil.scope import ScopeSource
    fn = prog.functions["main"]
    g = Graph(name="main", stage=stage)
    # A var is read once, however many ops take it (shape and dtype cost more than the op itself); each use still
    # gets a TensorInfo of its own, since later steps rename tensors in place.
    seen: dict[int, tuple] = {}

    def tensor(var, name=None) -> TensorInfo:
        hit = seen.get(id(var))
        if hit is None:
            hit = seen[id(var)] = (var_shape(var), _numpy_dtype(var_dtype(var)))
        return TensorInfo(var.name if name is None else name, None if hit[0] is None else list(hit[0]), hit[1])
    g.inputs = [tensor(v, n) for n, v in fn.inputs.items()]
    g.outputs = [tensor(v) for v in fn.outputs]
    for op in fn.operations:
        inputs = []
        for v in op.inputs.values():
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                inputs.append(tensor(x))
        outputs = [tensor(o) for o in op.outputs]
        scopes = {k: v for k, v in op.scopes.items()} if getattr(op, "scopes", None) else {}
        passes = list(scopes.get(ScopeSource.COREMLTOOLS_GRAPH_PASS, []) or [])
        stack = (scopes.get(ScopeSource.EXIR_STACK_TRACE) or [None])[0]
        ts_names = scopes.get(ScopeSource.TORCHSCRIPT_MODULE_NAME) or []
        attrs = {"passes": passes}
        handles = scopes.get(getattr(ScopeSource, "EXIR_DEBUG_HANDLE", None)) if debug_handles else None
        if handles:
            attrs["debug_handles"] = [int(h) for h in handles if h is not None]
        for key in ("dilations", "strides", "groups", "pad_type", "axis", "axes", "dtype", "mode"):
            val = op.inputs.get(key) if hasattr(op.inputs, "get") else None
            if val is not None and getattr(val, "val", None) is not None:
                v = val.val
                attrs[key] = v.tolist() if hasattr(v, "tolist") else (v if isinstance(v, (int, float, str, bool))
                                                                       else str(v))
        kind = CONSTANT if op.op_type == "const" else CAST if op.op_type == "cast" else COMPUTE
        node = Node(id=op.name, op_type=op.op_type, domain="mil", kind=kind, inputs=inputs, outputs=outputs,
                    attributes=attrs, precision=precision_of_dtype(outputs[0].dtype if outputs else None))
        if stack:
            node.source_location = _user_frame(stack)
        if ts_names:
            node.module_path = ".".join(str(s) for s in ts_names if s)
        g.nodes.append(node)
    return g


def _user_frame(stack: str) -> str | None:
    hits = re.findall(r'File "([^"]+)", line (\d+)', stack)
    user = [h for h in hits if f"{os.sep}torch{os.sep}" not in h[0]]
    if not (user or hits):
        return None
    path, line = (user or hits)[-1]
    return f"{os.path.basename(path)}:{line}"


def attach_source_ops(g: Graph, source_names: dict[str, str], before_index: dict) -> int:
    """Map MIL ops to source ops by name: the torch frontend names each op after its fx node, and passes append
    suffixes (`hardtanh_cast_fp16`, `conv2d_1_pad_type_0`). Strip suffixes until a known fx name remains.
    Returns how many compute/cast ops were mapped."""
    mapped = 0
    for n in g.nodes:
        name = n.outputs[0].name if n.outputs else n.id
        origin = _strip_to_known(name, source_names) or _strip_to_known(n.id, source_names)
        if origin:
            src = before_index.get(origin)
            n.source_ops = [origin]
            if src is not None:
                n.module_path = src.module_path if src.module_path is not None else n.module_path
                n.source_location = src.source_location or n.source_location
            mapped += n.kind != CONSTANT
    return mapped


def _strip_to_known(name: str, known: dict[str, str]) -> str | None:
    while name:
        if name in known:
            return known[name]
        shorter = _NAME_TAIL.sub("", name)
        if shorter == name:
            return None
        name = shorter
    return None
