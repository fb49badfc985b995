"""Sub-programs of the captured ExportedProgram, fed with the reference's own values.

Two shapes of sub-program, built the same way from the captured graph (`region_program`):

* islands: every op cut free of every other (each input of each op becomes a graph input), all in one program, so
  one compile per target isolates every op — LiteRT's accuracy debugger cuts ops apart the same way;
* a range: a contiguous run of ops in execution order with its inner edges kept; its inputs are the values it
  reads from outside, its outputs the values read after it (or returned by the model). Culprit search compiles one
  range at a time and lets the reference finish the model from its outputs (`finish_with_reference`).

Ops are the captured graph's `call_function` nodes; a `getitem` belongs to the op whose tuple it takes apart.
Parameters, buffers and constants stay constants of the sub-program; a non-tensor value an op reads from another
(a size, a list of them) is baked in as the reference computed it. Graph inputs are named `in_<k>` and outputs
follow ops order: no model-controlled name becomes a name in the sub-program's signature.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Region:
    """A sub-program and what its inputs and outputs are in the captured graph."""
    module: object                     # torch.fx.GraphModule
    ops: list[str]                     # the captured ops it computes, in execution order
    inputs: list[str]                  # per graph input: the captured value (node name) it is fed with
    outputs: list[str]                 # per graph output: the captured value (node name) it computes
    input_names: list[str] = field(default_factory=list)

    def feeds(self, values: dict) -> dict[str, np.ndarray]:
        """The reference's values at this region's inputs, by input name."""
        return {name: to_numpy(values[src]) for name, src in zip(self.input_names, self.inputs)}

    def example_args(self, values: dict) -> tuple:
        """The inputs as contiguous tensors: a value the reference computed as a view (a transpose's) has strides
        a file input never has, and a converter refuses the dim order they imply (Core ML does)."""
        import torch
        return tuple(torch.as_tensor(values[src]).contiguous() for src in self.inputs)


def compute_ops(gm) -> list[str]:
    """The captured graph's ops in execution order: call_function nodes but the getitems that unpack them."""
    return [n.name for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]


def isolatable(gm, values: dict) -> tuple[list[str], dict[str, str]]:
    """(ops that can be cut into their own program, op -> why the others cannot). An op qualifies when it reads at
    least one tensor another op (or the model's input) computed and yields tensors."""
    import torch
    ok, why = [], {}
    nodes = {n.name: n for n in gm.graph.nodes}
    for name in compute_ops(gm):
        n = nodes[name]
        if not isinstance(n.target, torch._ops.OpOverload):
            why[name] = f"{getattr(n.target, '__name__', n.target)} is not an ATen op (a higher-order or Python call)"
            continue
        value = values.get(name)
        tensors = [value] if isinstance(value, torch.Tensor) else \
            list(value) if isinstance(value, (tuple, list)) else []
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            why[name] = "yields no tensor (a size or a Python value, baked into its consumers)"
            continue
        if _packet(n.target) in PASS_THROUGH or any(_same_tensor(t, values.get(a.name)) for t in tensors
                                                     for a in n.all_input_nodes):
            why[name] = "returns its input unchanged (an identity in inference): nothing for a target to compute"
            continue
        if not any(isinstance(values.get(a.name), torch.Tensor) for a in n.all_input_nodes
                   if a.op in ("call_function", "placeholder") and a.name in values):
            why[name] = "reads no computed tensor (a constant the compilers fold)"
            continue
        ok.append(name)
    return ok, why


# Ops that return their input in inference (torch.export keeps them in an eval-mode program).
PASS_THROUGH = {"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout", "clone", "contiguous",
                "alias", "detach", "lift_fresh_copy"}


def _packet(target) -> str:
    return getattr(getattr(target, "_overloadpacket", None), "__name__", "")


def _same_tensor(value, other) -> bool:
    """Whether `value` is `other` itself: the same memory, shape and strides (a view that transposes or slices is
    not: it moves values)."""
    import torch
    if not isinstance(value, torch.Tensor) or not isinstance(other, torch.Tensor) or not value.numel():
        return False
    try:
        return (value.untyped_storage().data_ptr() == other.untyped_storage().data_ptr()
                and value.shape == other.shape and value.stride() == other.stride()
                and value.storage_offset() == other.storage_offset())
    except RuntimeError:
        return False


def reference_values(ep, user_inputs: list) -> dict:
    """Every node's value when the reference (the captured ExportedProgram, eager fp32) runs `user_inputs`:
    node name -> tensor, tuple of tensors or Python value. Parameters and buffers are their placeholders' values."""
    import torch

    from ..targets.reference import _lifted_args
    args = _lifted_args(ep, [torch.as_tensor(x) for x in user_inputs])
    values: dict = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if n.op != "output":
                values[n.name] = _detached(value)
            return value

    with torch.no_grad():
        Recorder(ep.graph_module).run(*args)
    return values


def finish_with_reference(ep, user_inputs: list, overrides: dict) -> list:
    """The model's outputs when the reference runs it but takes the values in `overrides` (node name -> tensor)
    instead of computing them: what a range compiled by a target leaves at the model's outputs."""
    import torch

    from ..targets.reference import _lifted_args
    args = _lifted_args(ep, [torch.as_tensor(x) for x in user_inputs])

    class Overridden(torch.fx.Interpreter):
        def run_node(self, n):
            if n.name in overrides:
                return overrides[n.name]
            return super().run_node(n)

    with torch.no_grad():
        out = Overridden(ep.graph_module).run(*args)
    leaves = out if isinstance(out, (tuple, list)) else [out]
    user = _user_output_positions(ep)
    return [to_numpy(leaves[i]) for i in user]


def user_outputs(ep, values: dict) -> list[np.ndarray]:
    """The reference's values at the model's user outputs (in order)."""
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    leaves = out_node.args[0]
    return [to_numpy(values[leaves[i].name]) if hasattr(leaves[i], "name") else np.asarray(leaves[i])
            for i in _user_output_positions(ep)]


def _user_output_positions(ep) -> list[int]:
    from torch.export.graph_signature import OutputKind
    return [i for i, s in enumerate(ep.graph_signature.output_specs) if s.kind == OutputKind.USER_OUTPUT]


def region_program(ep, ops: list[str], values: dict, cut_every_edge: bool) -> Region:
    """The sub-program computing `ops` (captured op names, any order: they are taken in execution order).
    `cut_every_edge`: islands (every op fed from graph inputs); else a range (edges between its ops kept)."""
    import torch
    from torch.export.graph_signature import InputKind
    gm = ep.graph_module
    wanted = set(ops)
    kinds = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    root = torch.nn.Module()
    graph = torch.fx.Graph()
    copied: dict[str, torch.fx.Node] = {}     # captured node -> its copy (region mode; islands: per op)
    placeholders: dict[str, torch.fx.Node] = {}
    attrs: dict[str, torch.fx.Node] = {}
    inputs: list[str] = []
    order = [n for n in gm.graph.nodes if n.op == "call_function"]

    def constant(node) -> torch.fx.Node:
        if node.name not in attrs:
            spec = kinds[node.name]
            value = values[node.name]
            attr = f"c_{len(attrs)}"
            if spec.kind == InputKind.PARAMETER:
                root.register_parameter(attr, torch.nn.Parameter(value.detach().clone(), requires_grad=False))
            else:
                root.register_buffer(attr, value.detach().clone() if isinstance(value, torch.Tensor) else value)
            attrs[node.name] = graph.get_attr(attr)
        return attrs[node.name]

    def placeholder(node) -> torch.fx.Node:
        if node.name not in placeholders:
            name = f"in_{len(placeholders)}"
            p = graph.placeholder(name)
            v = values[node.name]
            p.meta["val"] = v
            placeholders[node.name] = p
            inputs.append(node.name)
        return placeholders[node.name]

    def feed(arg, island: dict):
        if not isinstance(arg, torch.fx.Node):
            return arg
        if arg.op == "placeholder" and arg.name in kinds and kinds[arg.name].kind != InputKind.USER_INPUT:
            return constant(arg)
        local = island if cut_every_edge else copied
        if arg.name in local:
            return local[arg.name]
        value = values[arg.name]
        if isinstance(value, torch.Tensor):
            return placeholder(arg)
        return value        # a size or list the reference computed: a constant of the sub-program

    for n in order:
        if n.target is operator.getitem:
            producer = n.args[0]
            if producer.name in wanted:
                copied[n.name] = graph.call_function(operator.getitem, (copied[producer.name], n.args[1]))
                copied[n.name].meta["val"] = values.get(n.name)
            continue
        if n.name not in wanted:
            continue
        island: dict = {}
        new = graph.node_copy(n, lambda a: feed(a, island))
        new.meta = {"val": values.get(n.name)}
        copied[n.name] = new
    # Outputs: islands return every op's tensors; a range what is read outside it or returned by the model.
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    model_outputs = {a.name for a in out_node.args[0] if isinstance(a, torch.fx.Node)}
    outputs: list[str] = []
    for n in order:
        if n.name not in copied:
            continue
        value = values.get(n.name)
        if not isinstance(value, torch.Tensor):
            continue        # a tuple: its getitems are the outputs
        if cut_every_edge:
            outputs.append(n.name)
        elif n.name in model_outputs or any(u.name not in copied and u.op != "output" for u in n.users):
            outputs.append(n.name)
    graph.output(tuple(copied[o] for o in outputs))
    module = torch.fx.GraphModule(root, graph)
    module.graph.lint()
    return Region(module=module, ops=[n.name for n in order if n.name in wanted], inputs=inputs, outputs=outputs,
                  input_names=[f"in_{i}" for i in range(len(inputs))])


def export_region(region: Region, values: dict):
    """torch.export of the region's program at the reference's values (static shapes)."""
    import torch
    with torch.no_grad():
        return torch.export.export(region.module, region.example_args(values), strict=False)


def to_numpy(value) -> np.ndarray:
    import torch
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.contiguous().numpy()
    return np.asarray(value)


def _detached(value):
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (tuple, list)):
        return type(value)(_detached(v) for v in value)
    return value
