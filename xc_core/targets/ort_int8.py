"""`ort-cpu-int8`: ORT dynamic int8 quantization (onnxruntime.quantization.quantize_dynamic), then ORT CPU at
ORT_ENABLE_ALL. The "backend silently ran a quantised kernel where you expected float" case: drift and per-node
precision are measured on the quantised graph.

Provenance is traced twice: quantised graph → captured ONNX (quantize_dynamic keeps output tensor names), then
ORT's optimized graph → quantised graph.
"""
from __future__ import annotations

import os

from .. import evidence as ev
from ..capture import onnx_ir_graph
from .base import register
from .onnx_regions import map_optimized_graph, onnx_node_precision
from .ort_cpu import OrtTarget


@register
class OrtCpuInt8(OrtTarget):
    id = "ort-cpu-int8"
    label = "ONNX Runtime · CPU EP, dynamic int8"
    description = "ORT dynamic int8 quantization (weights int8, activations quantised at run time), then ORT CPU"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}

    def model_for(self, captured, workdir, result):
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        os.makedirs(workdir, exist_ok=True)
        path = os.path.join(workdir, "model.int8.onnx")
        import logging
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)  # quantize_dynamic logs a pre-processing hint on the root logger
        try:
            quantize_dynamic(captured.onnx_path, path, weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
        result.artifacts.append(path)
        quantized = onnx_ir_graph(onnx.load(path), "quantized")
        map_optimized_graph(quantized, captured.onnx_graph)
        for n in quantized.nodes:
            n.attributes.pop("_metadata", None)
            n.precision = onnx_node_precision(n)
        result.input_graph = quantized
        result.info["quantization"] = {"method": "quantize_dynamic", "weight_type": "QInt8",
                                       "quantized_nodes": sum(n.precision == "int8" for n in quantized.nodes)}
        result.numerics_assumption = "int8 weights, activations quantised per tensor at run time"
        return path

    def input_graph(self, compiled, captured):
        return compiled["input_graph"]

    def _compile(self, captured, workdir, result):
        compiled = super()._compile(captured, workdir, result)
        compiled["input_graph"] = result.input_graph
        return compiled
