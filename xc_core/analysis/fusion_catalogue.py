"""Did the fusions *this compiler implements* fire? Each compiler has a catalogue of the fusions it is documented
(or coded) to apply; every place in the graph the compiler was given where an entry's pattern matches is an
opportunity, and each opportunity ends one of four ways:

    fired       one compiled node carries every op of the pattern
    superseded  another fusion took one of its ops (MatMul+Add became a Gemm before BiasGelu could see the Add)
    blocked     the pattern matched but the graph forbids the rewrite: an intermediate tensor also feeds another
                op or is a model output (every catalogued fusion requires a single consumer)
    missed      nothing in the graph forbids it, and the compiler still did not fuse it

Blocked and missed opportunities are what question 3 of the checklist warns about. Patterns another target fused
are *not* opportunities here: compilers fuse differently by design, so a cross-target difference is information.

Only patterns over whole ops are catalogued (Conv→BatchNormalization, Conv→Relu, MatMul→Add, …). Fusions that
recognise a decomposed subgraph (ORT's GeluFusion and LayerNormFusion over Div/Erf/Mul chains, coremltools'
fuse_gelu_* and fuse_layernorm_or_instancenorm) are left out: matching them here would mean re-implementing the
compiler's matcher, and a half-right matcher would warn wrongly. An uncatalogued fusion never warns.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import CAST, COMPUTE, CONSTANT, IO, Graph

FIRED, SUPERSEDED, BLOCKED, MISSED = "fired", "superseded", "blocked", "missed"


@dataclass(frozen=True)
class Step:
    ops: frozenset
    optional: bool = False
    constant_operand: bool = False   # the op's other input must be a constant (a bias / scale), not a tensor
    residual: bool = False           # the op's other input must be computed (a skip connection), not a constant


@dataclass(frozen=True)
class Fusion:
    name: str          # the compiler's own name for the rewrite
    steps: tuple       # producer → consumer chain of Steps, each the only consumer of the one before
    source: str        # where the entry comes from
    when: str = ""     # a condition xc checks besides the chain (see _condition)


def _s(*ops, **kw) -> Step:
    return Step(frozenset(ops), **kw)


_ORT_FUSERS = "onnxruntime/core/optimizer/graph_transformer_utils.cc"
_ORT_DOCS = "onnxruntime.ai/docs/performance/model-optimizations/graph-optimizations.html"

# ONNX Runtime, Level 1 ("basic"): rewrite rules and transformers that run before graph partitioning, so on every
# execution provider. Source: GenerateRewriteRules / GenerateTransformers(Level1) in graph_transformer_utils.cc, and
# the "Basic Graph Optimizations" list of the ORT docs. Each rewrite requires the producer's output to have exactly
# one consumer and not be a graph output (conv_bn_fusion.cc, conv_add_fusion.cc, conv_mul_fusion.cc SatisfyCondition).
ORT_BASIC = (
    Fusion("ConvBNFusion", (_s("Conv"), _s("BatchNormalization")),
           f"{_ORT_FUSERS} Level1 rules; optimizer/conv_bn_fusion.cc; {_ORT_DOCS} (Conv BatchNorm Fusion)"),
    Fusion("ConvMulFusion", (_s("Conv"), _s("Mul", constant_operand=True)),
           f"{_ORT_FUSERS} Level1 rules; optimizer/conv_mul_fusion.cc; {_ORT_DOCS} (Conv Mul Fusion)"),
    Fusion("ConvAddFusion", (_s("Conv"), _s("Add", constant_operand=True)),
           f"{_ORT_FUSERS} Level1 rules; optimizer/conv_add_fusion.cc; {_ORT_DOCS} (Conv Add Fusion)"),
    # matmul_add_fusion.cc: a rank-3+ input is reshaped to 2D only when its shape is concrete, and the output
    # projection after attention (Softmax → MatMul → Transpose → Reshape → MatMul) is left for AttentionFusion.
    Fusion("MatMulAddFusion", (_s("MatMul", constant_operand=True), _s("Add", constant_operand=True)),
           f"{_ORT_FUSERS} Level1 transformers; optimizer/matmul_add_fusion.cc (MatMul + bias → Gemm)",
           when="matmul_add"),
)

# ONNX Runtime, Level 2 ("extended"): run after partitioning, only on nodes the CPU EP (and a few others) took.
# Source: GenerateTransformers(Level2) in graph_transformer_utils.cc; activations from conv_activation_fusion.cc
# (Relu, Sigmoid, Tanh, LeakyRelu, Clip with constant bounds, HardSigmoid) and gemm_activation_fusion.cc.
_ORT_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid")
ORT_EXTENDED = (
    # Level 1 folds a BatchNormalization / constant Mul / constant Add into the Conv first, so the activation may
    # follow one of them in the graph ORT was given.
    Fusion("ConvActivationFusion",
           (_s("Conv"), _s("BatchNormalization", optional=True), _s(*_ORT_ACTIVATIONS)),
           f"{_ORT_FUSERS} Level2 (ConvActivationFusion, CPU EP); optimizer/conv_activation_fusion.cc; "
           f"{_ORT_DOCS} (Conv Activation Fusion)", when="clip_constant"),
    Fusion("GemmActivationFusion", (_s("Gemm"), _s("Relu", "Sigmoid", "Tanh", "LeakyRelu")),
           f"{_ORT_FUSERS} Level2 (GemmActivationFusion, CPU EP); optimizer/gemm_activation_fusion.cc; "
           f"{_ORT_DOCS} (GEMM Activation Fusion)"),
    Fusion("MatmulTransposeFusion", (_s("Transpose"), _s("MatMul")),
           f"{_ORT_FUSERS} Level2 (MatmulTransposeFusion → FusedMatMul); optimizer/matmul_transpose_fusion.cc",
           when="transpose_last_two"),
    # skip_layer_norm_fusion.cc CheckFirstAdd: both Add operands 3-D of the same shape, and the Add's output read
    # by the LayerNormalization only (a pre-norm block's residual also feeds the next residual: blocked).
    Fusion("SkipLayerNormFusion", (_s("Add", residual=True), _s("LayerNormalization")),
           f"{_ORT_FUSERS} Level2 (SkipLayerNormFusion); optimizer/skip_layer_norm_fusion.cc CheckFirstAdd; "
           f"{_ORT_DOCS} (Skip Layer Normalization Fusion)", when="same_shape_3d"),
)

# OpenVINO CPU plugin. BatchNormalization is folded into the convolution's weights by the common transformations
# (BatchNormDecomposition + ConvolutionMultiplyFusion, src/common/transformations); activations and residual sums
# become post-ops in the CPU plugin's graph optimizer (src/plugins/intel_cpu/src/graph_optimizer.cpp:
# FuseConvolutionAndSimpleOperation, FuseConvolutionSumAndConvolutionSumActivation, FuseFCAndSimpleOperation), for
# the eltwise algorithms Node::canFuseSimpleOperation accepts (Relu, Gelu, Elu, Sigmoid, Clamp, Tanh, Swish,
# HSwish, Mish, HSigmoid, Round, Abs, Sqrt, SoftRelu). ONNX HardSigmoid arrives as opset1 HardSigmoid, not as
# HSigmoid, so it is not listed.
_OV_CPU = "openvino src/plugins/intel_cpu/src/graph_optimizer.cpp"
_OV_ACTIVATIONS = ("Relu", "Gelu", "Elu", "Sigmoid", "Clip", "Tanh", "HardSwish", "Mish", "Round", "Abs", "Sqrt",
                   "Softplus")
OPENVINO_CPU = (
    Fusion("BatchNormDecomposition+ConvolutionMultiplyFusion", (_s("Conv"), _s("BatchNormalization")),
           "openvino src/common/transformations (batch_norm_decomposition, conv_mul_fusion)"),
    Fusion("FuseConvolutionAndSimpleOperation",
           (_s("Conv"), _s("BatchNormalization", optional=True), _s(*_OV_ACTIVATIONS)),
           f"{_OV_CPU} FuseConvolutionAndSimpleOperation; nodes/node.cpp canFuseSimpleOperation"),
    Fusion("FuseConvolutionSumAndConvolutionSumActivation",
           (_s("Conv"), _s("BatchNormalization", optional=True), _s("Add", residual=True)),
           f"{_OV_CPU} FuseConvolutionSumAndConvolutionSumActivation", when="same_shape"),
    Fusion("FuseFCAndSimpleOperation (bias)", (_s("MatMul", constant_operand=True), _s("Add", constant_operand=True)),
           f"{_OV_CPU} FuseFCBiasFusion / FuseFCAndSimpleOperation (MatMul with constant weights → FullyConnected)"),
)

# coremltools' default MIL pipeline (common:: passes, coremltools/converters/mil/mil/passes/defs/). Each pass
# requires the first op's output to have a single child op (`_check_child_op_type` / `len(child_ops) == 1`).
_CT = "coremltools converters/mil/mil/passes/defs"
COREMLTOOLS = (
    Fusion("fuse_conv_batchnorm", (_s("conv"), _s("batch_norm")), f"{_CT}/optimize_conv.py fuse_conv_batchnorm"),
    Fusion("fuse_conv_bias", (_s("conv"), _s("add", "sub", constant_operand=True)),
           f"{_CT}/optimize_conv.py fuse_conv_bias"),
    Fusion("fuse_conv_scale", (_s("conv"), _s("mul", "real_div", constant_operand=True)),
           f"{_CT}/optimize_conv.py fuse_conv_scale"),
    Fusion("fuse_linear_bias", (_s("linear"), _s("add", "sub", constant_operand=True)),
           f"{_CT}/optimize_linear.py fuse_linear_bias"),
    Fusion("fuse_matmul_weight_bias", (_s("matmul", constant_operand=True), _s("add", constant_operand=True)),
           f"{_CT}/optimize_linear.py fuse_matmul_weight_bias"),
)

# Compiler labels and the fusions each target's compiler applies to the graph it is given.
CATALOGUES = {
    "onnxruntime": ("ONNX Runtime (CPU EP, ORT_ENABLE_ALL)", ORT_BASIC + ORT_EXTENDED),
    # Mobile EPs: only Level 1 runs before partitioning; the EP compiles its partitions itself (invisible here).
    "onnxruntime-basic": ("ONNX Runtime Level 1 (before partitioning)", ORT_BASIC),
    "openvino-cpu": ("OpenVINO CPU plugin", OPENVINO_CPU),
    "coremltools": ("coremltools default MIL passes", COREMLTOOLS),
}
# coremltools' fp16 frontend writes a cast pair (fp16 → fp32 → fp16) after every op; its cast_optimization pass
# removes them before the fuse_* passes run, so the chains are matched through casts there.
THROUGH_CASTS = {"coremltools"}


def check_catalogue(compiled: Graph, given: Graph, catalogue: str) -> dict:
    """Every opportunity of the catalogue in `given` (the graph the compiler was given) and how it ended in
    `compiled` (whose `fused_from` ids refer to `given`)."""
    label, fusions = CATALOGUES[catalogue]
    view = _GraphView(given, through_casts=catalogue in THROUGH_CASTS)
    carrier = _carriers(compiled)
    opportunities, seen = [], set()
    for f in fusions:
        for chain in view.matches(f):
            key = (f.name, tuple(n.id for n in chain))
            if key in seen:
                continue
            seen.add(key)
            opportunities.append(_outcome(f, chain, view, carrier))
    counts = {k: sum(1 for o in opportunities if o["outcome"] == k) for k in (FIRED, SUPERSEDED, BLOCKED, MISSED)}
    return {"catalogue": catalogue, "compiler": label, "opportunities": opportunities, "counts": counts,
            "entries": [{"fusion": f.name, "source": f.source,
                         "pattern": "→".join("|".join(sorted(s.ops)) + ("?" if s.optional else "") for s in f.steps)}
                        for f in fusions]}


class _GraphView:
    """Producer / consumer indexes of a graph, for chain matching."""

    def __init__(self, g: Graph, through_casts: bool = False):
        self.through_casts = through_casts
        self.nodes = [n for n in g.nodes if n.kind == COMPUTE]
        self.compute_ids = {n.id for n in self.nodes}
        self.op_type = {n.id: n.op_type for n in self.nodes}
        self.producer = {t.name: n for n in g.nodes for t in n.outputs}
        self.computed = {t.name for n in g.nodes if n.kind not in (CONSTANT, IO) for t in n.outputs}
        self.graph_inputs = {t.name for t in g.inputs}
        self.graph_outputs = {t.name for t in g.outputs}
        self.consumers: dict[str, list] = {}
        for n in g.nodes:
            for t in n.inputs:
                self.consumers.setdefault(t.name, []).append(n)

    def is_constant(self, name: str) -> bool:
        return name not in self.computed and name not in self.graph_inputs

    def readers(self, n, depth: int = 0) -> list:
        out = []
        for t in n.outputs[:1]:
            for c in self.consumers.get(t.name, []):
                if c.kind == IO:
                    continue
                if self.through_casts and c.kind == CAST and depth < 4:
                    out += self.readers(c, depth + 1)
                else:
                    out.append(c)
        return out

    def output_names(self, n, depth: int = 0) -> set:
        """n's output, and with through_casts the outputs of the casts after it."""
        names = {t.name for t in n.outputs[:1]}
        if self.through_casts and depth < 4:
            for t in n.outputs[:1]:
                for c in self.consumers.get(t.name, []):
                    if c.kind == CAST:
                        names |= self.output_names(c, depth + 1)
        return names

    def matches(self, f: Fusion):
        first = f.steps[0]
        for n in self.nodes:
            if n.op_type in first.ops and self._operand_ok(n, first, None):
                yield from self._extend(f, 1, [n])

    def _extend(self, f: Fusion, i: int, chain: list):
        if i == len(f.steps):
            if _condition(f, chain, self):
                yield chain
            return
        step = f.steps[i]
        nxt = [c for c in self.readers(chain[-1]) if c.op_type in step.ops and self._operand_ok(c, step, chain[-1])]
        for c in nxt:
            yield from self._extend(f, i + 1, chain + [c])
        if step.optional and not nxt:
            yield from self._extend(f, i + 1, chain)

    def _operand_ok(self, n, step: Step, prev) -> bool:
        if not (step.constant_operand or step.residual):
            return True
        prev_out = self.output_names(prev) if prev is not None else set()
        others = [t.name for t in n.inputs if t.name not in prev_out]
        if prev is None:
            others = others[1:]   # the first op of a chain: its data input is input 0
        if not others:
            return False
        if step.constant_operand:
            return all(self.is_constant(o) for o in others)
        return any(not self.is_constant(o) for o in others)


