"""ExportedProgram → IR: a torch.export program's graph read into xc's graph IR, each node with its module path
(from nn_module_stack, or the scope names torch.onnx writes) and its source file:line; and the names a program
gives its user outputs."""
from __future__ import annotations

import os
import re

from ..ir import ALIAS, COMPUTE, Graph, Node, TensorInfo


def user_output_labels(ep) -> list[str]:
    """The model's own names for its outputs, by position: the keys of a dict (or a Hugging Face ModelOutput read
    as one) it returns, with indices for nested sequences ('logits', 'hidden_states[0]'); 'output <i>' where the
    model returns a plain tensor or tuple."""
    import torch.utils._pytree as pytree
    n = len(user_output_names(ep))
    try:
        spec = ep.call_spec.out_spec
        paths = [path for path, _ in pytree.tree_flatten_with_path(pytree.tree_unflatten(list(range(n)), spec))[0]]
    except Exception:  # noqa: BLE001 — no usable spec: positions
        paths = []
    if len(paths) != n:
        return [f"output {i}" for i in range(n)]
    labels = []
    for i, path in enumerate(paths):
        keys = [k for k in path if isinstance(k, (pytree.MappingKey, pytree.GetAttrKey))]
        if not keys:
            labels.append(f"output {i}")
            continue
        text = ""
        for k in path:
            if isinstance(k, pytree.MappingKey):
                text += ("." if text else "") + str(k.key)
            elif isinstance(k, pytree.GetAttrKey):
                text += ("." if text else "") + k.name
            elif isinstance(k, pytree.SequenceKey):
                text += f"[{k.idx}]"
        labels.append(text)
    seen: dict[str, int] = {}
    for i, lab in enumerate(labels):     # unique, whatever the keys were
        seen[lab] = seen.get(lab, 0) + 1
        if seen[lab] > 1:
            labels[i] = f"{lab} ({seen[lab]})"
    return labels


def user_output_names(ep) -> list[str]:
    """The ExportedProgram's user outputs by name: what the dynamo ONNX exporter names the graph's outputs (the
    ONNX names are checked against these once it has run; see pipeline.rename_outputs)."""
    from torch.export.graph_signature import OutputKind
    specs = [s for s in ep.graph_signature.output_specs if s.kind == OutputKind.USER_OUTPUT]
    return [getattr(s.arg, "name", None) or f"output_{i}" for i, s in enumerate(specs)]


_FX_NAME = re.compile(r"%([\w.]+)\s*:")


def decomposed_origin(decomposed_ep, source_ids: set[str]) -> dict[str, str]:
    """The ONNX exporter decomposes the program again before translating it; `from_node` records, for each new
    node, the node it was derived from. Follow it to the node of the captured program."""
    out = {}
    for n in decomposed_ep.graph.nodes:
        chain = n.meta.get("from_node") or []
        name = None
        while chain:
            src = chain[-1]
            if src.name in source_ids:
                name = src.name
            chain = src.from_node
        if name:
            out[n.name] = name
    return out


def exported_program_graph(ep, name: str, arguments: bool = False) -> Graph:
    """The ExportedProgram as the framework-level "before" graph: one node per aten call. With `arguments` (the
    captured graph: what the model diff compares), each node's attributes also hold its call's non-tensor
    arguments by name (`call_arguments`)."""
    import operator
    g = Graph(name=name, stage="captured")
    for n in ep.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            for a in n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]:
                if hasattr(a, "name"):
                    g.outputs.append(TensorInfo(a.name, *_shape_dtype(a.meta.get("val"))))
            continue
        if n.op != "call_function":
            continue
        target = n.target
        kind = ALIAS if target is operator.getitem else COMPUTE
        op = getattr(target, "__name__", str(target))
        # aten overloads print as "conv2d.default": keep the op name, the overload goes to attributes.
        op_type = op.split(".")[0] if "." in op else op
        inputs = [TensorInfo(a.name, *_shape_dtype(a.meta.get("val")))
                  for a in n.all_input_nodes]
        outputs = [TensorInfo(n.name, *_shape_dtype(n.meta.get("val")))]
        attributes = {"target": str(target)}
        if arguments:
            attributes.update((k, v) for k, v in call_arguments(n).items() if k != "target")
        g.nodes.append(Node(id=n.name, op_type=op_type, domain="aten", kind=kind, inputs=inputs, outputs=outputs,
                            attributes=attributes, source_ops=[n.name],
                            module_path=_module_path(n.meta.get("nn_module_stack")),
                            source_location=_location(n.meta.get("stack_trace"))))
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name in set(ep.graph_signature.user_inputs):
            g.inputs.append(TensorInfo(n.name, *_shape_dtype(n.meta.get("val"))))
    return g


