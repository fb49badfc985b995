"""What the ExecuTorch targets share: the captured ExportedProgram lowered by ExecuTorch's own
`to_edge_transform_and_lower` with one backend's partitioner, `.to_executorch()` writing the .pte, the partitioned
program read back (readers/executorch.py), each op the partitioner left out with the partitioner's own reason, and
the delegate ↔ CPU boundaries with the latency-cliff estimate the ORT mobile EPs get.

ExecuTorch's flow (pytorch.org/executorch, "Exporting and lowering"): torch.export → `to_edge` (the Edge dialect:
Core ATen, decomposed except the ops a partitioner asks to keep whole) → partitioning (each supported subgraph
becomes one delegate, `executorch_call_delegate`) → `to_executorch` (memory planning, the .pte). Ops outside every
delegate run on ExecuTorch's CPU kernels (the portable library, or the optimized one where a build links it).
"""
from __future__ import annotations

import abc
import contextlib
import copy
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ... import evidence as ev
from ...analysis.boundaries import boundaries
from ...ir import ALIAS, COMPUTE, Graph
from ...lowering import FINAL, GRAPH_OPT, IMPORT, INPUT, KERNEL, graph_step
from ...readers.executorch import ProgramReader, is_delegate_call, lowered_modules, op_name
from ..base import RUN_KEY, CostRunner, Target, dist_version, needs_exported_program, source_tensors
from ..options import DelegateCostOptions
from ..pins import install_hint

CPU_KERNELS = "ExecuTorch CPU kernels"


@dataclass
class ExecuTorchCompiled:
    """What lowering hands on to read-back and run."""
    edge: Any                        # the partitioned Edge program (EdgeProgramManager.exported_program())
    pte_path: str                    # the .pte to_executorch wrote
    reasons: dict[str, str]          # Edge node name → why the partitioner left it out, in its own words
    plan: dict                       # the .pte's execution plan: operators, delegates, instructions
    partitioner: Any = None          # the partitioner instance (its configs say what it could take)
    extra: dict = field(default_factory=dict)    # per-backend: Core ML's ML programs per delegate


