"""`coreml-ane` and `coreml-cpu`: coremltools converts the captured model to an ML program; xc reads back what the
MIL pipeline did and where each op will probably run.

- Conversion: from the captured ExportedProgram (`run_decompositions({})` first, then the default table — some
  models convert only with one of them; the report says which worked). TorchScript sources use the TorchScript path;
  ONNX sources the program xc's ONNX → PyTorch route made of them (targets/routed.py).
- One ct.convert per target: its default pass pipeline is run pass by pass and recorded (`_PipelineRecorder`).
- Before / after: the MIL program after the frontend only (read as ct.convert starts its default pipeline, plus
  `common::add_fp16_cast`, so precision compares fairly) versus after the default pipeline. Each op's scopes name
  the passes that touched it.
- Compute units: coreml_rules (predicted-rules) on Linux; MLComputePlan on macOS 14.4+ (reported).
- Numerics: the compiled MIL program executed by xc_core.emulate.mil_interpreter with its own dtypes (emulated);
  Core ML's own predict on macOS (measured).
"""
from __future__ import annotations

import contextlib
import copy
import os
import shutil
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .. import evidence as ev
from ..analysis.boundaries import (
    DEFAULT_BANDWIDTH_GB_S,
    DEFAULT_TRANSITION_OVERHEAD_MS,
    boundaries,
)
from ..analysis.layout_audit import LayoutMoves
from ..errors import first_line
from ..ir import CAST, COMPUTE, CONSTANT, Graph
from ..lowering import FINAL, FUSION, GRAPH_OPT, IMPORT, KERNEL, Step, graph_step
from ..quiet import quiet_coremltools
from ..readers.mil import attach_source_ops, mil_ir_graph
from .base import Target, register
from .options import option, with_defaults
from .coreml_rules import CPU, UNKNOWN, predict, predict_neural_network_layer
from .onnx_regions import map_optimized_graph

ON_MACOS = sys.platform == "darwin"
# iOS18 keeps scaled_dot_product_attention as one op (earlier targets decompose it into mul/matmul/softmax).
DEFAULT_DEPLOYMENT_TARGET = "iOS18"



@dataclass
class CoreMLCompiled:
    """What conversion hands on to read-back and run."""
    after: Any                      # the MIL program Core ML compiles (after the default pass pipeline)
    before: Any                     # the program before the passes, BEFORE_IS_FRONTEND, or None (an uploaded model)
    mlmodel: Any = None             # the ct.models.MLModel (None for an uploaded model)
    package: str | None = None      # where the .mlpackage was saved
    decomposed: Any = None          # the ExportedProgram after run_decompositions, for provenance
    pass_steps: list = field(default_factory=list)   # the recorded pass pipeline, step by step
    frontend_graph: Any = None      # the IR of the program the frontend produced

# ct.convert's compute_precision, compute_units and minimum_deployment_target: the three a user sets
# (apple.github.io/coremltools/docs-guides/source/typed-execution.html, .../load-and-convert-model.html). The
# precision's and the units' defaults are each target's (CoreMLAne, CoreMLCpu).
@dataclass(frozen=True)
class CoreMLOptions:
    precision: Literal["fp16", "fp32"] = option("fp16", help="compute_precision: fp16 or fp32")
    compute_units: Literal["ALL", "CPU_AND_NE", "CPU_AND_GPU", "CPU_ONLY"] = option(
        "ALL", help="compute_units: ALL, CPU_AND_NE, CPU_AND_GPU or CPU_ONLY (the rule table predicts the device per "
                    "op for the units allowed)")
    minimum_deployment_target: Literal["iOS15", "iOS16", "iOS17", "iOS18", "macOS12", "macOS13", "macOS14",
                                       "macOS15"] = option(
        DEFAULT_DEPLOYMENT_TARGET, help=f"minimum_deployment_target (default {DEFAULT_DEPLOYMENT_TARGET}): the MIL "
                                        "opset, e.g. iOS18 keeps scaled_dot_product_attention as one op")


