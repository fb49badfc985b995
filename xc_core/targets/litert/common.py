"""What the LiteRT targets share: the model as a .tflite (the upload itself, or the captured program converted by
litert-torch), read back with readers/tflite.py, each op traced to the source ops it came from, and runs by LiteRT's
interpreter.

litert-torch's flow (ai.google.dev/edge/litert, "PyTorch to LiteRT"): torch.export → its own FX passes (NCHW→NHWC
layout: a TRANSPOSE before and after each convolution, folded where two meet) → StableHLO/TFL MLIR → the LiteRT
converter passes (fusions such as Conv+BatchNorm+ReLU into one CONV_2D with a fused activation) → flatbuffer. The
MLIR keeps each op's location: the FX node names it was lowered from (a fused op keeps all of them). xc reads them
from the converted module before it is written, in op order — the flatbuffer's operators are the MLIR function's
ops in the same order — so every .tflite op names its source ops.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass, field

import numpy as np

from ...analysis.layout_audit import LayoutMoves
from ...ir import COMPUTE, Graph
from ...readers.tflite import TfliteModel, node_id
from ..base import Target, dist_version, source_tensors
from ..pins import install_hint

CPU_KERNELS = "LiteRT built-in kernels"


@dataclass
class LiteRTCompiled:
    """What conversion hands on to read-back and run."""
    tflite_path: str
    model: TfliteModel
    origin: dict[int, list[str]]          # op index → source op ids (captured.before's node ids)
    io: dict                               # input/output tensor indices in the source's order
    extra: dict = field(default_factory=dict)


class LiteRTTarget(Target):
    """A LiteRT runtime on the .tflite of this analysis. Subclasses read back and run it their way."""
    steps_caption = ("LiteRT: the .tflite litert-torch wrote (its fusions and NHWC transposes), then the delegate's "
                     "partitions.")
    layout_moves = LayoutMoves("the .tflite's TRANSPOSE ops (litert-torch converts NCHW models to NHWC around "
                               "convolutions)")
    needs_onnx = False
    takes_program = True
    from_exported_program = True
    relative_cost = 3            # litert-torch's conversion: seconds even on tiny models

    @classmethod
    def available(cls):
        if importlib.util.find_spec("ai_edge_litert") is None:
            return False, f"LiteRT is not installed ({install_hint('ai-edge-litert')})"
        return True, ""

    def accepts(self, captured):
        if captured.tflite_path:
            return True, ""
        if captured.exported_program is not None or captured.exported_program_file:
            if importlib.util.find_spec("litert_torch") is None:
                return False, f"litert-torch is not installed ({install_hint('litert-torch')})"
            return True, ""
        return False, (f"LiteRT runs .tflite models; this {captured.source.kind} source is neither a .tflite nor a "
                       "PyTorch program litert-torch can convert")

    # -- compile ---------------------------------------------------------------------------------------------
    def _compile(self, captured, workdir, result):
        os.makedirs(workdir, exist_ok=True)
        result.info["ai_edge_litert_version"] = dist_version("ai-edge-litert")
        path = os.path.join(workdir, "model.tflite")
        if captured.tflite_path:
            same_file(captured.tflite_path, path)
            with open(path, "rb") as f:
                model = TfliteModel(f.read())
            origin = {op["index"]: [node_id(op["op"], op["index"])] for op in model.ops}
            result.info["conversion"] = "none: the uploaded .tflite as it is"
        else:
            model, origin = convert_program(captured, self.calibration_inputs or {}, path, result)
        model, path, origin = self._transform(model, path, origin, captured, workdir, result)
        result.artifacts.append(path)
        result.info["tflite_bytes"] = os.path.getsize(path)
        return LiteRTCompiled(path, model, origin, io_order(model, captured))

    def _transform(self, model, path, origin, captured, workdir, result):
        """A variant's rewrite of the .tflite (int8 quantization); returns (model, path, origin)."""
        return model, path, origin

    # -- inspect helpers -------------------------------------------------------------------------------------
    def converted_graph(self, compiled, captured, stage: str) -> Graph:
        """The .tflite in the IR, each op with its source ops, module path and the ops it absorbed."""
        g = compiled.model.graph(captured.source.name, stage)
        index = captured.before.by_id()
        order = {n.id: k for k, n in enumerate(captured.before.nodes)}
        for i, n in enumerate(g.nodes):
            srcs = sorted((s for s in compiled.origin.get(i, []) if s in index), key=order.get)
            n.source_ops = srcs
            if srcs:
                first = index[srcs[0]]
                n.module_path, n.source_location = first.module_path, first.source_location
            if len(srcs) > 1 and not captured.tflite_path:
                n.fused_from = list(srcs)
        return g

    @staticmethod
    def before_delegation(final: Graph) -> Graph:
        """The converted graph as the runtime was given it (no device yet), for the import step."""
        g = Graph.from_dict(final.to_dict())
        g.stage = "litert-converted"
        return g

    # -- cost (targets/run_cost.py) --------------------------------------------------------------------------
    runtime_memory_absent = ("LiteRT's Python Interpreter gives no figure of its own for its memory (its arena's "
                             "size is not exposed)")

    def _artifact_paths(self, compiled, result):
        return [compiled.tflite_path], ""      # an int8 variant keeps the float .tflite beside it: not shipped

    def given_graph(self, captured) -> Graph:
        """What the converter was given — the captured program — or the uploaded .tflite itself: the graph
        `fused_from` ids refer to."""
        return Graph.from_dict(captured.before.to_dict())


