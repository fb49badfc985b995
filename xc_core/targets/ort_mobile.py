"""`ort-nnapi` and `ort-coreml`: ONNX Runtime's mobile execution providers, predicted with ORT's own partition
checker (onnxruntime.tools.mobile_helpers.usability_checker) because this host cannot run those EPs.

The graph checked is the one the EP would see: ORT applies its basic (EP-independent) optimizations before
partitioning, so the captured ONNX is optimized at ORT_ENABLE_BASIC (onnxruntime.tools.onnx_model_utils, as the
checker's own `analyze_model` does) and shape-inferred (ModelProtoWithShapeInfo) first.

Per node: the EP that takes it, or the CPU EP and why — unsupported operator, dynamic input shape, or an input rank
above the EP's limit — plus any caveat the checker lists but does not check. Numerics: the accelerated partitions
are emulated in fp16 (onnxconverter-common converts exactly those nodes; CPU-EP nodes stay fp32) when the fp16
option is on; otherwise the numbers are the CPU EP's, labelled so.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from .. import evidence as ev
from ..analysis.boundaries import boundaries
from ..analysis.layout_audit import LayoutMoves
from ..ir import COMPUTE, Graph
from ..readers.onnx import onnx_ir_graph
from .base import Target, register
from .options import bandwidth_option, option, overhead_option, with_defaults
from .onnx_regions import map_optimized_graph, onnx_node_precision
from .ort_common import make_session, run_session

REASON_OP = "unsupported operator"
REASON_DYNAMIC = "dynamic input shape"
REASON_RANK = "input rank above the EP's limit"



@dataclass
class OrtMobileCompiled:
    """What the partition check hands on to read-back and run."""
    model: Any                   # the checked model (shape-inferred, input shapes fixed where they run)
    info: Any                    # ORT's PartitioningInfo for it
    basic_path: str              # that model on disk
    shipped: tuple | None = None     # (model, PartitioningInfo) with its dynamic dims, when they were fixed
    numerics_model: str | None = None    # the model whose numbers the run produced (set by _run)
    # Its session, kept by the first run: later runs (dataset samples, steady runs) run it again instead of
    # converting the model to fp16 once per call.
    numerics_session: Any = None

@dataclass(frozen=True)
class OrtMobileOptions:
    # The default is each EP's (OrtNnapi, OrtCoreml): NNAPI's fp16 relaxation is opt-in, Core ML's MLProgram
    # partitions compute in fp16 on the GPU / Neural Engine.
    fp16: bool = option(False, help="emulate the accelerated partitions in fp16 (true / false)")
    bandwidth_gb_s: float = bandwidth_option("an accelerator")
    transition_overhead_ms: float = overhead_option()


@dataclass(frozen=True)
class OrtCoremlOptions(OrtMobileOptions):
    # The EP's ModelFormat provider option: MLProgram (Core ML 5+, the default here) or the older NeuralNetwork
    # format; ORT's checker keeps one supported-op list per format (onnxruntime/tools/mobile_helpers/
    # coreml_supported_{mlprogram,neuralnetwork}_ops.md; onnxruntime.ai/docs/execution-providers/CoreML-...).
    model_format: Literal["MLProgram", "NeuralNetwork"] = option(
        "MLProgram", help="the CoreML EP's ModelFormat: MLProgram (default) or NeuralNetwork; ORT's checker has a "
                          "supported-op list for each")


class OrtMobileTarget(Target):
    fusion_catalogue = "onnxruntime-basic"
    Options = OrtMobileOptions
    steps_caption = "Mobile EPs: the basic-optimized graph, then ORT's partitioning."
    layout_moves = LayoutMoves("the basic-optimized ONNX the EP is given: layouts are the EP's own business and not "
                               "reported")
    ep_name: str            # as ORT names it
    backend: str            # device class written into the IR for accelerated nodes
    max_rank: int = 999
    fp16_assumption: str

    @property
    def fp16(self) -> bool:
        return self.settings.fp16

    @property
    def intermediates_method(self) -> str:
        if self.fp16:
            return ("the fp16-emulation model (as run for the numbers, ORT_DISABLE_ALL) with the source ops' tensors it "
                    "still has added as graph outputs and run again; they come back as the graph types them (fp16, "
                    "widened to fp32 here). ORT's CPU EP computes fp16 ops it has no fp16 kernel for in fp32 "
                    "between its own inserted casts; the emulation's guards keep each result stored in fp16, so the "
                    "values match the run the output figure comes from")
        return ("the model ORT optimized at ORT_ENABLE_ALL from the basic-optimized graph (as run for the numbers), "
                "with the source ops' tensors that survived added as graph outputs, run again with graph "
                "optimizations disabled (ORT_DISABLE_ALL) so nothing fuses further")

    def _intermediates(self, compiled, inputs, captured, result, probes):
        from .ort_common import onnx_probe_tensors, probe_values
        if not compiled.numerics_model:
            return {}
        return probe_values(compiled.numerics_model, onnx_probe_tensors(captured, probes), inputs, result)

    def _checker(self, model):
        """Run ORT's partition checker for this EP; returns its PartitioningInfo."""
        raise TypeError(f"{type(self).__name__} must name its ORT checker")

    def _compile(self, captured, workdir, result):
        import onnx
        import onnxruntime
        from onnxruntime.tools.onnx_model_utils import (
            ModelProtoWithShapeInfo,
            optimize_model,
        )
        os.makedirs(workdir, exist_ok=True)
        result.declared_precisions = ["fp16"] if self.fp16 else []   # the EP partitions, emulated in fp16
        basic = os.path.join(workdir, "model.basic.onnx")
        optimize_model(_path(captured.onnx_path), _path(basic), level=onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC)
        result.artifacts.append(basic)
        shipped = ModelProtoWithShapeInfo(_path(basic)).model_with_shape_info
        # Nodes ORT creates carry no name; per-node results (and fp16 block lists) need one.
        from ..readers.onnx import name_unnamed_nodes
        name_unnamed_nodes(shipped)
        onnx.save(shipped, basic)
        # ORT's checker marks every node with a symbolic input shape "dynamic input shape". Check the shapes that
        # will run (the inputs xc resolved, fixed with ORT's own make_input_shape_fixed) and, separately, the
        # model as shipped: shipping dynamic shapes is itself a finding.
        fixed_model, fixed_inputs = _with_fixed_inputs(shipped, captured.source.inputs, workdir)
        model = fixed_model if fixed_inputs else shipped
        if fixed_inputs:
            fixed_path = os.path.join(workdir, "model.basic.fixed-shapes.onnx")
            onnx.save(model, fixed_path)
            result.artifacts.append(fixed_path)
        info = self._checker(model)
        result.info["onnxruntime_version"] = onnxruntime.__version__
        result.info["checked_graph"] = ("the captured ONNX after ORT_ENABLE_BASIC optimization, shape-inferred"
                                        + (", with the input shapes that run fixed (" + ", ".join(
                                            f"{k}={'x'.join(map(str, v))}" for k, v in fixed_inputs.items())
                                           + ")" if fixed_inputs else "") + " — what ORT partitions for the EP")
        return OrtMobileCompiled(model=model, info=info, basic_path=fixed_path if fixed_inputs else basic,
                                 shipped=(shipped, self._checker(shipped)) if fixed_inputs else None)

    def _inspect(self, compiled, captured, result) -> Graph:
        from onnxruntime.tools.mobile_helpers.usability_checker import PartitioningInfo  # noqa: F401
        model, info = compiled.model, compiled.info
        graph = onnx_ir_graph(model, "ep-partitioned")
        result.info.update(map_optimized_graph(graph, captured.onnx_graph))
        result.partitioning = self._assign(graph, model, info)
        # ORT's own assignment API (get_provider_graph_assignment_info) answers for the EPs a session registers;
        # this onnxruntime build has no NNAPI or Core ML EP, so the checker's prediction cannot be confirmed here.
        result.info["assignment_source"] = "ort-checker"
        result.info["assignment_unconfirmed"] = (f"{self.ep_name} is not in this onnxruntime build "
                                                 "(onnxruntime.get_available_providers()), so ORT's assignment API "
                                                 "cannot say which nodes it would really take")
        from ..lowering import FINAL, GRAPH_OPT, IMPORT, INPUT, graph_step
        result.stages += [graph_step(IMPORT, "the ONNX model ORT loads", captured.onnx_graph, ref=INPUT),
                          graph_step(GRAPH_OPT, "ORT_ENABLE_BASIC (the graph ORT partitions for the EP)", graph,
                                     ref=FINAL)]
        b = boundaries(graph, *self._cost_model())
        b["evidence"] = ev.PREDICTED_RUNTIME
        result.boundaries = b
        if compiled.shipped is not None:
            shipped_model, shipped_info = compiled.shipped
            shipped_graph = onnx_ir_graph(shipped_model, "ep-partitioned-as-shipped")
            summary = self._assign(shipped_graph, shipped_model, shipped_info)
            # Boundary tensors with symbolic shapes take the sizes they have at the resolved input shapes.
            sb = boundaries(shipped_graph, *self._cost_model(), sizes=_tensor_sizes(model))
            sb["evidence"] = ev.PREDICTED_RUNTIME
            summary["boundaries"] = sb
            summary["fallbacks_by_reason"] = _count_reasons(shipped_graph)
            summary["note"] = ("the model as shipped, with its symbolic input dims: ORT's checker puts every node "
                               "whose input shape is not fixed on the CPU EP")
            result.partitioning_as_shipped = summary
        return graph

    def _size_boundaries_from_a_run(self, compiled, inputs, result) -> None:
        """Boundary tensors whose size no shape gives (data-dependent) are measured: every boundary counts."""
        blocks = [result.boundaries]
        if result.partitioning_as_shipped is not None:
            blocks.append(result.partitioning_as_shipped["boundaries"])
        try:
            _size_boundaries(blocks, compiled, inputs, self._cost_model())
        except Exception as e:  # noqa: BLE001 — the estimate then says how many boundaries it could not size
            result.notes.append(f"boundary sizes could not be measured ({type(e).__name__})")

    def _cost_model(self) -> tuple[float, float]:
        return float(self.settings.bandwidth_gb_s), float(self.settings.transition_overhead_ms)

    def _assign(self, graph: Graph, model, info) -> dict:
        """Backend, kernel, partition and fallback reason per node, from the checker's groups; the summary."""
        checker = info.supported_ops_checker
        value_info = {v.name: v for v in list(model.graph.value_info) + list(model.graph.input)
                      + list(model.graph.output)}
        initializers = {i.name for i in model.graph.initializer}
        in_group = {}
        for gi, group in enumerate(info.supported_groups):
            for node in group:
                in_group[node.name] = gi
        by_name = {n.name: n for n in model.graph.node}
        for n in graph.nodes:
            n.attributes.pop("_metadata", None)
            n.precision = onnx_node_precision(n)
            proto = by_name.get(n.id)
            if n.id in in_group:
                n.backend, n.kernel = self.backend, self.ep_name
                n.attributes["partition"] = in_group[n.id]
                caveat = checker._ops.get(f"{proto.domain or 'ai.onnx'}:{proto.op_type}", "").strip()
                if caveat:
                    n.attributes["unchecked_caveat"] = caveat
                if self.fp16 and n.precision == "fp32":
                    n.precision = "fp16"
            else:
                n.backend, n.kernel, n.fallback = "cpu", "CPUExecutionProvider", True
                n.fallback_reason = self._reason(proto, checker, value_info, initializers)
        partitions = [len(g) for g in info.supported_groups]
        ng = max(info.num_nodes, 1)
        return {
            "ep": self.ep_name,
            "num_nodes": info.num_nodes,
            "num_supported_nodes": info.num_supported_nodes,
            "num_partitions": info.num_partitions,
            "partition_sizes": partitions,
            "unsupported_ops": sorted(info.unsupported_ops),
            "nodes_unsupported_due_to_op": info.nodes_unsupported_due_to_op,
            "nodes_unsupported_due_to_dynamic_input": info.nodes_unsupported_due_to_dynamic_input,
            "nodes_unsupported_due_to_rank": info.num_unsupported_nodes_due_to_rank,
            "unchecked_caveats": checker.get_caveats(),
            "suitability": info.suitability().name,
            "accelerated_share_nodes": round(info.num_supported_nodes / ng, 4),
            "accelerated_share_param_bytes": _param_share(model, in_group),
            "evidence": ev.PREDICTED_RUNTIME,
        }

    def _reason(self, proto, checker, value_info, initializers) -> str:
        """Replicates the checker's per-node predicate so every CPU-EP node says why."""
        from onnxruntime.tools.onnx_model_utils import is_fixed_size_tensor
        if proto is None:
            return REASON_OP
        reasons = []
        if f"{proto.domain or 'ai.onnx'}:{proto.op_type}" not in checker._ops:
            reasons.append(REASON_OP)
        fixed = all((i in initializers) or (i in value_info and is_fixed_size_tensor(value_info[i]))
                    for i in proto.input if i)
        if not fixed:
            reasons.append(REASON_DYNAMIC)
        for i in proto.input:
            vi = value_info.get(i)
            if vi is not None and vi.type.HasField("tensor_type") and len(vi.type.tensor_type.shape.dim) > self.max_rank:
                reasons.append(f"{REASON_RANK} ({self.max_rank})")
                break
        if not reasons:
            # Supported on its own, but the partitioner put it on the CPU (e.g. a border it could not join).
            reasons.append("left on the CPU EP by partitioning")
        return "; ".join(reasons)

    def _run(self, compiled, inputs, captured, result):
        if compiled.numerics_session is not None:
            return run_session(compiled.numerics_session, inputs)
        self._size_boundaries_from_a_run(compiled, inputs, result)
        if not self.fp16:
            # The model ORT runs for these numbers is dumped, so intermediate values come from the same graph.
            optimized = os.path.join(os.path.dirname(compiled.basic_path), "model.basic.optimized.onnx")
            try:
                session = make_session(compiled.basic_path, "ORT_ENABLE_ALL", optimized_path=optimized)
            except Exception as e:  # noqa: BLE001 — only ORT's own re-optimization defect is worked around
                if "Attempt to replace the existing tensor" not in str(e):
                    raise
                # ORT defect: optimizing again the BASIC-level model ORT itself saved, its MatMulAddFusion names a
                # new initializer like an existing one (seen on wav2vec2's feature projection). The model as
                # exported, optimized once at ORT_ENABLE_ALL, computes the same: its numbers are used instead.
                session = make_session(captured.onnx_path, "ORT_ENABLE_ALL", optimized_path=optimized)
                result.notes.append("ONNX Runtime could not optimize again the BASIC-level model it saved for the "
                                    "partition check (its MatMulAddFusion: 'Attempt to replace the existing "
                                    "tensor', an ORT defect); the CPU EP's numbers come from the model as "
                                    "exported, optimized at ORT_ENABLE_ALL")
            compiled.numerics_model, compiled.numerics_session = optimized, session
            result.artifacts.append(optimized)
            result.evidence["numerics"] = ev.MEASURED
            result.numerics_assumption = (f"fp16 emulation off: these are the CPU EP's numbers for the "
                                                  f"partitioned graph, not a prediction of {self.ep_name}'s")
            return run_session(session, inputs)
        from ..emulate.fp16_onnx import EmulationFailed, emulate_fp16
        accelerated = {n.id for n in result.graph.nodes if n.backend != "cpu"}
        result.evidence["numerics"] = ev.EMULATED
        if not accelerated:
            result.numerics_assumption = ("nothing is accelerated on this graph: every node runs on the CPU "
                                                  "EP in fp32, so the numbers are the CPU EP's")
            result.evidence["numerics"] = ev.MEASURED
            compiled.numerics_model = compiled.basic_path
            compiled.numerics_session = make_session(compiled.basic_path, "ORT_DISABLE_ALL")
            return run_session(compiled.numerics_session, inputs)

        def run(path):
            return run_session(make_session(path, "ORT_DISABLE_ALL"), inputs)

        try:
            em = emulate_fp16(compiled.model, accelerated, os.path.dirname(compiled.basic_path), run)
        except EmulationFailed as e:
            # Whose failure is it? If the model as given (fp32, CPU EP) fails too, the model is at fault: that
            # error is the target's, as on every other ORT target.
            run(compiled.basic_path)
            # xc's emulation failed, not the model: partitions, fallbacks and boundaries stand; the numerics say so.
            result.numerics_failed = {
                "why": "xc's fp16 emulation could not build a model ONNX Runtime runs: " + str(e),
                "attempts": e.attempts}
            result.notes.append("fp16 emulation failed (xc's, not the model's); partitions and fallbacks are "
                                "still ORT's prediction")
            return {}
        result.artifacts.append(em.path)
        compiled.numerics_model = em.path
        compiled.numerics_session = make_session(em.path, "ORT_DISABLE_ALL")
        assumption = self.fp16_assumption
        if em.kept_fp32_ops:   # converted rungs: op types the converter leaves in fp32
            assumption += (f"; {', '.join(em.kept_fp32_ops)} nodes kept in fp32 (the converter cannot type them in "
                           "fp16)")
        elif em.method == "rounded":
            assumption = (f"emulated, weaker: the fp16 conversion of the {self.ep_name} partitions failed, so every "
                          "tensor those nodes produce and every weight only they read is rounded to fp16, with "
                          "the arithmetic in fp32 (fp16 storage, not fp16 compute)")
        result.numerics_assumption = assumption
        result.info["emulation"] = {"method": em.method, "attempts": em.attempts,
                                    "kept_fp32_ops": em.kept_fp32_ops}
        return em.outputs


    def _artifact_paths(self, compiled, result):
        # What ships is the ONNX model the EP partitions; the fp16-emulation and optimized models are xc's.
        return ([compiled.basic_path], "") if compiled is not None else ([], "nothing was compiled")

    @property
    def profile_method(self) -> str:
        return (f"the nodes {self.ep_name} leaves on the CPU EP, timed on this host: the partitioned "
                "(basic-optimized) graph in an ORT CPU session with profiling on and no further optimization, so "
                "every node keeps its name; each fallback node's kernel events summed per run, the first run left "
                f"out as warm-up. Nodes {self.ep_name} takes are not timed (its device is not here)")

    def _profile(self, compiled, inputs, captured, result, runs):
        from .ort_common import read_profile, times_from_profile
        with result.toolchain_call("profile"):
            session = make_session(compiled.basic_path, "ORT_DISABLE_ALL",
                                   profile_dir=os.path.dirname(compiled.basic_path))
            for _ in range(runs + 1):
                run_session(session, inputs)
            profile = session.end_profiling()
        try:
            times = times_from_profile(read_profile(profile))
        finally:
            os.remove(profile)
        on_cpu = {n.id for n in result.graph.nodes if n.fallback}
        return {k: v for k, v in times.items() if k in on_cpu}


