"""References every target is compared against: `torch` (eager fp32) for PyTorch sources, `onnx-reference`
(ONNX Runtime with every graph optimization off) for ONNX sources."""
from __future__ import annotations

import numpy as np

from .. import evidence as ev
from ..ir import Graph, precision_of_dtype
from .base import Target, register
from .onnx_regions import onnx_node_precision
from .ort_common import make_session, run_session


@register
class TorchReference(Target):
    id = "torch"
    label = "PyTorch eager (reference)"
    description = "the PyTorch module run eagerly in fp32: the reference for PyTorch sources"
    evidence = {"assignment": ev.MEASURED, "precision": ev.MEASURED, "numerics": ev.MEASURED}
    is_reference = True
    needs_onnx = False
    from_exported_program = True
    intermediates_method = "torch eager, values recorded at each op by an fx Interpreter"

    def needs_live_source(self, kind):
        return True   # runs the module eagerly

    def accepts(self, captured):
        if captured.source.module is None:
            return False, "the torch reference needs a PyTorch source"
        return True, ""

    def _compile(self, captured, workdir, result):
        import torch
        result.info["torch_version"] = torch.__version__
        return captured.source.module

    def _inspect(self, module, captured, result) -> Graph:
        g = Graph.from_dict(captured.before.to_dict())
        for n in g.nodes:
            n.backend, n.kernel = "cpu", "aten"
            dtypes = [t.dtype for t in n.outputs if t.dtype]
            n.precision = precision_of_dtype(dtypes[0]) if dtypes else None
        return g

    def _run(self, module, inputs, captured, result):
        import torch
        from torch.utils._pytree import tree_leaves
        args = [torch.from_numpy(np.asarray(inputs[s.name], order="C")) for s in captured.source.inputs]
        with torch.no_grad():
            leaves = [x for x in tree_leaves(module(*args)) if isinstance(x, torch.Tensor)]
        if len(leaves) != len(captured.output_names):
            raise RuntimeError(f"the module returned {len(leaves)} tensors, the exported graph has "
                               f"{len(captured.output_names)} outputs")
        return {name: t.detach().numpy() for name, t in zip(captured.output_names, leaves)}

    def _intermediates(self, module, inputs, captured, result, probes):
        """Interprets the captured ExportedProgram's own graph module (lifted parameters and buffers passed as
        inputs, as the program's signature orders them), so recorded node names are exactly `captured.before`'s
        node ids."""
        import torch
        ep = captured.program()
        if ep is None:
            return {}
        wanted = set(probes)
        missing = wanted - {n.name for n in ep.graph.nodes if n.op == "call_function"}
        if missing:
            result.notes.append(f"{len(missing)} probe(s) are not nodes of the ExportedProgram: "
                                + ", ".join(sorted(missing)[:5]))
        user = [torch.from_numpy(np.asarray(inputs[s.name], order="C")) for s in captured.source.inputs]
        args = _lifted_args(ep, user)
        recorded: dict[str, np.ndarray] = {}

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                value = super().run_node(n)
                if n.name in wanted and isinstance(value, torch.Tensor):
                    t = value.detach()
                    if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64):
                        t = t.float()
                    recorded[n.name] = t.clone().numpy()
                return value

        with torch.no_grad():
            Recorder(ep.graph_module).run(*args)
        return recorded


@register
class OnnxReference(Target):
    id = "onnx-reference"
    label = "ONNX Runtime, no optimizations (reference)"
    description = "ONNX Runtime CPU with ORT_DISABLE_ALL: the reference for ONNX sources"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED}
    is_reference = True
    intermediates_method = ("the captured ONNX with the source ops' tensors added as graph outputs, run by ONNX "
                            "Runtime with all graph optimizations off (ORT_DISABLE_ALL)")

    def _compile(self, captured, workdir, result):
        import onnxruntime
        result.info["onnxruntime_version"] = onnxruntime.__version__
        return make_session(captured.onnx_path, "ORT_DISABLE_ALL")

    def _inspect(self, session, captured, result) -> Graph:
        g = Graph.from_dict(captured.onnx_graph.to_dict())
        for n in g.nodes:
            n.backend, n.kernel = "cpu", "CPUExecutionProvider"
            n.precision = onnx_node_precision(n)
        return g

    def _run(self, session, inputs, captured, result):
        return run_session(session, inputs)

    def _intermediates(self, session, inputs, captured, result, probes):
        from .ort_common import onnx_probe_tensors, probe_values
        return probe_values(captured.onnx_path, onnx_probe_tensors(captured, probes), inputs, result)


def _lifted_args(ep, user_inputs: list) -> list:
    """The flat arguments of `ep.graph_module`: parameters, buffers, constants and user inputs in the order of the
    graph signature's input specs."""
    import torch
    from torch.export.graph_signature import InputKind
    user = iter(user_inputs)
    args = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            args.append(next(user))
        elif spec.kind == InputKind.PARAMETER:
            args.append(ep.state_dict[spec.target])
        elif spec.kind == InputKind.BUFFER:
            args.append(ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target])
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            args.append(ep.constants[spec.target])
        elif spec.kind == InputKind.TOKEN:
            args.append(torch.empty(0))
        else:
            raise ValueError(f"unsupported ExportedProgram input kind {spec.kind}")
    return args
