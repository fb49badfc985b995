"""The keys a stored run is found by: one recipe, whoever made the run (`xc analyze`, `xc batch`, the dashboard).

A run answers for each of its targets alone. A *cell key* names one target's result: the source's content (never
its path or a sample's name alone), the inputs file's content and the input edits (shapes, dims, values, ranges;
an edit left empty is the same as one not given), that target with its options (its identity, as the report names
it), the limits that change what xc does (xc_core.limits), xc's version and the toolchains' versions (a new
onnxruntime compiles differently). A target's cell does not depend on the other targets of its run: the reference
it drifts against is chosen by the source alone.

The *run key* (the store's id of a run) is made of its cell keys in order and the worker limits (time and memory
per target), so the same request under the same limits is the same run whichever entry point asks, and a timeout
raised in the dashboard analyses again. Every run lists its cell keys (report run.cell_keys, and the store's
summary), so a batch takes one model × one target from a multi-target CLI or dashboard run, and `--reuse` finds a
run of exactly its targets made with other worker limits. A cell that a worker limit stopped is not offered to
other requests (store.run_summary leaves it out): under a longer timeout it may well finish.

Runs stored by an older xc keep their keys; a new key simply does not match them (KEY_FORMAT is part of every key).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import asdict

from .errors import XcInputError

KEY_FORMAT = 2

# The distributions whose version changes what a target compiles or how a model is captured (read from the
# installed metadata: nothing is imported).
TOOLCHAINS = ("torch", "numpy", "onnx", "onnxscript", "onnxruntime", "openvino", "coremltools", "executorch",
              "coreai-torch", "coreai-core", "litert-torch", "ai-edge-litert", "ai-edge-quantizer", "onnx2torch")

# How a worker reports a target it stopped (xc_core/worker.py): "exceeded 300 s in compile", "exceeded the 4 GiB
# memory limit …".
_STOPPED_BY_LIMIT = re.compile(r"^exceeded (the [\d.]+ GiB memory limit|[\d.]+ s\b)")


@functools.lru_cache(maxsize=1)
def toolchain_versions() -> dict[str, str | None]:
    """Read once per process: the dashboard computes a key on every click."""
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for dist in TOOLCHAINS:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


# -- the source's content ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def _sample_digest(name: str) -> str:
    from .sources.pytorch import load_sample
    return load_sample(name).sha256       # the name and the weights, as the report's source.sha256


def _onnx_data_locations(model_bytes: bytes) -> list[str] | None:
    """The external-data files an ONNX model names (base names), read without its data; None when the bytes are
    not an ONNX model this onnx reads."""
    try:
        import onnx
        from onnx.external_data_helper import _get_all_tensors
        model = onnx.load_from_string(model_bytes)      # from bytes, external data is never read
    except Exception:  # noqa: BLE001 — not an ONNX model this onnx reads (its analysis says why)
        return None
    if not model.HasField("graph"):     # protobuf reads many byte strings as an empty message: not a model
        return None
    locations = set()
    for t in _get_all_tensors(model):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in t.external_data if e.key == "location"), None)
            if location:
                locations.add(os.path.basename(location.replace("\\", "/")))
    return sorted(locations)


def _with_data(model_sha: str, data_shas: dict[str, str | None]) -> str:
    """A model with external data: the model's hash and each data file's (by the name the model uses for it)."""
    if not data_shas:
        return model_sha
    text = json.dumps({"model": model_sha, "data": data_shas}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def source_digest(source: str) -> str:
    """The content hash a key names a source by: `sample:NAME` or a model file (an ONNX model's external-data
    files beside it count too: a changed data file is another model). Raises XcInputError for a file that is not
    there."""
    if source.startswith("sample:"):
        return _sample_digest(source.split(":", 1)[1])
    if not os.path.isfile(source):
        raise XcInputError(f"{os.path.basename(source)}: no such file (accepted: a model file or sample:NAME)")
    from .paths import sha256_file
    model_sha = sha256_file(source)
    if not source.lower().endswith(".onnx"):
        return model_sha
    with open(source, "rb") as f:
        locations = _onnx_data_locations(f.read()) or []
    folder = os.path.dirname(os.path.abspath(source))
    return _with_data(model_sha, {name: sha256_file(os.path.join(folder, name))
                                  if os.path.isfile(os.path.join(folder, name)) else None for name in locations})


def upload_digest(model_file: str, files: dict[str, bytes]) -> str:
    """source_digest of an upload (files by base name): the same hash as the model file on disk with its data
    files beside it, so a dashboard upload and a CLI run of that file share their keys."""
    model = files[model_file]
    model_sha = hashlib.sha256(model).hexdigest()
    if not model_file.lower().endswith(".onnx"):
        return model_sha
    locations = _onnx_data_locations(model)
    if locations is None:       # unreadable here: every file uploaded with it counts (the analysis will say why)
        locations = sorted(set(files) - {model_file})
    return _with_data(model_sha, {name: hashlib.sha256(files[name]).hexdigest() if name in files else None
                                  for name in locations})


def inputs_digest(path: str | None) -> str | None:
    """An inputs .npz by content; None without one."""
    if not path:
        return None
    if not os.path.isfile(path):
        raise XcInputError(f"inputs {os.path.basename(path)}: no such file (accepted: an .npz written by numpy.savez)")
    from .paths import sha256_file
    return sha256_file(path)


# -- keys -----------------------------------------------------------------------------------------------------------
def request_parts(source_sha: str, inputs_sha: str | None = None, *, shapes=None, dims=None, values=None,
                  ranges=None, limits=None, toolchains: dict | None = None, dataset: dict | None = None) -> dict:
    """What every cell of one request shares, in one normal form: edits as analyze() takes them (parsed flags or
    the dashboard's panel), numbers as numbers whatever their type, empty edits dropped, every limit written out."""
    from .limits import Limits
    limits = limits if limits is not None else Limits.from_env()
    edits = {}
    if shapes:
        edits["shapes"] = {str(n): [[int(d) for d in dims_], dtype or None] for n, (dims_, dtype) in shapes.items()}
    if dims:
        edits["dims"] = {str(n): int(v) for n, v in dims.items()}
    if values:
        edits["values"] = {str(n): float(v) for n, v in values.items()}
    if ranges:
        edits["ranges"] = {str(n): [float(lo), float(hi)] for n, (lo, hi) in ranges.items()}
    parts = {"format": KEY_FORMAT, "source": source_sha, "inputs": inputs_sha, "edits": edits,
             "limits": {k: float(v) for k, v in asdict(limits).items()},
             "toolchains": toolchain_versions() if toolchains is None else toolchains}
    if dataset:         # --data (inputs/dataset.dataset_key): a run without it is another run
        parts["dataset"] = dataset
    return parts


def run_key(**parts) -> str:
    """A run's identity: everything that changes its result (source content, inputs, targets, options, edits,
    limits, xc's version)."""
    from . import __version__
    text = json.dumps({**parts, "xc_version": __version__}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def target_identities(targets: list[str], options: dict | None) -> dict[str, str]:
    """Each target as asked for (an id or a variant: 'ort-cpu', 'ort-cpu[level=basic]') → the identity it runs as,
    its options included, however they were given ('openvino-cpu[inference_precision=f32]'). Two that end as one
    identity are one cell."""
    from .targets import make_targets
    return {t: make_targets([t], options or {})[0].identity for t in targets}


def cell_keys(parts: dict, targets: list[str], options: dict | None) -> dict[str, str]:
    """identity → the key of that target's cell, in the order asked (an identity asked twice is one cell)."""
    out: dict[str, str] = {}
    for identity in target_identities(targets, options).values():
        out.setdefault(identity, run_key(kind="cell", target=identity, **parts))
    return out


def run_key_of(cells: dict[str, str], worker_limits) -> str:
    """The key of the run made of these cells under these worker limits (xc_core.worker.WorkerLimits)."""
    limits = {k: float(v) for k, v in worker_limits.to_dict().items()}
    return run_key(format=KEY_FORMAT, kind="run", cells=list(cells.values()), worker_limits=limits)


def reusable_cells(report: dict) -> dict[str, str]:
    """The cells a stored run offers to other requests: its cell keys, less the targets a worker limit stopped."""
    keys = (report.get("run") or {}).get("cell_keys")
    if not isinstance(keys, dict):
        return {}
    targets = report.get("targets") or {}
    out = {}
    for identity, key in keys.items():
        result = targets.get(identity) if isinstance(targets, dict) else None
        error = (result or {}).get("error") if isinstance(result, dict) else None
        if isinstance(error, str) and _STOPPED_BY_LIMIT.match(error):
            continue
        out[str(identity)] = str(key)
    return out
