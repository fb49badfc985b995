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

import contextlib
import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from ... import evidence as ev
from ...ir import CAST, COMPUTE
from ..base import register
from ..options import DelegateCostOptions, option
from .common import (CPU_KERNELS, ExecuTorchTarget, fold_into_runners, profile_pte, quantize_pt2e, reasons_from,
                     run_pte)

# The debug handle XNNPACK's preprocess gives an XNNPACK node made from a node its own passes added (the layout
# conversions of ChannelsLastTaggedReshapePass, conv1d's unsqueeze): DEFAULT_DEBUG_HANDLE in xnnpack_preprocess.py.
NO_HANDLE = 65535


@dataclass(frozen=True)
class ExecuTorchXnnpackOptions(DelegateCostOptions):
    quantize: Literal["none", "int8"] = option(
        "none", help="none, or int8: PT2E static quantization with XNNPACKQuantizer (symmetric, per channel), "
                     "calibrated on the inputs this run uses")


@register
class ExecuTorchXnnpack(ExecuTorchTarget):
    id = "executorch-xnnpack"
    shipped_with = {"executorch-coreml": 4}     # an ExecuTorch team's Android and iOS builds
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
    fusions_inside_delegates = ("XNNPACK's preprocess passes fuse batch norm into the convolution and activations "
                                "into the op before them, and drop no-op copies: xc reads the XNNPACK graph each "
                                "delegate serialized and folds those ops into the node that runs them (fused_from). "
                                "XNNPACK's runtime may fuse further when it builds its subgraph (a clamp into its "
                                "producer, back-to-back reshapes): those stay separate nodes here, untimed")
    Options = ExecuTorchXnnpackOptions

    @property
    def quantized(self) -> bool:
        return self.settings.quantize == "int8"

    def _partitioner(self):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        return XnnpackPartitioner()

    profile_method = ("ETDump of the compiled .pte loaded again by ExecuTorch's runtime (enable_etdump): each CPU "
                      "kernel's native_call event, and each XNNPACK operator's time as the delegate's XNNProfiler "
                      "logs it (whole microseconds: an operator under 1 µs reads 0), matched to the program node "
                      "its XNNPACK node was serialized from")

    @contextlib.contextmanager
    def _reason_recorder(self, reasons, extra):
        """XNNPACK's configs explain a refusal through one WhyNoPartition call; and each delegate's XNNPACK graph,
        node by node, is recorded as preprocess serializes it."""
        from executorch.exir.backend.utils import WhyNoPartition
        extra["xnnpack_graphs"] = {}
        with reasons_from(WhyNoPartition, "__call__", reasons), _recording_xnnpack_graphs(extra["xnnpack_graphs"]):
            yield

    def _fold_delegate_fusions(self, g, compiled) -> None:
        """Each delegate's Edge ops that produced no XNNPACK node were fused (or dropped as no-ops) by XNNPACK's
        preprocess passes: folded into the node that runs them; each XNNPACK node's owner kept for profiling."""
        owners = {}
        for name, lowered in _lowered(compiled.edge):
            records = compiled.extra.get("xnnpack_graphs", {}).get(_digest(lowered.processed_bytes))
            if records is None:
                continue           # not serialized while xc listened (another XNNPACK version): left as Edge ops
            owners[name] = _xnode_owners(lowered, name, records)
            fold_into_runners(g, name, {o for _, o in owners[name] if o})
        compiled.extra["xnode_owners"] = owners

    def _profile(self, compiled, inputs, captured, result, runs):
        owners = compiled.extra.get("xnode_owners", {})

        seen: set[str] = set()

        def delegate_ops(module, names):
            matched = _align(names, owners.get(module) or [])
            seen.update(o for o in matched if o)
            return matched
        samples = profile_pte(compiled.pte_path, inputs, captured, compiled.extra["instructions"], runs,
                              delegate_ops)
        # Serialized, but no operator of XNNPACK's runtime: its subgraph fusion folded them into another operator.
        unrun = sorted({o for nodes in owners.values() for _, o in nodes if o and o not in seen})
        if unrun:
            result.notes.append(f"{len(unrun)} delegated node(s) ran no XNNPACK operator of their own (XNNPACK's "
                                "runtime fused them into a neighbour, e.g. a clamp into the op before it), so no "
                                f"time of their own: {', '.join(unrun[:5])}" + (" …" if len(unrun) > 5 else ""))
        return samples

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
        if not self.quantized:
            return captured.program()
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        quantizer = XNNPACKQuantizer()
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        return quantize_pt2e(captured, quantizer, self.calibration_inputs, result,
                             "XNNPACKQuantizer (symmetric, per-channel weights, per-tensor activations)")

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


def _digest(data) -> str:
    return hashlib.sha256(bytes(data or b"")).hexdigest()


def _lowered(edge):
    from ...readers.executorch import lowered_modules
    return [(name, m) for name, m in lowered_modules(edge) if m.backend_id == ExecuTorchXnnpack.backend_id]


