"""The Report as types: frozen dataclasses over report.json, so a reader writes `t.drift.outputs` where it probed
`(t.get("drift") or {}).get("outputs") or {}`.

- **Empty defaults.** A block the report lacks — absent, or written as null — reads as an empty instance of its
  type (falsy, every field at its default), a list as `()`, a mapping as `{}`. `bool(block)` says whether the
  report has it, as the dict's truthiness did.
- **Nothing is lost.** `Report.from_dict(d).to_dict() == d` for every report this xc writes: each block keeps the
  keys it was read with, in their order (`key_order`), whether it was null (`null`), and every key this module does
  not type (`extra`: a target's free toolchain facts under `info`, fields added later). A value of a type other
  than the field's (an older writer's) is kept in `extra` as it was, and the field keeps its default.
- **Older reports are upgraded once**, in `Report.from_dict` (see `upgrade`): readers above see today's fields.
- Frozen is shallow: fields this module does not type further (graph attributes, drift histograms …) hold the
  JSON values as read, shared with the dict they came from — do not change them.

Attribute names are the JSON keys, so `tests/test_report_types.py` can walk this module beside report.schema.json.
Ground floor: imports only the standard library (and may import ir, evidence, errors, paths; nothing above).
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Json = Any      # a JSON value kept as read (dict, list, str, number, bool, None)


class _Misfit(Exception):
    """A stored value is not of the shape its field types (a list where a mapping was expected …)."""


@dataclass(frozen=True, kw_only=True)
class Block:
    """What every block shares: the bookkeeping that makes `to_dict` give back exactly what `from_dict` read."""
    # Keys this module does not type, and values that did not fit their field's type, exactly as read.
    extra: Mapping[str, Json] = field(default_factory=dict, repr=False)
    # The keys the block was read with, in order (None: made in code — then every field is written).
    key_order: tuple[str, ...] | None = field(default=None, repr=False)
    # The report holds null (or nothing) here: the block reads empty and falsy (`absent()` makes one).
    null: bool = field(default=False, repr=False)

    def __bool__(self) -> bool:
        return not self.null and self.key_order != ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Json] | None):
        """The block of a report dict (None: an empty one)."""
        if d is None:
            return cls(null=True)
        if type(d) is not dict and not isinstance(d, Mapping):     # the exact type first: the ABC check is slow
            raise _Misfit(type(d).__name__)
        codecs = _codecs_of(cls)
        kwargs: dict[str, Any] = {}
        extra: dict[str, Json] = {}
        for key, value in d.items():
            codec = codecs.get(key)
            if codec is None:
                extra[key] = value
                continue
            decode, _, empty_when_null = codec
            if value is None:
                # A block, list or mapping stored as null reads empty; `extra` keeps the null for to_dict.
                if empty_when_null:
                    extra[key] = value
                else:
                    kwargs[key] = value
                continue
            try:
                kwargs[key] = decode(value) if decode is not None else value
            except _Misfit:
                extra[key] = value
        return cls(**kwargs, extra=extra, key_order=tuple(d), null=False)

    def to_dict(self) -> dict | None:
        """The block as report.json holds it (None for a null block)."""
        if self.null:
            return None
        codecs = _codecs_of(type(self))
        keys = self.key_order if self.key_order is not None else \
            tuple(codecs) + tuple(k for k in self.extra if k not in codecs)
        out = {}
        for key in keys:
            if key in self.extra:
                out[key] = self.extra[key]
                continue
            value = getattr(self, key)
            encode = codecs[key][1]
            out[key] = encode(value) if encode is not None else value
        return out


def _codecs_of(cls) -> dict:
    """Per field of `cls`: (decode or None, encode or None, whether null reads as the field's empty default — true
    for blocks, lists and mappings), built once per class."""
    codecs = cls.__dict__.get("_codecs_built")
    if codecs is None:
        hints = typing.get_type_hints(cls)
        codecs = {f.name: (*_codec(hints[f.name]), f.default_factory is not dataclasses.MISSING or f.default == ())
                  for f in dataclasses.fields(cls) if f.name not in ("extra", "key_order", "null")}
        cls._codecs_built = codecs
    return codecs


def _codec(tp) -> tuple[Callable | None, Callable | None]:
    """(decode, encode) for a field's type: Blocks, tuples and mappings of Blocks, tuples of plain values; None for
    a value kept as read."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, Block):
        return tp.from_dict, tp.to_dict
    if origin is tuple:
        item_decode, item_encode = _codec(args[0])

        def decode(v):
            if type(v) is not list:
                raise _Misfit(type(v).__name__)
            if item_decode is None:         # plain values: most tuples, and a node's every id list
                return tuple(v)
            return tuple(item_decode(x) if x is not None else x for x in v)

        def encode(v):
            return [item_encode(x) if item_encode is not None and isinstance(x, Block) else x for x in v]
        return decode, encode
    if origin is Mapping and args and _codec(args[1]) != (None, None):
        value_decode, value_encode = _codec(args[1])

        def decode_mapping(v):
            if not isinstance(v, Mapping):
                raise _Misfit(type(v).__name__)
            return {k: value_decode(x) if x is not None else x for k, x in v.items()}

        def encode_mapping(v):
            return {k: value_encode(x) if x is not None else x for k, x in v.items()}
        return decode_mapping, encode_mapping
    return None, None


def _frozen(cls):
    return dataclass(frozen=True, kw_only=True)(cls)