class ExecuTorchTarget(Target):
    """One ExecuTorch backend. A subclass names its partitioner, its backend id and how it explains a refusal."""
    steps_caption = "ExecuTorch: the Edge program, the partitioner's delegates, the .pte's execution plan."
    # exir's import (the edge dialect's YAML, its passes) is most of an ExecuTorch worker's start
    worker_modules = ("executorch.exir",)
    needs_onnx = False
    takes_program = True
    from_exported_program = True
    relative_cost = 3            # to_edge + partitioning + to_executorch: seconds even on tiny models
    backend_id: ClassVar[str]    # ExecuTorch's name of the backend (XnnpackBackend)
    ir_backend: ClassVar[str]    # what the IR calls the delegate's device (xnnpack, vulkan, coreml)
    partitioner_name: ClassVar[str]
    runs_here: ClassVar[bool] = False
    # Where the backend fuses ops out of xc's sight (inside a delegate, when it compiles it), said in the report.
    fusions_inside_delegates: ClassVar[str | None] = None
    Options = DelegateCostOptions

    @classmethod
    def available(cls):
        if importlib.util.find_spec("executorch") is None:
            return False, f"ExecuTorch is not installed ({install_hint('executorch')})"
        return True, ""

    def accepts(self, captured):
        return needs_exported_program(captured, "ExecuTorch lowers")

    # -- hooks a backend fills -----------------------------------------------------------------------------
    @abc.abstractmethod
    def _partitioner(self):
        """The backend's ExecuTorch partitioner, configured by this target's options."""

    @contextlib.contextmanager
    def _reason_recorder(self, reasons: dict[str, str], extra: dict):
        """While lowering: collect the partitioner's reasons (Edge node name → reason) into `reasons`."""
        yield

    def _default_reason(self, node, partitioner) -> str:
        return f"left to the {CPU_KERNELS} by {self.partitioner_name} (it gave no reason)"

    def _program_to_lower(self, captured, result):
        """The ExportedProgram handed to ExecuTorch (a variant may quantize it first, calibrating on
        `self.calibration_inputs`)."""
        return captured.program()

    # -- compile ---------------------------------------------------------------------------------------------
    def _compile(self, captured, workdir, result):
        import executorch
        from executorch.exir import to_edge_transform_and_lower

        from ...quiet import quiet_coremltools, quiet_torch
        os.makedirs(workdir, exist_ok=True)
        result.info["executorch_version"] = getattr(executorch, "__version__", None) or dist_version("executorch")
        ep = self._program_to_lower(captured, result)
        partitioner = self._partitioner()
        reasons: dict[str, str] = {}
        extra: dict = {}
        with quiet_torch(), quiet_coremltools(), self._reason_recorder(reasons, extra):
            lowered = to_edge_transform_and_lower(ep, partitioner=[partitioner])
            # to_executorch rewrites the partitioned program in place (out-variants, memory planning): keep the
            # program as the partitioner left it, for read-back and emulation.
            edge = copy.deepcopy(lowered.exported_program())
            program = lowered.to_executorch()
        pte = os.path.join(workdir, "model.pte")
        with open(pte, "wb") as f:
            f.write(program.buffer)
        result.artifacts.append(pte)
        result.info["pte_bytes"] = os.path.getsize(pte)
        result.info["partitioner"] = self.partitioner_name
        if self.fusions_inside_delegates:
            result.info["fusions_inside_delegates"] = self.fusions_inside_delegates
        # Which program node each instruction runs, for reading an ETDump back (profiling) by instruction id.
        extra["instructions"] = _instructions(program, edge)
        return ExecuTorchCompiled(edge=edge, pte_path=pte, reasons=reasons,
                                  plan=_execution_plan(program), partitioner=partitioner, extra=extra)

    # -- inspect ---------------------------------------------------------------------------------------------
    def _expand(self, compiled, source_index: dict):
        """How delegates are expanded in the final graph: None for their Edge ops, or a function
        (reader, graph, module name, lowered module, argument names, output names, backend) that appends the
        delegate's nodes (see ProgramReader)."""
        return None

    def _inspect(self, compiled, captured, result) -> Graph:
        index = captured.before.by_id()
        reader = ProgramReader(compiled.edge, index, {self.backend_id: self.ir_backend}, cpu_kernel=CPU_KERNELS)
        edge_graph = reader.graph(captured.source.name, "executorch-edge")
        expand = self._expand(compiled, index)
        if expand is None:
            final = Graph.from_dict(edge_graph.to_dict())
            final.stage = "executorch-partitioned"
            delegates = reader.delegates
        else:
            reader = ProgramReader(compiled.edge, index, {self.backend_id: self.ir_backend}, cpu_kernel=CPU_KERNELS)
            final = reader.graph(captured.source.name, "executorch-partitioned", expand=expand)
            delegates = reader.delegates
        self._fold_delegate_fusions(final, compiled)
        edge_nodes = {n.name: n for n in compiled.edge.graph.nodes}
        for n in final.nodes:
            if n.backend == "cpu" and n.kind == COMPUTE:
                n.fallback = True
                n.fallback_reason = compiled.reasons.get(n.id) or self._default_reason(edge_nodes.get(n.id),
                                                                                      compiled.partitioner)
        self._set_precisions(final, result)
        # The Edge program before partitioning: the same ops, no device yet (what the partitioner was given).
        for n in edge_graph.nodes:
            n.backend, n.kernel, n.fallback, n.fallback_reason = None, None, False, None
            n.attributes.pop("delegate", None)
        result.input_graph = edge_graph
        result.partitioning = self._partitioning(final, delegates, compiled)
        b = boundaries(final, *self._cost_model())
        b["evidence"] = result.evidence["assignment"]
        result.boundaries = b
        plan = compiled.plan
        result.info["execution_plan"] = plan
        result.stages += [
            graph_step(IMPORT, self._import_step_name(), captured.before),
            graph_step(GRAPH_OPT, "Edge dialect (to_edge: Core ATen ops, decomposed except what the partitioner "
                                  "keeps whole)", edge_graph, ref=INPUT),
            graph_step(KERNEL, f"to_executorch: the .pte's execution plan — {plan['delegate_calls']} delegate "
                               f"call(s), {plan['kernel_calls']} CPU kernel call(s)", final, ref=FINAL,
                       delegate_calls=plan["delegate_calls"], kernel_calls=plan["kernel_calls"]),
        ]
        return final

    def _fold_delegate_fusions(self, g: Graph, compiled) -> None:
        """A backend that knows which of a delegate's Edge ops it fused into another folds them here (in place)."""

    def _import_step_name(self) -> str:
        return "the captured ExportedProgram (torch.export)"

    def _set_precisions(self, g: Graph, result) -> None:
        from ...ir import precision_of_dtype
        for n in g.nodes:
            if n.precision is None:
                # An op returning a tuple (batch norm's output and saved statistics) has no one dtype: its input's.
                dtypes = [t.dtype for t in n.outputs + n.inputs if t.dtype]
                n.precision = precision_of_dtype(dtypes[0]) if dtypes else None

    def _partitioning(self, g: Graph, delegates: list[dict], compiled) -> dict:
        compute = [n for n in g.nodes if n.kind == COMPUTE]
        on_cpu = [n for n in compute if n.backend == "cpu"]
        sizes = [sum(1 for nid in d["nodes"] if nid in {n.id for n in compute}) for d in delegates]
        return {
            "ep": self.backend_id,
            "decided_by": f"ExecuTorch's {self.partitioner_name}",
            "num_nodes": len(compute),
            "num_supported_nodes": len(compute) - len(on_cpu),
            "num_partitions": len(delegates),
            "partition_sizes": sizes,
            "delegates": [{k: d[k] for k in ("name", "backend_id", "processed_bytes")} | {"ops": s}
                          for d, s in zip(delegates, sizes)],
            "unsupported_ops": sorted({n.attributes.get("target") or n.op_type for n in on_cpu}),
            "accelerated_share_nodes": round((len(compute) - len(on_cpu)) / len(compute), 4) if compute else 0.0,
            "evidence": self.evidence["assignment"],
        }

    def _cost_model(self) -> tuple[float, float]:
        return float(self.settings.bandwidth_gb_s), float(self.settings.transition_overhead_ms)

    # -- run -------------------------------------------------------------------------------------------------
    def _run(self, compiled, inputs, captured, result):
        """Backends this host cannot run say so; their figures stay the partitioner's decision."""
        result.numerics_not_run = self._not_run_reason()
        return {}

    def _not_run_reason(self) -> str:
        return f"ExecuTorch's {self.backend_id} runtime is not available on this host"

    # -- cost (targets/run_cost.py) --------------------------------------------------------------------------
    def _cost_runner(self, compiled, inputs, captured):
        if not self.runs_here:
            return None

        def load():
            from executorch.runtime import Runtime
            method = Runtime.get().load_program(compiled.pte_path).load_method("forward")
            args = source_tensors(inputs, captured)
            return lambda: method.execute(args)
        return CostRunner(load=load, load_what=(
            "ExecuTorch's runtime loading the .pte and its forward method (Runtime.load_program, load_method: "
            "delegates build their runtime there); the analysis run loads it inside its run, so that is timed apart"))

    def _runtime_memory(self, compiled, result):
        sizes = compiled.plan.get("memory_plan") or []
        return [{"name": f"memory-planned buffer {i}", "bytes": n,
                 "what": "activations and other non-constant tensors of the forward method, as ExecuTorch's memory "
                         "planning laid them out (the runtime allocates exactly this; delegates' own scratch memory "
                         "is not in it)",
                 "by": "ExecuTorch's memory planning (to_executorch), the .pte's execution plan",
                 "evidence": ev.REPORTED} for i, n in enumerate(sizes, start=1)]


