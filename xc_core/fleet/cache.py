"""When a batch may take a model's run from the run store instead of compiling again: the run's key covers the
source's content, the inputs and their flags, the targets with their options, the limits, xc's version and the
toolchains' versions (a new onnxruntime compiles differently, so its runs are not reused)."""
from __future__ import annotations

import os
from dataclasses import asdict

from ..errors import XcInputError
from .manifest import FleetModel

# The distributions whose version changes what a target compiles or how a model is captured (read from the
# installed metadata: nothing is imported).
TOOLCHAINS = ("torch", "numpy", "onnx", "onnxscript", "onnxruntime", "openvino", "coremltools", "executorch",
              "coreai-torch", "coreai-core", "litert-torch", "ai-edge-litert", "ai-edge-quantizer", "onnx2torch")


def toolchain_versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for dist in TOOLCHAINS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def source_sha256(source: str) -> str:
    """The content hash a run's key names its source by; a source that is not there raises XcInputError."""
    if source.startswith("sample:"):
        from ..sources.pytorch import load_sample
        return load_sample(source.split(":", 1)[1]).sha256
    if not os.path.isfile(source):
        raise XcInputError(f"{os.path.basename(source)}: no such file (accepted: a model file or sample:NAME)")
    from ..paths import sha256_file
    return sha256_file(source)


def model_key(model: FleetModel, source_sha: str, targets: list[str], options: dict, limits,
              toolchains: dict) -> str:
    from ..paths import sha256_file
    from ..store import run_key
    inputs_sha = None
    if model.inputs:
        if not os.path.isfile(model.inputs):
            raise XcInputError(f"inputs {os.path.basename(model.inputs)}: no such file (accepted: an .npz written by numpy.savez)")
        inputs_sha = sha256_file(model.inputs)
    return run_key(kind="batch", source=source_sha, npz=inputs_sha, targets=list(targets), options=options,
                   shapes=sorted(model.shape), dims=sorted(model.dim), values=sorted(model.value),
                   ranges=sorted(model.range), limits=asdict(limits), toolchains=toolchains)
