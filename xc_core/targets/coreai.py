"""Core AI (Apple's successor of Core ML for neural networks, iOS / macOS 27): `coreai-cpu` and `coreai-ane`.

The flow, as coreai-torch documents it: the ExportedProgram is decomposed with `coreai_torch.get_decomp_table()`
(the converter refuses undecomposed conv2d / linear), `TorchConverter.add_exported_program` + `to_coreai()` lower
it into a Core AI program (MLIR, `coreai.*` ops; layers it recognises — layer norm, attention — become composite
graphs called by `coreai.invoke`), and the framework's pre-compilation rewrite runs as the program is finished
(constant folding, batch norm folded into the convolution, casts removed). `save_asset` writes the `.aimodel`. To
run, the runtime lowers the program to ODIX (its executable form, one or more ODIX ops per Core AI op) and executes
it; coreai-core ships a Linux runtime, so `coreai-cpu` runs here and its numbers are measured.

Placement on CPU / GPU / Neural Engine ("specialization", `ComputeUnitKind`) is macOS 27 only. `coreai-ane`
predicts it with the Core ML rule table (coreml_rules: the Neural Engine and its fp16-only arithmetic are the same
hardware under both stacks; Apple has not published Core AI-specific constraints), and on a macOS host with the
OS runtime (`USE_OS_COREAI=1`) asks the runtime's compute plan instead — that path is written, not tested here.

coreai-core is a beta (1.0.0b3): versions are pinned exactly, and a host where it does not import makes both
targets `unavailable` with the reason.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shutil
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .. import evidence as ev
from ..analysis.boundaries import (
    DEFAULT_BANDWIDTH_GB_S,
    DEFAULT_TRANSITION_OVERHEAD_MS,
    boundaries,
)
from ..errors import first_line
from ..ir import CONSTANT, Graph
from ..lowering import FINAL, GRAPH_OPT, IMPORT, INPUT, KERNEL, graph_step
from ..quiet import quiet_coreai, quiet_torch
from .base import CostRunner, Target, dist_version, needs_exported_program, register, source_tensors
from .coreml_rules import ANE, CPU, UNKNOWN, Prediction, predict
from .pins import install_hint, pin

RUNTIME = "Core AI runtime (ODIX)"

# Core AI op → the Core ML (MIL) op the rule table knows, where the two are the same computation. Core AI's
# `decomposable.broadcasting_*` are the elementwise ops with numpy broadcasting MIL's add/mul/… also have.
AS_MIL = {"conv2d": "conv", "conv1d": "conv", "conv_transpose2d": "conv_transpose",
          "broadcasting_batch_matmul": "matmul", "batch_matmul": "matmul", "matmul": "matmul",
          "broadcasting_add": "add", "broadcasting_sub": "sub", "broadcasting_mul": "mul",
          "broadcasting_divide": "real_div", "reduce_mean": "reduce_mean", "reduce_sum": "reduce_sum",
          "softmax": "softmax", "gelu": "gelu", "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh",
          "silu": "silu", "rsqrt": "rsqrt", "layer_norm": "layer_norm", "reshape": "reshape",
          "transpose": "transpose", "split": "split", "concat": "concat", "expand_dims": "expand_dims",
          "shrink_dims": "squeeze", "slice": "slice_by_index", "gather_nd": "gather_nd", "gather": "gather",
          "avg_pool2d": "avg_pool", "max_pool2d": "max_pool", "clamp": "clip", "hard_sigmoid": "sigmoid_hard"}


@dataclass
class CoreAICompiled:
    """What conversion hands on to read-back and run."""
    program: Any                    # the coreai.authoring.AIProgram, after the pre-compilation rewrite
    converted: Graph                # the program as converted, before the rewrite (IR)
    origin: dict                    # FX node name of the converted program → captured node id
    asset: str                      # the .aimodel folder
    odix: str                       # the folder with the ODIX executable (+ debug info) the runtime loads
    odix_ops: dict = field(default_factory=dict)   # Core AI op id → how many ODIX ops it became
    # captured op id → (FX node of the decomposed program, output index) carrying its value (per-layer drift)
    value_nodes: dict = field(default_factory=dict)
    input_dtypes: list = field(default_factory=list)


class CoreAITarget(Target):
    steps_caption = "Core AI: the program as converted, after its pre-compilation rewrite, then lowered to ODIX."
    needs_onnx = False
    takes_program = True
    from_exported_program = True
    relative_cost = 2
    precision: ClassVar[str] = "fp32"
    intermediates_method = ("Core AI runtime's IntermediateLogger (values mapped to the torch ops through the "
                            "program's debug info)")

    @classmethod
    def available(cls):
        if platform.system() == "Linux" and platform.machine() not in ("x86_64", "AMD64"):
            pinned = " ".join(filter(None, ("coreai-core", pin("coreai-core"))))
            return False, f"{pinned} has a Linux wheel for x86_64 only, not {platform.machine()}"
        try:
            with quiet_coreai():
                import coreai.runtime  # noqa: F401
                import coreai_torch  # noqa: F401
        except Exception as e:  # noqa: BLE001 — a missing or broken beta wheel: say which and why
            return False, (f"Core AI is not importable here ({type(e).__name__}: {first_line(e, 160)}); "
                           + install_hint("coreai-torch", "coreai-core"))
        return True, ""

    def accepts(self, captured):
        return needs_exported_program(captured, "Core AI converts")

    # -- compile ----------------------------------------------------------------------------------------------
    def _program_to_convert(self, captured, result):
        return captured.program()

    def _compile(self, captured, workdir, result):
        import pathlib

        import coreai_torch

        from ..readers.coreai import program_graph
        from ..readers.exported_program import decomposed_origin
        os.makedirs(workdir, exist_ok=True)
        result.info["coreai_torch_version"] = coreai_torch.__version__
        result.info["coreai_core_version"] = dist_version("coreai-core")
        ep = self._program_to_convert(captured, result)
        index = captured.before.by_id()
        with quiet_torch(), quiet_coreai():
            decomposed = ep.run_decompositions(coreai_torch.get_decomp_table())
            origin = {n: n for n in index}
            origin.update(decomposed_origin(decomposed, set(index)))
            converter = coreai_torch.TorchConverter()
            converter.add_exported_program(decomposed)
            with _before_rewrite(lambda module: program_graph(module, captured.source.name, "coreai-converted",
                                                              origin, index)) as converted:
                program = converter.to_coreai()
        if not converted:
            raise RuntimeError("coreai-torch finished without running its pre-compilation rewrite")
        asset = os.path.join(workdir, "model.aimodel")
        saved = program.save_asset(pathlib.Path(asset))
        archive = shutil.make_archive(asset, "zip", workdir, "model.aimodel")
        result.artifacts += [asset, archive]
        odix = os.path.join(workdir, "model.aimodelx")
        os.makedirs(odix, exist_ok=True)
        # What `asset.executable()` does on Linux, with the runtime's debug info kept (the op mapping and the
        # intermediate values need it): lower the program to ODIX into a folder the runtime loads.
        saved._write_odix(pathlib.Path(odix), enable_debug_info=True)
        compiled = CoreAICompiled(program=program, converted=converted[0], origin=origin, asset=asset, odix=odix,
                                  value_nodes=value_nodes(decomposed, origin))
        compiled.odix_ops = _run_async(_odix_ops(odix))
        result.info["conversion"] = ("torch.export → run_decompositions(coreai_torch.get_decomp_table()) → "
                                     "TorchConverter.to_coreai() (+ the pre-compilation rewrite) → .aimodel → ODIX")
        return compiled

    # -- inspect ----------------------------------------------------------------------------------------------
    def _inspect(self, compiled, captured, result) -> Graph:
        from ..readers.coreai import program_graph
        index = captured.before.by_id()
        final = program_graph(compiled.program._module._mlir_module, captured.source.name, "coreai-rewritten",
                              compiled.origin, index)
        converted = compiled.converted
        _mark_fusions(final, converted)
        folded = _mark_folded(final, converted)
        for n in final.nodes:
            if n.kind != CONSTANT:
                n.attributes["odix_ops"] = compiled.odix_ops.get(n.attributes.get("coreai_op_id"), 0)
        compiled.input_dtypes = [t.dtype for t in final.inputs]
        self._place(final, compiled, result)
        removed = _removed_by_rewrite(converted, final, folded)
        result.input_graph = converted
        result.info["coreai_ops_converted"] = len(converted.compute_nodes())
        result.info["coreai_ops_after_rewrite"] = len(final.compute_nodes())
        result.info["removed_by_rewrite"] = removed
        result.info["composites"] = sorted({n.op_type for n in final.nodes if n.attributes.get("composite")})
        result.info["odix_ops"] = sum(compiled.odix_ops.values())
        casts = [n for n in final.nodes if n.op_type == "cast"]
        result.info["casts"] = {"count": len(casts)}
        result.declared_precisions = ["fp16"] if self.precision == "fp16" else []
        result.stages += [
            graph_step(IMPORT, self._import_step_name(), captured.before),
            graph_step(GRAPH_OPT, "the Core AI program as converted (TorchConverter: one or more coreai ops per "
                                  "FX node; layer norm and attention as composites)", converted, ref=INPUT),
            graph_step(GRAPH_OPT, "after the pre-compilation rewrite (constant folding, batch norm folded, casts "
                                  f"removed): {len(converted.compute_nodes())} → {len(final.compute_nodes())} ops"
                       + (f", {', '.join(folded)} folded away" if folded else ""), final, ref=FINAL,
                       removed=removed["count"]),
            graph_step(KERNEL, f"lowered to ODIX for this CPU: {result.info['odix_ops']} ODIX op(s)", final,
                       ref=FINAL, odix_ops=result.info["odix_ops"]),
        ]
        if self.accelerated:
            b = boundaries(final, DEFAULT_BANDWIDTH_GB_S, DEFAULT_TRANSITION_OVERHEAD_MS)
            b["evidence"] = result.evidence["assignment"]
            result.boundaries = b
        return final

    def _import_step_name(self) -> str:
        return "the captured ExportedProgram (torch.export)"

    def _place(self, g: Graph, compiled, result) -> None:
        for n in g.nodes:
            if n.kind != CONSTANT:
                n.backend, n.kernel = "cpu", RUNTIME

    # -- run --------------------------------------------------------------------------------------------------
    def _feeds(self, compiled, inputs, captured) -> dict:
        from coreai.runtime import NDArray
        names = compiled_input_names(compiled)
        feeds = {}
        for i, s in enumerate(captured.source.inputs):
            if i >= len(names):
                break
            arr = np.array(inputs[s.name], order="C")   # ascontiguousarray would make a 0-d input 1-d
            want = compiled.input_dtypes[i] if i < len(compiled.input_dtypes) else None
            if want and arr.dtype != np.dtype(want):
                arr = arr.astype(want)     # torch int64 indices are si32 in a Core AI program
            feeds[names[i]] = NDArray(arr)
        return feeds

    def _cost_runner(self, compiled, inputs, captured):
        feeds = self._feeds(compiled, inputs, captured)

        def load():
            # One event loop for the loaded model's whole life (Core AI's runtime is async and its objects belong
            # to the loop that made them); run_until_complete refuses in a thread whose loop is already running,
            # and the cost block then says why it has no times.
            loop = asyncio.new_event_loop()

            async def ready():
                model = await _load(compiled.odix)
                return model.load_function("main")
            function = loop.run_until_complete(ready())
            return lambda: loop.run_until_complete(function(feeds))
        return CostRunner(load=load, load_what=(
            "Core AI's runtime loading the compiled .aimodel and its main function (AIModel.load, load_function) on "
            "this host's CPU"))

    def _run(self, compiled, inputs, captured, result):
        feeds = self._feeds(compiled, inputs, captured)
        outs = _run_async(_execute(compiled.odix, feeds))
        order = compiled_outputs(compiled)
        values = [outs[k] for k in order if k in outs] + [v for k, v in outs.items() if k not in order]
        result.numerics_assumption = self._numerics_assumption()
        return {name: np.asarray(v) for name, v in zip(captured.output_names, values)}

    def _numerics_assumption(self) -> str:
        return "measured: the ODIX program run by Core AI's runtime on this host's CPU"

    def _intermediates(self, compiled, inputs, captured, result, probes):
        from coreai_torch.debugging.torch_utils import (
            get_torch_to_coreai_output_mapping,
        )
        carriers, left_out = probe_carriers(probes, compiled.value_nodes,
                                            get_torch_to_coreai_output_mapping(compiled.program), result.graph)
        result.info["intermediates_coverage"] = {"probes": len(set(probes)), "mapped": len(carriers),
                                                 **({"left_out": left_out} if left_out else {})}
        if not carriers:
            return {}
        feeds = {k: v.numpy() for k, v in self._feeds(compiled, inputs, captured).items()}
        values = _run_async(_intermediate_values(compiled.odix, sorted({oid for oid, _ in carriers.values()}),
                                                 feeds))
        out = {}
        for src, (oid, index) in carriers.items():
            vals = values.get(oid) or []
            if index < len(vals) and vals[index] is not None:
                a = np.asarray(vals[index])
                out[src] = a.astype(np.float32) if a.dtype == np.float16 else a
        # The logger may return nothing for an op it mapped (seen on programs with dynamic dims): say how many came.
        result.info["intermediates_coverage"]["logged"] = len(out)
        return out


MAX_LISTED = 20   # probes named per reason in `intermediates_coverage.left_out` (the count says how many in all)


def value_nodes(decomposed_ep, origin: dict[str, str]) -> dict[str, tuple[str, int]]:
    """captured op id -> (FX node of the decomposed program, output index) whose value is that op's output: the
    last of the op's FX nodes whose value is used outside them (by another op's node, or as a graph output). Not
    the first: a linear decomposes into the weight's transpose, a matmul and a reshape, and the first is the
    weight's transpose. A getitem names the output of the node it selects from."""
    import operator
    out = {}
    for n in decomposed_ep.graph.nodes:
        src = origin.get(n.name)
        if src is None or n.op != "call_function":
            continue
        if any(u.op == "output" or origin.get(u.name) != src for u in n.users):
            if n.target is operator.getitem and hasattr(n.args[0], "name") and isinstance(n.args[1], int):
                out[src] = (n.args[0].name, n.args[1])
            else:
                out[src] = (n.name, 0)
    return out


