"""Shared ONNX Runtime plumbing: sessions, feeds, per-node providers from ORT's assignment API and its profiling
JSON, and the time per node from that JSON."""
from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict

import numpy as np

from ..ir import COMPUTE
from .base import TargetResult

# The profiling JSON names each kernel event "<node name>_kernel_time" with args.provider.
_KERNEL_SUFFIX = "_kernel_time"

PROVIDER_BACKEND = {"CPUExecutionProvider": "cpu", "NnapiExecutionProvider": "nnapi",
                    "CoreMLExecutionProvider": "coreml", "CUDAExecutionProvider": "gpu"}


# Asks the session to keep which EP took which node when it partitioned the graph; read with
# InferenceSession.get_provider_graph_assignment_info() (ORT 1.23+, onnxruntime_session_options_config_keys.h).
RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


def make_session(model_path: str, level: str, optimized_path: str | None = None, profile_dir: str | None = None,
                 record_assignment: bool = False):
    import onnxruntime as ort
    so = ort.SessionOptions()
    if record_assignment:
        so.add_session_config_entry(RECORD_ASSIGNMENT, "1")
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    so.log_severity_level = 3  # warnings about serialising nchwc models are expected; keep the CLI clean
    if optimized_path:
        so.optimized_model_filepath = optimized_path
    if profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(profile_dir, "ort_profile")
    return ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])


def feeds_for(session, inputs: dict) -> dict:
    feeds = {}
    for i in session.get_inputs():
        if i.name not in inputs:
            raise KeyError(f"no value for model input '{i.name}' (have {sorted(inputs)})")
        feeds[i.name] = np.asarray(inputs[i.name], order="C")
    return feeds


def run_session(session, inputs: dict) -> dict:
    names = [o.name for o in session.get_outputs()]
    values = session.run(names, feeds_for(session, inputs))
    return {n: np.asarray(v) for n, v in zip(names, values)}


def providers_from_api(session) -> dict[str, str]:
    """node name -> execution provider, as ORT's partitioner assigned them (get_provider_graph_assignment_info).
    The names are those of the graph ORT partitioned: after its basic, EP-independent optimizations and before
    the fusions and layout changes that follow, so a fused node is found through its `fused_from`."""
    out = {}
    for subgraph in session.get_provider_graph_assignment_info():
        for node in subgraph.get_nodes():
            out[node.name] = subgraph.ep_name
    return out


def assign_from_api(graph, api: dict[str, str]) -> list:
    """Each node of the optimized graph gets the provider the API names for it, or for every node it was fused
    from when they agree. Returns the compute nodes the API says nothing unambiguous about."""
    unknown = []
    for n in graph.nodes:
        if n.kind == "constant":
            continue
        provider = api.get(n.id)
        if provider is None:
            found = {api[f] for f in n.fused_from if f in api}
            provider = found.pop() if len(found) == 1 else None
        if provider:
            n.kernel, n.backend = provider, PROVIDER_BACKEND.get(provider, provider)
        else:
            unknown.append(n)
    return unknown


def read_profile(profile_path: str) -> list[dict]:
    with open(profile_path) as f:
        return json.load(f)


def providers_from_profile(events: list[dict]) -> dict[str, str]:
    """node name -> execution provider, from ORT's profiling trace."""
    out = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith(_KERNEL_SUFFIX):
            provider = (e.get("args") or {}).get("provider")
            if provider:
                out[name[: -len(_KERNEL_SUFFIX)]] = provider
    return out


def times_from_profile(events: list[dict], skip_runs: int = 1) -> dict[str, list[float]]:
    """node name -> its kernel time (µs) in each profiled run, and RUN_KEY -> each run's whole time. A run is a
    "model_run" session event; kernel events fall inside one by their timestamps. The first `skip_runs` runs are
    warm-up (first-touch allocations, caches) and left out."""
    from .base import RUN_KEY
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")[skip_runs:]
    out: dict[str, list[float]] = {RUN_KEY: [end - start for start, end in runs]}
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in runs]
    starts = [start for start, _ in runs]
    import bisect
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith(_KERNEL_SUFFIX):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i >= 0 and e["ts"] <= runs[i][1]:
            per_run[i][name[: -len(_KERNEL_SUFFIX)]] += float(e["dur"])
    for node in {k for r in per_run for k in r}:
        out[node] = [r.get(node, 0.0) for r in per_run]
    return out


