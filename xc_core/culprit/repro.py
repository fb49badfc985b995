"""The repro bundle of a culprit: the smallest sub-model that reproduces it, in the target's own input format, with
its inputs, the reference's outputs, what the target gave, a script that runs it with the plain toolchain (no xc)
and a bug report naming the toolchain's tracker.

    repro/
      io.json            the target, its options, input and output names in order, the ops (data, never code)
      model.pt2          the sub-program (torch.export): what the PyTorch-side toolchains were given
      model.onnx         what an ONNX-consuming target was given (ORT, OpenVINO)
      compiled/          every file the target wrote compiling it (.tflite, .pte, .aimodel, .mlpackage, …)
      inputs.npz         in_0 …: the reference's values at the sub-model's inputs
      expected.npz       out_0 …: the fp32 reference's values at its outputs
      observed.npz       out_0 …: what the target gave when xc ran it
      run_repro.py       the standalone script (culprit/repro_scripts.py), where this host can run the target
      BUG_REPORT.md      what happens, the figures, versions, where to file it
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np

from .regions import export_region, region_program, to_numpy

SCRIPT = "run_repro.py"
REPORT = "BUG_REPORT.md"


def write_bundle(folder: str, rel_folder: str, search, culprit: dict, window: dict | None, trial_folder: str | None,
                 identity: str, target_id: str, options: dict, evidence: str | None = None) -> dict:
    """Write the bundle of `culprit` (found by `search`, a culprit/search.Search) into `folder`; returns the
    block's `repro` entry (paths relative to the run folder)."""
    from . import repro_scripts
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    first, last = culprit["first"], culprit["last"]
    region = region_program(search.ep, search.ops[first:last + 1], search.values, cut_every_edge=False)
    import torch
    torch.export.save(export_region(region, search.values), os.path.join(folder, "model.pt2"))
    observed = search.outputs.get((first, last + 1), {})
    out_names = [f"out_{i}" for i in range(len(region.outputs))]
    _savez(os.path.join(folder, "inputs.npz"), region.feeds(search.values))
    _savez(os.path.join(folder, "expected.npz"),
           {k: to_numpy(search.values[v]) for k, v in zip(out_names, region.outputs)})
    _savez(os.path.join(folder, "observed.npz"),
           {k: observed[v] for k, v in zip(out_names, region.outputs) if v in observed})
    onnx_outputs = None
    if trial_folder:
        onnx = os.path.join(trial_folder, "capture", "model.onnx")
        if os.path.isfile(onnx):
            shutil.copyfile(onnx, os.path.join(folder, "model.onnx"))
            onnx_outputs = _onnx_outputs(onnx)
        compiled = os.path.join(trial_folder, "target")
        if os.path.isdir(compiled):
            shutil.copytree(compiled, os.path.join(folder, "compiled"), symlinks=False,
                            ignore=shutil.ignore_patterns("tmp*", "__pycache__"))
    io = {"target": target_id, "identity": identity, "options": dict(options), "inputs": region.input_names,
          "outputs": out_names, "onnx_outputs": onnx_outputs, "ops": list(culprit["ops"]),
          "op_types": list(culprit.get("op_types") or [])}
    with open(os.path.join(folder, "io.json"), "w") as f:
        json.dump(io, f, indent=1)
    script = repro_scripts.script_for(target_id, dict(options))
    no_script = None
    if script is not None:
        with open(os.path.join(folder, SCRIPT), "w") as f:
            f.write(script)
    else:
        no_script = repro_scripts.no_script_reason(target_id) or f"no standalone script for {target_id} yet"
    tracker = repro_scripts.tracker_for(target_id)
    figures = {"window": window, "baseline": culprit.get("baseline"), "local": culprit.get("local"),
               "explained": culprit.get("explained"), "evidence": evidence}
    with open(os.path.join(folder, REPORT), "w") as f:
        f.write(repro_scripts.bug_report(io, figures, repro_scripts.toolchain_versions(target_id), tracker,
                                         culprit.get("sentence") or ""))
    files = sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, names in os.walk(folder) for n in names)
    return {"folder": rel_folder, "files": files, "script": SCRIPT if script is not None else None,
            "no_script": no_script, "tracker": f"{tracker[0]}: {tracker[1]}" if tracker else None}


def _savez(path: str, arrays: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()})


def _onnx_outputs(path: str) -> list[str]:
    import onnx
    return [o.name for o in onnx.load(path, load_external_data=False).graph.output]