def probe_carriers(probes: list[str], values: dict[str, tuple[str, int]], mapping: dict,
                   program: Graph) -> tuple[dict[str, tuple[int, int]], dict[str, dict]]:
    """source op id -> (Core AI op id, output index) the runtime logs that source op's value under, from
    coreai-torch's FX node → Core AI output mapping (`mapping`, for the FX node `values` names), and the probes
    left out, by reason ({reason: {"count", "examples"}}). `program` is the rewritten program as read back.

    Two things the mapping does not know, from the rewritten program:
    * An op id given to more than one op is left out: the pre-compilation rewrite numbers some ops it makes with
      ids already in use, and the runtime's logger returns one value per id, which may be the other op's. On
      tts-mini the residual add before encoder.norm1 and the encoder.norm2 layer norm are both op 171: per-layer
      drift compared the add's value with the layer norm's (rel L2 0.79 at a layer whose output matches to 3e-7).
    * An op a batch norm was folded into (`_mark_folded`) computes the batch norm's value, not its own source
      op's: that value is the batch norm's, and the convolution's own is nowhere (vision-mini's convolutions
      showed rel L2 0.35-8 against the convolution's value before the batch norm)."""
    ids: dict[int, list] = {}
    for n in program.nodes:
        oid = n.attributes.get("coreai_op_id")
        if oid is not None:
            ids.setdefault(oid, []).append(n)
    wanted = dict.fromkeys(probes)
    carriers: dict[str, tuple[int, int]] = {}
    left_out: dict[str, list[str]] = {}
    for src in wanted:
        if src in carriers:       # a batch norm whose value its convolution's op carries (below)
            continue
        fx, index = values.get(src, (None, 0))
        m = mapping.get(fx) if fx is not None else None
        nodes = ids.get(m.target_op_id, []) if m is not None else []
        if m is None or m.source_output != index:
            why = "no Core AI op carries its value (fused or folded into another)"
        elif len(nodes) > 1:
            why = "its Core AI op id is shared with another op of the rewritten program"
        elif nodes and _folded_into(nodes[0]) and nodes[0].source_ops[-1] != src:
            why = "a later op was folded into its Core AI op, which computes that op's value"
            folded = nodes[0].source_ops[-1]
            if folded in wanted and folded not in carriers:
                carriers[folded] = (m.target_op_id, m.target_output)
        else:
            carriers.setdefault(src, (m.target_op_id, m.target_output))
            continue
        left_out.setdefault(why, []).append(src)
    return carriers, {why: {"count": len(ops), "examples": ops[:MAX_LISTED]} for why, ops in left_out.items()}


