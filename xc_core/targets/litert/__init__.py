"""LiteRT (formerly TensorFlow Lite) as a target family: one module per runtime path, sharing common.py (the .tflite
— uploaded, or converted by litert-torch — read back and traced to its source ops). Importing the package registers
the targets and the reference for .tflite uploads."""
from . import xnnpack, gpu, reference  # noqa: F401,I001  (registration order = display order)