def absent(cls):
    """The default of a block field: the empty, falsy block a report without it reads as."""
    return field(default_factory=lambda: cls(null=True))


# ---- shared parts --------------------------------------------------------------------------------------------------
@_frozen
class Advice(Block):
    """Whose a failure is and what to do (analysis/advice.py advise)."""
    owner: str | None = None          # whose: the toolchain, xc, the source …
    who: str | None = None            # the toolchain or party by name
    node: str | None = None           # the node the message names
    op: str | None = None             # the op type the message names
    workaround: str | None = None     # what to do, when one is known


@_frozen
class TensorRecord(Block):
    """A graph input / output or a node's tensor."""
    name: str = ""
    shape: tuple[Any, ...] | None = None     # ints, symbolic names or None
    dtype: str | None = None


@_frozen
class NodeRecord(Block):
    """A graph node as xc_core.ir.Node.to_dict writes it."""
    id: str = ""
    op_type: str = ""
    domain: str = ""
    kind: str = ""                     # compute | layout | cast | constant | io | alias
    inputs: tuple[TensorRecord, ...] = ()
    outputs: tuple[TensorRecord, ...] = ()
    attributes: Mapping[str, Json] = field(default_factory=dict)
    backend: str | None = None         # the device class that runs it (cpu, gpu, ane, nnapi …)
    kernel: str | None = None          # the runtime's name for its kernel / provider / primitive
    precision: str | None = None       # fp32, fp16, int8 …
    source_ops: tuple[str, ...] = ()   # ids of the source graph's ops it comes from
    module_path: str | None = None     # dotted nn.Module path
    source_location: str | None = None  # file:line of the user code
    fused_from: tuple[str, ...] = ()   # ids of the compiler's input graph absorbed here
    fallback: bool = False             # left on the CPU on an accelerated target
    fallback_reason: str | None = None
    measured_us: float | None = None   # median time over the profiled runs (None: not timed)
    estimated_us: float | None = None  # a vendor compiler's estimate of its time on the device (Vela's cycles)

    @property
    def time_us(self) -> float | None:
        """Measured where profiled, else the compiler's estimate (the target's node_times.evidence says which)."""
        return self.measured_us if self.measured_us is not None else self.estimated_us


@_frozen
class GraphBlock(Block):
    """A graph (captured or compiled) with how its assignment is known."""
    name: str = ""
    stage: str = ""                    # captured | onnx | optimized | runtime …
    inputs: tuple[TensorRecord, ...] = ()
    outputs: tuple[TensorRecord, ...] = ()
    nodes: tuple[NodeRecord, ...] = ()
    evidence: str | None = None

    def compute_nodes(self) -> tuple[NodeRecord, ...]:
        return tuple(n for n in self.nodes if n.kind == "compute")


# ---- the source, inputs, host and run ------------------------------------------------------------------------------
@_frozen
class InputSpec(Block):
    """One model input as the loader declared it (the other free keys stay in extra)."""
    name: str = ""
    shape: tuple[int, ...] = ()
    dtype: str = ""
    dim_names: tuple[str | None, ...] = ()   # the model's name per axis; "?" for an unnamed symbolic axis
    low: float | None = None           # integer inputs: values are drawn from [low, high)
    high: float | None = None
    note: str | None = None            # how the loader chose this input


@_frozen
class AssociatedFile(Block):
    """A file zipped after a .tflite's flatbuffer or named by its metadata."""
    name: str = ""
    type: str | None = None
    owner: str | None = None
    in_zip: bool | None = None
    bytes: int | None = None
    lines: int | None = None
    first_lines: tuple[str, ...] = ()


@_frozen
class SourceMetadata(Block):
    """What the model file says about itself beyond the graph (.tflite metadata, Core ML spec facts)."""
    evidence: str | None = None
    associated_files: tuple[AssociatedFile, ...] = ()
    appended_zip: Mapping[str, Json] = field(default_factory=dict)   # files, or the error reading them


@_frozen
class SourceBlock(Block):
    """The model analysed."""
    kind: str = ""                     # sample, onnx, tflite … (sources/)
    name: str = ""
    sha256: str = ""
    inputs: tuple[InputSpec, ...] = ()
    notes: tuple[str, ...] = ()
    constant_inputs: Mapping[str, Json] = field(default_factory=dict)  # non-tensor inputs baked into the program
    metadata: SourceMetadata = absent(SourceMetadata)


@_frozen
class InputsBlock(Block):
    """How the analysis inputs were made (seed, distribution … in extra)."""
    origin: str = ""                   # seeded-random | npz
    # how each input's shape and values were found: inputs (name -> shape_from, values_from …), probes tried
    resolution: Mapping[str, Json] = field(default_factory=dict)


@_frozen
class HostBlock(Block):
    """The machine the report was made on."""
    platform: str = ""
    machine: str | None = None
    python: str = ""
    versions: Mapping[str, str | None] = field(default_factory=dict)   # installed distributions' versions


@_frozen
class RunBlock(Block):
    """How the run was made (isolated, jobs, limits, confinement … in extra)."""
    cell_keys: Mapping[str, str] = field(default_factory=dict)   # target identity -> its cell's key (run_keys.py)
    key: str | None = None             # the run's key in the run store (None: a report never stored)