def _folded_into(node) -> bool:
    return any("folded" in str(b) for b in node.attributes.get("fused_by") or [])


def compiled_input_names(compiled) -> list[str]:
    """The entry graph's input names, in order (what the runtime's function is fed by)."""
    from ..readers.coreai import io_names
    return [n or f"input_{i}" for i, n in enumerate(io_names(compiled.program._module._mlir_module, "arg_attrs"))]


def compiled_outputs(compiled) -> list[str]:
    """The entry graph's output names, in order (the runtime returns a dict keyed by them)."""
    from ..readers.coreai import io_names
    return [n for n in io_names(compiled.program._module._mlir_module, "res_attrs") if n]


@contextlib.contextmanager
def _before_rewrite(read):
    """While converting: `read(module)` sees the program just before the framework's pre-compilation rewrite runs
    on it (the converter gives only the rewritten program back)."""
    import coreai.authoring.module as authoring_module
    original = authoring_module.run_pre_compilation_rewrite
    seen: list = []

    def rewrite(*, module):
        if not seen:
            seen.append(read(module))
        return original(module=module)
    authoring_module.run_pre_compilation_rewrite = rewrite
    try:
        yield seen
    finally:
        authoring_module.run_pre_compilation_rewrite = original


def _mark_fusions(final: Graph, converted: Graph) -> None:
    """An op of the rewritten program that carries the work of several FX nodes (the rewrite merges a view into
    the matmul before it and keeps the union of their debug locations) is a fusion: `fused_from` lists the ops of
    the converted program lowered from those FX nodes. (The rewrite renumbers ops, so the match is by FX node.)"""
    by_torch: dict[str, list[str]] = {}
    for n in converted.nodes:
        if n.kind != CONSTANT:
            for t in n.attributes.get("torch_nodes") or []:
                by_torch.setdefault(t, []).append(n.id)
    for n in final.nodes:
        torch_nodes = list(dict.fromkeys(n.attributes.get("torch_nodes") or []))
        if n.kind == CONSTANT or len(torch_nodes) < 2:
            continue
        absorbed = list(dict.fromkeys(i for t in torch_nodes for i in by_torch.get(t, [])))
        if len(absorbed) >= 2:
            n.fused_from = absorbed
            n.attributes["fused_by"] = ["pre-compilation rewrite"]