def same_file(src: str, dst: str) -> None:
    """`dst` as the same file as `src`: a hard link (no second copy of a model's weights on disk), a copy where the
    file system has none."""
    if os.path.exists(dst):
        os.remove(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def litert_torch_version() -> str | None:
    return dist_version("litert-torch")


def convert_program(captured, inputs: dict, path: str, result) -> tuple[TfliteModel, dict[int, list[str]]]:
    """The captured ExportedProgram converted by litert-torch at this run's input shapes, written to `path`; returns
    the model and, per op index, the FX node names its MLIR location names.

    The LiteRT targets of one run convert the same program at the same shapes: the first to get here converts into
    a folder beside the targets' own (keyed by the source and the input shapes) while holding its lock; the others
    wait for it and take its .tflite and record (a failure too) instead of converting again."""
    import fcntl
    import hashlib
    import json
    key = hashlib.sha256(json.dumps([captured.source.sha256, [[s.name, list(np.shape(inputs[s.name])) if s.name in
                                     inputs else s.shape, s.dtype] for s in captured.source.inputs]],
                                    default=str).encode()).hexdigest()[:16]
    folder = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), os.pardir, "litert-converted", key))
    os.makedirs(folder, exist_ok=True)
    shared, record_file = os.path.join(folder, "model.tflite"), os.path.join(folder, "conversion.json")
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(record_file):
            try:
                record = _convert(captured, inputs, shared)
            except Exception as e:  # noqa: BLE001 — said again to every target that asks, not converted again
                record = {"error": str(e), "error_type": type(e).__name__}
            tmp = record_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump(record, f)
            os.replace(tmp, record_file)
        with open(record_file) as f:
            record = json.load(f)
    if "error" in record:
        # Every target says the conversion's failure in the same words: under the converter's own class name.
        raise type(record["error_type"], (RuntimeError,), {})(record["error"])
    same_file(shared, path)                     # each target's artifacts list the .tflite it ran (Downloads)
    result.info.update(record["info"])
    result.notes.extend(record["notes"])
    with open(path, "rb") as f:
        model = TfliteModel(f.read())
    return model, {int(k): v for k, v in record["origin"].items()}