def module_for_pt2e(ep, args: tuple, check_guards: bool = True):
    """The program's module for PT2E quantization. A program converted from TorchScript (TS2EPConverter) holds every
    weight as a buffer; PT2E folds batch norm into the convolution by registering the folded weight as a parameter
    of the same name (torchao's fold_bn_weights_into_conv_node), which fails with "attribute 'weight' already
    exists" — so weights and biases held as buffers become parameters again, as the nn.Module had them, and the
    module is exported once more (the converter's nodes lack what the Arm backend's passes read: its mean.dim
    decomposition took a converted mean for a dynamic one)."""
    import torch
    module = ep.module() if check_guards else ep.module(check_guards=False)
    moved = 0
    for name, tensor in list(module.named_buffers()):
        prefix, _, leaf = name.rpartition(".")
        if leaf in ("weight", "bias") and tensor.is_floating_point():
            owner = module.get_submodule(prefix) if prefix else module
            del owner._buffers[leaf]
            owner.register_parameter(leaf, torch.nn.Parameter(tensor, requires_grad=False))
            moved += 1
    if not moved:
        return module
    again = torch.export.export(module, args)
    return again.module() if check_guards else again.module(check_guards=False)


def quantize_pt2e(captured, quantizer, calibration_inputs: dict | None, result, flow: str,
                  check_guards: bool = True):
    """ExecuTorch's PT2E int8 flow, shared by the quantizing targets: prepare_pt2e with the backend's quantizer,
    calibration on the inputs this run uses (zeros where none were given), convert_pt2e, torch.export again. The
    result records the declared int8 precision and how it was quantized (`flow`: the quantizer's words)."""
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from ...quiet import quiet_torch
    inputs = calibration_inputs or {}
    args = tuple(torch.from_numpy(inputs[s.name].copy()) if s.name in inputs else
                 torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in captured.source.inputs)
    with quiet_torch():
        prepared = prepare_pt2e(module_for_pt2e(captured.program(), args, check_guards), quantizer)
        prepared(*args)                              # calibration: observers see the run's own inputs
        quantized = torch.export.export(convert_pt2e(prepared), args)
    result.declared_precisions = ["int8"]
    result.info["quantization"] = {
        "flow": f"PT2E: {flow} → prepare_pt2e → calibrate → convert_pt2e → torch.export",
        "calibration": "the inputs this run uses" if inputs else "zeros (no inputs were given)"}
    return quantized


