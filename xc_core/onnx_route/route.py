"""ONNX → one ExportedProgram, built once per run and shared by every target that compiles PyTorch programs
(Core ML, Inductor, ExecuTorch, Core AI).

1. The graph is prepared (graph_prep.py): fixed input shapes, constants folded, `If`s specialised, rewrites.
2. Every name is replaced by a plain identifier (names.py) before onnx2torch turns the graph into an nn.Module
   with one submodule per ONNX node (converters.py adds what onnx2torch lacks).
3. The module is traced with real values at the analysis inputs (make_fx): onnx2torch's modules read shape and
   index tensors' values (Reshape, Slice, Pad, Resize …) and branch on them in Python, which torch.export alone
   sees as data-dependent and refuses; a real-valued trace records them as the constants they are at these
   shapes — as torch.jit.trace would, but into an FX graph of ATen ops. Each traced op is annotated with the
   submodule (the ONNX node) it came from.
4. torch.export captures that graph: the program every such target is given. The annotation survives, so every
   node of the program maps to the ONNX node it came from (`origin`), and through it every op each target
   compiles traces back to the model's own node names.

The conversion has its own error, never blamed on a target: the program runs on the analysis inputs against ONNX
Runtime with its optimizations off, output by output (`conversion_drift`).
"""
from __future__ import annotations

import dataclasses
import os
import re
import time

import numpy as np

from ..analysis.drift import route_departing
from ..errors import XcInputError, first_line, with_kind
from .graph_prep import origin_of, prepare
from .departure import compare_output
from .names import shown
from .refusals import ADVICE, DEFAULT_ADVICE, RouteError

ROUTE = ("ONNX → xc's graph preparation → PyTorch (onnx2torch + xc's converters) → traced at the analysis "
         "shapes → torch.export")
PROGRAM_FILE = "onnx_route.pt2"
OUTPUTS_FILE = "program_outputs.npz"


def available() -> tuple[bool, str]:
    try:
        from .converters import import_onnx2torch
        import_onnx2torch()
    except XcInputError as e:           # not installed: the message says what to install
        return False, str(e)
    except Exception as e:  # noqa: BLE001
        return False, f"onnx2torch is not importable ({type(e).__name__}: {e})"
    return True, ""


def build(onnx_path: str, specs, feeds: dict, folder: str) -> dict:
    """The route for the captured ONNX at `onnx_path`: writes the program to folder/onnx_route.pt2 (and its outputs
    at the analysis inputs to folder/program_outputs.npz) and returns the route's record (never raises: a failure
    is the record's one-line `error`)."""
    t0 = time.perf_counter()
    record: dict = {"route": ROUTE, "evidence": "measured"}
    try:
        record.update(_build(onnx_path, specs, feeds, folder))
    except (RouteError, XcInputError) as e:
        # torch.fx's Interpreter appends "While executing %n12 …" lines to an exception passing through it
        record["error"] = first_line(e, 400)
    except Exception as e:  # noqa: BLE001 — any failure is the route's finding, said in one line
        record["error"] = f"{type(e).__name__}: {first_line(e, 300)}"
    record["seconds"] = round(time.perf_counter() - t0, 3)
    return record


@dataclasses.dataclass
class Conversion:
    """An ONNX model made a PyTorch program, with what it takes to say the program in the model's own names."""
    program: object                 # the torch.export ExportedProgram
    module: object                  # onnx2torch's nn.Module, one submodule per node of the prepared graph
    args: tuple                     # the analysis inputs, as tensors, in the model's input order
    used: list                      # positions in `args` of the inputs the program reads
    notes: list                     # what the graph preparation changed
    origin: dict                    # {program node: the model's node it came from}
    module_names: dict              # {onnx2torch submodule: node name in the prepared graph}
    safe: object                    # the prepared graph with plain-identifier names (what onnx2torch converted)
    names: dict                     # {plain identifier: name in the prepared graph}
    kinds: dict                     # {model node: (domain, op type)}