@contextlib.contextmanager
def _recording_xnnpack_graphs(graphs: dict):
    """While lowering: which XNNPACK nodes each node of the preprocessed program became. XnnpackBackend.preprocess
    (backends/xnnpack/xnnpack_preprocess.py) visits the program node by node with the visitors get_node_visitors
    makes (each `define_node` appends the node's XNNPACK nodes to the XNNGraph) and serializes the graph with
    serialize_xnnpack_binary: recorded per delegate under the digest of the bytes it returns (the lowered module's
    processed_bytes). Put back afterwards."""
    from executorch.backends.xnnpack import xnnpack_preprocess as xp
    get_visitors, serialize = xp.get_node_visitors, xp.serialize_xnnpack_binary
    pending: list[dict] = []

    def recording(define):
        def define_node(node, xnn_graph, *args, **kwargs):
            before = len(xnn_graph.xnodes)
            out = define(node, xnn_graph, *args, **kwargs)
            made = xnn_graph.xnodes[before:]
            if made:
                from ...readers.executorch import op_name
                pending.append({"op": op_name(node.target), "handle": made[0].debug_handle,
                                "xnodes": [type(x.xnode_union).__name__ for x in made]})
            return out
        return define_node

    def visitors(*args, **kwargs):
        made = get_visitors(*args, **kwargs)
        for visitor in made.values():         # fresh instances per preprocess call (operators/node_visitor.py)
            visitor.define_node = recording(visitor.define_node)
        return made

    def serialized(*args, **kwargs):
        data = serialize(*args, **kwargs)
        graphs[_digest(data)] = list(pending)
        pending.clear()
        return data
    xp.get_node_visitors, xp.serialize_xnnpack_binary = visitors, serialized
    try:
        yield
    finally:
        xp.get_node_visitors, xp.serialize_xnnpack_binary = get_visitors, serialize


def _xnode_owners(lowered, module: str, records: list[dict]) -> list[tuple[str, str | None]]:
    """Each XNNPACK node of a delegate, in serialized order (the order XNNPACK's runtime creates its operators):
    (its type, the id of the delegate's Edge node it came from, or None for a node XNNPACK's passes added).

    Preprocess works on a re-traced copy whose node names differ from the delegate's `original_module`; the
    debug handle survives (to_edge's DebugHandleGeneratorPass gives all nodes of one source op the same handle).
    So the k-th preprocessed node of (handle, operator) is the k-th Edge node of (handle, operator); a node a pass
    rewrote to another operator (addmm → linear) goes to the first Edge node of its handle that has none yet."""
    from ...readers.executorch import op_name
    edge = [x for x in lowered.original_module.graph.nodes if x.op == "call_function"]
    taken: set[str] = set()
    out = []
    for rec in records:
        owner = None
        if rec["handle"] != NO_HANDLE:
            same = [x for x in edge if x.meta.get("debug_handle") == rec["handle"] and x.name not in taken]
            owner = next((x for x in same if op_name(x.target) == rec["op"]), None) or next(
                (x for x in same if "getitem" not in op_name(x.target)), None)
        if owner is not None:
            taken.add(owner.name)
        out += [(t, f"{module}/{owner.name}" if owner is not None else None) for t in rec["xnodes"]]
    return out


# What XNNPACK names the operators of a node type (xnn_operator_type_to_string), where it is not the type's own
# name: a 1×1 convolution runs as a GEMM, global pooling as a mean, a transposed convolution as deconvolution, a
# reshape or concatenation as copies.
_RUNS_AS = {"conv": ("convolution", "fullyconnected"), "depthwiseconv": ("convolution",),
            "convtranspose": ("deconvolution",), "globalavgpooling": ("mean", "globalaveragepooling"),
            "avgpooling": ("averagepooling",), "reshape": ("reshape", "copy"), "concatenate": ("concatenate", "copy"),
            "div": ("divide",)}


def _event_kind(event: str) -> str:
    """"Static Reshape (NC) #2" → "reshape"."""
    return re.sub(r"[^a-z]", "", event.split(" (")[0].split(" #")[0].lower()).removeprefix("static")


def _xnode_kind(xtype: str) -> str:
    """"XNNStaticReshape" → "reshape", "XNNConv2d" → "conv", "XNNConcatenate3" → "concatenate"."""
    return re.sub(r"\d+d?$", "", xtype.removeprefix("XNN")).lower().removeprefix("static")


def _compatible(event: str, xtype: str) -> bool:
    """Whether an XNNProfiler event ("Convolution (NHWC, F32) IGEMM #1": the operator name, then its count) can
    be an operator of this XNNPACK node type (XNNConv2d)."""
    op, node = _event_kind(event), _xnode_kind(xtype)
    return bool(op and node) and any(op.startswith(name) for name in _RUNS_AS.get(node, (node,)))


def _align(events: list[str], xnodes: list[tuple[str, str | None]]) -> list[str | None]:
    """The owner of each XNNPACK operator event of one delegate call. XNNPACK's runtime creates the operators in
    the order of the serialized nodes, skipping those it fused into another (XNNProfiler::submit_trace logs them in
    that order, named, with no debug handle): each event goes to the next node it can be an operator of; an event
    no later node fits stays unmatched (None). Where a run of nodes of one type (clamp, clamp) has fewer events,
    the first ones were fused: XNNPACK's subgraph fusion folds a clamp into the node before it."""
    out, at, i = [], 0, 0
    while i < len(events):
        j = next((k for k in range(at, len(xnodes)) if _compatible(events[i], xnodes[k][0])), None)
        if j is None:
            out.append(None)
            i += 1
            continue
        same = 1
        while j + same < len(xnodes) and xnodes[j + same][0] == xnodes[j][0]:
            same += 1
        fits = 1
        while fits < same and i + fits < len(events) and _compatible(events[i + fits], xnodes[j][0]):
            fits += 1
        j += same - fits
        out += [xnodes[j + k][1] for k in range(fits)]
        at, i = j + fits, i + fits
    return out
