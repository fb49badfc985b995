"""The lowering pipeline every target goes through, in six canonical stages, and what a target records per step.

A compiler lowers a model in steps: it imports it, optimises the graph, fuses operators, picks a backend for each,
lowers each to a kernel (precision, layout) and inserts fallbacks where a backend cannot take an op. Each
toolchain names its steps differently (ORT optimization levels, coremltools graph passes, OpenVINO's common
transformations, Inductor's pre-/post-grad FX graphs); each target maps its own steps onto these six so the
Stages page can put them side by side and say where two targets first part ways.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .ir import CAST, LAYOUT, Graph

IMPORT = "import"
GRAPH_OPT = "graph-optimisation"
FUSION = "fusion"
BACKEND = "backend-selection"
KERNEL = "kernel-lowering"
FALLBACK = "fallback-insertion"
STAGES = (IMPORT, GRAPH_OPT, FUSION, BACKEND, KERNEL, FALLBACK)
STAGE_TITLES = {IMPORT: "Import", GRAPH_OPT: "Graph optimisation", FUSION: "Fusion",
                BACKEND: "Backend selection", KERNEL: "Kernel lowering", FALLBACK: "Fallback insertion"}


@dataclass
class Step:
    """One step of a target's toolchain: which canonical stage it belongs to, what the toolchain calls it, the
    compute-op count after it, and the graph after it when the toolchain gives one (with provenance: `source_ops`
    link its nodes to the captured graph)."""
    stage: str
    name: str
    op_count: int | None = None
    counts: dict = field(default_factory=dict)   # casts, reorders, passes, ... after or during this step
    graph: Graph | None = None
    note: str = ""
    # Where the graph after this step is when it is not `graph`: "final" (the target's compiled graph), "input"
    # (the graph its compiler was given) or "captured-onnx" (the captured ONNX). Each graph is then stored once.
    graph_ref: str | None = None
    # The canonical stage whose end this step's graph shows, when that is not `stage` (a toolchain whose steps
    # interleave, like coremltools' passes, ends its graph optimisation at the step before its first fusion).
    ends_stage: str | None = None

    def to_dict(self) -> dict:
        return {"stage": self.stage, "name": self.name, "op_count": self.op_count, "counts": dict(self.counts),
                "graph": self.graph.to_dict() if self.graph is not None else None, "note": self.note,
                "graph_ref": self.graph_ref, "ends_stage": self.ends_stage}

    @staticmethod
    def from_dict(d: dict) -> "Step":
        d = dict(d)
        d["graph"] = Graph.from_dict(d["graph"]) if d.get("graph") is not None else None
        return Step(**d)


FINAL, INPUT, CAPTURED_ONNX = "final", "input", "captured-onnx"


def graph_step(stage: str, name: str, graph: Graph, note: str = "", ref: str | None = None, **counts) -> Step:
    """A step whose graph the toolchain gave: op count, casts and layout moves read from the graph. With `ref`
    (FINAL / INPUT) the graph is stored elsewhere in the result and the step only points at it."""
    base = {"casts": sum(n.kind == CAST for n in graph.nodes), "reorders": sum(n.kind == LAYOUT for n in graph.nodes),
            # nodes that carry two or more source ops: the same measure on every toolchain's graph
            "fused_nodes": sum(len(n.source_ops) > 1 for n in graph.compute_nodes())}
    return Step(stage, name, len(graph.compute_nodes()), {**base, **counts}, None if ref else graph, note, ref)