@_frozen
class StageGraphsFile(Block):
    """The file of step graphs beside report.json."""
    file: str = ""                     # stages.json.gz; stages.json in runs written before it was compressed
    count: int | None = None

    @property
    def compressed(self) -> bool:
        # analysis/stage_trace.read_stage_graphs reads either file by its first bytes; the name only says which.
        return self.file.endswith(".gz")


# ---- capture and the ONNX route ------------------------------------------------------------------------------------
@_frozen
class ConversionDrift(Block):
    """One output of the ONNX → PyTorch program against ONNX Runtime."""
    shape_match: bool | None = None
    dtype_match: bool | None = None
    error: str | None = None


@_frozen
class RouteBlock(Block):
    """An ONNX source's ONNX → PyTorch route: the program the PyTorch-side targets compile."""
    route: Json = None                 # what was done to the graph, step by step
    preprocessing: Json = None
    conversion_drift: Mapping[str, ConversionDrift] = field(default_factory=dict)
    first_departure: Mapping[str, Json] | None = None    # the first ONNX node whose value departs from ORT's
    float_model: Json = None
    program_inputs: tuple[str, ...] = ()
    program_nodes: int | None = None
    program_outputs_path: str | None = None
    seconds: float | None = None
    error: str | None = None           # the line that stopped the route
    skipped: Mapping[str, Json] = field(default_factory=dict)   # nodes, limit, why: a model above the size limit
    targets: tuple[str, ...] = ()      # the targets that compiled the route's program
    departure: Mapping[str, Json] | None = None   # output, why: where it departs by its own test (None: it does not)
    evidence: str | None = None


@_frozen
class WeightRecord(Block):
    """One weight tensor of the captured model (a parameter, buffer or lifted constant; an ONNX initializer): what
    the model diff compares (its hash says whether it changed, its norm bounds how much without the values)."""
    name: str = ""                     # the model's own name: the state_dict key, the ONNX initializer's name
    graph_name: str = ""               # the name the captured graph's node inputs use (a .pt2 placeholder p_fc_weight)
    module_path: str | None = None     # the module that owns it (its first consumer's, else read off the name)
    shape: tuple[int, ...] = ()
    dtype: str = ""
    numel: int = 0
    sha256: str = ""                   # of its values as contiguous little-endian bytes in its dtype
    l2: float | None = None            # its L2 norm in float64 (None: not numeric)


@_frozen
class CaptureBlock(Block):
    """The captured source graph, before any target's compiler."""
    before_stage: str = ""
    op_count_before: int = 0
    op_types_before: Mapping[str, int] = field(default_factory=dict)
    onnx_node_count: int | None = None
    onnx_error: str | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    graph: GraphBlock = absent(GraphBlock)
    notes: tuple[str, ...] = ()
    evidence: str | None = None
    onnx_route: RouteBlock = absent(RouteBlock)
    weights: tuple[WeightRecord, ...] = ()   # the captured model's weight tensors (runs before issue 56: none)


# ---- the reference -------------------------------------------------------------------------------------------------
@_frozen
class ReferenceOutput(Block):
    """One reference output."""
    shape: tuple[int, ...] = ()
    dtype: str = ""
    not_informative: str | None = None   # why it cannot tell targets apart (constant, all zeros, not finite)


@_frozen
class RanWith(Block):
    """A .tflite reference that needed a delegate for a custom op."""
    delegate: str = ""
    why: str = ""
    same_runtime_as: tuple[str, ...] = ()   # targets whose drift it cannot judge
    text: str | None = None


@_frozen
class ReferenceBlock(Block):
    """What every target is compared with."""
    id: str = ""                       # torch | onnx-reference | tflite-reference
    status: str = ""                   # ok | error | unavailable
    error: str | None = None
    error_detail: str | None = None
    advice: Advice = absent(Advice)
    outputs: Mapping[str, ReferenceOutput] = field(default_factory=dict)
    evidence: str | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    ran_with: RanWith = absent(RanWith)


# ---- a target's parts ----------------------------------------------------------------------------------------------
@_frozen
class OpCounts(Block):
    """Op types before and after the target's compiler."""
    before: Mapping[str, int] = field(default_factory=dict)
    after: Mapping[str, int] = field(default_factory=dict)
    other_after: Mapping[str, int] = field(default_factory=dict)   # layout moves, casts … of the compiled graph
    evidence: str | None = None


@_frozen
class FusionGroup(Block):
    """A compiled node that absorbed several ops."""
    node: str = ""
    op_type: str = ""
    pattern: str = ""
    absorbed: tuple[Mapping[str, Json], ...] = ()   # the nodes taken in: id, op_type, module_path
    source_ops: tuple[str, ...] = ()
    module_path: str | None = None     # the source module the absorbed ops share (None: none, or several)


@_frozen
class FusionOpportunity(Block):
    """A place where a catalogued fusion could fire, and what happened."""
    fusion: str = ""
    nodes: tuple[str, ...] = ()
    op_types: tuple[str, ...] = ()     # the op type of each node, in order (the checklist names the chain)
    outcome: str = ""                  # fired | superseded | blocked | missed
    reason: str | None = None
    module_path: str | None = None     # the module of its first node


