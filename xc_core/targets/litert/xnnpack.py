"""`litert-xnnpack`: the .tflite run by LiteRT's interpreter with its default CPU delegate, XNNPACK (what an
Android or iOS app gets from `Interpreter` with no options): numerics measured.

Which ops XNNPACK took is the interpreter's own record: after delegation it lists one DELEGATE node per partition
XNNPACK claimed, with the partition's boundary tensors (`_get_ops_details`); every other op runs on LiteRT's
built-in kernels. XNNPACK does not say why it leaves an op; the reason given is whether its delegate handles that
operator at all — the builtin operators its `VisitNode` switch covers (tflite/delegates/xnnpack/xnnpack_delegate.cc
in the LiteRT repository) — or declined this instance (types, parameters or a non-constant weight its checks
refuse).

`quantize=int8`: ai-edge-quantizer's dynamic-range recipe (`recipe.dynamic_wi8_afp32()`: int8 weights, activations
quantized on the fly) applied to the converted .tflite, then run the same way.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from ... import evidence as ev
from ...ir import COMPUTE
from ...lowering import FINAL, IMPORT, KERNEL, graph_step
from ..base import CostRunner, register
from ..options import bandwidth_option, option, overhead_option
from .common import (
    CPU_KERNELS,
    LiteRTTarget,
    delegate_boundaries,
    delegated_ops,
    interpreter,
    partition_summary,
    run_interpreter,
    set_precisions,
)

# The builtin operators XNNPACK's TFLite delegate handles: the cases of Subgraph::VisitNode in
# tflite/delegates/xnnpack/xnnpack_delegate.cc (github.com/google-ai-edge/LiteRT, 2026-08). An op outside this set is
# never delegated; the custom ops it takes are listed apart.
XNNPACK_OPS = frozenset({
    "ABS", "ADD", "ASSIGN_VARIABLE", "AVERAGE_POOL_2D", "BATCH_MATMUL", "CEIL", "CONCATENATION", "CONV_2D", "COS",
    "DENSIFY", "DEPTH_TO_SPACE", "DEPTHWISE_CONV_2D", "DEQUANTIZE", "DIV", "ELU", "EXP", "EXPAND_DIMS", "FLOOR",
    "FULLY_CONNECTED", "GELU", "HARD_SWISH", "LEAKY_RELU", "LOG", "LOGISTIC", "MAX_POOL_2D", "MAXIMUM", "MEAN",
    "MINIMUM", "MUL", "NEG", "PAD", "PRELU", "QUANTIZE", "READ_VARIABLE", "REDUCE_MAX", "REDUCE_MIN", "RELU",
    "RELU6", "RELU_N1_TO_1", "RESHAPE", "RESIZE_BILINEAR", "ROUND", "RSQRT", "SIN", "SLICE", "SOFTMAX",
    "SPACE_TO_DEPTH", "SPLIT", "SQRT", "SQUARE", "SQUARED_DIFFERENCE", "STABLEHLO_COMPOSITE", "STRIDED_SLICE", "SUB",
    "SUM", "TANH", "TRANSPOSE", "TRANSPOSE_CONV", "VAR_HANDLE",
})
XNNPACK_CUSTOM_OPS = frozenset({"Convolution2DTransposeBias", "MaxPoolingWithArgmax2D", "MaxUnpooling2D",
                                "odml.scaled_dot_product_attention"})


@dataclass(frozen=True)
class LiteRTXnnpackOptions:
    quantize: Literal["none", "int8"] = option(
        "none", help="none, or int8: ai-edge-quantizer's dynamic-range recipe (int8 weights, activations quantized "
                     "on the fly) on the converted .tflite")
    bandwidth_gb_s: float = bandwidth_option("a delegate")      # DelegateCostOptions', after the quantization
    transition_overhead_ms: float = overhead_option()


@register
class LiteRTXnnpack(LiteRTTarget):
    id = "litert-xnnpack"
    # Android and iOS natively (the Overview's first pair: ExecuTorch's Android and iOS builds, rank 4, come
    # next); Android's two native stacks; LiteRT's CPU and GPU delegates on one .tflite.
    shipped_with = {"coreml-ane": 1, "executorch-xnnpack": 9, "litert-gpu": 10}
    label = "LiteRT · XNNPACK delegate (CPU)"
    description = ("litert-torch converts to .tflite (or the uploaded .tflite), LiteRT's interpreter runs it with "
                   "the XNNPACK delegate here; ops XNNPACK leaves on LiteRT's built-in kernels")
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}
    accelerator = "XNNPACK delegate (optimized CPU kernels)"
    Options = LiteRTXnnpackOptions

    # No time per node (profile_method stays None), checked against ai-edge-litert 2.3.0:
    # - The Python Interpreter cannot install a profiler: its pybind InterpreterWrapper has no profiler method
    #   (tflite/python/interpreter_wrapper/interpreter_wrapper.cc never calls SetProfiler), and
    #   `experimental_force_delegate_node_profiling` only sets InterpreterOptions for a profiler someone else installs
    #   (tflite/core/subgraph.cc, Subgraph::InvokeImpl) — here only _pywrap_tfl_calibration's, which returns tensor
    #   ranges, not times.
    # - libLiteRt.so exports a CompiledModel profiler (LiteRtCompiledModelGetProfiler, LiteRtGetProfilerEvents;
    #   enabled by the "runtime_options_string" TOML `enable_profiling = true`, litert/runtime/compiled_model.cc), but
    #   the Python CompiledModel passes no such option (options.py `_as_flat_kwargs`): only ctypes on the C API
    #   could, with a second runtime instance of the model.
    # - Even then, ops inside an XNNPACK partition are not attributable to .tflite ops: the delegate reports one
    #   event per XNNPACK *operator*, named by XNNPACK's operator type and numbered by its own operator index after
    #   its subgraph rewrites (tflite/delegates/xnnpack/xnnpack_delegate.cc, `AddEventsToProfiler`); TFLite's own
    #   per-node event is the whole DELEGATE node, which no node of this graph is.

    @property
    def quantized(self) -> bool:
        return self.settings.quantize == "int8"

    def _transform(self, model, path, origin, captured, workdir, result):
        if not self.quantized:
            return model, path, origin
        from ai_edge_quantizer import quantizer, recipe

        from ...quiet import quiet_litert
        from ...readers.tflite import TfliteModel
        out = os.path.join(workdir, "model_int8.tflite")
        with quiet_litert():
            q = quantizer.Quantizer(path)
            q.load_quantization_recipe(recipe.dynamic_wi8_afp32())
            q.quantize().export_model(out, overwrite=True)
        with open(out, "rb") as f:
            quant = TfliteModel(f.read())
        result.artifacts.append(path)                 # the float .tflite stays beside it
        result.declared_precisions = ["int8"]
        result.info["quantization"] = {"flow": "ai-edge-quantizer: recipe.dynamic_wi8_afp32() (int8 weights, "
                                               "activations quantized at run time) on the converted .tflite",
                                       "calibration": "none (dynamic range)"}
        return quant, out, _origin_by_output_name(model, quant, origin)

    def _inspect(self, compiled, captured, result):
        from ...quiet import quiet_litert
        with quiet_litert():
            it = interpreter(compiled.tflite_path, delegates=True)
            details = it._get_ops_details()
        compiled.extra["interpreter"] = it         # the run uses the same one: XNNPACK packs its weights once
        n_ops = len(compiled.model.ops)
        taken = delegated_ops(details, n_ops)
        delegates = sorted(set(taken.values()))
        final = self.converted_graph(compiled, captured, "litert-xnnpack")
        given = self.before_delegation(final)
        for i, n in enumerate(final.nodes):
            if i in taken:
                n.backend, n.kernel = "xnnpack", "XNNPACK delegate"
                n.attributes["delegate"] = f"delegate_{delegates.index(taken[i])}"
            else:
                n.backend, n.kernel = "cpu", CPU_KERNELS
                if n.kind == COMPUTE:
                    n.fallback = True
                    n.fallback_reason = _reason(n)
        set_precisions(final)
        set_precisions(given)
        result.input_graph = self.given_graph(captured)
        sizes = [sum(1 for n in final.nodes if n.kind == COMPUTE and n.attributes.get("delegate") == f"delegate_{k}")
                 for k in range(len(delegates))]
        result.partitioning = partition_summary(
            final, "XNNPACK", "LiteRT's interpreter (the XNNPACK delegate's DELEGATE nodes)", sizes,
            self.evidence["assignment"],
            delegates=[{"name": f"delegate_{k}", "backend_id": "XNNPACK", "ops": s} for k, s in enumerate(sizes)])
        result.boundaries = delegate_boundaries(final, self.settings, self.evidence["assignment"])
        on_cpu = [n for n in final.nodes if n.kind == COMPUTE and n.backend == "cpu"]
        transposes = sum(n.op_type == "TRANSPOSE" for n in final.nodes)
        result.stages += [
            graph_step(IMPORT, "the captured program converted by litert-torch (layout to NHWC, TFL ops, fusions)"
                       if not captured.tflite_path else "the uploaded .tflite", given,
                       transposes=transposes),
            graph_step(KERNEL, "the interpreter's execution plan: DELEGATE nodes and built-in kernels", final,
                       ref=FINAL, delegate_calls=len(delegates), kernel_calls=len(on_cpu)),
        ]
        result.info["interpreter_ops"] = [{"index": int(d["index"]), "op": d["op_name"]} for d in details[n_ops:]]
        return final

    def _run(self, compiled, inputs, captured, result):
        from ...quiet import quiet_litert
        result.numerics_assumption = ("measured: the .tflite run by LiteRT's interpreter on this CPU (XNNPACK "
                                      "delegate and LiteRT's built-in kernels), as on a phone's CPU up to its SIMD "
                                      "width")
        with quiet_litert():
            it = compiled.extra.get("interpreter") or interpreter(compiled.tflite_path, delegates=True)
            return run_interpreter(it, compiled, inputs, captured)


    def _cost_runner(self, compiled, inputs, captured):
        def load():
            from ...quiet import quiet_litert
            with quiet_litert():
                it = interpreter(compiled.tflite_path, delegates=True)

            def run():
                with quiet_litert():
                    return run_interpreter(it, compiled, inputs, captured)
            return run
        return CostRunner(load=load, load_what=(
            "a new LiteRT Interpreter on the .tflite with its default XNNPACK delegate, tensors allocated (XNNPACK "
            "packs the weights there); the analysis made its interpreter while reading the delegation back"))


def _reason(n) -> str:
    if n.attributes.get("custom_op"):
        if n.op_type in XNNPACK_CUSTOM_OPS:
            return f"XNNPACK's delegate handles the custom op {n.op_type} but declined this one (it gives no reason)"
        return (f"a custom op ({n.op_type}): XNNPACK's delegate takes only the custom ops it knows "
                f"({', '.join(sorted(XNNPACK_CUSTOM_OPS))})")
    if n.op_type not in XNNPACK_OPS:
        return f"XNNPACK's delegate has no kernel for {n.op_type} (not among the operators it handles)"
    types = sorted({t.dtype for t in n.inputs + n.outputs if t.dtype} - {"float32"})
    detail = f" — it has {', '.join(types)} tensors" if types else ""
    return (f"XNNPACK's delegate handles {n.op_type} but declined this one (its checks on types, parameters and "
            f"constant weights; it gives no reason){detail}")


def _origin_by_output_name(float_model, quant_model, origin: dict) -> dict:
    """The quantized model's ops traced through the float model's: an op keeps its output tensor's name; the
    QUANTIZE/DEQUANTIZE ops the quantizer adds take the source ops of the op they feed or follow."""
    by_output = {}
    for op in float_model.ops:
        for t in op["outputs"]:
            by_output[float_model.tensors[t]["name"]] = origin.get(op["index"], [])
    out = {}
    for op in quant_model.ops:
        names = [quant_model.tensors[t]["name"] for t in op["outputs"]]
        found = next((by_output[nm] for nm in names if nm in by_output), None)
        if found is None:
            ins = [quant_model.tensors[t]["name"] for t in op["inputs"] if t >= 0]
            found = next((by_output[nm] for nm in ins if nm in by_output), [])
        out[op["index"]] = list(found)
    return out


__all__ = ["LiteRTXnnpack", "XNNPACK_OPS"]