def _mark_folded(final: Graph, converted: Graph) -> list[str]:
    """Source ops the rewrite folded away entirely (batch norm into the convolution before it: its scale and
    shift become the convolution's constants). Such an op is carried by the last op of the rewritten program that
    computes the source op it read from; that op's `fused_from` adds the converted ops folded into it. Returns
    the folded source ops."""
    carried = {s for n in final.nodes if n.kind != CONSTANT for s in n.source_ops}
    producer = {t.name: n for n in converted.nodes for t in n.outputs}
    folded = []
    for src in dict.fromkeys(s for n in converted.compute_nodes() for s in n.source_ops):
        if src in carried:
            continue
        gone = [n for n in converted.compute_nodes() if src in n.source_ops]
        fed_by = [producer[t.name] for n in gone for t in n.inputs if t.name in producer
                  and src not in producer[t.name].source_ops and producer[t.name].kind != CONSTANT]
        into_src = next((s for p in reversed(fed_by) for s in reversed(p.source_ops) if s in carried), None)
        into = next((n for n in reversed(final.nodes) if n.kind != CONSTANT and into_src in n.source_ops), None)
        if into is None:
            continue
        own = [p.id for p in converted.compute_nodes() if into_src in p.source_ops]
        into.fused_from = list(dict.fromkeys((into.fused_from or own) + [n.id for n in gone]))
        into.source_ops = list(dict.fromkeys(into.source_ops + [src]))
        into.attributes["fused_by"] = ["pre-compilation rewrite (folded)"]
        folded.append(src)
    return folded


