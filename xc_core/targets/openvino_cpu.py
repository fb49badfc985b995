"""`openvino-cpu`: OpenVINO's CPU plugin. The runtime model (what really executes) is read back: each executed
layer lists the original layers fused into it (`originalLayersNames`), its kernel (`layerType`, `primitiveType`)
and its precision (`runtimePrecision`). On bf16-capable CPUs the plugin runs bf16 by itself; the report says so.
"""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .. import evidence as ev
from ..analysis.layout_audit import LayoutMoves
from ..ir import CAST, COMPUTE, CONSTANT, LAYOUT, Graph, Node, precision_of_dtype
from ..readers.openvino import LAYER_KINDS, graph_io, openvino_model_graph, port_tensors
from .base import CostRunner, Target, register
from .options import option

# Artifact names (each .xml with its .bin): the CPU plugin's execution graph, and the model it compiled as an IR.
RUNTIME_MODEL, IR_MODEL = "runtime_model.xml", "model.xml"



@dataclass
class OpenVinoCompiled:
    """What compile_model hands on to read-back and run."""
    core: Any            # the openvino.Core
    model: Any           # the model as read (core.read_model)
    compiled: Any        # the CPU plugin's CompiledModel


# What the runtime model's rt_info says of each layer that xc reads (ov::exec_model_info, the CPU plugin's
# execution-graph fields).
_RUNTIME_KEYS = ("layerType", "originalLayersNames", "primitiveType", "execOrder", "outputLayouts",
                 "runtimePrecision")


# ov::hint::inference_precision and ov::hint::performance_mode, the two hints the CPU plugin's docs tell users to
# set (docs.openvino.ai, "CPU Device": "Supported inference data types", "Performance hints"). Neither has a
# default of xc's: unset, the plugin chooses (and the hint is not passed).
@dataclass(frozen=True)
class OpenVinoOptions:
    inference_precision: Literal["f32", "bf16", "f16"] | None = option(
        None, help="INFERENCE_PRECISION_HINT: f32, bf16 or f16 (default: the plugin's choice — bf16 on CPUs with AMX "
                   "/ avx512_bf16)", aliases=("precision",))
    performance_hint: Literal["LATENCY", "THROUGHPUT"] | None = option(
        None, help="PERFORMANCE_HINT: LATENCY or THROUGHPUT (default: the plugin's, LATENCY)")