class CoreMLTarget(Target):
    worker_modules = ("coremltools",)
    fusion_catalogue = "coremltools"
    steps_caption = ("coremltools: its default pipeline recorded pass by pass as ct.convert runs it (the net change "
                     "of the passes of each kind).")
    # A MIL program has no layout node kind: every transpose is read as a possible layout move.
    layout_moves = LayoutMoves("the MIL program's transpose ops (Core ML chooses memory layouts itself and does not "
                               "report them)", every_transpose=True)
    Options = CoreMLOptions

    @property
    def compute_precision(self) -> str:
        return self.settings.precision

    @property
    def compute_units(self) -> str:
        return self.settings.compute_units

    @property
    def display_label(self) -> str:
        """What this configuration is (a variant's precision and units replace the defaults the id names)."""
        if not self.options:
            return self.label
        ane = " (ANE)" if self.compute_units in ("ALL", "CPU_AND_NE") else ""
        target = self.options.get("minimum_deployment_target")
        return f"Core ML · {self.compute_precision}, compute units {self.compute_units}{ane}" + \
            (f", {target}" if target else "")

    @property
    def accelerator(self) -> str | None:
        """Where an op can go other than the CPU: every unit setting but CPU_ONLY allows the GPU or the ANE (the
        rule table predicts for the ANE when it is allowed)."""
        return {"ALL": "Apple Neural Engine (or GPU)", "CPU_AND_NE": "Apple Neural Engine",
                "CPU_AND_GPU": "Apple GPU"}.get(self.compute_units)

    relative_cost = 3   # ct.convert with run_decompositions: seconds even on tiny models
    from_exported_program = True
    needs_onnx = False
    takes_program = True
    intermediates_method = "values recorded by the MIL interpreter while executing the compiled program"

    def needs_live_source(self, kind):
        # A TorchScript module converts through the TorchScript frontend and a Core ML upload is read as it is;
        # every other source converts from the captured ExportedProgram or ONNX, read from the run folder.
        return kind in ("torchscript", "coreml")

    @classmethod
    def available(cls):
        try:
            with quiet_coremltools():
                import coremltools  # noqa: F401
        except ImportError:
            return False, "coremltools is not installed"
        return True, ""

    def accepts(self, captured):
        kind = captured.source.kind
        if kind == "onnx":      # through xc's ONNX → PyTorch route (targets/routed.py)
            from ..onnx_route import available
            ok, why = available()
            return (True, "") if ok else (False, f"ONNX → Core ML needs onnx2torch: {why}")
        if kind not in ("sample", "exported-program", "torchscript", "state-dict", "coreml"):
            return False, f"Core ML targets take PyTorch, ONNX or Core ML sources, not {kind}"
        return True, ""

    # -- compile ----------------------------------------------------------------------------------------------
    def _compile(self, captured, workdir, result):
        with quiet_coremltools():
            import coremltools as ct
            os.makedirs(workdir, exist_ok=True)
            result.info["coremltools_version"] = ct.__version__
            result.info["compute_units"] = self.compute_units
            result.info["compute_precision"] = self.compute_precision
            result.declared_precisions = ["fp16"] if self.compute_precision == "fp16" else []
            if captured.source.kind == "coreml":
                result.info["conversion"] = "none: the uploaded Core ML model is inspected as it is"
                if captured.source.mil_program is None:     # a neuralNetwork model: its layers, no MIL program
                    result.info["conversion"] += " (a neuralNetwork model: its layers, read from the spec)"
                    result.declared_precisions = []
                    # Core ML picks a neuralNetwork's compute precision per unit; the rule table says which.
                    result.evidence["precision"] = ev.PREDICTED_RULES
                return CoreMLCompiled(after=captured.source.mil_program, before=None)
            precision = ct.precision.FLOAT16 if self.compute_precision == "fp16" else ct.precision.FLOAT32
            target = getattr(ct.target, self.settings.minimum_deployment_target)
            errors = []
            for label, model, kwargs in self._conversion_inputs(captured):
                recorder = _PipelineRecorder(fp16=self.compute_precision == "fp16")
                try:
                    with recorder.installed():
                        mlmodel = ct.convert(model, convert_to="mlprogram", compute_precision=precision,
                                             compute_units=getattr(ct.ComputeUnit, self.compute_units),
                                             minimum_deployment_target=target, pass_pipeline=recorder.pipeline,
                                             **kwargs)
                    result.info["conversion"] = label
                    break
                except Exception as e:  # noqa: BLE001 — try the next path, report all if none works
                    errors.append(f"{label}: {first_line(e)}")
            else:
                raise RuntimeError("coremltools could not convert the model — " + " | ".join(errors))
            before = recorder.before
            if before is None:      # too deep to copy: convert the frontend once more, with the fp16 casts
                empty = ct.PassPipeline.EMPTY
                if self.compute_precision == "fp16":
                    empty.append_pass("common::add_fp16_cast")
                before = ct.convert(model, convert_to="milinternal", pass_pipeline=empty,
                                    compute_precision=precision, minimum_deployment_target=target, **kwargs)
            frontend_graph, pass_steps = recorder.frontend_graph, recorder.steps
            package = os.path.join(workdir, "model.mlpackage")
            mlmodel.save(package)
            archive = shutil.make_archive(package, "zip", workdir, "model.mlpackage")
            result.artifacts += [package, archive]
            return CoreMLCompiled(after=mlmodel._mil_program, before=before, mlmodel=mlmodel, package=package,
                                  decomposed=getattr(self, "_decomposed", None), pass_steps=pass_steps,
                                  frontend_graph=frontend_graph)

    def _conversion_inputs(self, captured):
        """(label, model, convert kwargs) in the order to try."""
        import coremltools as ct
        src = captured.source
        if src.kind == "torchscript":
            shapes = [ct.TensorType(name=s.name, shape=s.shape, dtype=_ct_dtype(s.dtype)) for s in src.inputs]
            yield "TorchScript path (torch.jit module)", src.module, {"inputs": shapes}
            # Scripted (not traced) modules keep Python control flow the TorchScript frontend may refuse; the
            # ExportedProgram xc converted them to is the next path.
        ep = captured.program()
        for label, table in (("ExportedProgram.run_decompositions({})", {}),
                             ("ExportedProgram.run_decompositions() (default table)", None)):
            try:
                decomposed = ep.run_decompositions(table) if table is not None else ep.run_decompositions()
            except Exception:  # noqa: BLE001
                continue
            aliases = _drop_aliases(decomposed)
            if aliases:
                label += f", {aliases} aten.alias removed"
            self._decomposed = decomposed
            yield label, decomposed, {}

    # -- inspect ----------------------------------------------------------------------------------------------
    def _inspect(self, compiled, captured, result) -> Graph:
        if compiled.after is None:          # a neuralNetwork upload: the spec's layers are the compiled graph
            after = Graph.from_dict(captured.before.to_dict())
            after.stage = "coreml-nn"
            self._place(after, compiled, result)
            for n in after.nodes:   # Core ML picks a neuralNetwork's precision by unit (coreml_rules.SRC_NN_TYPED)
                n.precision = {"cpu": "fp32", "ane": "fp16", "gpu": "fp16"}.get(n.backend, n.precision)
            return after
        after = mil_ir_graph(compiled.after, "mil-default-pipeline")
        if compiled.before is not None:
            frontend = compiled.frontend_graph
            _sanitize_like_coremltools(frontend)
            self._attach_provenance(frontend, compiled, captured)
            if compiled.before is BEFORE_IS_FRONTEND:
                before = Graph.from_dict(frontend.to_dict())
            else:
                before = mil_ir_graph(compiled.before, "mil-frontend")
                _sanitize_like_coremltools(before)
                self._attach_provenance(before, compiled, captured)
            _trace_to_before(after, before)
            result.stages.append(graph_step(IMPORT, "the MIL program after the frontend", frontend))
            for step in compiled.pass_steps:
                if step.graph is not None:
                    _trace_to_before(step.graph, before if step.graph.stage == "mil-pass-with-casts" else frontend)
                result.stages.append(step)
            result.input_graph = before
            result.info["mil_ops_before"] = _mil_op_count(before)
        else:
            for n in after.nodes:
                n.source_ops = [n.id] if n.kind != CONSTANT else []
        result.info["mil_ops_after"] = _mil_op_count(after)
        for n in after.nodes:
            if n.kind == COMPUTE and n.fused_from and n.attributes.get("passes"):
                n.attributes["fused_by"] = [p for p in n.attributes["passes"] if p.startswith("fuse")] or \
                    n.attributes["passes"]
        self._place(after, compiled, result)
        if compiled.before is not None:
            walked = [st for st in result.stages if st.op_count is not None]    # the frontend, then each pass
            final_ops, final_casts = len(after.compute_nodes()), sum(n.kind == CAST for n in after.nodes)
            if walked and final_ops < walked[-1].op_count:
                # The ML program backend's own passes fused more (e.g. sigmoid × x → silu): a fusion step.
                result.stages.append(graph_step(
                    FUSION, "ML program backend passes (fusions ct.convert applies after the default pipeline)",
                    after, ref=FINAL, ops_before=walked[-1].op_count, casts_before=walked[-1].counts["casts"]))
                result.stages[-1].counts["casts"] = final_casts
                result.stages[-1].ends_stage = FUSION
            result.stages.append(graph_step(KERNEL, "the ML program Core ML compiles (after the backend passes)",
                                            after, ref=FINAL))
        casts = [n for n in after.nodes if n.kind == CAST]
        result.info["casts"] = _cast_summary(casts)
        if self.accelerated:
            b = boundaries(after, DEFAULT_BANDWIDTH_GB_S, DEFAULT_TRANSITION_OVERHEAD_MS)
            b["evidence"] = result.evidence["assignment"]
            result.boundaries = b
        return after

    def _attach_provenance(self, before: Graph, compiled, captured) -> None:
        from ..readers.exported_program import decomposed_origin
        source_ids = {n.id for n in captured.before.nodes}
        decomposed = compiled.decomposed
        names = {i: i for i in source_ids}
        if decomposed is not None:
            for dname, origin in decomposed_origin(decomposed, source_ids).items():
                names.setdefault(dname, origin)
        attach_source_ops(before, names, captured.before.by_id())

    def _place(self, graph: Graph, compiled, result) -> None:
        """Predicted (or, on macOS, reported) compute unit for every op."""
        plan = _compute_plan(compiled, self.compute_units) if ON_MACOS else None
        if plan is not None:
            result.evidence["assignment"] = ev.REPORTED
        units = {}
        for n in graph.nodes:
            if n.kind == CONSTANT:
                continue
            if plan is not None and n.id in plan:
                n.backend, n.kernel = plan[n.id], "MLComputePlan"
                continue
            p = predict_neural_network_layer(n.op_type, self.compute_units, n.attributes) \
                if n.domain == "coreml-nn" else predict(n.op_type, _mil_dtype(n), self.compute_units, n.attributes)
            n.backend, n.kernel = p.unit, "predicted"
            n.attributes["unit_reason"], n.attributes["unit_source"] = p.reason, p.source
            units[p.unit] = units.get(p.unit, 0) + (n.kind == COMPUTE)
            if self.accelerated and p.unit == CPU and n.kind == COMPUTE:
                n.fallback, n.fallback_reason = True, p.reason
        total = sum(units.values()) or 1
        result.compute_units = {
            "share": {k: round(v / total, 4) for k, v in sorted(units.items())},
            "counts": units,
            "unknown_ops": sorted({n.op_type for n in graph.nodes if n.backend == UNKNOWN}),
            "evidence": result.evidence["assignment"],
        }

    # -- run --------------------------------------------------------------------------------------------------
    def _run(self, compiled, inputs, captured, result):
        if compiled.after is None:
            result.numerics_not_run = ("a Core ML neuralNetwork model: only Core ML on Apple hardware runs it, and xc "
                                       "emulates ML programs only")
            return {}
        prog = compiled.after
        fn = prog.functions["main"]
        if ON_MACOS and compiled.mlmodel is not None:
            outputs = _macos_predict(compiled.mlmodel, inputs, captured)
            if outputs is not None:
                result.evidence["numerics"] = ev.MEASURED
                result.numerics_assumption = "Core ML predict on this Mac"
                return outputs
        from ..emulate.mil_interpreter import EmulationError, run_program
        feeds = {}
        declared = [s.name for s in captured.source.inputs]
        for i, name in enumerate(fn.inputs):
            if name in inputs:
                feeds[name] = inputs[name]
            elif len(fn.inputs) == len(declared) and declared[i] in inputs:
                # The TorchScript frontend renames inputs ("x" → "x_1"); it keeps their order.
                feeds[name] = inputs[declared[i]]
            else:
                raise KeyError(f"no value for Core ML input '{name}' (have {sorted(inputs)})")
            declared_shape = tuple(fn.inputs[name].shape)
            if np.ndim(feeds[name]) == 0 and declared_shape == (1,):
                # coremltools declares a 0-d input (a scalar such as a sample rate) as shape (1,)
                feeds[name] = np.reshape(feeds[name], (1,))
        try:
            outs, intermediates = run_program(prog, feeds, record=True)
        except EmulationError as e:
            # The program compiled and its units are predicted; only xc's numpy emulation of it stopped. The
            # target keeps what it did compile, and says which op its numerics stopped at (not coremltools' fault).
            result.numerics_not_run = (f"xc's Core ML emulator (MIL interpreter) stopped: {e}; Core ML itself does not "
                                       "run on this host")
            return {}
        self._recorded = intermediates  # for _intermediates, same process
        result.numerics_assumption = (
            f"emulated: xc executed the compiled MIL program in numpy with its own dtypes ({self.compute_precision} "
            "where the program computes in it); Core ML's kernels on the device may round differently")
        names = list(outs)
        out = {}
        for i, name in enumerate(names):
            key = captured.output_names[i] if i < len(captured.output_names) else name
            out[key] = np.asarray(outs[name])
        return out

    def _intermediates(self, compiled, inputs, captured, result, probes):
        if compiled.after is None:
            return {}
        recorded = getattr(self, "_recorded", None)
        if not recorded:
            # On macOS the outputs come from Core ML's predict, which records nothing in between.
            return {}
        return mil_probe_values(result.graph, recorded, captured.before, probes)


