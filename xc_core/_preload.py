"""Imported once by the worker forkserver (xc_core.worker) so every child starts with the heavy libraries
already loaded. Only imports (and the report schema compiled): no thread pools, no sessions, nothing a fork could
inherit half-done — PyTorch's OpenMP pool, once started, hangs a forked child's first parallel op.

A forkserver that serves any analysis (the dashboard's) imports every target's libraries. One started for a single
analysis (the CLI's) gets the requested targets' `worker_modules` in XC_WORKER_PRELOAD (xc_core.worker.preload_only):
importing coremltools alone — with the ExecuTorch, scikit-learn, torchao and transformers it probes — is half the
forkserver's start, paid for nothing by `--targets ort-cpu`. A library left out is imported by the worker that needs
it."""
import contextlib
import io
import logging
import os
import warnings

# In import order. Always: what the capture and every ONNX Runtime step import. torch.export's serializer (0.7 s
# to import) is what the capture worker saves the ExportedProgram with and every worker that reads it back (Core
# ML, Inductor) loads it with.
_MODULES = ("numpy", "onnx", "onnxruntime", "onnxruntime.quantization", "openvino", "torch", "torch.export",
            "torch._export.serde.serialize", "torch.onnx", "onnxscript", "coremltools", "xc_core.targets",
            "xc_core.capture", "xc_core.pipeline")
# Imported only when asked for by XC_WORKER_PRELOAD (when it is set): the targets' own libraries.
_TARGET_MODULES = {"onnxruntime.quantization", "openvino", "coremltools"}
_chosen = os.environ.get("XC_WORKER_PRELOAD")
_wanted = [m for m in _MODULES if _chosen is None or m not in _TARGET_MODULES or m in _chosen.split(",")]
if _chosen is not None:     # a requested target's library outside the usual set (executorch.exir), last
    _wanted += [m for m in _chosen.split(",") if m and m not in _MODULES]

with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    for _name in _wanted:
        try:
            __import__(_name)
        except Exception:  # noqa: BLE001 — an optional library may be missing; the target then says so
            pass
    # The report schema compiled to Python once here, not in every report worker (0.1 s each).
    from xc_core.report.schema import _compiled
    _compiled()
    logging.disable(logging.NOTSET)

# Children are forked from this process: without this, the first full collection in each child walks (and so
# writes the reference counts of) every object imported above, copying hundreds of MB of pages that were shared
# (gc.freeze's documented use: a pre-fork server).
import gc  # noqa: E402

gc.freeze()
