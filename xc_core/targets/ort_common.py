"""Shared ONNX Runtime plumbing: sessions, feeds, per-node providers from the profiling JSON."""
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


def make_session(model_path: str, level: str, optimized_path: str | None = None, profile_dir: str | None = None):
    import onnxruntime as ort
    so = ort.SessionOptions()
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


def providers_from_profile(profile_path: str) -> dict[str, str]:
    """node name -> execution provider, from ORT's profiling trace."""
    with open(profile_path) as f:
        events = json.load(f)
    out = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith(_KERNEL_SUFFIX):
            provider = (e.get("args") or {}).get("provider")
            if provider:
                out[name[: -len(_KERNEL_SUFFIX)]] = provider
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