def _removed_by_rewrite(converted: Graph, final: Graph, folded: list[str]) -> dict:
    """How many ops the rewrite took away, per source op (ops of the converted program lowered from it, minus
    those of the rewritten one), and the source ops it folded away entirely."""
    def per_source(g):
        counts: dict[str, int] = {}
        for n in g.compute_nodes():
            key = (n.source_ops or ["(no source op)"])[0]
            counts[key] = counts.get(key, 0) + 1
        return counts
    before, after = per_source(converted), per_source(final)
    by_source = {k: v - after.get(k, 0) for k, v in before.items() if v > after.get(k, 0)}
    return {"count": len(converted.compute_nodes()) - len(final.compute_nodes()), "by_source_op": by_source,
            "folded_source_ops": folded}


# -- the runtime (async API) -----------------------------------------------------------------------------------
def _run_async(coro):
    """Core AI's runtime is async; a target runs in a worker (no loop) or in a thread that may already have one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict = {}

    def work():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # noqa: BLE001 — re-raised in the caller's thread
            box["error"] = e
    t = threading.Thread(target=work)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


async def _load(odix: str):
    import pathlib

    from coreai.runtime import AIModel
    with quiet_coreai():
        return await AIModel.load(path=pathlib.Path(odix))


async def _odix_ops(odix: str) -> dict[int, int]:
    """Core AI op id → how many ODIX ops the runtime's lowering made of it (its debug info)."""
    from coreai_torch.debugging.debug_info import parse_debug_infos
    model = await _load(odix)
    counts: dict[int, int] = {}
    for record in parse_debug_infos(model._debug_infos):
        for op in record.operations:
            oid = op.get_op_id("coreai")
            if oid is not None:
                counts[oid] = counts.get(oid, 0) + 1
    return counts


