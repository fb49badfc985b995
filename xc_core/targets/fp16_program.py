"""A PyTorch program made to compute in float16, as Core ML's compute_precision=FLOAT16 makes an ML program: for a
converter that has no precision option of its own (coreai-torch 0.4.3 converts a program in the dtypes it is given).

- weights, activations and explicit float32 casts become float16; inputs and outputs stay as declared, cast at
  the edges;
- an op with a float32 constant input that float16 cannot hold (a finite value past ±65,504: a dead channel's
  batch-norm variance of 1e8 in PP-OCR's detector) stays in float32, its other inputs cast up and its result cast
  down — coremltools' FP16ComputePrecision pass keeps such ops in fp32 by the same rule (its `fp16_overflow`,
  coremltools/converters/mil/mil/passes/defs/quantization.py), so the two fp16 stacks are comparable. Infinities
  (attention masks) do not count: they stay infinite in float16.
"""
from __future__ import annotations

import operator

FLOAT16_MAX = 65504.0
INFINITE = 1e38          # coremltools' bound: larger magnitudes are infinities whose exact value does not matter


def fp16_program(program, args: tuple):
    """(`program` re-exported to compute in float16 at `args`, the names of the ops kept in float32)."""
    import copy

    import torch
    from torch.utils._pytree import tree_map
    # program.module() shares its parameters with the program (and with the model it was exported from):
    # converting them in place would turn the captured program fp16 for every later user in this process.
    module = copy.deepcopy(program.module())
    for node in list(module.graph.nodes):
        if node.op != "call_function":
            continue
        # torch.export records the dtype it saw at each explicit cast (`_assert_tensor_metadata`: float32); in the
        # fp16 model those checks no longer hold, and they compute nothing.
        if node.target is torch.ops.aten._assert_tensor_metadata.default and not node.users:
            module.graph.erase_node(node)
            continue
        # An explicit cast to float32 (an attention mask `.to(self.dtype)` traced in fp32) becomes a cast to fp16.
        node.args = tuple(torch.float16 if a is torch.float32 else a for a in node.args)
        if node.kwargs.get("dtype") is torch.float32:
            node.kwargs = {**node.kwargs, "dtype": torch.float16}
    overflowing = {n.target for n in module.graph.nodes if n.op == "get_attr" and _overflows(_held(module, n.target))}
    kept = _keep_in_float32(module, overflowing)
    module.recompile()

    class Fp16(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            originals = {target: _held(inner, target) for target in overflowing}
            self.inner = inner.to(torch.float16)
            # module.to() converts parameters and buffers; a program's lifted tensor constants (tensors its code
            # made) are plain attributes. The overflowing constants go back to float32.
            for node in inner.graph.nodes:
                if node.op != "get_attr":
                    continue
                held = _held(inner, node.target)
                if node.target in originals:
                    _put(inner, node.target, originals[node.target])
                elif isinstance(held, torch.Tensor) and held.dtype == torch.float32:
                    _put(inner, node.target, held.to(torch.float16))

        def forward(self, *given):
            given = [a.half() if a.is_floating_point() else a for a in given]
            out = self.inner(*given)
            return tree_map(lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == torch.float16
                            else t, out)
    return torch.export.export(Fp16(module), args, strict=False), kept


def _keep_in_float32(module, overflowing: set) -> list[str]:
    """Each op reading an overflowing constant computes in float32: casts in front of its other float inputs and
    after its (float) results. Returns the ops' names."""
    import torch
    to = torch.ops.aten.to.dtype
    kept = []
    for node in list(module.graph.nodes):
        if node.op != "call_function" or not any(
                isinstance(a, torch.fx.Node) and a.op == "get_attr" and a.target in overflowing for a in node.args):
            continue
        kept.append(node.name)
        new_args = []
        for a in node.args:
            if isinstance(a, torch.fx.Node) and not (a.op == "get_attr" and a.target in overflowing) \
                    and _is_float(a):
                with module.graph.inserting_before(node):
                    a = module.graph.call_function(to, (a, torch.float32))
            new_args.append(a)
        node.args = tuple(new_args)
        results = [u for u in node.users if u.target is operator.getitem] \
            if isinstance(node.meta.get("val"), (tuple, list)) else [node]
        for result in results:
            if not _is_float(result):
                continue
            with module.graph.inserting_after(result):
                down = module.graph.call_function(to, (result, torch.float16))
            result.replace_all_uses_with(down, delete_user_cb=lambda user: user is not down)
    return kept


def _is_float(node) -> bool:
    val = node.meta.get("val")
    return getattr(val, "dtype", None) is not None and val.dtype.is_floating_point


def _overflows(tensor) -> bool:
    import torch
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32 or not tensor.numel():
        return False
    magnitude = tensor.detach().abs()
    finite = magnitude[magnitude < INFINITE]
    return bool(finite.numel()) and float(finite.max()) > FLOAT16_MAX


def _held(module, target: str):
    path, _, name = target.rpartition(".")
    return getattr(module.get_submodule(path) if path else module, name, None)


def _put(module, target: str, value) -> None:
    import torch
    path, _, name = target.rpartition(".")
    owner = module.get_submodule(path) if path else module
    if name in owner._parameters:
        owner._parameters[name] = torch.nn.Parameter(value, requires_grad=False)
    elif name in owner._buffers:
        owner._buffers[name] = value
    else:
        setattr(owner, name, value)
