"""What a loaded source is: the model in the forms the pipeline needs, and the inputs it takes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


# User overrides of input shapes: name -> (shape, dtype or None to keep the model's dtype).
ShapeOverrides = dict[str, tuple[list[int], str | None]]


# The captured ("before") graph of each kind of source, in words.
BEFORE_STAGE_WORDS = {"exported-program": "ExportedProgram (torch.export)", "onnx": "ONNX graph",
                      "mil": "Core ML MIL program", "openvino-ir": "OpenVINO IR", "tflite": "TFLite flatbuffer"}


@dataclass(frozen=True)
class InputSpec:
    """One model input. `low`/`high` bound integer inputs (token ids must stay inside the vocabulary)."""
    name: str
    shape: list[int]
    dtype: str
    low: float | None = None
    high: float | None = None
    note: str = ""  # how the shape was chosen (e.g. which symbolic dims got which default)
    value: float | None = None   # every element set to this (a sample rate, a flag) instead of drawn
    dim_names: tuple = ()        # per axis: the model's name for a symbolic dim (None where the dim is fixed)

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "low": self.low, "high": self.high, "note": self.note, "value": self.value,
                "dim_names": list(self.dim_names)}


@dataclass
class Source:
    kind: str                 # sample | exported-program | torchscript | state-dict | onnx | coreml | openvino-ir | tflite
    name: str
    sha256: str
    inputs: list[InputSpec]
    module: Any = None        # eager torch callable (reference); None for compiled artifacts
    exported_program: Any = None   # torch.export.ExportedProgram when the source is PyTorch
    onnx_model: Any = None    # onnx.ModelProto when the source is ONNX
    mil_program: Any = None   # coremltools MIL Program when the source is a compiled Core ML model
    coreml_graph: Any = None  # the IR of a Core ML neuralNetwork model (no MIL program: read from its spec's layers)
    openvino_model: Any = None  # openvino.Model when the source is an OpenVINO IR
    openvino_xml: str | None = None
    tflite_outputs: list[str] = field(default_factory=list)   # a .tflite's output names (signature keys)
    path: str | None = None   # the file on disk, when there is one
    notes: list[str] = field(default_factory=list)
    # Per symbolic dim name: (min, max) an ExportedProgram's range constraints allow.
    dim_bounds: dict = field(default_factory=dict)
    # Per input: why its value (not just its shape) matters, e.g. it picks a branch of an If.
    value_hints: dict = field(default_factory=dict)
    temp_dirs: list[str] = field(default_factory=list)  # what the loader unpacked; removed by close()
    # What the file says about itself beyond the graph: a .tflite's TFLite Support metadata and associated files,
    # a Core ML model's type and spec facts. Reported as `source.metadata` when not empty.
    metadata: dict = field(default_factory=dict)
    # Constant (non-tensor) inputs an ExportedProgram recorded, baked into the program the loader hands on
    # (sources/pt2_constants.py). Reported as `source.constant_inputs` when not empty.
    constant_inputs: dict = field(default_factory=dict)

    def close(self) -> None:
        """Remove what loading unpacked (a zipped .mlpackage, …). Safe to call twice."""
        import shutil
        while self.temp_dirs:
            shutil.rmtree(self.temp_dirs.pop(), ignore_errors=True)

    @property
    def is_pytorch(self) -> bool:
        return self.kind in ("sample", "exported-program", "torchscript", "state-dict")

    @property
    def before_stage(self) -> str:
        """What the captured ("before") graph is: the ExportedProgram for PyTorch sources, else the format given."""
        return ("exported-program" if self.is_pytorch else
                {"coreml": "mil", "openvino-ir": "openvino-ir", "tflite": "tflite"}.get(self.kind, "onnx"))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "sha256": self.sha256,
                "inputs": [i.to_dict() for i in self.inputs], "notes": list(self.notes),
                **({"metadata": self.metadata} if self.metadata else {}),
                **({"constant_inputs": dict(self.constant_inputs)} if self.constant_inputs else {})}
