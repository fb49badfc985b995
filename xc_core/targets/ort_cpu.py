"""`ort-cpu`: ONNX Runtime's CPU execution provider at ORT_ENABLE_ALL (the `level` option picks another).

The optimized model ORT writes out is read back (fused nodes recognised by (op_type, domain), e.g. FusedConv in
com.microsoft, Conv in com.microsoft.nchwc), traced to the captured graph through boundary tensors, and each node's
provider is taken from ORT's profiling JSON after a real run.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

from .. import evidence as ev
from ..ir import Graph
from ..lowering import FINAL, FUSION, GRAPH_OPT, IMPORT, INPUT, KERNEL, graph_step
from ..readers.onnx import onnx_ir_graph
from .base import Target, TargetResult, register
from .onnx_regions import map_optimized_graph, onnx_node_precision
from .ort_common import (
    PROVIDER_BACKEND,
    make_session,
    onnx_probe_tensors,
    probe_values,
    providers_from_profile,
    run_session,
)

# ORT's graph optimization levels by the names users set (SessionOptions.graph_optimization_level): basic is
# Level 1 (constant folding, redundant-node elimination, Conv+BN/Mul/Add, MatMul+Add), extended adds Level 2
# (Conv+activation, Gemm+activation, attention and layer-norm fusions), layout adds the NCHWc layout
# transformations, all is everything (onnxruntime.ai/docs/performance/model-optimizations/graph-optimizations.html).
ORT_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}
# The levels in the order ORT applies them, and the canonical stage (xc_core/lowering.py) each one's work belongs
# to: basic folds and eliminates, extended fuses, layout rewrites Conv into NCHWc blocked kernels with reorders.
_LEVEL_STAGES = (("disabled", IMPORT), ("basic", GRAPH_OPT), ("extended", FUSION), ("layout", KERNEL),
                 ("all", KERNEL))
# The fusion catalogue each level implements (analysis/fusion_catalogue.py).
_LEVEL_CATALOGUE = {"disabled": None, "basic": "onnxruntime-basic", "extended": "onnxruntime",
                    "layout": "onnxruntime", "all": "onnxruntime"}


class OrtTarget(Target):
    """An ORT CPU session over some ONNX file; subclasses choose the file. The optimization level is an option."""
    option_names = ("level",)
    option_choices = {"level": tuple(ORT_LEVELS)}
    option_help = {"level": "graph optimization level: disabled, basic, extended, layout or all (default all; "
                            "SessionOptions.graph_optimization_level)"}

    @property
    def level(self) -> str:
        return ORT_LEVELS[self.options.get("level", "all")]

    @property
    def fusion_catalogue(self) -> str | None:
        return _LEVEL_CATALOGUE[self.options.get("level", "all")]
    intermediates_method = ("ORT's own optimized model (as dumped after its optimization level) with the source ops' tensors "
                            "that survived optimization added as graph outputs, run again with graph optimizations "
                            "disabled (ORT_DISABLE_ALL) so nothing fuses further; tensors fused away are missing")

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
        return OrtCompiled(session=session, optimized=optimized, input_model=model_path, workdir=workdir)

    def _inspect(self, compiled, captured, result) -> Graph:
        import onnx
        graph = onnx_ir_graph(onnx.load(compiled.optimized), "optimized")
        original = self.input_graph(compiled, captured)
        result.info.update(map_optimized_graph(graph, original))
        _fill_tensor_types(graph, original)
        for n in graph.nodes:
            n.attributes.pop("_metadata", None)
            n.precision = onnx_node_precision(n)
        result.stages.extend(self.level_steps(compiled, original, graph))
        return graph

    def level_steps(self, compiled, original: Graph, final: Graph) -> list:
        """The graph after each optimization level up to the configured one, each dumped by ORT itself
        (optimized_model_filepath) and traced back like the final graph."""
        import onnx
        configured = self.options.get("level", "all")
        levels = [level for level, _ in _LEVEL_STAGES]
        steps = [graph_step(IMPORT, "the ONNX model ORT loads", original, ref=INPUT)]
        with tempfile.TemporaryDirectory(dir=compiled.workdir) as tmp:
            for level, stage in _LEVEL_STAGES[1:levels.index(configured) + 1]:
                if level == configured:
                    steps.append(graph_step(stage, ORT_LEVELS[level], final, ref=FINAL))
                    break
                path = os.path.join(tmp, f"model.{level}.onnx")
                make_session(compiled.input_model, ORT_LEVELS[level], optimized_path=path)
                g = onnx_ir_graph(onnx.load(path), f"ort-{level}")
                map_optimized_graph(g, original)
                for n in g.nodes:
                    n.attributes.pop("_metadata", None)
                    n.precision = onnx_node_precision(n)
                    if n.kind != "constant":    # the session registers only the CPU EP: it takes every node
                        n.backend, n.kernel = "cpu", "CPUExecutionProvider"
                steps.append(graph_step(stage, ORT_LEVELS[level], g))
        if configured == "disabled":
            steps = [graph_step(IMPORT, "the ONNX model ORT loads (ORT_DISABLE_ALL: no optimization)", final,
                                ref=FINAL)]
        return steps

    def input_graph(self, compiled, captured) -> Graph:
        """The graph ORT optimized, in the IR with provenance (the captured ONNX for plain ORT targets)."""
        return captured.onnx_graph

    def _run(self, compiled, inputs, captured, result):
        session = compiled.session
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

    def _intermediates(self, compiled, inputs, captured, result, probes):
        return probe_values(compiled.optimized, onnx_probe_tensors(captured, probes), inputs, result)



@dataclass
class OrtCompiled:
    """What session creation hands on to read-back and run."""
    session: Any                 # the onnxruntime.InferenceSession
    optimized: str               # the optimized model ORT saved (what read-back reads)
    input_model: str             # the model the session was created from
    workdir: str
    input_graph: Any = None      # ort-cpu-int8: the quantized model's graph (what fused_from ids refer to)
    captured_graph: Any = None   # ort-cpu-int8: the captured ONNX graph


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