def mil_probe_values(graph: Graph, recorded: dict, before: Graph, probes: list[str]) -> dict:
    """source op id -> the value of the MIL var that carries that source op's output: the output of the last op in
    program order that comes from the source op alone, or whose last source op it is (a fused op computes its
    last source op's value), preferring one whose shape matches the source op's. Widened to fp32."""
    wanted = set(probes)
    before_index = before.by_id()
    candidates: dict[str, list] = {}
    for n in graph.nodes:
        if n.kind == CONSTANT or not n.outputs or not n.source_ops:
            continue
        op = n.source_ops[-1]
        if op in wanted and n.outputs[0].name in recorded:
            candidates.setdefault(op, []).append(n)
    out = {}
    for op, nodes in candidates.items():
        ref = before_index.get(op)
        ref_shape = list(ref.outputs[0].shape) if ref is not None and ref.outputs and ref.outputs[0].shape else None
        matching = [n for n in nodes if ref_shape is None
                    or list(np.shape(recorded[n.outputs[0].name])) == ref_shape]
        value = np.asarray(recorded[(matching or nodes)[-1].outputs[0].name])
        out[op] = value.astype(np.float32) if np.issubdtype(value.dtype, np.floating) else value
    return out


def _trace_to_before(g: Graph, before: Graph) -> None:
    """Provenance of a program after some passes, from the frontend program: region tracing, then ops that
    survived untouched keep the before op's provenance by name."""
    map_optimized_graph(g, before)
    _drop_survivors(g, before)
    before_by_name = before.by_id()
    # The fp16 casts of the frontend program are named after the tensor they cast, so they carry its
    # producer's source op; an op whose region reached back through such a cast did not absorb that producer.
    for n in g.nodes:
        if n.kind == COMPUTE and n.fused_from:
            own = [before_by_name[b] for b in n.fused_from if b in before_by_name
                   and before_by_name[b].kind != CAST]
            if own:
                n.source_ops = list(dict.fromkeys(s for b in own for s in b.source_ops))
    for n in g.nodes:
        b = before_by_name.get(n.id)
        if b is not None and not n.source_ops:
            n.source_ops, n.module_path = list(b.source_ops), b.module_path