def _convert(captured, inputs: dict, path: str) -> dict:
    """litert-torch's conversion into `path`: {origin, info, notes} as plain data."""
    import litert_torch

    from ...quiet import quiet_litert
    ep = captured.program()
    args = tuple(source_tensors(inputs, captured)) if inputs else tuple(ep.example_inputs[0])
    version = litert_torch_version()
    with quiet_litert(), _constants_kept_alive():
        converted = litert_torch.convert(_module_to_convert(ep), args)
        text = _module_text(converted)
        converted.export(path)
    with open(path, "rb") as f:
        model = TfliteModel(f.read())
    origin, why = op_origins(text, model)
    notes = [f"LiteRT ops are not traced to source ops: {why}"] if why else []
    info = {"litert_torch_version": version,
            "conversion": f"litert-torch {version}: litert_torch.convert at the analysis input shapes (the .tflite is "
                          "static at them)"}
    downcast = [s.name for s in captured.source.inputs if s.dtype in ("int64", "float64")]
    if downcast:
        info["downcast_inputs"] = downcast
        notes.append("litert-torch turns 64-bit inputs into 32-bit ones (its enable_x64=False default): "
                     + ", ".join(downcast) + " are fed as int32/float32")
    return {"origin": origin, "info": info, "notes": notes}


@contextlib.contextmanager
def _constants_kept_alive():
    """litert-torch 0.10 caches each constant it lowers by its memory address (backend/inline_consts.py,
    `_ConstantFingerprint`: data_ptr, shape, stride, offset) without keeping the tensor. A constant its passes made
    and dropped (a transposed weight) frees its memory, the next of the same shape is allocated there, and the cache
    hands back the first one's values: converting GPT-2 (two blocks) wrote the first block's attention weight for
    the second's, on some runs and not others (rel L2 0.3–0.5 on the logits). Every tensor fingerprinted is kept
    alive until the conversion ends, so no address is reused."""
    from litert_torch.backend import inline_consts
    fingerprint = inline_consts._ConstantFingerprint
    original = fingerprint.__dict__["from_tensor"]
    kept = []

    def from_tensor(cls, tensor):
        kept.append(tensor)
        return original.__func__(cls, tensor)
    fingerprint.from_tensor = classmethod(from_tensor)
    try:
        yield
    finally:
        fingerprint.from_tensor = original
        kept.clear()


def _module_to_convert(ep):
    """The program as a module litert-torch can export again. A tensor literal (`torch.tensor([...])` in forward)
    is `lift_fresh_copy` then an in-place `detach_` in the program; in a program read back from a .pt2 the constant
    is a view of the archive's storage, and re-exporting fails on it ("Can't detach views in-place"). The copy is
    fresh already, so the out-of-place detach computes the same."""
    import torch
    gm = ep.module()
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.detach_.default:
            n.target = torch.ops.aten.detach.default
    gm.recompile()
    return gm


def _module_text(converted) -> str | None:
    """The converted MLIR module with its debug locations (weights elided), before the flatbuffer is written."""
    try:
        op = converted._exporter._module_op                       # litert-torch 0.10's LazyModelExporter
        return op.get_asm(enable_debug_info=True, large_elements_limit=16)
    except Exception:  # noqa: BLE001 — provenance is optional; the model is still analysed
        return None


_LOC_DEF = re.compile(r"^#(loc\d*) = loc\((.*)\)\s*$", re.M)
_LOC_REF = re.compile(r"#(loc\d*)")
_OP_LINE = re.compile(r'^(\s*)(?:%[^=]*=\s*)?"?([a-z_]+\.[a-z0-9_.]+)"?[ (<]')
_NOT_OPERATORS = ("arith.constant", "tfl.pseudo_const", "tfl.pseudo_qconst", "tfl.no_value",
                  "tfl.pseudo_sparse_const", "tfl.pseudo_sparse_qconst", "func.return", "stablehlo.constant",
                  "vhlo.constant_v1")