def _size_boundaries(blocks: list[dict], compiled, inputs, cost: tuple[float, float]) -> None:
    from ..analysis.boundaries import fill_measured
    from .ort_common import probe_values
    wanted = {i["tensor"] for b in blocks for i in b["items"] if i["bytes"] is None}
    if not wanted:
        return
    measured = probe_values(compiled.basic_path, {t: t for t in wanted}, inputs)
    for b in blocks:
        b.update(fill_measured(b, measured, *cost))


def _with_fixed_inputs(model, specs, workdir: str):
    """A copy of `model` whose graph inputs have the shapes xc resolved (ORT's make_input_shape_fixed, then shape
    inference again), and {input: shape} for the inputs that changed; ({} when nothing was symbolic)."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import (
        ModelProtoWithShapeInfo,
        make_input_shape_fixed,
    )
    resolved = {s.name: list(s.shape) for s in specs}
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    changed = {}
    for vi in fixed.graph.input:
        dims = vi.type.tensor_type.shape.dim if vi.type.HasField("tensor_type") else []
        if vi.name in resolved and any(not d.HasField("dim_value") for d in dims) \
                and len(dims) == len(resolved[vi.name]):
            make_input_shape_fixed(fixed.graph, vi.name, resolved[vi.name])
            changed[vi.name] = resolved[vi.name]
    if not changed:
        return model, {}
    del fixed.graph.value_info[:]  # inferred again from the fixed inputs
    tmp = os.path.join(workdir, ".fixed-inputs.onnx")
    onnx.save(fixed, tmp)
    try:
        inferred = ModelProtoWithShapeInfo(_path(tmp)).model_with_shape_info
    finally:
        os.remove(tmp)
    return inferred, changed


def _tensor_sizes(model) -> dict[str, tuple[list, str]]:
    """Tensor name -> (shape, dtype) where the model's shape inference knows it."""
    from onnx import helper
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if tt.HasField("shape") and all(d is not None for d in dims):
            try:
                out[vi.name] = (dims, str(helper.tensor_dtype_to_np_dtype(tt.elem_type)))
            except Exception:  # noqa: BLE001 — an element type numpy cannot name
                continue
    return out