@register
class OpenVinoCpu(Target):
    worker_modules = ("openvino",)
    fusion_catalogue = "openvino-cpu"
    steps_caption = ("OpenVINO: the model as read, after its common transformations, and the CPU plugin's runtime "
                     "model.")
    layout_moves = LayoutMoves("OpenVINO's runtime model (outputLayouts per layer, Reorder layers)")
    # The runtime model is the graph the CPU plugin executes: Netron draws it, but read_model refuses it (its layers
    # carry no opset version); the IR beside it is the model it compiled, which read_model loads.
    artifact_notes = {
        "runtime_model.xml": "execution graph — open in Netron; not loadable by read_model",
        "runtime_model.bin": "execution graph — open in Netron; not loadable by read_model",
        "model.xml": "IR — loadable by openvino.Core().read_model (keep model.bin beside it)",
        "model.bin": "IR — loadable by openvino.Core().read_model (keep model.bin beside it)",
    }
    relative_cost = 2   # compile_model, then a second compile with the probed outputs for per-layer drift

    def needs_live_source(self, kind):
        return kind == "openvino-ir"   # compiles the uploaded IR itself, unpacked again in the worker

    id = "openvino-cpu"
    label = "OpenVINO · CPU plugin"
    description = "OpenVINO CPU plugin compile; runtime model read back (fused layers, runtime precision)"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}
    Options = OpenVinoOptions
    intermediates_method = ("ONNX tensors the CPU plugin materializes anyway (each the output of the last original "
                            "layer of a runtime layer) added as model outputs (Model.add_outputs) and the model "
                            "compiled again with the same config; used only if the recompiled runtime model executes "
                            "the same layers fused the same way (Result/Output, Reorder and Convert layers aside) — "
                            "outputs whose exposure changed a fusion are dropped and the check repeated once")

    def accepts(self, captured):
        if captured.ir_path:
            return True, ""   # an OpenVINO IR source compiles as it is
        return super().accepts(captured)

    def _config(self) -> dict:
        config = {}
        if self.settings.inference_precision is not None:
            config["INFERENCE_PRECISION_HINT"] = self.settings.inference_precision
        if self.settings.performance_hint is not None:
            config["PERFORMANCE_HINT"] = self.settings.performance_hint
        return config

    @classmethod
    def available(cls):
        try:
            import openvino  # noqa: F401
        except ImportError:
            return False, "openvino is not installed"
        return True, ""

    def _compile(self, captured, workdir, result):
        import openvino as ov
        core = ov.Core()
        model = core.read_model(captured.ir_path or captured.onnx_path)
        # PERF_COUNT (ov::enable_profiling) on the one compile: the plugin then keeps per-layer counters for the
        # profiled runs, with the same runtime model (its layers and fusions do not change with it), so the
        # profile needs no second compile.
        compiled = core.compile_model(model, "CPU", {**self._config(), "PERF_COUNT": True})
        os.makedirs(workdir, exist_ok=True)
        # The execution graph: what the plugin runs, for Netron; read_model refuses it (its layers carry no opset
        # version). So the model it compiled is kept beside it as an IR that read_model loads, weights as they
        # were compiled (save_model would compress them to fp16 by default).
        runtime_xml = os.path.join(workdir, RUNTIME_MODEL)
        ov.serialize(compiled.get_runtime_model(), runtime_xml)
        ir_xml = os.path.join(workdir, IR_MODEL)
        ov.save_model(model, ir_xml, compress_to_fp16=False)
        result.artifacts += [runtime_xml, runtime_xml[:-4] + ".bin", ir_xml, ir_xml[:-4] + ".bin"]
        result.info["openvino_version"] = ov.get_version()
        # What the plugin runs (bf16 by itself on AMX / avx512_bf16 CPUs), and what was asked for, if anything.
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        result.info["inference_precision"] = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
        result.info["inference_precision_requested"] = self.settings.inference_precision
        result.declared_precisions = {"bf16": ["bf16"], "f16": ["fp16"]}.get(
            str(self.settings.inference_precision or "").lower(), [])
        result.info["performance_hint"] = str(compiled.get_property("PERFORMANCE_HINT"))
        result.info["num_streams"] = str(compiled.get_property("NUM_STREAMS"))
        caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        result.info["cpu_capabilities"] = list(caps)
        if "BF16" in caps and self.settings.inference_precision is None:
            result.notes.append("this CPU supports bf16: the plugin may run bf16 kernels without being asked")
        return OpenVinoCompiled(core=core, model=model, compiled=compiled)

    def _inspect(self, compiled, captured, result) -> Graph:
        g, friendly_to_onnx = self._runtime_graph(compiled, captured, result)
        t0 = time.perf_counter()
        result.stages.extend(self._steps(compiled, captured, friendly_to_onnx, g, result))
        # inside inspect: the stage views alone (bench/big_graph.py weighs them against the compile)
        result.timings["stage_views"] = round(time.perf_counter() - t0, 4)
        return g

    def _runtime_graph(self, compiled, captured, result) -> tuple[Graph, dict]:
        """The runtime model in the IR, traced to the ONNX nodes; and the friendly-name map it was traced with."""
        friendly_to_onnx = _friendly_name_map(compiled.model, captured)
        onnx_nodes = captured.onnx_graph.by_id()
        with result.toolchain_call("inspect"):
            runtime = compiled.compiled.get_runtime_model()
        g = Graph(name=captured.source.name, stage="runtime")
        unmapped_names = set()
        constant_layers: set[str] = set()
        known: dict = {}                         # output tensors read so far (port_tensors)
        for op in runtime.get_ordered_ops():     # topological: a layer's producers come before it
            rt = op.get_rt_info()
            present = set(rt.keys())
            # Only the keys read below: the others (execTimeMcs, outputPrecisions) cost 3× as much to read.
            info = {k: rt[k].astype(str) for k in _RUNTIME_KEYS if k in present}
            layer_type = info.get("layerType", op.get_type_name())
            kind = LAYER_KINDS.get(layer_type, COMPUTE)
            inputs, outputs = port_tensors(op, known)
            producers = [t.name.rsplit(":", 1)[0] for t in inputs]      # "<producer friendly name>:<port>"
            # A layer fed by constants only (a reshape of a weight) is run once while compiling, not per inference.
            if kind == CONSTANT or (producers and all(p in constant_layers for p in producers)):
                constant_layers.add(op.get_friendly_name())
                if kind in (LAYOUT, CAST):
                    kind = CONSTANT    # weight repacking (bf16 CPUs reorder every weight), not a layout move
            originals = [s for s in info.get("originalLayersNames", "").split(",") if s]
            absorbed = []
            for name in originals:
                onnx_name = friendly_to_onnx.get(name) or _prefix_match(name, onnx_nodes)
                if onnx_name and onnx_name not in absorbed:
                    absorbed.append(onnx_name)
                elif not onnx_name:
                    unmapped_names.add(name)
            src = [onnx_nodes[a] for a in absorbed]
            dynamic_src = [s for s in src if s.kind == COMPUTE]
            paths = [s.module_path for s in dynamic_src if s.module_path is not None]
            from .onnx_regions import _common_path, _unique
            node = Node(id=op.get_friendly_name(), op_type=layer_type, domain="openvino", kind=kind,
                        inputs=inputs, outputs=outputs,
                        attributes={"primitiveType": info.get("primitiveType"), "execOrder": info.get("execOrder"),
                                    "originalLayersNames": originals,
                                    "outputLayouts": info.get("outputLayouts")},
                        backend="cpu", kernel=info.get("primitiveType"),
                        precision=precision_of_dtype(info.get("runtimePrecision", "").lower() or None),
                        source_ops=_unique(s for a in dynamic_src for s in a.source_ops),
                        module_path=_common_path(paths) if paths else None,
                        source_location=next((s.source_location for s in dynamic_src if s.source_location), None),
                        fused_from=[s.id for s in dynamic_src])
            if kind == COMPUTE and not dynamic_src and src:
                # Only constant ONNX nodes behind it: OpenVINO kept a constant-subgraph computation at run time.
                node.source_ops = _unique(s for a in src for s in a.source_ops)
            g.nodes.append(node)
        _fill_gaps(g, captured.onnx_graph)
        g.inputs, g.outputs = graph_io(runtime)
        result.info["unmapped_original_layers"] = sorted(unmapped_names)[:200]
        carried = {a for n in g.nodes for a in n.fused_from}
        result.info["constant_folded"] = [n.id for n in captured.onnx_graph.nodes
                                          if n.kind == COMPUTE and n.id not in carried]
        return g, friendly_to_onnx

    def _steps(self, compiled, captured, friendly_to_onnx: dict, runtime: Graph, result) -> list:
        """The model as read, after OpenVINO's common (MOC) transformations, then the CPU plugin's runtime model
        (where its fusions, reorders and precisions show)."""
        from ..lowering import FINAL, FUSION, GRAPH_OPT, IMPORT, KERNEL, graph_step
        onnx_nodes = captured.onnx_graph.by_id()
        read = openvino_model_graph(compiled.model, "openvino-read")
        _trace_friendly_names(read, friendly_to_onnx, onnx_nodes)
        steps = [graph_step(IMPORT, "the model as read (core.read_model)", read)]
        try:
            from openvino._offline_transformations import apply_moc_transformations
            with result.toolchain_call("inspect"):
                moc = compiled.model.clone()
                apply_moc_transformations(moc, cf=True)
            g = openvino_model_graph(moc, "openvino-moc")
            _trace_friendly_names(g, {**friendly_to_onnx, **_friendly_name_map(moc, captured)}, onnx_nodes)
            steps.append(graph_step(GRAPH_OPT, "common transformations (apply_moc_transformations, "
                                               "constant folding on)", g))
        except Exception as e:  # noqa: BLE001 — a private API may move; the other steps still stand
            steps.append(graph_step(GRAPH_OPT, "common transformations", read, note="not exposed by this OpenVINO "
                                    f"build ({type(e).__name__}); the model as read is shown"))
            steps[-1].graph, steps[-1].graph_ref = None, None
        steps += [graph_step(FUSION, "CPU plugin compile: fused layers (runtime model)", runtime, ref=FINAL),
                  graph_step(KERNEL, "CPU plugin compile: primitives, reorders, precisions (runtime model)",
                             runtime, ref=FINAL)]
        return steps

    @staticmethod
    def _feeds(cm, inputs) -> dict:
        from ..sources.openvino_ir import port_name
        feeds = {}
        for port in cm.inputs:
            names = port.get_names() or {port_name(port)}
            name = next((n for n in names if n in inputs), None)
            if name is None:
                raise KeyError(f"no value for model input {sorted(names)}")
            feeds[port] = np.asarray(inputs[name], order="C")
        return feeds

    def _run(self, compiled, inputs, captured, result):
        cm = compiled.compiled
        values = cm(self._feeds(cm, inputs))
        out = {}
        for i, port in enumerate(cm.outputs):
            # OpenVINO can report outputs under other tensor names than the ONNX graph: match by name, else by
            # position (OpenVINO keeps the ONNX output order).
            names = port.get_names()
            name = next((n for n in captured.output_names if n in names), None)
            if name is None and i < len(captured.output_names):
                name = captured.output_names[i]
            out[name or f"output_{i}"] = np.asarray(values[port])
        return out

    profile_method = ("the CPU plugin's performance counters (PERF_COUNT, InferRequest.get_profiling_info) of a "
                      "second compile of the same model and configuration, one infer request: each layer's time in "
                      "each run taken from the counters' running totals, the first two runs left out as warm-up; a "
                      "layer of the runtime model the plugin does not execute (NOT_RUN: an in-place reshape) "
                      "takes 0")

    def _profile(self, compiled, inputs, captured, result, runs):
        """The plugin's counter of a layer is not that run's time: it is the mean over every execution of the
        layer since the compile (intel_cpu PerfCount::avg, total_duration / num, whole µs). Read run after run it
        fell 58, 44, 36 … 7 µs over 30 runs of vision-mini's FullyConnected — the first run's one-time cost (242
        µs, the second run's 46, against 1–8 µs after) averaged into all of them, so a median of the means was
        mostly the warm-up: two warm-up runs here, the first runs of a fresh compile. On a
        compile of its own the number of executions is known (the n-th run of its request is the n-th), so each
        run's time is the difference of the running totals: n × mean_n − (n − 1) × mean_{n−1}, exact to the
        counters' truncation to whole µs (at most n − 1 µs, so a negative difference is read as 0). The second
        compile's layers are those of the analysed one in the same order; only the numbers OpenVINO appends to
        generated names differ (Multiply_5207 / Multiply_12961), so its counters are named by position, after
        checking that every position holds the same layer type and kernel."""
        import time as _time

        import openvino as ov

        from .base import RUN_KEY
        core = ov.Core()
        with result.toolchain_call("profile"):
            fresh = core.compile_model(core.read_model(captured.ir_path or captured.onnx_path), "CPU",
                                       {**self._config(), "PERF_COUNT": True})
        analysed = compiled.compiled.create_infer_request().get_profiling_info()
        request = fresh.create_infer_request()
        layers = request.get_profiling_info()
        if [(c.node_type, c.exec_type) for c in layers] != [(c.node_type, c.exec_type) for c in analysed]:
            raise RuntimeError("the profiling compile's runtime model differs from the analysed one (layer types or "
                               "kernels in another order)")
        names = [c.node_name for c in analysed]
        feeds = self._feeds(fresh, inputs)
        walls, means = [], []
        for _ in range(runs + WARM_UP_RUNS):
            t0 = _time.perf_counter()
            with result.toolchain_call("profile"):
                request.infer(feeds)
            walls.append((_time.perf_counter() - t0) * 1e6)
            # NOT_RUN: a layer the plugin does not execute (an in-place reshape or squeeze of the runtime model), or
            # one whose mean is under 1 µs; a layer fused into another is no node at all.
            means.append([c.real_time.total_seconds() * 1e6 if c.status == c.status.EXECUTED else 0.0
                          for c in request.get_profiling_info()])
        samples: dict[str, list[float]] = {RUN_KEY: walls[WARM_UP_RUNS:]}
        for run in runs_from_running_means(means)[WARM_UP_RUNS:]:
            per_layer: dict[str, float] = {}
            for name, us in zip(names, run):
                per_layer[name] = per_layer.get(name, 0.0) + us
            for name, us in per_layer.items():
                samples.setdefault(name, []).append(us)
        return samples

    # -- cost (targets/run_cost.py) --------------------------------------------------------------------------
    # The profiled runs are wall-clock times of InferRequest.infer on a compile of the same model and
    # configuration (PERF_COUNT on, as on the analysed one): the steady runs' very figure.
    profiled_runs_are_steady = True
    runtime_memory_absent = ("OpenVINO's CPU plugin gives no figure of its own for its memory (the memory "
                             "statistics property is the GPU plugin's)")

    def _cost_runner(self, compiled, inputs, captured):
        cm = compiled.compiled
        request, feeds = cm.create_infer_request(), self._feeds(cm, inputs)
        return CostRunner(run=lambda: request.infer(feeds), load_what=(
            "inside compile_s: OpenVINO's compile_model reads the model and builds the CPU plugin's executable "
            "graph in one call, as an app does (no separate load of a compiled blob)"))

    def _artifact_paths(self, compiled, result):
        ir = [p for p in result.artifacts if os.path.basename(p) in (IR_MODEL, IR_MODEL[:-4] + ".bin")]
        return ir, "" if ir else "the IR was not saved"

    # -- intermediates (per-layer drift) ----------------------------------------------------------------------
    def _intermediates(self, compiled, inputs, captured, result, probes):
        from .ort_common import onnx_probe_tensors
        if captured.onnx_path is None:
            return {}  # an IR source has no reference to compare layer values with
        producer = {t.name: n.id for n in captured.onnx_graph.nodes for t in n.outputs}
        # The tensor a runtime layer writes is the output of its last original layer (fused_from is in ONNX order).
        materialized = {n.fused_from[-1] for n in result.graph.nodes if n.kind == COMPUTE and n.fused_from}
        tensors = {op: t for op, t in onnx_probe_tensors(captured, probes).items()
                   if producer.get(t) in materialized}
        result.info["intermediates_coverage"] = {"materialized_probe_tensors": len(tensors)}
        if not tensors:
            return {}
        base = _fused_groups(result.graph)
        values, groups = self._with_outputs(compiled, captured, sorted(set(tensors.values())), inputs)
        if groups != base:
            culprits = _culprits(base, groups, set(tensors.values()), captured.onnx_graph)
            dropped = sorted(culprits)
            tensors = {op: t for op, t in tensors.items() if t not in culprits}
            if culprits and tensors:
                values, groups = self._with_outputs(compiled, captured, sorted(set(tensors.values())), inputs)
            if groups != base or not tensors:
                result.notes.append(
                    "intermediate values unavailable: exposing the layer outputs as model outputs would change the "
                    f"CPU plugin's fusions ({_layer_count(base)} fused layers compiled, {_layer_count(groups)} with "
                    "the outputs exposed)")
                return {}
            result.notes.append(f"per-layer drift: {len(dropped)} layer output(s) left out because exposing them "
                                f"changed a fusion ({', '.join(dropped[:5])})")
            result.info["intermediates_coverage"]["left_out_changed_fusion"] = dropped
        return {op: values[t] for op, t in tensors.items() if t in values}

    def _with_outputs(self, compiled, captured, names: list[str], inputs) -> tuple[dict, "Counter"]:
        """Compile the ONNX model again with `names` as extra outputs; run it; return the values by tensor name and
        the recompiled runtime model's fused groups."""
        from .base import TargetResult
        core = compiled.core
        model = core.read_model(captured.onnx_path)
        present = {n for o in model.outputs for n in o.get_names()}
        for name in names:
            if name not in present:
                try:
                    model.add_outputs(name)
                except RuntimeError:  # a tensor name the ONNX frontend did not keep: that layer stays unprobed
                    continue
        cm = core.compile_model(model, "CPU", self._config())
        # Only its fused groups are compared: the runtime graph, without the steps (no second MOC pass).
        graph, _ = self._runtime_graph(OpenVinoCompiled(core=core, model=model, compiled=cm), captured,
                                       TargetResult("probe"))
        feeds = {}
        for port in cm.inputs:
            name = next((n for n in port.get_names() if n in inputs), None)
            if name is None:
                raise KeyError(f"no value for model input {sorted(port.get_names())}")
            feeds[port] = np.asarray(inputs[name], order="C")
        values = cm(feeds)
        out = {}
        for port in cm.outputs:
            for n in port.get_names():
                if n in names:
                    out[n] = np.asarray(values[port])
        return out, _fused_groups(graph)


