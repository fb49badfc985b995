"""Shared ONNX Runtime plumbing: sessions, feeds, per-node providers from the profiling JSON."""
from __future__ import annotations

import json
import os

import numpy as np

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
