"""The one façade the CLI and the dashboard call: analyze(source, targets, ...) -> Report (a plain dict)."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import Callable

from . import inputs as inputs_mod
from .capture import capture
from .errors import XcInputError
from .input_shapes import resolve_inputs
from .limits import Limits
from .report.build import build_report, host_info
from .report.schema import validate_report
from .sources import load_source
from .sources.spec import ShapeOverrides, Source
from .targets import ERROR, execute_target, make_target, target_ids

Progress = Callable[[dict], None]


def analyze(source: str | Source, targets: list[str] | None = None, *, inputs_npz: str | None = None,
            shapes: ShapeOverrides | None = None, dims: dict[str, int] | None = None,
            values: dict[str, float] | None = None, ranges: dict[str, tuple[float, float]] | None = None,
            out_dir: str | None = None, target_options: dict[str, dict] | None = None,
            progress: Progress | None = None, limits: Limits | None = None) -> dict:
    """Load, capture, compile for every target, compare, and return the Report.

    Inputs: `inputs_npz` arrays, `shapes` (whole inputs), `dims` (named symbolic dims), `values` (every element of
    an input), `ranges` (integer inputs); every other symbolic dim is picked by name and role and probed on the
    reference (xc_core.input_shapes). Bad input raises XcInputError (one line). A target that fails is an `error`
    entry in the report; the others still complete. With `out_dir`, writes report.json and artifacts/<target>/
    there. `limits` bound every file, archive and input (default: `Limits.from_env()`). Whatever loading
    unpacked is removed when this returns, also on error.
    """
    emit = progress or (lambda event: None)
    targets = list(targets) if targets else target_ids()
    target_options = target_options or {}
    limits = limits or Limits.from_env()
    user_arrays = inputs_mod.read_npz(inputs_npz, limits) if inputs_npz else None
    emit({"stage": "load", "status": "running"})
    owns_source = isinstance(source, str)
    # TorchScript records no shapes at all: its loader needs them (from --shape or the .npz) to know its inputs.
    loader_shapes = {**(inputs_mod.npz_shapes(user_arrays) if user_arrays else {}), **(shapes or {})}
    src = load_source(source, loader_shapes, limits) if owns_source else source
    tmp = None
    try:
        emit({"stage": "inputs", "status": "running"})
        ts_given = set(loader_shapes) if src.kind == "torchscript" else set()
        specs, resolution = resolve_inputs(
            src.inputs, shapes={k: v for k, v in (shapes or {}).items() if k not in ts_given}, dims=dims,
            values=values, ranges=ranges, arrays=user_arrays, probe=reference_probe(src, limits),
            dim_bounds=src.dim_bounds, value_hints=src.value_hints)
        src.inputs = specs
        inputs_mod.check_input_size(src.inputs, limits)
        if user_arrays is not None:
            feeds = inputs_mod.check_npz(user_arrays, src.inputs)
        else:
            feeds = inputs_mod.random_inputs(src.inputs)
        inputs_info = {"origin": "npz" if user_arrays is not None else "seeded-random", "seed": inputs_mod.SEED,
                       "distribution": "float: standard normal; int: uniform in each input's [low, high)",
                       "resolution": resolution}
        if inputs_npz:
            inputs_info["file"] = os.path.basename(inputs_npz)
        emit({"stage": "inputs", "status": "done", "resolution": resolution})
        emit({"stage": "load", "status": "done", "source": src.name})

        if out_dir is None:
            tmp = out_dir = tempfile.mkdtemp(prefix="xc-")
        return _compile_and_compare(src, feeds, inputs_info, targets, target_options, out_dir, bool(tmp), emit)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if owns_source:
            src.close()


def _compile_and_compare(src: Source, feeds: dict, inputs_info: dict, targets: list[str],
                         target_options: dict[str, dict], out_dir: str, temporary: bool, emit: Progress) -> dict:
    artifacts = os.path.join(out_dir, "artifacts")
    os.makedirs(artifacts, exist_ok=True)
    emit({"stage": "capture", "status": "running"})
    t0 = time.perf_counter()
    captured = capture(src, os.path.join(artifacts, "capture"), feeds)
    emit({"stage": "capture", "status": "done", "seconds": time.perf_counter() - t0})

    from .analysis.layer_drift import module_boundaries
    boundaries = module_boundaries(captured.before)
    probes = [b["source_op"] for b in boundaries]
    reference_id = ("torch" if src.module is not None else "onnx-reference" if captured.onnx_path else None)
    planned = ([reference_id] if reference_id else []) + [t for t in targets if t != reference_id]
    results = []
    reference = None
    for i, tid in enumerate(planned):
        emit({"stage": "target", "target": tid, "status": "running", "index": i, "total": len(planned)})
        target = make_target(tid, **target_options.get(tid, {}))
        result = execute_target(target, captured, feeds, os.path.join(artifacts, tid), probes=probes)
        emit({"stage": "target", "target": tid, "status": result.status, "error": result.error,
              "index": i + 1, "total": len(planned)})
        if tid == reference_id:
            reference = result
        else:
            results.append(result)
    report = build_report(src, captured, inputs_info, reference, results, host_info(), boundaries)
    report["artifacts_dir"] = None if temporary else os.path.abspath(artifacts)
    validate_report(report)
    if not temporary:
        with open(os.path.join(out_dir, "report.json"), "w") as f:
            json.dump(report, f, indent=1)
    emit({"stage": "report", "status": "done"})
    return report


def reference_probe(src: Source, limits: Limits):
    """A function that runs the source's reference on candidate input specs: None if it runs, else why not (one
    line). None when there is nothing to probe with (a compiled Core ML model)."""
    from .errors import summarize_error
    if src.kind == "onnx" and src.path:
        session = {}

        def probe(specs):
            if inputs_mod.input_bytes(specs) > limits.bytes("max_input_mb"):
                return "the inputs would exceed the input-size limit"
            try:
                from .targets.ort_common import make_session, run_session
                if "s" not in session:
                    session["s"] = make_session(src.path, "ORT_DISABLE_ALL")
                run_session(session["s"], inputs_mod.random_inputs(specs))
                return None
            except Exception as e:  # noqa: BLE001 — a failure here is the answer to the probe
                return summarize_error(str(e), 240) or type(e).__name__
        return probe
    if src.module is not None and src.kind != "torchscript":
        def probe(specs):
            import torch
            if inputs_mod.input_bytes(specs) > limits.bytes("max_input_mb"):
                return "the inputs would exceed the input-size limit"
            feeds = inputs_mod.random_inputs(specs)
            try:
                with torch.no_grad():
                    src.module(*[torch.from_numpy(feeds[s.name]) for s in specs])
                return None
            except Exception as e:  # noqa: BLE001
                return summarize_error(str(e), 240) or type(e).__name__
        return probe
    return None


def failed_targets(report: dict) -> list[str]:
    return [t for t, b in report["targets"].items() if b["status"] == ERROR]


__all__ = ["analyze", "failed_targets", "XcInputError"]