def _condition(f: Fusion, chain: list, view: _GraphView) -> bool:
    if f.when == "clip_constant":
        act = chain[-1]
        return act.op_type != "Clip" or all(view.is_constant(t.name) for t in act.inputs[1:] if t.name)
    if f.when == "transpose_last_two":
        perm = list(chain[0].attributes.get("perm") or [])
        return len(perm) >= 2 and perm[-2:] == [len(perm) - 1, len(perm) - 2] and perm[:-2] == list(range(len(perm) - 2))
    if f.when == "matmul_add":
        return not _attention_projection(chain[0], view)
    if f.when in ("same_shape", "same_shape_3d"):
        add = next(n for n in chain if n.op_type == "Add")       # the residual sum: both operands the same shape
        shapes = [t.shape for t in add.inputs[:2]]
        if any(s is None for s in shapes) or shapes[0] != shapes[1]:
            return False
        return f.when == "same_shape" or len(shapes[0]) == 3
    return True


def _attention_projection(matmul, view: _GraphView) -> bool:
    """Softmax → MatMul → Transpose → Reshape → this MatMul (ORT keeps it for AttentionFusion)."""
    chain = ("Reshape", "Transpose", "MatMul", "Softmax")
    node = matmul
    for op in chain:
        node = view.producer.get(node.inputs[0].name) if node.inputs else None
        if node is None or node.op_type != op:
            return False
    return True


