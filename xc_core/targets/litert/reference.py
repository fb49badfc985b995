"""`tflite-reference`: the reference for .tflite uploads — LiteRT's interpreter with its built-in kernels only (no
XNNPACK, no delegate: `OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES`), as `onnx-reference` is ONNX Runtime with
every optimization off."""
from __future__ import annotations

from ... import evidence as ev
from ..base import register
from .common import CPU_KERNELS, LiteRTTarget, interpreter, run_interpreter, set_precisions


@register
class TfliteReference(LiteRTTarget):
    id = "tflite-reference"
    label = "LiteRT built-in kernels, no delegate (reference)"
    description = "LiteRT's interpreter without delegates: the reference for .tflite sources"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED}
    is_reference = True
    from_exported_program = False
    takes_program = False
    relative_cost = 1

    def accepts(self, captured):
        if not captured.tflite_path:
            return False, "the LiteRT reference runs .tflite sources"
        return True, ""

    def _inspect(self, compiled, captured, result):
        g = self.converted_graph(compiled, captured, "tflite")
        for n in g.nodes:
            n.backend, n.kernel = "cpu", CPU_KERNELS
        set_precisions(g)
        result.input_graph = self.given_graph(captured)
        return g

    def _run(self, compiled, inputs, captured, result):
        from ...quiet import quiet_litert
        with quiet_litert():
            return run_interpreter(interpreter(compiled.tflite_path, delegates=False), compiled, inputs, captured)
