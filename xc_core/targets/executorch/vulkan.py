"""`executorch-vulkan`: ExecuTorch with the Vulkan delegate (Android GPUs), lowered by `VulkanPartitioner`.

This host has no Vulkan GPU and the runtime xc installs is built without the Vulkan backend, so the .pte is
written but not run: the partitioning is ExecuTorch's own decision (`predicted-runtime`) and no numbers are
reported. The partitioner explains each op it skips ("no operator implementation", "op args not supported",
texture limits) through `VulkanSupportedOperators.log_skip` (executorch/backends/vulkan/partitioner/
vulkan_partitioner.py); that is the fallback reason. `fp16=true` is the partitioner's `force_fp16` compile option
(the delegate computes in half precision).
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import evidence as ev
from ...ir import COMPUTE
from ..base import register
from ..options import DelegateCostOptions, option
from .common import ExecuTorchTarget, reasons_from


@dataclass(frozen=True)
class VulkanOptions(DelegateCostOptions):
    fp16: bool = option(False, help="the partitioner's force_fp16 compile option: the delegate computes in fp16")


@register
class ExecuTorchVulkan(ExecuTorchTarget):
    id = "executorch-vulkan"
    label = "ExecuTorch · Vulkan delegate (GPU)"
    description = ("ExecuTorch lowered with the Vulkan partitioner: its decision per op (no Vulkan GPU here: "
                   "not run)")
    evidence = {"assignment": ev.PREDICTED_RUNTIME, "precision": ev.PREDICTED_RUNTIME, "fusion": ev.REPORTED}
    accelerator = "Vulkan delegate (mobile GPU)"
    backend_id = "VulkanBackend"
    ir_backend = "vulkan"
    partitioner_name = "VulkanPartitioner"
    fusions_inside_delegates = ("the Vulkan backend fuses inside its delegates when it builds its compute graph "
                                "(e.g. a convolution with its clamp or ReLU into one shader); the program xc reads "
                                "shows the ops each delegate took, not those fusions")
    Options = VulkanOptions

    @property
    def fp16(self) -> bool:
        return self.settings.fp16

    def _partitioner(self):
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import (
            VulkanPartitioner,
        )
        return VulkanPartitioner({"force_fp16": True} if self.fp16 else None)

    def _reason_recorder(self, reasons, extra):
        """The Vulkan partitioner explains each op it skips through VulkanSupportedOperators.log_skip."""
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanSupportedOperators
        return reasons_from(VulkanSupportedOperators, "log_skip", reasons)

    def _set_precisions(self, g, result) -> None:
        super()._set_precisions(g, result)
        result.declared_precisions = ["fp16"] if self.fp16 else []
        if self.fp16:
            for n in g.nodes:
                if n.backend == self.ir_backend and n.kind == COMPUTE and n.precision == "fp32":
                    n.precision = "fp16"

    def _not_run_reason(self) -> str:
        return ("not run here: this host has no Vulkan GPU (and xc's ExecuTorch runtime has no Vulkan backend); "
                "the figures are the Vulkan partitioner's decision — run the .pte on an Android device for numbers")