@_frozen
class FusionCatalogue(Block):
    """The compiler's documented fusions checked against its graph (analysis/fusion_catalogue.py)."""
    catalogue: Json = None
    compiler: str | None = None
    opportunities: tuple[FusionOpportunity, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    entries: Json = None


@_frozen
class Fusions(Block):
    """The target's fusions."""
    groups: tuple[FusionGroup, ...] = ()
    patterns: Mapping[str, int] = field(default_factory=dict)
    count: int = 0
    evidence: str | None = None
    catalogue: FusionCatalogue = absent(FusionCatalogue)


@_frozen
class PrecisionMix(Block):
    """Compute ops per precision."""
    mix: Mapping[str, Json] = field(default_factory=dict)
    evidence: str | None = None


@_frozen
class DriftOutput(Block):
    """One output against the reference: its figures, or the error that stopped them."""
    error: str | None = None
    shape: tuple[int, ...] = ()
    dtype: str | None = None
    max_abs: float | None = None
    mean_abs: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    snr_db: float | None = None
    min_atol: float | None = None
    min_rtol: float | None = None
    exact: bool | None = None
    rtol_needs_atol: bool | None = None
    finite: bool | None = None         # the target's output has no NaN or ±inf
    details: Mapping[str, Json] | None = None   # tolerance curve, histogram, scatter sample (drift page)
    not_informative: str | None = None  # why the output compared with cannot tell a right target from a wrong one
    implausible: str | None = None     # the check a figure beyond any plausible range failed


@_frozen
class Drift(Block):
    """A target's outputs against what they are compared with."""
    reference: str | None = None       # the reference's id, or "onnx-route program"
    outputs: Mapping[str, DriftOutput] = field(default_factory=dict)
    informative: bool | None = None    # every compared output can tell targets apart
    not_informative: Mapping[str, str] = field(default_factory=dict)   # output -> why not
    implausible: Mapping[str, str] = field(default_factory=dict)       # output -> the check it failed
    worst: Mapping[str, Json] | None = None   # the worst output's figures
    evidence: str | None = None
    assumption: str | None = None      # what the numbers stand for
    failed: str | None = None          # why xc could not emulate the numbers
    not_compared: Mapping[str, Json] = field(default_factory=dict)    # outputs left out, and why


@_frozen
class LayerPoint(Block):
    """Drift at one module boundary."""
    source_op: str = ""
    module_path: str | None = None
    op_type: str | None = None
    depth: int = 0
    rel_l2: float | None = None
    max_abs: float | None = None
    cosine: float | None = None
    snr_db: float | None = None
    verified: bool = True              # passed shape, dtype and consistency verification
    check: str | None = None           # the check it failed: shape | dtype | consistency
    unverified_reason: str | None = None


@_frozen
class Jump(Block):
    """A rise in per-layer drift and the compiler decisions there."""
    module_path: str | None = None
    source_op: str = ""
    depth: int = 0
    share: float = 0.0                 # of the attributed drift
    rel_l2: float | None = None        # the per-layer drift where the jump ends (its mark on the figure)
    kind: str = ""                     # precision | backend-boundary | fusion | fallback | none recorded
    nodes: tuple[str, ...] = ()
    decisions: tuple[Mapping[str, Json], ...] = ()   # kind, nodes, detail
    sentence: str = ""


@_frozen
class Attribution(Block):
    """Decision → drift attribution (analysis/drift_attribution.py)."""
    method: str = ""
    evidence: str | None = None
    summary: str = ""
    basis: str | None = None           # output drift | peak per-layer drift
    peak_rel_l2: float | None = None
    attributed_share: float | None = None
    jumps: tuple[Jump, ...] = ()
    recoveries: tuple[Mapping[str, Json], ...] = ()   # module_path, rel_l2_before, rel_l2
    left_out: tuple[Mapping[str, Json], ...] = ()     # points not attributed: module_path, check, reason


@_frozen
class LayerDrift(Block):
    """Drift along depth (analysis/layer_drift.py)."""
    points: tuple[LayerPoint, ...] = ()
    threshold_rel_l2: float | None = None
    first_divergence: Mapping[str, Json] | None = None
    covered: Json = None
    unverified: int = 0                # compared points left out as unverified
    boundaries: Json = None
    verification: Mapping[str, Json] = field(default_factory=dict)   # method, consistency_factor
    method: str | None = None          # how the target's per-layer values were obtained
    reference_method: str | None = None
    evidence: str | None = None
    attribution: Attribution = absent(Attribution)


@_frozen
class IsolatedOp(Block):
    """One op compiled by the target on its own, fed the reference's inputs (culprit/isolate.py)."""
    source_op: str = ""
    op_type: str | None = None
    module_path: str | None = None
    depth: int = 0
    local: Mapping[str, Json] = field(default_factory=dict)   # rel_l2, max_abs, mse, cosine, snr_db, psnr_db, pearson, non_finite
    failed_gates: tuple[str, ...] = ()
    above_gate: bool = False
    carried_rel_l2: float | None = None   # the op's drift in the full run (per-layer drift), where compared
    nodes: tuple[str, ...] = ()           # the full run's compiled nodes that compute it
    program_node: str | None = None       # an ONNX source: the route program's node (source_op is its ONNX node)


@_frozen
class CulpritTrial(Block):
    """One range of ops compiled by the target while the reference computes the rest (culprit/search.py)."""
    first: int = 0
    last: int = 0
    ops: int = 0
    rel_l2: float | None = None
    non_finite: bool = False
    error: str | None = None
    seconds: float | None = None
    reproduces: bool | None = None        # it reproduces the baseline's drift (the search's own verdict)


@_frozen
class Repro(Block):
    """The files a toolchain's maintainers can run without xc (culprit/repro.py)."""
    folder: str = ""                      # relative to the run folder
    files: tuple[str, ...] = ()
    script: str | None = None             # the standalone script, when there is one for this target
    no_script: str | None = None          # why there is none
    tracker: str | None = None            # where the toolchain takes bug reports


@_frozen
class Culprit(Block):
    """The smallest range of ops that reproduces the target's output drift (culprit/search.py)."""
    status: str = ""                      # found | not-needed | not-found
    why: str | None = None
    share_required: float | None = None
    baseline: CulpritTrial = absent(CulpritTrial)   # every op on the target: its drift as the search measures it
    first: int | None = None
    last: int | None = None
    ops: tuple[str, ...] = ()
    program_ops: tuple[str, ...] = ()     # an ONNX source: the route program's nodes (ops are their ONNX nodes)
    op_types: tuple[str, ...] = ()
    module_paths: tuple[str, ...] = ()
    explained: float | None = None
    runs: int = 0
    trials: tuple[CulpritTrial, ...] = ()
    seconds: float | None = None
    sentence: str | None = None
    local: Mapping[str, Json] | None = None   # the culprit ops' worst local figures (isolation)
    repro: Repro = absent(Repro)


@_frozen
class Isolation(Block):
    """Per-op isolation and culprit search of one target (opt-in: --isolate, the Drift page's button)."""
    evidence: str | None = None
    method: str = ""
    gates: Mapping[str, float] = field(default_factory=dict)   # metric -> bound (culprit/metrics.GATE_SENSE)
    gates_text: str = ""
    ops: tuple[IsolatedOp, ...] = ()
    isolated: int = 0
    above_gate: tuple[str, ...] = ()
    not_isolated: tuple[Mapping[str, Json], ...] = ()   # source_op, why
    error: str | None = None
    seconds: float | None = None
    culprit: Culprit = absent(Culprit)


@_frozen
class NodeTimes(Block):
    """The time per compiled node: how, on which CPU, over how many runs (analysis/node_time.py)."""
    evidence: str | None = None
    method: str = ""
    host_cpu: str = ""
    runs: int = 0
    statistic: str | None = None
    nodes_timed: int | None = None
    compute_nodes: int = 0
    compute_nodes_timed: int = 0
    total_us: float = 0.0
    unattributed_us: float | None = None
    run_us: float | None = None
    timed_us: float | None = None
    samples_us: Mapping[str, Json] = field(default_factory=dict)   # nodes, run, total: the samples behind medians
    cpu_wait_share: float | None = None   # share of runnable time spent waiting for a CPU (None: not said)
    spread: Mapping[str, Json] = field(default_factory=dict)       # run_us, total_us: median, quartiles, min, max, n
    by_backend: Mapping[str, Json] = field(default_factory=dict)
    by_op_type: Mapping[str, Json] = field(default_factory=dict)
    top: tuple[Json, ...] = ()


@_frozen
class RuntimeCount(Block):
    """A runtime's own count of the ops it accelerates, beside xc's placement."""
    by: str = ""
    on_accelerator: int = 0
    total: int = 0
    counted: str = ""                  # what was counted, in the runtime's terms
    evidence: str | None = None
    gap: str | None = None             # why xc's placement differs, or "not explained"
    words: str | None = None           # the runtime's own line


@_frozen
class Partitioning(Block):
    """An accelerated target's partitions (ep, suitability, delegates … in extra)."""
    num_partitions: int = 0
    outside_partition_ops: tuple[str, ...] = ()   # supported op types left outside the partition it takes
    runtime_count: RuntimeCount = absent(RuntimeCount)
    evidence: str | None = None


@_frozen
class PartitioningAsShipped(Block):
    """The partitioning for the model with its dynamic dims."""
    boundaries: Json = None


@_frozen
class Boundaries(Block):
    """Accelerator ↔ CPU boundaries and the latency-cliff estimate."""
    count: int = 0
    items: tuple[Mapping[str, Json], ...] = ()
    total_bytes: int | None = None
    symbolic_count: int | None = None
    latency_cliff: Mapping[str, Json] | None = None
    evidence: str | None = None


@_frozen
class ComputeUnits(Block):
    """Core ML: share and count of ops per compute unit."""
    share: Mapping[str, float] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)
    evidence: str | None = None
    unknown_ops: tuple[str, ...] = ()  # op types no rule places


