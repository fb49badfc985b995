"""`executorch-coreml`: ExecuTorch with the Core ML delegate (iPhone / Mac: Neural Engine, GPU, CPU), lowered by
`CoreMLPartitioner`.

The partitioner asks coremltools, op by op, whether its torch frontend converts the node
(`ct.converters.mil.frontend.torch.is_torch_fx_node_supported`), minus ops it refuses for known coremltools
defects (executorch/backends/apple/coreml/partition/coreml_partitioner.py, `_UNSUPPORTED_OP_TARGETS`, each with
its upstream issue). Each delegate is then converted by `ct.convert` (CoreMLBackend, compute precision fp16 and
compute units ALL unless its compile specs say otherwise); xc keeps the ML program of each delegate, so the
delegate reads back as MIL ops — comparable op by op with `coreml-ane` (Core ML direct).

This host cannot run Core ML: the partitioning is ExecuTorch's decision (`predicted-runtime`), the compute unit of
each MIL op is predicted by xc's cited rule table (coreml_rules, `predicted-rules`), and the numbers are emulated:
ops outside the delegates run in PyTorch, each delegate's ML program in xc's MIL interpreter with its own dtypes.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ... import evidence as ev
from ...ir import COMPUTE, CONSTANT, Graph, Node
from ..base import register, source_tensors
from ..coreml_rules import CPU, predict
from ..options import DelegateCostOptions, option
from .common import ExecuTorchTarget

# CoreMLBackend's defaults when the partitioner is given no compile specs (executorch/backends/apple/coreml/
# compiler/coreml_preprocess.py: compute precision FLOAT16, compute units ALL).
DEFAULT_PRECISION, DEFAULT_UNITS = "fp16", "ALL"


@dataclass(frozen=True)
class ExecuTorchCoremlOptions(DelegateCostOptions):
    precision: Literal["fp16", "fp32"] = option(
        DEFAULT_PRECISION, help="the delegate's compute precision compile spec: fp16 (CoreMLBackend's default) or "
                                "fp32")


@register
class ExecuTorchCoreML(ExecuTorchTarget):
    id = "executorch-coreml"
    label = "ExecuTorch · Core ML delegate (ANE)"
    description = ("ExecuTorch lowered with the Core ML partitioner; each delegate's ML program read back, units "
                   "predicted by cited rules, numbers emulated")
    evidence = {"assignment": ev.PREDICTED_RUNTIME, "precision": ev.REPORTED, "numerics": ev.EMULATED,
                "fusion": ev.REPORTED}
    accelerator = "Core ML delegate (Apple Neural Engine / GPU)"
    backend_id = "CoreMLBackend"
    ir_backend = "coreml"
    partitioner_name = "CoreMLPartitioner"
    intermediates_method = None
    Options = ExecuTorchCoremlOptions

    @classmethod
    def available(cls):
        ok, why = super().available()
        if not ok:
            return ok, why
        import importlib.util
        if importlib.util.find_spec("coremltools") is None:
            return False, "the Core ML delegate converts with coremltools, which is not installed"
        return True, ""

    @property
    def precision(self) -> str:
        return self.settings.precision

    def _partitioner(self):
        import coremltools as ct
        from executorch.backends.apple.coreml.compiler import CoreMLBackend
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner
        specs = CoreMLBackend.generate_compile_specs(
            compute_precision=ct.precision.FLOAT16 if self.precision == "fp16" else ct.precision.FLOAT32)
        return CoreMLPartitioner(compile_specs=specs)

    @contextlib.contextmanager
    def _reason_recorder(self, reasons, extra):
        """The partitioner's support check, listened to per node; and each delegate's converted ML program."""
        from executorch.backends.apple.coreml.compiler import CoreMLBackend
        from executorch.backends.apple.coreml.partition import coreml_partitioner as cp
        support = cp._OperatorsSupportedForCoreMLBackend
        original_check = support.is_node_supported
        original_convert = CoreMLBackend.__dict__["_convert_to_mlmodel"]
        programs = extra.setdefault("programs", [])

        def is_node_supported(self_, submodules, node):
            ok = original_check(self_, submodules, node)
            if not ok and node.op == "call_function":
                reasons.setdefault(node.name, _refusal(self_, node))
            return ok

        def convert(edge_program, compile_specs, skip_model_load=True):
            mlmodel = original_convert.__func__(edge_program, compile_specs, skip_model_load=skip_model_load)
            names = frozenset(n.name for n in edge_program.graph.nodes if n.op == "call_function")
            programs.append((names, mlmodel._mil_program))
            return mlmodel
        support.is_node_supported = is_node_supported
        CoreMLBackend._convert_to_mlmodel = staticmethod(convert)
        try:
            yield
        finally:
            support.is_node_supported = original_check
            CoreMLBackend._convert_to_mlmodel = original_convert

    def _default_reason(self, node, partitioner) -> str:
        return "left to ExecuTorch's CPU kernels by CoreMLPartitioner (outside every Core ML partition)"

    def _programs(self, compiled) -> dict:
        """Delegate name → the ML program coremltools made of it (matched by the Edge ops it was given)."""
        from ...readers.executorch import lowered_modules
        out = {}
        recorded = compiled.extra.get("programs", [])
        for name, lowered in lowered_modules(compiled.edge):
            ops = frozenset(n.name for n in lowered.original_module.graph.nodes if n.op == "call_function")
            hit = next((p for names, p in recorded if names == ops), None)
            if hit is not None:
                out[name] = hit
        return out

    def _expand(self, compiled, source_index):
        """Each delegate as the MIL ops of its ML program (what Core ML compiles), not its Edge ops."""
        from ...readers.executorch import source_origin
        from ...readers.mil import attach_source_ops, mil_ir_graph
        programs = self._programs(compiled)
        if not programs:
            return None

        def expand(reader, g: Graph, module_name, lowered, args, outs, backend):
            prog = programs.get(module_name)
            if prog is None:       # no program recorded: the Edge ops stand for the delegate
                reader.expand_edge(g, module_name, lowered, args, outs, backend)
                return
            mil = mil_ir_graph(prog, "mil-delegate", debug_handles=True)
            sub = lowered.original_module
            index = source_index
            known = set(index)
            names = {n.name: o for n in sub.graph.nodes if n.op == "call_function"
                     and (o := source_origin(n, known))}
            by_handle = {n.meta["debug_handle"]: names[n.name] for n in sub.graph.nodes
                         if n.name in names and isinstance(n.meta.get("debug_handle"), int)}
            attach_source_ops(mil, names, index)
            for n in mil.nodes:
                # coremltools keeps each op's ExecuTorch debug handles: the Edge nodes it came from (fusions keep
                # the handle of the op they fused into).
                origins = [by_handle[h] for h in n.attributes.get("debug_handles", []) if h in by_handle]
                if origins:
                    n.source_ops = list(dict.fromkeys(origins))
                    src = index.get(n.source_ops[-1])
                    if src is not None:
                        n.module_path, n.source_location = src.module_path, src.source_location
            _mark_fusions(mil, sub, module_name, names)
            rename = {t.name: a for t, a in zip(mil.inputs, args)}
            rename.update({t.name: outs[i] for i, t in enumerate(mil.outputs) if i in outs})
            for n in mil.nodes:
                n.id = f"{module_name}/{n.id}"
                for t in n.inputs + n.outputs:
                    t.name = rename.get(t.name) or f"{module_name}/{t.name}"
                n.backend, n.kernel = (backend, f"{module_name} (CoreMLBackend)")
                n.attributes["delegate"] = module_name
                g.nodes.append(n)
        return expand

    def _inspect(self, compiled, captured, result):
        g = super()._inspect(compiled, captured, result)
        result.info["delegate_programs"] = "ML program per delegate (the MIL ops Core ML compiles)" \
            if self._programs(compiled) else "none recorded: delegates shown as their Edge ops"
        self._place(g, result)
        import coremltools
        result.info["coremltools_version"] = coremltools.__version__
        result.info["conversion"] = ("ExecuTorch's CoreMLBackend: ct.convert of each delegate's Edge program "
                                     f"(compute precision {self.precision})")
        mil = [n for n in g.nodes if n.domain == "mil" and n.kind != CONSTANT]
        result.info["mil_ops_after"] = len(mil)
        casts = [n for n in mil if n.op_type == "cast"]
        result.info["casts"] = {"count": len(casts), "by_type": _cast_pairs(casts)}
        return g

    def _place(self, g: Graph, result) -> None:
        """The compute unit each MIL op of a delegate would probably get (coreml_rules, predicted-rules)."""
        units: dict[str, int] = {}
        for n in g.nodes:
            if n.domain != "mil" or n.kind == CONSTANT:
                continue
            dtype = n.outputs[0].dtype if n.outputs else None
            p = predict(n.op_type, {"float16": "fp16", "float32": "fp32"}.get(dtype or "", dtype), DEFAULT_UNITS,
                        n.attributes)
            n.attributes["predicted_unit"], n.attributes["unit_reason"] = p.unit, p.reason
            n.attributes["unit_source"] = p.source
            if n.kind == COMPUTE:
                units[p.unit] = units.get(p.unit, 0) + 1
        total = sum(units.values())
        if total:
            result.compute_units = {"share": {k: round(v / total, 4) for k, v in sorted(units.items())},
                                    "counts": units, "evidence": ev.PREDICTED_RULES,
                                    "unknown_ops": [], "scope": "the MIL ops inside the Core ML delegates"}
            result.info["ops_predicted_on_cpu_inside_delegates"] = units.get(CPU, 0)

    def _set_precisions(self, g, result) -> None:
        super()._set_precisions(g, result)
        result.declared_precisions = ["fp16"] if self.precision == "fp16" else []

    def _run(self, compiled, inputs, captured, result):
        programs = self._programs(compiled)
        missing = [name for name, _ in _lowered(compiled) if name not in programs]
        if missing:
            result.numerics_not_run = (f"not emulated: no ML program was recorded for {', '.join(missing)}; the "
                                       "partitioning stands")
            return {}
        result.numerics_assumption = (
            f"emulated: ops outside the delegates run in PyTorch (fp32); each Core ML delegate's ML program runs in "
            f"xc's MIL interpreter with its own dtypes ({self.precision}); Core ML's kernels on the device may round "
            "differently")
        return _emulate(compiled.edge, programs, inputs, captured)


def _mark_fusions(mil: Graph, sub, module_name: str, origin: dict[str, str]) -> None:
    """Which Edge ops each MIL op of a delegate computes. coremltools keeps one debug handle per op, so an op a
    pass fused away (the convolution `fuse_conv_batchnorm` folds into its batch norm) is claimed by no MIL op: it
    belongs to the op that computes its first claimed consumer. An op that computes two or more Edge ops is a
    fusion (`fused_from`: those Edge nodes, ids as in the Edge program's graph)."""
    import operator
    edge = [n for n in sub.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
    by_handle = {n.meta["debug_handle"]: n.name for n in edge if isinstance(n.meta.get("debug_handle"), int)}
    claimed: dict[str, Node] = {}
    for m in mil.nodes:
        if m.kind == COMPUTE:
            for h in m.attributes.get("debug_handles", []):
                if h in by_handle:
                    claimed.setdefault(by_handle[h], m)
    for e in edge:
        if e.name in claimed:
            continue
        frontier, seen = list(e.users), set()
        while frontier:
            u = frontier.pop(0)
            if u.name in seen:
                continue
            seen.add(u.name)
            if u.name in claimed:
                claimed[e.name] = claimed[u.name]
                break
            frontier.extend(u.users)
    members: dict[int, list[str]] = {}
    for e in edge:                                   # in program order
        if e.name in claimed:
            members.setdefault(id(claimed[e.name]), []).append(e.name)
    for m in mil.nodes:
        names = members.get(id(m), [])
        if len(names) < 2:
            continue
        m.fused_from = [f"{module_name}/{x}" for x in names]
        m.source_ops = list(dict.fromkeys(origin[x] for x in names if x in origin)) or m.source_ops
        passes = m.attributes.get("passes") or []
        m.attributes["fused_by"] = [p for p in passes if p.startswith("fuse")] or passes


def _cast_pairs(casts) -> dict:
    pairs: dict[str, int] = {}
    for c in casts:
        key = f"{c.inputs[0].dtype if c.inputs else '?'}→{c.outputs[0].dtype if c.outputs else '?'}"
        pairs[key] = pairs.get(key, 0) + 1
    return pairs


def _lowered(compiled):
    from ...readers.executorch import lowered_modules
    return lowered_modules(compiled.edge)


def _emulate(edge, programs: dict, inputs: dict, captured) -> dict:
    """The partitioned program run by torch.fx's Interpreter, each delegate call replaced by its ML program."""
    import torch
    from torch.utils._pytree import tree_leaves

    from ...emulate.mil_interpreter import run_program
    from ...readers.executorch import DELEGATE_CALL
    module = edge.module()
    by_id = {id(getattr(module, name, None)): name for name in programs}

    class Emulator(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if getattr(target, "__name__", "") != DELEGATE_CALL:
                return super().call_function(target, args, kwargs)
            name = by_id.get(id(args[0]))
            if name is None:
                raise RuntimeError("a delegate call xc has no ML program for")
            prog = programs[name]
            fn = prog.functions["main"]
            feeds = {k: _np(v) for k, v in zip(fn.inputs, args[1:])}
            outs, _ = run_program(prog, feeds, record=False)
            return tuple(torch.from_numpy(np.asarray(outs[v.name]).astype(np.float32)
                                          if np.asarray(outs[v.name]).dtype == np.float16 else
                                          np.asarray(outs[v.name])) for v in fn.outputs)

    args = source_tensors(inputs, captured)
    with torch.no_grad():
        result = Emulator(module).run(*args)
    leaves = [x for x in tree_leaves(result) if isinstance(x, torch.Tensor)]
    return {name: t.detach().numpy() for name, t in zip(captured.output_names, leaves)}


def _np(v):
    import torch
    if isinstance(v, torch.Tensor):
        a = v.detach().numpy()
        if a.ndim == 0:
            a = a.reshape(1)    # coremltools gives a 0-d input a (1,) shape ("…_wrapped_as_tensor_for_coreml")
        return a.astype(np.int32) if a.dtype == np.int64 else a
    return v


def _refusal(check, node) -> str:
    """Why CoreMLPartitioner refused a node, in the partitioner's own terms."""
    from executorch.backends.apple.coreml.partition import coreml_partitioner as cp

    from ...readers.executorch import op_name
    name = getattr(node.target, "__name__", "").lower()
    if name in (check.skip_ops_for_coreml_delegation or []):
        return f"{op_name(node.target)} is in the partitioner's skip_ops_for_coreml_delegation"
    if node.target in cp._UNSUPPORTED_OP_TARGETS:
        return (f"CoreMLPartitioner refuses {op_name(node.target)}: a known coremltools defect "
                "(its _UNSUPPORTED_OP_TARGETS list)")
    if cp._is_arg_min_max_over_flattened_input(node):
        return "argmax/argmin over the flattened input is not supported by Core ML (executorch issue 11715)"
    if "alpha" in node.kwargs and node.kwargs["alpha"] != 1:
        return "add/sub with alpha ≠ 1 is not supported by Core ML (coremltools issue 2573)"
    return f"coremltools has no converter for {op_name(node.target)} (its is_torch_fx_node_supported)"
