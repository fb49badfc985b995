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
        args = [torch.from_numpy(np.ascontiguousarray(inputs[s.name])) for s in captured.source.inputs]
        with torch.no_grad():
            leaves = [x for x in tree_leaves(module(*args)) if isinstance(x, torch.Tensor)]
        if len(leaves) != len(captured.output_names):
            raise RuntimeError(f"the module returned {len(leaves)} tensors, the exported graph has "
                               f"{len(captured.output_names)} outputs")
        return {name: t.detach().numpy() for name, t in zip(captured.output_names, leaves)}


@register
class OnnxReference(Target):
    id = "onnx-reference"
    label = "ONNX Runtime, no optimizations (reference)"
    description = "ONNX Runtime CPU with ORT_DISABLE_ALL: the reference for ONNX sources"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED}
    is_reference = True

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
