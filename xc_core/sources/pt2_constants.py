"""An ExportedProgram whose signature is not "tensors, positionally": re-specialised once to one that is.

Hugging Face users export with keyword arguments, `torch.export.export(model, (input_ids,), kwargs={"use_cache":
False})`. The program then records `use_cache` as a constant user input (a ConstantArgument: bool / int / float /
str; a None is only a slot of the input tree), and tensor inputs given by keyword (`attention_mask=`) as keywords.
Every consumer downstream (the eager reference, torch.onnx, ExecuTorch, Core ML, Inductor, Core AI) feeds inputs
as one flat tuple of tensors, and each fails its own way on such a program. So the loader bakes the constants in
and flattens the keywords before anything sees the program: it exports a wrapper that takes the tensor inputs
positionally, under their own names, puts the recorded constants back in their places and runs the program's
graph. The dynamic dims the program recorded stay dynamic (same symbol for the same dim, same ranges), and every
node keeps its metadata (module path, source line), because the graph is run by an fx Interpreter under
`preserve_node_meta`, which is how torch's own re-tracing passes keep it.
"""
from __future__ import annotations

import inspect
import math
from typing import Any

from ..errors import XcInputError, first_line


def constant_inputs(ep) -> dict[str, Any]:
    """{name: value} of the constants the program's signature records (empty for a tensors-only program).
    A keyword given as None has no input spec of its own: it is read from the input tree."""
    from torch.export.graph_signature import ConstantArgument, InputKind
    out: dict[str, Any] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, ConstantArgument):
            out[spec.arg.name] = spec.arg.value
    in_spec = ep.call_spec.in_spec
    if in_spec is not None and in_spec.num_children == 2:
        kwargs_spec = in_spec.child(1)
        if kwargs_spec.type is dict:
            for key, child in zip(kwargs_spec.context, kwargs_spec.children()):
                if child.type is type(None):
                    out.setdefault(str(key), None)
    return out


def needs_respecialising(ep) -> bool:
    """True unless the program takes exactly its tensor inputs as positional arguments."""
    import torch.utils._pytree as pytree
    in_spec = ep.call_spec.in_spec
    if in_spec is None:
        return False
    n = len(ep.graph_signature.user_inputs)
    return bool(constant_inputs(ep)) or in_spec != pytree.tree_structure((tuple(range(n)), {}))


def describe(constants: dict[str, Any]) -> str:
    """`use_cache=False, past_key_values=None` — as a user wrote them in the export call."""
    return ", ".join(f"{k}={v!r}" for k, v in constants.items())


def json_value(v: Any) -> Any:
    """A constant as JSON holds it (a non-finite float as its repr)."""
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)


def respecialise(ep, name: str):
    """(program with tensor inputs only, {constant name: value}). Raises XcInputError with one line."""
    import torch
    from torch.export.graph_signature import ConstantArgument, InputKind

    constants = constant_inputs(ep)
    user_specs = [s for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    # Per leaf of the input tree, in order: None for a tensor the wrapper takes, else (the recorded constant,).
    slots = [(s.arg.value,) if isinstance(s.arg, ConstantArgument) else None for s in user_specs]
    tensor_names = [s.arg.name for s in user_specs if not isinstance(s.arg, ConstantArgument)]
    try:
        program = ep.module()
    except Exception as e:  # noqa: BLE001 — unlifting checks the signature against the state dict
        raise XcInputError(f"{name}: the exported program cannot be turned into a module "
                           f"({type(e).__name__}: {first_line(e)})") from None

    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    try:
        wrapper = _wrapper(program, slots, tensor_names)
        examples = _example_tensors(ep, slots, placeholders, tensor_names)
        dynamic = _dynamic_shapes(ep, placeholders, tensor_names)
        from ..quiet import quiet_torch
        with quiet_torch():
            baked = torch.export.export(wrapper, tuple(examples), dynamic_shapes=tuple(dynamic))
    except Exception as e:  # noqa: BLE001 — whatever torch.export says is the one line
        recorded = describe(constants) or "keyword tensor inputs"
        raise XcInputError(f"{name}: the program records {recorded} in its signature, and re-exporting it with "
                           f"tensor inputs only failed ({type(e).__name__}: {first_line(e)}); export the model "
                           "with positional tensor inputs (torch.export.export(model, (tensors…,)) with the "
                           "constants set in a wrapper)") from None
    return baked, constants


def _wrapper(program, slots: list, tensor_names: list[str]):
    """A module taking the tensor inputs positionally that runs `program` with the constants in their places."""
    import torch
    import torch.fx.traceback as fx_traceback

    def forward(self, *tensors):
        given = iter(tensors)
        leaves = [next(given) if slot is None else slot[0] for slot in slots]
        with fx_traceback.preserve_node_meta():
            # The interpreter hands each node's metadata to the node it traces into, so module paths and source
            # lines survive; the graph's output node rebuilds the program's own output tree (dict, tuple).
            return torch.fx.Interpreter(program).run(*leaves)

    # The wrapper's signature names its inputs as the program did: torch.export names placeholders after it.
    forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in tensor_names])
    wrapper = type("ConstantsBakedIn", (torch.nn.Module,), {"forward": forward})()
    # The program's weights hang from the wrapper under their own names (not 'program.model…'), so the
    # re-exported program's parameters keep the FQNs the user knows.
    for child_name, child in program.named_children():
        wrapper.add_module(child_name, child)
    for attr, p in program.named_parameters(recurse=False):
        wrapper.register_parameter(attr, p)
    for attr, b in program.named_buffers(recurse=False):
        wrapper.register_buffer(attr, b)
    return wrapper