def pass_stage(name: str) -> str:
    """The canonical stage a coremltools graph pass belongs to, from its name: fuse_* / compose_* / merge_* fuse;
    passes on casts, transposes or layouts lower to kernels (precision, memory layout); the rest optimise."""
    short = name.split("::")[-1]
    if any(w in short for w in ("cast", "transpose", "layout")):
        return KERNEL
    if short.startswith(("fuse_", "compose_", "merge_")) or "fuse" in short:
        return FUSION
    return GRAPH_OPT


# The recorder's `before` for fp32: no program copy, the frontend graph it read stands for it.
BEFORE_IS_FRONTEND = "the frontend program"


def _copy_program(prog):
    """A deep copy of a MIL program, or None when it is too deep to copy. copy.deepcopy recurses along the
    op → var → op chain, so a long program needs a deep stack: the copy runs in a thread with a large one."""
    import threading
    out: dict = {}

    def work():
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 200_000))
        try:
            out["prog"] = copy.deepcopy(prog)
        except (RecursionError, MemoryError):
            out["prog"] = None
        finally:
            sys.setrecursionlimit(limit)

    size = threading.stack_size()
    threading.stack_size(512 * 2**20)
    try:
        t = threading.Thread(target=work, name="xc-mil-copy")
        t.start()
    finally:
        threading.stack_size(size)
    t.join()
    return out.get("prog")


