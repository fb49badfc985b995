"""`ort-cpu-int8`: ORT dynamic int8 quantization (onnxruntime.quantization.quantize_dynamic), then ORT CPU at
ORT_ENABLE_ALL. The "backend silently ran a quantised kernel where you expected float" case: drift and per-node
precision are measured on the quantised graph.

Provenance is traced twice: quantised graph → captured ONNX (quantize_dynamic keeps output tensor names), then
ORT's optimized graph → quantised graph.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from .. import evidence as ev
from ..readers.onnx import onnx_ir_graph
from .base import register
from .onnx_regions import map_optimized_graph, onnx_node_precision
from .options import option
from .ort_cpu import OrtOptions, OrtTarget


# quantize_dynamic's weight_type and per_channel, the two arguments its docs have users choose
# (onnxruntime.ai/docs/performance/model-optimizations/quantization.html, "Dynamic quantization").
@dataclass(frozen=True)
class OrtInt8Options(OrtOptions):
    weight_type: Literal["QInt8", "QUInt8"] = option(
        "QInt8", help="quantize_dynamic weight_type: QInt8 (default) or QUInt8")
    per_channel: bool = option(False, help="quantize_dynamic per_channel: one scale per output channel (true / false)")


@register
class OrtCpuInt8(OrtTarget):
    worker_modules = ("onnxruntime.quantization",)
    id = "ort-cpu-int8"
    relative_cost = 2   # quantize_dynamic rewrites the model before ORT compiles it
    label = "ONNX Runtime · CPU EP, dynamic int8"
    description = "ORT dynamic int8 quantization (weights int8, activations quantised at run time), then ORT CPU"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}
    Options = OrtInt8Options

    def too_big(self, captured):
        from ..limits import Limits
        from .base import skip_above
        limit = (self.limits or Limits.from_env()).max_int8_nodes
        nodes = len(captured.onnx_graph.nodes) if captured.onnx_graph is not None else 0
        return skip_above(nodes, limit, "max_int8_nodes", "the model has",
                          "int8 quantization (onnxruntime's quantize_dynamic takes time quadratic in graph size, "
                          "about 30 s at 5,000 nodes)", unit="ONNX nodes")

    def model_for(self, captured, workdir, result):
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        os.makedirs(workdir, exist_ok=True)
        path = os.path.join(workdir, "model.int8.onnx")
        import logging
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint on the root logger
        source, preprocessed = captured.onnx_path, None
        listed = self._without_initializer_inputs(source, workdir)
        if listed:
            source = listed
            result.artifacts.append(listed)

        def quantize(model_path):
            quantize_dynamic(model_path, path, weight_type=getattr(QuantType, self.settings.weight_type),
                             per_channel=self.settings.per_channel)
        try:
            try:
                quantize(source)
            except ValueError as e:
                if "to be an initializer" not in str(e):
                    raise
                # A weight the graph computes (weight_norm's g·v/‖v‖, a transposed or reshaped constant):
                # quantize_dynamic quantizes initializers only. ORT's documented pre-quantization step folds such
                # subgraphs to constants (onnxruntime.ai/docs/performance/model-optimizations/quantization.html,
                # "Pre-processing"); the quantized model is then the one a user following the docs would ship.
                preprocessed = self._preprocess(source, workdir, str(e))
                quantize(preprocessed)
        finally:
            root.setLevel(level)
        if preprocessed:
            result.artifacts.append(preprocessed)
        result.artifacts.append(path)
        quantized = onnx_ir_graph(onnx.load(path), "quantized")
        map_optimized_graph(quantized, captured.onnx_graph)
        for n in quantized.nodes:
            n.attributes.pop("_metadata", None)
            n.precision = onnx_node_precision(n)
        result.input_graph = quantized
        weight_type, per_channel = self.settings.weight_type, self.settings.per_channel
        result.declared_precisions = ["int8", "uint8"]
        result.info["quantization"] = {"method": "quantize_dynamic", "weight_type": weight_type,
                                       "per_channel": per_channel,
                                       "preprocessing": "; ".join(
                                           n for n in (getattr(self, "_input_note", None) if listed else None,
                                                       self._preprocessing_note if preprocessed else None) if n)
                                       or None,
                                       "quantized_nodes": sum(n.precision in ("int8", "uint8")
                                                              for n in quantized.nodes)}
        result.numerics_assumption = (f"{'u' if weight_type == 'QUInt8' else ''}int8 weights"
                                      f"{' (a scale per output channel)' if per_channel else ''}, activations "
                                      "quantised per tensor at run time")
        return path

    def _without_initializer_inputs(self, source: str, workdir: str) -> str | None:
        """A copy of the model whose weights are no longer listed as graph inputs too (paddle2onnx writes them
        so; quantize_dynamic then refuses them: "Expected … to be an initializer"), with ORT's own tool for it
        (onnxruntime.tools.remove_initializer_from_input); None when the model has no such input."""
        import onnx
        from onnxruntime.tools.remove_initializer_from_input import remove_initializer_from_input
        model = onnx.load(source)
        initializers = {i.name for i in model.graph.initializer}
        listed = sum(1 for i in model.graph.input if i.name in initializers)
        if not listed:
            return None
        model.ir_version = max(model.ir_version, 4)    # below IR 4 every initializer had to be an input
        remove_initializer_from_input(model)
        path = os.path.join(workdir, "model.no-weight-inputs.onnx")
        onnx.save(model, path)
        self._input_note = (f"{listed} weight(s) the model also lists as graph inputs taken as constants first "
                            "(onnxruntime.tools.remove_initializer_from_input): quantize_dynamic quantizes "
                            "initializers only")
        return path

    def _preprocess(self, source: str, workdir: str, why: str) -> str:
        """onnxruntime.quantization's quant_pre_process (shape inference, then ORT's basic optimizations, which fold
        constant subgraphs); without its symbolic shape inference when that cannot read the model."""
        from onnxruntime.quantization.shape_inference import quant_pre_process
        out = os.path.join(workdir, "model.preprocessed.onnx")
        try:
            quant_pre_process(source, out)
            how = "shape inference and ORT's basic optimizations"
        except Exception:  # noqa: BLE001 — symbolic shape inference refuses some graphs; folding is what counts
            quant_pre_process(source, out, skip_symbolic_shape=True)
            how = "ORT's basic optimizations (its symbolic shape inference could not read the model)"
        self._preprocessing_note = (f"quant_pre_process ({how}) before quantize_dynamic, which refused the model as "
                                    f"exported: {why.strip().splitlines()[0][:160]} — a weight computed in the "
                                    "graph, folded to a constant first, as ORT's quantization docs advise")
        return out

    def level_steps(self, compiled, original, final, result):
        """The ONNX as exported, then the quantized model ORT loads, then ORT's levels over it."""
        from ..lowering import CAPTURED_ONNX, IMPORT, graph_step
        captured_graph = compiled.captured_graph
        return [graph_step(IMPORT, "ONNX as exported", captured_graph, ref=CAPTURED_ONNX),
                *super().level_steps(compiled, original, final, result)]

    def input_graph(self, compiled, captured):
        return compiled.input_graph

    def _compile(self, captured, workdir, result):
        compiled = super()._compile(captured, workdir, result)
        compiled.input_graph = result.input_graph
        compiled.captured_graph = captured.onnx_graph
        return compiled
