"""Imported once by the worker forkserver (xc_core.worker) so every child starts with the heavy libraries
already loaded. Only imports: no thread pools, no sessions, nothing a fork could inherit half-done."""
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
                  "xc_core.capture", "xc_core.pipeline"):
        try:
            __import__(_name)
        except Exception:  # noqa: BLE001 — an optional library may be missing; the target then says so
            pass
    logging.disable(logging.NOTSET)
