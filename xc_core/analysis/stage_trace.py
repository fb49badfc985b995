"""Stages: each target's toolchain steps on the six canonical stages, the graphs after them stored once, and the
first stage at which targets part ways for each source op.

A report carries, per target, the steps with their counts (small) and a key per step graph; the graphs themselves
go to one file beside report.json (`stages.json.gz`, keyed by content, so a graph two targets share — the captured
ONNX, ORT's basic-level graph of two variants — is stored once; gzip, since node records repeat their keys and
compress about 11×). The final graph of each target is already in the report; steps that end there say "final".

First divergence: for every source op and target, a signature per stage —
- import, graph optimisation, fusion: which other source ops share a node with it in the graph after that stage
  ("alone", "with a, b", or "gone" when no compute node carries it: constant-folded or eliminated);
- backend selection: the backends of the nodes that carry it in the compiled graph;
- kernel lowering: their precisions;
- fallback insertion: whether any of them is a fallback.
A stage without a graph of its own carries the previous one forward. Two targets diverge for an op at the first
stage whose signatures differ.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter, defaultdict

from ..ir import COMPUTE, Graph
from ..lowering import (
    BACKEND,
    CAPTURED_ONNX,
    FALLBACK,
    FINAL,
    FUSION,
    GRAPH_OPT,
    IMPORT,
    INPUT,
    STAGES,
    Step,
)

STAGES_FILE = "stages.json.gz"     # written before it was compressed: stages.json (a report names its file)
GONE = "gone"
_GRAPH_STAGES = (IMPORT, GRAPH_OPT, FUSION)


STAGES_FORMAT = 2


# One encoder for every node's content key: json.dumps with options builds a new encoder per call (a 20,000-node
# model's steps hash 100,000 nodes).
_CANONICAL = json.JSONEncoder(sort_keys=True, default=str)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class GraphStore:
    """Step graphs by content key, as written to stages.json. Consecutive steps of a toolchain change a few nodes
    and keep the rest, so nodes are stored once each, by content, and a graph is its name, inputs, outputs and
    the list of its nodes' keys: ORT's basic, extended and layout graphs of a 20,000-node model share most of
    their nodes. A graph object is serialised once, however many steps name it (the captured ONNX is the import
    step of every ONNX Runtime target)."""

    def __init__(self):
        self.graphs: dict[str, dict] = {}
        self.nodes: dict[str, dict] = {}
        self._keys: dict[int, tuple[str, Graph]] = {}   # id → (key, the graph, held so the id stays its own)

    def __len__(self) -> int:
        return len(self.graphs)

    def add(self, g: Graph) -> str:
        known = self._keys.get(id(g))
        if known is not None:
            return known[0]
        gd = g.to_dict()
        node_keys = []
        for nd in gd["nodes"]:
            nk = _digest(_CANONICAL.encode(nd))
            self.nodes.setdefault(nk, nd)
            node_keys.append(nk)
        gd["nodes"] = node_keys
        key = _digest(_CANONICAL.encode(gd))
        self.graphs.setdefault(key, gd)
        self._keys[id(g)] = (key, g)
        return key

    def to_json(self) -> str:
        return json.dumps({"format": STAGES_FORMAT, "nodes": self.nodes, "graphs": self.graphs},
                          separators=(",", ":"))

    def write(self, path: str) -> None:
        """stages.json.gz: gzip without a time stamp, so the same graphs give the same bytes (the run store keeps
        a file once by its hash)."""
        from ..paths import write_bytes_atomic
        write_bytes_atomic(path, gzip.compress(self.to_json().encode(), compresslevel=6, mtime=0))


def read_stage_graphs(path: str) -> dict[str, dict]:
    """stages.json.gz (or the plain stages.json of older runs) as step graph key → graph dict (nodes in full).
    Also reads the first format (key → graph)."""
    with open(path, "rb") as f:
        raw = f.read()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    if data.get("format") != STAGES_FORMAT:
        return data
    nodes = data["nodes"]
    return {key: {**g, "nodes": [nodes[k] for k in g["nodes"]]} for key, g in data["graphs"].items()}


def resolved_graph(step: Step, r, captured) -> Graph | None:
    """The graph after a step: its own, or the one it points at."""
    if step.graph is not None:
        return step.graph
    if step.graph_ref == FINAL:
        return r.graph
    if step.graph_ref == INPUT:
        return r.input_graph or captured.onnx_graph
    if step.graph_ref == CAPTURED_ONNX:
        return captured.onnx_graph
    return None


def stage_block(r, captured, evidence: dict, store: GraphStore) -> dict:
    """The report block of one target's steps. Graphs other than the final one are added to `store` (key →
    graph dict) and named by key; synthetic backend-selection and fallback-insertion steps are read from the
    compiled graph (with the assignment's evidence kind)."""
    steps = []
    for step in r.stages:
        d = {"stage": step.stage, "name": step.name, "op_count": step.op_count, "counts": dict(step.counts),
             "note": step.note, "graph": None, "ends_stage": step.ends_stage}
        if step.graph_ref == FINAL:
            d["graph"] = FINAL
        else:
            g = resolved_graph(step, r, captured)
            if g is not None:
                d["graph"] = store.add(g)
        steps.append(d)
    g = r.graph
    if g is not None:
        compute = g.compute_nodes()
        backends = Counter(n.backend or "unknown" for n in compute)
        part = r.partitioning or {}
        counts = {"backends": dict(sorted(backends.items()))}
        if part:
            counts["partitions"] = part.get("num_partitions")
            counts["assigned"] = part.get("num_supported_nodes")
            counts["checked"] = part.get("num_nodes")
        steps.append({"stage": BACKEND, "name": _backend_step_name(r), "op_count": len(compute), "counts": counts,
                      "note": "", "graph": FINAL})
        fallbacks = sum(n.fallback for n in compute)
        counts = {"fallbacks": fallbacks}
        if r.boundaries:
            counts["boundaries"] = r.boundaries.get("count", len(r.boundaries.get("items") or []))
        steps.append({"stage": FALLBACK, "name": "ops left to the CPU" if fallbacks else "no fallback",
                      "op_count": len(compute), "counts": counts, "note": "", "graph": FINAL})
    return {"steps": steps, "evidence": evidence}


def _backend_step_name(r) -> str:
    if r.partitioning:     # ORT's mobile EPs name no decider: their split is ORT's checker's
        who = r.partitioning.get("decided_by", "ORT's checker")
        return f"{r.partitioning.get('ep', 'EP')} partitioning ({who})"
    if r.compute_units:
        return "compute unit per op"
    return "execution provider / device per node"


# ----------------------------------------------------------------------------------------- first divergence
def _group_signatures(g: Graph) -> dict[str, str]:
    """source op → the other source ops sharing a compute node with it ("alone" when none)."""
    together: dict[str, set] = defaultdict(set)
    for n in g.nodes:
        if n.kind != COMPUTE:
            continue
        for s in n.source_ops:
            together[s].update(n.source_ops)
    out = {}
    for s, group in together.items():
        others = sorted(group - {s})
        out[s] = "with " + ", ".join(others) if others else "alone"
    return out


def _carried(g: Graph) -> dict[str, list]:
    out: dict[str, list] = defaultdict(list)
    for n in g.nodes:
        if n.kind == COMPUTE:
            for s in n.source_ops:
                out[s].append(n)
    return out


def op_signatures(r, captured, ops: list[str]) -> dict[str, list[str]]:
    """source op → its signature at each of the six stages on this target (see the module docstring)."""
    per_stage: dict[str, Graph] = {}
    for step in r.stages:
        g = resolved_graph(step, r, captured)
        stage = step.ends_stage or step.stage
        if g is not None and stage in _GRAPH_STAGES:
            per_stage[stage] = g           # the last graph of a stage is what the stage ends with
    sigs: dict[str, list[str]] = {op: [] for op in ops}
    previous = None
    for stage in _GRAPH_STAGES:
        g = per_stage.get(stage, previous)
        previous = g
        groups = _group_signatures(g) if g is not None else {}
        for op in ops:
            sigs[op].append(groups.get(op, GONE) if g is not None else "?")
    carried = _carried(r.graph) if r.graph is not None else {}
    for op in ops:
        nodes = carried.get(op, [])
        if not nodes:
            sigs[op] += [GONE, GONE, GONE]
            continue
        sigs[op].append(", ".join(sorted({n.backend or "unknown" for n in nodes})))
        sigs[op].append(", ".join(sorted({n.precision or "unknown" for n in nodes})))
        sigs[op].append("fallback" if any(n.fallback for n in nodes) else "no fallback")
    return sigs


def first_divergence(signatures: dict[str, dict[str, list[str]]], ops: list[str]) -> list[dict]:
    """Per source op, the first stage at which the targets' signatures differ, and how they split there."""
    rows = []
    targets = list(signatures)
    for op in ops:
        row = {"op": op, "first_stage": None, "split": []}
        for i, stage in enumerate(STAGES):
            by_sig: dict[str, list[str]] = defaultdict(list)
            for t in targets:
                by_sig[signatures[t][op][i]].append(t)
            if len(by_sig) > 1:
                row["first_stage"] = stage
                row["split"] = [{"signature": sig, "targets": ts} for sig, ts in
                                sorted(by_sig.items(), key=lambda kv: -len(kv[1]))]
                break
        rows.append(row)
    return rows


def pair_divergence(signatures: dict, a: str, b: str, ops: list[str]) -> list[dict]:
    """For two targets: per op, the first stage where they differ and both signatures there."""
    rows = []
    for op in ops:
        sa, sb = signatures[a][op], signatures[b][op]
        i = next((k for k in range(len(STAGES)) if sa[k] != sb[k]), None)
        rows.append({"op": op, "first_stage": STAGES[i] if i is not None else None,
                     a: sa[i] if i is not None else sa[-1], b: sb[i] if i is not None else sb[-1]})
    return rows


def divergence_block(results: list, captured, evidence: str) -> dict:
    """The report block: signatures per target (ok targets with a compiled graph). The across-targets rows are
    computed from them where they are shown (views.divergence_rows), not stored: they repeat the signatures."""
    ops = [n.id for n in captured.before.nodes if n.kind == COMPUTE]
    sigs = {r.target: op_signatures(r, captured, ops) for r in results if r.status == "ok" and r.graph is not None
            and r.stages}
    return {"stages": list(STAGES), "ops": ops, "signatures": sigs, "evidence": evidence}
