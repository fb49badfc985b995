"""xc's ONNX → PyTorch route: an ONNX model made into one ExportedProgram for the targets that compile PyTorch
programs (route.py), with the graph preparation (graph_prep.py), the renaming that keeps model names out of
generated code (names.py) and the converters xc adds to onnx2torch (converters.py, modules.py)."""
from .route import PROGRAM_FILE, ROUTE, RouteError, available, build

__all__ = ["PROGRAM_FILE", "ROUTE", "RouteError", "available", "build"]