@contextlib.contextmanager
def reasons_from(owner, method: str, reasons: dict[str, str]):
    """While lowering: a partitioner's `owner.method(self, node, reason)` — the call it makes to explain a node it
    leaves out — also records the reason under the node's name (the first one given); put back afterwards."""
    original = getattr(owner, method)

    def explain(self_, node, reason):
        reasons.setdefault(node.name, reason)
        return original(self_, node, reason)
    setattr(owner, method, explain)
    try:
        yield
    finally:
        setattr(owner, method, original)


def registered_operators() -> list[str]:
    """The CPU kernels ExecuTorch's runtime on this host has ('aten::mean.out')."""
    try:
        from executorch.extension.pybindings.portable_lib import _get_operator_names
    except ImportError:
        return []
    return list(_get_operator_names())


def run_pte(pte_path: str, inputs: dict, captured, operators: list[str]) -> dict:
    """The .pte run by ExecuTorch's runtime on this host (its Python bindings): output name → numpy array."""
    import torch
    from executorch.runtime import Runtime
    from torch.utils._pytree import tree_leaves
    runtime = Runtime.get()
    registered = set(registered_operators())
    missing = sorted(set(operators) - registered) if registered else []
    if missing:
        # The runtime only says "Failed to load method forward, error: 0x14": name the kernels it lacks.
        raise RuntimeError(f"ExecuTorch's runtime on this host has no kernel for {', '.join(missing)} (the .pte "
                           "calls it outside every delegate)")
    method = runtime.load_program(pte_path).load_method("forward")
    args = source_tensors(inputs, captured)
    outs = [x for x in tree_leaves(method.execute(args)) if isinstance(x, torch.Tensor)]
    return {name: t.detach().numpy() for name, t in zip(captured.output_names, outs)}


def _instructions(program, edge) -> dict:
    """(chain, instruction index) → what that instruction runs: a CPU kernel call with the program node it runs
    (`node`, None when to_executorch added the call itself), or a delegate call with its lowered module's name.

    The emitter writes one DelegateCall per `executorch_call_delegate` node, in graph order, and maps each
    instruction to the debug handles of the nodes it came from (`ExecutorchProgramManager.debug_handle_map`,
    exir/emit/_emitter.py). A kernel call is matched to the unused top-level node with one of those handles and the
    same operator ("aten::mean.out" runs "aten.mean.dim"); without handles, the next node of that operator."""
    import operator as _operator
    plan = program.executorch_program.execution_plan[0]
    operators = [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators]
    handle_map = (getattr(program, "debug_handle_map", None) or {}).get(plan.name) or {}
    modules = [name for name, _ in lowered_modules(edge)]
    candidates = [n for n in edge.graph.nodes if n.op == "call_function" and not is_delegate_call(n)
                  and n.target is not _operator.getitem]
    used: set[str] = set()
    out: dict = {}
    delegate_calls = 0
    for ci, chain in enumerate(plan.chains):
        for ii, ins in enumerate(chain.instructions):
            args = ins.instr_args
            kind = type(args).__name__
            if kind == "DelegateCall":
                module = modules[delegate_calls] if delegate_calls < len(modules) else None
                delegate_calls += 1
                out[(ci, ii)] = {"call": "delegate", "module": module}
            elif kind == "KernelCall":
                op = operators[args.op_index]
                handles = handle_map.get(ii)
                handles = set(handles if isinstance(handles, (list, tuple)) else [handles]) - {None}
                node = next((n for n in candidates if n.name not in used and _same_operator(op, n.target)
                             and (not handles or n.meta.get("debug_handle") in handles)), None)
                if node is not None:
                    used.add(node.name)
                out[(ci, ii)] = {"call": "kernel", "operator": op, "node": node.name if node is not None else None}
    return out


