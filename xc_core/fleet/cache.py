"""When a batch may take a model's cells from the run store instead of compiling again.

A run's key covers the source's content, the inputs and their flags, the targets with their options, the limits,
xc's version and the toolchains' versions (a new onnxruntime compiles differently, so its runs are not reused).
Each target of a batch's run has a cell key too — the same parts with only that target and its options — kept in
the run's report (run.cell_keys) and listed by the store, so a batch that adds a target to a manifest compiles only
that target and takes the others' cells from the runs that made them. A target's cell does not depend on the
other targets of its run: the reference it drifts against is chosen by the source alone."""
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


def _parts(model: FleetModel, source_sha: str, limits, toolchains: dict) -> dict:
    from ..paths import sha256_file
    inputs_sha = None
    if model.inputs:
        if not os.path.isfile(model.inputs):
            raise XcInputError(f"inputs {os.path.basename(model.inputs)}: no such file (accepted: an .npz written by "
                               "numpy.savez)")
        inputs_sha = sha256_file(model.inputs)
    return {"source": source_sha, "npz": inputs_sha, "shapes": sorted(model.shape), "dims": sorted(model.dim),
            "values": sorted(model.value), "ranges": sorted(model.range), "limits": asdict(limits),
            "toolchains": toolchains}


def model_key(model: FleetModel, source_sha: str, targets: list[str], options: dict, limits,
              toolchains: dict) -> str:
    """The key of the model's run for exactly these targets."""
    from ..store import run_key
    return run_key(kind="batch", targets=list(targets), options=options,
                   **_parts(model, source_sha, limits, toolchains))


def target_identities(targets: list[str], options: dict) -> dict[str, str]:
    """Each column of the batch (a target as --targets names it: 'ort-cpu', 'ort-cpu[level=basic]') → the identity
    it runs as for this model, its options included ('openvino-cpu[inference_precision=f32]')."""
    from ..targets import make_targets
    return {t: make_targets([t], options)[0].identity for t in targets}


def cell_keys(model: FleetModel, source_sha: str, identities: dict[str, str], limits,
              toolchains: dict) -> dict[str, str]:
    """column → the key of that one target's cell for this model (by the identity it runs as)."""
    from ..store import run_key
    parts = _parts(model, source_sha, limits, toolchains)
    return {column: run_key(kind="batch-cell", target=identity, **parts) for column, identity in identities.items()}