@_frozen
class NumericsFailed(Block):
    """xc could not emulate the target's numbers (xc's failure, not the model's)."""
    why: str = ""


@_frozen
class WorkerFacts(Block):
    """The isolated worker that ran the target."""
    seconds: float | None = None
    peak_rss_mib: float | None = None
    evidence: str | None = None


@_frozen
class TargetInfo(Block):
    """A target's `info`: the typed facts below, and its toolchain's free facts (versions, options …) in extra.

    A field whose metadata names a `result_field` is that TargetResult attribute under this key: pipeline/assemble.py
    writes each after the free facts, in this order, where the result has it (not None, a list not empty). A new
    typed fact of a target's result is declared here, once."""
    partitioning: Partitioning = field(default_factory=lambda: Partitioning(null=True),
                                       metadata={"result_field": "partitioning"})
    partitioning_as_shipped: PartitioningAsShipped = field(default_factory=lambda: PartitioningAsShipped(null=True),
                                                           metadata={"result_field": "partitioning_as_shipped"})
    boundaries: Boundaries = field(default_factory=lambda: Boundaries(null=True),
                                   metadata={"result_field": "boundaries"})
    compute_units_predicted: ComputeUnits = field(default_factory=lambda: ComputeUnits(null=True),
                                                  metadata={"result_field": "compute_units"})
    # what the output numbers stand for
    numerics_assumption: str | None = field(default=None, metadata={"result_field": "numerics_assumption"})
    numerics_failed: NumericsFailed = field(default_factory=lambda: NumericsFailed(null=True),
                                            metadata={"result_field": "numerics_failed"})
    # compiled only: this host cannot run it
    numerics_not_run: Json = field(default=None, metadata={"result_field": "numerics_not_run"})
    # how per-layer values were obtained
    intermediates_method: str | None = field(default=None, metadata={"result_field": "intermediates_method"})
    # what xc's checks of the read-back graph found wrong
    read_back_check: tuple[str, ...] = field(default=(), metadata={"result_field": "contract"})
    worker: WorkerFacts = absent(WorkerFacts)   # put among the free facts by the step that ran the target

    @classmethod
    def result_fields(cls) -> dict[str, str]:
        """info key -> the TargetResult attribute it is filled from, in the order the keys are written."""
        return {f.name: f.metadata["result_field"] for f in dataclasses.fields(cls) if "result_field" in f.metadata}