def _known_blocker(f: Fusion, chain: list) -> str | None:
    """A condition of the compiler's own matcher that the graph fails, where xc can read it off the graph."""
    if f.when == "matmul_add":
        a = chain[0].inputs[0] if chain[0].inputs else None
        if a is not None and a.shape is not None and len(a.shape) != 2 and not all(isinstance(d, int)
                                                                                   for d in a.shape):
            return (f"{chain[0].id}'s input has dynamic dims {a.shape}: {f.name} reshapes a rank-{len(a.shape)} "
                    f"input to 2D only when its shape is concrete (fix the dims to let it fire)")
    return None


def _carriers(g: Graph) -> dict:
    """given-graph node id -> the compiled compute node that carries it."""
    out = {}
    for n in g.nodes:
        if n.kind != COMPUTE:
            continue
        for f in n.fused_from or [n.id]:
            out.setdefault(f, n)
    return out


def _outcome(f: Fusion, chain: list, view: _GraphView, carrier: dict) -> dict:
    ids = [n.id for n in chain]
    holders = [carrier.get(i) for i in ids]
    present = [h for h in holders if h is not None]
    row = {"fusion": f.name, "nodes": ids, "op_types": [n.op_type for n in chain],
           "module_path": chain[0].module_path, "source_ops": sorted({s for n in chain for s in n.source_ops}),
           "carried_by": sorted({h.id for h in present}), "reason": None}
    if len({h.id for h in present}) <= 1:
        return {**row, "outcome": FIRED}
    # The same fusion fired on a sibling: a residual sum has two producers and goes into one of them.
    last = carrier.get(ids[-1])
    if last is not None:
        rivals = [x for x in (last.fused_from or []) if x not in ids and x in view.compute_ids
                  and view.op_type.get(x) in f.steps[0].ops]
        if rivals:
            return {**row, "outcome": SUPERSEDED,
                    "reason": f"{chain[-1].id} went into {last.id} with {rivals[0]} instead (the same fusion on "
                              f"the other producer)"}
    for a, b in zip(chain, chain[1:]):
        others = [c.id for c in view.readers(a) if c is not b]
        if others:
            return {**row, "outcome": BLOCKED,
                    "reason": f"{a.id}'s output also feeds {', '.join(others[:3])}, so {f.name} cannot fold "
                              f"{b.op_type} into it"}
        if view.output_names(a) & view.graph_outputs:
            return {**row, "outcome": BLOCKED, "reason": f"{a.id}'s output is a model output; {f.name} would "
                                                         f"remove it"}
    known = _known_blocker(f, chain)
    if known:
        return {**row, "outcome": BLOCKED, "reason": known}
    # Checked after the graph's own blockers: a fusion that ran earlier in the compiler's pipeline took an op.
    members = set(ids)
    for h in present:
        taken = [x for x in (h.fused_from or []) if x not in members and x in view.compute_ids]
        if taken:
            return {**row, "outcome": SUPERSEDED,
                    "reason": f"{h.id} ({h.op_type}) fused it with {', '.join(taken[:3])} instead"}
    fallback = next((h for h in present if h.fallback), None)
    if fallback is not None:
        return {**row, "outcome": MISSED, "reason": f"{fallback.op_type} falls back to the CPU"
                                                    + (f" ({fallback.fallback_reason})" if fallback.fallback_reason
                                                       else "")}
    backends = {h.backend for h in present}
    if len(backends) > 1:
        return {**row, "outcome": MISSED,
                "reason": "the ops run on different devices (" + ", ".join(sorted(b or "?" for b in backends)) + ")"}
    return {**row, "outcome": MISSED, "reason": "the compiler did not say why (a condition xc does not check, such "
                                                "as a dtype or a shape it could not infer, may not hold)"}