def convert(source, specs, feeds: dict) -> Conversion:
    """The ONNX ModelProto `source` as one ExportedProgram traced at the feeds' shapes. Raises RouteError, one line
    naming the op and what to do, when the route refuses (its `unexpected` names the exception type when the
    refusal wraps a failure nobody foresaw: a bug of the route, counted as a crash by bench/onnx_conformance.py)."""
    import torch

    from ..quiet import quiet_torch
    from .converters import import_onnx2torch
    from .names import checked_module_names, in_model_names, safe_names
    from .refusals import Unsupported
    model_nodes = {n.name for n in source.graph.node}
    kinds = {n.name: (n.domain or "ai.onnx", n.op_type) for n in source.graph.node}
    opsets = {o.domain or "ai.onnx": o.version for o in source.opset_import}
    _refuse_bfloat16(source, feeds)
    try:
        prepared, notes = prepare(source, specs, feeds)
    except RouteError:
        raise
    except Unsupported as e:               # a form the preparation knowingly refuses (an op newer than opset 17)
        raise RouteError(f"{_first(e)} — {DEFAULT_ADVICE}") from None
    except Exception as e:  # noqa: BLE001
        raise RouteError(f"preparing the graph for onnx2torch failed: {_first(e)}", unexpected=e) from None
    safe, names = safe_names(prepared)
    module_names = checked_module_names(safe, names)          # {submodule: node name in the prepared graph}
    onnx2torch = import_onnx2torch()
    with quiet_torch():
        try:
            module = onnx2torch.convert(safe).eval()
        except RouteError as e:            # said in the model's names already (converters.py)
            raise RouteError(in_model_names(str(e), names), unexpected=e.unexpected) from None
        except Unsupported as e:           # a converter xc has, refusing this form of the op
            raise RouteError(f"{in_model_names(_first(e), names)} — xc's converter does not compute this form; "
                             f"{DEFAULT_ADVICE}") from None
        except NotImplementedError as e:
            raise RouteError(_no_converter(e, safe, names, opsets)) from None
        except Exception as e:  # noqa: BLE001
            raise RouteError(f"onnx2torch could not convert the graph: {in_model_names(_first(e), names)}",
                             unexpected=e) from None
        args = tuple(torch.from_numpy(np.asarray(feeds[s.name], order="C")) for s in specs)
        traced, used = _trace(module, args, module_names, kinds, model_nodes)
        unused = [s.name for i, s in enumerate(specs) if i not in used]
        if unused:
            # An input only an If's condition read (silero-vad's sample rate) is no input of the program: its
            # analysis value is burned in. Targets are fed the others (targets/routed.py).
            notes.append(f"input(s) {', '.join(repr(n) for n in unused)} not read by the program: their analysis "
                         "values are part of it (the branch they picked)")
        try:
            program = torch.export.export(traced, tuple(args[i] for i in used), strict=False)
        except Exception as e:  # noqa: BLE001
            raise RouteError(f"torch.export could not capture the traced program: {_first(e)}",
                             unexpected=e) from None
    origin = {}
    for line, n in enumerate(program.graph.nodes, 1):
        module_name = (n.meta.get("custom") or {}).get("xc_module")
        found = origin_of(module_names.get(module_name, ""), model_nodes) if module_name else None
        if found and n.op == "call_function":
            origin[n.name] = found
        if n.op == "call_function" and not n.meta.get("stack_trace"):
            # A traced op has no Python source. Toolchains that keep debug locations (coreai-torch) drop an
            # op's metadata without one: a stand-in naming the submodule (a plain identifier, never the
            # model's own name).
            n.meta["stack_trace"] = f'  File "onnx_route", line {line}, in {module_name or "program"}\n'
    return Conversion(program, module, args, used, notes, origin, module_names, safe, names, kinds)


def _refuse_bfloat16(model, feeds: dict) -> None:
    """bfloat16 tensors have no numpy type torch takes (onnx2torch reads constants through numpy): refused up front,
    in one line, rather than failing inside onnx2torch."""
    import onnx
    bf16 = [name for name, v in feeds.items() if np.asarray(v).dtype.name == "bfloat16"]
    bf16 += [t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.BFLOAT16]
    bf16 += [n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.attribute
             and n.attribute[0].type == onnx.AttributeProto.TENSOR
             and n.attribute[0].t.data_type == onnx.TensorProto.BFLOAT16]
    if bf16:
        raise RouteError(f"bfloat16 tensors ({', '.join(repr(shown(n)) for n in bf16[:3])}"
                         f"{' …' if len(bf16) > 3 else ''}): the route takes float32, float16 and integer models — "
                         f"{DEFAULT_ADVICE}")


def run_program(program, args) -> list:
    """The program's tensor outputs on `args`, as numpy arrays, in order."""
    import torch
    with torch.no_grad():
        return [t.detach().numpy() for t in torch.utils._pytree.tree_leaves(program.module()(*args))
                if isinstance(t, torch.Tensor)]