# Runs of the profiling compile left out: its first pays the compile's one-time costs in full, its second still in
# part (vision-mini's FullyConnected: 242, 46, then 1–8 µs).
WARM_UP_RUNS = 2


def runs_from_running_means(means: list[list[float]]) -> list[list[float]]:
    """Each run's time per layer from the CPU plugin's counters read after each run of a fresh compile: the
    counters are running means since the compile (total / n after the n-th run, in whole µs), so the n-th run took
    n × mean_n − (n − 1) × mean_{n−1}. The truncation to whole µs can make a difference dip below 0 (by less
    than n µs): read as 0."""
    out, totals = [], None
    for n, row in enumerate(means, start=1):
        now = [n * m for m in row]
        out.append([max(t - (totals[i] if totals else 0.0), 0.0) for i, t in enumerate(now)])
        totals = now
    return out


# Layers OpenVINO creates under a new name, and the ONNX ops they can stand for: an unnamed MVN layer takes the
# LayerNormalization before a MatMul, not the MatMul (which the FullyConnected after it runs).
RENAMED_LAYER_OPS = {
    "MVN": {"LayerNormalization", "InstanceNormalization", "GroupNormalization", "ReduceMean", "Sub", "Pow",
            "Sqrt", "Div", "Mul", "Add"},
    "Deconvolution": {"ConvTranspose", "Add"},
}


