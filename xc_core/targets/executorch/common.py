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
from ...analysis.boundaries import (
    DEFAULT_BANDWIDTH_GB_S,
    DEFAULT_TRANSITION_OVERHEAD_MS,
    boundaries,
)
from ...ir import COMPUTE, Graph
from ...lowering import FINAL, GRAPH_OPT, IMPORT, INPUT, KERNEL, graph_step
from ...readers.executorch import ProgramReader, op_name
from ..base import Target, dist_version, needs_exported_program, source_tensors

CPU_KERNELS = "ExecuTorch CPU kernels"
EXECUTORCH_VERSION_PINNED = "1.5.1"


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
    option_names: ClassVar[tuple[str, ...]] = ("bandwidth_gb_s", "transition_overhead_ms")
    option_help = {"bandwidth_gb_s": "copy bandwidth at a delegate↔CPU boundary, for the latency-cliff estimate "
                                     "(GB/s, default 4)",
                   "transition_overhead_ms": "fixed cost per boundary crossing, for the estimate (ms, default 0.2)"}

    @classmethod
    def available(cls):
        if importlib.util.find_spec("executorch") is None:
            return False, f"ExecuTorch is not installed (pip install executorch=={EXECUTORCH_VERSION_PINNED})"
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
        return (float(self.options.get("bandwidth_gb_s", DEFAULT_BANDWIDTH_GB_S)),
                float(self.options.get("transition_overhead_ms", DEFAULT_TRANSITION_OVERHEAD_MS)))

    # -- run -------------------------------------------------------------------------------------------------
    def _run(self, compiled, inputs, captured, result):
        """Backends this host cannot run say so; their figures stay the partitioner's decision."""
        result.numerics_not_run = self._not_run_reason()
        return {}

    def _not_run_reason(self) -> str:
        return f"ExecuTorch's {self.backend_id} runtime is not available on this host"


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
            "delegate_calls": sum(c["call"] == "delegate" for c in calls),
            "kernel_calls": sum(c["call"] == "kernel" for c in calls)}


__all__ = ["CPU_KERNELS", "ExecuTorchCompiled", "ExecuTorchTarget", "ev", "op_name", "run_pte"]
