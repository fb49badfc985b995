"""`litert-gpu`: LiteRT's GPU delegate (ML Drift) given the .tflite — its own decision per op, and its own kernels run
on a software GPU.

There is no phone GPU here. LiteRT's pip wheel carries its GPU accelerator built for WebGPU, and WebGPU runs on any
Vulkan device: xc points it at SwiftShader, the CPU implementation of Vulkan that Debian's Chromium package ships
(`vk_swiftshader_icd.json`). The delegate then partitions the model exactly as it would on a device: it says which
operators it cannot take and why, and how many ops it runs ("Following operations are not supported by GPU
delegate: CUMSUM: Input/output must be float type …  34 operations will run on the GPU, and the remaining 2
operations will run on the CPU" — ml_drift_delegate/tflite/model_builder.cc, GetOpsToReplaceWithOptions). It takes
only its largest partition (max_delegated_partitions defaults to 1, same file); supported ops outside it stay on the
CPU too. Its words are per op type, and name the tensor where the check is about one ("RESHAPE: Tensor dimensions
must be less than 5. <tensor>"): xc refuses the nodes of that type that read or write it, or the whole type when no
tensor is named. The assignment is the delegate's decision as xc applies it to each node: `predicted-runtime` (the
runtime's own checker; a phone's OpenCL backend shares it). The delegate's own count ("34 operations will run on the
GPU") is kept beside xc's placement (`runtime_count`), so a view can say whether the two agree.

Numerics are `emulated`: the delegate's own shaders, computed by SwiftShader. SwiftShader has no fp16 shader
arithmetic, so they compute in fp32 — a phone's GPU computes in fp16 unless the app sets
`GpuOptions.enforce_f32`: the drift here is that of the GPU kernels' algorithms, not of half precision.
"""
from __future__ import annotations

import ctypes.util
import functools
import os
import re

from ... import evidence as ev
from ...ir import COMPUTE, CONSTANT, IO
from ...lowering import IMPORT, graph_step
from ..base import register
from ..options import DelegateCostOptions
from .common import (
    LiteRTTarget,
    delegate_boundaries,
    feed_arrays,
    partition_summary,
    set_precisions,
)

# Where Debian's chromium package puts SwiftShader's Vulkan driver manifest (XC_VULKAN_ICD overrides).
SWIFTSHADER_ICDS = ("/usr/lib/chromium/vk_swiftshader_icd.json", "/usr/lib/chromium-browser/vk_swiftshader_icd.json")
GPU_DELEGATE = "LiteRT GPU delegate (ML Drift)"
CPU_FALLBACK_KERNELS = "LiteRT CPU (XNNPACK / built-in kernels)"
# The reason of a supported op the delegate leaves on the CPU; views/target_counts.py reads it as "outside the
# delegated partition", not "unsupported".
OUTSIDE_PARTITION_REASON = ("supported, but outside the GPU delegate's largest partition (it delegates one partition: "
                            "max_delegated_partitions = 1)")
_UNSUPPORTED = re.compile(r"Following operations are not supported by GPU delegate:\n(.*?)\n(?:(\d+) operations will "
                          r"run on the GPU, and the remaining (\d+)|No operations will run on the GPU, and all (\d+))"
                          r"(?: operations will run on the CPU\.)?",
                          re.S)


@functools.lru_cache(maxsize=1)
def vulkan_loader() -> bool:
    """Whether the Vulkan loader is installed (asked once: find_library runs ldconfig, and the dashboard asks
    every target's availability on each rerun)."""
    return ctypes.util.find_library("vulkan") is not None


def vulkan_icd() -> str | None:
    forced = os.environ.get("XC_VULKAN_ICD")
    if forced:
        return forced if os.path.exists(forced) else None
    return next((p for p in SWIFTSHADER_ICDS if os.path.exists(p)), None)