def _apply_pass(prog, name: str) -> None:
    import coremltools as ct
    from coremltools.converters.mil.mil.passes.pass_pipeline import PassPipelineManager
    PassPipelineManager.apply_pipeline(prog, ct.PassPipeline([name]))


class _PipelineRecorder:
    """The one ct.convert, watched. While installed, it stands in for coremltools' PassPipelineManager.apply_pipeline:
    the frontend and backend pipelines run untouched; the default pipeline (`self.pipeline`, handed to ct.convert as
    its pass_pipeline, which ct.convert trims for fp32) runs pass by pass the way apply_pipeline's own loop runs it
    (options set, the pass, one validate), and each pass's effect is recorded. Before its first pass the frontend
    program is read (`frontend_graph`); for fp16 it is also copied with the fp16 casts added (`before`; None
    when too deep to copy), for fp32 `before` is BEFORE_IS_FRONTEND. So the program is converted and optimised
    once, as ct.convert alone would."""

    def __init__(self, fp16: bool):
        import coremltools as ct
        self.pipeline = ct.PassPipeline()
        self.fp16 = fp16
        self.before = self.frontend_graph = None
        self.steps: list[Step] = []

    @contextlib.contextmanager
    def installed(self):
        from coremltools.converters.mil.mil.passes.pass_pipeline import (
            PassPipelineManager,
        )
        original = PassPipelineManager.__dict__["apply_pipeline"]
        recorder = self

        def apply_pipeline(prog, pass_pipeline):
            if pass_pipeline is not recorder.pipeline:
                return original.__func__(prog, pass_pipeline)
            recorder._run_main(prog, pass_pipeline)
        PassPipelineManager.apply_pipeline = staticmethod(apply_pipeline)
        try:
            yield self
        finally:
            PassPipelineManager.apply_pipeline = original

    def _run_main(self, prog, pipeline) -> None:
        from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY
        pipeline.validate()
        prog.validate()
        self.frontend_graph = mil_ir_graph(prog, "mil-frontend")
        if self.fp16:
            self.before = _copy_program(prog)
            if self.before is not None:
                _apply_pass(self.before, "common::add_fp16_cast")
        else:   # fp32 adds no casts: the program before the passes is the frontend's, already read (no copy)
            self.before = BEFORE_IS_FRONTEND

        def run(name):
            graph_pass = PASS_REGISTRY[name]
            graph_pass.set_options(pipeline.get_options(name))
            graph_pass(prog)
            prog.validate(check_essential_scope=name == "common::dead_code_elimination")
        self.steps = _walk_pipeline(prog, pipeline.passes, run)