@_frozen
class RuntimeMemory(Block):
    """A runtime's own figure for its memory (ExecuTorch's memory plan, Vela's SRAM/flash, LiteRT's arena …)."""
    name: str = ""                     # what the runtime calls it
    bytes: int | None = None
    what: str = ""                     # what the figure covers, in words
    by: str = ""                       # the runtime or compiler that reported it
    evidence: str | None = None        # measured | estimated-compiler …


@_frozen
class Cost(Block):
    """What running the target costs on this host (analysis/cost.py): memory, size on disk, compile, load and
    inference time. Linux CPU figures of the machine xc ran on, not the device's; `host` says which."""
    evidence: str | None = None        # measured (this host) — never the phone's
    host: str = ""                     # the CPU and OS the figures come from
    compile_s: float | None = None     # the compile phase, seconds
    load_s: float | None = None        # from the compiled artifact to a runtime ready to run, where separable
    first_inference_s: float | None = None   # the first run (includes lazy initialisation where the runtime has it)
    steady_inference_ms: float | None = None  # median of the later runs
    steady_runs: int = 0
    steady_spread_ms: Mapping[str, Json] = field(default_factory=dict)   # median, quartiles, min, max, n
    peak_rss_mb: float | None = None   # peak resident memory of the run phase (this process)
    run_rss_growth_mb: float | None = None    # peak during the run phase minus resident memory before it
    compile_peak_rss_mb: float | None = None
    memory_method: str = ""            # how the peaks were measured, and what they leave out
    artifact_bytes: int | None = None  # the compiled artifact(s) on disk
    artifact_files: tuple[Json, ...] = ()     # {path, bytes} per file counted
    weights_bytes: int | None = None   # the weights' part of artifact_bytes, where readable
    runtime_memory: tuple[RuntimeMemory, ...] = ()
    not_measured: Mapping[str, str] = field(default_factory=dict)   # figure -> why this host has none
    notes: tuple[str, ...] = ()


@_frozen
class ShareFigure(Block):
    """One way of weighing the accelerated share: by op count, by compute or by measured time."""
    accelerated: float = 0.0
    total: float = 0.0
    share: float | None = None         # accelerated / total (None: total is 0)
    unit: str = ""                     # ops | MACs | µs
    evidence: str | None = None
    covered: float | None = None       # share of nodes the weight is known for (FLOPs from shapes, times measured)


@_frozen
class ComputeShare(Block):
    """The accelerated share by op count, by compute (MACs from shapes) and by measured time
    (analysis/compute_share.py), and the ops that cost the most off the accelerator."""
    by_ops: ShareFigure = absent(ShareFigure)
    by_macs: ShareFigure = absent(ShareFigure)
    by_time: ShareFigure = absent(ShareFigure)
    heaviest_fallbacks: tuple[Json, ...] = ()   # {source_op, op_type, module_path, macs, macs_share, time_us …}
    method: str = ""


@_frozen
class AccuracyChange(Block):
    """One dataset sample the target answers differently from the reference (or one of its worst samples)."""
    sample: int = 0                    # index in the dataset
    name: str = ""                     # the sample's file name (data, never code)
    label: Json = None                 # its label, when the dataset has labels
    reference: Json = None             # the reference's class (classification)
    target: Json = None                # the target's class
    metric: float | None = None        # the per-sample metric against the reference


@_frozen
class Accuracy(Block):
    """Task accuracy on the user's dataset (analysis/accuracy.py): agreement with the reference and, with labels,
    accuracy against them."""
    evidence: str | None = None        # the evidence of the target's numerics (measured / emulated)
    task: str = ""                     # classification | per-sample
    output: str = ""                   # the output judged
    samples: int = 0                   # in the dataset
    samples_run: int = 0               # the target ran (all of them unless a limit stopped it: `stopped` says why)
    stopped: str | None = None
    k: int = 0
    top1_agreement: float | None = None
    topk_agreement: float | None = None
    accuracy: float | None = None      # top-1 against the labels
    reference_accuracy: float | None = None
    changed_count: int = 0             # samples whose class differs from the reference's
    changed: tuple[AccuracyChange, ...] = ()
    worst: tuple[AccuracyChange, ...] = ()
    metric: str = ""                   # the per-sample metric: cosine | rel_l2 | iou | token_match
    metric_mean: float | None = None
    metric_worst: float | None = None
    confusion: Mapping[str, Json] = field(default_factory=dict)   # classes, matrix[reference][target]
    error: str | None = None