def _count_reasons(graph: Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in graph.nodes:
        if n.fallback and n.kind == COMPUTE:
            for r in (n.fallback_reason or "").split("; "):
                key = r.split(" (")[0]
                counts[key] = counts.get(key, 0) + 1
    return counts


def _param_share(model, in_group) -> float | None:
    """Share of initializer bytes consumed by accelerated nodes (a proxy for where the weights, and most FLOPs, go)."""
    from onnx import helper
    size = {}
    for init in model.graph.initializer:
        n = 1
        for d in init.dims:
            n *= d
        size[init.name] = n * helper.tensor_dtype_to_np_dtype(init.data_type).itemsize
    total = accel = 0
    for node in model.graph.node:
        b = sum(size.get(i, 0) for i in node.input)
        total += b
        if node.name in in_group:
            accel += b
    return round(accel / total, 4) if total else None


def _path(p):
    import pathlib
    return pathlib.Path(p)


@register
class OrtNnapi(OrtMobileTarget):
    id = "ort-nnapi"
    # Android's NDK guide (developer.android.com/ndk/guides/neuralnetworks) says "NNAPI is deprecated" as of
    # Android 15: out of the default set and of the Overview's default pairs (no `shipped_with`); still selectable.
    deprecated = "NNAPI is deprecated since Android 15"
    label = "ONNX Runtime · NNAPI EP (Android)"
    description = "ORT's partition checker for the NNAPI EP; CPU EP for the rest; fp16-relaxed emulation optional"
    evidence = {"assignment": ev.PREDICTED_RUNTIME, "precision": ev.PREDICTED_RUNTIME, "numerics": ev.EMULATED,
                "fusion": ev.REPORTED}
    ep_name = "NnapiExecutionProvider"
    accelerator = "NNAPI (Android's NPU / GPU / DSP drivers)"
    backend = "nnapi"
    Options = OrtMobileOptions      # fp16 off: NNAPI_FLAG_USE_FP16 is opt-in in ORT
    fp16_assumption = ("emulated: NNAPI_FLAG_USE_FP16 (relaxed fp32→fp16) on the NNAPI partitions — converted to "
                       "fp16 by onnxconverter-common (weights and tensors rounded to fp16), CPU-EP nodes in fp32, run "
                       "on ORT's CPU EP, which computes ops lacking an fp16 kernel in fp32 between casts; the "
                       "device's own fp16 kernels round more often and may drift further")

    def _compile(self, captured, workdir, result):
        # Said first, so the report block carries it whether or not the compile succeeds.
        result.notes.append(f"{self.deprecated}: not in xc's default targets; LiteRT and ExecuTorch are Android's "
                            "current runtimes")
        return super()._compile(captured, workdir, result)

    def _checker(self, model):
        from onnxruntime.tools.mobile_helpers.usability_checker import (
            check_nnapi_partitions,
        )
        return check_nnapi_partitions(model, require_fixed_input_sizes=True)


@register
class OrtCoreml(OrtMobileTarget):
    id = "ort-coreml"
    shipped_with = {"coreml-ane": 8}        # iOS through ONNX Runtime and natively
    label = "ONNX Runtime · CoreML EP, MLProgram (iOS)"
    description = "ORT's partition checker for the CoreML EP (MLProgram); CPU EP for the rest; fp16 emulation"
    evidence = {"assignment": ev.PREDICTED_RUNTIME, "precision": ev.PREDICTED_RUNTIME, "numerics": ev.EMULATED,
                "fusion": ev.REPORTED}
    ep_name = "CoreMLExecutionProvider"
    accelerator = "Core ML (Apple GPU / Neural Engine)"
    backend = "coreml"
    max_rank = 5  # the checker's CoreML limit
    # fp16 on: Core ML runs MLProgram partitions on the GPU / Neural Engine in fp16
    Options = with_defaults(OrtCoremlOptions, "OrtCoremlOptions", fp16=True)
    fp16_assumption = ("emulated: the CoreML EP's MLProgram partitions in fp16 (as on the GPU / Neural Engine) — "
                       "converted by onnxconverter-common (weights and tensors rounded to fp16), CPU-EP nodes in fp32, "
                       "run on ORT's CPU EP, which computes ops lacking an fp16 kernel in fp32 between casts; for "
                       "op-by-op fp16 rounding see coreml-ane")

    def _checker(self, model):
        from onnxruntime.tools.mobile_helpers.usability_checker import (
            check_coreml_partitions,
        )
        fmt = self.settings.model_format
        config = f"coreml_supported_{'neuralnetwork' if fmt == 'NeuralNetwork' else 'mlprogram'}_ops.md"
        return check_coreml_partitions(model, require_fixed_input_sizes=True, config_filename=config)