def op_origins(text: str | None, model: TfliteModel) -> tuple[dict[int, list[str]], str | None]:
    """{op index: FX node names} from the MLIR's locations, matched to the flatbuffer's ops by order; or ({}, why)."""
    if not text:
        return {}, "litert-torch gave no MLIR module to read locations from"
    locs = {m.group(1): m.group(2) for m in _LOC_DEF.finditer(text)}
    body = text.split("func.func", 1)[1] if "func.func" in text else ""
    ops, indent = [], None
    for line in body.splitlines()[1:]:
        m = _OP_LINE.match(line)
        if not m:
            if line.strip().startswith("}") and indent is not None and len(line) - len(line.lstrip()) < indent:
                break                                              # the end of the first function
            continue
        if indent is None:
            indent = len(m.group(1))
        if len(m.group(1)) != indent or m.group(2) in _NOT_OPERATORS:
            continue                                               # region bodies (subgraphs) and constants
        ref = re.search(r"loc\((#loc\d*)\)\s*$", line)
        ops.append((m.group(2), ref.group(1)[1:] if ref else None))
    if len(ops) != len(model.ops):
        return {}, f"the MLIR has {len(ops)} operators, the .tflite {len(model.ops)}"
    origin = {}
    for i, ((mlir_op, loc), op) in enumerate(zip(ops, model.ops)):
        if mlir_op.startswith("tfl.") and mlir_op[4:].upper() != op["op"] and not op["custom"]:
            return {}, f"op {i} is {mlir_op} in the MLIR and {op['op']} in the .tflite"
        origin[i] = list(dict.fromkeys(_fx_names(loc, locs, set())))
    return origin, None


def _fx_names(loc: str | None, locs: dict, seen: set) -> list[str]:
    """The FX node names a location names: litert-torch writes loc("<module hierarchy>;"(loc("<fx node>"(file))))
    per op, and fused[...] for an op several were folded into."""
    if loc is None or loc in seen or loc not in locs:
        return []
    seen.add(loc)
    body = locs[loc]
    names = []
    m = re.match(r'^"([^"]*)"(?:\((.*)\))?$', body)
    if m:
        name, inner = m.group(1), m.group(2) or ""
        child = _LOC_REF.findall(inner)
        if not name.endswith(";") and not re.search(r":\d+:\d+$", body) and "/" not in name:
            names.append(name)
        for c in child:
            names += _fx_names(c, locs, seen)
    elif body.startswith("fused["):
        for c in _LOC_REF.findall(body):
            names += _fx_names(c, locs, seen)
    return names


def io_order(model: TfliteModel, captured) -> dict:
    """The model's input and output tensor indices in the source's order: by name for an upload (the names the
    source took from the model), by position for a converted program (litert-torch's signature keys args_k,
    output_k; without a signature, the subgraph's order)."""
    if captured.tflite_path:
        ins, outs = model.io_names()
        by_in, by_out = dict(zip(ins, model.inputs)), dict(zip(outs, model.outputs))
        return {"inputs": [by_in[s.name] for s in captured.source.inputs],
                "outputs": [by_out[o] for o in captured.output_names]}
    if model.signature:
        ins, outs = model.signature["inputs"], model.signature["outputs"]
        return {"inputs": [ins[k] for k in sorted(ins, key=_arg_position)],
                "outputs": [outs[k] for k in sorted(outs, key=_arg_position)]}
    return {"inputs": list(model.inputs), "outputs": list(model.outputs)}


def _arg_position(key: str) -> tuple:
    m = re.search(r"(\d+)$", key)
    return (int(m.group(1)) if m else 1 << 30, key)


def feed_arrays(inputs: dict, captured, details_by_index: dict, order: list[int]) -> dict[int, object]:
    """{tensor index: array} in the model's input dtypes (litert-torch made 64-bit inputs 32-bit)."""
    import numpy as np
    arrays = {}
    for spec, idx, tensor in zip(captured.source.inputs, order, source_tensors(inputs, captured)):
        want = details_by_index[idx]["dtype"]
        arrays[idx] = np.asarray(tensor.numpy(), dtype=want)
    return arrays