@_frozen
class DatasetBlock(Block):
    """The dataset the targets were run on for task accuracy (inputs/dataset.py)."""
    name: str = ""
    origin: str = ""                   # upload | sample
    samples: int = 0
    inputs: tuple[str, ...] = ()       # the model inputs fed per sample
    kind: str = ""                     # arrays | images | audio
    preprocessing: str = ""            # named preprocessing applied (images, audio)
    labels: str | None = None          # where the labels came from (a file name), None: none
    classes: tuple[Json, ...] = ()     # class names, when given
    sample_names: tuple[str, ...] = ()
    task: str = ""
    metric: str = ""
    notes: tuple[str, ...] = ()


@_frozen
class StageStep(Block):
    """One step of a toolchain's lowering."""
    stage: str = ""                    # import | graph-optimisation | fusion | backend-selection …
    name: str = ""
    op_count: int | None = None
    counts: Mapping[str, int] = field(default_factory=dict)   # casts, reorders, fused_nodes
    note: str = ""
    graph: str | None = None           # the step graph's key in the stage-graphs file, or "final"
    ends_stage: str | None = None


@_frozen
class TargetStages(Block):
    """A target's steps (analysis/stage_trace.py stage_block)."""
    steps: tuple[StageStep, ...] = ()
    evidence: Mapping[str, str] = field(default_factory=dict)   # steps, assignment


@_frozen
class OutputSummary(Block):
    """A target output's shape and value range."""
    shape: tuple[int, ...] = ()
    dtype: str = ""
    finite: bool | None = None
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None


@_frozen
class OutputValues(Block):
    """A target's outputs, summarised."""
    evidence: str | None = None
    values: Mapping[str, OutputSummary] = field(default_factory=dict)


@_frozen
class TargetBlock(Block):
    """What one target's compiler did with the model."""
    id: str = ""                       # the registered target id
    identity: str = ""                 # the id with its options: ort-cpu[level=basic]
    label: str = ""
    description: str = ""
    status: str = ""                   # ok | error | unavailable
    accelerated: bool = False          # whether an op can leave the CPU on this target
    accelerator: str | None = None     # what it can go to instead; None on CPU-only targets
    declared_precisions: tuple[str, ...] = ()   # precisions other than fp32 its configuration asks for
    error: str | None = None
    error_detail: str | None = None
    error_stage: str | None = None
    traceback: str | None = None
    advice: Advice = absent(Advice)   # for a failed target
    evidence: Mapping[str, str] = field(default_factory=dict)   # figure kind -> evidence kind
    op_count_before: int | None = None
    op_count_after: int | None = None
    op_counts: OpCounts = absent(OpCounts)
    fusions: Fusions = absent(Fusions)
    precision: PrecisionMix = absent(PrecisionMix)
    graph: GraphBlock = absent(GraphBlock)   # the compiled graph
    drift: Drift = absent(Drift)
    info: TargetInfo = absent(TargetInfo)
    notes: tuple[str, ...] = ()
    node_times: NodeTimes = absent(NodeTimes)
    timings: Mapping[str, float] = field(default_factory=dict)
    artifacts: tuple[Json, ...] = ()
    stages: TargetStages = absent(TargetStages)
    layout: Mapping[str, Json] = field(default_factory=dict)   # the layout audit (analysis/layout_audit.py)
    outputs: OutputValues = absent(OutputValues)
    layer_drift: LayerDrift = absent(LayerDrift)
    isolation: Isolation = absent(Isolation)   # opt-in: per-op isolation and culprit search
    cost: Cost = absent(Cost)           # memory, size, compile / load / inference time on this host
    compute_share: ComputeShare = absent(ComputeShare)   # accelerated share by ops, compute and time
    accuracy: Accuracy = absent(Accuracy)   # task accuracy on the run's dataset (--data)


# ---- report-wide parts ---------------------------------------------------------------------------------------------
@_frozen
class CheckItem(Block):
    """One checklist question's answer for a target."""
    id: int = 0
    question: str = ""
    page: str = ""                     # the dashboard page that shows why
    verdict: str = ""                  # pass | warn | fail | not applicable
    evidence: str | None = None
    detail: str = ""


@_frozen
class Checklist(Block):
    """The five questions for every target."""
    targets: Mapping[str, tuple[CheckItem, ...]] = field(default_factory=dict)
    thresholds: Mapping[str, float] = field(default_factory=dict)


@_frozen
class CommonCause(Block):
    """Failures of several targets with one cause, said once (analysis/common_cause.py)."""
    cause: str = ""
    owner: str = ""                    # source | xc input handling | xc's ONNX route
    fix: str = ""
    targets: tuple[str, ...] = ()
    reference_failed: bool = False
    set_inputs: bool | None = None     # the fix is to set the inputs
    node: str | None = None
    evidence: str | None = None


@_frozen
class Alignment(Block):
    """Source ops against every compiled graph."""
    evidence: str | None = None
    coverage: Mapping[str, Json] = field(default_factory=dict)
    source_ops: Json = None