async def _execute(odix: str, feeds: dict) -> dict:
    model = await _load(odix)
    fn = model.load_function("main")
    out = await fn(feeds)
    return {k: v.numpy() for k, v in out.items()}


async def _intermediate_values(odix: str, op_ids: list[int], feeds: dict) -> dict:
    from coreai_torch.debugging.inspector import CoreAIInspector
    model = await _load(odix)
    return await CoreAIInspector(model=model).get_intermediates_for_ops(op_ids, feeds)


@register
class CoreAICpu(CoreAITarget):
    id = "coreai-cpu"
    label = "Core AI · fp32, CPU (run here)"
    description = ("coreai-torch → Core AI program (read back op by op), lowered to ODIX and run by Core AI's Linux "
                   "runtime: numerics measured")
    evidence = {"assignment": ev.REPORTED, "precision": ev.REPORTED, "numerics": ev.MEASURED,
                "fusion": ev.REPORTED}


@register
class CoreAIAne(CoreAITarget):
    id = "coreai-ane"
    label = "Core AI · fp16, Neural Engine (predicted)"
    description = ("the Core AI program converted from the model in fp16; Neural Engine placement predicted by "
                   "cited rules (specialization is macOS 27 only); the fp16 program run here on the CPU")
    evidence = {"assignment": ev.PREDICTED_RULES, "precision": ev.REPORTED, "numerics": ev.EMULATED,
                "fusion": ev.REPORTED}
    accelerator = "Apple Neural Engine"
    precision = "fp16"

    def _program_to_convert(self, captured, result):
        """coreai-torch 0.4.3 has no compute-precision option: a program computes in the dtypes of the model it
        is given. The program is made float16 as Core ML's FLOAT16 compute precision makes one (fp16_program.py):
        an op whose constant float16 cannot hold stays float32, and the report lists it. Shapes are the run's
        inputs."""
        from .fp16_program import fp16_program
        args = tuple(source_tensors(self.calibration_inputs or {}, captured))
        with quiet_torch():
            program, kept = fp16_program(captured.program(), args)
        if kept:
            result.notes.append(f"{len(kept)} op(s) kept in fp32, a constant of theirs past float16's ±65,504 "
                                f"(as coremltools' FP16ComputePrecision keeps them): {', '.join(kept[:8])}"
                                + (" …" if len(kept) > 8 else ""))
        return program

    def _import_step_name(self) -> str:
        return "the captured ExportedProgram, re-exported with fp16 weights and activations"

    def _place(self, g: Graph, compiled, result) -> None:
        plan = _macos_compute_plan(compiled)
        if plan is not None:
            result.evidence["assignment"] = ev.REPORTED
        units: dict[str, int] = {}
        for n in g.nodes:
            if n.kind == CONSTANT:
                continue
            oid = n.attributes.get("coreai_op_id")
            if plan is not None and oid in plan:
                n.backend, n.kernel = plan[oid], "Core AI compute plan"
            else:
                p = predict_unit(n)
                n.backend, n.kernel = p.unit, "predicted"
                n.attributes["unit_reason"], n.attributes["unit_source"] = p.reason, p.source
                if p.unit == CPU and n.kind != "cast":
                    n.fallback, n.fallback_reason = True, p.reason
            units[n.backend] = units.get(n.backend, 0) + 1
        total = sum(units.values()) or 1
        result.compute_units = {"share": {k: round(v / total, 4) for k, v in sorted(units.items())},
                                "counts": units, "evidence": result.evidence["assignment"],
                                "unknown_ops": sorted({n.op_type for n in g.nodes if n.backend == UNKNOWN})}
        result.info["placement"] = ("Core AI compute plan (macOS)" if plan is not None else
                                    "predicted by xc's cited Core ML rule table: specialization (ComputeUnitKind) "
                                    "runs on macOS 27 only")

    def _numerics_assumption(self) -> str:
        return ("emulated: the fp16 Core AI program run by Core AI's runtime on this host's CPU; the Neural Engine's "
                "kernels may round differently")


