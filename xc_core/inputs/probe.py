"""The reference probe: run the source's own reference (ONNX Runtime with no optimisation for an ONNX model, the
module for a PyTorch one) on candidate input specs, so input-shape resolution can try a ladder of sizes and keep
the first that runs."""
from __future__ import annotations

from ..limits import Limits
from ..sources.spec import Source
from . import values


def reference_probe(src: Source, limits: Limits):
    """A function that runs the source's reference on candidate input specs: None if it runs, else why not (one
    line). None when there is nothing to probe with (a compiled Core ML model)."""
    from ..errors import summarize_error
    if src.kind == "onnx" and src.path:
        session = {}

        def probe(specs):
            if values.input_bytes(specs) > limits.bytes("max_input_mb"):
                return "the inputs would exceed the input-size limit"
            try:
                if "s" not in session:
                    session["s"] = _unoptimised_session(src.path)
                feeds = values.random_inputs(specs)
                session["s"].run(None, {i.name: feeds[i.name] for i in session["s"].get_inputs()})
                return None
            except Exception as e:  # noqa: BLE001 — a failure here is the answer to the probe
                return summarize_error(str(e), 240) or type(e).__name__
        return probe
    if src.module is not None and src.kind != "torchscript":
        def probe(specs):
            import torch
            if values.input_bytes(specs) > limits.bytes("max_input_mb"):
                return "the inputs would exceed the input-size limit"
            feeds = values.random_inputs(specs)
            try:
                with torch.no_grad():
                    src.module(*[torch.from_numpy(feeds[s.name]) for s in specs])
                return None
            except Exception as e:  # noqa: BLE001
                return summarize_error(str(e), 240) or type(e).__name__
        return probe
    return None


def _unoptimised_session(path: str):
    """The ONNX model as written, on ONNX Runtime's CPU provider with no graph optimisation: the reference."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
