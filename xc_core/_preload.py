"""Imported once by the worker forkserver (xc_core.worker) so every child starts with the heavy libraries
already loaded. Only imports (and the report schema compiled): no thread pools, no sessions, nothing a fork could
inherit half-done — PyTorch's OpenMP pool, once started, hangs a forked child's first parallel op."""
import contextlib
import io
import logging
import warnings

with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    # torch.export's serializer (0.7 s to import) is what the capture worker saves the ExportedProgram with and
    # every worker that reads it back (Core ML, Inductor) loads it with.
    for _name in ("numpy", "onnx", "onnxruntime", "onnxruntime.quantization", "openvino", "torch", "torch.export",
                  "torch._export.serde.serialize", "torch.onnx", "onnxscript", "coremltools", "xc_core.targets",
                  "xc_core.capture", "xc_core.pipeline", "xc_core.report.build"):
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
