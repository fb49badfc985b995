"""`ort-cpu`: ONNX Runtime's CPU execution provider at ORT_ENABLE_ALL.

The optimized model ORT writes out is read back (fused nodes recognised by (op_type, domain), e.g. FusedConv in
com.microsoft, Conv in com.microsoft.nchwc), traced to the captured graph through boundary tensors, and each node's
provider is taken from ORT's profiling JSON after a real run.
"""
from __future__ import annotations

import os

from .. import evidence as ev
from ..capture import onnx_ir_graph
from ..ir import Graph
from .base import Target, TargetResult, register
from .onnx_regions import map_optimized_graph, onnx_node_precision
from .ort_common import PROVIDER_BACKEND, make_session, providers_from_profile, run_session


class OrtTarget(Target):
    """An ORT CPU session over some ONNX file; subclasses choose the file and the optimization level."""
    level = "ORT_ENABLE_ALL"

    def model_for(self, captured, workdir: str, result: TargetResult) -> str:
        return captured.onnx_path

    def _compile(self, captured, workdir, result):
        os.makedirs(workdir, exist_ok=True)
        model_path = self.model_for(captured, workdir, result)
        optimized = os.path.join(workdir, "model.optimized.onnx")
        session = make_session(model_path, self.level, optimized_path=optimized, profile_dir=workdir)
        result.artifacts.append(optimized)
        import onnxruntime
        result.info["onnxruntime_version"] = onnxruntime.__version__
        result.info["optimization_level"] = self.level
        return {"session": session, "optimized": optimized, "input_model": model_path}

    def _inspect(self, compiled, captured, result) -> Graph:
        import onnx
        graph = onnx_ir_graph(onnx.load(compiled["optimized"]), "optimized")
        original = self.input_graph(compiled, captured)
        result.info.update(map_optimized_graph(graph, original))
        _fill_tensor_types(graph, original)
        for n in graph.nodes:
            n.attributes.pop("_metadata", None)
            n.precision = onnx_node_precision(n)
        return graph

    def input_graph(self, compiled, captured) -> Graph:
        """The graph ORT optimized, in the IR with provenance (the captured ONNX for plain ORT targets)."""
        return captured.onnx_graph

    def _run(self, compiled, inputs, captured, result):
        session = compiled["session"]
        outputs = run_session(session, inputs)
        providers = providers_from_profile(session.end_profiling())
        for n in result.graph.nodes:
            p = providers.get(n.id)
            if p:
                n.kernel, n.backend = p, PROVIDER_BACKEND.get(p, p)
        missing = [n for n in result.graph.nodes if n.backend is None and n.kind != "constant"]
        if missing:
            # The session registers only the CPU EP, so every node is assigned to it; a node with no kernel event
            # was assigned but did not execute in this run (e.g. computed once at load, or a branch not taken).
            for n in missing:
                n.backend, n.kernel = "cpu", "CPUExecutionProvider (no kernel event in the profile)"
            result.notes.append(f"{len(missing)} node(s) had no kernel event in the profile: "
                                + ", ".join(n.id for n in missing[:10]))
        return outputs


@register
class OrtCpu(OrtTarget):
    id = "ort-cpu"
    label = "ONNX Runtime · CPU EP"
    description = "ONNX Runtime CPU execution provider, ORT_ENABLE_ALL; optimized model dumped and read back"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}


def _fill_tensor_types(graph: Graph, original: Graph) -> None:
    """ONNX shape inference stops at contrib ops it does not know; tensors that kept their original name keep
    their original type."""
    known = {t.name: t for n in original.nodes for t in n.inputs + n.outputs}
    for n in graph.nodes:
        for t in n.inputs + n.outputs:
            if t.dtype is None and t.name in known:
                t.dtype, t.shape = known[t.name].dtype, t.shape or known[t.name].shape