def _build(onnx_path: str, specs, feeds: dict, folder: str) -> dict:
    import onnx
    import torch

    from ..quiet import quiet_torch
    from .converters import QUANTIZED_OPS
    source = onnx.load(onnx_path)
    c = convert(source, specs, feeds)
    args = tuple(c.args[i] for i in c.used)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, PROGRAM_FILE)
    with quiet_torch():
        torch.export.save(c.program, path)
        outputs = run_program(c.program, args)
    quantized = sorted({op for _, op in c.kinds.values() if op in QUANTIZED_OPS})
    reference, names = _onnx_reference(onnx_path, feeds)
    drift = _conversion_drift(names, reference, outputs, held_in_float=bool(quantized))
    record = {"program_path": path, "preprocessing": c.notes, "origin": c.origin, "conversion_drift": drift,
              "program_inputs": [specs[i].name for i in c.used],
              "program_nodes": sum(1 for n in c.program.graph.nodes if n.op == "call_function")}
    record["program_outputs_path"] = _save_outputs(os.path.join(folder, OUTPUTS_FILE), names, outputs)
    if quantized:
        record["float_model"] = (f"the model's quantized ops ({', '.join(quantized)}) are computed in float on the "
                                 "PyTorch side (ONNX Runtime's dynamic-int8 Conv and MatMul on dequantized values, "
                                 "other integer ops on integer values held in float32, DynamicQuantizeLSTM on its "
                                 "dequantized weights): these targets compile a float model, not the int8 one")
    if route_departing(drift):
        from .departure import first_departure
        record["first_departure"] = first_departure(source, c, feeds)
    return record


def _save_outputs(path: str, names: list[str], outputs: list) -> str:
    """The program's outputs at the analysis inputs, keyed by the ONNX graph output each stands for (numpy.savez,
    no pickle: object arrays are left out), for the analyses that measure a routed target against the program it
    compiled."""
    arrays = {name: np.asarray(value) for name, value in zip(names, outputs)
              if np.asarray(value).dtype != object}
    with open(path, "wb") as f:       # a file object: savez would append ".npz" to a name without it
        np.savez(f, **arrays)
    return path
def _trace(module, args, module_names: dict, kinds: dict, model_nodes: set):
    """The module as an FX graph of ATen ops traced with the real values of `args`, each op annotated with the
    submodule it came from (meta["custom"]["xc_module"], kept by torch.export); and the positions of the inputs
    it reads (traced again without the others, whose values the first trace burned in)."""
    traced = _trace_once(module, args, list(range(len(args))), module_names, kinds, model_nodes)
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    used = [i for i, p in enumerate(placeholders) if p.users]
    if len(used) == len(args) or not used:
        return traced, list(range(len(args)))
    return _trace_once(module, args, used, module_names, kinds, model_nodes), used


def _trace_once(module, args, used: list[int], module_names: dict, kinds: dict, model_nodes: set):
    import torch
    import torch.fx.traceback as fx_traceback
    from torch.fx.experimental.proxy_tensor import make_fx

    class Annotating(torch.fx.Interpreter):
        def call_module(self, target, args, kwargs):
            with fx_traceback.annotate({"xc_module": target}):
                try:
                    return super().call_module(target, args, kwargs)
                except RouteError:
                    raise
                except Exception as e:  # noqa: BLE001 — said as the ONNX node that failed
                    node = origin_of(module_names.get(target, ""), model_nodes)
                    domain, op = kinds.get(node, ("?", "?"))
                    # onnx2torch raises NotImplementedError for a form of an op it does not compute: a refusal the
                    # conformance bench counts as such; any other exception is unexpected (counted as a crash).
                    refused = isinstance(e, NotImplementedError)
                    raise RouteError(f"{op} '{shown(node)}' (domain {domain}) failed in PyTorch at the analysis "
                                     f"shapes: {_first(e)} — if ONNX Runtime ran it on empty tensors, give the input "
                                     "shapes the model is meant for",
                                     unexpected=None if refused else e) from None

    with torch.no_grad(), fx_traceback.preserve_node_meta():
        # Reading a tensor's value is allowed: the trace burns it in, as torch.jit.trace does. The values read are
        # constants at fixed shapes (the graph was folded first); the drift check below catches a model whose
        # values did depend on its inputs.
        def run(*given):
            full = list(args)
            for i, value in zip(used, given):
                full[i] = value
            return Annotating(module).run(*full)
        traced = make_fx(run, tracing_mode="real", pre_dispatch=True,
                         _error_on_data_dependent_ops=False)(*(args[i] for i in used))
    # Each value read stays in the graph as an unused `item` call; torch.export would turn it into an unbacked
    # symbol with guards of its own. Its value is burned in already: drop it.
    reads = (torch.ops.aten.item.default, torch.ops.aten._local_scalar_dense.default)
    for n in list(traced.graph.nodes):
        if n.op == "call_function" and n.target in reads and not n.users:
            traced.graph.erase_node(n)
    _fold_constant_casts(traced)
    traced.recompile()
    return traced