def predict_unit(n) -> Prediction:
    """The Core ML rule for the same MIL op; a composite runs on the Neural Engine when every op of its body
    does (the ANE reference transformer builds attention and layer norm from those ops)."""
    dtype = {"float16": "fp16", "float32": "fp32"}.get((n.outputs[0].dtype if n.outputs else "") or "",
                                                     n.outputs[0].dtype if n.outputs else None)
    body = n.attributes.get("composite_ops")
    if body:
        # A cast inside a composite (fp16 layer norm computing its statistics wider) converts, it does not compute.
        parts = [predict(AS_MIL.get(op, op), dtype, "ALL") for op in body if op != "cast"] or \
            [predict("cast", dtype, "ALL")]
        worst = next((p for p in parts if p.unit != ANE), None)
        if worst is None:
            return Prediction(ANE, f"composite {n.op_type}: every op of its body runs on the ANE in {dtype}",
                              parts[0].source)
        return Prediction(worst.unit, f"composite {n.op_type}: {worst.reason}", worst.source)
    return predict(AS_MIL.get(n.op_type, n.op_type), dtype, "ALL")


def _macos_compute_plan(compiled) -> dict | None:
    """macOS 27 with the OS runtime: the compute device of each Core AI op, from the runtime's own plan
    (coreai_torch.debugging.compute_plan, specialized for the Neural Engine). Written, not tested: this host is
    Linux."""
    try:
        from coreai.runtime import ComputeUnitKind
        from coreai.runtime._specialization_options import SpecializationOptions
        if not SpecializationOptions.is_supported():
            return None
        from coreai_torch.debugging.compute_plan import ComputeDevice, ComputePlan
        options = SpecializationOptions.from_preferred_compute_unit_kind(ComputeUnitKind.neural_engine())
        plan = _run_async(ComputePlan.from_program(compiled.program, options))
        names = {ComputeDevice.NEURAL_ENGINE: ANE, ComputeDevice.GPU: "gpu", ComputeDevice.CPU: CPU}
        out = {}
        for oid in compiled.odix_ops:
            devices = plan.devices_for_id(oid)
            if devices:
                out[oid] = next((names[d] for d in (ComputeDevice.NEURAL_ENGINE, ComputeDevice.GPU, ComputeDevice.CPU)
                                 if d in devices), UNKNOWN)
        return out
    except Exception:  # noqa: BLE001 — not macOS 27 or an older runtime: the rule table predicts
        return None