def interpreter(path: str, delegates: bool):
    """LiteRT's interpreter on the .tflite, tensors allocated: with its default delegate (XNNPACK, what an app gets
    with no options) or with the built-in kernels only."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    resolver = OpResolverType.AUTO if delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = Interpreter(model_path=path, experimental_op_resolver_type=resolver)
    it.allocate_tensors()
    return it


def run_interpreter(it, compiled: LiteRTCompiled, inputs: dict, captured) -> dict:
    """One run of an interpreter on the analysis inputs: {output name: array}."""
    details = {d["index"]: d for d in it.get_input_details()}
    for idx, arr in feed_arrays(inputs, captured, details, compiled.io["inputs"]).items():
        if list(arr.shape) != list(details[idx]["shape"]):
            it.resize_tensor_input(idx, list(arr.shape))
            it.allocate_tensors()
        it.set_tensor(idx, arr)
    it.invoke()
    return dict(zip(captured.output_names, (it.get_tensor(i) for i in compiled.io["outputs"])))


def delegated_ops(ops_details: list[dict], n_model_ops: int) -> dict[int, int]:
    """{op index: the DELEGATE node that took it}. The interpreter lists the model's ops and then one DELEGATE
    node per delegated partition, with the partition's input and output tensors; a partition's ops are those met
    walking back from its outputs to its inputs."""
    producer = {}
    for d in ops_details[:n_model_ops]:
        for t in d["outputs"]:
            producer[int(t)] = d["index"]
    taken: dict[int, int] = {}
    for d in ops_details[n_model_ops:]:
        if d["op_name"] != "DELEGATE":
            continue
        boundary = {int(t) for t in d["inputs"]}
        stack = [int(t) for t in d["outputs"]]
        while stack:
            t = stack.pop()
            if t in boundary or t not in producer or producer[t] in taken:
                continue
            op = producer[t]
            taken[op] = d["index"]
            stack += [int(x) for x in ops_details[op]["inputs"] if int(x) >= 0]
    return taken


def partition_summary(g: Graph, ep: str, decided_by: str, sizes: list[int], evidence: str,
                      outside_reason: str | None = None, **extra) -> dict:
    """The report's partitioning record for a LiteRT delegate: compute ops it took, ops left, partitions. The op
    types left are two lists: those the delegate cannot run (`unsupported_ops`) and those it can that sit outside
    the partition it takes (`outside_partition_ops`: the nodes whose reason is `outside_reason`)."""
    compute = [n for n in g.nodes if n.kind == COMPUTE]
    on_cpu = [n for n in compute if n.backend == "cpu"]
    outside = {n.id for n in on_cpu if outside_reason and n.fallback_reason == outside_reason}
    return {"ep": ep, "decided_by": decided_by, "num_nodes": len(compute),
            "num_supported_nodes": len(compute) - len(on_cpu), "num_partitions": len(sizes),
            "partition_sizes": sizes, "unsupported_ops": sorted({n.op_type for n in on_cpu if n.id not in outside}),
            "outside_partition_ops": sorted({n.op_type for n in on_cpu if n.id in outside}),
            "accelerated_share_nodes": round((len(compute) - len(on_cpu)) / len(compute), 4) if compute else 0.0,
            **extra, "evidence": evidence}


def delegate_boundaries(g: Graph, settings, evidence: str) -> dict:
    """Accelerator ↔ CPU boundaries with the latency-cliff estimate, at the target's cost-model options (its
    typed settings, a DelegateCostOptions)."""
    from ...analysis.boundaries import boundaries
    b = boundaries(g, float(settings.bandwidth_gb_s), float(settings.transition_overhead_ms))
    b["evidence"] = evidence
    return b


def compute_precision(n) -> str | None:
    from ...ir import precision_of_dtype
    dtypes = [t.dtype for t in n.outputs + n.inputs if t.dtype]
    return precision_of_dtype(dtypes[0]) if dtypes else None


def set_precisions(g: Graph) -> None:
    for n in g.nodes:
        if n.precision is None:
            n.precision = compute_precision(n)
            weights = n.attributes.get("weight_dtypes") or []
            if n.kind == COMPUTE and "int8" in weights and n.precision == "fp32":
                n.precision = "int8"     # dynamic-range quantized: int8 weights, the kernel computes in int8