def _walk_pipeline(prog, passes: list[str], run) -> list[Step]:
    """Run ct.convert's default pass pipeline on the frontend program (`run(name)` applies one pass), one pass at
    a time. Every pass that changed the op or cast count is a step. Passes of different kinds interleave, so two
    graphs are kept: the program just before the first fusion or the fp16 casts, whichever comes first (where
    graph optimisation ends), and after the last fusion."""
    fn = prog.functions["main"]

    def counts():
        ops = [op.op_type for op in fn.operations if op.op_type != "const"]
        return sum(t != "cast" for t in ops), ops.count("cast")

    steps: list[Step] = []
    ops, casts = counts()
    cast_added = optimised = False   # optimised: graph optimisation has ended
    last_fusion = None
    for i, name in enumerate(passes):
        run(name)
        cast_added = cast_added or name == "common::add_fp16_cast"
        now_ops, now_casts = counts()
        if (now_ops, now_casts) == (ops, casts):
            continue
        stage = pass_stage(name)
        # Graph optimisation ends at the first fusion, or at the fp16 casts (kernel lowering) if they come first.
        if (stage == FUSION or name == "common::add_fp16_cast") and not optimised:
            optimised = True
            previous = steps[-1] if steps else None
            if previous is not None and previous.graph is not None:
                previous.ends_stage = GRAPH_OPT
        steps.append(Step(stage, name, now_ops, {"casts": now_casts, "ops_before": ops, "casts_before": casts,
                                                 "pass_index": i}))
        ops, casts = now_ops, now_casts
        if optimised and stage != FUSION:
            continue
        if len(steps) > 1 and steps[-2].ends_stage is None:
            steps[-2].graph = None                  # only the candidate graph of each phase is kept
        if stage == FUSION and last_fusion is not None:
            last_fusion.graph, last_fusion.ends_stage = None, None
        # Graphs taken before the fp16 casts are traced to the frontend program without casts.
        g = mil_ir_graph(prog, "mil-pass-with-casts" if cast_added else "mil-pass")
        _sanitize_like_coremltools(g)     # the backend renames vars ("input.3" → "input_3"); so was `before`
        steps[-1].graph = g
        if stage == FUSION:
            steps[-1].ends_stage, last_fusion = FUSION, steps[-1]
    if not optimised and steps and steps[-1].graph is not None:
        steps[-1].ends_stage = GRAPH_OPT            # no fusion, no casts: graph optimisation ends the walk
    for step in steps:
        if step.ends_stage is None:
            step.graph = None
    return steps