# An argument whose JSON is longer than this is kept as a short digest: a 20,000-node report stays about its size.
MAX_ARGUMENT_CHARS = 200
_SKIP = object()       # a tensor argument: a graph edge, not an attribute


def call_arguments(n) -> dict:
    """A call node's non-tensor arguments as JSON-ready attributes: positional ones by their schema's argument name
    (`arg<i>` for a target without a schema, as operator.getitem), then keyword ones. Numbers, strings, booleans,
    None and lists of them as they are; dtypes, devices, layouts and memory formats as their names; symbolic sizes
    as their expression; anything longer than MAX_ARGUMENT_CHARS as a digest."""
    schema = getattr(n.target, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    # Tensor-typed parameters are edges (inputs) even when left None (conv's bias=None): not attributes.
    edges = {a.name for a in schema.arguments if "Tensor" in str(a.type)} if schema is not None else set()
    out = {}
    for i, value in enumerate(n.args):
        out[names[i] if i < len(names) else f"arg{i}"] = value
    out.update(n.kwargs)
    attributes = {}
    for key, value in out.items():
        if key in edges:
            continue
        value = _argument(value)
        if value is not _SKIP:
            attributes[str(key)] = bounded(value)
    return attributes


def bounded(value):
    """`value` (JSON-ready) as it is, or a digest string when its JSON is longer than MAX_ARGUMENT_CHARS: two
    different long values still read as different."""
    if not isinstance(value, (list, dict, str)):
        return value
    import json
    text = json.dumps(value, separators=(",", ":"))
    if len(text) <= MAX_ARGUMENT_CHARS:
        return value
    import hashlib
    what = f"{len(value)} items" if isinstance(value, (list, dict)) else f"{len(value)} characters"
    return f"<{what}, sha256 {hashlib.sha256(text.encode()).hexdigest()[:16]}>"


def _argument(v):
    import math

    import torch
    import torch.fx
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)         # JSON has no inf / NaN
    if isinstance(v, torch.fx.Node):
        val = v.meta.get("val")
        # A symbolic size computed in the graph (sym_size): its expression. A tensor: an edge, already an input.
        return str(val) if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) else _SKIP
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return str(v)
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v).replace("torch.", "")
    if isinstance(v, (list, tuple)):
        items = [_argument(x) for x in v]
        return _SKIP if any(x is _SKIP for x in items) else items
    if isinstance(v, torch.Tensor):
        return _SKIP
    return str(v)


def _module_path(stack) -> str | None:
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    # torch.export writes paths like "blocks.0.expand" or, for nested calls, "L['self'].blocks[0]"
    path = re.sub(r"L\['self'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    return path.strip(".")


def _module_path_from_scopes(text: str) -> str | None:
    """torch.onnx writes a node's module scopes as a Python list literal: read it as data, never evaluated, and
    only if it is a short list of strings (the metadata is the model's own text)."""
    if not isinstance(text, str) or len(text) > 10_000:
        return None
    try:
        import ast
        scopes = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        return None
    # torch 2.13's exporter writes each scope as the full path ('m', 'm.vit', 'm.vit.layers.0'); older ones wrote
    # each module's own name ('m', 'vit', 'layers.0'). The last entry is the op itself.
    path = ""
    for scope in scopes[:-1]:
        if scope:
            path = scope if not path or scope.startswith(path + ".") else f"{path}.{scope}"
    return path


def _location(stack_trace: str | None) -> str | None:
    if not stack_trace:
        return None
    hits = re.findall(r'File "([^"]+)", line (\d+)', stack_trace)
    if not hits:
        return None
    # Innermost user frame: torch's own frames (nn.Module internals) say nothing about the user's model.
    user = [h for h in hits if f"{os.sep}torch{os.sep}" not in h[0]]
    path, line = (user or hits)[-1]
    return f"{os.path.basename(path)}:{line}"


def _shape_dtype(val):
    import torch
    if isinstance(val, torch.Tensor):
        return [d if isinstance(d, int) else str(d) for d in val.shape], str(val.dtype).replace("torch.", "")
    return None, None