def _example_tensors(ep, slots, placeholders, tensor_names) -> list:
    """The program's own sample inputs where the archive kept them, else zeros of each input's shape (dynamic dims
    at a size their range allows): the graph is aten ops, so values do not steer the trace."""
    import torch
    import torch.utils._pytree as pytree
    if ep.example_inputs is not None:
        leaves = pytree.tree_leaves(ep.example_inputs)
        tensors = [x for x, slot in zip(leaves, slots) if slot is None]
        if len(leaves) == len(slots) and all(isinstance(t, torch.Tensor) for t in tensors):
            return tensors
    out = []
    for n in tensor_names:
        val = placeholders[n].meta["val"]
        shape = [d if isinstance(d, int) else _size_in_range(ep, d) for d in val.shape]
        out.append(torch.zeros(shape, dtype=val.dtype))
    return out


def _size_in_range(ep, d) -> int:
    low, high = _range(ep, d.node.expr)
    size = max(low or 0, 2, min(8, high or 8))   # 2+: torch.export specialises sizes 0 and 1
    return min(size, high) if high is not None else size


def _range(ep, expr) -> tuple[int | None, int | None]:
    from .program_dims import program_dim_bounds     # the loader's reading of the range constraints
    return program_dim_bounds(ep).get(str(expr), (None, None))


def _dynamic_shapes(ep, placeholders, tensor_names) -> list:
    """Per tensor input, {axis: Dim} for each dim the program kept symbolic: one Dim per symbol (so two inputs
    that share a sequence length still share it), with the program's range; a derived dim (s0*2) is left to
    torch.export to work out again (Dim.AUTO)."""
    import torch
    dims: dict[str, Any] = {}
    out = []
    for n in tensor_names:
        spec = {}
        for axis, d in enumerate(placeholders[n].meta["val"].shape):
            if isinstance(d, int):
                continue
            expr = d.node.expr
            if not expr.is_Symbol:
                spec[axis] = torch.export.Dim.AUTO
                continue
            key = str(expr)
            if key not in dims:
                low, high = _range(ep, expr)
                kwargs = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
                dims[key] = torch.export.Dim(key, **kwargs)
            spec[axis] = dims[key]
        out.append(spec or None)
    return out


def baked_in_note(constants: dict[str, Any]) -> str:
    """The sentence the report, the CLI and the dashboard say about a re-specialised program."""
    if not constants:
        return ("the program takes some tensors by keyword; it was re-exported to take them positionally, in the "
                "same order and under the same names")
    one = len(constants) == 1
    return (f"{describe(constants)} {'was' if one else 'were'} recorded as {'a constant' if one else 'constants'}; "
            f"the program was re-exported with {'it' if one else 'them'} baked in")
