"""`ort-cpu`: ONNX Runtime's CPU execution provider at ORT_ENABLE_ALL (the `level` option picks another).

The optimized model ORT writes out is read back (fused nodes recognised by (op_type, domain), e.g. FusedConv in
com.microsoft, Conv in com.microsoft.nchwc), traced to the captured graph through boundary tensors, and each node's
provider is taken from ORT's own assignment API (get_provider_graph_assignment_info), checked against its profiling
JSON; the time of each node is the median of its kernel events over a few profiled runs of a second session.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Literal

from .. import evidence as ev
from ..analysis.layout_audit import LayoutMoves
from ..ir import COMPUTE, Graph
from ..lowering import FINAL, FUSION, GRAPH_OPT, IMPORT, INPUT, KERNEL, graph_step
from ..readers.onnx import onnx_ir_graph
from .base import CostRunner, Target, TargetResult, register
from .options import option
from .onnx_regions import map_optimized_graph, onnx_node_precision
from .ort_common import (
    PROVIDER_BACKEND,
    assign_from_api,
    feeds_for,
    make_session,
    onnx_probe_tensors,
    probe_values,
    providers_from_api,
    providers_from_profile,
    read_profile,
    run_session,
    times_from_profile,
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


@dataclass(frozen=True)
class OrtOptions:
    level: Literal["disabled", "basic", "extended", "layout", "all"] = option(
        "all", help="graph optimization level: disabled, basic, extended, layout or all (default all; "
                    "SessionOptions.graph_optimization_level)")


class OrtTarget(Target):
    """An ORT CPU session over some ONNX file; subclasses choose the file. The optimization level is an option."""
    Options = OrtOptions
    steps_caption = "ORT: one optimized model per optimization level, dumped by ORT."
    layout_moves = LayoutMoves("ORT's optimized model (NCHWc blocked ops, ReorderInput/ReorderOutput)")

    @property
    def level(self) -> str:
        return ORT_LEVELS[self.settings.level]

    @property
    def fusion_catalogue(self) -> str | None:
        return _LEVEL_CATALOGUE[self.settings.level]
    intermediates_method = ("ORT's own optimized model (as dumped after its optimization level) with the source ops' tensors "
                            "that survived optimization added as graph outputs, run again with graph optimizations "
                            "disabled (ORT_DISABLE_ALL) so nothing fuses further; tensors fused away are missing")

    def model_for(self, captured, workdir: str, result: TargetResult) -> str:
        return captured.onnx_path

    def _compile(self, captured, workdir, result):
        os.makedirs(workdir, exist_ok=True)
        model_path = self.model_for(captured, workdir, result)
        optimized = os.path.join(workdir, "model.optimized.onnx")
        session = make_session(model_path, self.level, optimized_path=optimized, record_assignment=True)
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
        t0 = time.perf_counter()
        result.stages.extend(self.level_steps(compiled, original, graph, result))
        # inside inspect: the stage views alone (bench/big_graph.py weighs them against the compile)
        result.timings["stage_views"] = round(time.perf_counter() - t0, 4)
        return graph

    def level_steps(self, compiled, original: Graph, final: Graph, result: TargetResult) -> list:
        """The graph after each optimization level up to the configured one, each dumped by ORT itself
        (optimized_model_filepath) and traced back like the final graph."""
        import onnx
        configured = self.settings.level
        levels = [level for level, _ in _LEVEL_STAGES]
        steps = [graph_step(IMPORT, "the ONNX model ORT loads", original, ref=INPUT)]
        left_out = self._levels_left_out(original, levels[1:levels.index(configured)])
        with tempfile.TemporaryDirectory(dir=compiled.workdir) as tmp:
            for level, stage in _LEVEL_STAGES[1:levels.index(configured) + 1]:
                if level == configured:
                    steps.append(graph_step(stage, ORT_LEVELS[level], final, note=left_out, ref=FINAL))
                    break
                if left_out:
                    continue
                path = os.path.join(tmp, f"model.{level}.onnx")
                with result.toolchain_call("inspect"):
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

    def _levels_left_out(self, original: Graph, below: list[str]) -> str:
        """Why the levels before the configured one are not shown ("" when they are): each costs one more session,
        and above --max-level-graph-nodes that costs several times the compile."""
        from ..limits import LIMITS, Limits
        limit = (self.limits or Limits.from_env()).max_level_graph_nodes
        if not below or len(original.nodes) <= limit:
            return ""
        lim = LIMITS["max_level_graph_nodes"]
        return (f"the graphs after {', '.join(ORT_LEVELS[b] for b in below)} are left out: {len(original.nodes):,} ONNX nodes, above the "
                f"{limit:,}-node limit for one more ORT session per level; raise it with {lim.flag} or "
                f"{lim.env} to see them")

    def input_graph(self, compiled, captured) -> Graph:
        """The graph ORT optimized, in the IR with provenance (the captured ONNX for plain ORT targets)."""
        return captured.onnx_graph

    def _run(self, compiled, inputs, captured, result):
        outputs = run_session(compiled.session, inputs)
        unknown = assign_from_api(result.graph, providers_from_api(compiled.session))
        result.info["assignment_source"] = "ort-api"
        # The session registers only the CPU EP, so it takes every node. The API names the nodes ORT partitioned;
        # those made after partitioning (the NCHWc reorders the layout level inserts) it does not know.
        for n in unknown:
            n.backend, n.kernel = "cpu", "CPUExecutionProvider"
        unnamed = [n.id for n in unknown if n.kind == COMPUTE]
        if unnamed:
            result.notes.append(f"{len(unnamed)} compute node(s) not named by ORT's assignment API: "
                                + ", ".join(unnamed[:10]))
        return outputs

    profile_method = ("a second ORT session with profiling on (SessionOptions.enable_profiling) over the optimized "
                      "model ORT saved, loaded with optimizations off (the same nodes and kernels, without paying "
                      "for the optimizer again); each node's kernel events (\"<node>_kernel_time\") summed per run, "
                      "the first run left out as warm-up")

    def _profile(self, compiled, inputs, captured, result, runs):
        with result.toolchain_call("profile"):
            try:
                session = make_session(compiled.optimized, "ORT_DISABLE_ALL", profile_dir=compiled.workdir)
            except Exception:  # noqa: BLE001 — an optimized model ORT cannot load back: optimize again, as compiled
                session = make_session(compiled.input_model, self.level, profile_dir=compiled.workdir)
            for _ in range(runs + 1):
                run_session(session, inputs)
            profile = session.end_profiling()
        try:
            events = read_profile(profile)
        finally:
            os.remove(profile)
        check_assignment(result, providers_from_profile(events))
        return times_from_profile(events)

    def _intermediates(self, compiled, inputs, captured, result, probes):
        return probe_values(compiled.optimized, onnx_probe_tensors(captured, probes), inputs, result)

    # -- cost (targets/run_cost.py) --------------------------------------------------------------------------
    runtime_memory_absent = ("ONNX Runtime's Python API gives no figure of its own for a session's memory (its "
                             "arena's use is not exposed)")

    def _cost_runner(self, compiled, inputs, captured):
        def load():
            try:        # the optimized model, loaded as an app shipping it would: no optimizer run again
                session = make_session(compiled.optimized, "ORT_DISABLE_ALL")
            except Exception:  # noqa: BLE001 — one ORT cannot load back (see _profile): optimize again, as compiled
                session = make_session(compiled.input_model, self.level)
            names, feeds = [o.name for o in session.get_outputs()], feeds_for(session, inputs)
            return lambda: session.run(names, feeds)
        return CostRunner(load=load, load_what=(
            "a new InferenceSession over the optimized model ORT saved, its optimizations off (what an app "
            "shipping that model loads); the analysis's session creation is the compile"))

    def _artifact_paths(self, compiled, result):
        return [compiled.optimized], ""



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
    shipped_with = {"openvino-cpu": 12, "ort-cpu-int8": 13}     # the two CPU runtimes; float against int8
    label = "ONNX Runtime · CPU EP"
    description = "ONNX Runtime CPU execution provider, ORT_ENABLE_ALL; optimized model dumped and read back"
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}


def check_assignment(result: TargetResult, profiled: dict[str, str]) -> None:
    """Where the profile's provider for a node differs from the one the assignment API gave it, the two sources
    disagree: a finding (`assignment_disagreements`), since one of them misreports what ran where."""
    disagree = [{"node": n.id, "op_type": n.op_type, "ort_api": n.kernel, "profile": profiled[n.id]}
                for n in result.graph.nodes
                if n.id in profiled and n.kernel and not n.kernel.startswith(profiled[n.id])]
    result.info["assignment_sources_compared"] = ["ort-api", "profile"]
    if disagree:
        result.info["assignment_disagreements"] = disagree
        result.notes.append(f"ORT's assignment API and its profile disagree on {len(disagree)} node(s): "
                            + ", ".join(d["node"] for d in disagree[:10]))


def _fill_tensor_types(graph: Graph, original: Graph) -> None:
    """ONNX shape inference stops at contrib ops it does not know; tensors that kept their original name keep
    their original type."""
    known = {t.name: t for n in original.nodes for t in n.inputs + n.outputs}
    for n in graph.nodes:
        for t in n.inputs + n.outputs:
            if t.dtype is None and t.name in known:
                t.dtype, t.shape = known[t.name].dtype, t.shape or known[t.name].shape