def _fill_gaps(g: Graph, onnx_graph: Graph) -> None:
    """OpenVINO's transformations rename some ops they rewrite (a Conv whose weights absorbed a BatchNorm becomes
    "Multiply_123"; LayerNorm becomes "MVN_45"), so `originalLayersNames` misses them. Recover them from structure:
    ONNX nodes no layer names sit between the ONNX nodes of neighbouring layers; they belong to the unmapped layer
    that consumes into a mapped one, else to the layer right after them."""
    from .onnx_regions import _input_dependent, _unique
    by_id = g.by_id()
    # Layers fed only by constants compute a constant subgraph (e.g. weight reshapes) at load time.
    for n in g.nodes:
        producers = [by_id.get(t.name.rsplit(":", 1)[0]) for t in n.inputs]
        if n.kind == COMPUTE and producers and all(p is not None and p.kind == CONSTANT for p in producers):
            # A weight transpose named after its MatMul ("node_MatMul_3/transpose_b") computes no part of the
            # MatMul itself: the layer that runs the MatMul claims it below.
            n.kind, n.fused_from, n.source_ops = CONSTANT, [], []
    onnx_index = onnx_graph.by_id()
    onnx_producer = {t.name: x for x in onnx_graph.nodes for t in x.outputs}
    dynamic = _input_dependent(onnx_graph)
    claimed = {a for n in g.nodes for a in n.fused_from}
    consumers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for t in n.inputs:
            consumers.setdefault(t.name.rsplit(":", 1)[0], []).append(n)

    def unclaimed_feeding(onnx_ids, allowed: set[str] | None = None) -> list[Node]:
        found, seen, stack = [], set(), [t.name for i in onnx_ids for t in onnx_index[i].inputs]
        while stack:
            x = onnx_producer.get(stack.pop())
            if x is None or x.id in claimed or x.id in seen or x.id not in dynamic or x.kind != COMPUTE:
                continue
            seen.add(x.id)
            if allowed is not None and x.op_type not in allowed:
                stack.extend(t.name for t in x.inputs)  # look past it, leave it to the layer that runs it
                continue
            claimed.add(x.id)
            found.append(x)
            stack.extend(t.name for t in x.inputs)
        return found

    def mapped_consumers(n: Node, depth: int = 0) -> list[Node]:
        out = []
        for c in consumers.get(n.id, []):
            if c.fused_from:
                out.append(c)
            elif c.kind == LAYOUT and depth < 3:
                out += mapped_consumers(c, depth + 1)
        return out

    for n in g.nodes:
        if n.kind == COMPUTE and not n.fused_from:
            for c in mapped_consumers(n):
                n.fused_from += [x.id for x in unclaimed_feeding(c.fused_from, RENAMED_LAYER_OPS.get(n.op_type))]
    for n in g.nodes:
        if n.kind == COMPUTE and n.fused_from:
            n.fused_from += [x.id for x in unclaimed_feeding(list(n.fused_from))]
    onnx_rank = {i: k for k, i in enumerate(onnx_index)}   # once: list.index per node made this quadratic
    for n in g.nodes:
        if n.fused_from:
            src = [onnx_index[i] for i in n.fused_from]
            n.source_ops = _unique(s for x in src for s in x.source_ops)
            n.fused_from = sorted(n.fused_from, key=onnx_rank.__getitem__)
            paths = [x.module_path for x in src if x.module_path is not None]
            from .onnx_regions import _common_path
            n.module_path = _common_path(paths) if paths else n.module_path
            n.source_location = n.source_location or next((x.source_location for x in src if x.source_location),
                                                          None)


