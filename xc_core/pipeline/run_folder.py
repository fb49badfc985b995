"""The run folder's files as the steps read and write them (the folder: pipeline/plan.py): the captured model as
captured.json (+ the ExportedProgram), the inputs, the ONNX → PyTorch route's record. What a worker rebuilds its
captured model from, so nothing but files and JSON crosses between processes.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict

from ..capture import Captured
from ..ir import Graph
from ..limits import Limits
from ..sources.spec import InputSpec, Source
from .plan import CAPTURE_DIR, CAPTURED_FILE, INPUTS_FILE, ROUTE_FILE


def read_feeds(run_dir: str) -> dict:
    import numpy as np
    with np.load(os.path.join(run_dir, INPUTS_FILE), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def save_route(record: dict, run_dir: str) -> None:
    from ..paths import write_json_atomic
    write_json_atomic(os.path.join(run_dir, CAPTURE_DIR, ROUTE_FILE), record)


def save_captured(captured: Captured, folder: str, save_program: bool = True) -> None:
    """captured.json (and the ExportedProgram beside it, unless `save_program` is False: it is on disk already)."""
    os.makedirs(folder, exist_ok=True)
    ep_file = None
    if captured.exported_program is not None:
        ep_file = "exported_program.pt2"
        if save_program:
            import torch
            torch.export.save(captured.exported_program, os.path.join(folder, ep_file))
    data = {
        "source": {**captured.source.to_dict(), "inputs": [asdict(s) for s in captured.source.inputs],
                   "module": captured.source.module is not None},
        "onnx_path": captured.onnx_path,
        "onnx_graph": captured.onnx_graph.to_dict() if captured.onnx_graph is not None else None,
        "before": None if captured.before is captured.onnx_graph else captured.before.to_dict(),
        "output_names": list(captured.output_names),
        "output_labels": list(captured.output_labels),
        "timings": dict(captured.timings),
        "notes": list(captured.notes),
        "onnx_error": captured.onnx_error,
        "tflite_path": captured.tflite_path,
        "exported_program": ep_file,
        "weights": captured.weights,
    }
    tmp = os.path.join(folder, CAPTURED_FILE + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(data, separators=(",", ":")))
    os.replace(tmp, os.path.join(folder, CAPTURED_FILE))


def _read(run_dir: str) -> dict:
    with open(os.path.join(run_dir, CAPTURE_DIR, CAPTURED_FILE)) as f:
        return json.load(f)


def captured_summary(run_dir: str) -> Captured:
    """The captured model from the run folder: graphs, names, inputs, the ONNX and ExportedProgram files —
    everything but a live source (no module, Core ML program or OpenVINO model)."""
    data = _read(run_dir)
    s = data["source"]
    src = Source(kind=s["kind"], name=s["name"], sha256=s["sha256"], inputs=_specs(s["inputs"]),
                 notes=list(s["notes"]), metadata=s.get("metadata") or {},
                 constant_inputs=s.get("constant_inputs") or {})
    cap = _captured(src, data, run_dir)
    if data["exported_program"]:
        cap.exported_program_file = os.path.join(run_dir, CAPTURE_DIR, data["exported_program"])
    return cap


def with_live_source(cap: Captured, spec: str, loader_shapes, limits: Limits) -> Captured:
    """The same captured model with its source loaded again from its spec (through the same safe loaders),
    with the inputs `prepare` resolved."""
    from ..sources import load_source
    src = load_source(spec, loader_shapes, limits)
    src.inputs = list(cap.source.inputs)
    cap.source = src
    if src.kind == "openvino-ir":
        cap.ir_path = src.openvino_xml
    return cap


def _captured(src: Source, data: dict, run_dir: str) -> Captured:
    onnx_graph = Graph.from_dict(data["onnx_graph"]) if data["onnx_graph"] is not None else None
    before = Graph.from_dict(data["before"]) if data["before"] is not None else onnx_graph
    return Captured(src, data["onnx_path"], onnx_graph, before, data["output_names"],
                    timings=data["timings"], notes=data["notes"], onnx_error=data.get("onnx_error"),
                    output_labels=data.get("output_labels") or [], onnx_route=_read_route(run_dir),
                    tflite_path=data.get("tflite_path"), weights=data.get("weights"))


def _read_route(run_dir: str) -> dict | None:
    path = os.path.join(run_dir, CAPTURE_DIR, ROUTE_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _specs(items: list[dict]) -> list[InputSpec]:
    return [InputSpec(**{**d, "shape": list(d["shape"]), "dim_names": tuple(d.get("dim_names") or ())})
            for d in items]