@_frozen
class FusionMatrix(Block):
    """Fusion patterns across targets (analysis/fusion_diff.py)."""
    patterns: Json = None
    not_fired: tuple[Mapping[str, Json], ...] = ()
    evidence: str | None = None


@_frozen
class Report(Block):
    """One report.json: what each target's compiler did with one model."""
    schema_version: str = ""
    xc_version: str = ""
    created_at: str = ""
    host: HostBlock = absent(HostBlock)
    source: SourceBlock = absent(SourceBlock)
    inputs: InputsBlock = absent(InputsBlock)
    capture: CaptureBlock = absent(CaptureBlock)
    reference: ReferenceBlock = absent(ReferenceBlock)
    targets: Mapping[str, TargetBlock] = field(default_factory=dict)   # by identity
    alignment: Alignment = absent(Alignment)
    fusion_matrix: FusionMatrix = absent(FusionMatrix)
    divergence: Mapping[str, Json] = field(default_factory=dict)   # the first divergence across stages
    checklist: Checklist = absent(Checklist)
    common_causes: tuple[CommonCause, ...] = ()
    run: RunBlock = absent(RunBlock)
    artifacts_dir: str | None = None   # relative to the folder of report.json
    exports: Mapping[str, Json] = field(default_factory=dict)   # files written beside the artifacts
    stage_graphs: StageGraphsFile = absent(StageGraphsFile)
    dataset: DatasetBlock = absent(DatasetBlock)   # the samples task accuracy ran on (--data)

    @classmethod
    def from_dict(cls, d: Mapping[str, Json] | None, *,
                  accelerator_for: Callable[[str], str | None] | None = None,
                  common_causes_of: Callable[[dict], list] | None = None) -> Report:
        """The Report of a report dict of any xc version, upgraded to today's fields (see `upgrade`). The two
        callables are the upgrades this floor cannot compute: the registered target's accelerator for an id
        (targets/), the common causes of a report (analysis/common_cause.py); without them those fields stay as
        the report had them."""
        if d is None:
            return cls(null=True)
        return super().from_dict(upgrade(d, accelerator_for=accelerator_for, common_causes_of=common_causes_of))

    def covered_targets(self) -> set[str]:
        """The targets a common cause covers: said once, at the top, never blamed one by one."""
        return {tid for cause in self.common_causes for tid in cause.targets}

    @classmethod
    def of(cls, report: Report | Mapping[str, Json]) -> Report:
        """`report` as a Report, for a reader that takes either."""
        return report if isinstance(report, Report) else cls.from_dict(report)


# ---- upgrading older reports ---------------------------------------------------------------------------------------
def upgrade(d: Mapping[str, Json], *, accelerator_for: Callable[[str], str | None] | None = None,
            common_causes_of: Callable[[dict], list] | None = None) -> dict:
    """A report dict of any xc version with today's fields, each made the way the reader that used to make it on
    every read did (cited per rule). A report of today's xc comes back equal. `d` is not changed: what a rule
    rewrites is copied first.

    Not rules, on purpose:
    - stage_graphs.file names stages.json in runs written before the file was compressed, and is kept so (it names
      the file on disk; analysis/stage_trace.read_stage_graphs reads either by its first bytes);
    - a non-finite target output without `implausible` (analysis/drift.output_flags reads it as implausible) is
      also written today, beside a non-finite reference: a reading of the figures, not an older report's gap."""
    report = dict(d)
    targets = report.get("targets")
    if isinstance(targets, Mapping):
        report["targets"] = {tid: _upgraded_target(t, tid, accelerator_for) if isinstance(t, Mapping) else t
                             for tid, t in targets.items()}
    # common_causes: absent in reports written before it; computed on read (analysis/common_cause.causes).
    if "common_causes" not in report and common_causes_of is not None:
        report["common_causes"] = common_causes_of(report)
    return report


def _upgraded_target(t: Mapping[str, Json], tid: str, accelerator_for) -> Mapping[str, Json]:
    changed: dict[str, Json] = {}
    # accelerated / accelerator: absent before issue 28's step; its accelerated targets always recorded accelerator ↔
    # CPU boundaries, and one that did not compile has what the registered target of that id has
    # (views/target_counts.accelerator_of).
    if "accelerated" not in t:
        info = t.get("info") if isinstance(t.get("info"), Mapping) else {}
        if info.get("boundaries"):
            changed["accelerated"], changed["accelerator"] = True, t.get("accelerator") or "an accelerator"
        elif accelerator_for is not None:
            accelerator = accelerator_for(t.get("identity") or tid or t.get("id") or "")
            changed["accelerated"], changed["accelerator"] = accelerator is not None, accelerator
    # declared_precisions: absent before the same step (tests/test_report_identity.py NEW_TARGET_FIELDS): none.
    if "declared_precisions" not in t:
        changed["declared_precisions"] = []
    layer = t.get("layer_drift")
    if isinstance(layer, Mapping) and isinstance(layer.get("points"), list) and any(
            isinstance(p, Mapping) and "verified" not in p for p in layer["points"]):
        # verified: absent before issue 50; a point of a report written before xc verified points counts as
        # verified (analysis/layer_drift.verified_points).
        changed["layer_drift"] = {**layer, "points": [{**p, "verified": True}
                                                      if isinstance(p, Mapping) and "verified" not in p else p
                                                      for p in layer["points"]]}
    return {**t, **changed} if changed else t

