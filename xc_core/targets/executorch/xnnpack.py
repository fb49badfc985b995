"""`executorch-xnnpack`: ExecuTorch with the XNNPACK delegate (Android and iOS CPUs), lowered by
`XnnpackPartitioner` and run here by ExecuTorch's runtime: numerics measured.

The partitioner is configuration-based (executorch/backends/xnnpack/partition/config/): one config per op it can
take, each with constraints (`check_constraints`). A config that declines a node says why through ExecuTorch's
`WhyNoPartition` ("mean.dim only supports keepdim=True"); an op with no config at all is not considered. Both are
recorded as the node's fallback reason.

`quantize=int8`: ExecuTorch's PT2E flow for XNNPACK (docs: "Quantization" in the XNNPACK backend guide) —
`XNNPACKQuantizer` with the symmetric per-channel config, `prepare_pt2e`, calibration on the inputs this run uses,
`convert_pt2e`, then export and lower as above; XNNPACK runs the quantized partitions in int8.
"""
from __future__ import annotations

from ... import evidence as ev
from ...ir import CAST, COMPUTE
from ..base import register
from .common import CPU_KERNELS, ExecuTorchTarget, reasons_from, run_pte


@register
class ExecuTorchXnnpack(ExecuTorchTarget):
    id = "executorch-xnnpack"
    label = "ExecuTorch · XNNPACK delegate (CPU)"
    description = ("ExecuTorch lowered with the XNNPACK partitioner, .pte run by ExecuTorch's runtime here; ops "
                   "outside the delegates on ExecuTorch's CPU kernels")
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}
    accelerator = "XNNPACK delegate (optimized CPU kernels)"
    backend_id = "XnnpackBackend"
    ir_backend = "xnnpack"
    partitioner_name = "XnnpackPartitioner"
    runs_here = True
    fusions_inside_delegates = ("XNNPACK fuses inside its delegates when it compiles them (batch norm into the "
                                "convolution, activations into the op before them — its preprocess passes); the "
                                "program xc reads shows the ops each delegate took, not those fusions")
    option_names = ExecuTorchTarget.option_names + ("quantize",)
    option_choices = {"quantize": ("none", "int8")}
    option_help = {**ExecuTorchTarget.option_help,
                   "quantize": "none, or int8: PT2E static quantization with XNNPACKQuantizer (symmetric, per "
                               "channel), calibrated on the inputs this run uses"}

    @property
    def quantized(self) -> bool:
        return self.options.get("quantize", "none") == "int8"

    def _partitioner(self):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        return XnnpackPartitioner()

    def _reason_recorder(self, reasons, extra):
        """XNNPACK's configs explain a refusal through one WhyNoPartition call."""
        from executorch.exir.backend.utils import WhyNoPartition
        return reasons_from(WhyNoPartition, "__call__", reasons)

    def _default_reason(self, node, partitioner) -> str:
        from executorch.exir.backend.canonical_partitioners.config_partitioner import (
            format_target_name,
        )
        name = getattr(getattr(node, "target", None), "__name__", None)
        configs = getattr(partitioner, "target_partitioner_configs", {})
        if name is None:
            return f"left to the {CPU_KERNELS} by XnnpackPartitioner"
        key = format_target_name(name)
        from ...readers.executorch import op_name
        if key not in configs:
            return f"no XNNPACK config for {op_name(node.target)}"
        return (f"XNNPACK's {type(configs[key]).__name__} declined it (its constraints; no reason given), or it "
                "was cut from a partition")

    def _program_to_lower(self, captured, result):
        ep = captured.program()
        if not self.quantized:
            return ep
        import torch
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        from ...quiet import quiet_torch
        inputs = self.calibration_inputs or {}
        args = tuple(torch.from_numpy(inputs[s.name].copy()) if s.name in inputs else
                     torch.zeros(s.shape, dtype=getattr(torch, s.dtype)) for s in captured.source.inputs)
        quantizer = XNNPACKQuantizer()
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        with quiet_torch():
            prepared = prepare_pt2e(ep.module(), quantizer)
            prepared(*args)                              # calibration: observers see the run's own inputs
            converted = convert_pt2e(prepared)
            quantized = torch.export.export(converted, args)
        result.declared_precisions = ["int8"]
        result.info["quantization"] = {
            "flow": "PT2E: XNNPACKQuantizer (symmetric, per-channel weights, per-tensor activations) → prepare_pt2e "
                    "→ calibrate → convert_pt2e → torch.export",
            "calibration": "the inputs this run uses" if inputs else "zeros (no inputs were given)"}
        return quantized

    def _import_step_name(self) -> str:
        if self.quantized:
            return "the captured ExportedProgram (torch.export), PT2E-quantized for XNNPACK"
        return super()._import_step_name()

    def _set_precisions(self, g, result) -> None:
        super()._set_precisions(g, result)
        if not self.quantized:
            return
        # A float op fed by a dequantize runs as XNNPACK's quantized kernel inside a delegate: int8 arithmetic.
        producer = {t.name: n for n in g.nodes for t in n.outputs}
        for n in g.nodes:
            if n.kind == COMPUTE and n.backend == self.ir_backend and any(
                    (p := producer.get(t.name)) is not None and p.kind == CAST and p.op_type.startswith("dequantize")
                    for t in n.inputs):
                n.precision = "int8"
        for n in g.nodes:
            if n.kind == CAST and n.op_type.startswith("quantize"):
                n.precision = "int8"

    def _run(self, compiled, inputs, captured, result):
        result.numerics_assumption = ("measured: the .pte run by ExecuTorch's runtime on this CPU (XNNPACK delegates "
                                      "and ExecuTorch's CPU kernels), as on a phone's CPU up to its SIMD width")
        return run_pte(compiled.pte_path, inputs, captured, compiled.plan["operators"])
