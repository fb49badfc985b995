"""The neutral graph IR every target writes its compiled graph into.

Plain dataclasses that serialise 1:1 to JSON (`to_dict`), so the report, the pages and any later exporter
(Model Explorer) read the same structure. Provenance links a compiled node back to the *source ops*: node names of
the captured ExportedProgram for PyTorch sources, node names of the ONNX graph for ONNX sources.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Node kinds. "compute" nodes are what op counts and fusion analysis look at; the others are bookkeeping a
# compiler inserts or keeps (layout reorders, casts, constants, graph inputs/outputs).
COMPUTE, LAYOUT, CAST, CONSTANT, IO, ALIAS = "compute", "layout", "cast", "constant", "io", "alias"

Dim = int | str | None  # int, a symbolic name, or unknown


@dataclass
class TensorInfo:
    name: str
    shape: list[Dim] | None = None
    dtype: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": None if self.shape is None else list(self.shape), "dtype": self.dtype}


@dataclass
class Node:
    id: str
    op_type: str
    domain: str = ""
    kind: str = COMPUTE
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)
    backend: str | None = None        # device class that runs it: cpu | gpu | ane | nnapi | ...
    kernel: str | None = None         # what the runtime names the kernel / provider / primitive
    precision: str | None = None      # fp32 | fp16 | bf16 | int8 | int64 | ...
    source_ops: list[str] = field(default_factory=list)   # provenance: ids in the source graph
    module_path: str | None = None    # dotted nn.Module path ("" is the root module)
    source_location: str | None = None  # file:line of the user code, when the source graph knows it
    fused_from: list[str] = field(default_factory=list)   # node ids of the target's input graph absorbed here
    fallback: bool = False
    fallback_reason: str | None = None
    # Median time of this node over the profiled runs, in microseconds, as the runtime's profiler measured it on
    # this host (None: not timed). The target's `node_times` block says how and on which CPU.
    measured_us: float | None = None
    # This node's time as a vendor compiler's performance model estimates it for its device (Vela's cycles at the
    # NPU clock), in microseconds; None where no compiler estimated it. Never beside a measured time: a target has
    # one or the other, and its `node_times` block says which (evidence).
    estimated_us: float | None = None

    @property
    def time_us(self) -> float | None:
        """The node's time: measured where profiled, else the compiler's estimate (node_times.evidence says)."""
        return self.measured_us if self.measured_us is not None else self.estimated_us

    def to_dict(self) -> dict:
        # Written out field by field: dataclasses.asdict deep-copies recursively and took ~0.3 ms a node, most of
        # a big report's build time. Attribute values are JSON-ready already (the targets write them so).
        return {"id": self.id, "op_type": self.op_type, "domain": self.domain, "kind": self.kind,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "attributes": dict(self.attributes), "backend": self.backend, "kernel": self.kernel,
                "precision": self.precision, "source_ops": list(self.source_ops), "module_path": self.module_path,
                "source_location": self.source_location, "fused_from": list(self.fused_from),
                "fallback": self.fallback, "fallback_reason": self.fallback_reason, "measured_us": self.measured_us,
                **({"estimated_us": self.estimated_us} if self.estimated_us is not None else {})}


@dataclass
class Graph:
    name: str
    stage: str                        # captured | onnx | optimized | runtime | ...
    nodes: list[Node] = field(default_factory=list)
    inputs: list[TensorInfo] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)

    def compute_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == COMPUTE]

    def by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    def to_dict(self) -> dict:
        return {"name": self.name, "stage": self.stage,
                "inputs": [t.to_dict() for t in self.inputs], "outputs": [t.to_dict() for t in self.outputs],
                "nodes": [n.to_dict() for n in self.nodes]}

    @staticmethod
    def from_dict(d: dict) -> "Graph":
        def tensors(items):     # positional: keyword unpacking was most of a 20,000-node result's load
            return [TensorInfo(t["name"], t.get("shape"), t.get("dtype")) for t in items]
        nodes = []
        for nd in d["nodes"]:
            nd = dict(nd)
            nd["inputs"], nd["outputs"] = tensors(nd["inputs"]), tensors(nd["outputs"])
            nodes.append(Node(**nd))
        return Graph(d["name"], d["stage"], nodes, tensors(d["inputs"]), tensors(d["outputs"]))


def precision_of_dtype(dtype: str | None) -> str | None:
    """Map a tensor dtype name (numpy/onnx/torch spelling) to a precision label."""
    if dtype is None:
        return None
    d = dtype.lower().replace("torch.", "")
    table = {"float32": "fp32", "float": "fp32", "f32": "fp32", "fp32": "fp32",
             "float16": "fp16", "half": "fp16", "f16": "fp16", "fp16": "fp16",
             "bfloat16": "bf16", "bf16": "bf16",
             "float64": "fp64", "double": "fp64", "f64": "fp64",
             "int8": "int8", "i8": "int8", "uint8": "uint8", "u8": "uint8", "u1": "bool",
             "int16": "int16", "i16": "int16", "int32": "int32", "i32": "int32",
             "int64": "int64", "i64": "int64", "bool": "bool", "boolean": "bool"}
    return table.get(d, d)