@register
class LiteRTGpu(LiteRTTarget):
    id = "litert-gpu"
    shipped_with = {"executorch-vulkan": 11}    # Android's two GPU paths
    label = "LiteRT · GPU delegate"
    description = ("LiteRT's GPU delegate on the same .tflite: its decision per op, and its kernels run on SwiftShader "
                   "(a software Vulkan GPU) in fp32")
    evidence = {"assignment": ev.PREDICTED_RUNTIME, "precision": ev.PREDICTED_RUNTIME, "numerics": ev.EMULATED}
    accelerator = "GPU delegate (mobile GPU)"
    Options = DelegateCostOptions

    @classmethod
    def available(cls):
        ok, why = super().available()
        if not ok:
            return ok, why
        if not vulkan_loader():
            return False, ("LiteRT's GPU delegate needs the Vulkan loader: apt-get install libvulkan1 chromium "
                           "(xc runs the delegate on Chromium's SwiftShader, a software GPU)")
        if vulkan_icd() is None:
            return False, ("LiteRT's GPU delegate needs a Vulkan device: apt-get install chromium (xc runs it on "
                           "Chromium's SwiftShader, a software GPU), or set XC_VULKAN_ICD to a Vulkan driver manifest")
        return True, ""

    def _compiled_model(self, path: str, log: list[str]):
        """LiteRT's CompiledModel with the GPU accelerator (CPU for what it leaves), on SwiftShader."""
        os.environ.setdefault("VK_ICD_FILENAMES", vulkan_icd() or "")
        os.environ.setdefault("VK_DRIVER_FILES", os.environ["VK_ICD_FILENAMES"])
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator

        from ...quiet import quiet_litert
        try:
            with quiet_litert(log):
                return CompiledModel.from_file(path, hardware_accel=HardwareAccelerator.GPU | HardwareAccelerator.CPU)
        except Exception as e:     # its own words are in the log, not in the exception
            raise RuntimeError(_with_said(e, log)) from None

    def _inspect(self, compiled, captured, result):
        log: list[str] = []
        model = self._compiled_model(compiled.tflite_path, log)
        compiled.extra["compiled_model"] = model
        text = "".join(log)
        fully = bool(model.is_fully_accelerated())
        said = _delegate_words(text)
        final = self.converted_graph(compiled, captured, "litert-gpu")
        given = self.before_delegation(final)
        # The delegate's words decide, not is_fully_accelerated(): it answered True for a model whose delegate said
        # it leaves 5 of its 7 ops to the CPU (the CPU accelerator, also requested, takes them).
        refused, unmatched = _refused_nodes(final, said["refusals"]) if said["said"] else ({}, [])
        for n in final.nodes:
            n.backend, n.kernel = "gpu", GPU_DELEGATE
            if n.id in refused:
                n.backend, n.kernel = "cpu", CPU_FALLBACK_KERNELS
                n.fallback, n.fallback_reason = True, f"the GPU delegate: {refused[n.id]}"
        if said["on_gpu"] is not None:
            _outside_largest_partition(final)
        for n in final.nodes:
            if n.kind != COMPUTE:
                n.fallback = False
        set_precisions(final)
        set_precisions(given)
        result.input_graph = self.given_graph(captured)
        on_gpu = sum(n.kind == COMPUTE and n.backend == "gpu" for n in final.nodes)
        result.partitioning = partition_summary(
            final, "GPU", "LiteRT's GPU delegate (its partitioning, on SwiftShader)", [on_gpu] if on_gpu else [],
            self.evidence["assignment"], outside_reason=OUTSIDE_PARTITION_REASON, fully_accelerated=fully,
            delegate_said=said["said"], **_delegate_count(final, said, fully, unmatched))
        result.boundaries = delegate_boundaries(final, self.settings, self.evidence["assignment"])
        result.info["gpu_device"] = "SwiftShader (software Vulkan) through WebGPU"
        result.stages.append(graph_step(
            IMPORT, "the captured program converted by litert-torch" if not captured.tflite_path else
            "the uploaded .tflite", given, transposes=sum(n.op_type == "TRANSPOSE" for n in given.nodes)))
        return final

    def _run(self, compiled, inputs, captured, result):
        import numpy as np

        from ...quiet import quiet_litert
        model = compiled.extra.get("compiled_model") or self._compiled_model(compiled.tflite_path, [])
        result.numerics_assumption = ("emulated: the GPU delegate's own kernels computed by SwiftShader (a software "
                                      "Vulkan GPU) in fp32; a phone's GPU computes in fp16 by default, so half "
                                      "precision's own error is not in these numbers")
        in_details = list(model.get_input_tensor_details(_signature(model)).values())     # the signature's order
        feeds = feed_arrays(inputs, captured, {d["index"]: {"dtype": np.dtype(d["dtype"])} for d in in_details},
                            compiled.io["inputs"])
        log: list[str] = []
        try:
            with quiet_litert(log):
                for k, d in enumerate(in_details):          # a dynamic dim the run's inputs fix
                    if list(feeds[d["index"]].shape) != [int(x) for x in d["shape"]]:
                        model.resize_input_tensor(k, list(feeds[d["index"]].shape))
                ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
                for buf, d in zip(ins, in_details):
                    buf.write(np.ascontiguousarray(feeds[d["index"]]))
                model.run_by_index(0, ins, outs)
        except Exception as e:
            raise RuntimeError(_with_said(e, log)) from None
        by_index = {}
        for buf, d in zip(outs, model.get_output_tensor_details(_signature(model)).values()):
            shape = [int(x) for x in d["shape"]]
            by_index[d["index"]] = buf.read(int(np.prod(shape)) if shape else 1, np.dtype(d["dtype"])).reshape(shape)
        return {name: by_index[i] for name, i in zip(captured.output_names, compiled.io["outputs"]) if i in by_index}


def _with_said(e: Exception, log: list[str]) -> str:
    """The exception's message and what LiteRT logged as errors (each location with the line that says what failed)."""
    from ...errors import litert_said
    said = litert_said("".join(log))
    return f"{e}" + (f" — LiteRT said: {' '.join(said[-3:])}" if said else "")


def _signature(model) -> str:
    return next(iter(model.get_signature_list()))