def _sanitize_like_coremltools(g: Graph) -> None:
    """The default pipeline's sanitize pass renames ops and vars (`input_tensor.5` → `input_tensor_5`, `61` →
    `var_61`); give the frontend program the same names so before and after line up by name and tensor."""
    from coremltools.converters.mil.mil.passes.defs.preprocess import NameSanitizer
    ops, vars_ = NameSanitizer(prefix="op_"), NameSanitizer(prefix="var_")
    var_names: dict[str, str] = {}

    def var(name: str) -> str:
        if name not in var_names:
            var_names[name] = vars_.sanitize_name(name)
        return var_names[name]

    for t in list(g.inputs) + list(g.outputs):
        t.name = var(t.name)
    for n in g.nodes:
        n.id = ops.sanitize_name(n.id)
        for t in list(n.inputs) + list(n.outputs):
            t.name = var(t.name)


def _drop_survivors(after: Graph, before: Graph) -> None:
    """A before-op that still exists after the pipeline (same name) was not fused into anything else. Region
    tracing can over-reach where passes renamed vars (the TorchScript frontend's `input.3`-style names); trim it."""
    after_ids = {n.id for n in after.nodes}
    index = before.by_id()
    for n in after.nodes:
        if len(n.fused_from) > 1:
            kept = [b for b in n.fused_from if b == n.id or b not in after_ids]
            if kept != n.fused_from:
                n.fused_from = kept
                ops = [op for b in kept if b in index for op in index[b].source_ops]
                n.source_ops = list(dict.fromkeys(ops)) or n.source_ops