def _fold_constant_casts(traced) -> None:
    """A cast of a constant becomes the cast constant: the int8/uint8 weights xc's quantized-op modules compute in
    float are float32 weights in the program (Core ML's ExecuTorch delegate cannot even cast a uint8 tensor), and
    no target spends a kernel on them."""
    import torch
    casts = (torch.ops.aten.to.dtype, torch.ops.aten._to_copy.default)
    for n in list(traced.graph.nodes):
        if n.op != "call_function" or n.target not in casts or getattr(n.args[0], "op", None) != "get_attr":
            continue
        if n.target is torch.ops.aten.to.dtype:
            dtype, others = n.args[1], {**n.kwargs}
        else:
            others = {k: v for k, v in n.kwargs.items() if k != "dtype"}
            dtype = n.kwargs.get("dtype")
        if dtype is None or len(n.args) > 2 or others:
            continue        # a cast that also moves, lays out or copies: left as it is
        value = getattr(traced, n.args[0].target).to(dtype)
        name = f"{n.args[0].target}_as_{str(dtype).rsplit('.', 1)[-1]}"
        traced.register_buffer(name, value)  # a buffer, as torch.export makes make_fx's constants: module.to()
                                             # converts it (a plain attribute would be a lifted constant it skips)
        with traced.graph.inserting_before(n):
            folded = traced.graph.get_attr(name)
        n.replace_all_uses_with(folded)
        traced.graph.erase_node(n)
    before = {n.target for n in traced.graph.nodes if n.op == "get_attr"}
    traced.graph.eliminate_dead_code()
    for name in before - {n.target for n in traced.graph.nodes if n.op == "get_attr"}:
        delattr(traced, name)                # else torch.export would still carry the integer original


def _onnx_reference(onnx_path: str, feeds: dict) -> tuple[list, list[str]]:
    """ONNX Runtime's outputs (all optimizations off) on the analysis inputs, and the graph outputs' names."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    session = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    wanted = {i.name for i in session.get_inputs()}
    return session.run(names, {k: np.asarray(v) for k, v in feeds.items() if k in wanted}), names


def _conversion_drift(names: list[str], reference: list, converted: list, held_in_float: bool = False) -> dict:
    """The program's outputs against ONNX Runtime's, output by output (compare_output)."""
    out = {}
    for name, ref, got in zip(names, reference, converted):
        if not isinstance(ref, np.ndarray):
            out[name] = {"error": "not a tensor in ONNX Runtime (a sequence or map): not compared"}
        else:
            out[name] = compare_output(ref, np.asarray(got), held_in_float)
    return out


def _no_converter(e: Exception, model, names: dict, opsets: dict) -> str:
    """onnx2torch's 'Converter is not implemented (OperationDescription(domain=…, operation_type=…, version=…))'
    as the op, its domain and opset, the first node that has it, and what to do."""
    from .names import in_model_names
    found = re.search(r"domain='([^']*)', operation_type='([^']+)', version=(\d+)", str(e))
    if not found:
        return f"onnx2torch cannot convert the graph: {in_model_names(_first(e), names)}"
    domain, op, version = found.group(1) or "ai.onnx", found.group(2), found.group(3)
    node = next((names.get(n.name, n.name) for n in model.graph.node if n.op_type == op), "?")
    return (f"no PyTorch converter for {op} (domain {domain}, opset {opsets.get(domain, version)}; first at node "
            f"'{shown(node)}') in onnx2torch or xc — {ADVICE.get(op, DEFAULT_ADVICE)}")


def _first(e: Exception) -> str:
    return with_kind(e, first_line(e, 300), {"RuntimeError", "NotImplementedError", "Unsupported"})