def _delegate_words(text: str) -> dict:
    """What the GPU delegate said: its refusals [(op type, reason)] in its order, how many ops it runs on the GPU
    and leaves to the CPU, its message."""
    m = _UNSUPPORTED.search(text)
    if not m:
        return {"refusals": [], "on_gpu": None, "on_cpu": None, "said": None}
    refusals = []
    for line in m.group(1).splitlines():
        op, _, why = line.partition(":")
        if op.strip() and why.strip():
            refusals.append((op.strip(), why.strip()))
    if m.group(2) is not None:
        on_gpu, on_cpu = int(m.group(2)), int(m.group(3))
    else:
        on_gpu, on_cpu = 0, int(m.group(4))
    return {"refusals": refusals, "on_gpu": on_gpu, "on_cpu": on_cpu, "said": m.group(0).strip()}


def _refused_nodes(g, refusals: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """{node id: the delegate's reason} for the nodes it refuses, and the op types of refusals naming a tensor no
    node of that type has. The delegate words one line per op type and reason (model_builder.cc collects them in a
    set), and ends the reason with the tensor its check failed on where the check is about one ("RESHAPE: Tensor
    dimensions must be less than 5. <tensor>"): such a line refuses the nodes of that type that read or write that
    tensor; a line without one refuses every node of the type."""
    by_type: dict[str, list] = {}
    for n in g.nodes:
        by_type.setdefault(n.op_type, []).append(n)
    refused: dict[str, list[str]] = {}
    unmatched = []
    for op, why in refusals:
        nodes = by_type.get(op, [])
        named = [(n, t.name) for n in nodes for t in n.inputs + n.outputs
                 if t.name and why.endswith(" " + t.name)]
        if named:
            for n, name in named:
                reason = why[:-len(name)].rstrip()
                if reason not in refused.setdefault(n.id, []):
                    refused[n.id].append(reason)
            continue
        if re.search(r"\.\s+\S+$", why) and nodes:
            unmatched.append(op)      # names something no node of that type has: the whole type, as before
        for n in nodes:
            if why not in refused.setdefault(n.id, []):
                refused[n.id].append(why)
    return {nid: "; ".join(reasons) for nid, reasons in refused.items()}, sorted(set(unmatched))


def _delegate_count(g, said: dict, fully: bool, unmatched: list[str]) -> dict:
    """{"runtime_count": the delegate's own count of the ops it runs} ({} when it said none): every op of the
    .tflite, layout ops (TRANSPOSE) included, as the delegate counts them; views/target_counts.py counts xc's
    placement on the same basis beside it. `gap` says why the two differ, when xc knows."""
    ops = [n for n in g.nodes if n.kind not in (CONSTANT, IO)]
    placed = sum(n.backend == "gpu" for n in ops)
    if said["on_gpu"] is not None:
        on, total = said["on_gpu"], said["on_gpu"] + said["on_cpu"]
        words = said["said"].rsplit("\n", 1)[-1]
    elif fully:         # it refused nothing: every op on the GPU
        on, total, words = len(ops), len(ops), "no operation refused; the compiled model is fully accelerated"
    else:
        return {}
    count = {"by": "the GPU delegate", "on_accelerator": on, "total": total, "words": words,
             "counted": "every op of the .tflite, layout ops included", "evidence": ev.PREDICTED_RUNTIME}
    if placed != on:
        count["gap"] = (f"the delegate refuses {', '.join(unmatched)} naming a tensor xc's graph does not have, so "
                        "xc refused every node of that type" if unmatched else "not explained")
    return {"runtime_count": count}


def _outside_largest_partition(g) -> None:
    """The delegate runs its largest partition only. Its partitions are TFLite's independent node subsets
    (PartitionGraphIntoIndependentNodeSubsets, tflite/graph_info.cc): walking the ops in order, each subset takes
    every op of one kind — supported or not — whose inputs are ready, until none is; then the other kind. Supported
    ops outside the largest supported subset stay on the CPU. The delegate's own count is kept beside the result
    (`runtime_count`)."""
    produced = {t.name for n in g.nodes for t in n.outputs}
    ready = {t.name for n in g.nodes for t in n.inputs if t.name not in produced}
    remaining = list(g.nodes)
    subsets: list[list] = []
    kind = remaining[0].backend == "gpu" if remaining else True
    while remaining:
        subset, progress = [], True
        while progress:
            progress = False
            for n in list(remaining):
                if (n.backend == "gpu") == kind and all(t.name in ready for t in n.inputs):
                    subset.append(n)
                    remaining.remove(n)
                    ready.update(t.name for t in n.outputs)
                    progress = True
        if subset and kind:
            subsets.append(subset)
        kind = not kind
    if len(subsets) > 1:
        largest = max(subsets, key=len)
        for members in subsets:
            if members is largest:
                continue
            for n in members:
                n.backend, n.kernel = "cpu", CPU_FALLBACK_KERNELS
                n.fallback = n.kind == COMPUTE
                n.fallback_reason = OUTSIDE_PARTITION_REASON