# --- intermediate values (per-layer drift) --------------------------------------------------------------------
def onnx_probe_tensors(captured, probes: list[str]) -> dict[str, str]:
    """source op id -> the tensor of the captured ONNX that carries that source op's output.

    The candidates are the ONNX nodes that come from that source op alone (`source_ops == [probe]`); the tensor is
    the output of the last of them in graph order, preferring one whose value leaves the op's own nodes (consumed by
    another source op's node, or a graph output) and whose shape agrees with the source op's where both are known.
    """
    wanted = set(probes)
    graph = captured.onnx_graph
    consumers: dict[str, list] = defaultdict(list)
    for n in graph.nodes:
        for t in n.inputs:
            consumers[t.name].append(n)
    graph_outputs = {t.name for t in graph.outputs}
    before = captured.before.by_id()
    candidates: dict[str, list] = defaultdict(list)
    for n in graph.nodes:
        if n.kind == COMPUTE and n.outputs and len(n.source_ops) == 1 and n.source_ops[0] in wanted:
            candidates[n.source_ops[0]].append(n)
    out = {}
    for op, nodes in candidates.items():
        ref = before.get(op)
        ref_shape = ref.outputs[0].shape if ref is not None and ref.outputs else None

        def escapes(n):
            t = n.outputs[0].name
            return t in graph_outputs or any(c.source_ops != [op] for c in consumers.get(t, []))

        def shape_ok(n):
            s = n.outputs[0].shape
            return s is None or ref_shape is None or list(s) == list(ref_shape)

        pool = [n for n in nodes if escapes(n)] or nodes
        pool = [n for n in pool if shape_ok(n)] or pool
        out[op] = pool[-1].outputs[0].name
    return out


def probe_values(model_path: str, tensors: dict[str, str], inputs: dict, result: TargetResult | None = None,
                 level: str = "ORT_DISABLE_ALL") -> dict:
    """Add the tensors that a node of `model_path` produces as graph outputs of a copy, run the copy once with
    `level` (ORT_DISABLE_ALL: no further fusion) and return source op id -> value (fp16 widened to fp32). Tensors
    the model does not produce (fused away, renamed) are left out."""
    import onnx
    from onnx import helper
    model = onnx.load(model_path, load_external_data=False)  # external data stays where it is, by reference
    produced = {o for node in model.graph.node for o in node.output if o}
    keep = {op: t for op, t in tensors.items() if t in produced}
    if result is not None:
        result.info["intermediates_coverage"] = {"probes_mapped_to_tensors": len(tensors),
                                                 "tensors_present_in_run_graph": len(keep)}
    if not keep:
        return {}
    existing = {o.name for o in model.graph.output}
    names = list(dict.fromkeys(keep.values()))
    for t in names:
        if t not in existing:
            # Name only: ORT types the output from the graph; the fp16-emulation model's tensors may be float16.
            model.graph.output.append(helper.make_empty_tensor_value_info(t))
    # Saved beside the model so relative external-data paths resolve; removed once the session has loaded it.
    fd, tmp = tempfile.mkstemp(prefix=".xc-probes-", suffix=".onnx", dir=os.path.dirname(os.path.abspath(model_path)))
    os.close(fd)
    try:
        onnx.save(model, tmp)
        session = make_session(tmp, level)
    finally:
        os.remove(tmp)
    values = dict(zip(names, session.run(names, feeds_for(session, inputs))))
    return {op: widen(values[t]) for op, t in keep.items()}


def widen(value) -> np.ndarray:
    a = np.asarray(value)
    return a.astype(np.float32) if a.dtype in (np.float16,) or a.dtype.name == "bfloat16" else a