def _drop_aliases(ep) -> int:
    """torch's default decomposition table leaves `aten.alias` (a view of the whole tensor: Hugging Face's mask
    code makes them) and coremltools 9.0's torch frontend has no converter for it ("Unsupported fx node alias"):
    each is replaced by its input, which computes the same. Returns how many."""
    import torch
    n = 0
    for node in list(ep.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.alias.default:
            node.replace_all_uses_with(node.args[0])
            ep.graph.erase_node(node)
            n += 1
    if n:
        ep.graph_module.recompile()
    return n


def _mil_op_count(g: Graph) -> int:
    """MIL ops that do work: everything but const (casts count — fp16 programs pay for them)."""
    return sum(1 for n in g.nodes if n.kind != CONSTANT)


def _mil_dtype(n) -> str | None:
    d = n.outputs[0].dtype if n.outputs else None
    return {"float16": "fp16", "float32": "fp32", "int32": "int32", "int16": "int16", "bool": "bool",
            "int8": "int8", "uint8": "uint8"}.get(d or "", d)


def _cast_summary(casts) -> dict:
    pairs = {}
    for c in casts:
        src = c.inputs[0].dtype if c.inputs else "?"
        dst = c.outputs[0].dtype if c.outputs else "?"
        key = f"{src}→{dst}"
        pairs[key] = pairs.get(key, 0) + 1
    return {"count": len(casts), "by_type": pairs}


def _ct_dtype(dtype: str):
    return {"float32": np.float32, "float16": np.float16, "int64": np.int32, "int32": np.int32}.get(dtype, np.float32)


def _compute_plan(compiled, units: str = "ALL") -> dict | None:
    """macOS 14.4+: MLComputePlan says which device each op is dispatched to (evidence: reported)."""
    try:
        import coremltools as ct
        from coremltools.models.compute_plan import MLComputePlan
        compiled_path = compiled.mlmodel.get_compiled_model_path()
        plan = MLComputePlan.load_from_path(compiled_path, compute_units=getattr(ct.ComputeUnit, units))
        program = plan.model_structure.program
        out = {}
        for op in program.functions["main"].block.operations:
            usage = plan.get_compute_device_usage_for_mlprogram_operation(op)
            if usage is not None and op.outputs:
                device = type(usage.preferred_compute_device).__name__.lower()
                unit = "ane" if "neural" in device else "gpu" if "gpu" in device else "cpu"
                out[op.outputs[0].name] = unit
        return out
    except Exception:  # noqa: BLE001 — older macOS or no compiled model: fall back to the rule table
        return None


def _macos_predict(mlmodel, inputs, captured) -> dict | None:
    try:
        spec_inputs = [i.name for i in mlmodel.get_spec().description.input]
        pred = mlmodel.predict({k: inputs[k].astype(np.int32) if inputs[k].dtype == np.int64 else inputs[k]
                                for k in spec_inputs})
        names = [o.name for o in mlmodel.get_spec().description.output]
        return {captured.output_names[i] if i < len(captured.output_names) else n: np.asarray(pred[n])
                for i, n in enumerate(names)}
    except Exception:  # noqa: BLE001
        return None


@register
class CoreMLAne(CoreMLTarget):
    id = "coreml-ane"
    # Apple's two stacks on one checkpoint; Core ML direct and through ExecuTorch.
    shipped_with = {"coreai-ane": 5, "executorch-coreml": 7}
    label = "Core ML · fp16, compute units ALL (ANE)"
    description = "coremltools → ML program, fp16, compute units ALL; MIL read back; units predicted by cited rules"
    evidence = {"assignment": ev.PREDICTED_RULES, "precision": ev.REPORTED, "numerics": ev.EMULATED,
                "fusion": ev.REPORTED}
    Options = CoreMLOptions     # fp16, compute units ALL


@register
class CoreMLCpu(CoreMLTarget):
    id = "coreml-cpu"
    shipped_with = {"coreai-cpu": 6}        # Apple's two stacks on one checkpoint
    label = "Core ML · fp32, CPU_ONLY"
    description = "coremltools → ML program, fp32, compute units CPU_ONLY; MIL read back; emulated in fp32"
    evidence = {"assignment": ev.PREDICTED_RULES, "precision": ev.REPORTED, "numerics": ev.EMULATED,
                "fusion": ev.REPORTED}
    Options = with_defaults(CoreMLOptions, "CoreMLCpuOptions", precision="fp32", compute_units="CPU_ONLY")