def _same_operator(kernel: str, target) -> bool:
    """Whether a kernel call ("aten::mean.out") runs an Edge op ("aten.mean.dim"): the same namespace and op.
    to_executorch runs a memory-planned view_copy as executorch_prim::et_view
    (exir/passes/replace_view_copy_with_view_pass.py)."""
    kernel_op = kernel.split(".")[0]
    parts = op_name(target).split(".")
    edge_op = "::".join(parts[:2]) if len(parts) >= 2 else op_name(target)
    return kernel_op == edge_op or (kernel_op == "executorch_prim::et_view" and edge_op == "aten::view_copy")


def profile_pte(pte_path: str, inputs: dict, captured, instructions: dict, runs: int,
                delegate_ops=None) -> dict[str, list[float]]:
    """The .pte loaded again by ExecuTorch's runtime with an ETDump (the same compiled program, nothing lowered
    again), run once to warm up and `runs` times more; the ETDump read back: node id → µs in each run.

    What the ETDump holds (runtime/executor/method.cpp): one "Execute" event block per Method::execute with a
    "Method::execute" event (the whole run), per CPU kernel call an "OPERATOR_CALL" event around the kernel's own
    "native_call_<op>" event (codegen/gen.py), per delegate call a "DELEGATE_CALL" event, and the events the
    delegate logs itself (event_tracer_log_profiling_delegate) inside it. `delegate_ops(module, names)` names the
    node each delegate event belongs to (None: none). What belongs to no node — the runtime's glue around a
    kernel, a delegate call's time outside its logged events, events of no node — keeps a key of its own."""
    import tempfile

    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc
    from executorch.extension.pybindings.portable_lib import _load_for_executorch
    module = _load_for_executorch(pte_path, enable_etdump=True, debug_buffer_size=0)
    args = tuple(source_tensors(inputs, captured))
    for _ in range(runs + 1):
        module.run_method("forward", args)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "profile.etdump")
        module.write_etdump_result_to_file(path)
        with open(path, "rb") as f:
            dump = deserialize_from_etdump_flatcc(f.read())
    executions = [block for block in dump.run_data if block.name == "Execute"][1:]     # the warm-up run left out
    samples: dict[str, list[float]] = {}
    for block in executions:
        for key, us in _one_run(block, instructions, delegate_ops).items():
            samples.setdefault(key, []).append(us)
    return samples


def _one_run(block, instructions: dict, delegate_ops) -> dict[str, float]:
    """One "Execute" block's events → key → µs (the ticks of ExecuTorch's Linux PAL are nanoseconds)."""
    kernel: dict = {}
    operator_call: dict = {}
    delegate_call: dict = {}
    delegated: dict = {}
    times: dict[str, float] = {}

    def add(key, us):
        times[key] = times.get(key, 0.0) + us
    for event in block.events:
        p = event.profile_event
        if p is None:
            continue
        us = (p.end_time - p.start_time) / 1000.0
        where = (p.chain_index, p.instruction_id)
        if p.name == "Method::execute":
            add(RUN_KEY, us)
        elif p.delegate_debug_id_str or (p.delegate_debug_id_int not in (None, -1) and not p.name):
            delegated.setdefault(where, []).append((p.delegate_debug_id_str or str(p.delegate_debug_id_int), us))
        elif p.name == "DELEGATE_CALL":
            delegate_call[where] = delegate_call.get(where, 0.0) + us
        elif p.name == "OPERATOR_CALL":
            operator_call[where] = operator_call.get(where, 0.0) + us
        elif p.name and p.name.startswith("native_call_"):
            kernel[where] = kernel.get(where, 0.0) + us
    for where, us in kernel.items():
        ins = instructions.get(where) or {}
        add(ins.get("node") or f"<kernel call {where[1]}: {ins.get('operator', '?')}>", us)
        add("<ExecuTorch: operator-call glue around the kernels>", max(operator_call.get(where, us) - us, 0.0))
    for where, us in delegate_call.items():
        name = (instructions.get(where) or {}).get("module") or f"delegate call {where[1]}"
        ops = delegated.get(where, [])
        owners = delegate_ops(name, [n for n, _ in ops]) if delegate_ops and ops else [None] * len(ops)
        for (op, op_us), owner in zip(ops, owners):
            add(owner or f"<{name}: {op}>", op_us)
        add(f"<{name}: delegate call outside its logged operators>", max(us - sum(u for _, u in ops), 0.0))
    return times