def _trace_friendly_names(g: Graph, friendly_to_onnx: dict, onnx_nodes: dict) -> None:
    """An OpenVINO model's ops traced to the ONNX nodes they came from (by friendly name, output tensor, or the
    "<node>/..." names OpenVINO gives the ops it splits a node into), and so to the source ops."""
    from .onnx_regions import _common_path, _unique
    for n in g.nodes:
        origins = []
        for name in [n.id, *n.attributes.get("fused_names", [])]:
            origin = friendly_to_onnx.get(name) or _prefix_match(name, onnx_nodes)
            if origin and origin not in origins and onnx_nodes[origin].kind == COMPUTE:
                origins.append(origin)
        nodes = [onnx_nodes[o] for o in origins] if n.kind == COMPUTE else []
        n.source_ops = _unique(s for node in nodes for s in node.source_ops)
        n.fused_from = [node.id for node in nodes]
        paths = [node.module_path for node in nodes if node.module_path is not None]
        n.module_path = _common_path(paths) if paths else None


def _friendly_name_map(model, captured) -> dict[str, str]:
    """OpenVINO op friendly name (as read from ONNX) -> ONNX node name, by exact name or by output tensor."""
    onnx_nodes = captured.onnx_graph.by_id()
    producer = {t.name: n.id for n in captured.onnx_graph.nodes for t in n.outputs}
    out = {}
    for op in model.get_ordered_ops():
        fname = op.get_friendly_name()
        if fname in onnx_nodes:
            out[fname] = fname
            continue
        for o in op.outputs():
            hit = next((producer[t] for t in o.get_names() if t in producer), None)
            if hit:
                out[fname] = hit
                break
    return out