def _execution_plan(program) -> dict:
    """What the .pte runs, in order: each instruction a delegate call (by backend) or a CPU kernel call (by
    operator, e.g. aten::mean.out)."""
    plan = program.executorch_program.execution_plan[0]
    operators = [f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators]   # aten::mean.out
    delegates = [d.id for d in plan.delegates]
    calls = []
    for chain in plan.chains:
        for ins in chain.instructions:
            args = ins.instr_args
            kind = type(args).__name__
            if kind == "KernelCall":
                calls.append({"call": "kernel", "operator": operators[args.op_index]})
            elif kind == "DelegateCall":
                calls.append({"call": "delegate", "backend": delegates[args.delegate_index]})
    return {"operators": operators, "delegates": delegates, "calls": calls,
            # the memory-planned buffers' sizes (entry 0 is the runtime's reserved placeholder): the cost block's
            # figure of ExecuTorch's own for the memory the method needs besides its constants
            "memory_plan": [int(n) for n in plan.non_const_buffer_sizes[1:]],
            "delegate_calls": sum(c["call"] == "delegate" for c in calls),
            "kernel_calls": sum(c["call"] == "kernel" for c in calls)}


def fold_into_runners(g, module: str, runs_something: set[str]) -> None:
    """A delegate's nodes that run nothing of their own on the backend (not in `runs_something`) folded into the
    one that runs them: the node producing their input inside the delegate (XNNPACK fuses batch norm and
    activations into their producer, FuseBatchNormPass and FuseActivationPass in backends/xnnpack/_passes/; the Arm
    backend folds a ReLU into the convolution's rescale), else the one consuming their output (a weight permute
    folded into the linear). The anchor lists them in `fused_from` and takes their outputs."""
    members = [n for n in g.nodes if n.attributes.get("delegate") == module]
    producer = {t.name: n for n in members for t in n.outputs}
    anchor: dict[str, str] = {n.id: n.id for n in members if n.id in runs_something}
    for n in members:                                        # graph order: producers first
        if n.id not in anchor:
            src = next((anchor[p.id] for t in n.inputs if (p := producer.get(t.name)) is not None
                        and p.id in anchor), None)
            if src is not None:
                anchor[n.id] = src
    for n in reversed(members):                               # what is left: folded into a consumer
        if n.id not in anchor:
            dst = next((anchor[c.id] for c in members if c.id in anchor and
                        {t.name for t in c.inputs} & {t.name for t in n.outputs}), None)
            if dst is not None:
                anchor[n.id] = dst
    groups: dict[str, list] = {}
    for n in members:
        if n.id in anchor and anchor[n.id] != n.id:
            groups.setdefault(anchor[n.id], []).append(n)
    if not groups:
        return
    by_id = g.by_id()
    gone = {n.id for absorbed in groups.values() for n in absorbed}
    for head_id, absorbed in groups.items():
        head = by_id[head_id]
        group = [head] + absorbed
        ids = {n.id for n in group}
        inside = {t.name for n in group for t in n.outputs}
        used_outside = {t.name for n in g.nodes if n.id not in ids for t in n.inputs} | {t.name for t in g.outputs}
        head.fused_from = [n.id for n in g.nodes if n.id in ids]
        head.inputs = [t for n in group for t in n.inputs if t.name not in inside]
        head.outputs = [t for n in group for t in n.outputs if t.name in used_outside] or head.outputs
        for n in absorbed:
            head.source_ops += [s for s in n.source_ops if s not in head.source_ops]
        if head.kind == ALIAS and any(n.kind == COMPUTE for n in absorbed):
            head.kind = COMPUTE
    g.nodes = [n for n in g.nodes if n.id not in gone]


__all__ = ["CPU_KERNELS", "ExecuTorchCompiled", "ExecuTorchTarget", "ev", "fold_into_runners", "op_name", "run_pte"]