def _prefix_match(name: str, onnx_nodes: dict) -> str | None:
    """OpenVINO names the ops it splits a node into "<node>/WithoutBiases", "<node>/sink_port_0", ..."""
    while "/" in name:
        name = name.rsplit("/", 1)[0]
        if name in onnx_nodes:
            return name
    return None


def _fused_groups(g: Graph) -> "Counter":
    """The runtime model's fusion decisions: the multiset of ONNX node groups its executed compute layers run (layers
    traced to no ONNX node count under the empty group). Result/Output, Reorder and Convert layers are not compute
    layers: exposing an output adds them without changing any fusion."""
    from collections import Counter
    return Counter(frozenset(n.fused_from) for n in g.nodes if n.kind == COMPUTE)


def _layer_count(groups) -> int:
    return sum(groups.values())


def _culprits(base, new, exposed: set[str], onnx_graph: Graph) -> set[str]:
    """Exposed tensors that broke a fused group: read by a non-first node of it (e.g. the residual of an in-place
    Conv+Sum) or written by a non-last node of it; failing that, every exposed tensor that touches the group."""
    order = {n.id: i for i, n in enumerate(onnx_graph.nodes)}
    index = onnx_graph.by_id()
    strict, loose = set(), set()
    for group in (base - new):
        members = sorted(group, key=lambda i: order.get(i, 0))
        for k, nid in enumerate(members):
            node = index.get(nid)
            if node is None:
                continue
            for t in node.inputs:
                if t.name in exposed:
                    loose.add(t.name)
                    if k > 0:
                        strict.add(t.name)
            for t in node.outputs:
                if t.name in exposed:
                    loose.add(t.name)
                    if k < len(members) - 1:
                        strict.add(t.name)
    return strict or loose
